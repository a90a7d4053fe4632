//! tpusim-cost: static per-instruction cost analysis (flops, transcendentals,
//! bytes accessed) that follows XLA's `HloCostAnalysis` conventions exactly,
//! so its totals can be checked against XLA on the corpus.
//!
//! Conventions reproduced from XLA (see `testdata/xla_cost.json`):
//! - every instruction reachable from the entry computation is counted once;
//!   a `while` counts its body and condition once (trip counts are ignored),
//!   a `conditional` takes the per-property maximum over its branches;
//! - a fusion's flops are the sum of its fused instructions, its bytes are
//!   counted at the fusion boundary;
//! - values are accumulated in `f32`, as XLA does, so large totals round the
//!   same way.
//!
//! This crate is pure analysis: it must never print, never panic on a parsed
//! module, and never contain hardware numbers (rates and rooflines belong to
//! the simulator crates built on top of it).

mod fusion;
mod geometry;
mod rules;
mod size;

use rustc_hash::{FxHashMap, FxHashSet};
use tpusim_hlo::{CompId, InstrId, Module};

/// Module totals, as XLA's `HloCostAnalysis` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CostTotals {
    pub flops: f64,
    pub transcendentals: f64,
    pub bytes_accessed: f64,
}

/// The cost of one instruction, nested computations included (a fusion, call
/// or while carries the cost of what it calls, counted once).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InstrCost {
    pub flops: f64,
    pub transcendentals: f64,
    pub bytes_accessed: f64,
}

/// Internal accumulator in `f32`: XLA keeps properties as `float`, and
/// matching its rounding is what makes exact comparison possible.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Props {
    pub flops: f32,
    pub trans: f32,
    pub bytes: f32,
}

impl Props {
    pub(crate) fn add(&mut self, o: Props) {
        self.flops += o.flops;
        self.trans += o.trans;
        self.bytes += o.bytes;
    }
    pub(crate) fn max(self, o: Props) -> Props {
        Props {
            flops: self.flops.max(o.flops),
            trans: self.trans.max(o.trans),
            bytes: self.bytes.max(o.bytes),
        }
    }
    /// Flops and transcendentals scaled by `n` (bytes of a called
    /// computation are never copied into its caller's per-element rules).
    pub(crate) fn scaled_compute(self, n: f32) -> Props {
        Props {
            flops: self.flops * n,
            trans: self.trans * n,
            bytes: 0.0,
        }
    }
}

/// XLA's module totals: the entry computation, each instruction once.
pub fn xla_cost(m: &Module) -> CostTotals {
    let p = computation_props(m, m.entry);
    CostTotals {
        flops: p.flops as f64,
        transcendentals: p.trans as f64,
        bytes_accessed: p.bytes as f64,
    }
}

/// The cost XLA assigns to one instruction (nested computations included).
pub fn instruction_cost(m: &Module, id: InstrId) -> InstrCost {
    let p = rules::instr_props(m, id);
    InstrCost {
        flops: p.flops as f64,
        transcendentals: p.trans as f64,
        bytes_accessed: p.bytes as f64,
    }
}

/// Sum over a computation's instructions in XLA's visiting (post) order.
pub(crate) fn computation_props(m: &Module, c: CompId) -> Props {
    let mut total = Props::default();
    for id in post_order(m, c) {
        total.add(rules::instr_props(m, id));
    }
    total
}

/// Post order as XLA's `MakeInstructionPostOrder`: a depth-first walk from
/// every instruction without users, operands first, in text order.
fn post_order(m: &Module, c: CompId) -> Vec<InstrId> {
    let comp = m.comp(c);
    let users = users_in(m, c);
    // Sized by the computation, not the module: modules have thousands of them.
    let mut seen: FxHashSet<InstrId> =
        FxHashSet::with_capacity_and_hasher(comp.instrs.len(), Default::default());
    let mut out = Vec::with_capacity(comp.instrs.len());
    for &id in &comp.instrs {
        if users[id].is_empty() && id != comp.root {
            dfs(m, id, &mut seen, &mut out);
        }
    }
    dfs(m, comp.root, &mut seen, &mut out);
    out
}

fn dfs(m: &Module, start: InstrId, seen: &mut FxHashSet<InstrId>, out: &mut Vec<InstrId>) {
    // Iterative, since corpus graphs can be deep enough to overflow a stack.
    let mut stack = vec![(start, 0usize)];
    if !seen.insert(start) {
        return;
    }
    while let Some((id, next)) = stack.pop() {
        let ops = &m.instr(id).operands;
        if let Some(&op) = ops.get(next) {
            stack.push((id, next + 1));
            if seen.insert(op) {
                stack.push((op, 0));
            }
        } else {
            out.push(id);
        }
    }
}

/// Users of each instruction of `c` (each user once, in text order), indexed
/// by instruction (`users[id]`; empty for instructions without users).
pub(crate) fn users_in(m: &Module, c: CompId) -> Users {
    Users(tpusim_hlo::passes::distinct_users(m, c))
}

/// Users per instruction of one computation (see [`users_in`]).
pub(crate) struct Users(FxHashMap<InstrId, Vec<InstrId>>);

impl std::ops::Index<InstrId> for Users {
    type Output = [InstrId];
    fn index(&self, instr: InstrId) -> &[InstrId] {
        self.0.get(&instr).map_or(&[], Vec::as_slice)
    }
}
