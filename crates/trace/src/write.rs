//! A simulated run as an XSpace that xprof opens like a TPU capture: one
//! `/device:TPU:N` plane per device with the chip's peak rates, lines
//! `Steps`, `XLA Modules`, `XLA Ops` (TensorCore), `Async XLA Ops` (ICI and
//! DMA transfers) and the `HBM bytes in use` counter, per-op cost stats on
//! each op's event metadata, plus `/host:metadata` and `Task Environment`.

use crate::xplane::XStatMetadata;
use crate::xplane::{
    x_event, x_stat, CoreDetails, MemoryAccessBreakdown, MemoryAccessed, XEvent, XEventMetadata,
    XLine, XPlane, XSpace, XStat,
};
use crate::TraceError;
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tpusim_arch::{Chip, MatmulDtype};
use tpusim_hlo::{InstrId, Module, Opcode};
use tpusim_perf::{category, op_name_path, op_time, Category, Lane, MemoryProfile, Schedule};

/// The program id every simulated module gets (xprof keys ops by program).
pub const PROGRAM_ID: i64 = 1;

/// One simulated device.
pub struct SimulatedDevice<'a> {
    /// The N of `/device:TPU:N`.
    pub ordinal: u32,
    pub schedule: &'a Schedule,
    pub memory: Option<&'a MemoryProfile>,
}

/// What [`write_xspace`] writes.
pub struct SimulatedRun<'a> {
    /// The module as passed to `tpusim_perf::schedule` (events index
    /// `schedule.module(module)`).
    pub module: &'a Module,
    pub chip: &'a Chip,
    pub devices: Vec<SimulatedDevice<'a>>,
    /// Host name: the file is `<host>.xplane.pb`.
    pub host: String,
    /// Steps to lay out back to back (each the whole schedule); at least 1.
    pub steps: u32,
    /// Profile start, ns since the Unix epoch; 0 for an untimed run.
    pub start_ns: u64,
}

/// Line ids xprof knows for TPU components (`tpu_component.h`).
const STEPS_LINE: i64 = 1;
const MODULES_LINE: i64 = 2;
const OPS_LINE: i64 = 3;
const ASYNC_OPS_LINE: i64 = 4;
const COUNTERS_LINE: i64 = 100;

/// Builds a plane with interned stat names.
struct PlaneBuilder {
    plane: XPlane,
    stat_ids: HashMap<String, i64>,
}

impl PlaneBuilder {
    fn new(name: &str) -> PlaneBuilder {
        PlaneBuilder {
            plane: XPlane {
                name: name.to_string(),
                ..XPlane::default()
            },
            stat_ids: HashMap::new(),
        }
    }

    fn stat_id(&mut self, name: &str) -> i64 {
        if let Some(&id) = self.stat_ids.get(name) {
            return id;
        }
        let id = self.stat_ids.len() as i64 + 1;
        self.stat_ids.insert(name.to_string(), id);
        self.plane.stat_metadata.insert(
            id,
            XStatMetadata {
                id,
                name: name.to_string(),
                description: String::new(),
            },
        );
        id
    }

    fn stat(&mut self, name: &str, v: x_stat::Value) -> XStat {
        XStat {
            metadata_id: self.stat_id(name),
            value: Some(v),
        }
    }

    fn event_metadata(&mut self, id: i64, name: &str, stats: Vec<XStat>) {
        self.plane.event_metadata.insert(
            id,
            XEventMetadata {
                id,
                name: name.to_string(),
                display_name: name.to_string(),
                stats,
                ..XEventMetadata::default()
            },
        );
    }
}

fn ps(seconds: f64) -> i64 {
    (seconds * 1e12).round().max(0.0) as i64
}

/// An event from `start_s` for `dur_s`; the end is rounded, not the
/// duration, so back-to-back ops stay back to back in picoseconds.
fn event(metadata_id: i64, start_s: f64, dur_s: f64, stats: Vec<XStat>) -> XEvent {
    let start = ps(start_s);
    XEvent {
        metadata_id,
        data: Some(x_event::Data::OffsetPs(start)),
        duration_ps: (ps(start_s + dur_s) - start).max(0),
        stats,
    }
}

fn line(id: i64, name: &str, events: Vec<XEvent>) -> XLine {
    XLine {
        id,
        display_id: id,
        name: name.to_string(),
        display_name: name.to_string(),
        events,
        ..XLine::default()
    }
}

/// The category xprof shows for an op (its TPU `hlo_category` names).
pub fn hlo_category(m: &Module, id: InstrId) -> &'static str {
    let ins = m.instr(id);
    let fusion = ins.opcode == Opcode::Fusion;
    match (category(m, id), fusion) {
        (Category::Matmul | Category::Convolution, true) => "convolution fusion",
        (Category::Matmul | Category::Convolution, false) => "convolution",
        (Category::Collective, _) => collective_category(m, id),
        (Category::DataMovement, true) => "data formatting",
        (Category::DataMovement, false) => "data formatting",
        (Category::Reduction, true) => "loop fusion",
        (Category::Reduction, false) => "reduce",
        (Category::Elementwise, true) => "loop fusion",
        (Category::Elementwise, false) => "non-fusion elementwise",
        (Category::Other, _) => "other",
    }
}

/// A collective's category by the collective it is or (for async halves and
/// `async-start`/`-done` wrappers) carries out: `all-gather-done` and an
/// `async-done` of a reduce-scatter count as `all-gather`, `reduce-scatter`.
fn collective_category(m: &Module, id: InstrId) -> &'static str {
    let ins = m.instr(id);
    let wrapped = match ins.opcode {
        Opcode::AsyncStart | Opcode::AsyncUpdate | Opcode::AsyncDone => {
            ins.async_sugar.or_else(|| m.async_wrapped_opcode(id))
        }
        other => Some(other),
    };
    let name = wrapped.map_or("", Opcode::name);
    let base = name
        .strip_suffix("-start")
        .or_else(|| name.strip_suffix("-done"))
        .or_else(|| name.strip_suffix("-update"))
        .unwrap_or(name);
    match base {
        "all-reduce" => "all-reduce",
        "all-gather" => "all-gather",
        "reduce-scatter" => "reduce-scatter",
        "all-to-all" | "ragged-all-to-all" => "all-to-all",
        "collective-permute" => "collective-permute",
        "collective-broadcast" => "collective-broadcast",
        _ => "collective",
    }
}

/// The XSpace of a simulated run.
pub fn build_xspace(run: &SimulatedRun) -> XSpace {
    let mut planes = Vec::new();
    let module_name = format!("{}({PROGRAM_ID})", run.module.name);
    let mut longest = 0.0f64;
    for d in &run.devices {
        planes.push(device_plane(run, d, &module_name));
        longest = longest.max(d.schedule.step_s * f64::from(run.steps.max(1)));
    }
    planes.push(host_plane(run));
    planes.push(metadata_plane(run, &module_name));
    planes.push(task_plane(run, longest));
    XSpace {
        planes,
        hostnames: vec![run.host.clone()],
        ..XSpace::default()
    }
}

/// Which core the plane of device `ordinal` is: one TensorCore per device,
/// the devices numbered as chips of the one simulated host.
fn core_details(run: &SimulatedRun, ordinal: u32) -> CoreDetails {
    CoreDetails {
        hostname: run.host.clone(),
        device_ordinal: ordinal,
        core_num: 0,
        local_chip_id: ordinal,
        global_chip_id: ordinal,
        global_core_id: ordinal,
        is_sparse_core: false,
    }
}

fn device_plane(run: &SimulatedRun, d: &SimulatedDevice, module_name: &str) -> XPlane {
    let chip = run.chip;
    let s = d.schedule;
    let m = s.module(run.module);
    let steps = run.steps.max(1);
    let mut p = PlaneBuilder::new(&format!("/device:TPU:{}", d.ordinal));
    p.plane.id = i64::from(d.ordinal);
    let total = s.step_s * f64::from(steps);
    let plane_stats = vec![
        p.stat(
            "device_type_string",
            x_stat::Value::StrValue(chip.name.clone()),
        ),
        p.stat(
            "peak_teraflops_per_second",
            x_stat::Value::DoubleValue(chip.peak_flops(MatmulDtype::Bf16) / 1e12),
        ),
        p.stat(
            "peak_hbm_bw_gigabytes_per_second",
            x_stat::Value::DoubleValue(chip.memory.hbm_bandwidth_bytes_per_s / 1e9),
        ),
        p.stat(
            "memory_size",
            x_stat::Value::Uint64Value(chip.memory.hbm_bytes),
        ),
        p.stat(
            "memory_bandwidth",
            x_stat::Value::Uint64Value(chip.memory.hbm_bandwidth_bytes_per_s as u64),
        ),
        p.stat(
            "total_profile_duration_ps",
            x_stat::Value::Uint64Value(ps(total) as u64),
        ),
        p.stat(
            "core_details",
            x_stat::Value::BytesValue(core_details(run, d.ordinal).encode_to_vec()),
        ),
    ];
    p.plane.stats = plane_stats;

    // Metadata ids: 1 = the module, 2.. = steps, then ops by instruction.
    let module_stats = vec![p.stat("program_id", x_stat::Value::Int64Value(PROGRAM_ID))];
    p.event_metadata(1, module_name, module_stats);
    let step_base = 2;
    for k in 0..steps {
        p.event_metadata(step_base + i64::from(k), &k.to_string(), Vec::new());
    }
    let op_base = step_base + i64::from(steps);
    let counter_id = op_base + m.instrs.len() as i64;
    p.event_metadata(counter_id, "HBM bytes in use", Vec::new());

    let waits = done_waits(m, s);
    let mut defined: HashMap<InstrId, i64> = HashMap::new();
    let mut ops = Vec::new();
    let mut async_ops = Vec::new();
    let mut step_events = Vec::new();
    let mut module_events = Vec::new();
    for k in 0..steps {
        let t0 = s.step_s * f64::from(k);
        let step_stats = vec![
            p.stat("step_num", x_stat::Value::Int64Value(i64::from(k))),
            p.stat("group_id", x_stat::Value::Int64Value(i64::from(k))),
        ];
        step_events.push(event(step_base + i64::from(k), t0, s.step_s, step_stats));
        let mod_stats = vec![
            p.stat("run_id", x_stat::Value::Int64Value(i64::from(k))),
            p.stat("group_id", x_stat::Value::Int64Value(i64::from(k))),
        ];
        module_events.push(event(1, t0, s.step_s, mod_stats));
        for (i, e) in s.events.iter().enumerate() {
            let md = match defined.get(&e.instr) {
                Some(&id) => id,
                None => {
                    let id = op_base + e.instr.index() as i64;
                    let stats = op_stats(&mut p, run, m, e.instr);
                    p.event_metadata(id, &m.instr(e.instr).name, stats);
                    defined.insert(e.instr, id);
                    id
                }
            };
            let group = vec![p.stat("group_id", x_stat::Value::Int64Value(i64::from(k)))];
            if let Some(&(start, _)) = waits.get(&i) {
                // From the end of the op before to the `-done` marker, in
                // the same absolute times those two events use.
                let mut ev = event(md, t0 + start, 0.0, group);
                ev.duration_ps = (ps(t0 + e.start_s) - ps(t0 + start)).max(0);
                ops.push(ev);
                continue;
            }
            let ev = event(md, t0 + e.start_s, e.dur_s, group);
            match e.lane {
                Lane::TensorCore if e.dur_s > 0.0 => ops.push(ev),
                Lane::TensorCore => {}
                // A synchronous collective holds the TensorCore until it
                // ends: a TPU profile shows it as an XLA op (category
                // all-reduce, ...), not as idle time.
                Lane::Ici if e.dur_s > 0.0 && is_sync_collective(m, e.instr) => ops.push(ev),
                Lane::Ici | Lane::Dma => async_ops.push(ev),
            }
        }
    }
    let mut counters = Vec::new();
    if let Some(mem) = d.memory {
        for k in 0..steps {
            let t0 = s.step_s * f64::from(k);
            for pt in &mem.timeline {
                let stats = vec![p.stat("bytes_in_use", x_stat::Value::Uint64Value(pt.bytes))];
                counters.push(event(counter_id, t0 + pt.time_s, 0.0, stats));
            }
        }
    }
    trim_rounding_overlaps(&mut ops);
    let mut lines = vec![
        line(STEPS_LINE, "Steps", step_events),
        line(MODULES_LINE, "XLA Modules", module_events),
        line(OPS_LINE, "XLA Ops", ops),
    ];
    if !async_ops.is_empty() {
        lines.push(line(ASYNC_OPS_LINE, "Async XLA Ops", async_ops));
    }
    if !counters.is_empty() {
        lines.push(line(COUNTERS_LINE, "_counters_", counters));
    }
    p.plane.lines = lines;
    p.plane
}

/// Sorts a line's events by start and trims the overlaps that rounding
/// to picoseconds leaves between back-to-back ops (at most 1 ns): xprof
/// would nest an op under the one it overlaps and lose its time.
fn trim_rounding_overlaps(events: &mut [XEvent]) {
    let start = |e: &XEvent| match e.data {
        Some(x_event::Data::OffsetPs(o)) => o,
        _ => 0,
    };
    events.sort_by_key(start);
    for k in 1..events.len() {
        let next = start(&events[k]);
        let prev = &mut events[k - 1];
        let end = start(prev) + prev.duration_ps;
        if end > next && end - next <= 1000 {
            prev.duration_ps -= end - next;
        }
    }
}

/// The TensorCore's waits at `-done` ops: for each `-done` marker reached
/// while its transfer is still running (an idle gap before it on the
/// TensorCore), event index → (start, duration) of the wait. A TPU profile
/// shows that wait as the `-done` op's own time (exposed communication).
pub fn done_waits(m: &Module, s: &Schedule) -> HashMap<usize, (f64, f64)> {
    // What holds the TensorCore: its own events and synchronous collectives.
    let mut order: Vec<usize> = (0..s.events.len())
        .filter(|&i| {
            let e = &s.events[i];
            e.lane == Lane::TensorCore
                || (e.lane == Lane::Ici && e.dur_s > 0.0 && is_sync_collective(m, e.instr))
        })
        .collect();
    order.sort_by(|&a, &b| {
        s.events[a]
            .start_s
            .total_cmp(&s.events[b].start_s)
            .then(a.cmp(&b))
    });
    let mut busy_until = 0.0f64;
    let mut waits = HashMap::new();
    for i in order {
        let e = &s.events[i];
        if e.dur_s > 0.0 {
            busy_until = busy_until.max(e.start_s + e.dur_s);
        } else if m.instr(e.instr).opcode.name().ends_with("-done") && e.start_s > busy_until {
            // Whole picoseconds only: a rounding-sized gap is no wait.
            if ps(e.start_s) > ps(busy_until) {
                waits.insert(i, (busy_until, e.start_s - busy_until));
            }
            busy_until = e.start_s;
        }
    }
    waits
}

/// A collective that is not one half of an async pair.
pub fn is_sync_collective(m: &Module, id: InstrId) -> bool {
    let name = m.instr(id).opcode.name();
    category(m, id) == Category::Collective
        && !(name.ends_with("-start") || name.ends_with("-done") || name.ends_with("-update"))
}

/// The HBM bytes an op moves, as xprof's op profile and roofline read
/// them: its result written once, the rest of its traffic read.
fn hbm_reads_and_writes(
    ins: &tpusim_hlo::Instruction,
    bytes_accessed: f64,
) -> MemoryAccessBreakdown {
    const READ: i32 = 1;
    const WRITE: i32 = 2;
    const HBM: u64 = 1;
    let total = bytes_accessed.max(0.0).round() as u64;
    let written = ins.shape.byte_size().min(total);
    let access = |operation_type, bytes_accessed| MemoryAccessed {
        operation_type,
        memory_space: HBM,
        bytes_accessed,
    };
    MemoryAccessBreakdown {
        memory_accessed: vec![access(READ, total - written), access(WRITE, written)],
    }
}

/// Per-op stats (on the op's event metadata: they hold for every run).
fn op_stats(p: &mut PlaneBuilder, run: &SimulatedRun, m: &Module, id: InstrId) -> Vec<XStat> {
    let t = op_time(m, run.chip, id);
    let ins = m.instr(id);
    let scope = op_name_path(m, id).join("/");
    let mut stats = vec![
        p.stat("program_id", x_stat::Value::Int64Value(PROGRAM_ID)),
        p.stat(
            "symbol_id",
            x_stat::Value::Int64Value(id.index() as i64 + 1),
        ),
        p.stat(
            "hlo_category",
            x_stat::Value::StrValue(hlo_category(m, id).to_string()),
        ),
        p.stat("flops", x_stat::Value::Uint64Value(t.flops.round() as u64)),
        p.stat(
            "model_flops",
            x_stat::Value::Uint64Value(t.flops.round() as u64),
        ),
        p.stat(
            "bytes_accessed",
            x_stat::Value::Uint64Value(t.bytes_accessed.round() as u64),
        ),
        p.stat(
            "memory_access_breakdown",
            x_stat::Value::BytesValue(hbm_reads_and_writes(ins, t.bytes_accessed).encode_to_vec()),
        ),
        p.stat(
            "hlo_module",
            x_stat::Value::StrValue(run.module.name.clone()),
        ),
        p.stat("hlo_op", x_stat::Value::StrValue(ins.name.clone())),
    ];
    if !scope.is_empty() {
        stats.push(p.stat("tf_op", x_stat::Value::StrValue(scope)));
    }
    if let Some(md) = ins.metadata() {
        if let (Some(f), Some(l)) = (&md.source_file, md.source_line) {
            stats.push(p.stat("source", x_stat::Value::StrValue(format!("{f}:{l}"))));
        }
    }
    stats
}

/// The simulated allocator as `MemoryAllocation` / `MemoryDeallocation`
/// events on the host plane (what xprof's memory_profile reads), one line
/// per device, for the first step. They carry no `tf_op` stat: xprof would
/// count each as a host-side TF op and put most "ops" on the host in the
/// overview's op placement, while every op of the run is on the device.
fn host_plane(run: &SimulatedRun) -> XPlane {
    let mut p = PlaneBuilder::new("/host:CPU");
    p.event_metadata(1, "MemoryAllocation", Vec::new());
    p.event_metadata(2, "MemoryDeallocation", Vec::new());
    let mut lines = Vec::new();
    for d in &run.devices {
        let Some(mem) = d.memory else { continue };
        if mem.allocations.is_empty() {
            continue;
        }
        // (time, is_free, allocation index): frees first at equal times.
        let mut order: Vec<(f64, bool, usize)> = Vec::new();
        for (k, a) in mem.allocations.iter().enumerate() {
            order.push((a.alloc_s, false, k));
            if let Some(f) = a.free_s {
                order.push((f, true, k));
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        let allocator = format!("HBM /device:TPU:{}", d.ordinal);
        let (mut in_use, mut peak) = (0u64, 0u64);
        let mut events = Vec::with_capacity(order.len());
        for (t, free, k) in order {
            let a = &mem.allocations[k];
            let bytes = a.buffer.bytes;
            in_use = if free {
                in_use.saturating_sub(bytes)
            } else {
                in_use + bytes
            };
            peak = peak.max(in_use);
            let stats = vec![
                p.stat("allocator_name", x_stat::Value::StrValue(allocator.clone())),
                p.stat(
                    "device_ordinal",
                    x_stat::Value::Int64Value(i64::from(d.ordinal)),
                ),
                p.stat("bytes_allocated", x_stat::Value::Int64Value(in_use as i64)),
                p.stat("bytes_reserved", x_stat::Value::Int64Value(0)),
                p.stat(
                    "bytes_available",
                    x_stat::Value::Int64Value(mem.capacity_bytes.saturating_sub(in_use) as i64),
                ),
                p.stat("peak_bytes_in_use", x_stat::Value::Int64Value(peak as i64)),
                p.stat("requested_bytes", x_stat::Value::Int64Value(bytes as i64)),
                p.stat("allocation_bytes", x_stat::Value::Int64Value(bytes as i64)),
                p.stat("addr", x_stat::Value::Uint64Value(k as u64 + 1)),
                p.stat("group_id", x_stat::Value::Int64Value(0)),
                p.stat(
                    "region_type",
                    x_stat::Value::StrValue(a.buffer.kind.name().to_string()),
                ),
                p.stat(
                    "data_type",
                    x_stat::Value::Int64Value(tf_dtype(&a.buffer.shape)),
                ),
                p.stat("shape", x_stat::Value::StrValue(a.buffer.shape.clone())),
            ];
            events.push(event(if free { 2 } else { 1 }, t, 0.0, stats));
        }
        lines.push(line(i64::from(d.ordinal) + 1, &allocator, events));
    }
    p.plane.lines = lines;
    let (mxu, hbm) = utilization(run);
    p.plane.stats = vec![
        p.stat(
            "matrix_unit_utilization_percent",
            x_stat::Value::DoubleValue(mxu),
        ),
        p.stat("hbm_utilization_percent", x_stat::Value::DoubleValue(hbm)),
    ];
    p.plane
}

/// What a TPU's performance counters report and xprof's overview page shows
/// (it reads them from the host plane's stats): the MXUs' busy share of the
/// step (each op's MXU time from the model) and HBM traffic over what the
/// HBM could move in the step, in percent, over all devices.
pub fn utilization(run: &SimulatedRun) -> (f64, f64) {
    let (mut mxu_s, mut bytes, mut step_s) = (0.0, 0.0, 0.0);
    for d in &run.devices {
        let m = d.schedule.module(run.module);
        for e in d
            .schedule
            .events
            .iter()
            .filter(|e| e.lane == Lane::TensorCore)
        {
            let t = op_time(m, run.chip, e.instr);
            mxu_s += t.mxu_s;
            bytes += t.bytes_accessed;
        }
        step_s += d.schedule.step_s;
    }
    let bw = run.chip.memory.hbm_bandwidth_bytes_per_s;
    if step_s <= 0.0 || bw <= 0.0 {
        return (0.0, 0.0);
    }
    (
        (100.0 * mxu_s / step_s).min(100.0),
        (100.0 * bytes / (bw * step_s)).min(100.0),
    )
}

/// The TensorFlow `DataType` enum value xprof expects for the element type
/// of `f32[2,3]` (`DT_FLOAT` = 1); 0 (`DT_INVALID`) when there is none.
fn tf_dtype(shape: &str) -> i64 {
    match shape.split('[').next().unwrap_or("") {
        "f32" => 1,
        "f64" => 2,
        "s32" => 3,
        "u8" => 4,
        "s16" => 5,
        "s8" => 6,
        "c64" => 8,
        "s64" => 9,
        "pred" => 10,
        "bf16" => 14,
        "u16" => 17,
        "c128" => 18,
        "f16" => 19,
        "u32" => 22,
        "u64" => 23,
        _ => 0,
    }
}

/// `/host:metadata`: one event metadata per program (id = program id, name =
/// `module(program_id)`) whose `Hlo Proto` stat holds the serialized
/// `xla.HloProto`, as a TPU capture carries it. xprof reads the plane's
/// stats as legacy per-module protos when there are any, so it has none.
fn metadata_plane(run: &SimulatedRun, module_name: &str) -> XPlane {
    let mut p = PlaneBuilder::new("/host:metadata");
    let module = run
        .devices
        .first()
        .map_or(run.module, |d| d.schedule.module(run.module));
    let memory = run.devices.first().and_then(|d| d.memory);
    let proto = crate::hlo_proto::hlo_proto(module, PROGRAM_ID, memory).encode_to_vec();
    let stats = vec![
        p.stat("program_id", x_stat::Value::Int64Value(PROGRAM_ID)),
        p.stat("Hlo Proto", x_stat::Value::BytesValue(proto)),
    ];
    p.event_metadata(PROGRAM_ID, module_name, stats);
    p.plane
}

fn task_plane(run: &SimulatedRun, duration_s: f64) -> XPlane {
    let mut p = PlaneBuilder::new("Task Environment");
    let stop = run.start_ns + (duration_s * 1e9).ceil() as u64;
    p.plane.stats = vec![
        p.stat(
            "tpusim_version",
            x_stat::Value::StrValue(env!("CARGO_PKG_VERSION").to_string()),
        ),
        p.stat(
            "profile_start_time",
            x_stat::Value::Uint64Value(run.start_ns),
        ),
        p.stat("profile_stop_time", x_stat::Value::Uint64Value(stop)),
    ];
    p.plane
}

/// `YYYY_MM_DD_HH_MM_SS` (UTC) of `ns` since the epoch: the run folder name
/// `jax.profiler` uses.
pub fn run_folder_name(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}_{month:02}_{day:02}_{:02}_{:02}_{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Writes `DIR/plugins/profile/<run>/<host>.xplane.pb` (the layout
/// `xprof --logdir DIR` reads) and returns the file's path. `<run>` is
/// `YYYY_MM_DD_HH_MM_SS` of the run's start, or `tpusim` for an untimed run
/// (`start_ns` 0), whose bytes are then the same on every run. An existing
/// file is handled as `existing` says; links are never followed.
pub fn write_xspace(
    dir: &Path,
    run: &SimulatedRun,
    existing: crate::Existing,
) -> Result<PathBuf, TraceError> {
    write_xspace_bytes(dir, &xspace_bytes(run), &run.host, run.start_ns, existing)
}

/// The XSpace of `run` ([`build_xspace`]) encoded as the `.xplane.pb` bytes.
pub fn xspace_bytes(run: &SimulatedRun) -> Vec<u8> {
    build_xspace(run).encode_to_vec()
}

/// [`write_xspace`] for an XSpace already built and encoded (the bytes of
/// [`build_xspace`]'s result) of a run on `host` that started at `start_ns`.
pub fn write_xspace_bytes(
    dir: &Path,
    bytes: &[u8],
    host: &str,
    start_ns: u64,
    existing: crate::Existing,
) -> Result<PathBuf, TraceError> {
    let run_name = match start_ns {
        0 => "tpusim".to_string(),
        ns => run_folder_name(ns),
    };
    std::fs::create_dir_all(dir).map_err(|source| TraceError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let folder = crate::create_dirs_within(dir, &["plugins", "profile", &run_name])?;
    let path = folder.join(format!("{host}.xplane.pb"));
    let mut file = crate::create_file(&path, existing)?;
    std::io::Write::write_all(&mut file, bytes).map_err(|source| TraceError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(offset: i64, dur: i64) -> XEvent {
        XEvent {
            metadata_id: 1,
            data: Some(x_event::Data::OffsetPs(offset)),
            duration_ps: dur,
            stats: Vec::new(),
        }
    }

    #[test]
    fn rounding_overlaps_are_trimmed_and_real_ones_kept() {
        // Out of order; 1 ps of rounding overlap; a real 5 ns overlap.
        let mut events = vec![ev(100, 50), ev(0, 101), ev(150, 10_000), ev(5_150, 10)];
        trim_rounding_overlaps(&mut events);
        let got: Vec<(i64, i64)> = events
            .iter()
            .map(|e| match e.data {
                Some(x_event::Data::OffsetPs(o)) => (o, e.duration_ps),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(got, vec![(0, 100), (100, 50), (150, 10_000), (5_150, 10)]);
    }
}
