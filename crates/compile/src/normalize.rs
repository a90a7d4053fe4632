//! Normalization of programs another backend compiled (XLA:CPU above all):
//! undo what that compiler did and XLA:TPU would not, so the TPU passes start
//! from the program the user wrote.
//!
//! XLA:CPU fuses for a CPU, lays arrays out for its kernels (copies to
//! transposed layouts, bitcasts between them), combines collectives into
//! tuples, and — lacking bf16 arithmetic — runs its float normalization: every bf16 op computes in
//! f32 between converts. A TPU computes the same program on bf16 data, so a
//! CPU-compiled program priced as printed moves f32 where a TPU moves bf16 (a
//! whole stacked-layer buffer converted to f32 around each per-layer
//! dynamic-update-slice; f32 weight all-gathers and gradient all-reduces).
//! The passes here are exact rewrites of the printed program, except that a
//! collective moved back to bf16 reduces in bf16, as the original program's
//! did on a TPU. They never print and never fail: a pattern they do not
//! recognize is left as it is, and priced as XLA:CPU wrote it.

use crate::util::{all_names, push_instr, sort_attrs};
use crate::Changed;
use rustc_hash::{FxHashMap, FxHashSet};
use tpusim_hlo::types::PrimitiveType;
use tpusim_hlo::NameTable;
use tpusim_hlo::{AttrValue, CompId, InstrId, Instruction, Module, Opcode, Shape};

/// Whether `m` carries XLA:TPU's layouts: XLA:TPU tiles every array it lays
/// out (`{1,0:T(8,128)(2,1)}`), while XLA:CPU and XLA:GPU print plain
/// minor-to-major layouts.
pub fn has_tpu_layouts(m: &Module) -> bool {
    m.instrs.iter().any(|i| {
        i.shape
            .leaves()
            .iter()
            .any(|a| a.layout.as_ref().is_some_and(|l| !l.tiles.is_empty()))
    })
}

/// A pass over the module.
pub type Pass = fn(&mut Module) -> Changed;

/// The passes that undo another backend's compilation, in pipeline order.
pub const FOREIGN_PASSES: [(&str, Pass); 4] = [
    ("fusion-inliner", unfuse),
    ("collective-splitter", split_tuple_collectives),
    ("layout-normalization", normalize_layouts),
    ("float-normalization-reversal", undo_float_normalization),
];

/// Undoes another backend's fusion: every fusion is replaced by the
/// instructions it fused (see [`tpusim_hlo::passes::inline_fusions`]).
pub fn unfuse(m: &mut Module) -> Changed {
    let s = tpusim_hlo::passes::inline_fusions(m);
    Changed::count(s.unfused + s.left, |_| {
        let left = if s.left > 0 {
            format!("; {} left fused (module size bound)", s.left)
        } else {
            String::new()
        };
        format!(
            "{} fusions of the compiled input unfused into their instructions{left}",
            s.unfused
        )
    })
}

/// Splits tuple collectives (XLA:CPU's combiner output) into one collective
/// per operand, so each can regain its own precision; tpusim's combiner
/// combines them again with XLA:TPU's thresholds.
pub fn split_tuple_collectives(m: &mut Module) -> Changed {
    let mut names = all_names(m);
    let mut split = 0;
    for c in crate::util::control_computations(m) {
        let users = crate::util::users(m, c);
        let order = m.comp(c).instrs.clone();
        let mut out = Vec::with_capacity(order.len());
        let mut gone: FxHashSet<InstrId> = FxHashSet::default();
        for i in order {
            let users = users.get(&i).map_or(&[][..], |v| v);
            match split_one(m, c, i, users, &mut names) {
                Some(parts) => {
                    out.extend(parts);
                    gone.extend(users);
                    split += 1;
                }
                None => out.push(i),
            }
        }
        out.retain(|i| !gone.contains(i));
        m.comps[c.index()].instrs = out;
    }
    Changed::count(split, |n| {
        format!("{n} tuple collectives of the compiled input split per operand")
    })
}

fn split_one(
    m: &mut Module,
    c: CompId,
    i: InstrId,
    users: &[InstrId],
    names: &mut NameTable,
) -> Option<Vec<InstrId>> {
    let ins = m.instr(i);
    let splittable = matches!(
        ins.opcode,
        Opcode::AllReduce | Opcode::AllGather | Opcode::ReduceScatter
    );
    let parts = ins.shape.tuple_elements()?.to_vec();
    if !splittable
        || parts.len() != ins.operands.len()
        || parts.len() < 2
        || m.comp(c).root == i
        || users
            .iter()
            .any(|&u| m.instr(u).opcode != Opcode::GetTupleElement)
    {
        return None;
    }
    let template = ins.clone();
    let mut new_ids = Vec::with_capacity(parts.len());
    for (k, shape) in parts.into_iter().enumerate() {
        let one = push_instr(
            m,
            Instruction {
                name: names.fresh(&template.name),
                shape,
                operands: vec![template.operands[k]],
                ..template.clone()
            },
        );
        new_ids.push(one);
    }
    for &u in users {
        let index = m.instr(u).attr_int("index").unwrap_or(-1);
        if let Some(&one) = usize::try_from(index).ok().and_then(|k| new_ids.get(k)) {
            // The get-tuple-element is dropped with the tuple it read.
            crate::util::replace_uses(m, c, u, one);
        }
    }
    Some(new_ids)
}

/// Makes the program independent of another backend's layouts, as the
/// user's program was (XLA:TPU assigns its own): a `copy` (a layout change
/// or a copy of loop state) is the identity and goes, a `bitcast` between
/// layouts becomes the logical transpose, reshape and transpose it stands
/// for, and every layout is dropped. Exact: only bitcasts read layouts.
/// A computation's root copy is kept.
pub fn normalize_layouts(m: &mut Module) -> Changed {
    let mut names = all_names(m);
    let (mut copies, mut bitcasts) = (0, 0);
    for c in crate::util::control_computations(m) {
        // Bitcasts first, while their operands still have the layouts they
        // were written against; then the copies, which are the identity.
        // A bitcast replaced by logical ops leaves a value without its
        // layout; a bitcast reading it was written against that layout.
        let mut written: FxHashMap<InstrId, Shape> = FxHashMap::default();
        bitcasts += rewrite_each(m, c, |m, i| {
            if m.instr(i).opcode != Opcode::Bitcast {
                return None;
            }
            let x = m.instr(i).operands[0];
            let src = written.get(&x).unwrap_or(&m.instr(x).shape).clone();
            let (value, made) = logical_bitcast(m, c, i, &src, &mut names)?;
            written.insert(value, m.instr(i).shape.clone());
            Some((value, made))
        });
        copies += rewrite_each(m, c, |m, i| {
            let ins = m.instr(i);
            (ins.opcode == Opcode::Copy && m.comp(c).root != i)
                .then(|| (ins.operands[0], Vec::new()))
        });
    }
    let mut stripped = false;
    for ins in &mut m.instrs {
        stripped |= has_layout(&ins.shape);
        ins.shape = ins.shape.without_layouts();
    }
    if let Some((params, result)) = &mut m.config.entry_layout {
        params.iter_mut().for_each(|p| *p = p.without_layouts());
        *result = result.without_layouts();
    }
    let n = copies + bitcasts + usize::from(stripped);
    Changed::count(n, |_| {
        format!(
            "layouts of the compiled input dropped: {copies} copies removed, {bitcasts} \
             bitcasts between layouts made logical transposes and reshapes"
        )
    })
}

/// Replaces each instruction of `c` for which `rewrite` gives (value, new
/// instructions) by that value, the new instructions taking its place in
/// the order; returns how many were replaced.
fn rewrite_each(
    m: &mut Module,
    c: CompId,
    mut rewrite: impl FnMut(&mut Module, InstrId) -> Option<(InstrId, Vec<InstrId>)>,
) -> usize {
    let mut users = crate::util::users(m, c);
    let order = m.comp(c).instrs.clone();
    let mut out = Vec::with_capacity(order.len());
    let mut n = 0;
    for i in order {
        let Some((value, made)) = rewrite(m, i) else {
            out.push(i);
            continue;
        };
        n += 1;
        out.extend(made);
        for u in users.remove(&i).unwrap_or_default() {
            for o in &mut m.instrs[u.index()].operands {
                if *o == i {
                    *o = value;
                }
            }
            users.entry(value).or_default().push(u);
        }
        if m.comp(c).root == i {
            m.comps[c.index()].root = value;
        }
    }
    m.comps[c.index()].instrs = out;
    n
}

fn has_layout(s: &Shape) -> bool {
    s.leaves().iter().any(|a| a.layout.is_some())
}

/// For a bitcast between non-default layouts (its operand's as written):
/// the instructions that compute
/// the same array logically (transpose the operand to its physical order,
/// reshape to the result's physical dimensions, transpose to the result's
/// logical order; identity steps left out) and the one holding the result.
/// `None` for a bitcast that is already a plain reshape, changes the
/// element type, or involves dynamic or tiled shapes.
fn logical_bitcast(
    m: &mut Module,
    c: CompId,
    i: InstrId,
    operand_shape: &Shape,
    names: &mut NameTable,
) -> Option<(InstrId, Vec<InstrId>)> {
    let ins = m.instr(i);
    let x = ins.operands[0];
    let out = ins.shape.as_array()?.clone();
    let src = operand_shape.as_array()?.clone();
    let major_to_minor = |a: &tpusim_hlo::shape::ArrayShape| -> Option<Vec<usize>> {
        match &a.layout {
            Some(l) if !l.tiles.is_empty() => None,
            Some(l) if l.minor_to_major.len() == a.dims.len() => l
                .minor_to_major
                .iter()
                .rev()
                .map(|&d| usize::try_from(d).ok())
                .collect(),
            _ => Some((0..a.dims.len()).collect()),
        }
    };
    let identity = |p: &[usize]| p.iter().enumerate().all(|(k, &d)| k == d);
    let (p_in, p_out) = (major_to_minor(&src)?, major_to_minor(&out)?);
    if src.ty != out.ty
        || !src.dynamic.is_empty()
        || !out.dynamic.is_empty()
        || (identity(&p_in) && identity(&p_out))
    {
        return None;
    }
    let metadata = crate::util::metadata_of(ins);
    let base = ins.name.clone();
    let mut made = Vec::new();
    let mut value = x;
    let mut emit =
        |m: &mut Module, opcode: Opcode, dims: Vec<i64>, perm: Option<Vec<i64>>, value: InstrId| {
            let mut attrs = metadata.clone();
            if let Some(perm) = perm {
                attrs.push(tpusim_hlo::Attr {
                    name: "dimensions".into(),
                    value: AttrValue::Ints(perm),
                });
            }
            sort_attrs(&mut attrs);
            let id = push_instr(
                m,
                Instruction {
                    name: names.fresh(&base),
                    opcode,
                    shape: Shape::array(src.ty, dims),
                    operands: vec![value],
                    attrs,
                    parent: c,
                    parameter_number: None,
                    literal: None,
                    async_sugar: None,
                },
            );
            made.push(id);
            id
        };
    let physical = |dims: &[i64], p: &[usize]| -> Vec<i64> { p.iter().map(|&d| dims[d]).collect() };
    let in_phys = physical(&src.dims, &p_in);
    if !identity(&p_in) {
        let perm = p_in.iter().map(|&d| d as i64).collect();
        value = emit(m, Opcode::Transpose, in_phys.clone(), Some(perm), value);
    }
    let out_phys = physical(&out.dims, &p_out);
    if in_phys != out_phys {
        value = emit(m, Opcode::Reshape, out_phys, None, value);
    }
    if !identity(&p_out) {
        let mut inverse = vec![0i64; p_out.len()];
        for (k, &d) in p_out.iter().enumerate() {
            inverse[d] = k as i64;
        }
        value = emit(m, Opcode::Transpose, out.dims.clone(), Some(inverse), value);
    }
    Some((value, made))
}

/// How many of each rewrite [`undo_float_normalization`] made.
#[derive(Default)]
struct Rewrites {
    folded: usize,
    dots: usize,
    dot_results: usize,
    moved: usize,
    collectives: usize,
    loop_state: usize,
}

impl Rewrites {
    fn total(&self) -> usize {
        self.folded + self.dots + self.dot_results + self.moved + self.collectives + self.loop_state
    }
    fn count_moved(&mut self, collective: bool) {
        if collective {
            self.collectives += 1;
        } else {
            self.moved += 1;
        }
    }
    fn add(&mut self, r: &Rewrites) {
        self.folded += r.folded;
        self.dots += r.dots;
        self.dot_results += r.dot_results;
        self.moved += r.moved;
        self.collectives += r.collectives;
        self.loop_state += r.loop_state;
    }
}

/// Undoes float normalization with exact rewrites, to a fixed point:
/// - `convert(convert(x))` back to `x`'s type, through an exactly wider
///   type, is `x`;
/// - a dot or convolution whose operands are all widened from one narrower
///   float type reads them unwidened (same products, same accumulation);
/// - a dot or convolution whose every user narrows its result has the
///   narrow result type (one rounding of the f32 sum, as before);
/// - a data-movement op (bitcast, reshape, transpose, broadcast, slice,
///   dynamic slice and update, pad, concatenate, gather, select, copy) or a
///   collective whose float operands are all widened from a narrower type
///   moves the narrow values and widens its result instead, and one whose
///   every user narrows its result narrows its operands instead.
///
/// Collectives that reduce (all-reduce, reduce-scatter) then reduce in the
/// narrow type, as the program before normalization did.
pub fn undo_float_normalization(m: &mut Module) -> Changed {
    let mut total = Rewrites::default();
    let mut fresh = Fresh {
        names: all_names(m),
        reducers: FxHashMap::default(),
    };
    let comps = crate::util::control_computations(m);
    // Every rewrite turns a wide value narrow or removes a convert, so rounds
    // end; the bound only guards against a bug.
    for _ in 0..MAX_ROUNDS {
        let mut r = Rewrites::default();
        for &c in &comps {
            let mut g = Graph::new(m, c);
            g.forward(m, &mut fresh, &mut r);
            g.backward(m, &mut fresh, &mut r);
            g.commit(m);
        }
        r.loop_state = narrow_loop_state(m);
        tpusim_hlo::passes::remove_dead_code(m);
        let progress = r.total();
        total.add(&r);
        if progress == 0 {
            break;
        }
    }
    Changed::count(total.total(), |_| {
        let parts = [
            (total.folded, "convert round trips folded"),
            (
                total.dots,
                "dots and convolutions read their narrow operands unwidened",
            ),
            (
                total.dot_results,
                "dots and convolutions round into the narrow type their users read",
            ),
            (
                total.moved,
                "data-movement ops moved back to the narrow type",
            ),
            (
                total.collectives,
                "collectives moved back to the narrow type",
            ),
            (total.loop_state, "loop-carried values carried narrow"),
        ];
        let said: Vec<String> = parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
        format!("float normalization undone: {}", said.join(", "))
    })
}

/// Loop state XLA:CPU widened: a `while` tuple element that enters widened
/// from a narrower type, is narrowed at every read in the body and after
/// the loop, and leaves each iteration widened (or unchanged) is carried in
/// the narrow type. Returns how many elements changed.
fn narrow_loop_state(m: &mut Module) -> usize {
    // Callers among the listed instructions (rewrites leave dead ones in
    // the arena).
    let mut called: FxHashMap<CompId, usize> = FxHashMap::default();
    for comp in &m.comps {
        for c in comp
            .instrs
            .iter()
            .flat_map(|&i| m.instr(i).called_computations())
        {
            *called.entry(c).or_default() += 1;
        }
    }
    let mut changed = 0;
    for c in crate::util::control_computations(m) {
        let users = crate::util::users(m, c);
        for w in m.comp(c).instrs.clone() {
            let Some(plan) = LoopPlan::of(m, c, w, &users, &called) else {
                continue;
            };
            for (k, n) in narrowable_elements(m, &plan, &users) {
                plan.narrow(m, k, n, &users);
                changed += 1;
            }
        }
    }
    changed
}

/// A `while` whose state can be retyped element by element: its init is a
/// tuple instruction, its body and condition are called by it alone and
/// read their parameter only through get-tuple-element, its body's root is
/// a tuple, and it is read only through get-tuple-element.
struct LoopPlan {
    w: InstrId,
    init: InstrId,
    body: CompId,
    cond: CompId,
    body_root: InstrId,
}

impl LoopPlan {
    fn of(
        m: &Module,
        c: CompId,
        w: InstrId,
        users: &FxHashMap<InstrId, Vec<InstrId>>,
        called: &FxHashMap<CompId, usize>,
    ) -> Option<LoopPlan> {
        let ins = m.instr(w);
        if ins.opcode != Opcode::While || m.comp(c).root == w {
            return None;
        }
        let init = *ins.operands.first()?;
        let body = ins.attr_comp("body")?;
        let cond = ins.attr_comp("condition")?;
        let body_root = m.comp(body).root;
        let only_gtes = |comp: CompId, v: InstrId| {
            m.comp(comp)
                .instrs
                .iter()
                .filter(|&&j| m.instr(j).operands.contains(&v))
                .all(|&j| m.instr(j).opcode == Opcode::GetTupleElement)
        };
        let ok = m.instr(init).opcode == Opcode::Tuple
            && users.get(&init).is_some_and(|u| u.len() == 1)
            && m.instr(body_root).opcode == Opcode::Tuple
            && called.get(&body) == Some(&1)
            && called.get(&cond) == Some(&1)
            && m.comp(body).params.len() == 1
            && m.comp(cond).params.len() == 1
            && only_gtes(body, m.comp(body).params[0])
            && only_gtes(cond, m.comp(cond).params[0])
            && users.get(&w).is_none_or(|u| {
                u.iter()
                    .all(|&j| m.instr(j).opcode == Opcode::GetTupleElement)
            });
        ok.then_some(LoopPlan {
            w,
            init,
            body,
            cond,
            body_root,
        })
    }

    /// The get-tuple-elements of element `k`: in the body, the condition,
    /// and of the loop's result.
    fn reads(
        &self,
        m: &Module,
        k: usize,
        users: &FxHashMap<InstrId, Vec<InstrId>>,
    ) -> Vec<InstrId> {
        let index = |j: InstrId| m.instr(j).attr_int("index") == Some(k as i64);
        let mut out: Vec<InstrId> = Vec::new();
        for comp in [self.body, self.cond] {
            let p = m.comp(comp).params[0];
            out.extend(
                m.comp(comp)
                    .instrs
                    .iter()
                    .copied()
                    .filter(|&j| m.instr(j).operands.contains(&p) && index(j)),
            );
        }
        out.extend(
            users
                .get(&self.w)
                .into_iter()
                .flatten()
                .copied()
                .filter(|&j| index(j)),
        );
        out
    }

    /// Retypes element `k` to `n` everywhere it appears.
    fn narrow(
        &self,
        m: &mut Module,
        k: usize,
        n: PrimitiveType,
        users: &FxHashMap<InstrId, Vec<InstrId>>,
    ) {
        let set = |shape: &mut Shape| {
            if let Shape::Tuple(v) = shape {
                if let Some(Shape::Array(a)) = v.get_mut(k) {
                    a.ty = n;
                }
            }
        };
        for j in [self.w, self.init, self.body_root] {
            set(&mut m.instrs[j.index()].shape);
        }
        for comp in [self.body, self.cond] {
            let p = m.comp(comp).params[0];
            set(&mut m.instrs[p.index()].shape);
        }
        for j in self.reads(m, k, users) {
            if let Shape::Array(a) = &mut m.instrs[j.index()].shape {
                a.ty = n;
            }
        }
        for j in [self.init, self.body_root] {
            let o = m.instr(j).operands[k];
            if let Some(x) = widened_from(m, o) {
                m.instrs[j.index()].operands[k] = x;
            }
        }
    }
}

/// Elements of `plan`'s state that enter widened from `n`, leave each
/// iteration widened from `n` or unchanged, and whose every read is
/// narrowed to `n` at once.
fn narrowable_elements(
    m: &Module,
    plan: &LoopPlan,
    users: &FxHashMap<InstrId, Vec<InstrId>>,
) -> Vec<(usize, PrimitiveType)> {
    let init = m.instr(plan.init);
    let root = m.instr(plan.body_root);
    let body_param = m.comp(plan.body).params[0];
    let mut out = Vec::new();
    for (k, &entry) in init.operands.iter().enumerate() {
        let Some(n) = widened_from(m, entry).and_then(|x| m.instr(x).shape.element_type()) else {
            continue;
        };
        let Some(&next) = root.operands.get(k) else {
            continue;
        };
        let unchanged = {
            let r = m.instr(next);
            r.opcode == Opcode::GetTupleElement
                && r.operands.first() == Some(&body_param)
                && r.attr_int("index") == Some(k as i64)
        };
        let next_narrow =
            widened_from(m, next).is_some_and(|y| m.instr(y).shape.element_type() == Some(n));
        if !(unchanged || next_narrow) {
            continue;
        }
        let narrowed_at_once = plan.reads(m, k, users).into_iter().all(|g| {
            let readers = readers_of(m, g, users, plan);
            readers.iter().all(|&u| {
                u == plan.body_root && unchanged
                    || (m.instr(u).opcode == Opcode::Convert
                        && m.instr(u).shape.element_type() == Some(n))
            })
        });
        if narrowed_at_once {
            out.push((k, n));
        }
    }
    out
}

/// Users of get-tuple-element `g` (in the body and condition, found by
/// scanning them; after the loop, from `users`).
fn readers_of(
    m: &Module,
    g: InstrId,
    users: &FxHashMap<InstrId, Vec<InstrId>>,
    plan: &LoopPlan,
) -> Vec<InstrId> {
    let parent = m.instr(g).parent;
    if parent == plan.body || parent == plan.cond {
        m.comp(parent)
            .instrs
            .iter()
            .copied()
            .filter(|&j| m.instr(j).operands.contains(&g))
            .collect()
    } else {
        users.get(&g).cloned().unwrap_or_default()
    }
}

const MAX_ROUNDS: usize = 256;

/// Names taken in the module and the narrow reducers made so far.
struct Fresh {
    names: NameTable,
    reducers: FxHashMap<(CompId, PrimitiveType), CompId>,
}

/// One computation under rewrite: users kept current, new instructions
/// queued to go in front of the instruction that made them.
struct Graph {
    comp: CompId,
    order: Vec<InstrId>,
    users: FxHashMap<InstrId, Vec<InstrId>>,
    before: FxHashMap<InstrId, Vec<InstrId>>,
    /// Instructions that gained users this round: their user lists are
    /// complete, but rules that need every user wait for the next round.
    grown: FxHashSet<InstrId>,
    /// Instructions replaced this round, dropped at commit (collectives
    /// would otherwise survive dead-code elimination as side-effecting).
    replaced: FxHashSet<InstrId>,
}

impl Graph {
    fn new(m: &Module, c: CompId) -> Graph {
        Graph {
            comp: c,
            order: m.comp(c).instrs.clone(),
            users: crate::util::users(m, c),
            before: FxHashMap::default(),
            grown: FxHashSet::default(),
            replaced: FxHashSet::default(),
        }
    }

    fn forward(&mut self, m: &mut Module, fresh: &mut Fresh, r: &mut Rewrites) {
        for k in 0..self.order.len() {
            let i = self.order[k];
            if let Some(x) = round_trip_source(m, i) {
                self.replace_uses(m, i, x);
                self.replaced.insert(i);
                r.folded += 1;
            } else if let Some(sources) = unwidened_contraction_operands(m, i) {
                for &x in &sources {
                    self.users.entry(x).or_default().push(i);
                    self.grown.insert(x);
                }
                m.instrs[i.index()].operands = sources;
                r.dots += 1;
            } else if let Some(n) = sinkable(m, i) {
                let collective = is_collective(m.instr(i).opcode);
                if self.sink(m, i, n, fresh) {
                    r.count_moved(collective);
                }
            }
        }
    }

    fn backward(&mut self, m: &mut Module, fresh: &mut Fresh, r: &mut Rewrites) {
        for k in (0..self.order.len()).rev() {
            let i = self.order[k];
            if self.grown.contains(&i) || m.comp(self.comp).root == i {
                continue;
            }
            let contraction = self.narrowed_contraction(m, i);
            let Some(n) = contraction.or_else(|| self.hoistable(m, i)) else {
                continue;
            };
            let collective = is_collective(m.instr(i).opcode);
            if !self.hoist(m, i, n, fresh) {
                continue;
            }
            if contraction.is_some() {
                // Rounds the f32 sum once, as the narrowing convert did.
                r.dot_results += 1;
            } else {
                r.count_moved(collective);
            }
        }
    }

    /// `i` computed in `n` on its operands' unwidened values, widened after.
    fn sink(&mut self, m: &mut Module, i: InstrId, n: PrimitiveType, fresh: &mut Fresh) -> bool {
        let Some(new) = self.narrow_copy(m, i, n, fresh) else {
            return false;
        };
        let wide_shape = m.instr(i).shape.clone();
        let widen = self.add_convert_shaped(m, i, new, wide_shape, &mut fresh.names);
        self.replace_uses(m, i, widen);
        self.replaced.insert(i);
        true
    }

    /// `i` computed in `n` on narrowed operands; its narrowing users use it.
    fn hoist(&mut self, m: &mut Module, i: InstrId, n: PrimitiveType, fresh: &mut Fresh) -> bool {
        let Some(new) = self.narrow_copy(m, i, n, fresh) else {
            return false;
        };
        for u in self.users.get(&i).cloned().unwrap_or_default() {
            self.replace_uses(m, u, new);
            self.replaced.insert(u);
        }
        self.replaced.insert(i);
        true
    }

    /// A copy of `i` in type `n`, placed before it, reading each data
    /// operand unwidened when it is widened from `n` and narrowed otherwise.
    fn narrow_copy(
        &mut self,
        m: &mut Module,
        i: InstrId,
        n: PrimitiveType,
        fresh: &mut Fresh,
    ) -> Option<InstrId> {
        let mut narrow = narrowed_clone(m, i, n, fresh)?;
        for k in data_operands(m.instr(i)) {
            let o = narrow.operands[k];
            narrow.operands[k] = match widened_from(m, o) {
                Some(x) if m.instr(x).shape.element_type() == Some(n) => x,
                _ => self.add_convert(m, i, o, n, &mut fresh.names),
            };
        }
        let operands = narrow.operands.clone();
        let new = push_instr(m, narrow);
        self.queue(i, new, &operands);
        Some(new)
    }

    /// For a dot or convolution whose every user narrows its float result to
    /// one type: that type (XLA:CPU computed a narrow-result dot in f32 and
    /// rounded after; a TPU rounds its f32 accumulation into the narrow
    /// result itself).
    fn narrowed_contraction(&self, m: &Module, i: InstrId) -> Option<PrimitiveType> {
        let ins = m.instr(i);
        if !matches!(ins.opcode, Opcode::Dot | Opcode::Convolution) {
            return None;
        }
        self.narrowing_users(m, i)
    }

    /// The one type every user of `i` (a float array) narrows it to.
    fn narrowing_users(&self, m: &Module, i: InstrId) -> Option<PrimitiveType> {
        let w = m.instr(i).shape.as_array()?.ty;
        if !w.is_float() {
            return None;
        }
        let mut n = None;
        for &u in self.users.get(&i)? {
            let user = m.instr(u);
            let t = user.shape.as_array()?.ty;
            if user.opcode != Opcode::Convert || !widens_exactly(t, w) || n.is_some_and(|n| n != t)
            {
                return None;
            }
            n = Some(t);
        }
        n
    }

    /// Whether every user of `i` narrows it to one type; that type.
    fn hoistable(&self, m: &Module, i: InstrId) -> Option<PrimitiveType> {
        let ins = m.instr(i);
        if data_operands(ins).is_empty() || !movable(m, i) {
            return None;
        }
        self.narrowing_users(m, i)
    }

    fn add_convert(
        &mut self,
        m: &mut Module,
        at: InstrId,
        o: InstrId,
        n: PrimitiveType,
        names: &mut NameTable,
    ) -> InstrId {
        let mut shape = m.instr(o).shape.clone();
        if let Shape::Array(a) = &mut shape {
            a.ty = n;
        }
        self.add_convert_shaped(m, at, o, shape, names)
    }

    fn add_convert_shaped(
        &mut self,
        m: &mut Module,
        at: InstrId,
        o: InstrId,
        shape: Shape,
        names: &mut NameTable,
    ) -> InstrId {
        let base = format!("{}.convert", m.instr(o).name);
        let new = push_instr(
            m,
            Instruction {
                name: names.fresh(&base),
                opcode: Opcode::Convert,
                shape,
                operands: vec![o],
                attrs: Vec::new(),
                parent: self.comp,
                parameter_number: None,
                literal: None,
                async_sugar: None,
            },
        );
        self.queue(at, new, &[o]);
        new
    }

    /// Places `new` in front of `at`; records it as a user of `operands`.
    fn queue(&mut self, at: InstrId, new: InstrId, operands: &[InstrId]) {
        self.before.entry(at).or_default().push(new);
        for &o in operands {
            self.users.entry(o).or_default().push(new);
            self.grown.insert(o);
        }
    }

    /// Every user of `old` uses `new` instead (the root too).
    fn replace_uses(&mut self, m: &mut Module, old: InstrId, new: InstrId) {
        let users = self.users.remove(&old).unwrap_or_default();
        for &u in &users {
            for o in &mut m.instrs[u.index()].operands {
                if *o == old {
                    *o = new;
                }
            }
        }
        self.users.entry(new).or_default().extend(users);
        self.grown.insert(new);
        if m.comp(self.comp).root == old {
            m.comps[self.comp.index()].root = new;
        }
    }

    /// Writes the order back, queued instructions in front of their makers.
    fn commit(self, m: &mut Module) {
        let mut out = Vec::with_capacity(self.order.len() + self.before.len() * 2);
        for i in self.order {
            if let Some(v) = self.before.get(&i) {
                out.extend(v);
            }
            if !self.replaced.contains(&i) {
                out.push(i);
            }
        }
        m.comps[self.comp.index()].instrs = out;
    }
}

/// For `convert(convert(x))` back to `x`'s type through an exactly wider
/// type (or a convert to its operand's own type): `x`.
fn round_trip_source(m: &Module, i: InstrId) -> Option<InstrId> {
    let ins = m.instr(i);
    if ins.opcode != Opcode::Convert {
        return None;
    }
    let t = ins.shape.as_array()?.ty;
    let o = ins.operands[0];
    if m.instr(o).shape.element_type() == Some(t) {
        return Some(o);
    }
    let x = widened_from(m, o)?;
    (m.instr(x).shape.element_type() == Some(t)).then_some(x)
}

/// For `o = convert(x)` that widens `x` exactly: `x`.
fn widened_from(m: &Module, o: InstrId) -> Option<InstrId> {
    let ins = m.instr(o);
    if ins.opcode != Opcode::Convert {
        return None;
    }
    let x = ins.operands[0];
    let from = m.instr(x).shape.as_array()?.ty;
    let to = ins.shape.as_array()?.ty;
    widens_exactly(from, to).then_some(x)
}

/// Whether every `n` value converts to `w` and back unchanged.
fn widens_exactly(n: PrimitiveType, w: PrimitiveType) -> bool {
    use PrimitiveType::*;
    match w {
        F64 => matches!(n, F32 | Bf16 | F16) || is_fp8(n),
        F32 => matches!(n, Bf16 | F16) || is_fp8(n),
        F16 | Bf16 => is_fp8(n),
        _ => false,
    }
}

fn is_fp8(t: PrimitiveType) -> bool {
    t.is_float() && t.bit_width() == 8
}

/// For a dot or convolution whose operands all widen one narrower float
/// type: the unwidened operands (it reads them instead; its result type is
/// kept, so products and accumulation are unchanged).
fn unwidened_contraction_operands(m: &Module, i: InstrId) -> Option<Vec<InstrId>> {
    let ins = m.instr(i);
    if !matches!(ins.opcode, Opcode::Dot | Opcode::Convolution) || ins.operands.len() != 2 {
        return None;
    }
    let sources: Vec<InstrId> = ins
        .operands
        .iter()
        .map(|&o| widened_from(m, o))
        .collect::<Option<_>>()?;
    let ty = |x: InstrId| m.instr(x).shape.element_type();
    (ty(sources[0]) == ty(sources[1])).then_some(sources)
}

/// The narrow type `i`'s float data operands all widen from, when it is a
/// movable op with a float result of the wider type.
fn sinkable(m: &Module, i: InstrId) -> Option<PrimitiveType> {
    let ins = m.instr(i);
    let w = ins.shape.as_array()?.ty;
    if !w.is_float() || !movable(m, i) {
        return None;
    }
    let mut n = None;
    for k in data_operands(ins) {
        let o = ins.operands[k];
        match widened_from(m, o) {
            Some(x) => {
                let t = m.instr(x).shape.element_type()?;
                if n.is_some_and(|n| n != t) || m.instr(o).shape.element_type() != Some(w) {
                    return None;
                }
                n = Some(t);
            }
            // A constant (a pad value, a zero update) narrows with the data;
            // a maximum or minimum against one would change where its value
            // is not representable in the narrow type.
            None if m.instr(o).opcode == Opcode::Constant
                && !matches!(ins.opcode, Opcode::Maximum | Opcode::Minimum) => {}
            None => return None,
        }
    }
    n
}

/// Ops that move or reduce data without arithmetic on it that depends on
/// its precision (collectives that reduce are included: see the module doc).
/// Maximum, minimum, negate and abs select or re-sign a value, so they are
/// exact in the narrow type: a widened value stays representable, and
/// rounding is monotonic, so narrowing `max(x, c)` is `max` of the narrowed
/// values (a ReLU's `max(x, 0)` that XLA:CPU ran in f32 runs in bf16 again).
fn movable(m: &Module, i: InstrId) -> bool {
    use Opcode::*;
    let ins = m.instr(i);
    match ins.opcode {
        Bitcast | Reshape | Transpose | Broadcast | Copy | Reverse | Slice | DynamicSlice
        | DynamicUpdateSlice | Pad | Concatenate | Gather | Select | Maximum | Minimum | Negate
        | Abs => true,
        AllGather | AllToAll | CollectivePermute => ins.shape.as_array().is_some(),
        AllReduce | ReduceScatter => {
            ins.shape.as_array().is_some()
                && ins.operands.len() == 1
                && ins
                    .attr_comp("to_apply")
                    .is_some_and(|r| crate::util::scalar_reducer_op(m, r).is_some())
        }
        _ => false,
    }
}

fn is_collective(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        AllGather | AllToAll | CollectivePermute | AllReduce | ReduceScatter
    )
}

/// Operand positions that carry the data (not indices or predicates).
fn data_operands(ins: &Instruction) -> Vec<usize> {
    use Opcode::*;
    let float = |k: usize| k < ins.operands.len();
    let v: Vec<usize> = match ins.opcode {
        Bitcast | Reshape | Transpose | Broadcast | Copy | Reverse | Slice | DynamicSlice
        | Gather | AllReduce | ReduceScatter | Negate | Abs => vec![0],
        DynamicUpdateSlice | Pad | Maximum | Minimum => vec![0, 1],
        Select => vec![1, 2],
        Concatenate | AllGather | AllToAll | CollectivePermute => (0..ins.operands.len()).collect(),
        _ => Vec::new(),
    };
    v.into_iter().filter(|&k| float(k)).collect()
}

/// A copy of `i` with element type `n`, reducing with a reducer in `n`.
fn narrowed_clone(
    m: &mut Module,
    i: InstrId,
    n: PrimitiveType,
    fresh: &mut Fresh,
) -> Option<Instruction> {
    let mut narrow = m.instr(i).clone();
    narrow.name = fresh.names.fresh(&narrow.name);
    if let Shape::Array(a) = &mut narrow.shape {
        a.ty = n;
    }
    if let Some(r) = narrow.attr_comp("to_apply") {
        let nr = narrow_reducer(m, r, n, fresh)?;
        for a in &mut narrow.attrs {
            if a.name == "to_apply" {
                a.value = AttrValue::Comp(nr);
            }
        }
        sort_attrs(&mut narrow.attrs);
    }
    Some(narrow)
}

/// The scalar reducer `r` with every type `n` (made once per pair).
fn narrow_reducer(
    m: &mut Module,
    r: CompId,
    n: PrimitiveType,
    fresh: &mut Fresh,
) -> Option<CompId> {
    if let Some(&c) = fresh.reducers.get(&(r, n)) {
        return Some(c);
    }
    // Only a plain scalar reducer can be retyped.
    crate::util::scalar_reducer_op(m, r)?;
    let new_comp = CompId(m.comps.len() as u32);
    let mut comp = m.comp(r).clone();
    let taken: FxHashSet<&str> = m.comps.iter().map(|c| c.name.as_str()).collect();
    let base = format!("{}.{}", comp.name, n.name());
    comp.name = (0..)
        .map(|k| {
            if k == 0 {
                base.clone()
            } else {
                format!("{base}.{k}")
            }
        })
        .find(|name| !taken.contains(name.as_str()))
        .unwrap_or(base);
    comp.is_entry = false;
    let mut remap: FxHashMap<InstrId, InstrId> = FxHashMap::default();
    let mut instrs = Vec::with_capacity(comp.instrs.len());
    for &old in &comp.instrs {
        let mut ins = m.instr(old).clone();
        ins.name = fresh.names.fresh(&ins.name);
        ins.parent = new_comp;
        ins.shape = Shape::scalar(n);
        ins.operands.iter_mut().for_each(|o| *o = remap[o]);
        let id = push_instr(m, ins);
        remap.insert(old, id);
        instrs.push(id);
    }
    comp.root = remap[&comp.root];
    comp.params = comp.params.iter().map(|p| remap[p]).collect();
    comp.instrs = instrs;
    m.comps.push(comp);
    fresh.reducers.insert((r, n), new_comp);
    Some(new_comp)
}
