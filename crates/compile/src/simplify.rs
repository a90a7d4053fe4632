//! Simplifications XLA runs on every program before fusion, so that a
//! lowered program (JAX's text, with its degenerate ops) is priced as the
//! program XLA:TPU compiles: a reduction over dimensions of size 1 from the
//! reducer's identity is a reshape (part of XLA's `AlgebraicSimplifier`),
//! so it costs no kernel (JAX's gradient of a keepdims sum is one).
//!
//! Exact but for the sign of a zero sum, as in XLA; instructions with
//! control dependencies are left alone.

use crate::util::{
    control_computations, metadata_of, push_instr, replace_all_uses, scalar_reducer_op,
};
use crate::Changed;
use rustc_hash::FxHashMap;
use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{InstrId, Instruction, Module, Opcode};

/// XLA's `AlgebraicSimplifier` on reductions whose reduced dimensions all
/// have size 1, from the reducer's identity (0 for add, 1 for multiply,
/// -inf for max, +inf for min): each is the reshape of its input.
pub fn simplify_degenerate_reductions(m: &mut Module) -> Changed {
    let mut simplified = 0;
    for c in control_computations(m) {
        let mut replaced: FxHashMap<InstrId, InstrId> = FxHashMap::default();
        let mut order = Vec::with_capacity(m.comp(c).instrs.len());
        for i in m.comp(c).instrs.clone() {
            match degenerate_reduction_input(m, i) {
                Some(input) => {
                    let ins = m.instr(i);
                    let reshape = Instruction {
                        name: ins.name.clone(),
                        opcode: Opcode::Reshape,
                        shape: ins.shape.clone(),
                        operands: vec![input],
                        attrs: metadata_of(ins),
                        parent: c,
                        parameter_number: None,
                        literal: None,
                        async_sugar: None,
                    };
                    let new = push_instr(m, reshape);
                    replaced.insert(i, new);
                    order.push(new);
                }
                None => order.push(i),
            }
        }
        if replaced.is_empty() {
            continue;
        }
        simplified += replaced.len();
        m.comps[c.index()].instrs = order;
        replace_all_uses(m, c, &replaced);
    }
    Changed::count(simplified, |n| {
        format!("{n} reductions over size-1 dimensions made reshapes")
    })
}

/// For a one-input reduction that sums (or multiplies, or takes the max or
/// min) only over size-1 dimensions, starting from the reducer's identity:
/// its input.
fn degenerate_reduction_input(m: &Module, i: InstrId) -> Option<InstrId> {
    let ins = m.instr(i);
    if ins.opcode != Opcode::Reduce || ins.operands.len() != 2 || ins.shape.is_tuple() {
        return None;
    }
    let (input, init) = (ins.operands[0], ins.operands[1]);
    let dims = m.instr(input).shape.dims();
    let reduced = ins.attr_ints("dimensions")?;
    let degenerate = reduced
        .iter()
        .all(|&d| usize::try_from(d).ok().and_then(|d| dims.get(d)) == Some(&1));
    if !degenerate || has_control_deps(ins) {
        return None;
    }
    let op = scalar_reducer_op(m, ins.attr_comp("to_apply")?)?;
    is_identity(m.instr(init), op).then_some(input)
}

fn has_control_deps(ins: &Instruction) -> bool {
    ins.attr("control-predecessors").is_some()
}

/// Whether `init` is a scalar constant that `op` leaves every value as it is.
fn is_identity(init: &Instruction, op: Opcode) -> bool {
    let Some(Literal::Array(data)) = &init.literal else {
        return false;
    };
    match (data, op) {
        (LiteralData::Float(v), _) if v.len() == 1 => {
            let x = v[0];
            match op {
                Opcode::Add => x == 0.0,
                Opcode::Multiply => x == 1.0,
                Opcode::Maximum => x == f64::NEG_INFINITY,
                Opcode::Minimum => x == f64::INFINITY,
                _ => false,
            }
        }
        (LiteralData::Int(v), Opcode::Add) if v.len() == 1 => v[0] == 0,
        (LiteralData::Int(v), Opcode::Multiply) if v.len() == 1 => v[0] == 1,
        _ => false,
    }
}
