//! The program replayed in time on one device: when each op runs, on which
//! lane, in which loop iteration.
//!
//! The walk is the one [`crate::analyze`] sums over (same fusion of
//! unoptimized modules, trip counts, branches and [`op_time`] per op), but it
//! unrolls loops and keeps a clock per lane:
//! - **TensorCore**: every op the single-device model times, back to back.
//!   For a module without collectives (or with [`crate::LocalOnly`]) the sum
//!   of TensorCore durations is `Analysis::step_time_s`.
//! - **Ici**: a communication instruction the [`CommModel`] prices. A
//!   synchronous collective blocks the TensorCore for its transfer; an async
//!   `-start` issues it and compute goes on until the matching `-done` waits
//!   for it. Zero-length TensorCore events mark the `-start` and `-done`;
//!   the three events share a `flow` id.
//! - **Dma**: `copy-start` transfers, which overlap compute until `copy-done`.
//!
//! Loops are unrolled until [`MAX_EVENTS`] events (or loop iterations) have
//! been recorded; the remaining iterations advance the clock without events
//! and `truncated` is set, so `step_s` is always the whole program's time.

use crate::comm::CommModel;
use crate::memory::{element_leaves, leaf_count, BufId, BufferKind, Mem, MemoryProfile, Value};
use crate::op::op_time_in;
use crate::{branches, constant_branch, loop_trip_counts, timed_module, trips};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use tpusim_arch::Chip;
use tpusim_hlo::{Cancel, Cancelled, CompId, InstrId, Module, OpCategory, Opcode};

/// Events recorded before loops stop being unrolled.
pub const MAX_EVENTS: usize = 200_000;

/// Nesting limit for calls, loops and branches (as in the analysis walk).
const MAX_DEPTH: u32 = 64;

/// The hardware resource an event occupies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    TensorCore,
    Ici,
    Dma,
}

impl Lane {
    pub fn name(self) -> &'static str {
        match self {
            Lane::TensorCore => "TensorCore",
            Lane::Ici => "ICI",
            Lane::Dma => "DMA",
        }
    }
}

/// One execution of one instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// An instruction of [`Schedule::module`].
    pub instr: InstrId,
    pub start_s: f64,
    pub dur_s: f64,
    pub lane: Lane,
    /// Iteration of the innermost enclosing while loop, from 0.
    pub iteration: Option<u64>,
    /// Events of one async transfer (`-start` marker, transfer, `-done`
    /// marker) share this id.
    pub flow: Option<u32>,
}

impl Event {
    pub fn end_s(&self) -> f64 {
        self.start_s + self.dur_s
    }
}

/// The program on one device, in time.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// In start order per lane (lanes interleaved in issue order).
    pub events: Vec<Event>,
    /// The whole program's time, including iterations not recorded.
    pub step_s: f64,
    /// Whether loop iterations were left out after [`MAX_EVENTS`].
    pub truncated: bool,
    /// The fused copy the events refer to, when the input had no fusions.
    pub fused: Option<Module>,
}

impl Schedule {
    /// The module the events' instruction ids index: the fused copy if one
    /// was made, else `original` (the module passed to [`schedule`]).
    pub fn module<'a>(&'a self, original: &'a Module) -> &'a Module {
        self.fused.as_ref().unwrap_or(original)
    }

    /// Sum of the durations on one lane.
    pub fn busy_s(&self, lane: Lane) -> f64 {
        self.events
            .iter()
            .filter(|e| e.lane == lane)
            .fold(0.0, |t, e| t + e.dur_s)
    }
}

/// The named scope of an instruction: its `metadata={op_name="jit(f)/a/b"}`
/// split at `/` (for a fusion without metadata, that of its fused root).
/// Empty when there is none.
pub fn op_name_path(m: &Module, id: InstrId) -> Vec<&str> {
    let mut ins = m.instr(id);
    for _ in 0..16 {
        if let Some(name) = ins.metadata().and_then(|md| md.op_name.as_deref()) {
            return name.split('/').filter(|s| !s.is_empty()).collect();
        }
        match ins.opcode {
            Opcode::Fusion => match ins.called_computations().first() {
                Some(&c) => ins = m.instr(m.comp(c).root),
                None => break,
            },
            _ => break,
        }
    }
    Vec::new()
}

/// Replays `m` on one device of `chip`, pricing communication with `comm`.
pub fn schedule(m: &Module, chip: &Chip, comm: &dyn CommModel) -> Schedule {
    replay(m, chip, comm, false, &Cancel::default()).0
}

/// The schedule and the HBM use along it (see [`crate::memory`]).
pub fn schedule_with_memory(
    m: &Module,
    chip: &Chip,
    comm: &dyn CommModel,
) -> (Schedule, MemoryProfile) {
    let (s, mem) = replay(m, chip, comm, true, &Cancel::default());
    (s, mem.unwrap_or_default())
}

/// [`schedule_with_memory`], stopping at the next loop iteration once
/// `cancel` is set.
pub fn schedule_with_memory_cancellable(
    m: &Module,
    chip: &Chip,
    comm: &dyn CommModel,
    cancel: &Cancel,
) -> Result<(Schedule, MemoryProfile), Cancelled> {
    let (s, mem) = replay(m, chip, comm, true, cancel);
    // A replay cut short is never handed out: the flag is sticky.
    cancel.check()?;
    Ok((s, mem.unwrap_or_default()))
}

fn replay(
    m: &Module,
    chip: &Chip,
    comm: &dyn CommModel,
    track_memory: bool,
    cancel: &Cancel,
) -> (Schedule, Option<MemoryProfile>) {
    let timed = timed_module(m);
    let (events, step_s, truncated, profile) =
        replay_timed(timed.module(), m, chip, comm, track_memory, cancel);
    let schedule = Schedule {
        events,
        step_s,
        truncated,
        fused: timed.into_copy(),
    };
    (schedule, profile)
}

/// The memory profile of `timed` (a module prepared by
/// [`crate::timed_module`] from `original`), collectives priced by `comm`
/// as the views' replay prices them, so the peak falls at the same time in
/// the analysis and in the report.
pub(crate) fn memory_of(
    timed: &Module,
    original: &Module,
    chip: &Chip,
    comm: &dyn CommModel,
    cancel: &Cancel,
) -> MemoryProfile {
    replay_timed(timed, original, chip, comm, true, cancel)
        .3
        .unwrap_or_default()
}

/// Events, step time, truncation and memory of a replay of `tm`; loop trip
/// counts are read from `original`.
fn replay_timed(
    tm: &Module,
    original: &Module,
    chip: &Chip,
    comm: &dyn CommModel,
    track_memory: bool,
    cancel: &Cancel,
) -> (Vec<Event>, f64, bool, Option<MemoryProfile>) {
    let trip_counts = loop_trip_counts(original, tm)
        .iter()
        .map(|(&id, t)| (id, trips(t)))
        .collect();
    let mut uses = vec![0u32; tm.instrs.len()];
    if track_memory {
        for ins in &tm.instrs {
            for &o in &ins.operands {
                uses[o.index()] += 1;
            }
        }
    }
    let mut s = Replay {
        m: tm,
        chip,
        comm,
        trip_counts,
        op_times: HashMap::new(),
        comm_times: HashMap::new(),
        sharing: HashMap::new(),
        clock: 0.0,
        ici_free: 0.0,
        dma_free: 0.0,
        pending: HashMap::new(),
        events: Vec::new(),
        budget: 0,
        emit: true,
        truncated: false,
        next_flow: 0,
        iteration: None,
        mem: track_memory.then(|| Mem::new(tm)),
        uses,
        cancel: cancel.clone(),
        pipelined: crate::pipelining::pipelined_dones(tm, is_done),
        deferred: HashMap::new(),
    };
    let entry = tm.entry;
    let mut args: Vec<Value> = Vec::new();
    if let Some(mem) = s.mem.as_mut() {
        for (number, &p) in tm.comp(entry).params.iter().enumerate() {
            args.push(mem.parameter(number, p, &tm.instr(p).shape));
        }
    }
    let outputs = s.comp(entry, args, 0);
    let profile = s.mem.take().map(|mem| mem.finish(tm, chip, &outputs));
    (s.events, s.clock, s.truncated, profile)
}

/// An async transfer in flight: when it ends and its flow id.
#[derive(Clone, Copy)]
struct Pending {
    end_s: f64,
    flow: Option<u32>,
}

struct Replay<'a> {
    m: &'a Module,
    chip: &'a Chip,
    comm: &'a dyn CommModel,
    trip_counts: HashMap<InstrId, u64>,
    op_times: HashMap<InstrId, f64>,
    /// Each communication instruction's time from `comm` (`None`: not one it
    /// prices), asked once: a loop runs the same instruction every iteration.
    comm_times: HashMap<InstrId, Option<(f64, bool)>>,
    /// Each op's operands whose dying buffer its result may take over, with
    /// the bytes that buffer must have (`None`: any; an in-place update),
    /// worked out once: a loop runs the same op every iteration.
    sharing: HashMap<InstrId, Vec<(usize, Option<u64>)>>,
    /// TensorCore clock.
    clock: f64,
    ici_free: f64,
    dma_free: f64,
    pending: HashMap<InstrId, Pending>,
    events: Vec<Event>,
    /// Events plus unrolled iterations so far, against [`MAX_EVENTS`].
    budget: usize,
    /// False while measuring a computation's duration without recording.
    emit: bool,
    truncated: bool,
    next_flow: u32,
    iteration: Option<u64>,
    /// Buffer liveness, when tracked.
    mem: Option<Mem>,
    /// Static use count of every instruction (operand slots naming it).
    uses: Vec<u32>,
    /// Once set, loops stop being unrolled (the replay is then discarded).
    cancel: Cancel,
    /// `-done`s of collectives pipelined across loop iterations.
    pipelined: std::collections::HashSet<InstrId>,
    /// Their transfers in flight: the next iteration's same `-done` (or the
    /// loop's end) waits for them.
    deferred: HashMap<InstrId, Pending>,
}

/// Values of one invocation of a computation.
#[derive(Default)]
struct Frame {
    values: HashMap<InstrId, Value>,
    remaining: HashMap<InstrId, u32>,
}

impl Replay<'_> {
    fn push(&mut self, instr: InstrId, start_s: f64, dur_s: f64, lane: Lane, flow: Option<u32>) {
        if self.emit {
            self.budget += 1;
            self.events.push(Event {
                instr,
                start_s,
                dur_s,
                lane,
                iteration: self.iteration,
                flow,
            });
        }
    }

    /// The allocator, while memory is tracked and events recorded.
    fn mem(&mut self) -> Option<&mut Mem> {
        if self.emit {
            self.mem.as_mut()
        } else {
            None
        }
    }

    fn release(&mut self, v: Value) {
        let t = self.clock;
        if let Some(mem) = self.mem() {
            mem.release(v, t);
        }
    }

    fn share(&mut self, v: &[BufId]) -> Value {
        match self.mem() {
            Some(mem) => mem.share(v),
            None => Vec::new(),
        }
    }

    fn alloc(&mut self, id: InstrId) -> Value {
        let (t, m) = (self.clock, self.m);
        match self.mem() {
            Some(mem) => mem.alloc(id, &m.instr(id).shape, BufferKind::Temporary, t),
            None => Vec::new(),
        }
    }

    /// Runs computation `c` with `args` (owned: released at the end) and
    /// returns its root's value (owned by the caller).
    fn comp(&mut self, c: CompId, args: Vec<Value>, depth: u32) -> Value {
        let m = self.m;
        let comp = m.comp(c);
        if depth > MAX_DEPTH {
            for a in args {
                self.release(a);
            }
            return Vec::new();
        }
        let tracking = self.mem().is_some();
        let mut frame = Frame::default();
        let mut args = args;
        for &id in &comp.instrs {
            let v = match m.instr(id).parameter_number {
                // The entry hands its parameters over: a donated one may die
                // at its last use (the caller keeps the others alive).
                Some(k) if depth == 0 && m.instr(id).opcode == Opcode::Parameter => {
                    let k = usize::try_from(k).unwrap_or(usize::MAX);
                    args.get_mut(k).map(std::mem::take).unwrap_or_default()
                }
                _ => self.instr(id, &args, &frame, depth),
            };
            if !tracking {
                continue;
            }
            frame.values.insert(id, v);
            let ins = m.instr(id);
            for &o in &ins.operands {
                let left = frame
                    .remaining
                    .entry(o)
                    .or_insert_with(|| self.uses[o.index()]);
                *left = left.saturating_sub(1);
                if *left == 0 && o != comp.root {
                    if let Some(v) = frame.values.remove(&o) {
                        self.release(v);
                    }
                }
            }
            if self.uses[id.index()] == 0 && id != comp.root {
                if let Some(v) = frame.values.remove(&id) {
                    self.release(v);
                }
            }
        }
        let out = frame.values.remove(&comp.root).unwrap_or_default();
        for (_, v) in frame.values {
            self.release(v);
        }
        for a in args {
            self.release(a);
        }
        out
    }

    /// A new reference to operand `k`'s value.
    fn operand(&mut self, frame: &Frame, id: InstrId, k: usize) -> Value {
        let v = self
            .m
            .instr(id)
            .operands
            .get(k)
            .and_then(|o| frame.values.get(o));
        match v {
            Some(v) => {
                let v = v.clone();
                self.share(&v)
            }
            None => Vec::new(),
        }
    }

    /// New references to every operand's value, one value per operand.
    fn operands(&mut self, frame: &Frame, id: InstrId) -> Vec<Value> {
        (0..self.m.instr(id).operands.len())
            .map(|k| self.operand(frame, id, k))
            .collect()
    }

    fn instr(&mut self, id: InstrId, args: &[Value], frame: &Frame, depth: u32) -> Value {
        let m = self.m;
        let ins = m.instr(id);
        match ins.opcode {
            Opcode::While => self.while_loop(id, frame, depth),
            Opcode::Conditional => self.conditional(id, frame, depth),
            Opcode::Call => {
                let mut out = Vec::new();
                for c in ins.called_computations() {
                    let a = self.operands(frame, id);
                    let v = self.comp(c, a, depth + 1);
                    self.release(std::mem::replace(&mut out, v));
                }
                out
            }
            Opcode::AsyncStart => match self.comm_time(id) {
                Some((time_s, blocking)) => {
                    let v = self.start_value(id, frame);
                    self.start_comm(id, time_s, blocking);
                    v
                }
                None => {
                    for c in ins.called_computations() {
                        let a = self.operands(frame, id);
                        let v = self.comp(c, a, depth + 1);
                        self.release(v);
                    }
                    self.start_value(id, frame)
                }
            },
            op if is_done(op) && self.pipelined.contains(&id) => {
                self.pipeline_transfer(id);
                self.done_value(id, frame)
            }
            op if is_done(op) => {
                self.finish_transfer(id);
                self.done_value(id, frame)
            }
            Opcode::Parameter => {
                let k = ins.parameter_number.unwrap_or(0).max(0) as usize;
                match args.get(k) {
                    Some(a) => {
                        let a = a.clone();
                        self.share(&a)
                    }
                    None => Vec::new(),
                }
            }
            Opcode::Constant => {
                let t = self.clock;
                match self.mem() {
                    Some(mem) => mem.constant(id, &ins.shape, t),
                    None => Vec::new(),
                }
            }
            Opcode::Tuple => self.operands(frame, id).concat(),
            Opcode::GetTupleElement => {
                let whole = self.operand(frame, id, 0);
                let range = ins.operands.first().and_then(|&t| {
                    element_leaves(&m.instr(t).shape, ins.attr_int("index")?.max(0) as usize)
                });
                self.select(whole, range)
            }
            Opcode::Reshape if crate::op::reshape_is_bitcast(m, id) => self.operand(frame, id, 0),
            Opcode::Bitcast
            | Opcode::AddDependency
            | Opcode::OptBarrier
            | Opcode::Domain
            | Opcode::AsyncUpdate => self.operand(frame, id, 0),
            _ if crate::op::is_free_instr(m, id) => self.alloc(id),
            Opcode::CopyStart => {
                let v = self.start_value(id, frame);
                let t = self.op_time(id);
                self.start_transfer(id, t, Lane::Dma);
                v
            }
            op if is_comm(op) => match self.comm_time(id) {
                Some((time_s, blocking)) if is_async_start(op) => {
                    let v = self.start_value(id, frame);
                    self.start_comm(id, time_s, blocking);
                    v
                }
                Some((time_s, _)) => {
                    let v = self.alloc(id);
                    let start = self.clock.max(self.ici_free);
                    self.push(id, start, time_s, Lane::Ici, None);
                    self.ici_free = start + time_s;
                    self.clock = self.ici_free;
                    v
                }
                None => self.op(id),
            },
            _ => match self.in_place_value(id, frame) {
                Some(v) => {
                    self.run_op(id);
                    v
                }
                None => self.op(id),
            },
        }
    }

    /// The result of op `id` as the buffer of an operand that dies at it,
    /// when XLA's buffer assignment would share them: an in-place update (a
    /// dynamic-update-slice, bare or fused) and its buffer, or an op
    /// elementwise on a same-shaped operand ([`crate::memory::shareable_operands`]).
    /// Only a temporary is taken over (not an entry parameter or constant),
    /// and only at its last use in the computation; `None` otherwise (the op
    /// gets a fresh buffer).
    fn in_place_value(&mut self, id: InstrId, frame: &Frame) -> Option<Value> {
        let m = self.m;
        if self.mem()?.writes_into_parameter(id) {
            return None;
        }
        let candidates = self
            .sharing
            .entry(id)
            .or_insert_with(|| match crate::tensorcore::in_place_update(m, id, 128) {
                Some((k, _)) => vec![(k, None)],
                None => {
                    let bytes = m.instr(id).shape.byte_size();
                    crate::memory::shareable_operands(m, id)
                        .into_iter()
                        .map(|k| (k, Some(bytes)))
                        .collect()
                }
            })
            .clone();
        candidates
            .into_iter()
            .find_map(|(k, bytes)| self.dying_buffer(id, k, bytes, frame))
    }

    /// Operand `k` of `id` as a new reference to its one buffer, when that
    /// buffer is a temporary (of `bytes`, when given) and `id` is the
    /// operand's last use in the computation.
    fn dying_buffer(
        &mut self,
        id: InstrId,
        k: usize,
        bytes: Option<u64>,
        frame: &Frame,
    ) -> Option<Value> {
        let o = *self.m.instr(id).operands.get(k)?;
        let left = frame
            .remaining
            .get(&o)
            .copied()
            .unwrap_or(self.uses[o.index()]);
        let buffer = frame.values.get(&o).filter(|v| v.len() == 1)?.clone();
        let mem = self.mem()?;
        let kind = mem.kind(buffer[0])?;
        let same_size = bytes.is_none_or(|b| mem.bytes(buffer[0]) == Some(b));
        if left != 1 || kind != BufferKind::Temporary || !same_size {
            return None;
        }
        Some(self.share(&buffer))
    }

    /// Keeps the leaves in `range` of `v` and releases the rest.
    fn select(&mut self, v: Value, range: Option<std::ops::Range<usize>>) -> Value {
        match range {
            Some(r) if r.end <= v.len() => {
                let mut rest = v;
                let kept: Value = rest.drain(r).collect();
                self.release(rest);
                kept
            }
            _ => v,
        }
    }

    /// The value of an async `-start`: its operands (tuple element 0, or 1
    /// for `copy-start`, whose element 0 is the destination) where the shape
    /// holds them, fresh buffers for the rest.
    fn start_value(&mut self, id: InstrId, frame: &Frame) -> Value {
        let m = self.m;
        let ins = m.instr(id);
        let Some(elements) = ins.shape.tuple_elements() else {
            return self.alloc(id);
        };
        let operand_slot = usize::from(ins.opcode == Opcode::CopyStart);
        let fresh = self.alloc(id);
        if self.mem().is_none() {
            return fresh;
        }
        let Some(r) = element_leaves(&ins.shape, operand_slot) else {
            return fresh;
        };
        let ops = self.operands(frame, id).concat();
        if ops.len() != r.len() || elements.len() <= operand_slot {
            self.release(ops);
            return fresh;
        }
        // Swap the fresh buffers of the operand slot for the operands.
        let mut v = fresh;
        let replaced: Value = v.splice(r, ops).collect();
        self.release(replaced);
        v
    }

    /// The value of a `-done`: the result element of its `-start`.
    fn done_value(&mut self, id: InstrId, frame: &Frame) -> Value {
        let m = self.m;
        let Some(&start) = m.instr(id).operands.first() else {
            return Vec::new();
        };
        let v = self.operand(frame, id, 0);
        let start_shape = &m.instr(start).shape;
        let k = usize::from(m.instr(start).opcode != Opcode::CopyStart);
        match start_shape.tuple_elements() {
            Some(t) if t.len() > k && leaf_count(&t[k]) == leaf_count(&m.instr(id).shape) => {
                self.select(v, element_leaves(start_shape, k))
            }
            _ => v,
        }
    }

    /// The transfer time of communication op `id`, and whether the
    /// TensorCore waits for it at its start ([`crate::CommCost::blocking`]).
    fn comm_time(&mut self, id: InstrId) -> Option<(f64, bool)> {
        let (m, comm) = (self.m, self.comm);
        *self
            .comm_times
            .entry(id)
            .or_insert_with(|| comm.cost(m, id).map(|c| (c.time_s, c.blocking)))
    }

    /// Starts the async transfer `id`; a blocking one is waited for at once.
    fn start_comm(&mut self, id: InstrId, time_s: f64, blocking: bool) {
        self.start_transfer(id, time_s, Lane::Ici);
        if blocking {
            if let Some(p) = self.pending.get(&id) {
                self.clock = self.clock.max(p.end_s);
            }
        }
    }

    fn op_time(&mut self, id: InstrId) -> f64 {
        let (m, chip) = (self.m, self.chip);
        *self
            .op_times
            .entry(id)
            .or_insert_with(|| op_time_in(m, chip, id, crate::IN_PROGRAM).time_s)
    }

    fn op(&mut self, id: InstrId) -> Value {
        let v = self.alloc(id);
        self.run_op(id);
        v
    }

    /// Times op `id` on the TensorCore from the current clock.
    fn run_op(&mut self, id: InstrId) {
        let t = self.op_time(id);
        self.push(id, self.clock, t, Lane::TensorCore, None);
        self.clock += t;
    }

    fn start_transfer(&mut self, id: InstrId, dur: f64, lane: Lane) {
        let flow = self.emit.then(|| {
            self.next_flow += 1;
            self.next_flow
        });
        self.push(id, self.clock, 0.0, Lane::TensorCore, flow);
        let free = match lane {
            Lane::Dma => &mut self.dma_free,
            _ => &mut self.ici_free,
        };
        let start = self.clock.max(*free);
        *free = start + dur;
        let end_s = start + dur;
        self.push(id, start, dur, lane, flow);
        self.pending.insert(id, Pending { end_s, flow });
    }

    fn finish_transfer(&mut self, id: InstrId) {
        let Some(start) = start_of(self.m, id) else {
            return;
        };
        let Some(p) = self.pending.remove(&start) else {
            return;
        };
        self.clock = self.clock.max(p.end_s);
        self.push(id, self.clock, 0.0, Lane::TensorCore, p.flow);
    }

    /// A pipelined `-done`: this iteration waits for the previous
    /// iteration's transfer only; its own completes during the next one.
    fn pipeline_transfer(&mut self, id: InstrId) {
        if let Some(prev) = self.deferred.remove(&id) {
            self.clock = self.clock.max(prev.end_s);
        }
        let Some(start) = start_of(self.m, id) else {
            return;
        };
        let Some(p) = self.pending.remove(&start) else {
            return;
        };
        self.push(id, self.clock, 0.0, Lane::TensorCore, p.flow);
        self.deferred.insert(id, p);
    }

    /// At a loop's end, its body's pipelined transfers are waited for.
    fn drain_pipelined(&mut self, body: Option<CompId>) {
        let m = self.m;
        let mine: Vec<InstrId> = self
            .deferred
            .keys()
            .copied()
            .filter(|&d| Some(m.instr(d).parent) == body)
            .collect();
        for d in mine {
            if let Some(p) = self.deferred.remove(&d) {
                self.clock = self.clock.max(p.end_s);
            }
        }
    }

    fn while_loop(&mut self, id: InstrId, frame: &Frame, depth: u32) -> Value {
        let m = self.m;
        let ins = m.instr(id);
        let n = self.trip_counts.get(&id).copied().unwrap_or(1);
        let body = ins.attr_comp("body");
        let cond = ins.attr_comp("condition");
        let parts: Vec<CompId> = body.iter().chain(cond.iter()).copied().collect();
        let mut carried = self.operand(frame, id, 0);
        let t = self.clock;
        if let Some(mem) = self.mem() {
            carried = mem.distinct(carried, id, t);
        }
        let outer = self.iteration;
        let mut i = 0;
        while i < n && self.emit && self.budget < MAX_EVENTS && !self.cancel.is_cancelled() {
            self.iteration = Some(i);
            self.budget += 1;
            if let Some(b) = body {
                let arg = self.share(&carried);
                let next = self.comp(b, vec![arg], depth + 1);
                if self.mem().is_some() {
                    let old = std::mem::replace(&mut carried, next);
                    self.release(old);
                }
            }
            if let Some(c) = cond {
                let arg = self.share(&carried);
                let p = self.comp(c, vec![arg], depth + 1);
                self.release(p);
            }
            i += 1;
        }
        self.iteration = outer;
        if i < n {
            if self.emit {
                self.truncated = true;
            }
            let per = self.measure(&parts, depth + 1);
            self.clock += per * (n - i) as f64;
        }
        self.drain_pipelined(body);
        carried
    }

    /// Time one pass over `comps` would take, without recording or keeping
    /// any state but the answer.
    fn measure(&mut self, comps: &[CompId], depth: u32) -> f64 {
        let saved = (
            self.clock,
            self.ici_free,
            self.dma_free,
            self.emit,
            self.pending.clone(),
            self.deferred.clone(),
        );
        self.emit = false;
        for &c in comps {
            self.comp(c, Vec::new(), depth);
        }
        let dur = self.clock - saved.0;
        (
            self.clock,
            self.ici_free,
            self.dma_free,
            self.emit,
            self.pending,
            self.deferred,
        ) = saved;
        dur
    }

    fn conditional(&mut self, id: InstrId, frame: &Frame, depth: u32) -> Value {
        let m = self.m;
        let branches = branches(m.instr(id));
        if branches.is_empty() {
            return Vec::new();
        }
        let k = constant_branch(m, id, branches.len()).unwrap_or_else(|| {
            // The longest branch, as the analysis times it (first on ties).
            let mut best = (0, f64::NEG_INFINITY);
            for (k, &b) in branches.iter().enumerate() {
                let t = self.measure(&[b], depth + 1);
                if t > best.1 {
                    best = (k, t);
                }
            }
            best.0
        });
        let arg = self.operand(frame, id, k + 1);
        self.comp(branches[k], vec![arg], depth + 1)
    }
}

fn is_done(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        AsyncDone
            | AllGatherDone
            | AllReduceDone
            | CollectivePermuteDone
            | CopyDone
            | SendDone
            | RecvDone
    )
}

fn is_async_start(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        AllGatherStart | AllReduceStart | CollectivePermuteStart | Send | Recv
    )
}

fn is_comm(op: Opcode) -> bool {
    op.category() == OpCategory::Collective || matches!(op, Opcode::Send | Opcode::Recv)
}

/// The `-start` a `-done` completes (through any `async-update`s).
fn start_of(m: &Module, done: InstrId) -> Option<InstrId> {
    let mut id = *m.instr(done).operands.first()?;
    for _ in 0..64 {
        if m.instr(id).opcode != Opcode::AsyncUpdate {
            return Some(id);
        }
        id = *m.instr(id).operands.first()?;
    }
    None
}
