//! `add(all-reduce(a), all-reduce(b))` becomes `all-reduce(add(a, b))` when
//! both all-reduces sum over the same groups and nothing else reads them
//! (XLA's AllReduceReassociate): one collective instead of two. In a
//! tensor-parallel backward pass the gradients of the several projections of
//! one input are reduced this way — four all-reduces of an activation become
//! one.

use crate::util::{all_names, control_computations, push_instr, users};
use crate::Changed;
use tpusim_hlo::NameTable;
use tpusim_hlo::{CompId, InstrId, Instruction, Module, Opcode};

/// Rewrites every matching add; returns how many.
pub fn reassociate_all_reduces(m: &mut Module) -> Changed {
    let mut names = all_names(m);
    let mut rewritten = 0;
    for c in control_computations(m) {
        let uses = users(m, c);
        let single_use = |id: InstrId| uses.get(&id).is_some_and(|u| u.len() == 1);
        let order: Vec<InstrId> = m.comp(c).instrs.clone();
        for x in order {
            let ins = m.instr(x);
            if ins.opcode != Opcode::Add || ins.operands.len() != 2 || m.comp(c).root == x {
                continue;
            }
            let (a, b) = (ins.operands[0], ins.operands[1]);
            if a == b || !single_use(a) || !single_use(b) || !summable(m, a, b, &ins.shape) {
                continue;
            }
            rewrite(m, c, x, a, b, &mut names);
            rewritten += 1;
        }
    }
    Changed::count(rewritten, |n| {
        format!("{n} add(all-reduce, all-reduce) → all-reduce(add)")
    })
}

/// Whether `a` and `b` are all-reduces that sum single arrays of `shape`
/// over the same groups.
fn summable(m: &Module, a: InstrId, b: InstrId, shape: &tpusim_hlo::Shape) -> bool {
    let (x, y) = (m.instr(a), m.instr(b));
    let one_array = |i: &Instruction| {
        i.opcode == Opcode::AllReduce
            && i.operands.len() == 1
            && !i.shape.is_tuple()
            && &i.shape == shape
            && i.attr("control-predecessors").is_none()
    };
    let same = |name: &str| x.attr(name) == y.attr(name);
    one_array(x)
        && one_array(y)
        && same("replica_groups")
        && same("use_global_device_ids")
        && x.attr("channel_id").is_some() == y.attr("channel_id").is_some()
        && sums(m, x)
        && sums(m, y)
}

/// Whether an all-reduce's reduction is `add` of its two parameters.
fn sums(m: &Module, ins: &Instruction) -> bool {
    let Some(c) = ins.attr_comp("to_apply") else {
        return false;
    };
    let comp = m.comp(c);
    let root = m.instr(comp.root);
    root.opcode == Opcode::Add
        && comp.params.len() == 2
        && root.operands.iter().all(|o| comp.params.contains(o))
        && root.operands[0] != root.operands[1]
}

/// Turns `x = add(a, b)` into `x = all-reduce(add(a's operand, b's operand))`
/// with `a`'s attributes; `a` and `b` leave the computation.
fn rewrite(m: &mut Module, c: CompId, x: InstrId, a: InstrId, b: InstrId, names: &mut NameTable) {
    let ar = m.instr(a).clone();
    let sum_operands = vec![ar.operands[0], m.instr(b).operands[0]];
    let add = m.instr(x).clone();
    let sum = Instruction {
        name: names.fresh(&format!("{}.operands", add.name)),
        operands: sum_operands,
        ..add.clone()
    };
    let sum = push_instr(m, sum);
    let reduced = &mut m.instrs[x.index()];
    reduced.opcode = Opcode::AllReduce;
    reduced.operands = vec![sum];
    reduced.attrs = ar.attrs;
    let comp = &mut m.comps[c.index()];
    comp.instrs.retain(|&i| i != a && i != b);
    if let Some(k) = comp.instrs.iter().position(|&i| i == x) {
        comp.instrs.insert(k, sum);
    }
}
