//! tpusim-perf: the single-device performance model.
//!
//! Every executed op (a fusion or an unfused instruction) is a kernel. On a
//! chip with a `[tensorcore]` table it is timed by the TensorCore model
//! ([`tensorcore`]): the MXU tile schedule, VPU/XLU work and the HBM→VMEM
//! DMA pipeline of tiles per core (`max(compute, DMA)` per step, the first
//! load and last compute and store exposed) and a fixed per-kernel cost. Other chips use the roofline, `max(mxu, vpu, hbm) +
//! per-op overhead`:
//! - **MXU**: dots and convolutions, with rows padded to the 8 sublanes and
//!   contracting/output columns padded to the MXU edge, at the operand type's
//!   rate (f32 on TPUs as 1, 3 or 6 bf16 passes by `operand_precision`);
//! - **VPU**: the remaining flops, plus transcendentals at
//!   [`transcendental_cost`] flops each, at the chip's vector rate;
//! - **HBM**: bytes accessed (XLA's count at fusion boundaries, from
//!   `tpusim-cost`) over HBM bandwidth.
//!
//! Collectives are priced by a [`CommModel`] (the pod crate's torus models;
//! [`LocalOnly`] on one device). A synchronous collective is fully exposed;
//! an async `-start`/`-done` pair overlaps the compute issued between them,
//! and only `max(0, communication − that compute)` adds to the step.
//!
//! The program runs the entry computation's instructions in order (one
//! TensorCore, sequential schedule); `while` bodies repeat trip-count times,
//! `call`s are inlined, a `conditional` takes its longest branch unless its
//! selector is a constant. Unoptimized modules (no fusion at all) have their
//! calls inlined and are fused (`tpusim_hlo::passes::{inline_calls, fuse}`)
//! first.
//!
//! Like the other analysis crates, this one never prints and never panics on
//! a parsed module.

mod attention;
mod comm;
pub mod memory;
mod op;
pub mod pallas;
mod pipelining;
pub mod schedule;
pub mod tensorcore;

pub use comm::{CollectiveStat, CommCost, CommModel, CommSummary, LocalOnly};
pub use memory::{
    peak_by_kind, Allocation, BufferKind, KindAtPeak, LiveBuffer, MemoryPoint, MemoryProfile,
};
pub use schedule::{
    op_name_path, schedule, schedule_with_memory, schedule_with_memory_cancellable, Event, Lane,
    Schedule,
};
pub use tpusim_hlo::{Cancel, Cancelled};

pub use op::{
    explain_in, is_free, is_free_instr, op_time, op_time_in, padded_dim, reshape_is_bitcast,
    transcendental_cost, Bound, MatmulInfo, OpTime, SUBLANES,
};
pub use tensorcore::{KernelExplain, MxuSchedule, TimingContext};

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use tpusim_arch::{Chip, MatmulDtype};
use tpusim_hlo::analysis::{while_trip_count, TripCount};
use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{CompId, InstrId, Module, OpCategory, Opcode};

/// Coarse op families for the time-by-category breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Matmul,
    Convolution,
    Elementwise,
    Reduction,
    DataMovement,
    Collective,
    Other,
}

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Matmul => "matmul",
            Category::Convolution => "convolution",
            Category::Elementwise => "elementwise",
            Category::Reduction => "reduction",
            Category::DataMovement => "data movement",
            Category::Collective => "collective",
            Category::Other => "other",
        }
    }
}

/// XLA's static totals (each instruction once, loops not multiplied).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct XlaCost {
    pub flops: f64,
    pub transcendentals: f64,
    pub bytes_accessed: f64,
}

/// One instruction of the program, aggregated over all its executions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpStat {
    pub name: String,
    pub opcode: String,
    pub category: Category,
    /// Times executed (loop trip counts multiplied in).
    pub occurrences: u64,
    /// Totals over all executions.
    pub flops: f64,
    pub transcendentals: f64,
    pub bytes_accessed: f64,
    pub time_s: f64,
    pub mxu_time_s: f64,
    pub vpu_time_s: f64,
    pub hbm_time_s: f64,
    pub bound: Bound,
    /// The op's largest dot or convolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul: Option<MatmulInfo>,
}

impl OpStat {
    /// Flops per byte of HBM traffic (infinite when it moves no bytes).
    pub fn arithmetic_intensity(&self) -> f64 {
        if self.bytes_accessed > 0.0 {
            self.flops / self.bytes_accessed
        } else {
            f64::INFINITY
        }
    }
}

/// The performance of one module on one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub module: String,
    /// Chip id (`v5e`).
    pub chip: String,
    pub devices: u32,
    pub step_time_s: f64,
    /// Dynamic totals: every execution counted.
    pub flops: f64,
    pub transcendentals: f64,
    pub bytes_accessed: f64,
    /// `flops / (step_time_s * peak_flops_per_s)`.
    pub mfu: f64,
    /// The matmul rate class MFU is measured against (most matmul flops).
    pub mfu_dtype: MatmulDtype,
    pub peak_flops_per_s: f64,
    pub xla_cost: XlaCost,
    pub time_by_bound: BTreeMap<Bound, f64>,
    pub time_by_category: BTreeMap<Category, f64>,
    /// Whether the module had no fusions and was fused before timing.
    pub fused_by_tpusim: bool,
    /// Ops by total time, longest first.
    pub ops: Vec<OpStat>,
    /// Most HBM bytes in use at once (see [`memory`]).
    #[serde(default)]
    pub peak_memory_bytes: u64,
    /// HBM bytes in use over the step, at most ~1000 points.
    #[serde(default)]
    pub memory_timeline: Vec<MemoryPoint>,
    /// Parameters, outputs and the largest buffers live at the peak.
    #[serde(default)]
    pub memory: MemorySummary,
    pub assumptions: Vec<String>,
    /// Concrete suggestions drawn from the numbers above.
    pub hints: Vec<String>,
    /// Compute, communication and exposed communication per device, and the
    /// collectives (JSON: flattened into the top level).
    #[serde(flatten)]
    pub communication: CommSummary,
}

/// The memory profile without its timeline (that is `memory_timeline`),
/// and only the largest buffers at the peak.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySummary {
    pub peak_time_s: f64,
    pub parameter_bytes: u64,
    pub output_bytes: u64,
    pub constant_bytes: u64,
    pub aliased_bytes: u64,
    pub capacity_bytes: u64,
    /// Largest buffers live at the peak (at most [`PEAK_BUFFERS`]).
    pub peak_buffers: Vec<LiveBuffer>,
    /// How many buffers are live at the peak in all.
    pub peak_buffer_count: usize,
    /// What the peak is made of, over all its buffers (most bytes first).
    #[serde(default)]
    pub peak_by_kind: Vec<KindAtPeak>,
}

/// Buffers at the peak an analysis lists.
pub const PEAK_BUFFERS: usize = 20;

/// Analyzes `module` on one device of `chip`.
pub fn analyze(module: &Module, chip: &Chip) -> Analysis {
    analyze_with(module, chip, &LocalOnly)
}

/// Analyzes `module` on `chip`, pricing collectives with `comm`.
pub fn analyze_with(module: &Module, chip: &Chip, comm: &dyn CommModel) -> Analysis {
    analyze_until(module, chip, comm, &Cancel::default())
}

/// [`analyze_with`], stopping early once `cancel` is set: the program walk
/// and the memory replay look at the flag per instruction and per loop
/// iteration (a collective priced by a `comm` that simulates the network
/// stops there as that model allows).
pub fn analyze_cancellable(
    module: &Module,
    chip: &Chip,
    comm: &dyn CommModel,
    cancel: &Cancel,
) -> Result<Analysis, Cancelled> {
    let a = analyze_until(module, chip, comm, cancel);
    // A walk cut short is never handed out: the flag is sticky.
    cancel.check()?;
    Ok(a)
}

/// The analysis, cut short (and meaningless) when `cancel` is set midway.
fn analyze_until(module: &Module, chip: &Chip, comm: &dyn CommModel, cancel: &Cancel) -> Analysis {
    let xla = tpusim_cost::xla_cost(module);
    let timed = timed_module(module);
    let unfused = timed.fused;
    let m = timed.module();
    let mut walk = Walk::new(m, chip, comm);
    walk.cancel = cancel.clone();
    walk.trip_counts = loop_trip_counts(module, m);
    let mut acc = Acc::default();
    walk.comp(m.entry, 1, &mut acc, 0);
    walk.flush_in_flight(&mut acc);
    let mut assumptions = std::mem::take(&mut walk.assumptions);
    if walk.pipelined_met > 0 {
        assumptions.push(format!(
            "{} async collective(s) in loop bodies only update a loop-carried buffer: they are \
             pipelined across iterations (XLA's collective pipelining), overlapping the next \
             iteration's compute up to their -done as well",
            walk.pipelined_met
        ));
    }
    assumptions.extend(custom_call_assumptions(std::mem::take(
        &mut walk.custom_calls,
    )));
    if let Some(tc) = &chip.tensorcore {
        assumptions.push(format!(
            "TensorCore model: each kernel is a double-buffered pipeline of tiles per core \
             (matmuls: {}x{} output blocks, K in {}-deep slices), max(compute, DMA) per step \
             with the last tile's compute exposed, plus {:.2} µs inside a program (a lone \
             kernel: {:.2} µs, which also exposes its first load and last store); HBM at {:.0}% \
             of peak; a dot with K = 1 is a multiply on the VPU; the {:.1} µs \
             per-program launch overhead is not in the step time; each operand is read from HBM \
             once per kernel (re-reads forced by VMEM capacity are not modelled); each core \
             loads or stores {} vector register(s) per cycle, one row of a single-row array per \
             register; a reduction over the minor (lane) dim with more results than lanes takes \
             a second kernel (a rule inferred from measured v4 reductions)",
            tc.matmul_block_edge,
            tc.matmul_block_edge,
            tc.matmul_block_depth,
            tc.in_program_kernel_s * 1e6,
            tc.kernel_launch_s * 1e6,
            tc.hbm_efficiency * 100.0,
            tc.program_overhead_s * 1e6,
            tc.vreg_moves_per_cycle
        ));
    }
    let net = std::mem::take(&mut walk.net);
    if unfused {
        assumptions.push(
            "module has no fusions (unoptimized HLO): fused with tpusim's simple TPU-style \
             fusion pass before timing"
                .to_string(),
        );
    }
    let memory = schedule::memory_of(m, module, chip, comm, cancel);
    assumptions.extend(comm.assumptions());
    let mut a = finish(module, chip, acc, xla, unfused, assumptions);
    a.devices = comm.devices(module);
    let network_notes = net.summarize(&mut a, comm.describe());
    // Ranked once the communication is known: an exposed collective competes
    // with the kernels for the top of the list.
    a.hints = hints(&a, chip);
    for h in network_notes {
        if !a.hints.contains(&h) {
            a.hints.push(h);
        }
    }
    if let Some(h) = attention::flash_hint(m, &a) {
        // Materialized scores are the largest HBM cost of an unfused attention:
        // its fix leads the list.
        a.hints.insert(0, h);
    }
    if let Some(w) = &memory.warning {
        a.hints.insert(0, w.clone());
    }
    a.peak_memory_bytes = memory.peak_bytes;
    a.memory = MemorySummary {
        peak_time_s: memory.peak_time_s,
        parameter_bytes: memory.parameter_bytes,
        output_bytes: memory.output_bytes,
        constant_bytes: memory.constant_bytes,
        aliased_bytes: memory.aliased_bytes,
        capacity_bytes: memory.capacity_bytes,
        peak_buffer_count: memory.peak_buffers.len(),
        peak_by_kind: memory::peak_by_kind(&memory.peak_buffers),
        peak_buffers: memory.peak_buffers.into_iter().take(PEAK_BUFFERS).collect(),
    };
    a.memory_timeline = memory.timeline;
    a
}

/// The module the model times: `module` itself, or a fused copy when it has
/// no fusions at all (unoptimized HLO). The fusion pass only appends
/// instructions, so ids of `module` stay valid in the copy.
pub struct TimedModule<'a> {
    original: &'a Module,
    copy: Option<Module>,
    /// Whether the module was fused by tpusim.
    pub fused: bool,
}

impl TimedModule<'_> {
    /// The module whose instruction ids the model's results use.
    pub fn module(&self) -> &Module {
        self.copy.as_ref().unwrap_or(self.original)
    }

    /// The fused copy, when one was made.
    pub fn into_copy(self) -> Option<Module> {
        self.copy
    }
}

/// Prepares `module` for timing (see [`TimedModule`]).
pub fn timed_module(module: &Module) -> TimedModule<'_> {
    let unfused = !module.instrs.iter().any(|i| i.opcode == Opcode::Fusion);
    let copy = unfused.then(|| {
        let mut copy = module.clone();
        // XLA inlines calls before it fuses: fusion then sees across them.
        tpusim_hlo::passes::inline_calls(&mut copy);
        tpusim_hlo::passes::fuse(&mut copy);
        copy
    });
    TimedModule {
        original: module,
        copy,
        fused: unfused,
    }
}

/// Trip counts of every while loop, read from the module as written: fusing
/// a loop condition hides the comparison that the induction-variable
/// analysis reads. The fusion pass only appends instructions, so a loop
/// keeps its id; a loop the call inliner copied out of a call is new in
/// `timed` and carries the trip count of its original (`known_trip_count`).
pub(crate) fn loop_trip_counts(original: &Module, timed: &Module) -> HashMap<InstrId, TripCount> {
    let loops = |m: &Module| -> Vec<InstrId> {
        (0..m.instrs.len() as u32)
            .map(InstrId)
            .filter(|&i| m.instr(i).opcode == Opcode::While)
            .collect()
    };
    let mut counts: HashMap<InstrId, TripCount> = loops(original)
        .into_iter()
        .map(|id| (id, while_trip_count(original, id)))
        .collect();
    for id in loops(timed) {
        counts
            .entry(id)
            .or_insert_with(|| while_trip_count(timed, id));
    }
    counts
}

/// Iterations a loop is timed for: its trip count, or 1 when unknown.
pub(crate) fn trips(t: &TripCount) -> u64 {
    match t {
        TripCount::Known(n) | TripCount::Inferred(n) => *n,
        TripCount::Unknown(_) => 1,
    }
}

/// The branches of a conditional, in selector order.
pub(crate) fn branches(ins: &tpusim_hlo::Instruction) -> Vec<CompId> {
    match (
        ins.attr_comp("true_computation"),
        ins.attr_comp("false_computation"),
    ) {
        (Some(t), Some(f)) => vec![t, f],
        _ => ins.called_computations(),
    }
}

/// The branch a conditional takes when its selector is a constant.
pub(crate) fn constant_branch(m: &Module, id: InstrId, n: usize) -> Option<usize> {
    let selector = m.instr(id).operands.first().map(|&o| m.instr(o));
    selector
        .filter(|s| s.opcode == Opcode::Constant)
        .and_then(|s| match &s.literal {
            Some(Literal::Array(LiteralData::Pred(v))) => v.first().map(|&b| if b { 0 } else { 1 }),
            Some(Literal::Array(LiteralData::Int(v))) => v.first().map(|&i| {
                // An out-of-range index runs the last branch (XLA semantics).
                if i < 0 || i as usize >= n {
                    n - 1
                } else {
                    i as usize
                }
            }),
            _ => None,
        })
}

fn finish(
    module: &Module,
    chip: &Chip,
    acc: Acc,
    xla: tpusim_cost::CostTotals,
    unfused: bool,
    assumptions: Vec<String>,
) -> Analysis {
    let mut ops = acc.ops;
    // Folds from +0.0: an empty float `sum()` is -0.0.
    let total = |f: fn(&OpStat) -> f64| ops.iter().fold(0.0, |t, o| t + f(o));
    let step_time_s = total(|o| o.time_s);
    let flops = total(|o| o.flops);
    let transcendentals = total(|o| o.transcendentals);
    let bytes_accessed = total(|o| o.bytes_accessed);
    let mfu_dtype = acc
        .matmul_flops
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(MatmulDtype::Bf16, |(d, _)| *d);
    let peak = chip.peak_flops(mfu_dtype);
    let mut time_by_bound = BTreeMap::new();
    let mut time_by_category = BTreeMap::new();
    for o in &ops {
        *time_by_bound.entry(o.bound).or_insert(0.0) += o.time_s;
        *time_by_category.entry(o.category).or_insert(0.0) += o.time_s;
    }
    ops.sort_by(|a, b| b.time_s.total_cmp(&a.time_s));
    Analysis {
        module: module.name.clone(),
        chip: chip.id.clone(),
        devices: 1,
        step_time_s,
        flops,
        transcendentals,
        bytes_accessed,
        mfu: if step_time_s > 0.0 {
            flops / (step_time_s * peak)
        } else {
            0.0
        },
        mfu_dtype,
        peak_flops_per_s: peak,
        xla_cost: XlaCost {
            flops: xla.flops,
            transcendentals: xla.transcendentals,
            bytes_accessed: xla.bytes_accessed,
        },
        time_by_bound,
        time_by_category,
        fused_by_tpusim: unfused,
        ops,
        peak_memory_bytes: 0,
        memory_timeline: Vec::new(),
        memory: MemorySummary::default(),
        assumptions,
        hints: Vec::new(),
        communication: CommSummary::default(),
    }
}

/// Totals of a (partial) program walk.
#[derive(Default)]
struct Acc {
    ops: Vec<OpStat>,
    index: HashMap<String, usize>,
    matmul_flops: Vec<(MatmulDtype, f64)>,
}

impl Acc {
    fn time(&self) -> f64 {
        self.ops.iter().fold(0.0, |t, o| t + o.time_s)
    }

    fn merge(&mut self, other: Acc) {
        for o in other.ops {
            self.add_stat(o);
        }
        for (d, f) in other.matmul_flops {
            self.add_matmul_flops(d, f);
        }
    }

    fn add_matmul_flops(&mut self, d: MatmulDtype, f: f64) {
        match self.matmul_flops.iter_mut().find(|(x, _)| *x == d) {
            Some((_, t)) => *t += f,
            None => self.matmul_flops.push((d, f)),
        }
    }

    fn add_stat(&mut self, o: OpStat) {
        match self.index.get(&o.name) {
            Some(&k) => {
                let s = &mut self.ops[k];
                s.occurrences += o.occurrences;
                s.flops += o.flops;
                s.transcendentals += o.transcendentals;
                s.bytes_accessed += o.bytes_accessed;
                s.time_s += o.time_s;
                s.mxu_time_s += o.mxu_time_s;
                s.vpu_time_s += o.vpu_time_s;
                s.hbm_time_s += o.hbm_time_s;
            }
            None => {
                self.index.insert(o.name.clone(), self.ops.len());
                self.ops.push(o);
            }
        }
    }
}

struct Walk<'a> {
    m: &'a Module,
    chip: &'a Chip,
    cache: HashMap<InstrId, OpTime>,
    assumptions: Vec<String>,
    /// How each custom call was priced, with the calls priced that way (in
    /// walk order, each on its first visit): alike calls (one per layer)
    /// share one assumption.
    custom_calls: Vec<(String, Vec<String>)>,
    trip_counts: HashMap<InstrId, TripCount>,
    comm: &'a dyn CommModel,
    net: NetAcc,
    /// Once set, the walk stops (its result is then discarded).
    cancel: Cancel,
    /// The `-done`s whose collective completes during the next iteration
    /// (see [`pipelining`]), found on the first loop.
    pipelined: Option<std::collections::HashSet<InstrId>>,
    /// Compute time per execution since the current loop body began.
    elapsed: f64,
    /// Pipelined collectives of the current body: (start, `elapsed` at
    /// their `-done`).
    deferred: Vec<(InstrId, f64)>,
    /// Pipelined `-done`s met (for the assumption line).
    pipelined_met: usize,
}

/// Communication bookkeeping of a walk.
#[derive(Default)]
struct NetAcc {
    costs: HashMap<InstrId, Option<CommCost>>,
    /// Async collectives started and not yet done: (start, name, comm left
    /// to hide per execution, executions).
    in_flight: Vec<(InstrId, f64, u64)>,
    stats: Vec<CollectiveStat>,
    index: HashMap<String, usize>,
    hints: Vec<(String, Vec<String>)>,
}

impl NetAcc {
    fn stat(&mut self, name: &str, c: &CommCost, is_async: bool) -> &mut CollectiveStat {
        let k = *self.index.entry(name.to_string()).or_insert_with(|| {
            self.stats.push(CollectiveStat {
                name: name.to_string(),
                kind: c.kind.clone(),
                bytes: c.bytes,
                group_size: c.group_size,
                axes: c.axes.clone(),
                occurrences: 0,
                time_s: 0.0,
                exposed_s: 0.0,
                is_async,
            });
            self.hints.push((name.to_string(), c.hints.clone()));
            self.stats.len() - 1
        });
        &mut self.stats[k]
    }

    /// Compute of `dt` seconds per execution hides that much of every
    /// in-flight collective.
    fn overlap(&mut self, dt: f64) {
        for f in &mut self.in_flight {
            f.1 -= dt;
        }
    }

    /// Puts the communication summary into `a`; returns the network model's
    /// notes on the longest collectives (a non-wrapping ring, DCN, ...).
    fn summarize(mut self, a: &mut Analysis, network: Option<String>) -> Vec<String> {
        self.stats.sort_by(|x, y| y.time_s.total_cmp(&x.time_s));
        let communication_s = self.stats.iter().fold(0.0, |t, s| t + s.time_s);
        let exposed = self.stats.iter().fold(0.0, |t, s| t + s.exposed_s);
        // One line per note, naming every collective it holds for.
        let mut notes: Vec<(String, Vec<&str>)> = Vec::new();
        for s in self.stats.iter().take(HINT_OPS) {
            let Some((_, hs)) = self.hints.iter().find(|(n, _)| *n == s.name) else {
                continue;
            };
            for h in hs {
                match notes.iter_mut().find(|(note, _)| note == h) {
                    Some((_, names)) => names.push(&s.name),
                    None => notes.push((h.clone(), vec![&s.name])),
                }
            }
        }
        let notes = notes
            .into_iter()
            .map(|(note, names)| format!("{}: {note}", name_list(&names)))
            .collect();
        a.communication = CommSummary {
            network,
            compute_s: (a.step_time_s - exposed).max(0.0),
            communication_s,
            exposed_communication_s: exposed,
            collectives: self.stats,
        };
        notes
    }
}

/// `a`, `a and b`, `a, b and c`, `a, b, c and 4 more`.
fn name_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] if names.len() <= 3 => format!("{} and {last}", rest.join(", ")),
        _ => format!("{} and {} more", names[..3].join(", "), names.len() - 3),
    }
}

/// Ops of a program walk run among other kernels of one program.
pub(crate) const IN_PROGRAM: TimingContext = TimingContext {
    in_program: true,
    warm_operands: false,
};

/// Nesting limit for calls, loops and branches (recursion is not valid HLO,
/// but the walk must not overflow on a malformed module).
const MAX_DEPTH: u32 = 64;

impl<'a> Walk<'a> {
    fn new(m: &'a Module, chip: &'a Chip, comm: &'a dyn CommModel) -> Self {
        Walk {
            m,
            chip,
            cache: HashMap::new(),
            assumptions: Vec::new(),
            custom_calls: Vec::new(),
            trip_counts: HashMap::new(),
            comm,
            net: NetAcc::default(),
            cancel: Cancel::default(),
            pipelined: None,
            elapsed: 0.0,
            deferred: Vec::new(),
            pipelined_met: 0,
        }
    }

    /// Whether `done` ends a collective pipelined across loop iterations.
    fn is_pipelined(&mut self, done: InstrId) -> bool {
        let m = self.m;
        self.pipelined
            .get_or_insert_with(|| pipelining::pipelined_dones(m, is_async_done))
            .contains(&done)
    }

    /// At the end of a loop body: a pipelined collective also overlaps the
    /// next iteration's compute up to its `-done`; what that does not hide
    /// is exposed.
    fn settle_pipelined(&mut self, acc: &mut Acc) {
        for (start, at) in std::mem::take(&mut self.deferred) {
            let Some(k) = self.net.in_flight.iter().position(|f| f.0 == start) else {
                continue;
            };
            let (_, left, times) = self.net.in_flight.remove(k);
            self.expose(start, (left - at).max(0.0), times, acc);
        }
    }

    fn comm_cost(&mut self, id: InstrId) -> Option<CommCost> {
        let (m, comm) = (self.m, self.comm);
        self.net
            .costs
            .entry(id)
            .or_insert_with(|| comm.cost(m, id))
            .clone()
    }

    /// An async collective starts: its communication runs from here.
    fn start_async(&mut self, id: InstrId, c: &CommCost, times: u64) {
        let name = self.m.instr(id).name.clone();
        let s = self.net.stat(&name, c, true);
        s.occurrences += times;
        s.time_s += c.time_s * times as f64;
        self.net.in_flight.push((id, c.time_s, times));
    }

    /// The `-done` of an async collective: what compute did not hide is exposed.
    fn finish_async(&mut self, done: InstrId, acc: &mut Acc) {
        let m = self.m;
        let Some(start) = async_start_of(m, done) else {
            return;
        };
        self.finish_started(start, acc);
    }

    /// The device waits for the in-flight collective `start`: what compute
    /// did not hide is exposed (nothing, when it is no longer in flight).
    fn finish_started(&mut self, start: InstrId, acc: &mut Acc) {
        let Some(k) = self.net.in_flight.iter().position(|f| f.0 == start) else {
            return;
        };
        let (_, left, times) = self.net.in_flight.remove(k);
        self.expose(start, left.max(0.0), times, acc);
    }

    fn expose(&mut self, start: InstrId, per_run: f64, times: u64, acc: &mut Acc) {
        let ins = self.m.instr(start);
        let total = per_run * times as f64;
        if let Some(&k) = self.net.index.get(&ins.name) {
            self.net.stats[k].exposed_s += total;
        }
        acc.add_stat(OpStat {
            name: ins.name.clone(),
            opcode: ins.opcode.name().to_string(),
            category: Category::Collective,
            occurrences: times,
            flops: 0.0,
            transcendentals: 0.0,
            bytes_accessed: 0.0,
            time_s: total,
            mxu_time_s: 0.0,
            vpu_time_s: 0.0,
            hbm_time_s: 0.0,
            bound: Bound::Network,
            matmul: None,
        });
    }

    /// Async collectives never waited for are exposed at the end.
    fn flush_in_flight(&mut self, acc: &mut Acc) {
        for (start, left, times) in std::mem::take(&mut self.net.in_flight) {
            self.expose(start, left.max(0.0), times, acc);
        }
    }

    fn assume(&mut self, s: String) {
        if !self.assumptions.contains(&s) {
            self.assumptions.push(s);
        }
    }

    fn comp(&mut self, c: CompId, times: u64, acc: &mut Acc, depth: u32) {
        if depth > MAX_DEPTH {
            self.assume(format!(
                "calls nested deeper than {MAX_DEPTH} levels were not timed"
            ));
            return;
        }
        let m = self.m;
        for &id in &m.comp(c).instrs {
            if self.cancel.is_cancelled() {
                return;
            }
            self.instr(id, times, acc, depth);
        }
    }

    fn instr(&mut self, id: InstrId, times: u64, acc: &mut Acc, depth: u32) {
        let m = self.m;
        let ins = m.instr(id);
        if is_async_start(ins.opcode) {
            if let Some(c) = self.comm_cost(id) {
                self.start_async(id, &c, times);
                if c.blocking {
                    // The device waits for it here: nothing overlaps it.
                    self.finish_started(id, acc);
                }
                return;
            }
        }
        if is_async_done(ins.opcode) {
            // A blocking collective (already waited for) has nothing left
            // to pipeline.
            let in_flight = |s: InstrId| self.net.in_flight.iter().any(|f| f.0 == s);
            match async_start_of(m, id) {
                Some(start) if in_flight(start) && self.is_pipelined(id) => {
                    self.pipelined_met += 1;
                    self.deferred.push((start, self.elapsed));
                }
                _ => self.finish_async(id, acc),
            }
        }
        match ins.opcode {
            _ if is_free_instr(m, id) => {}
            Opcode::While => {
                let trip = self
                    .trip_counts
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| while_trip_count(m, id));
                if let TripCount::Unknown(why) = &trip {
                    self.assume(format!(
                        "while loop {} has an unknown trip count ({why}): assumed 1",
                        ins.name
                    ));
                }
                let n = trips(&trip);
                let outer = (
                    std::mem::replace(&mut self.elapsed, 0.0),
                    std::mem::take(&mut self.deferred),
                );
                for name in ["body", "condition"] {
                    if let Some(c) = ins.attr_comp(name) {
                        self.comp(c, times.saturating_mul(n), acc, depth + 1);
                    }
                }
                self.settle_pipelined(acc);
                self.elapsed += outer.0;
                self.deferred = outer.1;
            }
            Opcode::Call | Opcode::AsyncStart => {
                for c in ins.called_computations() {
                    self.comp(c, times, acc, depth + 1);
                }
            }
            Opcode::Conditional => self.conditional(id, times, acc, depth),
            _ => self.op(id, times, acc),
        }
    }

    fn conditional(&mut self, id: InstrId, times: u64, acc: &mut Acc, depth: u32) {
        let m = self.m;
        let ins = m.instr(id);
        let branches = branches(ins);
        if branches.is_empty() {
            return;
        }
        let constant = constant_branch(m, id, branches.len());
        if let Some(k) = constant {
            self.comp(branches[k], times, acc, depth + 1);
            return;
        }
        let mut best: Option<Acc> = None;
        for &b in &branches {
            let mut part = Acc::default();
            self.comp(b, times, &mut part, depth + 1);
            if best.as_ref().is_none_or(|x| part.time() > x.time()) {
                best = Some(part);
            }
        }
        if branches.len() > 1 {
            self.assume(format!(
                "conditional {} has a data-dependent selector: its longest branch is timed",
                ins.name
            ));
        }
        if let Some(b) = best {
            acc.merge(b);
        }
    }

    fn op(&mut self, id: InstrId, times: u64, acc: &mut Acc) {
        let (m, chip) = (self.m, self.chip);
        let first_visit = !self.cache.contains_key(&id);
        let t = self
            .cache
            .entry(id)
            .or_insert_with(|| op_time_in(m, chip, id, IN_PROGRAM))
            .clone();
        let ins = m.instr(id);
        if ins.opcode == Opcode::CustomCall && first_visit {
            let how = custom_call_assumption(m, chip, id);
            match self.custom_calls.iter_mut().find(|(h, _)| *h == how) {
                Some((_, names)) => names.push(ins.name.clone()),
                None => self.custom_calls.push((how, vec![ins.name.clone()])),
            }
        }
        let is_comm = ins.opcode.category() == OpCategory::Collective;
        if is_comm {
            if let Some(c) = self.comm_cost(id) {
                // Synchronous: the device waits for the whole transfer.
                let n = times as f64;
                let s = self.net.stat(&ins.name, &c, false);
                s.occurrences += times;
                s.time_s += c.time_s * n;
                s.exposed_s += c.time_s * n;
                acc.add_stat(OpStat {
                    name: ins.name.clone(),
                    opcode: ins.opcode.name().to_string(),
                    category: Category::Collective,
                    occurrences: times,
                    flops: t.flops * n,
                    transcendentals: t.transcendentals * n,
                    bytes_accessed: t.bytes_accessed * n,
                    time_s: c.time_s * n,
                    mxu_time_s: t.mxu_s * n,
                    vpu_time_s: t.vpu_s * n,
                    hbm_time_s: t.hbm_s * n,
                    bound: Bound::Network,
                    matmul: None,
                });
                return;
            }
        }
        self.net.overlap(t.time_s);
        self.elapsed += t.time_s;
        if is_comm || ins.opcode == Opcode::Send {
            self.assume(format!(
                "{} ops are timed as local memory traffic only (single-device model, no \
                 interconnect)",
                ins.opcode
            ));
        }
        let n = times as f64;
        for &(d, f) in &t.matmul_flops {
            acc.add_matmul_flops(d, f * n);
        }
        acc.add_stat(OpStat {
            name: ins.name.clone(),
            opcode: ins.opcode.name().to_string(),
            category: category(m, id),
            occurrences: times,
            flops: t.flops * n,
            transcendentals: t.transcendentals * n,
            bytes_accessed: t.bytes_accessed * n,
            time_s: t.time_s * n,
            mxu_time_s: t.mxu_s * n,
            vpu_time_s: t.vpu_s * n,
            hbm_time_s: t.hbm_s * n,
            bound: t.bound.unwrap_or(Bound::Overhead),
            matmul: t.matmul,
        });
    }
}

/// How a custom call was priced, for the report (without its name): from
/// its cost estimate, or (with no estimate) as its operand and result
/// traffic only.
fn custom_call_assumption(m: &Module, chip: &Chip, id: InstrId) -> String {
    match explain_in(m, chip, id, IN_PROGRAM).and_then(|e| e.custom_call) {
        Some(s) => s,
        None => match tensorcore::custom_call_estimate(m, id) {
            Some((f, t, b)) => format!(
                "cost_estimate {f:.3e} flops, {t:.3e} transcendentals, {b:.3e} bytes (the \
                 roofline prices XLA's own count of the op)"
            ),
            None => "no cost_estimate: timed as its operand and result traffic only (compute \
                     unknown)"
                .to_string(),
        },
    }
}

/// One assumption per way custom calls were priced: "custom call NAME: HOW",
/// or "N custom calls (A, B, C, …): HOW" for alike ones.
fn custom_call_assumptions(groups: Vec<(String, Vec<String>)>) -> impl Iterator<Item = String> {
    groups
        .into_iter()
        .map(|(how, names)| match names.as_slice() {
            [one] => format!("custom call {one}: {how}"),
            _ => {
                let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
                let more = if names.len() > 3 { ", …" } else { "" };
                format!(
                    "{} custom calls ({}{more}): {how}",
                    names.len(),
                    shown.join(", ")
                )
            }
        })
}

fn is_async_start(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::AllReduceStart
            | Opcode::AllGatherStart
            | Opcode::CollectivePermuteStart
            | Opcode::AsyncStart
    )
}

fn is_async_done(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::AllReduceDone
            | Opcode::AllGatherDone
            | Opcode::CollectivePermuteDone
            | Opcode::AsyncDone
    )
}

/// The `-start` a `-done` waits for (through any `async-update`s).
fn async_start_of(m: &Module, done: InstrId) -> Option<InstrId> {
    let mut s = *m.instr(done).operands.first()?;
    for _ in 0..MAX_DEPTH {
        if m.instr(s).opcode != Opcode::AsyncUpdate {
            return Some(s);
        }
        s = *m.instr(s).operands.first()?;
    }
    None
}

/// The category of an op; a fusion takes that of its heaviest content.
pub fn category(m: &Module, id: InstrId) -> Category {
    let ins = m.instr(id);
    if ins.opcode != Opcode::Fusion {
        return plain_category(ins.opcode);
    }
    let mut found: Vec<Category> = Vec::new();
    let mut stack: Vec<CompId> = ins.called_computations();
    let mut seen = 0;
    while let Some(c) = stack.pop() {
        seen += 1;
        if seen > 256 {
            break;
        }
        for &j in &m.comp(c).instrs {
            let i = m.instr(j);
            if i.opcode == Opcode::Fusion {
                stack.extend(i.called_computations());
            } else if !is_free_instr(m, j) {
                found.push(plain_category(i.opcode));
            }
        }
    }
    [
        Category::Matmul,
        Category::Convolution,
        Category::Collective,
        Category::Reduction,
        Category::Elementwise,
        Category::DataMovement,
    ]
    .into_iter()
    .find(|c| found.contains(c))
    .unwrap_or(Category::Other)
}

fn plain_category(op: Opcode) -> Category {
    match op {
        Opcode::Dot | Opcode::ScaledDot | Opcode::RaggedDot => Category::Matmul,
        Opcode::Convolution => Category::Convolution,
        _ => match op.category() {
            OpCategory::Unary | OpCategory::Binary | OpCategory::Ternary => Category::Elementwise,
            OpCategory::Reduction => Category::Reduction,
            OpCategory::DataMovement => Category::DataMovement,
            OpCategory::Collective => Category::Collective,
            _ if op == Opcode::Map => Category::Elementwise,
            _ => Category::Other,
        },
    }
}

/// Ops a hint may name: the longest ones.
const HINT_OPS: usize = 15;

/// A share of the step spent HBM-bound (or moving data) above which the whole
/// class gets a hint of its own, not only its longest op.
const CLASS_HINT_SHARE_PCT: f64 = 20.0;

/// Concrete, number-backed suggestions, each naming a fix, ranked by the time
/// at stake (the seconds of the step the fix could save, at most), duplicates
/// dropped. (A program over the chip's memory gets its hint first, from the
/// memory schedule: it cannot run at all.)
pub fn hints(a: &Analysis, chip: &Chip) -> Vec<String> {
    let mut ranked = ranked_hints(a, chip);
    ranked.sort_by(|x, y| y.0.total_cmp(&x.0));
    let mut out: Vec<String> = Vec::new();
    for (_, h) in ranked {
        if !out.contains(&h) {
            out.push(h);
        }
    }
    out
}

fn ranked_hints(a: &Analysis, chip: &Chip) -> Vec<(f64, String)> {
    let mut out: Vec<(f64, String)> = Vec::new();
    if a.step_time_s <= 0.0 {
        return out;
    }
    class_hints(a, &mut out);
    communication_hints(a, &mut out);
    let share = |t: f64| 100.0 * t / a.step_time_s;
    let mut memory_bound: Vec<MemoryBoundGroup> = Vec::new();
    // Every op joins its memory-bound group (twelve layers' matmuls just below
    // the top ops still add up); per-op hints look at the top ops only.
    for (rank, o) in a.ops.iter().enumerate() {
        let Some(mm) = &o.matmul else { continue };
        if o.bound == Bound::Hbm {
            // Ops alike (same dtype and FLOP/byte, e.g. one per layer) share one hint.
            let key = (mm.dtype.name(), format!("{:.0}", o.arithmetic_intensity()));
            let ridge = chip.ridge_point_flops_per_byte(mm.dtype) / f64::from(mm.passes);
            let at = memory_bound
                .iter()
                .position(|g: &MemoryBoundGroup| g.key == key);
            let g = match at {
                Some(i) => &mut memory_bound[i],
                None => {
                    memory_bound.push(MemoryBoundGroup {
                        key,
                        first: o.name.clone(),
                        ridge,
                        ops: 0,
                        time_s: 0.0,
                        stake_s: 0.0,
                    });
                    memory_bound.last_mut().expect("just pushed")
                }
            };
            g.ops += 1;
            g.time_s += o.time_s;
            g.stake_s += o.time_s - o.mxu_time_s;
        }
        if rank >= HINT_OPS {
            continue;
        }
        // Padding and extra passes cost time only where the MXU is the limit.
        if o.bound == Bound::Mxu && mm.padding_waste >= 0.01 {
            let dims: Vec<String> = mm
                .padded_dims
                .iter()
                .map(|(d, p)| format!("dim {d} pads to {p}"))
                .collect();
            out.push((
                o.time_s * mm.padding_waste,
                format!(
                    "{}: {}: {:.1}% of MXU work wasted; pad the model dims to the MXU size",
                    o.name,
                    dims.join(", "),
                    100.0 * mm.padding_waste
                ),
            ));
        }
        if o.bound == Bound::Mxu && mm.passes > 1 {
            out.push((
                o.time_s * (1.0 - 1.0 / f64::from(mm.passes)),
                format!(
                    "{}: f32 operands at {} precision take {} bf16 MXU passes; DEFAULT precision \
                     (or bf16 inputs) would cut its MXU time {}x",
                    o.name,
                    if mm.passes == 3 { "HIGH" } else { "HIGHEST" },
                    mm.passes,
                    mm.passes
                ),
            ));
        }
    }
    memory_bound_hints(a, chip, memory_bound, &mut out);
    let overhead = a
        .time_by_bound
        .get(&Bound::Overhead)
        .copied()
        .unwrap_or(0.0);
    if share(overhead) >= 20.0 {
        let n: u64 = a
            .ops
            .iter()
            .filter(|o| o.bound == Bound::Overhead)
            .map(|o| o.occurrences)
            .fold(0, u64::saturating_add);
        out.push((
            overhead,
            format!(
                "{n} op executions are overhead-bound ({:.1}% of step at {:.2} µs each): fuse small \
                 ops or give each more work",
                share(overhead),
                // What these ops take on average (a kernel's fixed cost on
                // a TensorCore model, the flat per-op overhead otherwise).
                overhead / n.max(1) as f64 * 1e6
            ),
        ));
    }
    let vpu = a.time_by_bound.get(&Bound::Vpu).copied().unwrap_or(0.0);
    if share(vpu) >= 20.0 && a.transcendentals > 0.0 {
        out.push((
            vpu,
            format!(
                "{:.1}% of the step is VPU-bound; transcendentals ({:.3e}) cost {} VPU flops each: \
                 compute them in bf16 or once (hoist them out of loops)",
                share(vpu),
                a.transcendentals,
                transcendental_cost(chip)
            ),
        ));
    }
    out
}

/// Memory-bound matmuls of one dtype and FLOP/byte: one hint for all of them.
/// One hint per matmul dtype and MXU pass count (one ridge point, one fix)
/// for all its memory-bound matmuls, naming the longest groups of alike ops:
/// separate hints for the QKV, output, MLP and attention matmuls would repeat
/// the same advice.
fn memory_bound_hints(
    a: &Analysis,
    chip: &Chip,
    mut groups: Vec<MemoryBoundGroup>,
    out: &mut Vec<(f64, String)>,
) {
    groups.sort_by(|x, y| y.time_s.total_cmp(&x.time_s));
    let mut kinds: Vec<(&'static str, u64)> = Vec::new();
    for g in &groups {
        let kind = (g.key.0, g.ridge.to_bits());
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    for (dtype, ridge_bits) in kinds {
        let of_kind: Vec<&MemoryBoundGroup> = groups
            .iter()
            .filter(|g| g.key.0 == dtype && g.ridge.to_bits() == ridge_bits)
            .collect();
        let ops: usize = of_kind.iter().map(|g| g.ops).sum();
        let time_s: f64 = of_kind.iter().map(|g| g.time_s).sum();
        let stake_s: f64 = of_kind.iter().map(|g| g.stake_s).sum();
        let named: Vec<String> = of_kind
            .iter()
            .take(3)
            .map(|g| {
                let who = match g.ops {
                    1 => g.first.clone(),
                    n => format!("{} and {} ops like it", g.first, n - 1),
                };
                format!(
                    "{who}: {} FLOP/byte, {:.1}%",
                    g.key.1,
                    100.0 * g.time_s / a.step_time_s
                )
            })
            .collect();
        let more = of_kind.len().saturating_sub(3);
        let more = if more > 0 {
            format!("; {more} more kinds")
        } else {
            String::new()
        };
        let what = if ops == 1 {
            "1 matmul is".to_string()
        } else {
            format!("{ops} matmuls are")
        };
        out.push((
            stake_s,
            format!(
                "{what} memory-bound ({:.1}% of step; {}{more}): on {} a {dtype} matmul becomes \
                 compute-bound above ~{:.0} FLOP/byte; a larger batch per device (or fewer, \
                 larger matmuls) raises it",
                100.0 * time_s / a.step_time_s,
                named.join("; "),
                chip.id,
                f64::from_bits(ridge_bits),
            ),
        ));
    }
}

struct MemoryBoundGroup {
    key: (&'static str, String),
    first: String,
    ridge: f64,
    ops: usize,
    time_s: f64,
    stake_s: f64,
}

/// Exposed communication, by kind of collective and the torus axes it runs
/// over (where a mesh axis was placed), worth a hint from this share of the
/// step.
const COMM_HINT_SHARE_PCT: f64 = 1.0;

/// Communication hints, ranked by the time they expose: one per kind of
/// collective over one set of torus axes exposing at least
/// [`COMM_HINT_SHARE_PCT`] of the step, with the fix for that kind (which
/// parallelism it serves, and what moves it off the critical path); a
/// statement of the totals when no such group stands out.
fn communication_hints(a: &Analysis, out: &mut Vec<(f64, String)>) {
    let c = &a.communication;
    if c.communication_s <= 0.0 {
        return;
    }
    let share = |t: f64| 100.0 * t / a.step_time_s;
    let mut groups: Vec<CommGroup> = Vec::new();
    for s in &c.collectives {
        // Gathers and scatters share a fix (both are FSDP's): one hint.
        let family = match s.kind.as_str() {
            "all-gather" | "reduce-scatter" => "all-gathers and reduce-scatters".to_string(),
            kind => format!("{kind}s"),
        };
        let key = (family, s.axes.join(","), s.group_size, s.is_async);
        let at = groups.iter().position(|g| g.key == key);
        let g = match at {
            Some(i) => &mut groups[i],
            None => {
                groups.push(CommGroup {
                    key,
                    names: Vec::new(),
                    exposed_s: 0.0,
                });
                groups.last_mut().expect("just pushed")
            }
        };
        g.exposed_s += s.exposed_s;
        if s.exposed_s > 0.0 {
            g.names.push((s.exposed_s, s.name.clone()));
        }
    }
    let mut any = false;
    for g in &mut groups {
        if share(g.exposed_s) < COMM_HINT_SHARE_PCT {
            continue;
        }
        any = true;
        g.names.sort_by(|x, y| y.0.total_cmp(&x.0));
        let (family, axes, group_size, is_async) = &g.key;
        let longest: Vec<&str> = g.names.iter().map(|n| n.1.as_str()).collect();
        out.push((
            g.exposed_s,
            format!(
                "{family} over torus axes {axes} (groups of {group_size}) expose {:.1}% of the \
                 step ({}): {}",
                share(g.exposed_s),
                name_list(&longest),
                communication_fix(family, axes, *is_async)
            ),
        ));
    }
    if !any {
        out.push((
            0.0,
            format!(
                "communication takes {:.1}% of the step ({:.1}% exposed, {:.1}% hidden behind \
                 compute)",
                share(c.communication_s),
                share(c.exposed_communication_s),
                share(c.communication_s - c.exposed_communication_s)
            ),
        ));
    }
}

/// What takes a family of collectives off the critical path.
fn communication_fix(family: &str, axes: &str, is_async: bool) -> &'static str {
    if !is_async {
        return "they run synchronously, so no compute hides them: let XLA make them \
                asynchronous (tpusim's TPU compiler does unless --as-given)";
    }
    if axes.split(',').any(|a| a == "dcn") {
        return "they cross slices over DCN: map the mesh axis they run over to ICI inside a \
                slice and keep only data parallelism (one gradient reduction per step) across \
                slices";
    }
    match family {
        "all-gathers and reduce-scatters" => {
            "these are usually FSDP's weight gathers and gradient scatters: shard weights over a \
             mesh axis of fewer chips (more pure data parallelism, if memory allows) or give \
             each device a larger batch so each layer's compute covers them"
        }
        "all-reduces" => {
            "per-layer all-reduces are tensor parallelism, whose cost per chip grows with \
             the axis: put the model axis on fewer chips, or split each into a reduce-scatter \
             and an all-gather around the layer's element-wise ops (sequence parallelism) so \
             compute hides them"
        }
        "all-to-alls" => {
            "all-to-alls are expert (or sequence) parallelism: put that mesh axis on fewer \
             chips, or lower the expert capacity factor"
        }
        _ => {
            "point-to-point transfers (pipeline stages, halos, collective-matmul chunks): \
             give each independent compute to overlap, or run the ring on a wrapping torus axis"
        }
    }
}

struct CommGroup {
    /// (family, torus axes, group size, async).
    key: (String, String, u32, bool),
    /// Collectives with exposed time, with it.
    names: Vec<(f64, String)>,
    exposed_s: f64,
}

/// Whole-step hints: a step mostly HBM-bound, or mostly copying and slicing,
/// gets one hint naming its longest ops and the fix, whatever each op's share.
fn class_hints(a: &Analysis, out: &mut Vec<(f64, String)>) {
    let share = |t: f64| 100.0 * t / a.step_time_s;
    let longest = |keep: &dyn Fn(&OpStat) -> bool| -> String {
        let names: Vec<String> = a
            .ops
            .iter()
            .filter(|o| keep(o))
            .take(3)
            .map(|o| format!("{} {:.1}%", o.name, share(o.time_s)))
            .collect();
        names.join(", ")
    };
    let hbm = a.time_by_bound.get(&Bound::Hbm).copied().unwrap_or(0.0);
    if share(hbm) >= CLASS_HINT_SHARE_PCT {
        out.push((
            hbm,
            format!(
                "{:.1}% of the step is HBM-bound (longest: {}): raise FLOPs per byte: a \
                 larger batch per device for small matmuls, fusing elementwise chains into their \
                 producers, keeping intermediates in VMEM (a Pallas kernel)",
                share(hbm),
                longest(&|o| o.bound == Bound::Hbm)
            ),
        ));
    }
    let moving = a
        .time_by_category
        .get(&Category::DataMovement)
        .copied()
        .unwrap_or(0.0);
    if share(moving) >= CLASS_HINT_SHARE_PCT {
        out.push((
            moving,
            format!(
                "copies and slices take {:.1}% of the step (longest: {}): fuse each copy or \
                 slice into its consumer, update caches in place (dynamic_update_slice on a \
                 donated buffer) instead of copying them",
                share(moving),
                longest(&|o| o.category == Category::DataMovement)
            ),
        ));
    }
}
