//! The HLO verifier: structural invariants of a module plus, for every
//! instruction, required attributes and a check of its declared shape against
//! shape inference (see [`crate::infer`]).
//!
//! It follows XLA's `HloVerifier` in its default, layout-insensitive mode, but
//! is lenient where XLA itself changed over time, so that every real dump in
//! `testdata/corpus` verifies.

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::attr::AttrValue;
use crate::infer::{check_shape, shape_text, shapes_compatible, InferError};
use crate::ir::{CompId, Computation, InstrId, Instruction, Module, MAX_DEVICES};
use crate::opcode::Opcode;
use crate::parser::SourceMap;
use crate::shape::{ArrayShape, Layout, Shape};

/// One problem found by [`verify`]. The message names the instruction (or the
/// computation, for computation-level problems).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct VerifyError {
    pub comp: CompId,
    pub instr: Option<InstrId>,
    pub message: String,
}

impl VerifyError {
    /// Renders the error for a human at the instruction (or computation) it names in
    /// `source`, the text `m` was parsed from with `spans`, like a parse error.
    pub fn render(&self, path: &str, source: &str, m: &Module, spans: &SourceMap) -> String {
        let offset = self.instr.map_or_else(
            || {
                spans
                    .comp_offsets
                    .get(self.comp.index())
                    .copied()
                    .unwrap_or(0)
            },
            |i| spans.instr_offsets.get(i.index()).copied().unwrap_or(0),
        );
        // The caret spans the instruction name, with its `%` sigil when the text has one.
        let sigil = usize::from(source.get(offset..).is_some_and(|t| t.starts_with('%')));
        let name_len = self.instr.map_or(1, |i| m.instr(i).name.len() + sigil);
        crate::error::render_diagnostic(path, source, offset, name_len, &self.message, None)
    }
}

/// Verifies a module; returns every problem found.
pub fn verify(m: &Module) -> Result<(), Vec<VerifyError>> {
    let mut v = Verifier {
        m,
        errors: Vec::new(),
    };
    v.module();
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

/// Where each instruction of a computation stands in its text order.
type Positions = FxHashMap<InstrId, usize>;

fn positions(c: &Computation) -> Positions {
    c.instrs
        .iter()
        .enumerate()
        .map(|(pos, &id)| (id, pos))
        .collect()
}

struct Verifier<'m> {
    m: &'m Module,
    errors: Vec<VerifyError>,
}

impl Verifier<'_> {
    fn error(&mut self, comp: CompId, instr: Option<InstrId>, message: String) {
        self.errors.push(VerifyError {
            comp,
            instr,
            message,
        });
    }

    fn instr_error(&mut self, id: InstrId, message: impl std::fmt::Display) {
        let ins = self.m.instr(id);
        let message = format!("{}: {message}", ins.name);
        self.error(ins.parent, Some(id), message);
    }

    fn module(&mut self) {
        if self.m.entry.index() >= self.m.comps.len() {
            let msg = format!("module {} has no entry computation", self.m.name);
            self.error(self.m.entry, None, msg);
            return;
        }
        // Dangling ids would make later lookups (and called-computation
        // signatures) index out of bounds, so nothing else is checked then.
        let m = self.m;
        let dangling = m.comp_ids().filter(|&c| !self.ids_in_range(c)).count();
        if dangling > 0 {
            return;
        }
        for c in m.comp_ids() {
            self.computation_shape(c);
        }
        // Instructions are checked independently (a real module often has one
        // computation holding most of them), so they are spread over every core;
        // errors keep text order.
        let positions: Vec<Positions> = m.comps.iter().map(positions).collect();
        let work: Vec<(CompId, InstrId)> = m
            .comp_ids()
            .flat_map(|c| m.comp(c).instrs.iter().map(move |&i| (c, i)))
            .collect();
        let per_chunk: Vec<Vec<VerifyError>> = work
            .par_chunks(512)
            .map(|chunk| {
                let mut v = Verifier {
                    m,
                    errors: Vec::new(),
                };
                for &(c, id) in chunk {
                    v.instruction(c, id, &positions[c.index()]);
                }
                v.errors
            })
            .collect();
        self.errors.extend(per_chunk.into_iter().flatten());
        self.entry_layout();
        self.device_counts();
        self.call_depth();
    }

    /// Computations nest (call, while, fusion, conditional, ...) at most
    /// [`MAX_CALL_DEPTH`] deep, so the stages that walk called computations
    /// recursively never exhaust their stack.
    fn call_depth(&mut self) {
        let depth = call_depths(self.m);
        let entry = self.m.entry;
        // The entry itself is the first level.
        let deepest = depth.get(entry.index()).copied().unwrap_or(1) - 1;
        if deepest > MAX_CALL_DEPTH {
            let msg = format!(
                "computations nest {deepest} calls deep from the entry; tpusim accepts at most \
                 {MAX_CALL_DEPTH} (inline some of the calls)"
            );
            self.error(entry, None, msg);
        }
    }

    /// `num_partitions x replica_count` is within [`MAX_DEVICES`] (the parser
    /// already refuses counts below 1), so per-device tables downstream stay
    /// bounded.
    fn device_counts(&mut self) {
        let devices = u64::try_from(self.m.device_count()).unwrap_or(u64::MAX);
        if devices > MAX_DEVICES {
            let msg = format!(
                "the module asks for {devices} devices (num_partitions x replica_count); \
                 tpusim simulates at most {MAX_DEVICES}"
            );
            self.error(self.m.entry, None, msg);
        }
    }

    /// `entry_computation_layout` must agree with the entry's parameters and
    /// root, layouts aside.
    fn entry_layout(&mut self) {
        let Some((params, result)) = &self.m.config.entry_layout else {
            return;
        };
        let entry = self.m.entry();
        let shape_of = |i: InstrId| self.m.instrs.get(i.index()).map(|x| &x.shape);
        let mut problems = Vec::new();
        if params.len() != entry.params.len() {
            problems.push(format!(
                "entry_computation_layout has {} parameters but {} has {}",
                params.len(),
                entry.name,
                entry.params.len()
            ));
        }
        for (i, (want, &p)) in params.iter().zip(&entry.params).enumerate() {
            if let Some(have) = shape_of(p).filter(|s| !shapes_compatible(want, s)) {
                problems.push(format!(
                    "entry_computation_layout parameter {i} is {} but the parameter is {}",
                    shape_text(want),
                    shape_text(have)
                ));
            }
        }
        if let Some(have) = shape_of(entry.root).filter(|s| !shapes_compatible(result, s)) {
            problems.push(format!(
                "entry_computation_layout result is {} but the root of {} is {}",
                shape_text(result),
                entry.name,
                shape_text(have)
            ));
        }
        for p in problems {
            self.error(self.m.entry, None, p);
        }
    }

    fn ids_in_range(&mut self, c: CompId) -> bool {
        let comp = self.m.comp(c);
        let bad = comp
            .instrs
            .iter()
            .chain(&comp.params)
            .chain([&comp.root])
            .find(|i| i.index() >= self.m.instrs.len());
        if let Some(bad) = bad {
            let msg = format!(
                "computation {} refers to a missing instruction {bad:?}",
                comp.name
            );
            self.error(c, None, msg);
        }
        bad.is_none()
    }

    /// A ROOT among the instructions, parameters numbered 0..n, unique names.
    fn computation_shape(&mut self, c: CompId) {
        let comp = self.m.comp(c);
        if !comp.instrs.contains(&comp.root) {
            let msg = format!("computation {} has no ROOT instruction", comp.name);
            self.error(c, None, msg);
        }
        for (i, &p) in comp.params.iter().enumerate() {
            let ins = self.m.instr(p);
            if ins.opcode != Opcode::Parameter || ins.parameter_number != Some(i as i64) {
                let msg = format!(
                    "computation {}: parameter slot {i} holds {} instead of parameter({i})",
                    comp.name, ins.name
                );
                self.error(c, Some(p), msg);
            }
        }
        let mut names = FxHashSet::with_capacity_and_hasher(comp.instrs.len(), Default::default());
        for &id in &comp.instrs {
            let name = &self.m.instr(id).name;
            if !names.insert(name.as_str()) {
                let msg = format!(
                    "{name}: the name is used twice in computation {}",
                    comp.name
                );
                self.error(c, Some(id), msg);
            }
        }
    }

    fn instruction(&mut self, c: CompId, id: InstrId, defined: &Positions) {
        let ins = self.m.instr(id);
        if ins.parent != c {
            self.instr_error(
                id,
                format!("listed in {} but its parent differs", self.m.comp(c).name),
            );
            return;
        }
        let structural = self.operands_ok(id, defined)
            & self.called_ok(id)
            & self.arity_ok(ins, id)
            & self.required_attrs_ok(ins, id);
        if structural {
            self.shape_ok(id);
        }
        self.layouts_ok(id);
    }

    /// Every layout in the instruction's shape is a permutation of its array's
    /// dimensions, as XLA's `LayoutUtil::ValidateLayoutForShape` requires.
    fn layouts_ok(&mut self, id: InstrId) {
        // An explicit stack: tuple nesting depth comes from the input.
        let mut pending = vec![&self.m.instr(id).shape];
        while let Some(shape) = pending.pop() {
            match shape {
                Shape::Tuple(elements) => pending.extend(elements.iter()),
                Shape::Buffer(inner) => pending.push(inner),
                Shape::Array(a) => {
                    if let Some(problem) = a.layout.as_ref().and_then(|l| layout_problem(l, a)) {
                        self.instr_error(id, problem);
                        return;
                    }
                }
            }
        }
    }

    /// Operands exist, live in the same computation and are defined earlier.
    fn operands_ok(&mut self, id: InstrId, positions: &Positions) -> bool {
        let ins = self.m.instr(id);
        let preds = match ins.attr("control-predecessors") {
            Some(AttrValue::Instrs(v)) => v.as_slice(),
            _ => &[],
        };
        let bad =
            ins.operands.iter().chain(preds).find(|o| {
                o.index() >= self.m.instrs.len() || self.m.instr(**o).parent != ins.parent
            });
        if let Some(&o) = bad {
            self.instr_error(id, format!("operand {o:?} is not in the same computation"));
            return false;
        }
        let here = positions.get(&id).copied().unwrap_or(usize::MAX);
        let defined_earlier = |o: &InstrId| positions.get(o).is_some_and(|&p| p < here);
        if let Some(o) = ins.operands.iter().find(|o| !defined_earlier(o)) {
            let name = &self.m.instr(*o).name;
            self.instr_error(id, format!("operand {name} is used before it is defined"));
            return false;
        }
        true
    }

    fn called_ok(&mut self, id: InstrId) -> bool {
        let calls = self.m.instr(id).called_computations();
        match calls.iter().find(|c| c.index() >= self.m.comps.len()) {
            Some(c) => {
                self.instr_error(id, format!("calls a missing computation {c:?}"));
                false
            }
            None => true,
        }
    }

    fn arity_ok(&mut self, ins: &Instruction, id: InstrId) -> bool {
        let arity = ins.opcode.arity();
        if arity.accepts(ins.operands.len()) {
            return true;
        }
        self.instr_error(
            id,
            format!(
                "{} takes {arity:?} operands but has {}",
                ins.opcode,
                ins.operands.len()
            ),
        );
        false
    }

    fn required_attrs_ok(&mut self, ins: &Instruction, id: InstrId) -> bool {
        let missing: Vec<&str> = required_attrs(ins)
            .iter()
            .copied()
            .filter(|a| ins.attr(a).is_none())
            .collect();
        let conditional_ok = ins.opcode != Opcode::Conditional
            || ins.attr("branch_computations").is_some()
            || (ins.attr("true_computation").is_some() && ins.attr("false_computation").is_some());
        if !conditional_ok {
            self.instr_error(
                id,
                "conditional needs branch_computations= or true_computation= and false_computation=",
            );
        }
        if !missing.is_empty() {
            self.instr_error(
                id,
                format!(
                    "{} is missing required attribute(s) {}",
                    ins.opcode,
                    missing.join(", ")
                ),
            );
        }
        missing.is_empty() && conditional_ok
    }

    fn shape_ok(&mut self, id: InstrId) {
        let ins = self.m.instr(id);
        let operands: Vec<&Shape> = ins
            .operands
            .iter()
            .map(|&o| &self.m.instr(o).shape)
            .collect();
        let sigs = self.m.signatures();
        match check_shape(ins.opcode, &operands, &ins.attrs, &sigs, &ins.shape) {
            Ok(()) => {}
            Err(InferError::Invalid(msg)) => self.instr_error(id, msg),
            Err(e @ InferError::NotInferable(_)) => self.instr_error(id, e),
        }
    }
}

/// Attributes an opcode cannot do without (HLO_GRAMMAR §5 "req"). Conditional's
/// alternatives and broadcast's scalar exemption are checked elsewhere.
fn required_attrs(ins: &Instruction) -> &'static [&'static str] {
    use Opcode::*;
    match ins.opcode {
        Compare => &["direction"],
        ReducePrecision => &["exponent_bits", "mantissa_bits"],
        Map | Call | ReduceWindow | AllReduce | AllReduceStart => &["to_apply"],
        Iota => &["iota_dimension"],
        Transpose | Reverse | Concatenate | GetDimensionSize | SetDimensionSize | AllGather
        | AllGatherStart => &["dimensions"],
        Slice => &["slice"],
        DynamicSlice => &["dynamic_slice_sizes"],
        Pad => &["padding"],
        GetTupleElement => &["index"],
        Reduce | Sort | ReduceScatter => &["dimensions", "to_apply"],
        SelectAndScatter => &["select", "scatter"],
        Convolution => &["dim_labels"],
        Fft => &["fft_type", "fft_length"],
        TopK => &["k"],
        Gather => &[
            "offset_dims",
            "collapsed_slice_dims",
            "start_index_map",
            "index_vector_dim",
            "slice_sizes",
        ],
        Scatter => &[
            "update_window_dims",
            "inserted_window_dims",
            "scatter_dims_to_operand_dims",
            "index_vector_dim",
            "to_apply",
        ],
        BatchNormTraining | BatchNormInference | BatchNormGrad => &["epsilon", "feature_index"],
        While => &["condition", "body"],
        Fusion => &["kind", "calls"],
        CustomCall => &["custom_call_target"],
        AsyncStart => &["calls"],
        Domain => &["domain"],
        Rng => &["distribution"],
        RngBitGenerator => &["algorithm"],
        RngGetAndUpdateState => &["delta"],
        CollectivePermute | CollectivePermuteStart => &["source_target_pairs"],
        Scan => &["to_apply", "dimensions", "num_carries"],
        _ => &[],
    }
}

/// Why `layout` cannot lay out `array`, if it cannot: its minor_to_major must
/// name every dimension exactly once.
fn layout_problem(layout: &Layout, array: &ArrayShape) -> Option<String> {
    let rank = array.dims.len();
    let m2m = &layout.minor_to_major;
    let mut seen = vec![false; rank];
    let is_permutation = m2m.len() == rank
        && m2m.iter().all(|&d| {
            let fresh = usize::try_from(d).is_ok_and(|d| d < rank && !seen[d]);
            if fresh {
                seen[d as usize] = true;
            }
            fresh
        });
    (!is_permutation).then(|| {
        let dims: Vec<String> = m2m.iter().map(i64::to_string).collect();
        format!(
            "layout {{{}}} is not a permutation of the {rank} dimensions of its array",
            dims.join(",")
        )
    })
}

/// How deep called computations may nest below the entry (calls, loop bodies,
/// fusions, branches). Real programs nest a few levels; the bound keeps every
/// recursive walk over called computations far inside a thread's stack.
pub const MAX_CALL_DEPTH: usize = 256;

/// For each computation, the longest chain of computation calls below it
/// (1 for a computation that calls nothing). Iterative post-order, so the
/// input's nesting cannot exhaust this function's stack; a cycle (which the
/// parser cannot produce) counts as no deeper than where it closes.
pub fn call_depths(m: &Module) -> Vec<usize> {
    let callees: Vec<Vec<CompId>> = m
        .comps
        .iter()
        .map(|c| {
            let mut out: Vec<CompId> = c
                .instrs
                .iter()
                .filter(|i| i.index() < m.instrs.len())
                .flat_map(|&i| m.instr(i).called_computations())
                .filter(|c| c.index() < m.comps.len())
                .collect();
            out.sort_unstable();
            out.dedup();
            out
        })
        .collect();
    let mut depth = vec![0usize; callees.len()];
    let mut visiting = vec![false; callees.len()];
    for root in 0..callees.len() {
        if depth[root] > 0 {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        visiting[root] = true;
        while let Some(&mut (c, ref mut next)) = stack.last_mut() {
            if let Some(&callee) = callees[c].get(*next) {
                *next += 1;
                let callee = callee.index();
                if depth[callee] == 0 && !visiting[callee] {
                    visiting[callee] = true;
                    stack.push((callee, 0));
                }
                continue;
            }
            depth[c] = 1 + callees[c]
                .iter()
                .map(|k| depth[k.index()])
                .max()
                .unwrap_or(0);
            visiting[c] = false;
            stack.pop();
        }
    }
    depth
}
