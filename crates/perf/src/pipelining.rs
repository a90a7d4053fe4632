//! Collective pipelining across loop iterations (XLA's CollectivePipeliner,
//! forward sinking): a collective inside a `while` body whose result only
//! updates a loop-carried buffer (a scan's per-layer weight gradient,
//! reduce-scattered and written into the stacked gradients) need not finish
//! within its iteration. XLA moves it so that it completes while the next
//! iteration computes; the walk lets it overlap that much more compute.

use std::collections::{HashMap, HashSet};
use tpusim_hlo::{CompId, InstrId, Module, Opcode};

/// Ops between a collective and the loop-carried buffer it updates.
const MAX_CHAIN: usize = 16;

/// The `-done`s of async collectives, in `while` bodies, whose result only
/// updates a loop-carried buffer: through a chain of single-use element-wise
/// ops, converts, reshapes, transposes, slices, pads, fusions and
/// dynamic-update-slices (at least one update) into the body's root tuple;
/// a combined collective's tuple result qualifies when every element does.
/// These are the formatting ops XLA's pipeliner sinks with the collective
/// (its acceptable users: slice, dynamic-slice, pad, collective-permute,
/// convert, reshape, all-reduce, transpose); an all-to-all stops it.
pub(crate) fn pipelined_dones(m: &Module, is_done: impl Fn(Opcode) -> bool) -> HashSet<InstrId> {
    let bodies: HashSet<CompId> = m
        .comps
        .iter()
        .flat_map(|c| c.instrs.iter())
        .filter(|&&i| m.instr(i).opcode == Opcode::While)
        .filter_map(|&i| m.instr(i).attr_comp("body"))
        .collect();
    let mut out = HashSet::new();
    for b in bodies {
        let comp = m.comp(b);
        let mut users: HashMap<InstrId, Vec<InstrId>> = HashMap::new();
        for &i in &comp.instrs {
            for &o in &m.instr(i).operands {
                users.entry(o).or_default().push(i);
            }
        }
        for &d in &comp.instrs {
            if is_done(m.instr(d).opcode) && updates_carried_buffer(m, b, &users, d, &is_done) {
                out.insert(d);
            }
        }
    }
    out
}

fn updates_carried_buffer(
    m: &Module,
    body: CompId,
    users: &HashMap<InstrId, Vec<InstrId>>,
    done: InstrId,
    is_done: &impl Fn(Opcode) -> bool,
) -> bool {
    let root = m.comp(body).root;
    // Chains still to follow: (op, steps taken, whether an update was seen).
    // A tuple result (a combined collective) fans out to one chain per
    // get-tuple-element, and every chain must reach the root. An op reached
    // again in the same state is followed once (chains that join do not
    // multiply the walk).
    let mut chains = vec![(done, 0usize, false)];
    let mut seen: HashSet<(InstrId, bool)> = HashSet::new();
    while let Some((cur, steps, updated)) = chains.pop() {
        if !seen.insert((cur, updated)) {
            continue;
        }
        if steps >= MAX_CHAIN {
            return false;
        }
        let next: &[InstrId] = users.get(&cur).map_or(&[], Vec::as_slice);
        let fans_out = next.len() > 1
            && next
                .iter()
                .all(|&u| m.instr(u).opcode == Opcode::GetTupleElement);
        if fans_out {
            if next.len() > MAX_CHAIN {
                return false;
            }
            chains.extend(next.iter().map(|&u| (u, steps + 1, updated)));
            continue;
        }
        let &[next] = next else {
            return false;
        };
        let op = m.instr(next).opcode;
        if next == root {
            if updated && op == Opcode::Tuple {
                continue;
            }
            return false;
        }
        if !passes_through(op, is_done) {
            return false;
        }
        chains.push((next, steps + 1, updated || is_update(m, next)));
    }
    true
}

/// Ops XLA's pipeliner sinks along with a collective. Another async
/// collective on the way (the all-reduce of a shard over the data axis after
/// its reduce-scatter) is pipelined with it.
fn passes_through(op: Opcode, is_done: &impl Fn(Opcode) -> bool) -> bool {
    op.is_elementwise()
        || is_done(op)
        || matches!(
            op,
            Opcode::Reshape
                | Opcode::Transpose
                | Opcode::Slice
                | Opcode::DynamicSlice
                | Opcode::Pad
                | Opcode::Bitcast
                | Opcode::Copy
                | Opcode::GetTupleElement
                | Opcode::DynamicUpdateSlice
                | Opcode::Fusion
                | Opcode::AllReduceStart
                | Opcode::AllGatherStart
                | Opcode::CollectivePermuteStart
                | Opcode::AsyncStart
                | Opcode::AsyncUpdate
        )
}

/// A dynamic-update-slice, bare or fused.
fn is_update(m: &Module, id: InstrId) -> bool {
    let ins = m.instr(id);
    match ins.opcode {
        Opcode::DynamicUpdateSlice => true,
        Opcode::Fusion => ins.attr_comp("calls").is_some_and(|c| {
            m.comp(c)
                .instrs
                .iter()
                .any(|&i| m.instr(i).opcode == Opcode::DynamicUpdateSlice)
        }),
        _ => false,
    }
}
