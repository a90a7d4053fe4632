//! Attention that XLA leaves unfused: a dot whose result (the scores) is
//! larger than its operands and reaches another dot only through
//! elementwise ops and reductions (mask, softmax). Those ops move the
//! scores through HBM; a flash-attention kernel keeps them in VMEM. The
//! model prices them as they are and the report says what a flash kernel
//! could save.

use std::collections::{HashMap, HashSet};

use tpusim_hlo::{InstrId, Module, Opcode};

use crate::Analysis;

/// Ops followed from one scores dot before giving up.
const MAX_CHAIN: usize = 64;

fn has_dot(m: &Module, id: InstrId) -> bool {
    let ins = m.instr(id);
    match ins.opcode {
        Opcode::Dot => true,
        Opcode::Fusion => ins.called_computations().iter().any(|&c| {
            m.comp(c)
                .instrs
                .iter()
                .any(|&j| m.instr(j).opcode == Opcode::Dot)
        }),
        _ => false,
    }
}

/// The dot `id` is or contains, if any.
fn inner_dot(m: &Module, id: InstrId) -> Option<InstrId> {
    let ins = m.instr(id);
    match ins.opcode {
        Opcode::Dot => Some(id),
        Opcode::Fusion => ins.called_computations().iter().find_map(|&c| {
            m.comp(c)
                .instrs
                .iter()
                .copied()
                .find(|&j| m.instr(j).opcode == Opcode::Dot)
        }),
        _ => None,
    }
}

/// A batched dot (heads) whose result is larger than either operand: the
/// scores of attention (an MLP's up-projection has no batch dims).
fn is_scores_dot(m: &Module, id: InstrId) -> bool {
    let Some(d) = inner_dot(m, id) else {
        return false;
    };
    let dot = m.instr(d);
    let batched = dot
        .attr_ints("lhs_batch_dims")
        .is_some_and(|b| !b.is_empty());
    let biggest_operand = dot
        .operands
        .iter()
        .map(|&o| elements(&m.instr(o).shape))
        .max()
        .unwrap_or(0);
    batched && elements(&dot.shape) > biggest_operand
}

fn elements(s: &tpusim_hlo::Shape) -> u64 {
    s.leaves()
        .iter()
        .map(|a| a.element_count().unwrap_or(0).max(0) as u64)
        .sum()
}

/// The ops between each scores dot and the dot that consumes the
/// probabilities, or `None` when the scores reach anything else.
fn softmax_chain(
    m: &Module,
    users: &HashMap<InstrId, Vec<InstrId>>,
    start: InstrId,
) -> Option<Vec<InstrId>> {
    let mut chain = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    let mut reaches_dot = false;
    while let Some(x) = stack.pop() {
        for &u in users.get(&x).map(Vec::as_slice).unwrap_or(&[]) {
            if !seen.insert(u) {
                continue;
            }
            if has_dot(m, u) {
                reaches_dot = true;
                continue;
            }
            let op = m.instr(u).opcode;
            // Any local data op (elementwise, reduce, broadcast, reshape,
            // transpose, fusion); not communication, calls or loops.
            let fusible = op.category() != tpusim_hlo::OpCategory::Collective
                && !matches!(
                    op,
                    Opcode::CustomCall | Opcode::While | Opcode::Conditional | Opcode::Tuple
                );
            if !fusible || chain.len() >= MAX_CHAIN {
                return None;
            }
            chain.push(u);
            stack.push(u);
        }
    }
    (reaches_dot && !chain.is_empty()).then_some(chain)
}

/// Adds the time of `id` (a `call`: of its body) to `total`, once per op
/// name: an op's statistics already total all of its executions.
fn add_time<'a>(
    m: &'a Module,
    time: &HashMap<&str, f64>,
    id: InstrId,
    counted: &mut HashSet<&'a str>,
    total: &mut f64,
    depth: u32,
) {
    let ins = m.instr(id);
    if ins.opcode == Opcode::Call && depth <= 8 {
        for &c in &ins.called_computations() {
            for &j in &m.comp(c).instrs {
                add_time(m, time, j, counted, total, depth + 1);
            }
        }
    } else if counted.insert(ins.name.as_str()) {
        *total += time.get(ins.name.as_str()).copied().unwrap_or(0.0);
    }
}

/// A hint for unfused attention in the entry computation of `m` (the module
/// the analysis timed), or `None`.
pub(crate) fn flash_hint(m: &Module, a: &Analysis) -> Option<String> {
    let comp = m.comp(m.entry);
    let mut users: HashMap<InstrId, Vec<InstrId>> = HashMap::new();
    for &i in &comp.instrs {
        for &o in &m.instr(i).operands {
            users.entry(o).or_default().push(i);
        }
    }
    let time: HashMap<&str, f64> = a.ops.iter().map(|o| (o.name.as_str(), o.time_s)).collect();
    let (mut chains, mut saved, mut shape) = (0, 0.0, String::new());
    let mut counted = HashSet::new();
    for &i in &comp.instrs {
        let ins = m.instr(i);
        if !is_scores_dot(m, i) {
            continue;
        }
        let Some(chain) = softmax_chain(m, &users, i) else {
            continue;
        };
        chains += 1;
        if shape.is_empty() {
            shape = ins.shape.to_string();
        }
        for c in chain {
            add_time(m, &time, c, &mut counted, &mut saved, 0);
        }
    }
    (chains > 0 && a.step_time_s > 0.0 && saved > 0.0).then(|| {
        format!(
            "{chains} unfused attention pattern(s) (scores {shape}): the mask/softmax ops between \
             the two dots take {:.3} ms ({:.1}% of step) moving the scores through HBM; a \
             flash-attention kernel (Pallas flash/splash attention) keeps them in VMEM and \
             would save up to about that",
            saved * 1e3,
            100.0 * saved / a.step_time_s
        )
    })
}
