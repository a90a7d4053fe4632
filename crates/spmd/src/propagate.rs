//! Sharding propagation as a pass of its own, after Shardy's: every value
//! gets a sharding before any op is partitioned, carried both ways (from
//! operands to results and back) along the *factors* each op's dims share.
//!
//! Each op maps its operands' and results' dims onto factors: an elementwise
//! op's dim `d` is one factor across all of them, a dot's batch, free and
//! contracting dims are factors (the contracting one shared by the operands
//! only), a reshape's merged or split dims share their major factor, and so
//! on (`factors_of`). A static slice's or pad's resized dims, a
//! concatenate's joined dim and a reverse's reversed dims are factors too
//! (Shardy's non-conservative rules, JAX's default: the partitioner moves
//! the rows that cross devices as halos); they are permutation factors,
//! which do not count as pass-through in the third stage. A dynamic
//! slice's sliced dims are not factors (their offset is data). Each factor takes the longest sharding its members
//! agree on (their common prefix where they conflict), and every open member
//! that holds a prefix of it is extended, skipping axes the member's other
//! dims already use. Where two factors of one op would give one tensor the
//! same axis, the factor whose sharding comes from the larger tensor wins
//! (Shardy's aggressive propagation: resharding the smaller tensor is
//! cheaper; in an elementwise op, then the more sharded factor), and an
//! elementwise op passes an operand no more than its result holds.
//!
//! It runs in Shardy's five op-priority stages (`opPropagationSchedule`):
//! elementwise, shape and data-flow ops whose operands have one use each;
//! all of those; every op's pass-through factors; every factor; and last,
//! broadcasts forward (before, only backward). Dynamic slices and updates
//! propagate forward only until the third stage. Each stage is a worklist
//! as Shardy's rewrite driver keeps one: every op in program order first,
//! where a loop's body (or a conditional's branches) is walked before the
//! loop's own edges, as Shardy's data-flow edge ops follow the op whose
//! regions they join; an op whose value another op changed is visited next
//! (the last notified first) unless it still waits its turn.
//!
//! Before it, as in Shardy's import, each use of a constant expression or a
//! broadcast scalar gets its own copy (`split_constants`), so unrelated
//! users do not tile each other through a shared constant; the partitioner
//! merges the copies whose tilings agree again afterwards.
//!
//! Values HLO has ops for and Shardy's program does not are one value here
//! (`Aliases`): a tuple's leaves and its operands, a get-tuple-element and
//! the leaf it takes, a loop's result and its body's and condition's
//! parameters (Shardy's edge owner and its targets), a branch's parameter
//! and the conditional's operand.
//!
//! Annotated values (parameters, `Sharding` constraints, annotated results,
//! shard_map exits) are closed: propagation reads them and never changes
//! them, except a dim their Shardy form leaves open (`{"a", ?}`,
//! `P.UNCONSTRAINED`), which it may extend. As Shardy's import does, the
//! value a fully closed constraint reads takes the constraint's sharding,
//! closed (`apply_constraints`). The result is a side table of every
//! value's sharding, which the partitioner partitions as given, as XLA
//! partitions Shardy's output (`write_shardings` prints it as `sharding=`
//! attributes on request).
//!
//! Not modelled: the exact order Shardy's rewrite driver visits ops in (XLA
//! imports the HLO into Shardy in its own op order, and where the outcome
//! depends on order the two can part), sub-axes (a reshape's split or
//! merged dims, whose major factor Shardy tiles by the axes' common divisor
//! with its size, take a prefix of the axes with no more tiles than rows),
//! and shard_map bodies (they keep their own annotations). A minor-most
//! factor may take more tiles than it has rows, padded, as in Shardy
//! (`x[:, :3]` of a sequence tiled 8 ways stays tiled 8 ways).
//!
//! This pass never prints and never panics on any input: a malformed op
//! simply has no factors, and the partitioner reports it.

use rustc_hash::{FxHashMap, FxHashSet};
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
    /// Per dim, whether an annotation closed it: propagation may extend an
    /// open dim's axes (`{"a", ?}` in Shardy), never a closed one's.
    closed: Vec<bool>,
    /// Elements (Shardy weighs conflicting sources by tensor size).
    elements: i64,
}

impl State {
    fn fully_closed(&self) -> bool {
        self.closed.iter().all(|&c| c)
    }

    fn fully_open(&self) -> bool {
        !self.closed.iter().any(|&c| c)
    }
}

/// Per leaf, per dim, whether the Shardy form of an instruction's
/// annotation leaves the dim open (`?`); `None` without a Shardy form.
fn open_dims(ins: &tpusim_hlo::Instruction) -> Option<Vec<Vec<bool>>> {
    let text = tpusim_hlo::sdy::frontend_attr(ins, "xla.sdy.sharding")?;
    let values = tpusim_hlo::sdy::parse_per_value_open(text).ok()?;
    Some(
        values
            .iter()
            .map(|dims| dims.iter().map(|(_, open)| *open).collect())
            .collect(),
    )
}

/// Which dims of an annotated leaf of rank `rank` its annotation closes:
/// every dim but those its Shardy form marks open; all of them without a
/// Shardy form (GSPMD's shardings are closed).
fn closed_dims(open: Option<&Vec<bool>>, rank: usize) -> Vec<bool> {
    match open.filter(|dims| dims.len() == rank) {
        Some(dims) => dims.iter().map(|open| !open).collect(),
        None => vec![true; rank],
    }
}

/// Dims (of values) that one factor of an op spans.
type Factor = Vec<(Slot, usize)>;

/// An op's factors and when propagation may use them.
struct Rule {
    instr: InstrId,
    /// The op's operand leaves (a loop's body results after them), as the
    /// values propagation keeps.
    operands: Vec<Slot>,
    factors: Vec<Factor>,
    /// Per factor: whether it moves data between devices when sharded (a
    /// sliced, padded, concatenated, reversed or windowed dim: Shardy's
    /// permutation and need-replication factors), which no stage before
    /// the fourth propagates.
    permutes: Vec<bool>,
    /// Per factor: whether it is the minor-most factor of every dim it
    /// spans, so that a tiling may overflow it (more tiles than rows,
    /// padded), as Shardy lets it; a reshape's split or merged dims are
    /// tiled no more ways than they have rows.
    minor_most: Vec<bool>,
    class: Class,
    /// Whether an operand (not a scalar) has other uses.
    shared_operand: bool,
    /// Whether the op is elementwise (or a constraint), which Shardy
    /// treats apart when factors conflict.
    elementwise: bool,
}

/// Ops by when Shardy's op-priority propagation lets them propagate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// The edges of data flow (tuples, loops, conditionals, calls), which
    /// Shardy's program has no ops for: always both ways.
    DataFlow,
    /// Elementwise ops, reshapes, transposes and constraints: both ways from
    /// the first stage on.
    PassThrough,
    /// Dynamic slices and updates: forward until every op's pass-through
    /// factors propagate.
    Slice,
    /// Broadcasts: backward only until the last stage.
    Broadcast,
    Other,
}

/// Which members of a factor a stage may update.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    None,
    /// From the operands to the results.
    Forward,
    /// From the results to the operands.
    Backward,
    Both,
}

/// The stages of Shardy's op-priority propagation (`opPropagationSchedule`),
/// each run to a fixed point before the next widens what may propagate:
/// pass-through ops whose operands have one use each; every pass-through op;
/// then every op's pass-through factors; every factor; and last, broadcasts
/// forward.
const STAGES: usize = 5;

impl Rule {
    /// Whether factor `k` passes through to the result (Shardy's
    /// pass-through factors; the others, a dot's contracting dims or a
    /// reduce's reduced dims, are reductions).
    fn passes_through(&self, k: usize) -> bool {
        !self.permutes[k] && self.factors[k].iter().any(|((v, _), _)| *v == self.instr)
    }

    /// Where a value stands among the op's tensors: its operands in order,
    /// then its results.
    fn tensor_index(&self, (v, leaf): Slot) -> usize {
        match self.operands.iter().position(|&o| o == (v, leaf)) {
            Some(k) if v != self.instr => k,
            _ => self.operands.len() + leaf,
        }
    }
}

fn direction(stage: usize, rule: &Rule, k: usize) -> Direction {
    let through = rule.passes_through(k);
    // In the first stage an op reading a value other ops read too waits:
    // propagating through it could conflict with those other uses.
    let waits = stage == 0 && rule.shared_operand;
    match rule.class {
        Class::DataFlow => Direction::Both,
        Class::PassThrough if waits => Direction::None,
        Class::PassThrough => Direction::Both,
        Class::Slice if waits => Direction::None,
        Class::Slice if stage < 2 || (stage == 2 && !through) => Direction::Forward,
        Class::Slice => Direction::Both,
        Class::Broadcast if stage < 2 || (stage == 2 && !through) => Direction::None,
        Class::Broadcast if stage < 4 => Direction::Backward,
        Class::Broadcast => Direction::Both,
        Class::Other if stage < 2 || (stage == 2 && !through) => Direction::None,
        Class::Other => Direction::Both,
    }
}

/// Propagates shardings over `module` (calls inlined first): the sharding
/// of every value of the computations the program runs.
pub(crate) fn propagate(module: &Module, mesh: &Mesh) -> Result<Propagated, SpmdError> {
    // Calls are inlined first (XLA's CallInliner), shard_map bodies aside.
    let mut m = inlined(module);
    // As Shardy's import does: each use of a constant gets its own copy.
    tpusim_hlo::passes::split_constants(&mut m);
    let (order, comps) = program_order(&m);
    let mut states = initial_states(&m, mesh, &comps)?;
    let aliases = Aliases::new(&m, &order, &states);
    let uses = use_counts(&m, &order, &aliases);
    let rules: Vec<Rule> = order
        .into_iter()
        .map(|i| rule_of(&m, i, &states, &aliases, &uses))
        .filter(|r| !r.factors.is_empty())
        .collect();
    let watchers = Watchers::new(&rules);
    // Each stage is a worklist, as Shardy's rewrite driver keeps one: every
    // op in program order first; an op whose values another op changed is
    // visited next (last notified first) unless it still waits its turn.
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
                for u in watchers.notified(slot) {
                    if u != r && !queued[u] {
                        queued[u] = true;
                        stack.push(u);
                    }
                }
            }
        }
    }
    let given = given_shardings(&m, &states, &aliases, &comps);
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
/// `module` with its calls inlined, shard_map bodies aside (XLA's
/// CallInliner before partitioning).
pub(crate) fn inlined(module: &Module) -> Module {
    let mut m = module.clone();
    tpusim_hlo::passes::inline_calls_except(&mut m, &|m, i| is_manual_body(m, m.instr(i)));
    m
}

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

/// The program's ops in the order Shardy's rewrite driver first visits
/// them: a pre-order walk, where a loop's condition and body (or a
/// conditional's branches) are walked in place, and the op itself, which
/// stands for Shardy's data-flow edges joining the regions to the outside,
/// comes after them; and the computations walked (the entry, loop bodies and
/// conditions, branches, called functions other than shard_map bodies). The
/// walk keeps its own stack, as nesting is as deep as the input says.
fn program_order(m: &Module) -> (Vec<InstrId>, Vec<CompId>) {
    enum Step<'a> {
        Walk(std::slice::Iter<'a, InstrId>),
        Emit(InstrId),
    }
    let mut out = Vec::new();
    let mut seen = vec![m.entry];
    let mut stack = vec![Step::Walk(m.comp(m.entry).instrs.iter())];
    while let Some(step) = stack.last_mut() {
        let i = match step {
            Step::Emit(i) => {
                out.push(*i);
                stack.pop();
                continue;
            }
            Step::Walk(it) => match it.next() {
                Some(&i) => i,
                None => {
                    stack.pop();
                    continue;
                }
            },
        };
        let ins = m.instr(i);
        let nested: Vec<CompId> = match ins.opcode {
            Opcode::While => ["condition", "body"]
                .iter()
                .filter_map(|k| ins.attr_comp(k))
                .collect(),
            Opcode::Conditional => ins.called_computations(),
            Opcode::Call if !is_manual_body(m, ins) => ins.called_computations(),
            _ => Vec::new(),
        };
        let fresh: Vec<CompId> = nested.into_iter().filter(|c| !seen.contains(c)).collect();
        seen.extend(fresh.iter().copied());
        stack.push(Step::Emit(i));
        // In reverse, so that the first region is walked first.
        for c in fresh.into_iter().rev() {
            stack.push(Step::Walk(m.comp(c).instrs.iter()));
        }
    }
    (out, seen)
}

/// Which ops hear of a change to a value: the op defining it and the ops
/// using it, in the order Shardy notifies them (the definer first, then the
/// users, latest first, as MLIR keeps a value's uses).
struct Watchers {
    by_slot: FxHashMap<Slot, Vec<usize>>,
}

impl Watchers {
    fn new(rules: &[Rule]) -> Self {
        let mut by_slot: FxHashMap<Slot, Vec<usize>> = FxHashMap::default();
        for (r, rule) in rules.iter().enumerate() {
            for &(slot, _) in rule.factors.iter().flatten() {
                let list = by_slot.entry(slot).or_default();
                if list.last() != Some(&r) {
                    list.push(r);
                }
            }
        }
        for (slot, list) in by_slot.iter_mut() {
            // The definer first, then the users in reverse program order.
            list.reverse();
            if let Some(k) = list.iter().position(|&r| rules[r].instr == slot.0) {
                let definer = list.remove(k);
                list.insert(0, definer);
            }
        }
        Watchers { by_slot }
    }

    fn notified(&self, slot: Slot) -> impl Iterator<Item = usize> + '_ {
        self.by_slot.get(&slot).into_iter().flatten().copied()
    }
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
            let open = given.as_ref().and_then(|_| open_dims(ins));
            for (leaf, shape) in leaves_of(&ins.shape).iter().enumerate() {
                let Some(a) = shape.as_array() else { continue };
                let sizes = a.dims.clone();
                let elements = sizes.iter().fold(1i64, |n, &d| n.saturating_mul(d.max(1)));
                let (dims, closed) = match given.as_ref().and_then(|g| g.get(leaf)) {
                    Some(sh) if sh.rank() == sizes.len() => {
                        let open = open.as_ref().and_then(|o| o.get(leaf));
                        (sh.dims.clone(), closed_dims(open, sizes.len()))
                    }
                    _ => (vec![Vec::new(); sizes.len()], vec![false; sizes.len()]),
                };
                states.insert(
                    (i, leaf),
                    State {
                        dims,
                        sizes,
                        closed,
                        elements,
                    },
                );
            }
        }
    }
    apply_constraints(m, comps, &mut states);
    Ok(states)
}

/// Shardy's import (`ApplyShardingConstraintsPass`): a value without a
/// sharding that a `Sharding` constraint reads takes the constraint's
/// sharding as its own, closed, unless another constraint asks it for a
/// different one or the value is a loop's or conditional's carried value
/// (there the constraint stays a use of its own). Propagation then cannot
/// tile the constrained value any other way (GSPMD does the same).
fn apply_constraints(m: &Module, comps: &[CompId], states: &mut FxHashMap<Slot, State>) {
    let mut asked: FxHashMap<InstrId, Vec<Vec<Vec<Axis>>>> = FxHashMap::default();
    for &c in comps {
        for &i in &m.comp(c).instrs {
            let ins = m.instr(i);
            let (Some("Sharding"), Some(&o)) = (target(ins), ins.operands.first()) else {
                continue;
            };
            if let Some(st) = states.get(&(i, 0)).filter(|st| st.fully_closed()) {
                asked.entry(o).or_default().push(st.dims.clone());
            }
        }
    }
    for (o, wants) in asked {
        if wants.iter().any(|w| *w != wants[0]) || carried_value(m, o) {
            continue;
        }
        if let Some(st) = states.get_mut(&(o, 0)).filter(|st| st.fully_open()) {
            if st.dims.len() == wants[0].len() {
                st.dims = wants[0].clone();
                st.closed = vec![true; st.dims.len()];
            }
        }
    }
}

/// Whether `v` is a loop's or conditional's carried value (a target of one
/// of Shardy's data-flow edges): an element of one's result or of a body's,
/// condition's or branch's parameter.
fn carried_value(m: &Module, v: InstrId) -> bool {
    let ins = m.instr(v);
    if ins.opcode != Opcode::GetTupleElement {
        return false;
    }
    let mut t = ins.operands.first().copied();
    // Through nested get-tuple-elements, iteratively (as deep as the input).
    while let Some(id) = t {
        let x = m.instr(id);
        match x.opcode {
            Opcode::GetTupleElement => t = x.operands.first().copied(),
            Opcode::While | Opcode::Conditional => return true,
            Opcode::Parameter => return !m.entry().params.contains(&id),
            _ => return false,
        }
    }
    false
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
/// tensor (in elements; in an elementwise op then the more sharded factor;
/// then the earlier operand, then the earlier factor)
/// takes it first (Shardy's aggressive propagation: resharding the smaller
/// tensor is cheaper).
fn apply(rule: &Rule, stage: usize, states: &mut FxHashMap<Slot, State>, mesh: &Mesh) -> Vec<Slot> {
    // (source tensor's elements, sharded size for elementwise ops, source
    // index, factor, axes): Shardy's order of preference across factors.
    let mut plans: Vec<(i64, i64, usize, usize, Vec<Axis>)> = Vec::new();
    for (k, factor) in rule.factors.iter().enumerate() {
        let dir = direction(stage, rule, k);
        if dir == Direction::None {
            continue;
        }
        let held: Vec<(&Vec<Axis>, i64, usize, bool)> = factor
            .iter()
            .filter_map(|&(slot, d)| {
                let s = states.get(&slot)?;
                let source = is_source(rule, dir, slot);
                Some((&s.dims[d], s.elements, rule.tensor_index(slot), source))
            })
            .filter(|h| !h.0.is_empty())
            .collect();
        let Some(mut chosen) = agreed(held.iter().map(|h| h.0)) else {
            continue;
        };
        // One way only, the other side can narrow the sharding but not widen it.
        let widest_source = held.iter().filter(|h| h.3).map(|h| h.0.len()).max();
        chosen.truncate(widest_source.unwrap_or(0));
        if chosen.is_empty() {
            continue;
        }
        let (elements, index) = held
            .iter()
            .filter(|h| h.0.starts_with(&chosen))
            .map(|h| (h.1, h.2))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .unwrap_or((0, usize::MAX));
        let sharded = if rule.elementwise {
            i64::from(mesh.count(&chosen))
        } else {
            0
        };
        plans.push((elements, sharded, index, k, chosen));
    }
    plans.sort_by(|a, b| (b.0, b.1, a.2, a.3).cmp(&(a.0, a.1, b.2, b.3)));
    let mut changed = Vec::new();
    for (_, _, _, k, chosen) in plans {
        let dir = direction(stage, rule, k);
        // Results first, then operands, as Shardy expands them.
        let members = &rule.factors[k];
        let is_result = |slot: Slot| slot.0 == rule.instr;
        let results = members.iter().filter(|m| is_result(m.0));
        let operands = members.iter().filter(|m| !is_result(m.0));
        // An elementwise op passes an operand no more than its result holds
        // (Shardy: no sideways propagation past a closed result).
        let result_dim = members
            .iter()
            .find(|m| is_result(m.0))
            .filter(|_| rule.elementwise);
        for &(slot, d) in results.chain(operands) {
            if dir != Direction::Both && is_source(rule, dir, slot) {
                continue;
            }
            let mut axes: &[Axis] = &chosen;
            if let Some(&(result, rd)) = result_dim.filter(|_| !is_result(slot)) {
                let held = states
                    .get(&result)
                    .map(|r| &r.dims[rd])
                    .filter(|held| held.len() < chosen.len() && chosen.starts_with(held));
                if let Some(held) = held {
                    axes = &chosen[..held.len()];
                }
            }
            if let Some(state) = states.get_mut(&slot) {
                if extend(state, d, axes, (mesh, rule.minor_most[k])) {
                    changed.push(slot);
                }
            }
        }
    }
    // Shardy tells of the operands' changes first, then the results'.
    changed.sort_by_key(|&slot| (rule.tensor_index(slot), slot.1));
    changed.dedup();
    changed
}

/// Whether `factor` of op `i` is the minor-most factor of each dim it
/// spans: all are but a reshape's that split or merge dims (tpusim gives
/// such a group's major dims the factor).
fn minor_most(m: &Module, i: InstrId, factor: &Factor) -> bool {
    let ins = m.instr(i);
    if !matches!(ins.opcode, Opcode::Reshape | Opcode::Bitcast) {
        return true;
    }
    let (Some(&(_, a)), Some(&(_, b))) = (
        factor.iter().find(|m| m.0 .0 != i),
        factor.iter().find(|m| m.0 .0 == i),
    ) else {
        return true;
    };
    let Some(operand) = ins.operands.first() else {
        return true;
    };
    let (input, out) = (m.instr(*operand).shape.dims(), ins.shape.dims());
    let non_unit = |dims: &[i64], r: std::ops::Range<usize>| r.filter(|&d| dims[d] != 1).count();
    reshape_groups(input, out).into_iter().any(|(ins, outs)| {
        ins.contains(&a)
            && outs.contains(&b)
            && non_unit(input, ins.clone()) == 1
            && non_unit(out, outs) == 1
    })
}

/// Whether `slot` is on the side a one-way direction propagates from.
fn is_source(rule: &Rule, dir: Direction, slot: Slot) -> bool {
    match dir {
        Direction::Forward => slot.0 != rule.instr,
        Direction::Backward => slot.0 == rule.instr,
        Direction::Both | Direction::None => true,
    }
}

/// Extends dim `d` of an open value towards `chosen` (which it must hold a
/// prefix of) with the axes its other dims leave free; unless the factor
/// is minor-most (`overflow`), with no more tiles than the dim has rows.
fn extend(state: &mut State, d: usize, chosen: &[Axis], (mesh, overflow): (&Mesh, bool)) -> bool {
    let cur = &state.dims[d];
    if state.closed[d] || !chosen.starts_with(cur) || chosen.len() == cur.len() {
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
    let new = if overflow {
        chosen[..free].to_vec()
    } else {
        fitting_prefix(&chosen[..free], state.sizes[d], mesh)
    };
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

fn rule_of(
    m: &Module,
    i: InstrId,
    states: &FxHashMap<Slot, State>,
    aliases: &Aliases,
    uses: &FxHashMap<Slot, usize>,
) -> Rule {
    let ins = m.instr(i);
    // Members naming a dim their value lacks (a malformed attribute, which
    // the partitioner reports) or a value propagation does not track are
    // dropped; members that are one value are one member.
    let has_dim = |&(slot, d): &(Slot, usize)| states.get(&slot).is_some_and(|s| d < s.dims.len());
    let (factors, flags): (Vec<Factor>, Vec<(bool, bool)>) = factors_of(m, i)
        .into_iter()
        .map(|f| {
            let flags = (permutes_data(m, i, &f), minor_most(m, i, &f));
            let mut members: Factor = Vec::with_capacity(f.len());
            for (slot, d) in f {
                let member = (aliases.canon(slot), d);
                if has_dim(&member) && !members.contains(&member) {
                    members.push(member);
                }
            }
            (members, flags)
        })
        .filter(|(f, _)| f.len() > 1)
        .unzip();
    let (permutes, minor_most) = flags.into_iter().unzip();
    use Opcode::*;
    let class = match ins.opcode {
        Tuple | GetTupleElement | While | Conditional | Call => Class::DataFlow,
        DynamicSlice | DynamicUpdateSlice => Class::Slice,
        Broadcast => Class::Broadcast,
        Reshape | Bitcast | Transpose | OptBarrier | Copy | CustomCall => Class::PassThrough,
        op if op.is_elementwise() => Class::PassThrough,
        _ => Class::Other,
    };
    let mut operands = operand_leaves(m, ins, aliases);
    if ins.opcode == While {
        if let Some(b) = ins.attr_comp("body") {
            let root = m.comp(b).root;
            let n = leaf_ranks(&m.instr(root).shape).len();
            operands.extend((0..n).map(|leaf| aliases.canon((root, leaf))));
        }
    }
    let shared_operand = operands.iter().any(|slot| {
        uses.get(slot).copied().unwrap_or(0) > 1
            && states.get(slot).is_some_and(|s| !s.dims.is_empty())
    });
    Rule {
        instr: i,
        operands,
        factors,
        permutes,
        minor_most,
        class,
        shared_operand,
        elementwise: ins.opcode.is_elementwise()
            || target(ins) == Some("Sharding")
            || ins.opcode == OptBarrier,
    }
}

/// Every leaf of every operand of `ins`, as the value propagation keeps.
fn operand_leaves(m: &Module, ins: &tpusim_hlo::Instruction, aliases: &Aliases) -> Vec<Slot> {
    ins.operands
        .iter()
        .flat_map(|&o| {
            (0..leaf_ranks(&m.instr(o).shape).len()).map(move |leaf| aliases.canon((o, leaf)))
        })
        .collect()
}

/// How many uses each value has in Shardy's program, where tuples and
/// get-tuple-elements are no ops: a loop uses its init's leaves, and a
/// computation's root tuple (a loop body's yield, the program's return)
/// uses its leaves.
fn use_counts(m: &Module, order: &[InstrId], aliases: &Aliases) -> FxHashMap<Slot, usize> {
    let mut uses: FxHashMap<Slot, usize> = FxHashMap::default();
    let roots: FxHashSet<InstrId> = m.comp_ids().map(|c| m.comp(c).root).collect();
    for &i in order {
        let ins = m.instr(i);
        let counted = match ins.opcode {
            Opcode::GetTupleElement => false,
            Opcode::Tuple => roots.contains(&i),
            _ => true,
        };
        if counted {
            for slot in operand_leaves(m, ins, aliases) {
                *uses.entry(slot).or_default() += 1;
            }
        }
    }
    uses
}

/// Values that are one value in Shardy's program: a tuple's leaves and its
/// operands, a get-tuple-element and the leaf it takes, a loop's result and
/// its body's and condition's parameters. HLO has ops for these and Shardy
/// has none (its data-flow edges make a loop's carry one value), so they
/// share one state here. An annotated member keeps its own state.
struct Aliases {
    to: FxHashMap<Slot, Slot>,
}

impl Aliases {
    fn new(m: &Module, order: &[InstrId], states: &FxHashMap<Slot, State>) -> Self {
        let open = |slot: &Slot| states.get(slot).is_some_and(State::fully_open);
        let mut link: FxHashMap<Slot, Slot> = FxHashMap::default();
        let mut tie = |from: Slot, to: Slot| {
            if open(&from) && states.contains_key(&to) {
                link.insert(from, to);
            }
        };
        for &i in order {
            let ins = m.instr(i);
            match ins.opcode {
                Opcode::Tuple => {
                    let mut first = 0;
                    for &o in &ins.operands {
                        let n = leaf_ranks(&m.instr(o).shape).len();
                        for k in 0..n {
                            tie((i, first + k), (o, k));
                        }
                        first += n;
                    }
                }
                Opcode::GetTupleElement => {
                    let (Some(&t), Some(index)) = (ins.operands.first(), ins.attr_int("index"))
                    else {
                        continue;
                    };
                    let Some(elements) = m.instr(t).shape.tuple_elements() else {
                        continue;
                    };
                    let index = usize::try_from(index)
                        .unwrap_or(usize::MAX)
                        .min(elements.len());
                    let first: usize = elements[..index].iter().map(|e| leaf_ranks(e).len()).sum();
                    for k in 0..leaf_ranks(&ins.shape).len() {
                        tie((i, k), (t, first + k));
                    }
                }
                Opcode::Conditional => {
                    // Branch `k` takes operand `k + 1` as its parameter.
                    for (k, c) in ins.called_computations().into_iter().enumerate() {
                        let (Some(&p), Some(&o)) =
                            (m.comp(c).params.first(), ins.operands.get(k + 1))
                        else {
                            continue;
                        };
                        for leaf in 0..leaf_ranks(&m.instr(o).shape).len() {
                            tie((p, leaf), (o, leaf));
                        }
                    }
                }
                Opcode::While => {
                    let params = ["body", "condition"]
                        .iter()
                        .filter_map(|k| ins.attr_comp(k))
                        .filter_map(|c| m.comp(c).params.first().copied());
                    for p in params {
                        for leaf in 0..leaf_ranks(&ins.shape).len() {
                            tie((p, leaf), (i, leaf));
                        }
                    }
                }
                _ => {}
            }
        }
        // Each link followed to the end of its chain (links point to values
        // defined earlier or to a loop, so chains end; an end found before
        // cuts a later walk short; the bound is a guard).
        let mut to: FxHashMap<Slot, Slot> = FxHashMap::default();
        for (&from, &next) in &link {
            let mut end = next;
            let mut steps = 0;
            while let Some(&n) = link.get(&end) {
                if let Some(&known) = to.get(&end) {
                    end = known;
                    break;
                }
                end = n;
                steps += 1;
                if steps > link.len() {
                    break;
                }
            }
            to.insert(from, end);
        }
        Aliases { to }
    }

    /// The slot holding the state of `slot`'s value.
    fn canon(&self, slot: Slot) -> Slot {
        self.to.get(&slot).copied().unwrap_or(slot)
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
        // A statically sliced or padded dim stays a factor (Shardy's
        // non-conservative propagation: the partitioner moves the rows that
        // cross devices); a dynamically sliced one does not (its offset is
        // data).
        Slice | Pad | Reverse => (0..out_dims.len())
            .map(|d| vec![(res, d), (slot(0), d)])
            .collect(),
        DynamicSlice => {
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
        Concatenate => (0..out_dims.len())
            .map(|d| {
                let mut f = vec![(res, d)];
                f.extend((0..ins.operands.len()).map(|k| (slot(k), d)));
                f
            })
            .collect(),
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

/// Whether sharding `factor` of `ins` moves rows between devices: its
/// result dim is sliced, padded, concatenated, reversed or windowed
/// (Shardy's permutation and need-replication factors, which propagate
/// only once every pass-through factor has).
fn permutes_data(m: &Module, i: InstrId, factor: &Factor) -> bool {
    let ins = m.instr(i);
    let resizes = matches!(ins.opcode, Opcode::Slice | Opcode::Pad);
    if !resizes && !matches!(ins.opcode, Opcode::Concatenate | Opcode::Reverse) {
        return false;
    }
    let Some(&(_, d)) = factor.iter().find(|((v, _), _)| *v == i) else {
        return false;
    };
    if resizes {
        let operand = ins
            .operands
            .first()
            .map(|&o| array_dims(m, o).get(d).copied());
        operand != Some(ins.shape.dims().get(d).copied())
    } else {
        ins.attr_dims("dimensions").contains(&d)
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
    aliases: &Aliases,
    comps: &[CompId],
) -> FxHashMap<String, Vec<Sh>> {
    let mut given = FxHashMap::default();
    for &c in comps {
        for &i in &m.comp(c).instrs {
            let ins = m.instr(i);
            let boundary = is_manual_boundary(ins);
            let entry_root = c == m.entry && i == m.comp(c).root;
            let ranks = leaf_ranks(&ins.shape);
            // An annotation with open dims is given what propagation added.
            let settled = ins.sharding().is_some()
                && (0..ranks.len()).all(|leaf| {
                    states
                        .get(&aliases.canon((i, leaf)))
                        .is_none_or(State::fully_closed)
                });
            if boundary || entry_root || settled {
                continue;
            }
            let leaves: Option<Vec<Sh>> = ranks
                .iter()
                .enumerate()
                .map(
                    |(leaf, &rank)| match states.get(&aliases.canon((i, leaf))) {
                        Some(st) => Some(Sh {
                            dims: st.dims.clone(),
                            ..Sh::replicated(0)
                        }),
                        None if ins.shape.is_tuple() && rank == 0 => Some(Sh::replicated(0)),
                        None => None,
                    },
                )
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
