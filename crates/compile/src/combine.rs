//! Collective combiners (XLA's AllReduceCombiner, AllGatherCombiner,
//! ReduceScatterCombiner): independent collectives of the same kind, groups
//! and reducer are merged into one variadic collective of at most the chip's
//! threshold bytes, so many small transfers pay one latency.

use crate::util::{all_names, control_computations, push_instr, replace_all_uses, topo_sort};
use crate::Changed;
use rustc_hash::{FxHashMap, FxHashSet};
use tpusim_arch::CompilerConfig;
use tpusim_hlo::NameTable;
use tpusim_hlo::{AttrValue, CompId, InstrId, Instruction, Module, Opcode, Shape};

/// Combines all-reduces, all-gathers and reduce-scatters under `cfg`'s thresholds.
pub fn combine_collectives(m: &mut Module, cfg: &CompilerConfig) -> Changed {
    let mut before = 0;
    let mut after = 0;
    // Built on the first merge: most computations have nothing to combine.
    let mut names: Option<NameTable> = None;
    for c in control_computations(m) {
        let (b, a) = combine_in(m, c, cfg, &mut names);
        before += b;
        after += a;
    }
    if before == after {
        return Changed::No;
    }
    Changed::Yes(format!("{before} collectives combined into {after}"))
}

fn threshold(cfg: &CompilerConfig, op: Opcode) -> u64 {
    match op {
        Opcode::AllReduce => cfg.all_reduce_combine_threshold_bytes,
        Opcode::AllGather => cfg.all_gather_combine_threshold_bytes,
        _ => cfg.reduce_scatter_combine_threshold_bytes,
    }
}

/// What must agree for two collectives to be merged: opcode, every attribute
/// but metadata and channel id, and the reducer's text (types included).
fn key(m: &Module, ins: &Instruction) -> String {
    let mut k = format!("{:?}", ins.opcode);
    for a in &ins.attrs {
        match (a.name.as_ref(), &a.value) {
            ("metadata" | "channel_id" | "frontend_attributes" | "sharding", _) => {}
            (_, AttrValue::Comp(r)) => {
                let comp = m.comp(*r);
                for &i in &comp.instrs {
                    let x = m.instr(i);
                    k.push_str(&format!("|{:?}{}", x.opcode, x.shape));
                }
            }
            (name, v) => k.push_str(&format!("|{name}={v:?}")),
        }
    }
    k
}

struct Group {
    members: Vec<InstrId>,
    bytes: u64,
}

/// Returns (collectives before, after) in computation `c`.
fn combine_in(
    m: &mut Module,
    c: CompId,
    cfg: &CompilerConfig,
    names: &mut Option<NameTable>,
) -> (usize, usize) {
    // dep[i]: the highest group any ancestor of i belongs to (0: none). A
    // candidate joins a group only if it depends on no group at or above it,
    // so combined collectives depend only on lower groups: no cycles.
    let order = m.comp(c).instrs.clone();
    let mut dep: FxHashMap<InstrId, u32> = FxHashMap::default();
    let mut member_of: FxHashMap<InstrId, u32> = FxHashMap::default();
    let mut groups: Vec<Group> = Vec::new();
    let mut open: FxHashMap<String, u32> = FxHashMap::default();
    let mut candidates = 0;
    for &i in &order {
        let ins = m.instr(i);
        let d = crate::util::predecessors(m, i)
            .map(|o| {
                member_of
                    .get(&o)
                    .copied()
                    .unwrap_or_else(|| dep.get(&o).copied().unwrap_or(0))
            })
            .max()
            .unwrap_or(0);
        dep.insert(i, d);
        let combinable = matches!(
            ins.opcode,
            Opcode::AllReduce | Opcode::AllGather | Opcode::ReduceScatter
        ) && !ins.shape.is_tuple()
            && ins.operands.len() == 1
            && ins.attr("control-predecessors").is_none()
            && m.comp(c).root != i;
        if !combinable {
            continue;
        }
        candidates += 1;
        let bytes = ins.shape.byte_size();
        let limit = threshold(cfg, ins.opcode);
        let k = key(m, ins);
        let joinable = open.get(&k).copied().filter(|&g| {
            let grp = &groups[(g - 1) as usize];
            d < g
                && grp.bytes + bytes <= limit
                && grp.members.len() < cfg.combine_max_count as usize
        });
        let g = match joinable {
            Some(g) => g,
            None => {
                groups.push(Group {
                    members: Vec::new(),
                    bytes: 0,
                });
                let g = groups.len() as u32;
                open.insert(k, g);
                g
            }
        };
        let grp = &mut groups[(g - 1) as usize];
        grp.members.push(i);
        grp.bytes += bytes;
        member_of.insert(i, g);
    }
    let mut changed = false;
    // Every group merged, then the order and the uses rewritten in one sweep
    // (per group is quadratic in a module with thousands of collectives).
    let mut replaced: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    let mut placed: FxHashMap<InstrId, Vec<InstrId>> = FxHashMap::default();
    let mut gone: FxHashSet<InstrId> = FxHashSet::default();
    for grp in groups.iter().filter(|g| g.members.len() > 1) {
        let names = names.get_or_insert_with(|| all_names(m));
        let (last, new_ids) = merge(m, c, &grp.members, names, &mut replaced);
        placed.insert(last, new_ids);
        gone.extend(grp.members.iter().copied());
        changed = true;
    }
    if changed {
        let order = std::mem::take(&mut m.comps[c.index()].instrs);
        let mut new_order = Vec::with_capacity(order.len());
        for i in order {
            if let Some(ids) = placed.get(&i) {
                new_order.extend(ids.iter().copied());
            } else if !gone.contains(&i) {
                new_order.push(i);
            }
        }
        m.comps[c.index()].instrs = new_order;
        replace_all_uses(m, c, &replaced);
        topo_sort(m, c);
    }
    (
        candidates,
        candidates - groups.iter().map(|g| g.members.len() - 1).sum::<usize>(),
    )
}

/// One variadic collective for `members` and a get-tuple-element per member
/// (recorded in `replaced`); returns the last member, whose place they take,
/// and the new instructions in order.
fn merge(
    m: &mut Module,
    c: CompId,
    members: &[InstrId],
    names: &mut NameTable,
    replaced: &mut FxHashMap<InstrId, InstrId>,
) -> (InstrId, Vec<InstrId>) {
    let first = m.instr(members[0]).clone();
    let operands: Vec<InstrId> = members.iter().map(|&i| m.instr(i).operands[0]).collect();
    let shapes: Vec<Shape> = members.iter().map(|&i| m.instr(i).shape.clone()).collect();
    let combined = push_instr(
        m,
        Instruction {
            name: names.fresh(&format!("{}.combined", first.name)),
            shape: Shape::Tuple(shapes.clone()),
            operands,
            ..first.clone()
        },
    );
    let last = *members.last().unwrap_or(&members[0]);
    let mut new_ids = vec![combined];
    for (k, (&old, shape)) in members.iter().zip(shapes).enumerate() {
        let gte = push_instr(
            m,
            Instruction {
                name: names.fresh(&format!("{}.gte", m.instr(old).name)),
                opcode: Opcode::GetTupleElement,
                shape,
                operands: vec![combined],
                attrs: vec![tpusim_hlo::Attr {
                    name: "index".into(),
                    value: AttrValue::Int(k as i64),
                }],
                parent: c,
                parameter_number: None,
                literal: None,
                async_sugar: None,
            },
        );
        replaced.insert(old, gte);
        new_ids.push(gte);
    }
    (last, new_ids)
}
