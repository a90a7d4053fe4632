//! Sharding propagation as a pass of its own, after Shardy's: every value
//! gets a sharding before any op is partitioned, carried both ways (from
//! operands to results and back) along the *factors* each op's dims share.
//!
//! Each op maps its operands' and results' dims onto factors: an elementwise
//! op's dim `d` is one factor across all of them, a dot's batch, free and
//! contracting dims are factors (the contracting one shared by the operands
//! only), a reshape's merged or split dims share their major factor, and so
//! on (`factors_of`). Each factor takes the longest sharding its members
//! agree on (their common prefix where they conflict), and every open member
//! that holds a prefix of it is extended, skipping axes the member's other
//! dims already use. Where two factors of one op would give one tensor the
//! same axis, the factor whose sharding comes from the larger tensor wins
//! (Shardy's aggressive propagation: resharding the smaller tensor is
//! cheaper). It runs in Shardy's three op-priority stages (elementwise,
//! shape and data-flow ops; every pass-through factor; everything), each a
//! worklist: every op in program order, then, depth first, the ops touching
//! a value that changed.
//!
//! Annotated values (parameters, `Sharding` constraints, annotated results,
//! shard_map exits) are closed: propagation reads them and never changes
//! them. The result is a side table of every value's sharding, which the
//! partitioner partitions as given, as XLA partitions Shardy's output
//! (`write_shardings` prints it as `sharding=` attributes on request).
//!
//! Not modelled: the exact order Shardy's rewrite driver visits ops in (where
//! Shardy's outcome depends on it the two can part), sub-axes, open dims
//! inside annotations (every annotated dim is closed), Shardy's refusal to
//! tile a dim unevenly (tpusim carries an uneven tiling on, padded, but never
//! more tiles than rows), and shard_map bodies (they keep their own
//! annotations).
//!
//! This pass never prints and never panics on any input: a malformed op
//! simply has no factors, and the partitioner reports it.

use rustc_hash::FxHashMap;
use tpusim_hlo::attr::{set_attr, Sharding};
use tpusim_hlo::{AttrValue, CompId, InstrId, Module, Opcode, Shape};

use crate::mesh::{Axis, Mesh, Sh};
use crate::partition::{leaves_of, reshape_groups, Partitioner};
use crate::SpmdError;

/// The ranks of a value's array leaves (tokens count as rank 0), in leaf
/// order, without copying shapes; iterative, as tuples nest as deep as the
/// input says.
fn leaf_ranks(shape: &Shape) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = vec![shape];
    while let Some(s) = stack.pop() {
        match s.tuple_elements() {
            Some(t) => stack.extend(t.iter().rev()),
            None => out.push(s.as_array().map_or(0, |a| a.dims.len())),
        }
    }
    out
}

/// Visits per op and stage before propagation stops (it reaches a fixed
/// point long before on every program seen).
const MAX_ROUNDS: usize = 64;

/// An array leaf of an instruction's value.
type Slot = (InstrId, usize);

/// What propagation knows of one value.
#[derive(Clone, Debug)]
struct State {
    dims: Vec<Vec<Axis>>,
    sizes: Vec<i64>,
    closed: bool,
    bytes: i64,
}

/// Dims (of values) that one factor of an op spans.
type Factor = Vec<(Slot, usize)>;

/// An op's factors and when propagation may use them.
struct Rule {
    instr: InstrId,
    operands: Vec<InstrId>,
    factors: Vec<Factor>,
    class: Class,
}

/// Ops by when Shardy's op-priority propagation lets them propagate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Elementwise ops, reshapes, transposes, constraints and the edges of
    /// data flow (tuples, loops): both ways, from the first stage on.
    Identity,
    /// Dynamic slices and updates: forward only in the first stage.
    ForwardSlice,
    Other,
}

/// Which members of a factor a stage may update.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    None,
    Forward,
    Both,
}

/// The stages of Shardy's op-priority propagation: each runs to a fixed
/// point before the next widens what may propagate.
const STAGES: usize = 3;

impl Rule {
    /// Whether factor `k` passes through to the result (Shardy's
    /// pass-through factors; the others, a dot's contracting dims or a
    /// reduce's reduced dims, are reductions).
    fn passes_through(&self, k: usize) -> bool {
        self.factors[k].iter().any(|((v, _), _)| *v == self.instr)
    }

    /// Where a value stands among the op's tensors: its operands in order,
    /// then its results.
    fn tensor_index(&self, (v, leaf): Slot) -> usize {
        match self.operands.iter().position(|&o| o == v) {
            Some(k) if v != self.instr => k,
            _ => self.operands.len() + leaf,
        }
    }
}

fn direction(stage: usize, rule: &Rule, k: usize) -> Direction {
    match (rule.class, stage) {
        (Class::Identity, _) | (_, 2) => Direction::Both,
        (_, 1) if rule.passes_through(k) => Direction::Both,
        (Class::ForwardSlice, _) => Direction::Forward,
        _ => Direction::None,
    }
}

/// Propagates shardings over `module` (calls inlined first): the sharding
/// of every value of the computations the program runs.
pub(crate) fn propagate(module: &Module, mesh: &Mesh) -> Result<Propagated, SpmdError> {
    let mut m = module.clone();
    // Calls are inlined first (XLA's CallInliner), shard_map bodies aside.
    tpusim_hlo::passes::inline_calls_except(&mut m, &|m, i| is_manual_body(m, m.instr(i)));
    let comps = program_computations(&m);
    let mut states = initial_states(&m, mesh, &comps)?;
    let rules: Vec<Rule> = comps
        .iter()
        .flat_map(|&c| m.comp(c).instrs.iter().map(|&i| rule_of(&m, i, &states)))
        .filter(|r| !r.factors.is_empty())
        .collect();
    let mut touching: FxHashMap<Slot, Vec<usize>> = FxHashMap::default();
    for (r, rule) in rules.iter().enumerate() {
        for &(slot, _) in rule.factors.iter().flatten() {
            let list = touching.entry(slot).or_default();
            if list.last() != Some(&r) {
                list.push(r);
            }
        }
    }
    // Each stage is a worklist, as Shardy's rewrite driver keeps one: every
    // op in program order first, then, depth first, the ops reading or
    // writing a value that changed.
    for stage in 0..STAGES {
        let mut stack: Vec<usize> = (0..rules.len()).rev().collect();
        let mut queued = vec![true; rules.len()];
        let mut budget = MAX_ROUNDS.saturating_mul(rules.len());
        while let Some(r) = stack.pop() {
            queued[r] = false;
            budget = budget.saturating_sub(1);
            if budget == 0 {
                break;
            }
            for slot in apply(&rules[r], stage, &mut states, mesh) {
                for &u in touching.get(&slot).map_or(&[][..], Vec::as_slice) {
                    if !queued[u] {
                        queued[u] = true;
                        stack.push(u);
                    }
                }
            }
        }
    }
    let given = given_shardings(&m, &states, &comps);
    Ok(Propagated { module: m, given })
}

/// A module ready for the partitioner (calls inlined) and the sharding
/// propagation gives its values, by instruction name.
pub(crate) struct Propagated {
    pub module: Module,
    pub given: FxHashMap<String, Vec<Sh>>,
}

/// Whether a call is the body of a Shardy manual computation (a shard_map):
/// its values are per-device and keep their annotations.
fn is_manual_body(m: &Module, call: &tpusim_hlo::Instruction) -> bool {
    call.called_computations().iter().any(|&c| {
        m.comp(c)
            .name
            .starts_with("xla.sdy.manual_computation_body")
    }) || call.operands.iter().any(|&o| {
        let producer = m.instr(o);
        producer.opcode == Opcode::GetTupleElement
            && producer
                .operands
                .first()
                .is_some_and(|&t| is_manual_boundary(m.instr(t)))
    })
}

/// The entry and the computations it runs as part of its program (loop
/// bodies and conditions, branches, called functions other than shard_map
/// bodies), transitively.
fn program_computations(m: &Module) -> Vec<CompId> {
    let mut out = vec![m.entry];
    let mut k = 0;
    while k < out.len() {
        for &i in &m.comp(out[k]).instrs {
            let ins = m.instr(i);
            let follows = match ins.opcode {
                Opcode::While | Opcode::Conditional => true,
                Opcode::Call => !is_manual_body(m, ins),
                _ => false,
            };
            if follows {
                for c in ins.called_computations() {
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
        }
        k += 1;
    }
    out
}

fn initial_states(
    m: &Module,
    mesh: &Mesh,
    comps: &[CompId],
) -> Result<FxHashMap<Slot, State>, SpmdError> {
    let reader = Partitioner::new(m, crate::build::Out::new(m, mesh.clone()));
    let mut states = FxHashMap::default();
    for &c in comps {
        for &i in &m.comp(c).instrs {
            let ins = m.instr(i);
            if manual_side(m, i) {
                continue;
            }
            let given = match target(ins) {
                Some("xla.sdy.LocalToGlobalShape") => Some(reader.exit_shardings(ins)?),
                _ => reader.annotation(ins)?,
            };
            for (leaf, shape) in leaves_of(&ins.shape).iter().enumerate() {
                let Some(a) = shape.as_array() else { continue };
                let sizes = a.dims.clone();
                let bytes =
                    sizes.iter().product::<i64>().max(1) * i64::from(a.ty.bit_width().max(8)) / 8;
                let (dims, closed) = match given.as_ref().and_then(|g| g.get(leaf)) {
                    Some(sh) if sh.rank() == sizes.len() => (sh.dims.clone(), true),
                    _ => (vec![Vec::new(); sizes.len()], false),
                };
                states.insert(
                    (i, leaf),
                    State {
                        dims,
                        sizes,
                        closed,
                        bytes,
                    },
                );
            }
        }
    }
    Ok(states)
}

/// Values on the manual side of a shard_map boundary (its entry, the values
/// taken from it, the body call): per-device, left as they are.
fn manual_side(m: &Module, i: InstrId) -> bool {
    let ins = m.instr(i);
    let entry = |x: &tpusim_hlo::Instruction| {
        matches!(
            target(x),
            Some("xla.sdy.GlobalToLocalShape" | "SPMDFullToShardShape")
        )
    };
    entry(ins)
        || (ins.opcode == Opcode::GetTupleElement
            && ins.operands.first().is_some_and(|&t| entry(m.instr(t))))
        || (ins.opcode == Opcode::Call && is_manual_body(m, ins))
}

/// A custom call's target.
fn target(ins: &tpusim_hlo::Instruction) -> Option<&str> {
    match ins.opcode {
        Opcode::CustomCall => ins.attr_ident("custom_call_target"),
        _ => None,
    }
}

/// Whether `ins` enters or leaves a shard_map region.
fn is_manual_boundary(ins: &tpusim_hlo::Instruction) -> bool {
    matches!(
        target(ins),
        Some(
            "SPMDFullToShardShape"
                | "SPMDShardToFullShape"
                | "xla.sdy.GlobalToLocalShape"
                | "xla.sdy.LocalToGlobalShape"
        )
    )
}

/// One round of propagation through an op's factors; the values that
/// changed. Each factor the stage lets through proposes the sharding its
/// members agree on, and the open members holding a prefix of it take as
/// much of it as their other dims leave free. Where two factors would give
/// one value the same axis, the factor whose sharding comes from the larger
/// tensor (in bytes; then the earlier operand, then the earlier factor)
/// takes it first (Shardy's aggressive propagation: resharding the smaller
/// tensor is cheaper).
fn apply(rule: &Rule, stage: usize, states: &mut FxHashMap<Slot, State>, mesh: &Mesh) -> Vec<Slot> {
    let mut plans: Vec<(i64, usize, usize, Vec<Axis>)> = Vec::new();
    for (k, factor) in rule.factors.iter().enumerate() {
        if direction(stage, rule, k) == Direction::None {
            continue;
        }
        let held: Vec<(&Vec<Axis>, i64, usize)> = factor
            .iter()
            .filter_map(|(slot, d)| {
                let s = states.get(slot)?;
                Some((&s.dims[*d], s.bytes, rule.tensor_index(*slot)))
            })
            .filter(|(axes, _, _)| !axes.is_empty())
            .collect();
        let Some(chosen) = agreed(held.iter().map(|h| h.0)) else {
            continue;
        };
        let (bytes, index) = held
            .iter()
            .filter(|h| *h.0 == chosen)
            .map(|h| (h.1, h.2))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .unwrap_or((0, usize::MAX));
        plans.push((bytes, index, k, chosen));
    }
    plans.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut changed = Vec::new();
    for (_, _, k, chosen) in plans {
        let forward_only = direction(stage, rule, k) == Direction::Forward;
        for &(slot, d) in &rule.factors[k] {
            if forward_only && slot.0 != rule.instr {
                continue;
            }
            if let Some(state) = states.get_mut(&slot) {
                if extend(state, d, &chosen, mesh) {
                    changed.push(slot);
                }
            }
        }
    }
    changed
}

/// Extends dim `d` of an open value towards `chosen` (which it must hold a
/// prefix of) with the axes its other dims leave free, and no more tiles
/// than the dim has rows.
fn extend(state: &mut State, d: usize, chosen: &[Axis], mesh: &Mesh) -> bool {
    let cur = &state.dims[d];
    if state.closed || !chosen.starts_with(cur) || chosen.len() == cur.len() {
        return false;
    }
    let taken: Vec<Axis> = state
        .dims
        .iter()
        .enumerate()
        .filter(|&(k, _)| k != d)
        .flat_map(|(_, a)| a.iter().copied())
        .collect();
    let free = chosen.iter().take_while(|a| !taken.contains(a)).count();
    let new = fitting_prefix(&chosen[..free], state.sizes[d], mesh);
    if new.len() <= state.dims[d].len() {
        return false;
    }
    state.dims[d] = new;
    true
}

/// The longest prefix of `want` with no more tiles than `size` has rows
/// (an uneven tiling is padded; an empty tile is not made).
fn fitting_prefix(want: &[Axis], size: i64, mesh: &Mesh) -> Vec<Axis> {
    let mut n = want.len();
    while n > 0 && i64::from(mesh.count(&want[..n])) > size {
        n -= 1;
    }
    want[..n].to_vec()
}

/// The longest sharding every held one is a prefix of, else the longest
/// prefix they all share; `None` when that is empty.
fn agreed<'a>(held: impl Iterator<Item = &'a Vec<Axis>>) -> Option<Vec<Axis>> {
    let held: Vec<&Vec<Axis>> = held.collect();
    let longest = held.iter().max_by_key(|a| a.len())?;
    if held.iter().all(|a| longest.starts_with(a)) {
        return Some((*longest).clone());
    }
    let mut common: Vec<Axis> = held[0].clone();
    for a in &held[1..] {
        let n = common
            .iter()
            .zip(a.iter())
            .take_while(|(x, y)| x == y)
            .count();
        common.truncate(n);
    }
    (!common.is_empty()).then_some(common)
}

fn rule_of(m: &Module, i: InstrId, states: &FxHashMap<Slot, State>) -> Rule {
    let ins = m.instr(i);
    // Members naming a dim their value lacks (a malformed attribute, which
    // the partitioner reports) or a value propagation does not track are
    // dropped.
    let has_dim = |&(slot, d): &(Slot, usize)| states.get(&slot).is_some_and(|s| d < s.dims.len());
    let factors: Vec<Factor> = factors_of(m, i)
        .into_iter()
        .map(|f| f.into_iter().filter(has_dim).collect::<Factor>())
        .filter(|f| f.len() > 1)
        .collect();
    use Opcode::*;
    let class = match ins.opcode {
        DynamicSlice | DynamicUpdateSlice => Class::ForwardSlice,
        Reshape | Bitcast | Transpose | Tuple | GetTupleElement | While | Conditional | Call
        | OptBarrier | Copy => Class::Identity,
        CustomCall => Class::Identity,
        op if op.is_elementwise() => Class::Identity,
        _ => Class::Other,
    };
    Rule {
        instr: i,
        operands: ins.operands.clone(),
        factors,
        class,
    }
}

/// The factors of instruction `i`: each a list of (value leaf, dim) that
/// propagation keeps tiled alike. An op without the operands its kind needs
/// (the partitioner reports it) has none.
fn factors_of(m: &Module, i: InstrId) -> Vec<Factor> {
    let ins = m.instr(i);
    let needs = match ins.opcode {
        Opcode::Scatter => 3,
        Opcode::Dot | Opcode::Gather | Opcode::Convolution | Opcode::DynamicUpdateSlice => 2,
        Opcode::Parameter | Opcode::Constant | Opcode::Iota | Opcode::Tuple => 0,
        _ => 1,
    };
    if ins.operands.len() < needs {
        return Vec::new();
    }
    let rank_of = |s: &Shape| s.as_array().map_or(0, |a| a.dims.len());
    // Operand `k`'s (array) value and its dims.
    let op = |k: usize| -> (Slot, Vec<i64>) {
        let o = ins.operands[k];
        ((o, 0), array_dims(m, o))
    };
    // Operand `k`'s value alone (no dims copied).
    let slot = |k: usize| -> Slot { (ins.operands[k], 0) };
    let res: Slot = (i, 0);
    let out_dims = array_dims(m, i);
    let ints = |n: &str| ins.attr_dims(n);
    use Opcode::*;
    match ins.opcode {
        Parameter | Constant | Iota | RngGetAndUpdateState | PartitionId | ReplicaId | AfterAll => {
            Vec::new()
        }
        // A tuple-shaped optimization barrier (jax.checkpoint) stops
        // propagation: carrying shardings through it moved the README step's
        // partition away from XLA's (bench/README.md, sixteenth session).
        op_code
            if op_code.is_elementwise()
                || op_code == Copy
                || (op_code == OptBarrier && !ins.shape.is_tuple()) =>
        {
            let r = rank_of(&ins.shape);
            let same_rank: Vec<usize> = (0..ins.operands.len())
                .filter(|&k| rank_of(&m.instr(ins.operands[k]).shape) == r)
                .collect();
            (0..r)
                .map(|d| {
                    let mut f = vec![(res, d)];
                    f.extend(same_rank.iter().map(|&k| (slot(k), d)));
                    f
                })
                .collect()
        }
        Broadcast => {
            let o = slot(0);
            ints("dimensions")
                .iter()
                .enumerate()
                .map(|(k, &d)| vec![(res, d), (o, k)])
                .collect()
        }
        Transpose => {
            let o = slot(0);
            ints("dimensions")
                .iter()
                .enumerate()
                .map(|(k, &p)| vec![(res, k), (o, p)])
                .collect()
        }
        Reshape | Bitcast => {
            let (o, in_dims) = op(0);
            reshape_pairs(&in_dims, &out_dims)
                .into_iter()
                .map(|(a, b)| vec![(o, a), (res, b)])
                .collect()
        }
        Dot => {
            let ((l, ld), (r, rd)) = (op(0), op(1));
            dot_factors(res, (l, ld.len()), (r, rd.len()), &ints)
        }
        Reduce => {
            let n = ins.operands.len() / 2;
            let reduced = ints("dimensions");
            let r_in = rank_of(&m.instr(ins.operands[0]).shape);
            let kept: Vec<usize> = (0..r_in).filter(|d| !reduced.contains(d)).collect();
            let mut fs: Vec<Factor> = kept
                .iter()
                .enumerate()
                .map(|(t, &d)| {
                    let mut f: Factor = (0..n).map(|k| (slot(k), d)).collect();
                    f.extend((0..n).map(|k| ((i, k), t)));
                    f
                })
                .collect();
            fs.extend(
                reduced
                    .iter()
                    .map(|&d| (0..n).map(|k| (slot(k), d)).collect()),
            );
            fs
        }
        Slice | DynamicSlice | Pad => {
            let (o, in_dims) = op(0);
            same_size_dims(&in_dims, &out_dims)
                .map(|d| vec![(res, d), (o, d)])
                .collect()
        }
        DynamicUpdateSlice => {
            let (o, in_dims) = op(0);
            let (u, u_dims) = op(1);
            (0..in_dims.len())
                .map(|d| {
                    let mut f = vec![(res, d), (o, d)];
                    if u_dims.get(d) == in_dims.get(d) {
                        f.push((u, d));
                    }
                    f
                })
                .collect()
        }
        Concatenate => {
            let cat = ints("dimensions").first().copied().unwrap_or(0);
            (0..out_dims.len())
                .filter(|&d| d != cat)
                .map(|d| {
                    let mut f = vec![(res, d)];
                    f.extend((0..ins.operands.len()).map(|k| (slot(k), d)));
                    f
                })
                .collect()
        }
        Gather => gather_factors(m, i, &ints),
        Scatter if ins.operands.len() == 3 => scatter_factors(m, i, &ints),
        CustomCall if target(ins) == Some("Sharding") => {
            let o = slot(0);
            (0..out_dims.len())
                .map(|d| vec![(res, d), (o, d)])
                .collect()
        }
        Tuple => {
            let mut fs = Vec::new();
            let mut offset = 0;
            for &o in &ins.operands {
                let ranks = leaf_ranks(&m.instr(o).shape);
                for (leaf, &rank) in ranks.iter().enumerate() {
                    fs.extend((0..rank).map(|d| vec![((i, offset + leaf), d), ((o, leaf), d)]));
                }
                offset += ranks.len();
            }
            fs
        }
        GetTupleElement => {
            let o = ins.operands[0];
            let k = ins.attr_int("index").unwrap_or(0) as usize;
            let elements = m.instr(o).shape.tuple_elements().unwrap_or(&[]);
            let offset: usize = elements.iter().take(k).map(|s| leaf_ranks(s).len()).sum();
            leaf_ranks(&ins.shape)
                .into_iter()
                .enumerate()
                .flat_map(|(leaf, rank)| {
                    (0..rank).map(move |d| vec![((i, leaf), d), ((o, offset + leaf), d)])
                })
                .collect()
        }
        While => while_factors(m, i),
        Conditional => conditional_factors(m, i),
        Call if !is_manual_body(m, ins) => call_factors(m, i),
        Sort | TopK => {
            // Every dim of a sort is one factor of operands and results (the
            // sorted one is gathered to sort and tiled again after); TopK's
            // last dim shrinks to k and is none.
            let rank = rank_of(&m.instr(ins.operands[0]).shape);
            let shrunk = match ins.opcode {
                TopK => rank.saturating_sub(1),
                _ => usize::MAX,
            };
            let leaves = leaf_ranks(&ins.shape).len();
            (0..rank)
                .filter(|&d| d != shrunk)
                .map(|d| {
                    let mut f: Factor = (0..ins.operands.len()).map(|k| (slot(k), d)).collect();
                    f.extend((0..leaves).map(|leaf| ((i, leaf), d)));
                    f
                })
                .collect()
        }
        ReduceWindow => {
            let Some(AttrValue::Window(w)) = ins.attr("window") else {
                return Vec::new();
            };
            let n = ins.operands.len() / 2;
            let whole = |d: usize| w.dims.get(d).is_none_or(|x| x.size == 1 && x.stride == 1);
            (0..out_dims.len())
                .filter(|&d| whole(d))
                .map(|d| {
                    let mut f: Factor = (0..n).map(|k| (slot(k), d)).collect();
                    f.extend((0..n).map(|k| ((i, k), d)));
                    f
                })
                .collect()
        }
        Convolution => {
            let Some(AttrValue::DimLabels(dl)) = ins.attr("dim_labels") else {
                return Vec::new();
            };
            let (l, r) = (slot(0), slot(1));
            let u = |x: i64| usize::try_from(x).unwrap_or(usize::MAX);
            vec![
                vec![(res, u(dl.output_batch)), (l, u(dl.input_batch))],
                vec![
                    (res, u(dl.output_feature)),
                    (r, u(dl.kernel_output_feature)),
                ],
                vec![(l, u(dl.input_feature)), (r, u(dl.kernel_input_feature))],
            ]
        }
        _ => Vec::new(),
    }
}

fn same_size_dims<'a>(a: &'a [i64], b: &'a [i64]) -> impl Iterator<Item = usize> + 'a {
    (0..a.len().min(b.len())).filter(move |&d| a[d] == b[d])
}

/// The (input dim, output dim) pairs a reshape keeps tiled alike: in each
/// group of dims whose sizes multiply alike (`reshape_groups`), the major
/// dims of both sides, where one side is a single dim (one to one, a split
/// or a merge); size-1 dims never.
fn reshape_pairs(a: &[i64], b: &[i64]) -> Vec<(usize, usize)> {
    reshape_groups(a, b)
        .into_iter()
        .filter_map(|(ins, outs)| {
            let ia: Vec<usize> = ins.filter(|&d| a[d] != 1).collect();
            let ib: Vec<usize> = outs.filter(|&d| b[d] != 1).collect();
            let single = ia.len() == 1 || ib.len() == 1;
            Some((*ia.first()?, *ib.first()?)).filter(|_| single)
        })
        .collect()
}

/// A dot's factors: batch dims (both operands and the result), free dims
/// (one operand and the result: the lhs's first), contracting dims (both
/// operands only).
fn dot_factors(
    res: Slot,
    (l, l_rank): (Slot, usize),
    (r, r_rank): (Slot, usize),
    ints: &dyn Fn(&str) -> Vec<usize>,
) -> Vec<Factor> {
    let (lb, rb, lc, rc) = (
        ints("lhs_batch_dims"),
        ints("rhs_batch_dims"),
        ints("lhs_contracting_dims"),
        ints("rhs_contracting_dims"),
    );
    let mut fs: Vec<Factor> = Vec::new();
    for (k, (&a, &b)) in lb.iter().zip(&rb).enumerate() {
        fs.push(vec![(res, k), (l, a), (r, b)]);
    }
    let mut next = lb.len();
    for (side, rank, batch, contracting) in [(l, l_rank, &lb, &lc), (r, r_rank, &rb, &rc)] {
        for k in (0..rank).filter(|k| !batch.contains(k) && !contracting.contains(k)) {
            fs.push(vec![(res, next), (side, k)]);
            next += 1;
        }
    }
    for (&a, &b) in lc.iter().zip(&rc) {
        fs.push(vec![(l, a), (r, b)]);
    }
    fs
}

/// The dims of an array-shaped instruction (none for a tuple or token).
fn array_dims(m: &Module, id: InstrId) -> Vec<i64> {
    m.instr(id)
        .shape
        .as_array()
        .map(|a| a.dims.clone())
        .unwrap_or_default()
}

fn gather_factors(m: &Module, i: InstrId, ints: &dyn Fn(&str) -> Vec<usize>) -> Vec<Factor> {
    let ins = m.instr(i);
    let (o, idx) = (ins.operands[0], ins.operands[1]);
    let og = array_dims(m, o);
    let ig = array_dims(m, idx);
    let out_rank = ins.shape.as_array().map_or(0, |a| a.dims.len());
    let offset = ints("offset_dims");
    let collapsed = ints("collapsed_slice_dims");
    let index_map = ints("start_index_map");
    let op_batch = ints("operand_batching_dims");
    let idx_batch = ints("start_indices_batching_dims");
    let slice_sizes = ints("slice_sizes");
    let ivd = ins.attr_int("index_vector_dim").unwrap_or(ig.len() as i64) as usize;
    let mut fs = Vec::new();
    let batch_in = (0..ig.len()).filter(|&d| d != ivd);
    let batch_out = (0..out_rank).filter(|d| !offset.contains(d));
    for (bi, bo) in batch_in.zip(batch_out) {
        let mut f = vec![((i, 0), bo), ((idx, 0), bi)];
        if let Some(k) = idx_batch.iter().position(|&b| b == bi) {
            f.extend(op_batch.get(k).map(|&d| ((o, 0), d)));
        }
        fs.push(f);
    }
    let window = (0..og.len()).filter(|d| !collapsed.contains(d) && !op_batch.contains(d));
    for (&out_d, d) in offset.iter().zip(window) {
        let whole = slice_sizes.get(d).map(|&s| s as i64) == og.get(d).copied();
        if whole && !index_map.contains(&d) {
            fs.push(vec![((i, 0), out_d), ((o, 0), d)]);
        }
    }
    fs
}

fn scatter_factors(m: &Module, i: InstrId, ints: &dyn Fn(&str) -> Vec<usize>) -> Vec<Factor> {
    let ins = m.instr(i);
    let (o, idx, u) = (ins.operands[0], ins.operands[1], ins.operands[2]);
    let og = array_dims(m, o);
    let ig = array_dims(m, idx);
    let ug = array_dims(m, u);
    let window = ints("update_window_dims");
    let inserted = ints("inserted_window_dims");
    let to_operand = ints("scatter_dims_to_operand_dims");
    let in_batch = ints("input_batching_dims");
    let ivd = ins.attr_int("index_vector_dim").unwrap_or(ig.len() as i64) as usize;
    let mut fs: Vec<Factor> = Vec::new();
    let operand_window = (0..og.len()).filter(|d| !inserted.contains(d) && !in_batch.contains(d));
    let mut passes = vec![None; og.len()];
    for (d, &w) in operand_window.zip(&window) {
        if ug.get(w) == og.get(d) && !to_operand.contains(&d) {
            passes[d] = Some(w);
        }
    }
    for (d, pass) in passes.iter().enumerate() {
        let mut f = vec![((i, 0), d), ((o, 0), d)];
        if let Some(w) = pass {
            f.push(((u, 0), *w));
        }
        fs.push(f);
    }
    let batch_in = (0..ig.len()).filter(|&d| d != ivd);
    let scatter_dims = (0..ug.len()).filter(|d| !window.contains(d));
    for (bi, su) in batch_in.zip(scatter_dims) {
        fs.push(vec![((idx, 0), bi), ((u, 0), su)]);
    }
    fs
}

/// A loop's carried leaves: the init, the result, the body's parameter and
/// root and the condition's parameter are one value.
fn while_factors(m: &Module, i: InstrId) -> Vec<Factor> {
    let ins = m.instr(i);
    let mut ends: Vec<InstrId> = vec![i, ins.operands[0]];
    if let Some(b) = ins.attr_comp("body") {
        let body = m.comp(b);
        ends.extend(body.params.first().copied());
        ends.push(body.root);
    }
    if let Some(c) = ins.attr_comp("condition") {
        ends.extend(m.comp(c).params.first().copied());
    }
    leaf_ranks(&ins.shape)
        .into_iter()
        .enumerate()
        .flat_map(|(leaf, rank)| {
            let ends = ends.clone();
            (0..rank).map(move |d| ends.iter().map(|&e| ((e, leaf), d)).collect())
        })
        .collect()
}

/// Every dim of every leaf of `a` is one factor with the same leaf and dim
/// of `b` (a value passed on unchanged).
fn identity_leaves(m: &Module, a: InstrId, b: InstrId) -> Vec<Factor> {
    leaf_ranks(&m.instr(a).shape)
        .into_iter()
        .enumerate()
        .flat_map(|(leaf, rank)| (0..rank).map(move |d| vec![((a, leaf), d), ((b, leaf), d)]))
        .collect()
}

/// A call's operands are its callee's parameters, and its result the
/// callee's root.
fn call_factors(m: &Module, i: InstrId) -> Vec<Factor> {
    let ins = m.instr(i);
    let Some(&c) = ins.called_computations().first() else {
        return Vec::new();
    };
    let comp = m.comp(c);
    let mut pairs: Vec<(InstrId, InstrId)> = ins
        .operands
        .iter()
        .copied()
        .zip(comp.params.iter().copied())
        .collect();
    pairs.push((i, comp.root));
    pairs
        .into_iter()
        .flat_map(|(a, b)| identity_leaves(m, a, b))
        .collect()
}

/// A conditional's branch operands are its branches' parameters, and its
/// result is each branch's root.
fn conditional_factors(m: &Module, i: InstrId) -> Vec<Factor> {
    let ins = m.instr(i);
    let mut fs = Vec::new();
    for (k, c) in ins.called_computations().into_iter().enumerate() {
        let comp = m.comp(c);
        let pairs = [
            (
                ins.operands.get(k + 1).copied(),
                comp.params.first().copied(),
            ),
            (Some(i), Some(comp.root)),
        ];
        for (a, b) in pairs {
            if let (Some(a), Some(b)) = (a, b) {
                fs.extend(identity_leaves(m, a, b));
            }
        }
    }
    fs
}

/// The sharding propagation gives each value, by instruction name (one per
/// array leaf; other leaves replicated): every value of the program
/// computations except those annotated already, the entry's result (left to
/// the partitioner, which returns unevenly tiled results whole as XLA does)
/// and the manual side of shard_map boundaries.
fn given_shardings(
    m: &Module,
    states: &FxHashMap<Slot, State>,
    comps: &[CompId],
) -> FxHashMap<String, Vec<Sh>> {
    let mut given = FxHashMap::default();
    for &c in comps {
        for &i in &m.comp(c).instrs {
            let ins = m.instr(i);
            let boundary = is_manual_boundary(ins);
            let entry_root = c == m.entry && i == m.comp(c).root;
            if boundary || entry_root || ins.sharding().is_some() {
                continue;
            }
            let ranks = leaf_ranks(&ins.shape);
            let leaves: Option<Vec<Sh>> = ranks
                .iter()
                .enumerate()
                .map(|(leaf, &rank)| match states.get(&(i, leaf)) {
                    Some(st) => Some(Sh {
                        dims: st.dims.clone(),
                        ..Sh::replicated(0)
                    }),
                    None if ins.shape.is_tuple() && rank == 0 => Some(Sh::replicated(0)),
                    None => None,
                })
                .collect();
            if let Some(leaves) = leaves {
                given.insert(ins.name.clone(), leaves);
            }
        }
    }
    given
}

/// Writes each value's propagated sharding as its `sharding=` (what
/// `tpusim partition --shardings` prints).
pub(crate) fn write_shardings(m: &mut Module, given: &FxHashMap<String, Vec<Sh>>, mesh: &Mesh) {
    for k in 0..m.instrs.len() {
        let Some(leaves) = given.get(&m.instrs[k].name) else {
            continue;
        };
        let singles: Vec<_> = leaves.iter().map(|sh| sh.to_hlo(mesh)).collect();
        let sharding = match (m.instrs[k].shape.is_tuple(), singles.len()) {
            (false, 1) => Sharding::Single(singles.into_iter().next().expect("one leaf")),
            _ => Sharding::Tuple(singles),
        };
        set_attr(
            &mut m.instrs[k].attrs,
            "sharding",
            AttrValue::Sharding(Box::new(sharding)),
        );
    }
}
