//! Small IR editing helpers shared by the passes.

use rustc_hash::{FxHashMap, FxHashSet};
use tpusim_hlo::attr::{print_rank, ReplicaGroups};
use tpusim_hlo::{Attr, AttrValue, CompId, InstrId, Instruction, Module, NameTable, Opcode, Shape};

/// Appends `ins` to the module's arena (not to any computation's order).
pub(crate) fn push_instr(m: &mut Module, ins: Instruction) -> InstrId {
    let id = InstrId(m.instrs.len() as u32);
    m.instrs.push(ins);
    id
}

/// Every instruction name in the module (names are module-unique in HLO).
pub(crate) fn all_names(m: &Module) -> NameTable {
    m.instrs.iter().map(|i| i.name.clone()).collect()
}

/// Users of each instruction of computation `c`, in text order.
pub(crate) fn users(m: &Module, c: CompId) -> FxHashMap<InstrId, Vec<InstrId>> {
    let mut out: FxHashMap<InstrId, Vec<InstrId>> = FxHashMap::default();
    for &i in &m.comp(c).instrs {
        for &o in &m.instr(i).operands {
            out.entry(o).or_default().push(i);
        }
    }
    out
}

/// Replaces every use of `old` in computation `c` (operands and root) by `new`,
/// except in `new` itself.
pub(crate) fn replace_uses(m: &mut Module, c: CompId, old: InstrId, new: InstrId) {
    let ids = m.comp(c).instrs.clone();
    for i in ids {
        if i == new {
            continue;
        }
        for o in &mut m.instrs[i.index()].operands {
            if *o == old {
                *o = new;
            }
        }
    }
    if m.comps[c.index()].root == old {
        m.comps[c.index()].root = new;
    }
}

/// Replaces every use in computation `c` (operands and root) of each key of
/// `replaced` by its value, in one sweep; the values themselves are left
/// as they are.
pub(crate) fn replace_all_uses(m: &mut Module, c: CompId, replaced: &FxHashMap<InstrId, InstrId>) {
    let new: FxHashSet<InstrId> = replaced.values().copied().collect();
    let ids = m.comp(c).instrs.clone();
    for i in ids {
        if new.contains(&i) {
            continue;
        }
        for o in &mut m.instrs[i.index()].operands {
            if let Some(&n) = replaced.get(o) {
                *o = n;
            }
        }
    }
    let root = m.comps[c.index()].root;
    if let Some(&n) = replaced.get(&root) {
        m.comps[c.index()].root = n;
    }
}

/// For a reducer `(x, y) -> op(x, y)` on scalars (add, multiply, maximum or
/// minimum): `op`.
pub(crate) fn scalar_reducer_op(m: &Module, r: CompId) -> Option<Opcode> {
    let comp = m.comp(r);
    let root = m.instr(comp.root);
    let op = root.opcode;
    (comp.params.len() == 2
        && comp.instrs.len() == 3
        && root.shape.rank() == 0
        && matches!(
            op,
            Opcode::Add | Opcode::Maximum | Opcode::Minimum | Opcode::Multiply
        ))
    .then_some(op)
}

/// `ins`'s metadata attribute alone, for an instruction that replaces it.
pub(crate) fn metadata_of(ins: &Instruction) -> Vec<Attr> {
    ins.attrs
        .iter()
        .filter(|a| a.name == "metadata")
        .cloned()
        .collect()
}

/// Sorts attributes into XLA's print order (stable).
pub(crate) fn sort_attrs(attrs: &mut [Attr]) {
    attrs.sort_by_key(|a| print_rank(&a.name));
}

/// Reorders computation `c` so every instruction follows its operands and
/// control predecessors, keeping the current order wherever it is valid.
/// Instructions not reachable in a valid order (a cycle) keep their place at
/// the end, which the verifier reports.
pub(crate) fn topo_sort(m: &mut Module, c: CompId) {
    let order = m.comp(c).instrs.clone();
    let pos: FxHashMap<InstrId, usize> = order.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    let preds = |i: InstrId| -> Vec<usize> {
        predecessors(m, i)
            .filter_map(|p| pos.get(&p).copied())
            .collect()
    };
    let mut indeg = vec![0usize; order.len()];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); order.len()];
    for (k, &i) in order.iter().enumerate() {
        let mut ps = preds(i);
        ps.sort_unstable();
        ps.dedup();
        indeg[k] = ps.len();
        for p in ps {
            succ[p].push(k);
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..order.len())
        .filter(|&k| indeg[k] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut out = Vec::with_capacity(order.len());
    let mut placed = vec![false; order.len()];
    while let Some(std::cmp::Reverse(k)) = ready.pop() {
        out.push(order[k]);
        placed[k] = true;
        for &s in &succ[k] {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                ready.push(std::cmp::Reverse(s));
            }
        }
    }
    out.extend((0..order.len()).filter(|&k| !placed[k]).map(|k| order[k]));
    m.comps[c.index()].instrs = out;
}

/// Operands and control predecessors of `i`.
pub(crate) fn predecessors(m: &Module, i: InstrId) -> impl Iterator<Item = InstrId> + '_ {
    let ins = m.instr(i);
    let control: &[InstrId] = match ins.attr("control-predecessors") {
        Some(AttrValue::Instrs(v)) => v,
        _ => &[],
    };
    ins.operands.iter().copied().chain(control.iter().copied())
}

pub(crate) use tpusim_hlo::passes::control_computations;

/// Devices in each replica group of a collective (the module's device
/// count when the groups are left empty, meaning "all").
pub(crate) fn group_size(m: &Module, ins: &Instruction) -> Option<i64> {
    let n = match ins.attr("replica_groups") {
        None => 0,
        Some(AttrValue::ReplicaGroups(g)) => match &**g {
            ReplicaGroups::Explicit(v) => v.first().map_or(0, |g| g.len() as i64),
            ReplicaGroups::Iota { group_size, .. } => *group_size,
            ReplicaGroups::Mesh { .. } => g.expand().first().map_or(0, |g| g.len() as i64),
        },
        Some(_) => return None,
    };
    Some(if n == 0 { m.device_count() } else { n })
}

/// The largest `channel_id` in the module (0 when none): new collectives
/// take ids above it.
pub(crate) fn max_channel_id(m: &Module) -> i64 {
    m.instrs
        .iter()
        .filter_map(|i| match i.attr("channel_id") {
            Some(AttrValue::Int(v)) => Some(*v),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Channel ids for the collectives a pass adds: above every id the module
/// has, or, when the module's ids reach the top of the range (any input may
/// say `channel_id=9223372036854775807`), the smallest ids it does not use.
pub(crate) struct ChannelIds {
    next: i64,
    used: Option<rustc_hash::FxHashSet<i64>>,
}

impl ChannelIds {
    pub(crate) fn new(m: &Module) -> ChannelIds {
        let max = max_channel_id(m);
        if max < i64::MAX - (1 << 32) {
            return ChannelIds {
                next: max.max(0) + 1,
                used: None,
            };
        }
        let used = m
            .instrs
            .iter()
            .filter_map(|i| match i.attr("channel_id") {
                Some(AttrValue::Int(v)) => Some(*v),
                _ => None,
            })
            .collect();
        ChannelIds {
            next: 1,
            used: Some(used),
        }
    }

    /// An id no collective of the module has, nor one handed out before.
    pub(crate) fn fresh(&mut self) -> i64 {
        if let Some(used) = &self.used {
            while used.contains(&self.next) {
                self.next += 1;
            }
        }
        let id = self.next;
        self.next += 1;
        id
    }
}

/// `shape` with dimension `dim` resized to `size` (layout kept).
pub(crate) fn resized(shape: &Shape, dim: usize, size: i64) -> Shape {
    let mut s = shape.clone();
    if let Shape::Array(a) = &mut s {
        a.dims[dim] = size;
    }
    s
}

/// A collective's device groups as lists of ids (`Some(vec![])`: all devices).
pub(crate) fn expanded_groups(ins: &Instruction) -> Option<Vec<Vec<i64>>> {
    match ins.attr("replica_groups") {
        None => Some(Vec::new()),
        Some(AttrValue::ReplicaGroups(g)) => Some(g.expand()),
        Some(_) => None,
    }
}
