//! The Chrome Trace Event Format (JSON) view of a run, for ui.perfetto.dev.
//!
//! Layout, per device (`pid` = device index):
//! - thread 1 "TensorCore": `step 0 > module > named scopes > op` slices,
//!   nested by time containment (Perfetto requires strict nesting, so times
//!   are whole nanoseconds and every parent spans exactly its children);
//! - thread 2 "DMA" and thread 3 "ICI": the transfers on those lanes (a lane
//!   whose transfers overlap gets extra threads, one per concurrent transfer);
//! - thread 4: the zero-length `-start` / `-done` markers of async transfers;
//! - a process counter "HBM in use" (`bytes`);
//! - flow arrows from each async transfer's `-start` through the transfer to
//!   its `-done`.
//!
//! Flows use binding by id (`bind_id`, `flow_out`, `flow_in` on the slices
//! themselves): `-start` and `-done` take no time, and timestamp binding
//! (`ph: s/f`) would attach the arrow to whatever encloses that instant.
//! Perfetto processes events in time order and, at equal times, complete
//! (`X`) slices longest first, so a transfer starting with its marker would
//! be seen before the marker that begins the flow. Transfers are therefore
//! `B`/`E` pairs, which keep file order at equal times, and are written after
//! their marker. Markers get their own thread for the same reason: at equal
//! times Perfetto would nest them inside the op that starts there.
//!
//! Large programs are capped ([`TraceOptions`]); what was left out is stated
//! in the trace's `otherData` and on the step slice.

use crate::scope::{op_name, scope_path};
use crate::{ReportError, Run};
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use tpusim_hlo::{InstrId, Module};
use tpusim_perf::{Event, Lane, OpTime};

/// Limits that keep the trace of a big program loadable.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// Op and transfer slices per device (the schedule's first ones in
    /// issue order); scopes, markers and counters come on top.
    pub max_op_events: usize,
    /// Devices drawn, each as a process (every device of an SPMD program
    /// runs the same schedule).
    pub max_devices: u32,
    /// Total op slices over all devices drawn.
    pub max_total_op_events: usize,
    /// Points of the "HBM in use" counter.
    pub max_counter_points: usize,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            max_op_events: 100_000,
            max_devices: 8,
            max_total_op_events: 200_000,
            max_counter_points: 20_000,
        }
    }
}

/// One trace event. Times are microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cat: String,
    pub ph: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_in: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_out: Option<bool>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
}

/// A whole trace file (the JSON object form).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChromeTrace {
    pub trace_events: Vec<TraceEvent>,
    pub display_time_unit: String,
    /// Free-form strings (generator, caps, what was left out).
    pub other_data: BTreeMap<String, String>,
}

impl ChromeTrace {
    /// Writes the trace as gzipped JSON (`trace.json.gz`).
    pub fn write_gz<W: Write>(&self, w: W) -> Result<(), ReportError> {
        // The JSON writer makes many tiny writes; each call into the
        // encoder prepares a whole output buffer, so they are batched first.
        let gz = GzEncoder::new(std::io::BufWriter::new(w), Compression::default());
        let mut json = std::io::BufWriter::with_capacity(1 << 16, gz);
        serde_json::to_writer(&mut json, self)?;
        let gz = json.into_inner().map_err(|e| e.into_error())?;
        gz.finish()?.flush()?;
        Ok(())
    }

    /// Writes the trace as plain JSON.
    pub fn write_json<W: Write>(&self, w: W) -> Result<(), ReportError> {
        let mut w = std::io::BufWriter::new(w);
        serde_json::to_writer(&mut w, self)?;
        w.flush()?;
        Ok(())
    }
}

const TID_TENSORCORE: u32 = 1;
const TID_DMA: u32 = 2;
const TID_ICI: u32 = 3;
const TID_ASYNC: u32 = 4;
/// Extra threads for overlapping transfers: `base * 100 + k`.
const EXTRA_TID_STRIDE: u32 = 100;
/// Flow ids of device `d` are `d << FLOW_SHIFT | flow`.
const FLOW_SHIFT: u32 = 32;

/// Builds the Chrome trace of `run`.
pub fn chrome_trace(run: &Run, opts: &TraceOptions) -> ChromeTrace {
    let mut device = DeviceTrace::new(run);
    let kept = run.schedule.events.len().min(opts.max_op_events);
    device.build(&run.schedule.events[..kept], opts);
    let dropped = run.schedule.events.len() - kept;

    let devices = run.analysis.devices.max(1);
    let per_device = kept.max(1);
    let budget = u32::try_from(opts.max_total_op_events / per_device).unwrap_or(u32::MAX);
    let shown = devices.min(opts.max_devices).min(budget).max(1);
    let mut trace_events = Vec::with_capacity(device.events.len() * shown as usize);
    for d in 0..shown {
        trace_events.extend(device.events.iter().map(|e| on_device(e, d)));
    }

    let mut other = BTreeMap::new();
    other.insert("generator".into(), "tpusim".into());
    other.insert("module".into(), run.analysis.module.clone());
    other.insert("chip".into(), run.chip.name.clone());
    other.insert("devices".into(), devices.to_string());
    other.insert("devices_shown".into(), shown.to_string());
    other.insert("op_events_per_device".into(), kept.to_string());
    other.insert("op_events_left_out".into(), dropped.to_string());
    other.insert(
        "schedule_truncated".into(),
        run.schedule.truncated.to_string(),
    );
    let notes = caps_note(run, dropped, devices, shown);
    if !notes.is_empty() {
        other.insert("note".into(), notes.join("; "));
    }
    ChromeTrace {
        trace_events,
        display_time_unit: "ns".into(),
        other_data: other,
    }
}

fn caps_note(run: &Run, dropped: usize, devices: u32, shown: u32) -> Vec<String> {
    let mut notes = Vec::new();
    if run.schedule.truncated {
        notes.push(
            "later loop iterations are not drawn (the schedule stopped unrolling loops); \
             the step slice still spans the whole step"
                .to_string(),
        );
    }
    if dropped > 0 {
        notes.push(format!(
            "{dropped} later op events are left out to keep the trace loadable"
        ));
    }
    if shown < devices {
        notes.push(format!(
            "{shown} of {devices} devices drawn; every device runs the same SPMD program"
        ));
    }
    notes
}

/// A copy of a device-0 event for device `d`.
fn on_device(e: &TraceEvent, d: u32) -> TraceEvent {
    let mut e = e.clone();
    e.pid = d;
    if let Some(id) = e.bind_id.as_mut() {
        *id |= u64::from(d) << FLOW_SHIFT;
    }
    if e.ph == "M" && e.name == "process_name" {
        if let Some(Value::String(s)) = e.args.get_mut("name") {
            *s = s.replacen("device 0", &format!("device {d}"), 1);
        }
    }
    if e.ph == "M" && e.name == "process_sort_index" {
        e.args.insert("sort_index".into(), json!(d));
    }
    e
}

/// Whole nanoseconds, so that parents span their children exactly.
fn ns(s: f64) -> i64 {
    if s.is_finite() && s > 0.0 {
        (s * 1e9).round().min(i64::MAX as f64) as i64
    } else {
        0
    }
}

/// An event's start and end in whole nanoseconds.
fn span_ns(e: &Event) -> (i64, i64) {
    let start = ns(e.start_s);
    (start, ns(e.end_s()).max(start))
}

fn us(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

/// What the trace shows of one instruction.
struct OpInfo {
    name: String,
    args: Map<String, Value>,
    scopes: Vec<String>,
}

/// A scope slice still open on the TensorCore thread.
struct OpenScope {
    name: String,
    /// Index of its event (its duration is set when it closes).
    event: usize,
    start: i64,
    end: i64,
}

/// The events of device 0.
struct DeviceTrace<'a> {
    run: &'a Run<'a>,
    m: &'a Module,
    info: HashMap<InstrId, OpInfo>,
    events: Vec<TraceEvent>,
}

impl<'a> DeviceTrace<'a> {
    fn new(run: &'a Run<'a>) -> Self {
        DeviceTrace {
            run,
            m: run.timed_module(),
            info: HashMap::new(),
            events: Vec::new(),
        }
    }

    fn build(&mut self, events: &[Event], opts: &TraceOptions) {
        let tids = self.assign_threads(events);
        self.metadata(&tids);
        let step_end = events
            .iter()
            .map(|e| span_ns(e).1)
            .chain([ns(self.run.schedule.step_s)])
            .max()
            .unwrap_or(0);
        let a = self.run.analysis;
        let mut step_args = Map::new();
        step_args.insert("step_time_s".into(), json!(self.run.schedule.step_s));
        step_args.insert("truncated".into(), json!(self.run.schedule.truncated));
        self.slice("step 0", "step", TID_TENSORCORE, 0, step_end, step_args);
        let mut module_args = Map::new();
        module_args.insert("chip".into(), json!(self.run.chip.name));
        module_args.insert("flops".into(), json!(a.flops));
        module_args.insert("bytes_accessed".into(), json!(a.bytes_accessed));
        module_args.insert("mfu".into(), json!(a.mfu));
        self.slice(
            &a.module,
            "module",
            TID_TENSORCORE,
            0,
            step_end,
            module_args,
        );

        let mut open: Vec<OpenScope> = Vec::new();
        let mut by_flow: BTreeMap<u32, Vec<(i64, usize)>> = BTreeMap::new();
        let mut order: Vec<usize> = (0..events.len()).collect();
        order.sort_by_key(|&k| (ns(events[k].start_s), lane_rank(events[k].lane)));
        // End of the last TensorCore op: its ops run one after another, and
        // must not overlap even if the model's clock did.
        let mut tc_end = 0;
        for k in order {
            let e = &events[k];
            // Both ends are rounded, not the duration, so that an op starting
            // where the previous one ended starts on the same nanosecond.
            let (mut start, mut end) = span_ns(e);
            let compute = e.lane == Lane::TensorCore && !is_marker(e);
            if compute {
                start = start.max(tc_end);
                end = end.max(start);
                tc_end = end;
                self.enter_scopes(e.instr, start, &mut open);
            }
            let idx = self.op_slice(e, tids[k], start, end);
            if compute {
                for s in &mut open {
                    s.end = s.end.max(end);
                }
            }
            if let Some(f) = e.flow {
                by_flow.entry(f).or_default().push((start, idx));
            }
        }
        self.close_scopes(&mut open, 0);
        self.flows(by_flow);
        if let Some(mem) = self.run.memory {
            self.counter(mem, opts.max_counter_points);
        }
    }

    /// Thread of each event: lanes whose events overlap get extra threads.
    fn assign_threads(&self, events: &[Event]) -> Vec<u32> {
        let mut free_at: HashMap<Lane, Vec<i64>> = HashMap::new();
        let mut tids = vec![TID_TENSORCORE; events.len()];
        let mut order: Vec<usize> = (0..events.len()).collect();
        order.sort_by_key(|&k| ns(events[k].start_s));
        for k in order {
            let e = &events[k];
            let base = lane_tid(e.lane);
            if is_marker(e) {
                tids[k] = TID_ASYNC;
                continue;
            }
            if e.lane == Lane::TensorCore {
                continue;
            }
            let (start, end) = span_ns(e);
            let tracks = free_at.entry(e.lane).or_default();
            let slot = match tracks.iter().position(|&t| t <= start) {
                Some(s) => s,
                None => {
                    tracks.push(0);
                    tracks.len() - 1
                }
            };
            tracks[slot] = end;
            tids[k] = if slot == 0 {
                base
            } else {
                base * EXTRA_TID_STRIDE + slot as u32
            };
        }
        tids
    }

    fn metadata(&mut self, tids: &[u32]) {
        let chip = &self.run.chip.name;
        self.meta(
            "process_name",
            None,
            json!({ "name": format!("device 0 ({chip})") }),
        );
        self.meta("process_sort_index", None, json!({ "sort_index": 0 }));
        let mut threads: Vec<u32> = tids.to_vec();
        threads.push(TID_TENSORCORE);
        threads.sort_unstable();
        threads.dedup();
        for (rank, tid) in threads.into_iter().enumerate() {
            self.meta(
                "thread_name",
                Some(tid),
                json!({ "name": thread_name(tid) }),
            );
            self.meta(
                "thread_sort_index",
                Some(tid),
                json!({ "sort_index": rank }),
            );
        }
    }

    fn meta(&mut self, name: &str, tid: Option<u32>, args: Value) {
        let args = match args {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        self.events.push(TraceEvent {
            name: name.into(),
            cat: String::new(),
            ph: "M".into(),
            pid: 0,
            tid,
            ts: None,
            dur: None,
            bind_id: None,
            flow_in: None,
            flow_out: None,
            args,
        });
    }

    /// Appends an `X` slice and returns its index.
    fn slice(
        &mut self,
        name: &str,
        cat: &str,
        tid: u32,
        start: i64,
        dur: i64,
        args: Map<String, Value>,
    ) -> usize {
        self.events.push(TraceEvent {
            name: name.into(),
            cat: cat.into(),
            ph: "X".into(),
            pid: 0,
            tid: Some(tid),
            ts: Some(us(start)),
            dur: Some(us(dur)),
            bind_id: None,
            flow_in: None,
            flow_out: None,
            args,
        });
        self.events.len() - 1
    }

    /// Closes the scopes `op` is not in and opens those it enters.
    fn enter_scopes(&mut self, op: InstrId, start: i64, open: &mut Vec<OpenScope>) {
        let scopes = self.info(op).scopes.clone();
        let common = open
            .iter()
            .zip(&scopes)
            .take_while(|(o, s)| o.name == **s)
            .count();
        self.close_scopes(open, common);
        for s in &scopes[common..] {
            let event = self.slice(s, "scope", TID_TENSORCORE, start, 0, Map::new());
            open.push(OpenScope {
                name: s.clone(),
                event,
                start,
                end: start,
            });
        }
    }

    fn close_scopes(&mut self, open: &mut Vec<OpenScope>, keep: usize) {
        while open.len() > keep {
            if let Some(s) = open.pop() {
                self.events[s.event].dur = Some(us(s.end - s.start));
            }
        }
    }

    /// The slice of one schedule event: `X` on the TensorCore, a `B`/`E`
    /// pair for a transfer. Returns the index of the event carrying its args.
    fn op_slice(&mut self, e: &Event, tid: u32, start: i64, end: i64) -> usize {
        let info = self.info(e.instr);
        let name = info.name.clone();
        let mut args = info.args.clone();
        if let Some(i) = e.iteration {
            args.insert("loop_iteration".into(), json!(i));
        }
        let cat = match e.lane {
            Lane::TensorCore if is_marker(e) => {
                args.insert(
                    "note".into(),
                    json!("async marker: issues or waits for a transfer"),
                );
                "marker"
            }
            Lane::TensorCore => "op",
            Lane::Dma => "dma",
            Lane::Ici => "ici",
        };
        if e.lane != Lane::TensorCore {
            args.insert("lane".into(), json!(e.lane.name()));
            args.insert("transfer_s".into(), json!(e.dur_s));
        }
        // A `B`/`E` pair of zero length would be parsed `E` first.
        if e.lane == Lane::TensorCore || end == start {
            return self.slice(&name, cat, tid, start, end - start, args);
        }
        let begin = self.instant_like("B", &name, cat, tid, start, args);
        self.instant_like("E", "", "", tid, end, Map::new());
        begin
    }

    /// Appends a `B` or `E` event and returns its index.
    fn instant_like(
        &mut self,
        ph: &str,
        name: &str,
        cat: &str,
        tid: u32,
        ts: i64,
        args: Map<String, Value>,
    ) -> usize {
        self.events.push(TraceEvent {
            name: name.into(),
            cat: cat.into(),
            ph: ph.into(),
            pid: 0,
            tid: Some(tid),
            ts: Some(us(ts)),
            dur: None,
            bind_id: None,
            flow_in: None,
            flow_out: None,
            args,
        });
        self.events.len() - 1
    }

    fn info(&mut self, id: InstrId) -> &OpInfo {
        let (m, chip) = (self.m, self.run.chip);
        self.info.entry(id).or_insert_with(|| {
            let ins = m.instr(id);
            let t: OpTime = tpusim_perf::op_time(m, chip, id);
            let mut args = Map::new();
            args.insert("hlo_op".into(), json!(ins.name));
            args.insert("opcode".into(), json!(ins.opcode.name()));
            args.insert(
                "category".into(),
                json!(tpusim_perf::category(m, id).name()),
            );
            args.insert("flops".into(), json!(t.flops));
            args.insert("bytes_accessed".into(), json!(t.bytes_accessed));
            if t.transcendentals > 0.0 {
                args.insert("transcendentals".into(), json!(t.transcendentals));
            }
            if let Some(b) = t.bound {
                args.insert("bound".into(), json!(b.name()));
            }
            if let Some(n) = op_name(m, id) {
                args.insert("op_name".into(), json!(n));
            }
            OpInfo {
                name: ins.name.clone(),
                args,
                scopes: scope_path(m, id),
            }
        })
    }

    /// Links the slices of each async transfer, in time order.
    fn flows(&mut self, by_flow: BTreeMap<u32, Vec<(i64, usize)>>) {
        for (flow, mut members) in by_flow {
            if members.len() < 2 {
                continue;
            }
            members.sort_by_key(|&(start, idx)| (start, idx));
            let last = members.len() - 1;
            for (k, &(_, idx)) in members.iter().enumerate() {
                let e = &mut self.events[idx];
                e.bind_id = Some(u64::from(flow));
                e.flow_out = (k < last).then_some(true);
                e.flow_in = (k > 0).then_some(true);
            }
        }
    }

    fn counter(&mut self, mem: &crate::MemoryView, max_points: usize) {
        for p in mem.downsampled(max_points) {
            let mut args = Map::new();
            args.insert("bytes".into(), json!(p.bytes));
            self.events.push(TraceEvent {
                name: "HBM in use".into(),
                cat: "memory".into(),
                ph: "C".into(),
                pid: 0,
                tid: None,
                ts: Some(us(ns(p.time_s))),
                dur: None,
                bind_id: None,
                flow_in: None,
                flow_out: None,
                args,
            });
        }
    }
}

/// A zero-length `-start` / `-done` of an async transfer.
fn is_marker(e: &Event) -> bool {
    e.lane == Lane::TensorCore && e.dur_s == 0.0 && e.flow.is_some()
}

/// Order of lanes for events starting at the same time: the TensorCore
/// marker that issues a transfer comes before the transfer.
fn lane_rank(l: Lane) -> u8 {
    match l {
        Lane::TensorCore => 0,
        Lane::Dma => 1,
        Lane::Ici => 2,
    }
}

fn lane_tid(l: Lane) -> u32 {
    match l {
        Lane::TensorCore => TID_TENSORCORE,
        Lane::Dma => TID_DMA,
        Lane::Ici => TID_ICI,
    }
}

fn thread_name(tid: u32) -> String {
    let (base, extra) = if tid >= EXTRA_TID_STRIDE {
        (tid / EXTRA_TID_STRIDE, tid % EXTRA_TID_STRIDE)
    } else {
        (tid, 0)
    };
    let name = match base {
        TID_TENSORCORE => "TensorCore (XLA ops)",
        TID_DMA => "DMA (HBM copies)",
        TID_ICI => "ICI (collectives)",
        TID_ASYNC => "TensorCore async start/done",
        _ => "other",
    };
    if extra == 0 {
        name.to_string()
    } else {
        format!("{name} #{}", extra + 1)
    }
}
