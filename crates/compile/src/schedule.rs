//! Latency-hiding scheduler: a list scheduler over the chip's op costs that
//! issues every async collective as early as its operands allow and waits
//! for it as late as the program needs it, so independent compute runs while
//! it transfers (XLA's LatencyHidingScheduler, top-down). Limits, as XLA's:
//! - at most `collective_overlap_limit` collectives of one kind in flight;
//! - a start is issued early only while the bytes live (estimated along the
//!   schedule) plus its result stay under the memory limit (the chip's HBM
//!   less the entry parameters; in a loop body or callee, less also what its
//!   caller holds live where it calls it); otherwise it waits until nothing
//!   else can run;
//! - of the starts that may issue, the one whose result the program needs
//!   first goes first.
//!
//! Compute runs in its original relative order where it can; a `-done` is
//! placed when the original order reaches its first user, or earlier when
//! its transfer is over and another collective of its kind is waiting for
//! the slot. A `-done` whose transfer is still running when its user comes
//! waits while ready compute from later in the order fits in memory and
//! fills the stall (XLA's scheduler moves independent work between a
//! collective's start and done the same way).

use crate::util::{control_computations, predecessors};
use crate::Changed;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tpusim_arch::Chip;
use tpusim_hlo::passes::program_callees;
use tpusim_hlo::{CompId, InstrId, Module, Opcode};
use tpusim_perf::CommModel;

/// Scheduler inputs.
pub struct SchedulerLimits {
    pub overlap_limit: u32,
    pub memory_limit_bytes: u64,
}

/// Reschedules every control computation; returns how many moved.
pub fn latency_hiding_schedule(
    m: &mut Module,
    chip: &Chip,
    comm: &dyn CommModel,
    limits: &SchedulerLimits,
) -> Changed {
    let mut moved = 0;
    // Callers first: a loop body or callee gets the memory its caller left
    // free where it calls it.
    let mut budget: FxHashMap<CompId, u64> = FxHashMap::default();
    for c in callers_first(m) {
        let limit = budget.get(&c).copied().unwrap_or(limits.memory_limit_bytes);
        let (order, calls) = schedule_computation(m, c, chip, comm, limits.overlap_limit, limit);
        for (callee, live) in calls {
            let left = limit.saturating_sub(live);
            budget
                .entry(callee)
                .and_modify(|b| *b = (*b).min(left))
                .or_insert(left);
        }
        let comp = &mut m.comps[c.index()];
        if order.len() == comp.instrs.len() && order != comp.instrs {
            moved += 1;
            comp.instrs = order;
        }
    }
    m.config.is_scheduled = Some(true);
    Changed::count(moved, |n| format!("{n} computations rescheduled"))
}

/// Control computations, each after every computation that calls it (the
/// rest, unreachable from the entry, last).
fn callers_first(m: &Module) -> Vec<CompId> {
    let all = control_computations(m);
    let mut seen: rustc_hash::FxHashSet<CompId> = rustc_hash::FxHashSet::default();
    let mut order = vec![m.entry];
    seen.insert(m.entry);
    let mut k = 0;
    while k < order.len() {
        let c = order[k];
        k += 1;
        for callee in m
            .comp(c)
            .instrs
            .iter()
            .flat_map(|&i| program_callees(m.instr(i)))
        {
            if seen.insert(callee) {
                order.push(callee);
            }
        }
    }
    let control: rustc_hash::FxHashSet<CompId> = all.iter().copied().collect();
    order.retain(|c| control.contains(c));
    order.extend(all.into_iter().filter(|c| !seen.contains(c)));
    order
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Compute,
    /// Async start of a collective family (index into the in-flight table).
    Start(usize),
    Done(usize),
}

/// Whether `id` starts or ends an async collective, and its kind: XLA's
/// scheduler gives each kind its own resource (all-reduce, all-gather,
/// collective-permute, and, behind `async-start`, reduce-scatter, all-to-all
/// and any other wrapped op).
fn family(m: &Module, id: InstrId) -> Option<(bool, usize)> {
    let op = m.instr(id).opcode;
    Some(match op {
        Opcode::AllReduceStart => (true, 0),
        Opcode::AllReduceDone => (false, 0),
        Opcode::AllGatherStart => (true, 1),
        Opcode::AllGatherDone => (false, 1),
        Opcode::CollectivePermuteStart => (true, 2),
        Opcode::CollectivePermuteDone => (false, 2),
        Opcode::AsyncStart | Opcode::AsyncDone => {
            let kind = match m.async_wrapped_opcode(id) {
                Some(Opcode::ReduceScatter) => 3,
                Some(Opcode::AllToAll) => 4,
                _ => 5,
            };
            (op == Opcode::AsyncStart, kind)
        }
        _ => return None,
    })
}

const FAMILIES: usize = 6;

struct Node {
    id: InstrId,
    role: Role,
    cost_s: f64,
    bytes: u64,
    succs: Vec<usize>,
    preds: Vec<usize>,
    /// For a done: where its first user stood in the original order.
    needed_at: usize,
    /// Compute whose results only feed async starts (e.g. the convert of a
    /// weight shard before its all-gather): run as early as a start.
    feeds_start: bool,
    /// For a start (or compute feeding starts): where the original order
    /// first needs the collective's result. Of the starts that may issue,
    /// the one needed first goes first (earliest deadline).
    deadline: usize,
}

struct State {
    clock: f64,
    live: u64,
    in_flight: [Vec<(usize, f64)>; FAMILIES],
    remaining_uses: Vec<u32>,
    indeg: Vec<usize>,
}

fn build(m: &Module, c: CompId, chip: &Chip, comm: &dyn CommModel) -> Vec<Node> {
    let order = &m.comp(c).instrs;
    let pos: FxHashMap<InstrId, usize> = order.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    let mut nodes: Vec<Node> = order
        .iter()
        .map(|&id| {
            let ins = m.instr(id);
            let role = match family(m, id) {
                Some((true, f)) => Role::Start(f),
                Some((false, f)) => Role::Done(f),
                None => Role::Compute,
            };
            let cost_s = match role {
                Role::Start(_) => comm.cost(m, id).map_or(0.0, |c| c.time_s),
                Role::Done(_) => 0.0,
                Role::Compute if tpusim_perf::is_free_instr(m, id) => 0.0,
                Role::Compute => tpusim_perf::op_time(m, chip, id).time_s,
            };
            let bytes = if allocates(ins.opcode) {
                ins.shape.byte_size()
            } else {
                0
            };
            Node {
                id,
                role,
                cost_s,
                bytes,
                succs: Vec::new(),
                preds: Vec::new(),
                needed_at: usize::MAX,
                feeds_start: false,
                deadline: usize::MAX,
            }
        })
        .collect();
    for k in 0..nodes.len() {
        let mut ps: Vec<usize> = predecessors(m, nodes[k].id)
            .filter_map(|p| pos.get(&p).copied())
            .collect();
        ps.sort_unstable();
        ps.dedup();
        for &p in &ps {
            nodes[p].succs.push(k);
        }
        nodes[k].preds = ps;
    }
    // Where the original order first needs each value: the first user that
    // does work; forwarding users (get-tuple-element, tuple, bitcast) pass
    // the need on from their own users. Users come later, so one reverse
    // sweep suffices.
    let root = pos.get(&m.comp(c).root).copied();
    for k in (0..nodes.len()).rev() {
        let mut at = if Some(k) == root {
            order.len()
        } else {
            usize::MAX
        };
        for &u in &nodes[k].succs {
            let forwards = matches!(
                m.instr(nodes[u].id).opcode,
                Opcode::GetTupleElement | Opcode::Tuple | Opcode::Bitcast
            );
            at = at.min(if forwards { nodes[u].needed_at } else { u });
        }
        nodes[k].needed_at = at;
        let feeds = nodes[k].role == Role::Compute
            && !nodes[k].succs.is_empty()
            && Some(k) != root
            && nodes[k]
                .succs
                .iter()
                .all(|&u| matches!(nodes[u].role, Role::Start(_)) || nodes[u].feeds_start);
        nodes[k].feeds_start = feeds;
        nodes[k].deadline = match nodes[k].role {
            Role::Start(_) => nodes[k]
                .succs
                .iter()
                .map(|&u| nodes[u].needed_at)
                .min()
                .unwrap_or(usize::MAX),
            _ if feeds => nodes[k]
                .succs
                .iter()
                .map(|&u| nodes[u].deadline)
                .min()
                .unwrap_or(usize::MAX),
            _ => usize::MAX,
        };
    }
    nodes
}

/// Ops that name their operands' buffers rather than allocating their own.
fn allocates(op: Opcode) -> bool {
    !matches!(
        op,
        Opcode::Tuple | Opcode::GetTupleElement | Opcode::Bitcast | Opcode::Parameter
    ) && !matches!(
        op,
        Opcode::AllReduceDone
            | Opcode::AllGatherDone
            | Opcode::CollectivePermuteDone
            | Opcode::AsyncDone
    )
}

/// The computation's new order, and for each computation it calls, the
/// bytes live (by the schedule's estimate) where it is called.
fn schedule_computation(
    m: &Module,
    c: CompId,
    chip: &Chip,
    comm: &dyn CommModel,
    overlap_limit: u32,
    memory_limit_bytes: u64,
) -> (Vec<InstrId>, Vec<(CompId, u64)>) {
    let limits = &SchedulerLimits {
        overlap_limit,
        memory_limit_bytes,
    };
    let nodes = build(m, c, chip, comm);
    let n = nodes.len();
    let mut st = State {
        clock: 0.0,
        live: 0,
        in_flight: Default::default(),
        remaining_uses: nodes.iter().map(|x| x.succs.len() as u32).collect(),
        indeg: nodes.iter().map(|x| x.preds.len()).collect(),
    };
    let mut starts: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    let mut compute: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    let mut dones: Vec<usize> = Vec::new();
    let push_ready = |k: usize,
                      starts: &mut BinaryHeap<Reverse<usize>>,
                      compute: &mut BinaryHeap<Reverse<usize>>,
                      dones: &mut Vec<usize>| match nodes[k].role {
        Role::Start(_) => starts.push(Reverse(k)),
        Role::Compute if nodes[k].feeds_start => starts.push(Reverse(k)),
        Role::Done(_) => dones.push(k),
        Role::Compute => compute.push(Reverse(k)),
    };
    for k in 0..n {
        if st.indeg[k] == 0 {
            push_ready(k, &mut starts, &mut compute, &mut dones);
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut calls = Vec::new();
    while out.len() < n {
        let Some(k) = pick(&nodes, &st, limits, &mut starts, &mut compute, &mut dones) else {
            break;
        };
        out.push(nodes[k].id);
        issue(&nodes, &mut st, k);
        calls.extend(
            program_callees(m.instr(nodes[k].id))
                .into_iter()
                .map(|callee| (callee, st.live)),
        );
        for &s in &nodes[k].succs {
            st.indeg[s] -= 1;
            if st.indeg[s] == 0 {
                push_ready(s, &mut starts, &mut compute, &mut dones);
            }
        }
    }
    if out.len() < n {
        // A cycle (invalid input): keep the original order.
        return (m.comp(c).instrs.clone(), calls);
    }
    (out, calls)
}

/// The next node to schedule, removed from its ready set.
fn pick(
    nodes: &[Node],
    st: &State,
    limits: &SchedulerLimits,
    starts: &mut BinaryHeap<Reverse<usize>>,
    compute: &mut BinaryHeap<Reverse<usize>>,
    dones: &mut Vec<usize>,
) -> Option<usize> {
    let slot_free = |f: usize| st.in_flight[f].len() < limits.overlap_limit.max(1) as usize;
    let fits = |k: usize| st.live + nodes[k].bytes <= limits.memory_limit_bytes;
    // 1. Issue a collective as soon as a slot is free and memory allows.
    let issuable = |k: usize| match nodes[k].role {
        Role::Start(f) => slot_free(f),
        _ => true,
    };
    if let Some(k) = starts
        .iter()
        .map(|r| r.0)
        .filter(|&k| issuable(k) && fits(k))
        .min_by_key(|&k| (nodes[k].deadline, k))
    {
        remove_heap(starts, k);
        return Some(k);
    }
    let next_compute = compute.peek().map(|r| r.0);
    let finish = |d: usize| -> f64 {
        let Role::Done(f) = nodes[d].role else {
            return 0.0;
        };
        st.in_flight[f]
            .iter()
            .find(|(s, _)| nodes[d].preds.contains(s))
            .map_or(0.0, |x| x.1)
    };
    // 2. A done the original order needs now, or whose transfer is over while
    //    a start of its kind waits for the slot. A done needed now whose
    //    transfer is still running waits while independent compute (ready,
    //    later in the original order) fits in memory and fills the stall, as
    //    XLA's scheduler moves it between a collective's start and done.
    let waiting = |f: usize| {
        starts
            .iter()
            .any(|&Reverse(s)| nodes[s].role == Role::Start(f))
    };
    let can_fill = next_compute.is_some_and(fits);
    let due = dones.iter().position(|&d| {
        let Role::Done(f) = nodes[d].role else {
            return false;
        };
        let over = finish(d) <= st.clock;
        let needed_now = next_compute.is_none_or(|c| nodes[d].needed_at <= c);
        (needed_now && (over || !can_fill)) || (over && waiting(f))
    });
    if let Some(i) = due {
        return Some(dones.swap_remove(i));
    }
    // 3. Compute in original order; starts (and their feeders) held back by
    //    the memory limit or a busy slot take their original place too.
    let held = starts.iter().map(|r| r.0).filter(|&k| issuable(k)).min();
    match (compute.peek().map(|r| r.0), held) {
        (Some(c), Some(h)) if h < c => {
            remove_heap(starts, h);
            return Some(h);
        }
        (Some(_), _) => return compute.pop().map(|r| r.0),
        (None, Some(h)) => {
            remove_heap(starts, h);
            return Some(h);
        }
        (None, None) => {}
    }
    // 4. Starts waiting for a slot, when nothing else is left.
    if let Some(Reverse(k)) = starts.pop() {
        return Some(k);
    }
    (!dones.is_empty()).then(|| dones.swap_remove(0))
}

fn remove_heap(h: &mut BinaryHeap<Reverse<usize>>, k: usize) {
    let v: Vec<Reverse<usize>> = std::mem::take(h).into_iter().filter(|r| r.0 != k).collect();
    *h = v.into();
}

fn issue(nodes: &[Node], st: &mut State, k: usize) {
    let node = &nodes[k];
    match node.role {
        Role::Start(f) => st.in_flight[f].push((k, st.clock + node.cost_s)),
        Role::Done(f) => {
            if let Some(i) = st.in_flight[f]
                .iter()
                .position(|(s, _)| node.preds.contains(s))
            {
                let (_, end) = st.in_flight[f].remove(i);
                st.clock = st.clock.max(end);
            }
        }
        Role::Compute => st.clock += node.cost_s,
    }
    st.live += node.bytes;
    for &p in &node.preds {
        st.remaining_uses[p] = st.remaining_uses[p].saturating_sub(1);
        if st.remaining_uses[p] == 0 {
            st.live = st.live.saturating_sub(nodes[p].bytes);
        }
    }
}
