//! Async conversion (XLA:TPU runs every collective asynchronously): each
//! synchronous collective becomes a `-start`/`-done` pair, so the scheduler
//! can place independent compute between them.
//! - all-reduce, all-gather, collective-permute: their native start/done ops;
//! - reduce-scatter, all-to-all: `async-start`/`async-done` wrapping the op
//!   (printed as `reduce-scatter-start`/`-done`, as XLA does).

use crate::util::{all_names, control_computations, metadata_of, push_instr, replace_all_uses};
use crate::Changed;
use tpusim_hlo::NameTable;
use tpusim_hlo::{
    Attr, AttrValue, CompId, Computation, InstrId, Instruction, Module, Opcode, Shape,
};

/// Converts every synchronous collective of the control computations.
pub fn convert_async_collectives(m: &mut Module) -> Changed {
    let mut names = all_names(m);
    let mut converted = 0;
    for c in control_computations(m) {
        let sync: Vec<InstrId> = m
            .comp(c)
            .instrs
            .iter()
            .copied()
            .filter(|&i| async_pair(m.instr(i).opcode).is_some())
            .collect();
        // Uses and order are rewritten once per computation (per collective
        // is quadratic in a module with thousands of them).
        let mut done_of = rustc_hash::FxHashMap::default();
        let mut pair_of = rustc_hash::FxHashMap::default();
        for i in sync {
            if let Some((start, done)) = convert(m, c, i, &mut names) {
                done_of.insert(i, done);
                pair_of.insert(i, [start, done]);
                converted += 1;
            }
        }
        if !pair_of.is_empty() {
            let order = std::mem::take(&mut m.comps[c.index()].instrs);
            m.comps[c.index()].instrs = order
                .into_iter()
                .flat_map(|i| match pair_of.get(&i) {
                    Some(pair) => pair.to_vec(),
                    None => vec![i],
                })
                .collect();
            // After the starts joined the order: one may read another
            // collective, whose done it then reads.
            replace_all_uses(m, c, &done_of);
        }
    }
    Changed::count(converted, |n| format!("{n} collectives made asynchronous"))
}

/// The start and done opcodes of a synchronous collective.
fn async_pair(op: Opcode) -> Option<(Opcode, Opcode)> {
    Some(match op {
        Opcode::AllReduce => (Opcode::AllReduceStart, Opcode::AllReduceDone),
        Opcode::AllGather => (Opcode::AllGatherStart, Opcode::AllGatherDone),
        Opcode::CollectivePermute => (
            Opcode::CollectivePermuteStart,
            Opcode::CollectivePermuteDone,
        ),
        Opcode::ReduceScatter | Opcode::AllToAll => (Opcode::AsyncStart, Opcode::AsyncDone),
        _ => return None,
    })
}

fn operand_shape(m: &Module, ins: &Instruction) -> Shape {
    match ins.operands.as_slice() {
        [one] => m.instr(*one).shape.clone(),
        many => Shape::Tuple(many.iter().map(|&o| m.instr(o).shape.clone()).collect()),
    }
}

/// Builds the start and done of collective `id` (not yet in the order, its
/// uses not yet moved to the done).
fn convert(
    m: &mut Module,
    c: CompId,
    id: InstrId,
    names: &mut NameTable,
) -> Option<(InstrId, InstrId)> {
    let ins = m.instr(id).clone();
    let (start_op, done_op) = async_pair(ins.opcode)?;
    let base = ins.opcode.name();
    let mut start = Instruction {
        name: names.fresh(&format!("{base}-start")),
        opcode: start_op,
        ..ins.clone()
    };
    match start_op {
        Opcode::AllReduceStart => {}
        Opcode::AllGatherStart | Opcode::CollectivePermuteStart => {
            start.shape = Shape::Tuple(vec![operand_shape(m, &ins), ins.shape.clone()]);
        }
        _ => {
            start.shape = Shape::Tuple(vec![
                Shape::Tuple(
                    ins.operands
                        .iter()
                        .map(|&o| m.instr(o).shape.clone())
                        .collect(),
                ),
                ins.shape.clone(),
            ]);
            start.async_sugar = Some(ins.opcode);
            let wrapped = wrap(m, &ins, &start.name);
            // As the parser keeps `X-start` sugar: the op's attributes on the
            // start, and `calls` to the wrapped op.
            start.attrs.push(Attr {
                name: "calls".into(),
                value: AttrValue::Comp(wrapped),
            });
            crate::util::sort_attrs(&mut start.attrs);
        }
    }
    let start_id = push_instr(m, start);
    let done = Instruction {
        name: names.fresh(&format!("{base}-done")),
        opcode: done_op,
        shape: ins.shape.clone(),
        operands: vec![start_id],
        attrs: metadata_of(&ins),
        parent: c,
        parameter_number: None,
        literal: None,
        async_sugar: (done_op == Opcode::AsyncDone).then_some(ins.opcode),
    };
    let done_id = push_instr(m, done);
    Some((start_id, done_id))
}

/// The hidden computation an `X-start` sugar calls: `X` over parameters.
fn wrap(m: &mut Module, ins: &Instruction, start_name: &str) -> CompId {
    let comp = CompId(m.comps.len() as u32);
    let mut params = Vec::new();
    for (k, &o) in ins.operands.iter().enumerate() {
        let p = push_instr(
            m,
            Instruction {
                name: format!("param_{k}"),
                opcode: Opcode::Parameter,
                shape: m.instr(o).shape.clone(),
                operands: Vec::new(),
                attrs: Vec::new(),
                parent: comp,
                parameter_number: Some(k as i64),
                literal: None,
                async_sugar: None,
            },
        );
        params.push(p);
    }
    let root = push_instr(
        m,
        Instruction {
            name: format!("{start_name}.wrapped"),
            operands: params.clone(),
            parent: comp,
            attrs: ins
                .attrs
                .iter()
                .filter(|a| {
                    !matches!(
                        a.name.as_ref(),
                        "metadata"
                            | "backend_config"
                            | "frontend_attributes"
                            | "sharding"
                            | "control-predecessors"
                    )
                })
                .cloned()
                .collect(),
            ..ins.clone()
        },
    );
    let mut instrs = params.clone();
    instrs.push(root);
    m.comps.push(Computation {
        name: format!("{start_name}.async_wrapped"),
        instrs,
        root,
        params,
        is_entry: false,
        execution_thread: None,
        is_async_sugar: true,
    });
    comp
}
