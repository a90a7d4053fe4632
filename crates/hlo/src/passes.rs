//! Passes: plain functions that rewrite a module in place. Each leaves a module
//! that verifies (tests run the verifier after every pass).

use crate::attr::{Attr, AttrValue};
use crate::ir::{CompId, Computation, InstrId, Instruction, Module};
use crate::names::NameTable;
use crate::opcode::{OpCategory, Opcode};
use crate::shape::Shape;
use rustc_hash::{FxHashMap, FxHashSet};

/// What [`fuse`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FusionStats {
    /// Fusion instructions created.
    pub fusions: usize,
    /// Instructions moved into them.
    pub fused_instructions: usize,
    /// Cheap producers computed again inside a fusion because other users
    /// outside it still read them (each copy counted once).
    pub duplicated: usize,
    /// Reductions fused with a producer of their input that they also
    /// output (multi-output fusions).
    pub multi_output: usize,
}

/// A TPU-style fusion pass for unoptimized HLO, so that the bytes a cost model
/// sees resemble what XLA moves: elementwise producers and the data-movement
/// ops XLA fuses into loops (broadcasts, reshapes, transposes, slices,
/// dynamic slices, pads, concatenates, reverses, iotas, scalar constants) are
/// fused into their consumers, and a dot or convolution is fused into the
/// elementwise consumers of its result (XLA's output fusion). A producer whose
/// other users stay outside is fused as a copy when it is cheap to compute
/// twice and reads no more than it writes (see [`may_duplicate`]); any other
/// is fused only when all its users are in the same fusion.
///
/// Computations that are already fused, or that are applied element-wise by
/// another op (reducers, comparators), are left alone, as are instructions
/// with control dependencies.
///
/// Existing instruction ids stay valid (new instructions and computations are
/// appended), so analyses of the original module can be looked up by id.
pub fn fuse(m: &mut Module) -> FusionStats {
    let mut stats = FusionStats::default();
    let mut comp_names: NameTable = m.comps.iter().map(|c| c.name.clone()).collect();
    for c in control_computations(m) {
        fuse_computation(m, c, &mut comp_names, &mut stats);
    }
    if stats.duplicated > 0 {
        // A copied producer whose every user ended up in fusions is unused.
        remove_dead_code(m);
    }
    stats
}

/// Ops that must stay even when nothing uses their result.
fn has_side_effects(op: Opcode) -> bool {
    matches!(
        op.category(),
        OpCategory::Collective | OpCategory::Io | OpCategory::Async
    ) || matches!(
        op,
        Opcode::CustomCall
            | Opcode::Parameter
            | Opcode::Rng
            | Opcode::RngGetAndUpdateState
            | Opcode::While
            | Opcode::Conditional
            | Opcode::Call
            | Opcode::CopyStart
            | Opcode::CopyDone
    )
}

/// Removes unused instructions without side effects from the control
/// computations (they stay in the arena, unlisted); returns how many.
/// Collectives are kept: see [`remove_dead_code_and_collectives`].
pub fn remove_dead_code(m: &mut Module) -> usize {
    remove_dead(m, has_side_effects)
}

/// [`remove_dead_code`] that also removes unused synchronous collectives, as
/// XLA's DCE does in an SPMD program, where every device drops the same ones
/// (a partitioner's reshards that a later choice made unused).
pub fn remove_dead_code_and_collectives(m: &mut Module) -> usize {
    use Opcode::*;
    remove_dead(m, |op| {
        has_side_effects(op)
            && !matches!(
                op,
                AllGather | AllReduce | ReduceScatter | AllToAll | CollectivePermute
            )
    })
}

fn remove_dead(m: &mut Module, keep: impl Fn(Opcode) -> bool) -> usize {
    let mut removed = 0;
    for c in control_computations(m) {
        let comp = m.comp(c);
        let mut live: FxHashSet<InstrId> = FxHashSet::default();
        let mut stack = vec![comp.root];
        stack.extend(
            comp.instrs
                .iter()
                .copied()
                .filter(|&i| keep(m.instr(i).opcode)),
        );
        while let Some(i) = stack.pop() {
            if live.insert(i) {
                let ins = m.instr(i);
                stack.extend(&ins.operands);
                if let Some(AttrValue::Instrs(v)) = ins.attr("control-predecessors") {
                    stack.extend(v);
                }
            }
        }
        let before = comp.instrs.len();
        m.comps[c.index()].instrs.retain(|i| live.contains(i));
        removed += before - m.comp(c).instrs.len();
    }
    removed
}

/// What [`inline_calls`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InlineStats {
    /// `call` instructions replaced by the body they call.
    pub inlined: usize,
    /// Calls left in place because inlining them would grow the module past
    /// its bound (see [`inline_calls`]).
    pub left: usize,
}

/// XLA's `CallInliner`: every `call` in a program computation is replaced by
/// a copy of the computation it calls (parameters become the call's
/// operands, uses of the call use the copied root), so later passes (fusion
/// above all) see across the boundary, as XLA:TPU's do: a `jit`-wrapped
/// `where` between a dot and a softmax otherwise keeps the scores in HBM.
///
/// Calls nested in calls are inlined round by round. The module may grow to
/// at most eight times its size plus 100,000 instructions (a computation
/// calling another twice at every level would otherwise grow exponentially);
/// calls past that bound stay calls and are counted in `left`.
pub fn inline_calls(m: &mut Module) -> InlineStats {
    inline_calls_except(m, &|_, _| false)
}

/// [`inline_calls`], leaving in place the calls `keep` picks (a shard_map
/// body, whose values are per-device, for the SPMD partitioner).
pub fn inline_calls_except(m: &mut Module, keep: &dyn Fn(&Module, InstrId) -> bool) -> InlineStats {
    let (inlined, left) = inline_all(m, Opcode::Call, "to_apply", keep);
    InlineStats { inlined, left }
}

/// Replaces every `opcode` instruction of the program computations by a copy
/// of the computation its `attr` names, round by round (nested ones too),
/// while the module stays within eight times its size plus 100,000
/// instructions; returns (inlined, left in place by that bound).
fn inline_all(
    m: &mut Module,
    opcode: Opcode,
    attr: &str,
    keep: &dyn Fn(&Module, InstrId) -> bool,
) -> (usize, usize) {
    let (mut inlined, mut left) = (0, 0);
    let bound = m.instrs.len().saturating_mul(8).saturating_add(100_000);
    let mut names: NameTable = m.instrs.iter().map(|i| i.name.clone()).collect();
    loop {
        let sites: Vec<InstrId> = control_computations(m)
            .into_iter()
            .flat_map(|c| m.comp(c).instrs.clone())
            .filter(|&i| {
                m.instr(i).opcode == opcode && !has_control_deps(m.instr(i)) && !keep(m, i)
            })
            .collect();
        // Sites grouped by caller, in text order: each caller is rewritten
        // once per round, however many of its calls are inlined.
        let mut by_caller: Vec<(CompId, Vec<(InstrId, CompId)>)> = Vec::new();
        let mut grown = m.instrs.len();
        for site in sites {
            let Some(callee) = m.instr(site).attr_comp(attr) else {
                continue;
            };
            if m.comp(callee).params.len() != m.instr(site).operands.len() {
                continue;
            }
            grown = grown.saturating_add(m.comp(callee).instrs.len());
            if grown > bound {
                left += 1;
                continue;
            }
            let caller = m.instr(site).parent;
            match by_caller.last_mut() {
                Some((c, v)) if *c == caller => v.push((site, callee)),
                _ => by_caller.push((caller, vec![(site, callee)])),
            }
        }
        if by_caller.is_empty() {
            return (inlined, left);
        }
        for (caller, sites) in by_caller {
            inlined += sites.len();
            inline_into(m, caller, &sites, &mut names);
        }
    }
}

/// What [`split_constants`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitStats {
    /// Instructions added as copies for further uses.
    pub copies: usize,
    /// Uses left sharing a value: the module would have grown past its bound.
    pub left: usize,
}

/// Shardy's constant splitter (`ConstantOrScalarSplitterPass`), run before
/// sharding propagation: every use of a constant expression (a constant or
/// an iota, and the broadcasts, reshapes, slices and elementwise ops of
/// constant expressions) or of a broadcast scalar, by an op that is neither,
/// gets its own copy of that sub-computation, so that unrelated users do not
/// propagate shardings to each other through a shared constant. The first
/// use keeps the original; copies are placed before it. Scalars are never
/// copied (nothing shards them). Bounded like [`inline_calls`]: at most
/// eight times the module plus 100,000 instructions.
pub fn split_constants(m: &mut Module) -> SplitStats {
    let mut stats = SplitStats::default();
    let bound = m.instrs.len().saturating_mul(8).saturating_add(100_000);
    let mut names: NameTable = m.instrs.iter().map(|i| i.name.clone()).collect();
    for c in control_computations(m) {
        split_in(m, c, bound, &mut names, &mut stats);
    }
    stats
}

fn split_in(
    m: &mut Module,
    c: CompId,
    bound: usize,
    names: &mut NameTable,
    stats: &mut SplitStats,
) {
    let order = m.comp(c).instrs.clone();
    let mut constant: FxHashSet<InstrId> = FxHashSet::default();
    let mut expansion: FxHashSet<InstrId> = FxHashSet::default();
    let mut used: FxHashSet<InstrId> = FxHashSet::default();
    // Copies to place before the instruction they copy.
    let mut before: FxHashMap<InstrId, Vec<InstrId>> = FxHashMap::default();
    for &i in &order {
        let ins = m.instr(i);
        if is_constant_expression(ins, &constant) {
            // A constant expression's own uses keep the originals: the users
            // outside it get the copies.
            used.extend(ins.operands.iter().copied());
            constant.insert(i);
            continue;
        }
        if ins.opcode == Opcode::Broadcast && ins.operands.first().is_some_and(|&o| is_scalar(m, o))
        {
            expansion.insert(i);
            continue;
        }
        for k in 0..m.instr(i).operands.len() {
            let o = m.instr(i).operands[k];
            if is_scalar(m, o) || !(constant.contains(&o) || expansion.contains(&o)) {
                continue;
            }
            if used.insert(o) {
                continue;
            }
            if m.instrs.len() >= bound {
                stats.left += 1;
                continue;
            }
            let copy = copy_sub_computation(m, o, names, &mut before, stats);
            m.instrs[i.index()].operands[k] = copy;
        }
    }
    if before.is_empty() {
        return;
    }
    let mut placed = Vec::with_capacity(order.len() + stats.copies);
    for i in order {
        if let Some(copies) = before.remove(&i) {
            placed.extend(copies);
        }
        placed.push(i);
    }
    m.comps[c.index()].instrs = placed;
}

/// The reverse of [`split_constants`] once shardings are decided, as XLA's
/// common-subexpression elimination does after partitioning: identical
/// constant expressions and broadcast scalars of a computation (same
/// opcode, shape, operands, literal and attributes but metadata) become one;
/// users read the first. Returns how many were merged away (left unlisted:
/// dead-code removal drops them).
pub fn merge_constant_copies(m: &mut Module) -> usize {
    let mut merged = 0;
    for c in control_computations(m) {
        merged += merge_in(m, c);
    }
    merged
}

fn merge_in(m: &mut Module, c: CompId) -> usize {
    let mut replace: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    let mut constant: FxHashSet<InstrId> = FxHashSet::default();
    let mut kept: FxHashMap<(Opcode, Vec<InstrId>), Vec<InstrId>> = FxHashMap::default();
    let order = m.comp(c).instrs.clone();
    let mut listed = Vec::with_capacity(order.len());
    for i in order {
        let ins = &mut m.instrs[i.index()];
        for o in ins.operands.iter_mut() {
            *o = replace.get(o).copied().unwrap_or(*o);
        }
        let ins = m.instr(i);
        let mergeable = if is_constant_expression(ins, &constant) {
            constant.insert(i);
            true
        } else {
            ins.opcode == Opcode::Broadcast
                && ins.operands.first().is_some_and(|&o| is_scalar(m, o))
        };
        if mergeable {
            let key = (ins.opcode, ins.operands.clone());
            let same = kept
                .get(&key)
                .and_then(|ks| ks.iter().copied().find(|&k| same_value(m.instr(k), ins)));
            if let Some(k) = same {
                replace.insert(i, k);
                continue;
            }
            kept.entry(key).or_default().push(i);
        }
        listed.push(i);
    }
    let comp = &mut m.comps[c.index()];
    if let Some(&r) = replace.get(&comp.root) {
        comp.root = r;
    }
    comp.instrs = listed;
    replace.len()
}

/// Whether two instructions with the same opcode and operands compute the
/// same value: same shape, literal and attributes (metadata aside).
fn same_value(a: &Instruction, b: &Instruction) -> bool {
    fn attrs(i: &Instruction) -> impl Iterator<Item = &Attr> {
        i.attrs.iter().filter(|x| x.name != "metadata")
    }
    a.shape == b.shape && a.literal == b.literal && attrs(a).eq(attrs(b))
}

/// Whether `ins` computes a constant from constants (`constant` holds the
/// constant expressions seen so far): Shardy's constant expressions.
fn is_constant_expression(ins: &Instruction, constant: &FxHashSet<InstrId>) -> bool {
    match ins.opcode {
        Opcode::Constant | Opcode::Iota => true,
        Opcode::Rng | Opcode::Map => false,
        op if op == Opcode::Broadcast
            || op == Opcode::Reshape
            || op == Opcode::Slice
            || op.is_elementwise() =>
        {
            !ins.operands.is_empty() && ins.operands.iter().all(|o| constant.contains(o))
        }
        _ => false,
    }
}

fn is_scalar(m: &Module, i: InstrId) -> bool {
    m.instr(i)
        .shape
        .as_array()
        .is_some_and(|a| a.dims.is_empty())
}

/// Copies the sub-computation rooted at `root` (its non-scalar operands
/// first, iteratively: chains are as deep as the input); returns the copy of
/// `root`. Each copy is recorded to be placed before its original.
fn copy_sub_computation(
    m: &mut Module,
    root: InstrId,
    names: &mut NameTable,
    before: &mut FxHashMap<InstrId, Vec<InstrId>>,
    stats: &mut SplitStats,
) -> InstrId {
    let mut copied: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    let mut stack = vec![(root, false)];
    while let Some((i, operands_done)) = stack.pop() {
        if copied.contains_key(&i) {
            continue;
        }
        if !operands_done {
            stack.push((i, true));
            for &o in &m.instr(i).operands {
                if !is_scalar(m, o) && !copied.contains_key(&o) {
                    stack.push((o, false));
                }
            }
            continue;
        }
        let mut copy = m.instr(i).clone();
        copy.name = names.fresh(&copy.name);
        for o in copy.operands.iter_mut() {
            *o = copied.get(o).copied().unwrap_or(*o);
        }
        let id = push(m, copy);
        before.entry(i).or_default().push(id);
        copied.insert(i, id);
        stats.copies += 1;
    }
    copied.get(&root).copied().unwrap_or(root)
}

/// What [`inline_fusions`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnfuseStats {
    /// Fusion instructions replaced by the instructions they fuse.
    pub unfused: usize,
    /// Fusions left in place: the module would have grown past its bound.
    pub left: usize,
    /// Computations no instruction calls any more, removed.
    pub dead_computations: usize,
}

/// Undoes another compiler's fusion decisions: every `fusion` in a program
/// computation is replaced by a copy of its fused computation (parameters
/// become the fusion's operands), nested fusions round by round, and the
/// fused computations left uncalled are removed. The result is the primitive
/// graph a TPU fusion pass can decide on afresh. Bounded like
/// [`inline_calls`]: at most eight times the module plus 100,000 instructions.
pub fn inline_fusions(m: &mut Module) -> UnfuseStats {
    let (unfused, left) = inline_all(m, Opcode::Fusion, "calls", &|_, _| false);
    UnfuseStats {
        unfused,
        left,
        dead_computations: remove_dead_computations(m),
    }
}

/// Removes computations nothing reachable from the entry calls (XLA's
/// HloDCE does the same after inlining) and renumbers the rest; their
/// instructions stay in the arena, listed by no computation. Hidden async
/// wrappers are kept with the instructions that own them. Returns how many.
pub fn remove_dead_computations(m: &mut Module) -> usize {
    let mut live = vec![false; m.comps.len()];
    let mut stack = vec![m.entry];
    stack.extend(m.comp_ids().filter(|&c| m.comp(c).is_async_sugar));
    while let Some(c) = stack.pop() {
        if std::mem::replace(&mut live[c.index()], true) {
            continue;
        }
        for &i in &m.comp(c).instrs {
            stack.extend(
                m.instr(i)
                    .called_computations()
                    .into_iter()
                    .filter(|k| !live[k.index()]),
            );
        }
    }
    let dead = live.iter().filter(|&&l| !l).count();
    if dead == 0 {
        return 0;
    }
    let mut remap = vec![CompId(u32::MAX); m.comps.len()];
    let mut next = 0u32;
    for (k, &l) in live.iter().enumerate() {
        if l {
            remap[k] = CompId(next);
            next += 1;
        }
    }
    let old = std::mem::take(&mut m.comps);
    m.comps = old
        .into_iter()
        .zip(&live)
        .filter_map(|(c, &l)| l.then_some(c))
        .collect();
    let listed: FxHashSet<InstrId> = m
        .comps
        .iter()
        .flat_map(|c| c.instrs.iter().copied())
        .collect();
    for (k, ins) in m.instrs.iter_mut().enumerate() {
        if !listed.contains(&InstrId(k as u32)) {
            continue;
        }
        ins.parent = remap[ins.parent.index()];
        for a in &mut ins.attrs {
            match &mut a.value {
                AttrValue::Comp(c) => *c = remap[c.index()],
                AttrValue::Comps(cs) => cs.iter_mut().for_each(|c| *c = remap[c.index()]),
                _ => {}
            }
        }
    }
    m.entry = remap[m.entry.index()];
    compact_instructions(m);
    dead
}

/// Drops arena instructions no computation lists (left by rewrites) and
/// renumbers ids, so consumers that scan the arena see only the program.
pub fn compact_instructions(m: &mut Module) {
    let mut keep = vec![false; m.instrs.len()];
    for c in &m.comps {
        for &i in &c.instrs {
            keep[i.index()] = true;
        }
    }
    if keep.iter().all(|&k| k) {
        return;
    }
    let mut remap = vec![u32::MAX; m.instrs.len()];
    let mut next = 0u32;
    for (k, &kept) in keep.iter().enumerate() {
        if kept {
            remap[k] = next;
            next += 1;
        }
    }
    let map = |i: &mut InstrId| {
        if let Some(&r) = remap.get(i.index()).filter(|&&r| r != u32::MAX) {
            *i = InstrId(r);
        }
    };
    let old = std::mem::take(&mut m.instrs);
    for (k, mut ins) in old.into_iter().enumerate() {
        if !keep[k] {
            continue;
        }
        ins.operands.iter_mut().for_each(map);
        for a in &mut ins.attrs {
            if let AttrValue::Instrs(v) = &mut a.value {
                v.iter_mut().for_each(map);
            }
        }
        m.instrs.push(ins);
    }
    for c in &mut m.comps {
        c.instrs.iter_mut().for_each(map);
        c.params.iter_mut().for_each(map);
        map(&mut c.root);
    }
}

/// A loop copied out of a call keeps the trip count its original has in
/// the callee (`known_trip_count`, as XLA's annotator writes it): later
/// analyses of the copy cannot map it back to the original's id.
fn record_trip_count(m: &Module, original: InstrId, clone: &mut Instruction) {
    if clone.opcode != Opcode::While || clone.attr("backend_config").is_some() {
        return;
    }
    if let crate::analysis::TripCount::Inferred(n) = crate::analysis::while_trip_count(m, original)
    {
        clone.attrs.push(Attr {
            name: "backend_config".into(),
            value: AttrValue::Str(format!("{{\"known_trip_count\":{{\"n\":\"{n}\"}}}}")),
        });
        clone
            .attrs
            .sort_by_key(|a| crate::attr::print_rank(&a.name));
    }
}

/// Replaces `call` (in its computation) by a copy of `callee`'s instructions.
/// Replaces each `(call, callee)` of `sites` (all in computation `caller`)
/// by a copy of the callee's instructions, in one pass over the caller:
/// uses of a call become uses of its copied root.
fn inline_into(m: &mut Module, caller: CompId, sites: &[(InstrId, CompId)], names: &mut NameTable) {
    let callee_of: FxHashMap<InstrId, CompId> = sites.iter().copied().collect();
    // A call's result -> the instruction that now computes it.
    let mut replaced: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    let mut order = Vec::with_capacity(m.comp(caller).instrs.len());
    for i in m.comp(caller).instrs.clone() {
        let Some(&callee) = callee_of.get(&i) else {
            order.push(i);
            continue;
        };
        let args: Vec<InstrId> = m
            .instr(i)
            .operands
            .iter()
            .map(|o| replaced.get(o).copied().unwrap_or(*o))
            .collect();
        let root = copy_body(m, caller, callee, &args, names, &mut order);
        replaced.insert(i, root);
    }
    let resolve = |o: &mut InstrId| *o = replaced.get(o).copied().unwrap_or(*o);
    for &i in &order {
        let ins = &mut m.instrs[i.index()];
        ins.operands.iter_mut().for_each(resolve);
        if let Some(AttrValue::Instrs(v)) = ins
            .attrs
            .iter_mut()
            .find(|a| a.name == "control-predecessors")
            .map(|a| &mut a.value)
        {
            v.iter_mut().for_each(resolve);
        }
    }
    let comp = &mut m.comps[caller.index()];
    if let Some(&root) = replaced.get(&comp.root) {
        comp.root = root;
    }
    comp.instrs = order;
}

/// Appends to `order` copies (parented to `caller`) of `callee`'s
/// instructions, its parameters bound to `args`; returns what its root became.
fn copy_body(
    m: &mut Module,
    caller: CompId,
    callee: CompId,
    args: &[InstrId],
    names: &mut NameTable,
    order: &mut Vec<InstrId>,
) -> InstrId {
    let mut remap: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    for &i in &m.comp(callee).instrs.clone() {
        let src = m.instr(i);
        if let Some(n) = src.parameter_number {
            if let Some(&arg) = usize::try_from(n).ok().and_then(|n| args.get(n)) {
                remap.insert(i, arg);
                continue;
            }
        }
        let mut clone = src.clone();
        clone.parent = caller;
        clone.name = names.fresh(&src.name);
        record_trip_count(m, i, &mut clone);
        for o in clone.operands.iter_mut() {
            *o = remap.get(o).copied().unwrap_or(*o);
        }
        for a in clone.attrs.iter_mut() {
            if let AttrValue::Instrs(v) = &mut a.value {
                v.iter_mut()
                    .for_each(|o| *o = remap.get(o).copied().unwrap_or(*o));
            }
        }
        let id = push(m, clone);
        remap.insert(i, id);
        order.push(id);
    }
    let root = m.comp(callee).root;
    remap.get(&root).copied().unwrap_or(root)
}

/// Computations that run as programs (entry, loop bodies and conditions,
/// call targets, branches), as opposed to ones applied element-wise by
/// reduce, sort, all-reduce... and hidden async wrappers.
pub fn control_computations(m: &Module) -> Vec<CompId> {
    let mut applied: FxHashSet<CompId> = FxHashSet::default();
    for ins in &m.instrs {
        for a in &ins.attrs {
            if !runs_as_program(ins.opcode, &a.name) {
                match &a.value {
                    AttrValue::Comp(c) => {
                        applied.insert(*c);
                    }
                    AttrValue::Comps(cs) => applied.extend(cs.iter().copied()),
                    _ => {}
                }
            }
        }
    }
    m.comp_ids()
        .filter(|c| !applied.contains(c) && !m.comp(*c).is_async_sugar)
        .collect()
}

/// Whether attribute `attr` of an `op` instruction names a computation run
/// as a program (loop body and condition, call target, branches) rather
/// than one applied element-wise (a reducer, a comparator, a fusion body).
pub fn runs_as_program(op: Opcode, attr: &str) -> bool {
    matches!(
        (op, attr),
        (Opcode::While, "condition" | "body")
            | (Opcode::Call, "to_apply")
            | (Opcode::Conditional, _)
    )
}

/// The computations `ins` runs as programs, in attribute order.
pub fn program_callees(ins: &Instruction) -> Vec<CompId> {
    ins.attrs
        .iter()
        .filter(|a| runs_as_program(ins.opcode, &a.name))
        .flat_map(|a| match &a.value {
            AttrValue::Comp(c) => vec![*c],
            AttrValue::Comps(cs) => cs.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// Ops that XLA fuses freely: cheap, element-wise in their data access.
fn is_fusible(ins: &Instruction) -> bool {
    let elementwise = matches!(
        ins.opcode.category(),
        OpCategory::Unary | OpCategory::Binary | OpCategory::Ternary
    );
    let movement = matches!(
        ins.opcode,
        Opcode::Broadcast
            | Opcode::Reshape
            | Opcode::Bitcast
            | Opcode::Iota
            | Opcode::Transpose
            | Opcode::Slice
            | Opcode::DynamicSlice
            | Opcode::Pad
            | Opcode::Concatenate
            | Opcode::Reverse
    );
    let small_constant = ins.opcode == Opcode::Constant && ins.shape.rank() == 0;
    (elementwise || movement || small_constant) && !ins.shape.is_tuple()
}

/// Whether `ins` may be computed again inside a consumer's fusion while its
/// other users keep reading it: it must be cheap (XLA's
/// `InstructionFusion::IsExpensive` is false) and the copy must read no more
/// bytes than the value has, as XLA's `ComputeGloballyUnfusible` requires of
/// a producer not every user fuses. The copy brings its cheap producers
/// along (see [`recompute_reads`]): `exp(convert(x) - broadcast(max))` over
/// bf16 scores reads the bf16 scores and the row maxima, less than its f32
/// result, so a softmax's consumers recompute it instead of reading it back.
/// An add of two full arrays or a slice does not qualify (copying those
/// would make each consumer re-read more than the value, and along a
/// residual stream would recompute every earlier layer's adds).
fn may_duplicate(m: &Module, ins: &Instruction) -> bool {
    let mut budget = RECOMPUTE_WALK;
    is_cheap(ins) && recompute_reads(m, ins, &mut budget) <= ins.shape.byte_size()
}

/// Producers [`recompute_reads`] looks through for one copy: a bound on the
/// walk, so that a long chain is judged in constant time (what lies beyond
/// is counted as read).
const RECOMPUTE_WALK: u32 = 16;

/// Bytes that computing `ins` again inside a fusion reads from outside it:
/// each operand is either read as it is or, when it is cheap and fusible,
/// computed again from its own operands, whichever reads less.
fn recompute_reads(m: &Module, ins: &Instruction, budget: &mut u32) -> u64 {
    ins.operands
        .iter()
        .map(|&o| {
            let op = m.instr(o);
            let stored = op.shape.byte_size();
            if *budget == 0 || !is_cheap(op) {
                return stored;
            }
            *budget -= 1;
            stored.min(recompute_reads(m, op, budget))
        })
        .fold(0, u64::saturating_add)
}

/// Fusible ops cheap enough to compute again in each consumer (XLA's
/// `InstructionFusion::IsExpensive` is false for them). An f32 or f16
/// divide, square root, reciprocal square root or exp is one instruction of
/// the TPU's transcendental unit, as XLA:GPU's fusion treats them on its
/// hardware (`GpuInstructionFusion::IsExpensive`); in other types they are
/// expanded and stay expensive.
fn is_cheap(ins: &Instruction) -> bool {
    let one_instruction = matches!(
        ins.opcode,
        Opcode::Divide | Opcode::Sqrt | Opcode::Rsqrt | Opcode::Exp
    ) && matches!(
        ins.shape.element_type(),
        Some(crate::PrimitiveType::F32 | crate::PrimitiveType::F16)
    );
    let expensive = !one_instruction
        && matches!(
            ins.opcode,
            Opcode::Divide
                | Opcode::Remainder
                | Opcode::Power
                | Opcode::Exp
                | Opcode::Expm1
                | Opcode::Log
                | Opcode::Log1p
                | Opcode::Logistic
                | Opcode::Sqrt
                | Opcode::Rsqrt
                | Opcode::Cbrt
                | Opcode::Tanh
                | Opcode::Tan
                | Opcode::Atan2
                | Opcode::Erf
        )
        || (matches!(
            ins.opcode,
            Opcode::Sin | Opcode::Cos | Opcode::Abs | Opcode::Sign
        ) && ins.shape.element_type().is_some_and(|t| t.is_complex()));
    is_fusible(ins) && !expensive
}

fn is_contraction(op: Opcode) -> bool {
    matches!(op, Opcode::Dot | Opcode::Convolution)
}

/// Instructions that may head a fusion: fusible ops, contractions and reduces.
fn can_root(ins: &Instruction) -> bool {
    (is_fusible(ins) && ins.opcode != Opcode::Constant)
        || is_contraction(ins.opcode)
        || (ins.opcode == Opcode::Reduce && !ins.shape.is_tuple())
}

fn has_control_deps(ins: &Instruction) -> bool {
    ins.attr("control-predecessors").is_some()
}

fn fuse_computation(
    m: &mut Module,
    c: CompId,
    comp_names: &mut NameTable,
    stats: &mut FusionStats,
) {
    let groups = plan_groups(m, c);
    if groups.is_empty() {
        return;
    }
    let mut instr_names: NameTable = m
        .comp(c)
        .instrs
        .iter()
        .map(|&i| m.instr(i).name.clone())
        .collect();
    let mut replaced: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    let mut placed: FxHashMap<InstrId, Vec<InstrId>> = FxHashMap::default();
    let mut moved: FxHashSet<InstrId> = FxHashSet::default();
    for group in groups {
        stats.fusions += 1;
        stats.fused_instructions += group.members.len();
        stats.duplicated += group.copies.len();
        let root = *group.members.last().expect("non-empty group");
        let fusion = outline(
            m,
            c,
            &group.members,
            group.extra_output,
            comp_names,
            &mut instr_names,
        );
        match group.extra_output {
            None => {
                replaced.insert(root, fusion);
                placed.insert(root, vec![fusion]);
            }
            Some(extra) => {
                stats.multi_output += 1;
                let (root_shape, extra_shape) =
                    (m.instr(root).shape.clone(), m.instr(extra).shape.clone());
                let first = tuple_element(m, c, fusion, 0, root_shape, &mut instr_names);
                let second = tuple_element(m, c, fusion, 1, extra_shape, &mut instr_names);
                replaced.insert(root, first);
                replaced.insert(extra, second);
                placed.insert(root, vec![fusion, first, second]);
            }
        }
        moved.extend(
            group
                .members
                .into_iter()
                .filter(|g| !group.copies.contains(g)),
        );
    }
    rewire_caller(m, c, &replaced, &placed, &moved);
}

/// `get-tuple-element(tuple, index)` in computation `c` (not yet in its order).
fn tuple_element(
    m: &mut Module,
    c: CompId,
    tuple: InstrId,
    index: usize,
    shape: Shape,
    names: &mut NameTable,
) -> InstrId {
    let name = names.fresh(&format!("{}.{index}", m.instr(tuple).name));
    push(
        m,
        Instruction {
            name,
            opcode: Opcode::GetTupleElement,
            shape,
            operands: vec![tuple],
            attrs: vec![Attr {
                name: "index".into(),
                value: AttrValue::Int(index as i64),
            }],
            parent: c,
            parameter_number: None,
            literal: None,
            async_sugar: None,
        },
    )
}

/// One planned fusion: `members` in text order, root last; `copies` are
/// members that also stay in the caller for users outside the fusion.
struct Group {
    members: Vec<InstrId>,
    copies: FxHashSet<InstrId>,
    /// A producer the fusion also outputs, for its users outside
    /// (multi-output fusion of a reduction with its input's producer).
    extra_output: Option<InstrId>,
}

/// Chooses fusion groups, consumers first (reverse text order). `users`
/// tracks who still reads each instruction in the caller as groups form: a
/// copied producer is no longer read by the members of the group that copied
/// it, and that group (its root) now reads the copy's operands.
fn plan_groups(m: &Module, c: CompId) -> Vec<Group> {
    let comp = m.comp(c);
    let mut users: FxHashMap<InstrId, FxHashSet<InstrId>> = users_in(m, comp)
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect();
    let position: FxHashMap<InstrId, usize> = comp
        .instrs
        .iter()
        .enumerate()
        .map(|(k, &i)| (i, k))
        .collect();
    let mut taken: FxHashSet<InstrId> = FxHashSet::default();
    let mut groups = Vec::new();
    for &root in comp.instrs.iter().rev() {
        let ins = m.instr(root);
        if taken.contains(&root) || !can_root(ins) || has_control_deps(ins) {
            continue;
        }
        let grown = grow_group(m, comp.root, root, &users, &taken, &position);
        let (members, copies, extra_output) = (grown.members, grown.copies, grown.extra_output);
        if members.len() < 2 {
            continue;
        }
        for &p in &copies {
            // Moved members now read the copy; a copied user's original in
            // the caller still reads `p`.
            if let Some(us) = users.get_mut(&p) {
                us.retain(|u| !members.contains(u) || copies.contains(u));
            }
            for &q in &m.instr(p).operands {
                if !members.contains(&q) {
                    users.entry(q).or_default().insert(root);
                }
            }
        }
        taken.extend(members.iter().filter(|g| !copies.contains(g)).copied());
        let mut ordered: Vec<InstrId> = members.into_iter().collect();
        ordered.sort_by_key(|i| position[i]);
        groups.push(Group {
            members: ordered,
            copies,
            extra_output,
        });
    }
    groups
}

/// What [`grow_group`] chose.
struct Grown {
    members: FxHashSet<InstrId>,
    copies: FxHashSet<InstrId>,
    extra_output: Option<InstrId>,
}

/// The members of the fusion rooted at `root`, grown through its producers,
/// and which of them are copies (producers still read outside). A reduction
/// also takes in one producer of its input that others read and that cannot
/// be copied (an expensive elementwise op, or the dot whose result it sums),
/// as a second output (XLA's multi-output fusion: the value is written once
/// and not read back for its sum), when that
/// producer's other users all come after the reduction.
fn grow_group(
    m: &Module,
    comp_root: InstrId,
    root: InstrId,
    users: &FxHashMap<InstrId, FxHashSet<InstrId>>,
    taken: &FxHashSet<InstrId>,
    position: &FxHashMap<InstrId, usize>,
) -> Grown {
    let mut members: FxHashSet<InstrId> = FxHashSet::default();
    let mut copies: FxHashSet<InstrId> = FxHashSet::default();
    let mut extra_output = None;
    members.insert(root);
    let mut has_contraction = is_contraction(m.instr(root).opcode);
    let mut frontier = vec![root];
    while let Some(x) = frontier.pop() {
        for &p in &m.instr(x).operands {
            let pi = m.instr(p);
            if members.contains(&p) || taken.contains(&p) || has_control_deps(pi) || p == comp_root
            {
                continue;
            }
            let contraction = is_contraction(pi.opcode) && !has_contraction;
            if !(is_fusible(pi) || contraction) {
                continue;
            }
            // Users that are copies still read `p` from the caller.
            let all_users_inside = users.get(&p).is_some_and(|us| {
                us.iter()
                    .all(|u| members.contains(u) && !copies.contains(u))
            });
            if all_users_inside {
                has_contraction |= contraction;
            } else if may_duplicate(m, pi) {
                copies.insert(p);
            } else if extra_output.is_none()
                && (contraction || is_fusible(pi))
                && reduces_over(m, root, p)
                && users.get(&p).is_some_and(|us| {
                    us.iter().all(|u| {
                        members.contains(u) && !copies.contains(u)
                            || position.get(u) > position.get(&root)
                    })
                })
            {
                // A dot others read too is written by the fusion that
                // reduces its result (an output fusion with two outputs).
                has_contraction |= contraction;
                extra_output = Some(p);
            } else {
                continue;
            }
            members.insert(p);
            frontier.push(p);
        }
    }
    Grown {
        members,
        copies,
        extra_output,
    }
}

/// Whether `root` is a one-input reduction whose input has `p`'s
/// dimensions (the two share one loop over the input).
fn reduces_over(m: &Module, root: InstrId, p: InstrId) -> bool {
    let r = m.instr(root);
    r.opcode == Opcode::Reduce
        && r.operands.len() == 2
        && m.instr(r.operands[0]).shape.dims() == m.instr(p).shape.dims()
        && m.instr(p).shape.as_array().is_some()
}

/// Users of each instruction of computation `c`, each user once, in text
/// order (one pass over the computation: a walk that scanned the whole
/// computation per value would be quadratic in long chains).
pub fn distinct_users(m: &Module, c: CompId) -> FxHashMap<InstrId, Vec<InstrId>> {
    let mut users: FxHashMap<InstrId, Vec<InstrId>> = FxHashMap::default();
    for &id in &m.comp(c).instrs {
        for &op in &m.instr(id).operands {
            let u = users.entry(op).or_default();
            if u.last() != Some(&id) {
                u.push(id);
            }
        }
    }
    users
}

/// Users of each instruction within the computation (operands only).
fn users_in(m: &Module, comp: &Computation) -> FxHashMap<InstrId, Vec<InstrId>> {
    let mut users: FxHashMap<InstrId, Vec<InstrId>> = FxHashMap::default();
    for &i in &comp.instrs {
        for &o in &m.instr(i).operands {
            users.entry(o).or_default().push(i);
        }
    }
    users
}

/// Copies `group` (text order, root last) of computation `c` into a new fused
/// computation and makes the `fusion` instruction that calls it (not yet in
/// the caller: see [`rewire_caller`]).
fn outline(
    m: &mut Module,
    c: CompId,
    group: &[InstrId],
    extra_output: Option<InstrId>,
    comp_names: &mut NameTable,
    instr_names: &mut NameTable,
) -> InstrId {
    let root = *group.last().expect("non-empty group");
    let members: FxHashSet<InstrId> = group.iter().copied().collect();
    // External operands become parameters, in order of first use.
    let mut inputs: Vec<InstrId> = Vec::new();
    for &g in group {
        for &o in &m.instr(g).operands {
            if !members.contains(&o) && !inputs.contains(&o) {
                inputs.push(o);
            }
        }
    }
    let fused = CompId(m.comps.len() as u32);
    let mut remap: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    let mut body = Vec::new();
    let mut params = Vec::new();
    for (k, &input) in inputs.iter().enumerate() {
        let id = push(
            m,
            Instruction {
                name: format!("param_{k}"),
                opcode: Opcode::Parameter,
                shape: m.instr(input).shape.clone(),
                operands: Vec::new(),
                attrs: Vec::new(),
                parent: fused,
                parameter_number: Some(k as i64),
                literal: None,
                async_sugar: None,
            },
        );
        remap.insert(input, id);
        params.push(id);
        body.push(id);
    }
    for &g in group {
        let mut clone = m.instr(g).clone();
        clone.parent = fused;
        clone.operands.iter_mut().for_each(|o| *o = remap[o]);
        clone.attrs.retain(|a| a.name != "sharding");
        let id = push(m, clone);
        remap.insert(g, id);
        body.push(id);
    }
    let kind = fusion_kind(m, group);
    let root_name = m.instr(root).name.clone();
    let caller_name = m.comp(c).name.clone();
    let mut fused_root = remap[&root];
    let mut shape = m.instr(root).shape.clone();
    if let Some(extra) = extra_output {
        shape = Shape::Tuple(vec![shape, m.instr(extra).shape.clone()]);
        fused_root = push(
            m,
            Instruction {
                name: format!("{root_name}.tuple"),
                opcode: Opcode::Tuple,
                shape: shape.clone(),
                operands: vec![remap[&root], remap[&extra]],
                attrs: Vec::new(),
                parent: fused,
                parameter_number: None,
                literal: None,
                async_sugar: None,
            },
        );
        body.push(fused_root);
    }
    m.comps.push(Computation {
        name: comp_names.fresh(&format!("fused_{root_name}.{caller_name}")),
        instrs: body,
        root: fused_root,
        params,
        is_entry: false,
        execution_thread: None,
        is_async_sugar: false,
    });
    let fusion = push(
        m,
        Instruction {
            name: instr_names.fresh(&format!("{root_name}.fusion")),
            opcode: Opcode::Fusion,
            shape,
            operands: inputs,
            attrs: vec![
                Attr {
                    name: "kind".into(),
                    value: AttrValue::Ident(kind.into()),
                },
                Attr {
                    name: "calls".into(),
                    value: AttrValue::Comp(fused),
                },
            ],
            parent: c,
            parameter_number: None,
            literal: None,
            async_sugar: None,
        },
    );
    fusion
}

fn push(m: &mut Module, ins: Instruction) -> InstrId {
    m.instrs.push(ins);
    InstrId(m.instrs.len() as u32 - 1)
}

/// XLA's names for the three fusion shapes this pass makes.
fn fusion_kind(m: &Module, group: &[InstrId]) -> &'static str {
    let root = m.instr(*group.last().expect("non-empty group"));
    if group.iter().any(|&g| is_contraction(m.instr(g).opcode)) {
        "kOutput"
    } else if root.opcode == Opcode::Reduce {
        "kInput"
    } else {
        "kLoop"
    }
}

/// Each fusion (with the get-tuple-elements of a multi-output one) takes its
/// root's place in the caller, the other members leave it, and every use of
/// a root or extra output (including by other fusions) uses what replaced it.
fn rewire_caller(
    m: &mut Module,
    c: CompId,
    replaced: &FxHashMap<InstrId, InstrId>,
    placed: &FxHashMap<InstrId, Vec<InstrId>>,
    moved: &FxHashSet<InstrId>,
) {
    let old = std::mem::take(&mut m.comps[c.index()].instrs);
    let mut new: Vec<InstrId> = Vec::with_capacity(old.len());
    for i in old {
        if let Some(v) = placed.get(&i) {
            new.extend(v);
        } else if !moved.contains(&i) {
            new.push(i);
        }
    }
    // The get-tuple-elements placed after a multi-output fusion read the
    // fusion itself.
    let outputs: FxHashSet<InstrId> = placed
        .values()
        .flat_map(|v| v.iter().skip(1))
        .copied()
        .collect();
    for &i in &new {
        if outputs.contains(&i) {
            continue;
        }
        for o in m.instrs[i.index()].operands.iter_mut() {
            if let Some(&f) = replaced.get(o) {
                *o = f;
            }
        }
    }
    let comp = &mut m.comps[c.index()];
    if let Some(&f) = replaced.get(&comp.root) {
        comp.root = f;
    }
    comp.instrs = new;
}
