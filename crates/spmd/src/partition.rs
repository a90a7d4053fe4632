//! Sharding propagation and per-op partitioning, in one forward walk over each
//! computation: every instruction gets the sharding its operands imply (XLA's
//! forward propagation rules), an annotation overrides it, and the instruction
//! is emitted on per-device shapes after resharding its operands as it needs.

use crate::build::{attr, scatter_target, set_attr, without, CompB, Out};
use crate::halo::{self, DimWindow};
use crate::mesh::{ceil_div, free_part, read_sharding, Axis, ReadError, Sh};
use crate::SpmdError;
use rustc_hash::FxHashMap;
use std::ops::Range;
use tpusim_hlo::attr::{PadDim, Sharding, SingleSharding, SliceDim};
use tpusim_hlo::{AttrValue, CompId, InstrId, Instruction, Module, Opcode, Shape};

/// Deepest nesting of called computations (while, conditional, call) followed.
const MAX_NESTING: usize = 64;

/// Loops nested at most this deep get an exploratory pass over their body.
const EXPLORE_LOOPS_DEPTH: usize = 3;

/// Longest broadcast chain (broadcast, then reshapes, transposes, unary
/// elementwise ops) a reshard redoes on local shapes; longer ones are
/// resharded as they are.
const MAX_EXPANSION: usize = 16;

/// A partitioned value: its id in the output module and a sharding per leaf.
#[derive(Clone, Debug)]
pub struct Val {
    pub id: InstrId,
    pub sh: Vec<Sh>,
}

pub struct Partitioner<'m> {
    pub src: &'m Module,
    pub out: Out,
    depth: usize,
    /// Manual axes of the enclosing shard_map regions (innermost last).
    manual: Vec<Vec<String>>,
    /// Array leaves of computation parameters: value id -> (parameter id, leaf).
    leaf_origin: FxHashMap<InstrId, (InstrId, usize)>,
    /// The first tiling some op asked of an untiled parameter leaf (how XLA's
    /// backward propagation would have tiled a loop-carried value).
    wanted: FxHashMap<(InstrId, usize), Sh>,
    /// Emitted broadcasts and the shape ops over them (reshape, transpose,
    /// unary elementwise): output value -> (source instruction, its operand).
    /// A reshard of such a value redoes the chain on the tiling asked for
    /// from its small source instead of slicing or exchanging the big result,
    /// as XLA's backward propagation gives a broadcast its user's sharding.
    expandable: FxHashMap<InstrId, (InstrId, Vec<Val>)>,
    /// Chains already redone: (value, tiling) -> the redone value, or `None`
    /// when it could not be (each pair is tried once).
    expanded: FxHashMap<(InstrId, Sh, u64), Option<InstrId>>,
    /// Emitted `while`s: output id -> the source `while`.
    while_of: FxHashMap<InstrId, InstrId>,
    /// Untiled values whose tiling a second round may choose: a loop's result
    /// leaf (its get-tuple-element), a scatter's result or a dot's partial
    /// sums, or an elementwise op, transpose or reshape over one: output id
    /// -> (source `while`, `scatter` or `dot`, leaf).
    loop_result: FxHashMap<InstrId, (InstrId, usize)>,
    /// For such a value reached through transposes and reshapes, those
    /// ops from its origin on (absent: the origin's dims).
    origin_steps: FxHashMap<InstrId, Vec<ShapeStep>>,
    /// The first tiling some later op asked of such a value: XLA's backward
    /// propagation carries it into the loop, or into the scatter's rows.
    pub wanted_after_loop: FxHashMap<(InstrId, usize), Sh>,
    /// Tilings for untiled loop-carried leaves and scatter results, from an
    /// earlier round's `wanted_after_loop`.
    pub loop_hints: FxHashMap<(InstrId, usize), Sh>,
    /// Checked before each instruction is partitioned.
    pub cancel: tpusim_hlo::Cancel,
    /// Gathers whose operand and indices tile two different dims of the
    /// unconstrained result over the same mesh axis: (op, axis). tpusim
    /// keeps the indices' tiling; Shardy's propagation gives neither, and
    /// later ops decide (a dot's operand tilings conflict as often, but its
    /// neighbours settle the result in Shardy's fixed point as in tpusim).
    pub conflicts: Vec<(String, String)>,
    /// Shardings a propagation pass gave the values, by instruction name:
    /// read as if each were the value's `sharding=`.
    pub given: std::rc::Rc<FxHashMap<String, Vec<Sh>>>,
    /// Who reads what, built the first time a conflict asks for it.
    uses: std::cell::OnceCell<UseIndex>,
}

pub(crate) fn leaves_of(shape: &Shape) -> Vec<Shape> {
    match shape {
        Shape::Tuple(t) => t.iter().flat_map(leaves_of).collect(),
        other => vec![other.clone()],
    }
}

fn leaf_count(shape: &Shape) -> usize {
    match shape {
        Shape::Tuple(t) => t.iter().map(leaf_count).sum(),
        _ => 1,
    }
}

impl<'m> Partitioner<'m> {
    pub fn new(src: &'m Module, out: Out) -> Self {
        Partitioner {
            src,
            out,
            depth: 0,
            manual: Vec::new(),
            leaf_origin: FxHashMap::default(),
            wanted: FxHashMap::default(),
            expandable: FxHashMap::default(),
            expanded: FxHashMap::default(),
            while_of: FxHashMap::default(),
            loop_result: FxHashMap::default(),
            origin_steps: FxHashMap::default(),
            wanted_after_loop: FxHashMap::default(),
            loop_hints: FxHashMap::default(),
            cancel: tpusim_hlo::Cancel::default(),
            conflicts: Vec::new(),
            uses: std::cell::OnceCell::new(),
            given: Default::default(),
        }
    }

    fn unsupported(&self, ins: &Instruction, why: impl Into<String>) -> SpmdError {
        SpmdError::Unsupported {
            instr: ins.name.clone(),
            opcode: ins.opcode.name().to_string(),
            why: why.into(),
        }
    }

    /// The sharding of leaf `leaf` of an HLO `sharding=` on `ins`.
    pub fn read(
        &self,
        ins: &Instruction,
        s: &SingleSharding,
        rank: usize,
    ) -> Result<Sh, SpmdError> {
        read_sharding(s, rank, &self.out.mesh).map_err(|e| {
            let text = sharding_text(s);
            match e {
                ReadError::TileCount { tiles, devices } => SpmdError::TileCount {
                    instr: ins.name.clone(),
                    sharding: text,
                    tiles,
                    devices,
                },
                ReadError::Rank { tile_dims, rank } => SpmdError::BadSharding {
                    instr: ins.name.clone(),
                    sharding: text,
                    why: format!("{tile_dims} tile dims for an array of rank {rank}"),
                },
                ReadError::NotOnMesh => SpmdError::BadSharding {
                    instr: ins.name.clone(),
                    sharding: text,
                    why: format!(
                        "its device order is not a tiling of the mesh {:?}",
                        self.out.mesh.named
                    ),
                },
                ReadError::Manual => SpmdError::Unsupported {
                    instr: ins.name.clone(),
                    opcode: ins.opcode.name().into(),
                    why: format!("manual sharding {text} outside a shard_map region"),
                },
                ReadError::Unsupported(why) => SpmdError::BadSharding {
                    instr: ins.name.clone(),
                    sharding: text,
                    why,
                },
            }
        })
    }

    /// The shardings an instruction's `sharding=` gives its leaves, if it has one.
    pub fn annotation(&self, ins: &Instruction) -> Result<Option<Vec<Sh>>, SpmdError> {
        if let Some(given) = self.given.get(&ins.name) {
            return Ok(Some(given.clone()));
        }
        let Some(s) = ins.sharding() else {
            return Ok(None);
        };
        if fully_manual(ins) {
            // Per-device as written: nothing to reshard it to.
            return Ok(None);
        }
        if let Some(free) = partially_manual(ins) {
            let sh = self.read(ins, &free_part(free), ins.shape.rank())?;
            return Ok(Some(vec![sh]));
        }
        let leaves = leaves_of(&ins.shape);
        let singles: Vec<&SingleSharding> = match s {
            Sharding::Single(x) => vec![x; leaves.len()],
            Sharding::Tuple(t) if t.len() == leaves.len() => t.iter().collect(),
            Sharding::Tuple(t) => {
                return Err(SpmdError::BadSharding {
                    instr: ins.name.clone(),
                    sharding: format!("tuple of {}", t.len()),
                    why: format!("the value has {} leaves", leaves.len()),
                })
            }
        };
        singles
            .into_iter()
            .zip(&leaves)
            .map(|(s, l)| self.read(ins, s, l.rank()))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn local_shape(&self, global: &Shape, sh: &[Sh]) -> Shape {
        let mut k = 0;
        self.local_shape_rec(global, sh, &mut k)
    }

    fn local_shape_rec(&self, global: &Shape, sh: &[Sh], k: &mut usize) -> Shape {
        match global {
            Shape::Tuple(t) => {
                Shape::Tuple(t.iter().map(|s| self.local_shape_rec(s, sh, k)).collect())
            }
            Shape::Array(a) => {
                let mut a = a.clone();
                if let Some(s) = sh.get(*k) {
                    if s.rank() == a.dims.len() {
                        a.dims = s.local_dims(&self.out.mesh, &a.dims);
                    }
                }
                *k += 1;
                Shape::Array(a)
            }
            other => {
                *k += 1;
                other.clone()
            }
        }
    }

    /// Reshards every leaf of value `v` (global shape `global`) to `to`.
    pub fn reshard_val(
        &mut self,
        cb: &mut CompB,
        v: &Val,
        global: &Shape,
        to: &[Sh],
    ) -> Result<Val, SpmdError> {
        if v.sh == to {
            return Ok(v.clone());
        }
        match global {
            Shape::Tuple(elems) => {
                let mut parts = Vec::new();
                let mut k = 0;
                for (i, e) in elems.iter().enumerate() {
                    let n = leaf_count(e);
                    let shape = self.out.shape(v.id).tuple_elements().map(|t| t[i].clone());
                    let shape =
                        shape.ok_or_else(|| SpmdError::Internal("tuple mismatch".into()))?;
                    // Take a tuple's own element (keeps constants visible, e.g.
                    // a loop counter's start) rather than a new get-tuple-element.
                    let built = self.out.m.instr(v.id);
                    let direct = if built.opcode == Opcode::Tuple {
                        built.operands.get(i).copied()
                    } else {
                        None
                    };
                    let g = match direct {
                        Some(d) => d,
                        None => self.out.emit(
                            cb,
                            "get-tuple-element",
                            Opcode::GetTupleElement,
                            shape,
                            vec![v.id],
                            vec![attr("index", AttrValue::Int(i as i64))],
                        ),
                    };
                    let part = Val {
                        id: g,
                        sh: v.sh[k..k + n].to_vec(),
                    };
                    parts.push(self.reshard_val(cb, &part, e, &to[k..k + n])?);
                    k += n;
                }
                let shape =
                    Shape::Tuple(parts.iter().map(|p| self.out.shape(p.id).clone()).collect());
                let id = self.out.emit(
                    cb,
                    "tuple",
                    Opcode::Tuple,
                    shape,
                    parts.iter().map(|p| p.id).collect(),
                    vec![],
                );
                Ok(Val {
                    id,
                    sh: to.to_vec(),
                })
            }
            // Through `arr_at`, so a broadcast chain passed into a loop (or
            // annotated) is redone on the tiling instead of sliced whole.
            _ => {
                let id = self.arr_at(cb, v, global, &to[0], 0)?;
                Ok(Val {
                    id,
                    sh: to.to_vec(),
                })
            }
        }
    }

    /// Reshards an array operand to `to`.
    fn arr(
        &mut self,
        cb: &mut CompB,
        v: &Val,
        global: &Shape,
        to: &Sh,
    ) -> Result<InstrId, SpmdError> {
        self.arr_at(cb, v, global, to, 0)
    }

    /// `arr` for a value `depth` steps down a broadcast chain being redone.
    fn arr_at(
        &mut self,
        cb: &mut CompB,
        v: &Val,
        global: &Shape,
        to: &Sh,
        depth: usize,
    ) -> Result<InstrId, SpmdError> {
        if let Some(&origin) = self.leaf_origin.get(&v.id) {
            if v.sh[0].is_replicated() && !to.is_replicated() {
                self.wanted.entry(origin).or_insert_with(|| to.clone());
            }
        }
        if let Some(&origin) = self.loop_result.get(&v.id) {
            if v.sh[0].total_tiles(&self.out.mesh) < to.total_tiles(&self.out.mesh) {
                let at_origin = match self.origin_steps.get(&v.id) {
                    Some(steps) => undone(steps, to, &self.out.mesh),
                    None => Some(to.clone()),
                };
                if let Some(at_origin) = at_origin {
                    self.wanted_after_loop.entry(origin).or_insert(at_origin);
                }
            }
        }
        if v.sh[0] != *to && to.partial.is_empty() {
            if let Some(id) = self.expand_as(cb, v.id, to, depth, global.byte_size())? {
                return Ok(id);
            }
        }
        self.out.reshard(cb, v.id, global.dims(), &v.sh[0], to)
    }

    /// Redoes the chain that produced `id` (a broadcast, or shape and
    /// elementwise ops over broadcasts or over values every device holds
    /// whole) so that it comes out tiled as `to`: the chain's ops are emitted
    /// again on local shapes over its leaves, resharded — a broadcast's small
    /// operand, or a whole value of which each device slices its own part for
    /// free — instead of computing the whole result and then slicing or
    /// exchanging it. `None` when `id` is not such a chain, the tiling does
    /// not map back through it, or it would move more data than resharding
    /// `id` itself: a leaf that needs communication must be smaller than
    /// `budget` (the bytes of the value first asked for), so an all-gather of
    /// an int8 dot operand is not turned into one of the f32 values it was
    /// quantized from.
    fn expand_as(
        &mut self,
        cb: &mut CompB,
        id: InstrId,
        to: &Sh,
        depth: usize,
        budget: u64,
    ) -> Result<Option<InstrId>, SpmdError> {
        if depth > MAX_EXPANSION || !self.expandable.contains_key(&id) {
            return Ok(None);
        }
        let key = (id, to.clone(), budget);
        if let Some(done) = self.expanded.get(&key) {
            return Ok(*done);
        }
        let redone = self.redo_chain(cb, id, to, depth, budget)?;
        self.expanded.insert(key, redone);
        Ok(redone)
    }

    fn redo_chain(
        &mut self,
        cb: &mut CompB,
        id: InstrId,
        to: &Sh,
        depth: usize,
        budget: u64,
    ) -> Result<Option<InstrId>, SpmdError> {
        let Some((src_id, operands)) = self.expandable.get(&id).cloned() else {
            return Ok(None);
        };
        let src = self.src;
        let ins = src.instr(src_id);
        let mut xs = Vec::with_capacity(operands.len());
        let mut tilings = Vec::with_capacity(operands.len());
        for (k, operand) in operands.iter().enumerate() {
            let op_global = &src.instr(ins.operands[k]).shape;
            let Some(in_to) = self.operand_tiling(ins, op_global, to) else {
                return Ok(None);
            };
            // Leaves are resharded only where that is free (slicing a whole
            // value), the op shrinks the data (a broadcast's operand), or the
            // leaf is smaller than what is being resharded; larger operands
            // are redone in turn or the chain is not redone at all.
            let free = operand.sh[0].is_replicated() || operand.sh[0] == in_to;
            let small = op_global.byte_size() < budget;
            let x = if ins.opcode == Opcode::Broadcast || free || small {
                self.arr_at(cb, operand, op_global, &in_to, depth + 1)?
            } else {
                match self.expand_as(cb, operand.id, &in_to, depth + 1, budget)? {
                    Some(x) => x,
                    None => return Ok(None),
                }
            };
            xs.push(x);
            tilings.push(in_to);
        }
        let mut copy = ins.clone();
        if copy.opcode == Opcode::Bitcast {
            copy.opcode = Opcode::Reshape;
        }
        let v = self.local_op(cb, &copy, xs.clone(), to.clone(), ins.attrs.clone())?;
        let redone_operands = xs
            .into_iter()
            .zip(tilings)
            .map(|(id, t)| Val { id, sh: vec![t] })
            .collect();
        self.expandable.insert(v.id, (src_id, redone_operands));
        Ok(Some(v.id))
    }

    /// The tiling of `ins`'s (single) operand under which `ins` computes
    /// its result tiled as `to`, for the ops `expand_as` redoes.
    fn operand_tiling(&self, ins: &Instruction, op_global: &Shape, to: &Sh) -> Option<Sh> {
        let rank = op_global.rank();
        match ins.opcode {
            Opcode::Broadcast => {
                let dims = ins.attr_ints("dimensions")?;
                let mut s = Sh::replicated(rank);
                for (k, &d) in dims.iter().enumerate() {
                    *s.dims.get_mut(k)? = to.dims.get(d as usize)?.clone();
                }
                Some(s)
            }
            Opcode::Transpose => {
                let perm = ins.attr_ints("dimensions")?;
                let mut s = Sh::replicated(rank);
                for (j, &p) in perm.iter().enumerate() {
                    *s.dims.get_mut(p as usize)? = to.dims.get(j)?.clone();
                }
                Some(s)
            }
            Opcode::Reshape | Opcode::Bitcast => {
                let (g_in, g_out) = (op_global.dims(), ins.shape.dims());
                let s = reshape_sharding(g_out, g_in, to, &self.out.mesh)?;
                // Only a tiling that maps forward to exactly `to`.
                (reshape_sharding(g_in, g_out, &s, &self.out.mesh).as_ref() == Some(to))
                    .then_some(s)
            }
            // Elementwise: same-rank operands as the result; scalar
            // operands (clamp's bounds) whole.
            _ if op_global.rank() == to.rank() => Some(to.clone()),
            _ => Some(Sh::replicated(rank)),
        }
    }

    /// Partitions computation `c` whose parameters have shardings `params`;
    /// the root is resharded to `root_to` when given. Returns the new computation
    /// and its root's shardings.
    pub fn computation(
        &mut self,
        c: CompId,
        params: &[Vec<Sh>],
        root_to: Option<&[Sh]>,
    ) -> Result<(CompId, Vec<Sh>), SpmdError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(SpmdError::Internal(format!(
                "computations nested more than {MAX_NESTING} deep"
            )));
        }
        let src = self.src;
        let comp = src.comp(c);
        let mut cb = self.out.begin(&comp.name);
        let root = self.walk(&mut cb, c, params, None)?;
        let root_ins = src.instr(comp.root);
        let mut target: Vec<Sh> = match root_to {
            Some(t) => t.to_vec(),
            None => match self.annotation(root_ins)? {
                Some(t) => t,
                None if c == src.entry => self.entry_results(&root_ins.shape, &root.sh),
                None => root.sh.iter().map(Sh::without_partial).collect(),
            },
        };
        for t in &mut target {
            t.partial.clear();
        }
        let root = self.reshard_val(&mut cb, &root, &root_ins.shape, &target)?;
        let new = cb.comp;
        self.out.finish(cb, root.id);
        self.depth -= 1;
        Ok((new, target))
    }

    /// The shardings the entry's results get when nothing annotates them: the
    /// propagated ones, except that a dim the tiling does not divide is
    /// returned whole (XLA gathers an unevenly tiled result rather than
    /// return its padded shards).
    fn entry_results(&self, global: &Shape, propagated: &[Sh]) -> Vec<Sh> {
        let leaves = leaves_of(global);
        propagated
            .iter()
            .zip(
                leaves
                    .iter()
                    .map(Shape::dims)
                    .chain(std::iter::repeat(&[][..])),
            )
            .map(|(sh, dims)| {
                let mut sh = sh.without_partial();
                for (d, axes) in sh.dims.iter_mut().enumerate() {
                    let parts = i64::from(self.out.mesh.count(axes));
                    if dims.get(d).is_some_and(|&n| n % parts != 0) {
                        axes.clear();
                    }
                }
                sh
            })
            .collect()
    }

    /// Emits the instructions of computation `c` into `cb`: its parameters
    /// become new parameters with shardings `params`, or (inlining a call, as
    /// XLA's CallInliner does before partitioning) the values `args`. Returns
    /// the root's value.
    fn walk(
        &mut self,
        cb: &mut CompB,
        c: CompId,
        params: &[Vec<Sh>],
        args: Option<&[Val]>,
    ) -> Result<Val, SpmdError> {
        let src = self.src;
        let comp = src.comp(c);
        let mut vals: FxHashMap<InstrId, Val> = FxHashMap::default();
        for &i in &comp.instrs {
            self.cancel.check()?;
            let ins = src.instr(i);
            let v = match (ins.parameter_number, args) {
                (Some(n), Some(args)) => args
                    .get(n as usize)
                    .cloned()
                    .ok_or_else(|| SpmdError::Internal(format!("no argument {n}")))?,
                (Some(n), None) => {
                    let sh = params.get(n as usize).cloned().ok_or_else(|| {
                        SpmdError::Internal(format!("no sharding for parameter {n}"))
                    })?;
                    let shape = self.local_shape(&ins.shape, &sh);
                    let id = self.out.emit_full(
                        cb,
                        ins.name.clone(),
                        Opcode::Parameter,
                        shape,
                        vec![],
                        clean_attrs(&ins.attrs),
                        Some(n),
                        None,
                    );
                    Val { id, sh }
                }
                (None, _) => {
                    let ops: Vec<Val> = ins
                        .operands
                        .iter()
                        .map(|o| {
                            vals.get(o).cloned().ok_or_else(|| {
                                SpmdError::Internal(format!(
                                    "operand of '{}' not yet partitioned",
                                    ins.name
                                ))
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    let merged = match self.pad_then_slice(ins, &vals)? {
                        Some(w) => self.exchange_windows(cb, ins, w)?,
                        None => None,
                    };
                    let v = match (merged, self.rotation(ins, &vals)) {
                        (Some(v), _) => v,
                        (None, Some((x, dim, axes, by))) => {
                            let id = self.out.rotate(cb, x.id, dim, &axes, by);
                            Val { id, sh: x.sh }
                        }
                        (None, None) => self.instruction(cb, i, &ops)?,
                    };
                    self.note_expandable(i, &v, &ops);
                    self.note_loop_result(i, &v, &ops);
                    // Custom calls read their own sharding (a `{manual}` one marks a
                    // shard_map boundary, not a tiling); the root's is the result's.
                    if ins.opcode == Opcode::CustomCall || i == comp.root {
                        v
                    } else {
                        match self.annotation(ins)? {
                            Some(to) => self.reshard_val(cb, &v, &ins.shape, &to)?,
                            None => v,
                        }
                    }
                }
            };
            vals.insert(i, v);
        }
        vals.remove(&comp.root)
            .ok_or_else(|| SpmdError::Internal("no root".into()))
    }

    /// A `concatenate(slice(x, [s:n]), slice(x, [0:s]))` along a dim that
    /// `x` tiles evenly (`jnp.roll`, a label shift): `x`'s partitioned value,
    /// the dim, its axes and the rotation (`s`, or `s - n` when that is the
    /// shorter way), when no more than a device's rows cross a boundary.
    fn rotation(
        &self,
        ins: &Instruction,
        vals: &FxHashMap<InstrId, Val>,
    ) -> Option<(Val, usize, Vec<Axis>, i64)> {
        if ins.opcode != Opcode::Concatenate || ins.operands.len() != 2 {
            return None;
        }
        let dim = usize::try_from(*ins.attr_ints("dimensions")?.first()?).ok()?;
        let (a, b) = (
            self.src.instr(ins.operands[0]),
            self.src.instr(ins.operands[1]),
        );
        if a.opcode != Opcode::Slice || b.opcode != Opcode::Slice || a.operands != b.operands {
            return None;
        }
        let x = *a.operands.first()?;
        let dims = self.src.instr(x).shape.dims().to_vec();
        let n = *dims.get(dim)?;
        let range = |s: &Instruction| -> Option<(i64, i64)> {
            let Some(AttrValue::Slice(sl)) = s.attr("slice") else {
                return None;
            };
            let whole_elsewhere = sl
                .iter()
                .enumerate()
                .all(|(d, r)| r.stride == 1 && (d == dim || (r.start == 0 && r.limit == dims[d])));
            whole_elsewhere.then(|| (sl[dim].start, sl[dim].limit))
        };
        let ((s, end), (zero, s2)) = (range(a)?, range(b)?);
        if end != n || zero != 0 || s2 != s || s <= 0 || s >= n {
            return None;
        }
        let v = vals.get(&x)?;
        let sh =
            v.sh.first()
                .filter(|sh| v.sh.len() == 1 && sh.partial.is_empty())?;
        let axes = sh.dims.get(dim).filter(|a| !a.is_empty())?.clone();
        let parts = i64::from(self.out.mesh.count(&axes));
        let rows = n / parts;
        let by = if s <= n - s { s } else { s - n };
        (n % parts == 0 && by.abs() <= rows).then(|| (v.clone(), dim, axes, by))
    }

    /// Records `v` (the partitioned `i`) in `expandable` when it is a
    /// broadcast, or a shape op or elementwise op over one or computed whole
    /// on every device.
    fn note_expandable(&mut self, i: InstrId, v: &Val, ops: &[Val]) {
        let ins = self.src.instr(i);
        let arrays = v.sh.len() == 1 && ops.iter().all(|o| o.sh.len() == 1);
        if !arrays || ins.shape.as_array().is_none() || ops.is_empty() {
            return;
        }
        let shape_op = matches!(
            ins.opcode,
            Opcode::Reshape | Opcode::Bitcast | Opcode::Transpose
        ) || (ins.opcode.is_elementwise() && ins.opcode != Opcode::Map);
        let over_chain = ops.iter().any(|o| self.expandable.contains_key(&o.id));
        let whole = v.sh[0].is_replicated();
        if ins.opcode == Opcode::Broadcast || shape_op && (over_chain || whole) {
            self.expandable.insert(v.id, (i, ops.to_vec()));
        }
    }

    /// Tracks loop results through the ops that keep them whole: a `while`,
    /// its get-tuple-elements, and untiled elementwise ops over them.
    fn note_loop_result(&mut self, i: InstrId, v: &Val, ops: &[Val]) {
        let ins = self.src.instr(i);
        match ins.opcode {
            Opcode::While => {
                self.while_of.insert(v.id, i);
            }
            Opcode::GetTupleElement if v.sh.len() == 1 => {
                if let Some(&w) = ops.first().and_then(|o| self.while_of.get(&o.id)) {
                    let idx = ins.attr_int("index").unwrap_or(0) as usize;
                    let elems = &self.src.instr(ins.operands[0]).shape;
                    let elems = elems.tuple_elements().unwrap_or(&[]);
                    let start: usize = elems.iter().take(idx).map(leaf_count).sum();
                    self.loop_result.insert(v.id, (w, start));
                }
            }
            // A scatter's result: the rows it updates may be tiled as the
            // ops after it ask (a gradient into a zeros buffer); a dot's
            // partial sums may be reduced into the tiling asked of them.
            Opcode::Scatter if v.sh.len() == 1 => {
                self.loop_result.insert(v.id, (i, 0));
            }
            Opcode::Dot if v.sh.len() == 1 && !v.sh[0].partial.is_empty() => {
                self.loop_result.insert(v.id, (i, 0));
            }
            // The gradient of a slice pads a scattered gradient back: the
            // tiling asked of the pad is asked of the scatter's rows.
            Opcode::Pad | Opcode::Slice if v.sh.len() == 1 => {
                let origin = ops
                    .first()
                    .and_then(|o| self.loop_result.get(&o.id).copied())
                    .filter(|&(o, _)| self.src.instr(o).opcode == Opcode::Scatter);
                if let Some(origin) = origin {
                    self.loop_result.insert(v.id, origin);
                }
            }
            // A gradient transposed or reshaped before it is stored (into a
            // stacked buffer, a loop's state) asks its tiling of the dot
            // through those ops.
            Opcode::Transpose | Opcode::Reshape if v.sh.len() == 1 => {
                let Some(from) = ops.first() else { return };
                let Some(&origin) = self.loop_result.get(&from.id) else {
                    return;
                };
                let step = match ins.opcode {
                    Opcode::Transpose => ins
                        .attr_ints("dimensions")
                        .and_then(|t| t.iter().map(|&k| usize::try_from(k).ok()).collect())
                        .map(ShapeStep::Transpose),
                    _ => Some(ShapeStep::Reshape {
                        from: self.src.instr(ins.operands[0]).shape.dims().to_vec(),
                        to: ins.shape.dims().to_vec(),
                    }),
                };
                let mut steps = self.origin_steps.get(&from.id).cloned().unwrap_or_default();
                if let Some(step) = step.filter(|_| steps.len() < MAX_ORIGIN_STEPS) {
                    steps.push(step);
                    self.loop_result.insert(v.id, origin);
                    self.origin_steps.insert(v.id, steps);
                }
            }
            op if (op.is_elementwise() && op != Opcode::Map) && v.sh.len() == 1 => {
                let dims = ins.shape.dims();
                let from = ins.operands.iter().zip(ops).find_map(|(&o, val)| {
                    let same = val.sh.len() == 1 && val.sh[0].without_partial() == v.sh[0];
                    (self.src.instr(o).shape.dims() == dims && same)
                        .then(|| {
                            self.loop_result
                                .get(&val.id)
                                .map(|&origin| (origin, val.id))
                        })
                        .flatten()
                });
                if let Some((origin, from)) = from {
                    self.loop_result.insert(v.id, origin);
                    if let Some(steps) = self.origin_steps.get(&from).cloned() {
                        self.origin_steps.insert(v.id, steps);
                    }
                }
            }
            _ => {}
        }
    }

    fn instruction(&mut self, cb: &mut CompB, i: InstrId, ops: &[Val]) -> Result<Val, SpmdError> {
        let src = self.src;
        let ins = src.instr(i);
        let op_shape = |k: usize| &src.instr(ins.operands[k]).shape;
        use Opcode::*;
        match ins.opcode {
            Constant | Iota | RngGetAndUpdateState | PartitionId | ReplicaId | AfterAll => {
                let sh = vec![Sh::replicated(0); leaf_count(&ins.shape)];
                let sh = leaves_of(&ins.shape)
                    .iter()
                    .zip(sh)
                    .map(|(l, _)| Sh::replicated(l.rank()))
                    .collect();
                if !ops.is_empty() {
                    return self.replicated_fallback(cb, ins, ops);
                }
                let id = self.copy_as(cb, ins, ins.shape.clone(), vec![], ins.attrs.clone());
                Ok(Val { id, sh })
            }
            op if op.is_elementwise() && op != Map => self.elementwise(cb, ins, ops),
            Copy | ReducePrecision | BitcastConvert
                if ins.shape.as_array().is_some()
                    && op_shape(0).rank() == ins.shape.rank() =>
            {
                self.elementwise(cb, ins, ops)
            }
            Broadcast => {
                let s = ops[0].sh[0].without_partial();
                let dims = ins.attr_ints("dimensions").unwrap_or(&[]).to_vec();
                let mut out = Sh::replicated(ins.shape.rank());
                for (k, &d) in dims.iter().enumerate() {
                    if let Some(slot) = out.dims.get_mut(d as usize) {
                        *slot = s.dims.get(k).cloned().unwrap_or_default();
                    }
                }
                let x = self.arr(cb, &ops[0], op_shape(0), &s)?;
                self.local_op(cb, ins, vec![x], out, ins.attrs.clone())
            }
            Transpose => {
                let s = ops[0].sh[0].without_partial();
                let perm = ins.attr_ints("dimensions").unwrap_or(&[]).to_vec();
                let out = Sh {
                    dims: perm.iter().map(|&p| s.dims[p as usize].clone()).collect(),
                    ..Sh::replicated(0)
                };
                let x = self.arr(cb, &ops[0], op_shape(0), &s)?;
                self.local_op(cb, ins, vec![x], out, ins.attrs.clone())
            }
            OptBarrier => {
                // An identity that orders computation (jax.checkpoint): values
                // keep their tiling.
                let shape = self.out.shape(ops[0].id).clone();
                let id = self.copy_as(cb, ins, shape, vec![ops[0].id], ins.attrs.clone());
                Ok(Val {
                    id,
                    sh: ops[0].sh.clone(),
                })
            }
            Reshape | Bitcast => self.reshape(cb, ins, ops),
            Dot => {
                // Partial sums whose users asked for a tiling in an earlier
                // round are reduced straight into it (a weight gradient:
                // reduce-scatter over the axes that tile it, all-reduce over
                // the rest), as XLA's dot emits them for the sharding
                // propagated back from the optimizer; the dot picks its
                // operand tilings knowing it.
                let hint = self.loop_hints.get(&(i, 0)).cloned();
                let given = self.annotation(ins)?.and_then(|mut s| s.pop());
                let v = self.dot(cb, ins, ops, hint.as_ref(), given.as_ref())?;
                match hint {
                    Some(hint) if v.sh.len() == 1 && !v.sh[0].partial.is_empty() => {
                        self.reshard_val(cb, &v, &ins.shape, &[hint])
                    }
                    _ => Ok(v),
                }
            }
            Reduce => self.reduce(cb, ins, ops),
            Tuple => {
                let id = self.copy_as(
                    cb,
                    ins,
                    Shape::Tuple(ops.iter().map(|o| self.out.shape(o.id).clone()).collect()),
                    ops.iter().map(|o| o.id).collect(),
                    clean_attrs(&ins.attrs),
                );
                Ok(Val {
                    id,
                    sh: ops.iter().flat_map(|o| o.sh.clone()).collect(),
                })
            }
            GetTupleElement => {
                let idx = ins.attr_int("index").unwrap_or(0) as usize;
                let elems = op_shape(0).tuple_elements().unwrap_or(&[]);
                let start: usize = elems.iter().take(idx).map(leaf_count).sum();
                let n = leaf_count(&ins.shape);
                let sh = ops[0].sh[start..start + n].to_vec();
                // An element of a tuple built here is that value itself (XLA's
                // simplifier folds get-tuple-element of tuple): a broadcast
                // kept as a remat residual stays one that a later reshard
                // redoes at its tiled shape, instead of a global-sized value.
                let built = self.out.m.instr(ops[0].id);
                if built.opcode == Opcode::Tuple {
                    if let Some(&id) = built.operands.get(idx) {
                        return Ok(Val { id, sh });
                    }
                }
                let shape = self.local_shape(&ins.shape, &sh);
                let id = self.copy_as(cb, ins, shape, vec![ops[0].id], clean_attrs(&ins.attrs));
                if n == 1 && self.out.m.instr(ops[0].id).opcode == Opcode::Parameter {
                    self.leaf_origin.insert(id, (ops[0].id, start));
                }
                Ok(Val { id, sh })
            }
            ReduceWindow => match self.reduce_window_halo(cb, ins, ops) {
                Some(v) => v,
                None => self.dim_constrained(cb, ins, ops),
            },
            Slice | Pad => match self.windowed(cb, ins, ops)? {
                Some(v) => Ok(v),
                None => self.dim_constrained(cb, ins, ops),
            },
            Reverse => match self.reversed(cb, ins, ops)? {
                Some(v) => Ok(v),
                None => self.dim_constrained(cb, ins, ops),
            },
            Concatenate => match self.concatenated(cb, ins, ops)? {
                Some(v) => Ok(v),
                None => self.dim_constrained(cb, ins, ops),
            },
            Sort => match self.sorted(cb, ins, ops)? {
                Some(v) => Ok(v),
                None => self.dim_constrained(cb, ins, ops),
            },
            DynamicSlice | DynamicUpdateSlice => self.dim_constrained(cb, ins, ops),
            Gather => self.gather(cb, i, ops),
            Scatter => self.scatter(cb, i, ops),
            While => self.while_loop(cb, i, ins, ops),
            Call => {
                let callee = ins
                    .attr_comp("to_apply")
                    .ok_or_else(|| self.unsupported(ins, "call without to_apply"))?;
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    return Err(SpmdError::Internal(format!(
                        "computations nested more than {MAX_NESTING} deep"
                    )));
                }
                let v = self.walk(cb, callee, &[], Some(ops));
                self.depth -= 1;
                let v = v?;
                let root = src.instr(src.comp(callee).root);
                // A custom-call root applied its own sharding (a `Sharding`
                // constraint inside a manual region reads its Shardy form).
                match self.annotation(root)? {
                    Some(to) if root.opcode != Opcode::CustomCall => {
                        self.reshard_val(cb, &v, &ins.shape, &to)
                    }
                    _ => Ok(v),
                }
            }
            Conditional => self.conditional(cb, ins, ops),
            CustomCall => self.custom_call(cb, ins, ops),
            Convolution => self.convolution(cb, ins, ops),
            Copy | ReducePrecision | Map if !ins.shape.is_tuple() => self.elementwise(cb, ins, ops),
            BitcastConvert if ins.shape.rank() == op_shape(0).rank() => {
                self.elementwise(cb, ins, ops)
            }
            // Ops over their minor dims with no partitioning rule in XLA:
            // computed whole, the result sliced to the batch tiling that
            // propagation gives it (XLA's default action).
            TopK => self.whole_then_batch_tiled(cb, ins, ops, 1),
            Cholesky | TriangularSolve => self.whole_then_batch_tiled(cb, ins, ops, 2),
            Copy | ReducePrecision | Map | Fft | SelectAndScatter | Rng | RngBitGenerator
            | BatchNormInference | BatchNormTraining | BatchNormGrad | BitcastConvert
            | AddDependency | Domain => {
                self.replicated_fallback(cb, ins, ops)
            }
            AllReduce | CollectivePermute
                if (!self.manual.is_empty() || partially_manual(ins).is_some())
                    && !fully_manual(ins)
                    && ops.len() == 1
                    && ops[0].sh.len() == 1 =>
            {
                // Over manual axes only: each device exchanges its own tile
                // of the free axes with its manual peers (same free index).
                let sh = ops[0].sh[0].without_partial();
                let x = self.arr(cb, &ops[0], op_shape(0), &sh)?;
                let mut attrs = ins.attrs.clone();
                if ins.attr("channel_id").is_some() {
                    let ch = self.out.fresh_channel();
                    set_attr(&mut attrs, "channel_id", AttrValue::Int(ch));
                }
                self.local_op(cb, ins, vec![x], sh, attrs)
            }
            AllReduce | AllGather | ReduceScatter | AllToAll | CollectivePermute
            | CollectiveBroadcast
                if !self.manual.is_empty() || fully_manual(ins) =>
            {
                // Inside a shard_map body values are per-device already; the
                // program's own collectives stay as written.
                self.replicated_fallback(cb, ins, ops)
            }
            _ => Err(self.unsupported(
                ins,
                "this op kind is not partitioned (collectives, I/O and async ops must not appear in an unpartitioned module)",
            )),
        }
    }

    /// Emits the counterpart of `ins`, named as it is.
    fn copy_as(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        shape: Shape,
        operands: Vec<InstrId>,
        attrs: Vec<tpusim_hlo::Attr>,
    ) -> InstrId {
        let name = self.out.fresh(&ins.name);
        self.out.emit_full(
            cb,
            name,
            ins.opcode,
            shape,
            operands,
            clean_attrs(&attrs),
            None,
            ins.literal.clone(),
        )
    }

    /// Emits `ins` on local operands with output sharding `out`.
    fn local_op(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        operands: Vec<InstrId>,
        out: Sh,
        attrs: Vec<tpusim_hlo::Attr>,
    ) -> Result<Val, SpmdError> {
        let sh = vec![out; leaf_count(&ins.shape)];
        let shape = self.local_shape(&ins.shape, &sh);
        let id = self.copy_as(cb, ins, shape, operands, attrs);
        Ok(Val { id, sh })
    }

    /// An op over the last `core` dims of its operand, batched over the
    /// others, as XLA partitions an op it has no rule for: every operand
    /// gathered whole, the op computed whole, each result sliced to the first
    /// operand's tiling of the batch dims (the sharding propagation gives it).
    fn whole_then_batch_tiled(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
        core: usize,
    ) -> Result<Val, SpmdError> {
        let rank = self.src.instr(ins.operands[0]).shape.rank();
        let lead: Vec<Vec<Axis>> = match ops.first().and_then(|o| o.sh.first()) {
            Some(sh) if rank >= core && sh.rank() == rank => sh.dims[..rank - core].to_vec(),
            _ => return self.replicated_fallback(cb, ins, ops),
        };
        let whole = self.replicated_fallback(cb, ins, ops)?;
        let to: Vec<Sh> = leaves_of(&ins.shape)
            .iter()
            .map(|l| {
                let mut sh = Sh::replicated(l.rank());
                if l.rank() == rank {
                    sh.dims[..lead.len()].clone_from_slice(&lead);
                }
                sh
            })
            .collect();
        self.reshard_val(cb, &whole, &ins.shape, &to)
    }

    /// Every operand replicated, the op computed whole on every device.
    fn replicated_fallback(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let mut ids = Vec::new();
        for (k, o) in ops.iter().enumerate() {
            let g = &self.src.instr(ins.operands[k]).shape;
            let to: Vec<Sh> = leaves_of(g)
                .iter()
                .map(|l| Sh::replicated(l.rank()))
                .collect();
            ids.push(self.reshard_val(cb, o, g, &to)?.id);
        }
        let sh: Vec<Sh> = leaves_of(&ins.shape)
            .iter()
            .map(|l| Sh::replicated(l.rank()))
            .collect();
        let mut attrs = ins.attrs.clone();
        if ins.opcode.category() == tpusim_hlo::OpCategory::Collective
            && ins.attr("channel_id").is_some()
        {
            // A program's own collective (in a shard_map body) gets a channel
            // of its own among those the partitioner adds.
            let ch = self.out.fresh_channel();
            set_attr(&mut attrs, "channel_id", AttrValue::Int(ch));
        }
        let id = self.copy_as(cb, ins, ins.shape.clone(), ids, attrs);
        Ok(Val { id, sh })
    }

    fn elementwise(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let rank = ins.shape.rank();
        let mesh = self.out.mesh.clone();
        let target = ops
            .iter()
            .filter(|o| o.sh.len() == 1 && o.sh[0].rank() == rank)
            .map(|o| o.sh[0].without_partial())
            .max_by_key(|s| (s.total_tiles(&mesh), std::cmp::Reverse(0)))
            .unwrap_or_else(|| Sh::replicated(rank));
        // Prefer the first operand among equally tiled ones.
        let best = target.total_tiles(&mesh);
        let target = ops
            .iter()
            .filter(|o| o.sh.len() == 1 && o.sh[0].rank() == rank)
            .map(|o| o.sh[0].without_partial())
            .find(|s| s.total_tiles(&mesh) == best)
            .unwrap_or(target);
        let mut ids = Vec::new();
        for (k, o) in ops.iter().enumerate() {
            let g = &self.src.instr(ins.operands[k]).shape;
            let to = if g.rank() == rank {
                target.clone()
            } else {
                Sh::replicated(g.rank())
            };
            ids.push(self.arr(cb, o, g, &to)?);
        }
        self.local_op(cb, ins, ids, target, ins.attrs.clone())
    }

    fn reshape(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let g_in = self.src.instr(ins.operands[0]).shape.dims().to_vec();
        let g_out = ins.shape.dims().to_vec();
        let s = ops[0].sh[0].without_partial();
        let (in_sh, out_sh) = match reshape_sharding(&g_in, &g_out, &s, &self.out.mesh) {
            Some(o) => (s, o),
            None => {
                if let Some(v) = self.reshape_with_halo(cb, ins, &ops[0], (&g_in, &g_out))? {
                    return Ok(v);
                }
                (Sh::replicated(g_in.len()), Sh::replicated(g_out.len()))
            }
        };
        let x = self.arr(cb, &ops[0], &self.src.instr(ins.operands[0]).shape, &in_sh)?;
        let mut ins2 = ins.clone();
        ins2.opcode = Opcode::Reshape;
        self.local_op(cb, &ins2, vec![x], out_sh, ins.attrs.clone())
    }

    /// A reshape that merges a dim tiled unevenly with the dims after it
    /// into one dim tiled as many ways over the same axes (its sharding asks
    /// for that), as XLA's `shard_reshape` does it: each device reshapes its
    /// rows, then the elements it needs but does not hold move in a halo
    /// exchange. `None` where the dims do not line up so.
    fn reshape_with_halo(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        operand: &Val,
        (g_in, g_out): (&[i64], &[i64]),
    ) -> Result<Option<Val>, SpmdError> {
        let Some(to) = self.annotation(ins)?.and_then(|a| a.into_iter().next()) else {
            return Ok(None);
        };
        let from = operand.sh[0].without_partial();
        let (Some(di), Some(dout)) = (only_tiled_dim(&from), only_tiled_dim(&to)) else {
            return Ok(None);
        };
        let axes = from.dims[di].clone();
        let majors = |g: &[i64], d: usize| g[..d].iter().product::<i64>();
        if to.dims[dout] != axes
            || !to.partial.is_empty()
            || majors(g_in, di) != majors(g_out, dout)
        {
            return Ok(None);
        }
        let parts = i64::from(self.out.mesh.count(&axes));
        let (rows_in, rows_out) = (g_in[di], g_out[dout]);
        // A merge: each device reshapes its rows, then takes the rows of
        // its output shard. (XLA splits a dim by regrouping the devices
        // through PropagateShardingThroughReshape first, which tpusim does
        // not model: a split is gathered.)
        if rows_out % rows_in != 0 {
            return Ok(None);
        }
        let held = ceil_div(rows_in, parts) * (rows_out / rows_in);
        let w = DimWindow {
            base: held * parts,
            parts,
            shard: held,
            stride: 1,
            low: 0,
            high: rows_out - held * parts,
        };
        let Ok(plan) = halo::plan_windows(&w) else {
            return Ok(None);
        };
        let global_in = &self.src.instr(ins.operands[0]).shape;
        let x = self.arr(cb, operand, global_in, &from)?;
        let zero = self.out.zero(cb, self.out.ty(x));
        let mut tmp = to.local_dims(&self.out.mesh, g_out);
        tmp[dout] = held;
        let merged = self.reshaped_locally(cb, ins, x, &tmp);
        let reshaped = self
            .out
            .exchange_halo(cb, merged, (dout, &axes), &plan, zero, None);
        Ok(Some(Val {
            id: reshaped,
            sh: vec![to],
        }))
    }

    /// `x` reshaped on each device to `dims`, named as `ins`.
    fn reshaped_locally(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        x: InstrId,
        dims: &[i64],
    ) -> InstrId {
        let ty = self.out.ty(x);
        if self.out.dims(x) == dims {
            return x;
        }
        let mut local = ins.clone();
        local.opcode = Opcode::Reshape;
        self.copy_as(cb, &local, Shape::array(ty, dims.to_vec()), vec![x], vec![])
    }

    fn dot(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
        asked: Option<&Sh>,
        given: Option<&Sh>,
    ) -> Result<Val, SpmdError> {
        let get = |n: &str| {
            ins.attr_ints(n)
                .unwrap_or(&[])
                .iter()
                .map(|&d| d as usize)
                .collect::<Vec<_>>()
        };
        let (lb, rb, lc, rc) = (
            get("lhs_batch_dims"),
            get("rhs_batch_dims"),
            get("lhs_contracting_dims"),
            get("rhs_contracting_dims"),
        );
        let lg = self.src.instr(ins.operands[0]).shape.clone();
        let rg = self.src.instr(ins.operands[1]).shape.clone();
        let (ls, rs) = (
            ops[0].sh[0].without_partial(),
            ops[1].sh[0].without_partial(),
        );
        let mesh = self.out.mesh.clone();
        let lfree: Vec<usize> = (0..lg.rank())
            .filter(|d| !lb.contains(d) && !lc.contains(d))
            .collect();
        let rfree: Vec<usize> = (0..rg.rank())
            .filter(|d| !rb.contains(d) && !rc.contains(d))
            .collect();
        let dims = DotDims {
            lb: &lb,
            rb: &rb,
            lc: &lc,
            rc: &rc,
            lfree: &lfree,
            rfree: &rfree,
        };
        // XLA's propagation gives the dot the merge of what each operand
        // implies for the result, and its dot handler reshards the operands
        // to fit; where that would move more data than keeping the lhs's
        // tiling (a partial result to reduce), the lhs keeps it. The lhs's
        // candidates first, then the rhs's.
        let candidates = [
            lhs_keeping(&dims, &ls, &rs, &lg, &mesh),
            merged(&dims, &ls, &rs, &lg, &mesh, false),
            merged(&dims, &ls, &rs, &lg, &mesh, true),
            rhs_first(&dims, &ls, &rs, &rg, &mesh, false),
            rhs_first(&dims, &ls, &rs, &rg, &mesh, true),
        ];
        let ty_bytes = |g: &Shape| {
            g.as_array()
                .map_or(4.0, |a| f64::from(a.ty.bit_width().max(8)) / 8.0)
        };
        let cost = |(l, r): &(Sh, Sh)| {
            let out = dot_result(&dims, l, r, ins.shape.rank());
            let (g, elem) = (ins.shape.dims(), ty_bytes(&ins.shape));
            let result = match asked {
                Some(to) if to.rank() == out.rank() => reduce_into_bytes(&mesh, g, elem, &out, to),
                _ => partial_bytes(&mesh, g, elem, &out),
            };
            reshard_bytes(&mesh, lg.dims(), ty_bytes(&lg), &ls, l)
                + reshard_bytes(&mesh, rg.dims(), ty_bytes(&rg), &rs, r)
                + result
        };
        // Where the operands' tilings conflict, XLA's propagation
        // (InferDotShardingFromOperands) lets the tiling a user asks of the
        // result decide (its lookahead: here every candidate competes on
        // the bytes that reach it); without one, the result takes the larger
        // operand's tiling first (the lhs on a tie) and merges in the
        // other's where the axes are still free: only that operand's
        // candidates compete.
        let bytes = |g: &Shape| g.dims().iter().map(|&d| d as f64).product::<f64>() * ty_bytes(g);
        let pool = match asked {
            Some(_) => &candidates[..],
            None if bytes(&lg) >= bytes(&rg) => &candidates[..3],
            None => &candidates[3..],
        };
        // A dot whose own sharding is given (XLA's propagated form) is
        // partitioned as XLA's dot handler would, where one of its base
        // cases fits.
        let given_case = given.and_then(|out| {
            let sizes = (bytes(&lg), bytes(&rg));
            xla_dot_handler(&dims, (&ls, &rs), (lg.rank(), rg.rank()), sizes, out, &mesh)
        });
        let (lcs, rcs) = given_case
            .or_else(|| {
                pool.iter()
                    .min_by(|a, b| cost(a).total_cmp(&cost(b)))
                    .cloned()
            })
            .unwrap_or_else(|| (Sh::replicated(lg.rank()), Sh::replicated(rg.rank())));
        let mut x = self.arr(cb, &ops[0], &lg, &lcs)?;
        let mut y = self.arr(cb, &ops[1], &rg, &rcs)?;
        // Uneven contracting tiles hold padding: zero it on both sides before
        // the partial products (as XLA masks).
        let uneven = lc
            .iter()
            .any(|&d| lg.dims()[d] % i64::from(mesh.count(&lcs.dims[d])) != 0);
        if uneven {
            let mut lmask = Sh::replicated(lg.rank());
            let mut rmask = Sh::replicated(rg.rank());
            for (&l, &r) in lc.iter().zip(&rc) {
                lmask.dims[l] = lcs.dims[l].clone();
                rmask.dims[r] = rcs.dims[r].clone();
            }
            let zl = self.out.zero(cb, self.out.ty(x));
            x = self.out.mask_padding(cb, x, &lmask, lg.dims(), zl);
            let zr = self.out.zero(cb, self.out.ty(y));
            y = self.out.mask_padding(cb, y, &rmask, rg.dims(), zr);
        }
        let out = dot_result(&dims, &lcs, &rcs, ins.shape.rank());
        self.local_op(cb, ins, vec![x, y], out, ins.attrs.clone())
    }

    /// Records that `id`'s operands tile two different dims of its result
    /// over `axes`, unless the result's sharding is given (an annotation on
    /// it or a sharding constraint on its value): Shardy's propagation then
    /// drops both claims (a conflict across factors) and the result takes
    /// the tiling later ops ask for, where tpusim keeps one operand's.
    fn note_conflict(&mut self, id: InstrId, axes: &[Axis]) {
        let Some(&a) = axes.first() else { return };
        let ins = self.src.instr(id);
        let given = ins.sharding().is_some() || self.given.contains_key(&ins.name);
        if given || self.constrained(id) {
            return;
        }
        let axis = self.out.mesh.axis_name(a);
        self.conflicts.push((ins.name.clone(), axis));
    }

    /// Whether the value `id` reaches a sharding before any op reshapes it:
    /// a `Sharding` constraint or an annotated op, following it through
    /// elementwise ops of its shape, copies, tuples and the results of the
    /// calls that return it (JAX wraps `jnp.take` in a call and constrains
    /// its result in the caller). Shardy's pass-through propagation carries
    /// such a sharding back to `id`, so its operands' claims do not decide it.
    fn constrained(&self, id: InstrId) -> bool {
        let m = self.src;
        let uses = self.uses.get_or_init(|| UseIndex::new(m));
        let shape = &m.instr(id).shape;
        let mut stack: Vec<Value> = vec![(id, None)];
        let mut seen: rustc_hash::FxHashSet<Value> = Default::default();
        while let Some(v) = stack.pop() {
            if !seen.insert(v) {
                continue;
            }
            let (at, index) = v;
            if let (Some(_), Some(c)) = (index, uses.roots.get(&at)) {
                let calls = uses.callers.get(c).into_iter().flatten();
                stack.extend(calls.map(|&call| (call, index)));
            }
            for &u in uses.users.get(&at).into_iter().flatten() {
                match follow(m.instr(u), v, shape) {
                    Follow::Constraint => return true,
                    Follow::Into(k) if k.is_none() && m.instr(u).sharding().is_some() => {
                        return true
                    }
                    Follow::Into(k) => stack.push((u, k)),
                    Follow::Stop => {}
                }
            }
        }
        false
    }

    fn reduce(&mut self, cb: &mut CompB, ins: &Instruction, ops: &[Val]) -> Result<Val, SpmdError> {
        let n = ops.len() / 2;
        let rdims: Vec<usize> = ins
            .attr_ints("dimensions")
            .unwrap_or(&[])
            .iter()
            .map(|&d| d as usize)
            .collect();
        let g = self.src.instr(ins.operands[0]).shape.clone();
        let s = ops[0].sh[0].without_partial();
        let reducer = ins.attr_comp("to_apply");
        let tiled: Vec<Axis> = rdims
            .iter()
            .flat_map(|&d| s.dims.get(d).into_iter().flatten().copied())
            .collect();
        if n > 1 && !tiled.is_empty() {
            return self.reduce_then_gather(cb, ins, ops, s, &rdims, &tiled);
        }
        let combinable = n == 1 && reducer.is_some_and(|c| self.identity_init(c, ins.operands[1]));
        let mut in_sh = s.clone();
        if !combinable {
            for &d in &rdims {
                in_sh.dims[d].clear();
            }
        }
        let mut ids = Vec::new();
        for k in 0..n {
            let gk = self.src.instr(ins.operands[k]).shape.clone();
            let mut x = self.arr(cb, &ops[k], &gk, &in_sh)?;
            if combinable {
                let init = self.arr(
                    cb,
                    &ops[n + k],
                    &self.src.instr(ins.operands[n + k]).shape,
                    &Sh::replicated(0),
                )?;
                x = self.out.mask_padding(cb, x, &in_sh, gk.dims(), init);
            }
            ids.push(x);
        }
        for k in 0..n {
            let init = self.arr(
                cb,
                &ops[n + k],
                &self.src.instr(ins.operands[n + k]).shape,
                &Sh::replicated(0),
            )?;
            ids.push(init);
        }
        let mut out = Sh::replicated(0);
        for d in 0..g.rank() {
            if !rdims.contains(&d) {
                out.dims.push(in_sh.dims[d].clone());
            } else {
                out.partial.extend(in_sh.dims[d].iter().copied());
            }
        }
        if !out.partial.is_empty() {
            out.reducer = reducer;
        }
        self.local_op(cb, ins, ids, out, ins.attrs.clone())
    }

    /// A variadic reduction (argmax: values and their indices) over dims tiled
    /// by `tiled`, as XLA partitions it: each device reduces its own part,
    /// the partial results are all-gathered along a new minor dim (one
    /// candidate per device) and reduced again. Padding of uneven dims is
    /// replaced by the init values first.
    fn reduce_then_gather(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
        in_sh: Sh,
        rdims: &[usize],
        tiled: &[Axis],
    ) -> Result<Val, SpmdError> {
        let src = self.src;
        let n = ops.len() / 2;
        let mut inputs = Vec::with_capacity(n);
        let mut inits = Vec::with_capacity(n);
        for k in 0..n {
            let init_shape = &src.instr(ins.operands[n + k]).shape;
            let init = self.arr(cb, &ops[n + k], init_shape, &Sh::replicated(0))?;
            let gk = src.instr(ins.operands[k]).shape.clone();
            let x = self.arr(cb, &ops[k], &gk, &in_sh)?;
            inputs.push(self.out.mask_padding(cb, x, &in_sh, gk.dims(), init));
            inits.push(init);
        }
        let g = src.instr(ins.operands[0]).shape.clone();
        let local = in_sh.local_dims(&self.out.mesh, g.dims());
        let kept: Vec<usize> = (0..g.rank()).filter(|d| !rdims.contains(d)).collect();
        let kept_dims: Vec<i64> = kept.iter().map(|&d| local[d]).collect();
        let types: Vec<tpusim_hlo::PrimitiveType> = leaves_of(&ins.shape)
            .iter()
            .map(|l| {
                l.as_array()
                    .map_or(tpusim_hlo::PrimitiveType::F32, |a| a.ty)
            })
            .collect();
        let tuple_of = |dims: &[i64]| {
            Shape::Tuple(
                types
                    .iter()
                    .map(|&t| Shape::array(t, dims.to_vec()))
                    .collect(),
            )
        };
        let operands = inputs.iter().chain(&inits).copied().collect();
        let partials = self.copy_as(cb, ins, tuple_of(&kept_dims), operands, ins.attrs.clone());
        let minor = kept_dims.len();
        let mut with_one = kept_dims.clone();
        with_one.push(1);
        let mut gathered = Vec::with_capacity(n);
        for (k, &ty) in types.iter().enumerate() {
            let part = self.out.emit(
                cb,
                "get-tuple-element",
                Opcode::GetTupleElement,
                Shape::array(ty, kept_dims.clone()),
                vec![partials],
                vec![attr("index", AttrValue::Int(k as i64))],
            );
            let column = self.out.emit(
                cb,
                "reshape",
                Opcode::Reshape,
                Shape::array(ty, with_one.clone()),
                vec![part],
                vec![],
            );
            gathered.push(self.out.all_gather(cb, column, minor, tiled));
        }
        let mut attrs = ins.attrs.clone();
        set_attr(
            &mut attrs,
            "dimensions",
            AttrValue::Ints(vec![minor as i64]),
        );
        let operands = gathered.iter().chain(&inits).copied().collect();
        let id = self.copy_as(cb, ins, tuple_of(&kept_dims), operands, attrs);
        let mut out = Sh::replicated(kept.len());
        for (k, &d) in kept.iter().enumerate() {
            out.dims[k] = in_sh.dims[d].clone();
        }
        Ok(Val {
            id,
            sh: vec![out; n],
        })
    }

    /// Whether repeating `init` across partial reductions leaves the result
    /// unchanged: idempotent reducers (max, min, and, or), or the identity
    /// constant of add and multiply.
    fn identity_init(&self, reducer: CompId, init: InstrId) -> bool {
        let c = self.src.comp(reducer);
        let root = self.src.instr(c.root);
        if c.params.len() != 2 || root.operands.len() != 2 || !root.shape.dims().is_empty() {
            return false;
        }
        let is_const = |v: f64| {
            let i = self.src.instr(init);
            i.opcode == Opcode::Constant
                && match &i.literal {
                    Some(tpusim_hlo::literal::Literal::Array(d)) => match d {
                        tpusim_hlo::literal::LiteralData::Float(x) => x.first() == Some(&v),
                        tpusim_hlo::literal::LiteralData::Int(x) => {
                            x.first().map(|&x| x as f64) == Some(v)
                        }
                        tpusim_hlo::literal::LiteralData::Pred(x) => {
                            x.first().map(|&x| f64::from(u8::from(x))) == Some(v)
                        }
                        _ => false,
                    },
                    _ => false,
                }
        };
        match root.opcode {
            Opcode::Maximum | Opcode::Minimum | Opcode::And | Opcode::Or => true,
            Opcode::Add => is_const(0.0),
            Opcode::Multiply => is_const(1.0),
            _ => false,
        }
    }

    /// A concatenate along a tiled dim, as XLA's handler does it
    /// (`HandleElementwiseWithDimsToReplicate`): the joined dim's tiles move
    /// to the first other dim whose rows divide among them and its own
    /// (`GetFirstTargetDimToMoveShardingTiles`: an all-to-all per operand),
    /// the operands are joined locally and the result's tiles moved back;
    /// `None` where no dim can take them (the dim is gathered).
    fn concatenated(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Option<Val>, SpmdError> {
        let out = ins.shape.dims().to_vec();
        let Some(&cat) = ins.attr_dims("dimensions").first() else {
            return Ok(None);
        };
        let Some(sh) = self
            .op_tiling(ins, ops)?
            .filter(|s| s.rank() == out.len() && cat < out.len())
        else {
            return Ok(None);
        };
        if out[cat] < 2 {
            return Ok(None);
        }
        let Some(temp) = tiles_moved_off(&self.out.mesh, &out, &sh, cat) else {
            return Ok(None);
        };
        self.through_tiling(cb, ins, ops, temp, sh).map(Some)
    }

    /// The tiling `ins` is computed in: its own sharding (`None` when its
    /// result leaves are tiled unlike each other), else its first
    /// operand's, without partial sums.
    fn op_tiling(&self, ins: &Instruction, ops: &[Val]) -> Result<Option<Sh>, SpmdError> {
        Ok(match self.annotation(ins)? {
            Some(a) if a.windows(2).any(|w| w[0] != w[1]) => None,
            Some(a) => a.into_iter().next(),
            None => ops
                .first()
                .and_then(|o| o.sh.first())
                .map(Sh::without_partial),
        })
    }

    /// `ins` computed with every operand and result tiled as `temp`, the
    /// result then resharded to `back` (every leaf alike).
    fn through_tiling(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
        temp: Sh,
        back: Sh,
    ) -> Result<Val, SpmdError> {
        let mut ids = Vec::with_capacity(ops.len());
        for (k, o) in ops.iter().enumerate() {
            let g = &self.src.instr(ins.operands[k]).shape;
            ids.push(self.reshard_val(cb, o, g, std::slice::from_ref(&temp))?.id);
        }
        let v = self.local_op(cb, ins, ids, temp, ins.attrs.clone())?;
        let back = vec![back; v.sh.len()];
        self.reshard_val(cb, &v, &ins.shape, &back)
    }

    /// A sort along a tiled dim, as XLA's HandleSort partitions it: the
    /// dim's tiles move to the first other dim whose rows divide among them
    /// (all-to-alls), each device sorts whole rows, and the result is
    /// resharded to the sort's own tiling. `None` where the sort dim is not
    /// tiled, the results are tiled unlike each other, or no dim can take
    /// the tiles (`dim_constrained` gathers the sort dim, as XLA does).
    /// XLA's own path for a sort that is a top-k (an iota operand, slices
    /// of the first k) is not modelled: such a sort is partitioned as any.
    fn sorted(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Option<Val>, SpmdError> {
        let leaves = leaves_of(&ins.shape);
        let Some(out) = leaves.first().map(|l| l.dims().to_vec()) else {
            return Ok(None);
        };
        let Some(&dim) = ins.attr_dims("dimensions").first() else {
            return Ok(None);
        };
        let Some(sh) = self
            .op_tiling(ins, ops)?
            .filter(|s| out.len() > 1 && s.rank() == out.len() && dim < out.len())
        else {
            return Ok(None);
        };
        let Some(temp) = tiles_moved_off(&self.out.mesh, &out, &sh, dim) else {
            return Ok(None);
        };
        self.through_tiling(cb, ins, ops, temp, sh).map(Some)
    }

    /// A reverse of tiled dims, kept tiled as XLA keeps it: the shards
    /// change places (`mirror_tiles`), then each device reverses its own;
    /// an uneven dim is first padded on the left with a halo exchange.
    /// `None` where no reversed dim is tiled.
    fn reversed(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Option<Val>, SpmdError> {
        let Some(sh) = ops[0]
            .sh
            .first()
            .filter(|s| ops[0].sh.len() == 1 && s.partial.is_empty())
            .cloned()
        else {
            return Ok(None);
        };
        let base = self.src.instr(ins.operands[0]).shape.dims().to_vec();
        let tiled: Vec<usize> = ins
            .attr_dims("dimensions")
            .into_iter()
            .filter(|&d| d < base.len() && sh.dims.get(d).is_some_and(|a| !a.is_empty()))
            .collect();
        if tiled.is_empty() {
            return Ok(None);
        }
        // An uneven dim's padding must end up at its front once reversed:
        // each device first takes the rows that shift it there from its
        // previous shard (XLA's HaloExchangeToPadOnLeft, which XLA runs after
        // the shards change places; the collectives are the same).
        let mut plans = Vec::new();
        for &d in &tiled {
            let parts = i64::from(sh.tiles(&self.out.mesh, d));
            let shard = ceil_div(base[d], parts);
            let low = shard * parts - base[d];
            if low == 0 {
                continue;
            }
            let w = DimWindow {
                base: base[d],
                parts,
                shard,
                stride: 1,
                low,
                high: 0,
            };
            match halo::plan(&w) {
                Ok(exchange @ halo::Exchange::Halo(_)) => plans.push((
                    d,
                    halo::WindowPlan {
                        exchange,
                        trim: None,
                    },
                )),
                _ => return Ok(None),
            }
        }
        let mut x = ops[0].id;
        if !plans.is_empty() {
            let zero = self.out.zero(cb, self.out.ty(x));
            for (d, p) in &plans {
                x = self
                    .out
                    .exchange_halo(cb, x, (*d, &sh.dims[*d]), p, zero, None);
            }
        }
        let axes: Vec<&[Axis]> = tiled.iter().map(|&d| sh.dims[d].as_slice()).collect();
        let moved = self.out.mirror_tiles(cb, x, &axes);
        self.local_op(cb, ins, vec![moved], sh, ins.attrs.clone())
            .map(Some)
    }

    /// A static slice or an edge pad of a tiled dim, kept tiled as XLA keeps
    /// it (`ReshardDataForSlicing`, `ReshardDataForPad`): see `exchange_windows`.
    fn windowed(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Option<Val>, SpmdError> {
        let src = self.src;
        let g = src.instr(ins.operands[0]).shape.clone();
        let Some(windows) = slice_or_pad_windows(ins, g.dims()) else {
            return Ok(None);
        };
        let fill = (ins.opcode == Opcode::Pad)
            .then(|| (ops[1].id, is_zero_constant(src.instr(ins.operands[1]))));
        let w = Windowed {
            operand: ops[0].clone(),
            global: g,
            windows,
            fill,
        };
        self.exchange_windows(cb, ins, w)
    }

    /// A slice of a pad, with unit strides and no interior padding, read as
    /// one pad of the pad's operand (XLA's `PreprocessHlos` merges them: one
    /// halo exchange instead of two), when both are tiled alike along a dim
    /// both change.
    fn pad_then_slice(
        &self,
        ins: &Instruction,
        vals: &FxHashMap<InstrId, Val>,
    ) -> Result<Option<Windowed>, SpmdError> {
        let src = self.src;
        if ins.opcode != Opcode::Slice {
            return Ok(None);
        }
        let pad = src.instr(ins.operands[0]);
        let (Some(AttrValue::Slice(sl)), Some(AttrValue::Padding(pads))) =
            (ins.attr("slice"), pad.attr("padding"))
        else {
            return Ok(None);
        };
        if pad.opcode != Opcode::Pad
            || sl.iter().any(|s| s.stride != 1)
            || pads.iter().any(|p| p.interior != 0)
        {
            return Ok(None);
        }
        let (Some(x), Some(fill)) = (vals.get(&pad.operands[0]), vals.get(&pad.operands[1])) else {
            return Ok(None);
        };
        // Without shardings of their own (forward propagation) both take
        // the operand's.
        let (sh, pad_sh) = (self.annotation(ins)?, self.annotation(pad)?);
        let sh = sh.unwrap_or_else(|| x.sh.clone());
        let pad_sh = pad_sh.unwrap_or_else(|| x.sh.clone());
        let padded = pad.shape.dims();
        let both_change = (0..sl.len()).any(|d| {
            let sliced = sl[d].start != 0 || sl[d].limit != padded[d];
            let padded_here = pads[d].low != 0 || pads[d].high != 0;
            sliced && padded_here && sh.first().is_some_and(|s| s.tiles(&self.out.mesh, d) > 1)
        });
        if sh != pad_sh || !both_change {
            return Ok(None);
        }
        let windows = pads
            .iter()
            .zip(sl)
            .zip(padded)
            .map(|((p, s), &n)| (p.low - s.start, p.high - (n - s.limit), 1, 0))
            .collect();
        Ok(Some(Windowed {
            operand: x.clone(),
            global: src.instr(pad.operands[0]).shape.clone(),
            windows,
            fill: Some((fill.id, is_zero_constant(src.instr(pad.operands[1])))),
        }))
    }

    /// Windows of one row over a tiled dim (a slice's or a pad's), kept
    /// tiled: each output row reads one input row, and the rows a device's
    /// windows read from other devices come as halos (`exchange_halo`).
    /// `None` where XLA gathers the dim instead (see `NoHalo`).
    fn exchange_windows(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        w: Windowed,
    ) -> Result<Option<Val>, SpmdError> {
        let base = w.global.dims().to_vec();
        let Some(own) = w
            .operand
            .sh
            .first()
            .filter(|s| w.operand.sh.len() == 1 && s.partial.is_empty())
        else {
            return Ok(None);
        };
        // XLA slices in the operand's tiling when it has more tiles than
        // the result's, else in the result's.
        let asked = self.annotation(ins)?.and_then(|a| a.into_iter().next());
        let sh = match asked {
            Some(r)
                if r.rank() == own.rank() && r.partial.is_empty() && {
                    r.total_tiles(&self.out.mesh) >= own.total_tiles(&self.out.mesh)
                } =>
            {
                r
            }
            _ => own.clone(),
        };
        let mut plans = Vec::new();
        for (d, &(low, high, stride, interior)) in w.windows.iter().enumerate() {
            let parts = i64::from(sh.tiles(&self.out.mesh, d));
            if parts < 2 || (low, high, stride, interior) == (0, 0, 1, 0) {
                continue;
            }
            // Interior padding (XLA's base dilation) is not exchanged: the
            // dim is gathered.
            if interior != 0 {
                return Ok(None);
            }
            let dim = DimWindow {
                base: base[d],
                parts,
                shard: ceil_div(base[d], parts),
                stride,
                low,
                high,
            };
            match halo::plan_windows(&dim) {
                Ok(p) => plans.push((d, p, base[d] % parts != 0)),
                Err(_) => return Ok(None),
            }
        }
        if plans.is_empty() {
            return Ok(None);
        }
        // An operand whole along the dim is tiled first and then exchanges
        // halos, as XLA's HandleSlice reshards it to the chosen tiling
        // before windowing (slice_whole_into_tiled).
        let x = self.reshard_val(cb, &w.operand, &w.global, std::slice::from_ref(&sh))?;
        let ty = self.out.ty(x.id);
        let (fill, zero_fill) = match w.fill {
            Some(f) => f,
            None => (self.out.zero(cb, ty), true),
        };
        let mut cur = x.id;
        for (d, p, uneven) in &plans {
            // XLA masks a pad's padding unless it is a literal zero on an
            // even dim (there the halo's zeros are the padding); a slice's
            // windows never read padding.
            let mask = (w.fill.is_some() && (!zero_fill || *uneven)).then_some(base[*d]);
            cur = self
                .out
                .exchange_halo(cb, cur, (*d, &sh.dims[*d]), p, fill, mask);
        }
        // What is left is local: the windows' strides on the exchanged dims
        // (a slice from row 0), the op itself on the untiled ones.
        let exchanged = |d: usize| plans.iter().find(|(e, ..)| *e == d).map(|(_, p, _)| p);
        let have = self.out.dims(cur);
        if w.fill.is_none() {
            let sl: Vec<SliceDim> = w
                .windows
                .iter()
                .enumerate()
                .map(|(d, &(low, high, stride, _))| match exchanged(d) {
                    Some(p) => SliceDim {
                        start: 0,
                        limit: p.exchange.rows(),
                        stride,
                    },
                    None if sh.dims[d].is_empty() => SliceDim {
                        start: -low,
                        limit: base[d] + high,
                        stride,
                    },
                    None => SliceDim {
                        start: 0,
                        limit: have[d],
                        stride: 1,
                    },
                })
                .collect();
            let whole = sl
                .iter()
                .zip(&have)
                .all(|(s, &n)| (s.start, s.limit, s.stride) == (0, n, 1));
            if whole {
                return Ok(Some(Val {
                    id: cur,
                    sh: vec![sh],
                }));
            }
            let mut attrs = ins.attrs.clone();
            set_attr(&mut attrs, "slice", AttrValue::Slice(sl));
            return self.local_op(cb, ins, vec![cur], sh, attrs).map(Some);
        }
        let pads: Vec<PadDim> = w
            .windows
            .iter()
            .enumerate()
            .map(
                |(d, &(low, high, _, interior))| match sh.dims[d].is_empty() {
                    true => PadDim {
                        low,
                        high,
                        interior,
                    },
                    false => PadDim::default(),
                },
            )
            .collect();
        if pads.iter().all(|p| *p == PadDim::default()) {
            return Ok(Some(Val {
                id: cur,
                sh: vec![sh],
            }));
        }
        let mut attrs = ins.attrs.clone();
        set_attr(&mut attrs, "padding", AttrValue::Padding(pads));
        self.local_op(cb, ins, vec![cur, fill], sh, attrs).map(Some)
    }

    /// Ops that need some dims whole (sliced, padded, reversed, sorted, windowed,
    /// concatenated): those dims are gathered, the others stay tiled.
    fn dim_constrained(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let src = self.src;
        let g0 = src.instr(ins.operands[0]).shape.clone();
        let out_leaf = leaves_of(&ins.shape);
        let rank = out_leaf.first().map_or(0, |l| l.rank());
        let gdims = g0.dims().to_vec();
        let odims = out_leaf
            .first()
            .map(|l| l.dims().to_vec())
            .unwrap_or_default();
        let whole: Vec<usize> = match ins.opcode {
            Opcode::Concatenate | Opcode::Reverse | Opcode::Sort => ins
                .attr_ints("dimensions")
                .unwrap_or(&[])
                .iter()
                .map(|&d| d as usize)
                .collect(),
            Opcode::ReduceWindow => match ins.attr("window") {
                Some(AttrValue::Window(w)) => w
                    .dims
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| {
                        d.size != 1
                            || d.stride != 1
                            || d.padding_low != 0
                            || d.padding_high != 0
                            || d.base_dilation != 1
                            || d.window_dilation != 1
                    })
                    .map(|(k, _)| k)
                    .collect(),
                _ => (0..rank).collect(),
            },
            Opcode::DynamicUpdateSlice => {
                let ud = src.instr(ins.operands[1]).shape.dims().to_vec();
                (0..rank).filter(|&d| ud.get(d) != gdims.get(d)).collect()
            }
            _ => (0..rank)
                .filter(|&d| odims.get(d) != gdims.get(d))
                .collect(),
        };
        let whole: Vec<usize> = if ins.opcode == Opcode::Slice {
            match ins.attr("slice") {
                Some(AttrValue::Slice(sl)) => sl
                    .iter()
                    .enumerate()
                    .filter(|(d, s)| s.start != 0 || s.stride != 1 || s.limit != gdims[*d])
                    .map(|(d, _)| d)
                    .collect(),
                _ => (0..rank).collect(),
            }
        } else {
            whole
        };
        let mut full = ops[0].sh[0].without_partial();
        if ins.opcode == Opcode::DynamicUpdateSlice {
            // The update's tiling flows into the buffer (a scan's stacked
            // outputs): untiled buffer dims take the update's axes when free.
            let us = ops[1].sh[0].without_partial();
            let mut used = full.used();
            for d in 0..full.rank().min(us.rank()) {
                if full.dims[d].is_empty() && !whole.contains(&d) {
                    let pick: Vec<Axis> = us.dims[d]
                        .iter()
                        .take_while(|a| !used.contains(a))
                        .copied()
                        .collect();
                    used.extend(&pick);
                    full.dims[d] = pick;
                }
            }
        }
        let mut target = full.clone();
        if target.rank() != rank {
            return self.replicated_fallback(cb, ins, ops);
        }
        for &d in &whole {
            if let Some(x) = target.dims.get_mut(d) {
                x.clear();
            }
        }
        let mut ids = Vec::new();
        for (k, o) in ops.iter().enumerate() {
            let g = &src.instr(ins.operands[k]).shape;
            let to: Vec<Sh> = leaves_of(g)
                .iter()
                .map(|l| {
                    if l.rank() == rank {
                        target.clone()
                    } else {
                        Sh::replicated(l.rank())
                    }
                })
                .collect();
            let is_init = ins.opcode == Opcode::ReduceWindow && k >= ops.len() / 2;
            let to = if is_init { vec![Sh::replicated(0)] } else { to };
            ids.push(self.reshard_val(cb, o, g, &to)?.id);
        }
        let mut attrs = ins.attrs.clone();
        let local = target.local_dims(&self.out.mesh, &odims);
        match ins.opcode {
            Opcode::Slice => {
                if let Some(AttrValue::Slice(sl)) = ins.attr("slice") {
                    let sl: Vec<SliceDim> = sl
                        .iter()
                        .enumerate()
                        .map(|(d, s)| {
                            if whole.contains(&d) {
                                *s
                            } else {
                                SliceDim {
                                    start: 0,
                                    limit: local[d],
                                    stride: 1,
                                }
                            }
                        })
                        .collect();
                    set_attr(&mut attrs, "slice", AttrValue::Slice(sl));
                }
            }
            Opcode::DynamicSlice => {
                set_attr(
                    &mut attrs,
                    "dynamic_slice_sizes",
                    AttrValue::Ints(local.clone()),
                );
            }
            _ => {}
        }
        let v = self.local_op(cb, ins, ids, target.clone(), attrs)?;
        if ins.opcode == Opcode::DynamicSlice {
            // XLA does not propagate an operand's tiling of a dynamically
            // sliced dim into the result (the offset is data-dependent):
            // those dims stay whole.
            return Ok(v);
        }
        // XLA propagates the operand's tiling through the op: the result is
        // sliced back to it (a free dynamic-slice).
        let back: Vec<Sh> = out_leaf
            .iter()
            .map(|l| {
                if l.rank() == full.rank() {
                    full.clone()
                } else {
                    Sh::replicated(l.rank())
                }
            })
            .collect();
        self.reshard_val(cb, &v, &ins.shape, &back)
    }

    fn gather(&mut self, cb: &mut CompB, id: InstrId, ops: &[Val]) -> Result<Val, SpmdError> {
        let src = self.src;
        let ins = src.instr(id);
        let og = src.instr(ins.operands[0]).shape.clone();
        let ig = src.instr(ins.operands[1]).shape.clone();
        let offset: Vec<usize> = ins
            .attr_ints("offset_dims")
            .unwrap_or(&[])
            .iter()
            .map(|&d| d as usize)
            .collect();
        let ivd = ins.attr_int("index_vector_dim").unwrap_or(ig.rank() as i64) as usize;
        let is = ops[1].sh[0].without_partial();
        let mut idx_sh = is.clone();
        if let Some(d) = idx_sh.dims.get_mut(ivd) {
            d.clear();
        }
        // Batching dims (take_along_axis) pair operand and index dims: they
        // must be tiled alike; every other operand dim is gathered.
        let ints = |n: &str| ins.attr_dims(n);
        let mut op_sh = Sh::replicated(og.rank());
        let op_batch = ints("operand_batching_dims");
        let idx_batch = ints("start_indices_batching_dims");
        for d in 0..idx_sh.rank() {
            if let Some(k) = idx_batch.iter().position(|&b| b == d) {
                op_sh.dims[op_batch[k]] = idx_sh.dims[d].clone();
            }
        }
        // Operand dims taken whole by every slice pass through to the output's
        // offset dims with their tiling (no communication).
        let collapsed = ints("collapsed_slice_dims");
        let index_map = ints("start_index_map");
        let mut slice_sizes: Vec<i64> = ins.attr_ints("slice_sizes").unwrap_or(&[]).to_vec();
        let window: Vec<usize> = (0..og.rank())
            .filter(|d| !collapsed.contains(d) && !op_batch.contains(d))
            .collect();
        let mut used = idx_sh.used();
        let os = ops[0].sh[0].without_partial();
        let claimed_twice: Vec<Axis> = window
            .iter()
            .flat_map(|&d| os.dims[d].iter().filter(|a| used.contains(a)).copied())
            .collect();
        self.note_conflict(id, &claimed_twice);
        for &d in &window {
            let whole = slice_sizes.get(d) == og.dims().get(d);
            if whole && !index_map.contains(&d) {
                let pick: Vec<Axis> = os.dims[d]
                    .iter()
                    .take_while(|a| !used.contains(a))
                    .copied()
                    .collect();
                used.extend(&pick);
                op_sh.dims[d] = pick;
            }
        }
        // A gather whose own sharding is given (XLA's propagated form) is
        // partitioned straight into it where it can be: its index-parallel
        // dims tile the indices, its offset dims the operand's passthrough
        // dims, both resharded as needed (as XLA's gather handler does for
        // the sharding propagation chose).
        let given = self.annotation(ins)?.and_then(|mut s| s.pop());
        let toward = given.as_ref().and_then(|out| {
            let batch_in = (0..ig.rank()).filter(|&d| d != ivd);
            let batch_out = (0..out.rank()).filter(|d| !offset.contains(d));
            let mut idx = Sh::replicated(ig.rank());
            for (bi, bo) in batch_in.zip(batch_out) {
                idx.dims[bi] = out.dims[bo].clone();
            }
            let mut opnd = Sh::replicated(og.rank());
            for (&b, &i) in op_batch.iter().zip(&idx_batch) {
                *opnd.dims.get_mut(b)? = idx.dims.get(i)?.clone();
            }
            for (&o, &d) in offset.iter().zip(&window) {
                let whole = slice_sizes.get(d) == og.dims().get(d);
                let axes = out.dims.get(o)?;
                if !axes.is_empty() && (!whole || index_map.contains(&d)) {
                    return None;
                }
                opnd.dims[d] = axes.clone();
            }
            Some((idx, opnd))
        });
        if let Some((idx, opnd)) = toward {
            used = idx.used();
            used.extend(opnd.used());
            idx_sh = idx;
            op_sh = opnd;
        }
        // A lookup into rows the operand tiles (a vocab-sharded embedding)
        // by axes still free stays operand-parallel, as XLA partitions it:
        // each device gathers from its own rows, zeroes the lookups that
        // miss them, and the partial results are summed.
        let lookup = self.row_lookup(ins, &og, &ig, &os, &used);
        if let Some((d, axes)) = &lookup {
            op_sh.dims[*d] = axes.clone();
        }
        let local_op = op_sh.local_dims(&self.out.mesh, og.dims());
        for &d in &window {
            if !op_sh.dims[d].is_empty() {
                slice_sizes[d] = local_op[d];
            }
        }
        let x = self.arr(cb, &ops[0], &og, &op_sh)?;
        let mut y = self.arr(cb, &ops[1], &ig, &idx_sh)?;
        let mut hits = None;
        if let Some((d, axes)) = &lookup {
            let tiling = (&axes[..], local_op[*d]);
            let (rel, hit) = self.out.shard_starts(cb, y, og.dims()[*d], tiling);
            y = rel;
            hits = Some(hit);
        }
        let batch_in: Vec<usize> = (0..ig.rank()).filter(|&d| d != ivd).collect();
        let batch_out: Vec<usize> = (0..ins.shape.rank())
            .filter(|d| !offset.contains(d))
            .collect();
        let mut out = Sh::replicated(ins.shape.rank());
        for (bo, bi) in batch_out.iter().zip(&batch_in) {
            out.dims[*bo] = idx_sh.dims[*bi].clone();
        }
        for (&o, &d) in offset.iter().zip(&window) {
            out.dims[o] = op_sh.dims[d].clone();
        }
        let mut attrs = ins.attrs.clone();
        set_attr(&mut attrs, "slice_sizes", AttrValue::Ints(slice_sizes));
        let g = self.local_op(cb, ins, vec![x, y], out, attrs)?;
        match (lookup, hits) {
            (Some((_, axes)), Some(hit)) => self.zero_misses(cb, g, hit, ivd, &batch_out, axes),
            _ => Ok(g),
        }
    }

    /// The operand dim of a gather that can stay tiled by the axes returned:
    /// a dim looked up row by row (collapsed, slice size 1) by the only
    /// component of `s32` start indices, tiled evenly by axes the indices do
    /// not use (an embedding lookup, or `take_along_axis` of vocab-tiled
    /// log-probabilities at the labels).
    fn row_lookup(
        &self,
        ins: &Instruction,
        og: &Shape,
        ig: &Shape,
        os: &Sh,
        used: &[Axis],
    ) -> Option<(usize, Vec<Axis>)> {
        let ints = |n: &str| ins.attr_ints(n).unwrap_or(&[]).to_vec();
        let index_map = ints("start_index_map");
        let [d] = index_map[..] else {
            return None;
        };
        let d = usize::try_from(d).ok()?;
        let ivd = usize::try_from(ins.attr_int("index_vector_dim")?).ok()?;
        let one_component = ivd == ig.rank() || ig.dims().get(ivd) == Some(&1);
        let axes = os.dims.get(d)?.clone();
        let rows = *og.dims().get(d)?;
        let fits = one_component
            && ig
                .as_array()
                .is_some_and(|a| a.ty == tpusim_hlo::PrimitiveType::S32)
            && ints("collapsed_slice_dims").contains(&(d as i64))
            && ints("slice_sizes").get(d) == Some(&1)
            && !ints("operand_batching_dims").contains(&(d as i64))
            && !axes.is_empty()
            && axes.iter().all(|a| !used.contains(a))
            && rows % i64::from(self.out.mesh.count(&axes)) == 0;
        fits.then_some((d, axes))
    }

    /// Zeroes the rows of a partitioned row lookup `g` whose start missed
    /// this device's rows (`hit` false; shaped like the start indices) and
    /// marks the result a partial sum over `axes`.
    fn zero_misses(
        &mut self,
        cb: &mut CompB,
        g: Val,
        hit: InstrId,
        ivd: usize,
        batch_out: &[usize],
        axes: Vec<Axis>,
    ) -> Result<Val, SpmdError> {
        let out_dims = self.out.dims(g.id);
        let mut batch = self.out.dims(hit);
        if ivd < batch.len() {
            batch.remove(ivd);
        }
        let pred = |dims: Vec<i64>| Shape::array(tpusim_hlo::PrimitiveType::Pred, dims);
        let flat = self.out.emit(
            cb,
            "reshape",
            Opcode::Reshape,
            pred(batch),
            vec![hit],
            vec![],
        );
        let dims = AttrValue::Ints(batch_out.iter().map(|&d| d as i64).collect());
        let mask = self.out.emit(
            cb,
            "broadcast",
            Opcode::Broadcast,
            pred(out_dims.clone()),
            vec![flat],
            vec![attr("dimensions", dims)],
        );
        let ty = self.out.ty(g.id);
        let z = self.out.zero(cb, ty);
        let zeros = self.out.splat(cb, z, ty, &out_dims);
        let id = self.out.emit(
            cb,
            "select",
            Opcode::Select,
            Shape::array(ty, out_dims),
            vec![mask, g.id, zeros],
            vec![],
        );
        let sh =
            g.sh.into_iter()
                .map(|mut s| {
                    s.partial = axes.clone();
                    s.reducer = None;
                    s
                })
                .collect();
        Ok(Val { id, sh })
    }

    fn convolution(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let Some(AttrValue::DimLabels(dl)) = ins.attr("dim_labels") else {
            return self.replicated_fallback(cb, ins, ops);
        };
        let groups = ins.attr_int("batch_group_count").unwrap_or(1);
        if groups != 1 {
            return self.replicated_fallback(cb, ins, ops);
        }
        let lg = self.src.instr(ins.operands[0]).shape.clone();
        let rg = self.src.instr(ins.operands[1]).shape.clone();
        let ib = dl.input_batch as usize;
        let mut ls = Sh::replicated(lg.rank());
        ls.dims[ib] = ops[0].sh[0].dims.get(ib).cloned().unwrap_or_default();
        let mut window = match ins.attr("window") {
            Some(AttrValue::Window(w)) => Some(w.clone()),
            _ => None,
        };
        // Spatial dims the input tiles keep their tiling: each device gets
        // its neighbours' edge rows (a halo) instead of the whole dim.
        let halos = window.as_ref().map_or_else(Vec::new, |w| {
            self.halo_dims(&lg, &ops[0].sh[0], &dl.input_spatial, w, &ls.used())
        });
        for h in &halos {
            ls.dims[h.dim] = h.axes.clone();
        }
        // The kernel's output features keep their tiling where its axes are free
        // (and there is no feature grouping to keep aligned).
        let mut rs = Sh::replicated(rg.rank());
        let kof = dl.kernel_output_feature as usize;
        if ins.attr_int("feature_group_count").unwrap_or(1) == 1 {
            let used = ls.used();
            rs.dims[kof] = ops[1].sh[0]
                .dims
                .get(kof)
                .map(|axes| {
                    axes.iter()
                        .take_while(|a| !used.contains(a))
                        .copied()
                        .collect()
                })
                .unwrap_or_default();
        }
        let mut x = self.arr(cb, &ops[0], &lg, &ls)?;
        for h in &halos {
            x = self.out.with_halo(cb, x, h.dim, &h.axes, (h.low, h.high));
        }
        let y = self.arr(cb, &ops[1], &rg, &rs)?;
        let mut out = Sh::replicated(ins.shape.rank());
        out.dims[dl.output_batch as usize] = ls.dims[ib].clone();
        out.dims[dl.output_feature as usize] = rs.dims[kof].clone();
        let mut attrs = ins.attrs.clone();
        if let (Some(w), false) = (window.as_mut(), halos.is_empty()) {
            for h in &halos {
                w.dims[h.window].padding_low = 0;
                w.dims[h.window].padding_high = 0;
                out.dims[dl.output_spatial[h.window] as usize] = h.axes.clone();
            }
            set_attr(&mut attrs, "window", AttrValue::Window(w.clone()));
        }
        self.local_op(cb, ins, vec![x, y], out, attrs)
    }

    /// A reduce-window (pooling) over dims its input tiles, partitioned with
    /// halo exchanges as XLA does: the rows past either end of the array are
    /// the init value, as the window's padding is. `None` when no tiled dim
    /// qualifies (the op is then computed with those dims whole).
    fn reduce_window_halo(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Option<Result<Val, SpmdError>> {
        let Some(AttrValue::Window(w)) = ins.attr("window") else {
            return None;
        };
        if ops.len() != 2 || ops[0].sh.len() != 1 {
            return None;
        }
        let g = self.src.instr(ins.operands[0]).shape.clone();
        let sh = ops[0].sh[0].without_partial();
        let all: Vec<i64> = (0..g.rank() as i64).collect();
        let halos = self.halo_dims(&g, &sh, &all, w, &[]);
        if halos.is_empty() {
            return None;
        }
        let mut target = sh;
        for (d, wd) in w.dims.iter().enumerate() {
            let trivial = wd.size == 1
                && wd.stride == 1
                && wd.padding_low == 0
                && wd.padding_high == 0
                && wd.base_dilation == 1
                && wd.window_dilation == 1;
            if !trivial && !halos.iter().any(|h| h.dim == d) {
                target.dims[d].clear();
            }
        }
        let mut window = w.clone();
        Some((|| {
            let mut x = self.arr(cb, &ops[0], &g, &target)?;
            let init_shape = &self.src.instr(ins.operands[1]).shape;
            let init = self.arr(cb, &ops[1], init_shape, &Sh::replicated(0))?;
            for h in &halos {
                let rows = g.dims()[h.dim] / i64::from(self.out.mesh.count(&h.axes));
                x = self.out.with_halo(cb, x, h.dim, &h.axes, (h.low, h.high));
                let at = (h.dim, &h.axes[..]);
                x = self
                    .out
                    .fill_outside(cb, x, at, (rows, h.low, g.dims()[h.dim]), init);
                window.dims[h.window].padding_low = 0;
                window.dims[h.window].padding_high = 0;
            }
            let mut attrs = ins.attrs.clone();
            set_attr(&mut attrs, "window", AttrValue::Window(window));
            self.local_op(cb, ins, vec![x, init], target, attrs)
        })())
    }

    /// The spatial dims of a windowed op's input (`spatial[i]` is window dim
    /// `i`) that stay tiled with a halo exchange: tiled evenly by axes not in
    /// `used`, a unit-stride undilated window whose padding keeps the size
    /// (low + high = size - 1), and halos no wider than a device's rows.
    fn halo_dims(
        &self,
        g: &Shape,
        sh: &Sh,
        spatial: &[i64],
        w: &tpusim_hlo::attr::Window,
        used: &[Axis],
    ) -> Vec<Halo> {
        let mut taken: Vec<Axis> = used.to_vec();
        let mut out = Vec::new();
        for (i, (&d, wd)) in spatial.iter().zip(&w.dims).enumerate() {
            let d = d as usize;
            let Some(axes) = sh.dims.get(d).filter(|a| !a.is_empty()) else {
                continue;
            };
            let parts = i64::from(self.out.mesh.count(axes));
            let rows = g.dims().get(d).map_or(0, |&n| n / parts);
            let fits = wd.stride == 1
                && wd.base_dilation == 1
                && wd.window_dilation == 1
                && !wd.reversal
                && wd.padding_low >= 0
                && wd.padding_high >= 0
                && wd.padding_low + wd.padding_high == wd.size - 1
                && g.dims()[d] % parts == 0
                && rows >= wd.padding_low.max(wd.padding_high)
                && axes.iter().all(|a| !taken.contains(a));
            if fits {
                taken.extend(axes);
                out.push(Halo {
                    dim: d,
                    window: i,
                    axes: axes.clone(),
                    low: wd.padding_low,
                    high: wd.padding_high,
                });
            }
        }
        out
    }

    fn while_loop(
        &mut self,
        cb: &mut CompB,
        i: InstrId,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let (Some(body), Some(cond)) = (ins.attr_comp("body"), ins.attr_comp("condition")) else {
            return Err(self.unsupported(ins, "while without body or condition"));
        };
        let g = &self.src.instr(ins.operands[0]).shape;
        // A loop given its sharding (by propagation or in the input) carries
        // that: the init is resharded to it, as XLA's partitioner does.
        let given = self
            .annotation(ins)?
            .filter(|given| given.len() == ops[0].sh.len());
        let carried = match given {
            Some(given) => given,
            None => self.carried_tiling(i, body, &ops[0])?,
        };
        let init = self.reshard_val(cb, &ops[0], g, &carried)?;
        let (b, _) = self.computation(body, std::slice::from_ref(&carried), Some(&carried))?;
        let (c, _) = self.computation(
            cond,
            std::slice::from_ref(&carried),
            Some(&[Sh::replicated(0)]),
        )?;
        let mut attrs = clean_attrs(&ins.attrs);
        set_attr(&mut attrs, "body", AttrValue::Comp(b));
        set_attr(&mut attrs, "condition", AttrValue::Comp(c));
        let shape = self.local_shape(&ins.shape, &carried);
        let id = self.copy_as(cb, ins, shape, vec![init.id], attrs);
        Ok(Val { id, sh: carried })
    }

    /// The tiling a loop without a given sharding carries: its init's,
    /// refined by what its body and the ops after it ask for.
    fn carried_tiling(
        &mut self,
        i: InstrId,
        body: CompId,
        init: &Val,
    ) -> Result<Vec<Sh>, SpmdError> {
        let mut carried: Vec<Sh> = init.sh.iter().map(Sh::without_partial).collect();
        // XLA also propagates a loop's shardings backward from its body: a
        // carried value that enters untiled (a zero-initialized scan buffer) but
        // that the body tiles is carried tiled. One exploratory pass of the body
        // finds those (bounded to shallow nesting: each level doubles the work).
        if self.depth < EXPLORE_LOOPS_DEPTH {
            let (explored, natural) =
                self.computation(body, std::slice::from_ref(&carried), None)?;
            let param = self.out.m.comp(explored).params.first().copied();
            for (k, c) in carried.iter_mut().enumerate() {
                let want = param.and_then(|p| self.wanted.get(&(p, k)));
                if let Some(w) = want.filter(|w| c.is_replicated() && w.rank() == c.rank()) {
                    *c = w.clone();
                }
            }
            let mesh = self.out.mesh.clone();
            for (c, n) in carried.iter_mut().zip(natural) {
                if c.rank() == n.rank()
                    && c.total_tiles(&mesh) < n.total_tiles(&mesh)
                    && c.used().iter().all(|a| n.used().contains(a))
                {
                    *c = n.without_partial();
                }
            }
        }
        let mesh = self.out.mesh.clone();
        for (k, c) in carried.iter_mut().enumerate() {
            // A hint refines the carried tiling (never drops its axes).
            let hint = self.loop_hints.get(&(i, k)).filter(|h| {
                h.rank() == c.rank()
                    && h.total_tiles(&mesh) > c.total_tiles(&mesh)
                    && c.used().iter().all(|a| h.used().contains(a))
            });
            if let Some(h) = hint {
                *c = h.clone();
            }
        }
        Ok(carried)
    }

    fn conditional(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let branches: Vec<CompId> = match (
            ins.attr("branch_computations"),
            ins.attr_comp("true_computation"),
            ins.attr_comp("false_computation"),
        ) {
            (Some(AttrValue::Comps(cs)), _, _) => cs.clone(),
            (_, Some(t), Some(f)) => vec![t, f],
            _ => return Err(self.unsupported(ins, "conditional without branches")),
        };
        let pg = &self.src.instr(ins.operands[0]).shape;
        let pred = self.arr(cb, &ops[0], pg, &Sh::replicated(0))?;
        let mut new = Vec::new();
        let mut result: Option<Vec<Sh>> = None;
        for (k, &b) in branches.iter().enumerate() {
            let arg = ops
                .get(k + 1)
                .ok_or_else(|| self.unsupported(ins, "missing branch operand"))?;
            let (c, sh) = self.computation(b, std::slice::from_ref(&arg.sh), result.as_deref())?;
            result.get_or_insert(sh);
            new.push(c);
        }
        let sh = result.unwrap_or_default();
        let mut attrs = clean_attrs(&ins.attrs);
        if ins.attr("branch_computations").is_some() {
            set_attr(&mut attrs, "branch_computations", AttrValue::Comps(new));
        } else {
            set_attr(&mut attrs, "true_computation", AttrValue::Comp(new[0]));
            set_attr(&mut attrs, "false_computation", AttrValue::Comp(new[1]));
        }
        let shape = self.local_shape(&ins.shape, &sh);
        let mut operands = vec![pred];
        operands.extend(ops[1..].iter().map(|o| o.id));
        let id = self.copy_as(cb, ins, shape, operands, attrs);
        Ok(Val { id, sh })
    }

    fn custom_call(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let target = ins.attr_ident("custom_call_target").unwrap_or("");
        // These annotate (or re-view) one value; the verifier lets a custom-call
        // take any number of operands.
        let one_value = matches!(
            target,
            "Sharding"
                | "xla.sdy.FuncResultSharding"
                | "SPMDFullToShardShape"
                | "SPMDShardToFullShape"
        );
        if one_value && ops.len() != 1 {
            return Err(self.unsupported(
                ins,
                format!(
                    "custom-call '{target}' takes one operand, not {}",
                    ops.len()
                ),
            ));
        }
        match target {
            "Sharding" if matches!(ins.sharding(), Some(Sharding::Single(x)) if x.kind == tpusim_hlo::attr::ShardingKind::Manual) => {
                Ok(ops[0].clone())
            }
            "Sharding" if !self.manual.is_empty() && ops[0].sh.len() == 1 => {
                let current = ops[0].sh[0].without_partial();
                let to = match self.manual_constraint(ins, &current) {
                    Some(to) => vec![to],
                    None => self.annotation(ins)?.ok_or_else(|| {
                        self.unsupported(ins, "Sharding custom-call without a sharding")
                    })?,
                };
                let g = &self.src.instr(ins.operands[0]).shape;
                self.reshard_val(cb, &ops[0], g, &to)
            }
            "Sharding" => {
                let to = self.annotation(ins)?.ok_or_else(|| {
                    self.unsupported(ins, "Sharding custom-call without a sharding")
                })?;
                let g = &self.src.instr(ins.operands[0]).shape;
                self.reshard_val(cb, &ops[0], g, &to)
            }
            "xla.sdy.FuncResultSharding" => Ok(ops[0].clone()),
            "xla.sdy.GlobalToLocalShape" => self.global_to_local(cb, ins, ops),
            "xla.sdy.LocalToGlobalShape" => self.local_to_global(cb, ins, ops),
            "SPMDFullToShardShape" => {
                // The operand went through a `Sharding` custom-call to its tiled
                // sharding: its local value is the shard the region works on,
                // tiled over the free axes of a partially manual region.
                let rank = ins.shape.rank();
                let sh = self
                    .annotation(ins)?
                    .unwrap_or_else(|| vec![Sh::replicated(rank)]);
                Ok(Val { id: ops[0].id, sh })
            }
            "SPMDShardToFullShape" => {
                let to = self.annotation(ins)?.ok_or_else(|| {
                    self.unsupported(ins, "SPMDShardToFullShape without a sharding")
                })?;
                let [single] = to.as_slice() else {
                    return Err(self.unsupported(
                        ins,
                        "SPMDShardToFullShape needs one sharding for its one result",
                    ));
                };
                self.check_local(ins, ops[0].id, &ins.shape, single)?;
                Ok(Val {
                    id: ops[0].id,
                    sh: to,
                })
            }
            t if t.starts_with("xla.sdy.") => Err(self.unsupported(
                ins,
                format!("Shardy custom-call '{t}' is not partitioned yet"),
            )),
            _ => self.replicated_fallback(cb, ins, ops),
        }
    }
}

/// A value: an instruction's result, or element `k` of its tuple result.
type Value = (InstrId, Option<i64>);

/// Who reads each instruction, who calls each computation, and which
/// computation each root ends.
struct UseIndex {
    users: FxHashMap<InstrId, Vec<InstrId>>,
    callers: FxHashMap<CompId, Vec<InstrId>>,
    roots: FxHashMap<InstrId, CompId>,
}

impl UseIndex {
    fn new(m: &Module) -> Self {
        let mut users: FxHashMap<InstrId, Vec<InstrId>> = FxHashMap::default();
        let mut callers: FxHashMap<CompId, Vec<InstrId>> = FxHashMap::default();
        for (i, ins) in m.instrs.iter().enumerate() {
            let user = InstrId(i as u32);
            for &o in &ins.operands {
                users.entry(o).or_default().push(user);
            }
            if ins.opcode == Opcode::Call {
                for c in ins.called_computations() {
                    callers.entry(c).or_default().push(user);
                }
            }
        }
        let roots = m.comp_ids().map(|c| (m.comp(c).root, c)).collect();
        UseIndex {
            users,
            callers,
            roots,
        }
    }
}

/// Where a value of `shape` goes through `user`.
enum Follow {
    /// A `Sharding` constraint reads it.
    Constraint,
    /// It carries on as `user`'s result (or element `k` of it), unchanged.
    Into(Option<i64>),
    /// `user` reshapes or combines it: the walk ends here.
    Stop,
}

fn follow(user: &Instruction, (at, index): Value, shape: &Shape) -> Follow {
    match (index, user.opcode) {
        (None, Opcode::CustomCall) if user.attr_ident("custom_call_target") == Some("Sharding") => {
            Follow::Constraint
        }
        (None, Opcode::Tuple) => match user.operands.iter().position(|&o| o == at) {
            Some(k) => Follow::Into(Some(k as i64)),
            None => Follow::Stop,
        },
        (Some(k), Opcode::GetTupleElement) if user.attr_int("index") == Some(k) => {
            Follow::Into(None)
        }
        (None, op)
            if (op.is_elementwise() || op == Opcode::Copy) && user.shape.dims() == shape.dims() =>
        {
            Follow::Into(None)
        }
        _ => Follow::Stop,
    }
}

/// Whether `ins` is annotated `{manual}`: XLA's form of a shard_map body
/// after propagation (between `SPMDFullToShardShape` and
/// `SPMDShardToFullShape`), whose values are per-device already.
fn fully_manual(ins: &Instruction) -> bool {
    matches!(ins.sharding(), Some(Sharding::Single(s)) if s.kind == tpusim_hlo::attr::ShardingKind::Manual)
}

/// The sharding of `ins` when it is partially manual (`last_tile_dims`
/// naming `manual`): a value of XLA's form of a shard_map body over some
/// mesh axes, per-device over those and tiled over the others.
fn partially_manual(ins: &Instruction) -> Option<&SingleSharding> {
    match ins.sharding() {
        Some(Sharding::Single(s)) if s.last_tile_dims.iter().any(|t| t == "manual") => Some(s),
        _ => None,
    }
}

/// A spatial dim of a windowed op kept tiled with a halo exchange.
struct Halo {
    /// The operand's dim.
    dim: usize,
    /// Its window dim.
    window: usize,
    axes: Vec<Axis>,
    /// Rows of padding before and after it: the halo taken from the previous
    /// and the next device.
    low: i64,
    high: i64,
}

/// A dot's dimension numbers and the free (non-batch, non-contracting) dims.
struct DotDims<'a> {
    lb: &'a [usize],
    rb: &'a [usize],
    lc: &'a [usize],
    rc: &'a [usize],
    lfree: &'a [usize],
    rfree: &'a [usize],
}

impl DotDims<'_> {
    fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.lb
            .iter()
            .copied()
            .zip(self.rb.iter().copied())
            .chain(self.lc.iter().copied().zip(self.rc.iter().copied()))
    }
}

/// Which side of a dot a tiling belongs to.
#[derive(Clone, Copy, PartialEq)]
enum DotSide {
    Lhs,
    Rhs,
}

impl DotDims<'_> {
    /// The batch, contracting and free dims of one side.
    fn of(&self, side: DotSide) -> (&[usize], &[usize], &[usize]) {
        match side {
            DotSide::Lhs => (self.lb, self.lc, self.lfree),
            DotSide::Rhs => (self.rb, self.rc, self.rfree),
        }
    }

    /// The tiling of the other operand that one side's tiling `s` implies
    /// (batch and contracting dims carried over, the other's free dims
    /// whole); `None` when `s` tiles a free dim, which the other lacks.
    fn across(&self, side: DotSide, s: &Sh, other_rank: usize) -> Option<Sh> {
        let other = if side == DotSide::Lhs {
            DotSide::Rhs
        } else {
            DotSide::Lhs
        };
        let ((b, c, free), (ob, oc, _)) = (self.of(side), self.of(other));
        if free.iter().any(|&k| !s.dims[k].is_empty()) {
            return None;
        }
        let mut t = Sh::replicated(other_rank);
        for (&k, &o) in b.iter().zip(ob).chain(c.iter().zip(oc)) {
            t.dims[o] = s.dims[k].clone();
        }
        Some(t)
    }

    /// The result tiling one side's tiling `s` implies (its batch and free
    /// dims carried over, the other's free dims whole); `None` when `s`
    /// tiles a contracting dim.
    fn to_result(&self, side: DotSide, s: &Sh, rank: usize) -> Option<Sh> {
        let (b, c, free) = self.of(side);
        if c.iter().any(|&k| !s.dims[k].is_empty()) {
            return None;
        }
        let mut t = Sh::replicated(rank);
        let offset = if side == DotSide::Lhs {
            0
        } else {
            self.lfree.len()
        };
        for (i, &k) in b.iter().enumerate() {
            t.dims[i] = s.dims[k].clone();
        }
        for (i, &k) in free.iter().enumerate() {
            t.dims[b.len() + offset + i] = s.dims[k].clone();
        }
        Some(t)
    }
}

/// Devices a tiling splits `dims` over.
fn parts(mesh: &crate::mesh::Mesh, s: &Sh, dims: &[usize]) -> u32 {
    dims.iter().map(|&k| mesh.count(&s.dims[k])).product()
}

/// The operand tilings XLA's dot handler settles on when the dot's own
/// sharding `out` is given and one of its base cases fits, tried in its
/// order: both operands batch-tiled alike; one operand batch-tiled as the
/// result, the other resharded to it; both tiled alike on the contracting
/// dims (the smaller operand resharded to the larger's tiling; the result
/// a partial sum); one operand tiled on its free dims as the result, the
/// other gathered whole. Each case asks that the tiling spans every device
/// in the group (`n` of them). `None` when no case fits.
fn xla_base_case(
    d: &DotDims,
    (ls, rs): (&Sh, &Sh),
    (lr, rr): (usize, usize),
    (lbytes, rbytes): (f64, f64),
    out: &Sh,
    mesh: &crate::mesh::Mesh,
    n: u32,
) -> Option<(Sh, Sh)> {
    let or = out.rank();
    let l_to_r = d.across(DotSide::Lhs, ls, rr);
    let r_to_l = d.across(DotSide::Rhs, rs, lr);
    let l_out = d.to_result(DotSide::Lhs, ls, or);
    let r_out = d.to_result(DotSide::Rhs, rs, or);
    let out_batch: Vec<usize> = (0..d.lb.len()).collect();
    let out_lfree: Vec<usize> = (d.lb.len()..d.lb.len() + d.lfree.len()).collect();
    let out_rfree: Vec<usize> = (d.lb.len() + d.lfree.len()..or).collect();
    let batch_tiled = |s: &Sh, b: &[usize]| parts(mesh, s, b) == n;
    if batch_tiled(ls, d.lb) && batch_tiled(rs, d.rb) && l_to_r.as_ref() == Some(rs) {
        return Some((ls.clone(), rs.clone()));
    }
    let out_batch_tiled = parts(mesh, out, &out_batch) == n;
    if out_batch_tiled && batch_tiled(ls, d.lb) && l_out.as_ref() == Some(out) {
        return Some((ls.clone(), l_to_r?));
    }
    if out_batch_tiled && batch_tiled(rs, d.rb) && r_out.as_ref() == Some(out) {
        return Some((r_to_l?, rs.clone()));
    }
    if parts(mesh, ls, d.lc) == n && parts(mesh, rs, d.rc) == n {
        return if lbytes < rbytes {
            Some((r_to_l?, rs.clone()))
        } else {
            Some((ls.clone(), l_to_r?))
        };
    }
    if parts(mesh, ls, d.lfree) == n
        && parts(mesh, out, &out_lfree) == n
        && l_out.as_ref() == Some(out)
    {
        return Some((ls.clone(), Sh::replicated(rr)));
    }
    if parts(mesh, rs, d.rfree) == n
        && parts(mesh, out, &out_rfree) == n
        && r_out.as_ref() == Some(out)
    {
        return Some((Sh::replicated(lr), rs.clone()));
    }
    None
}

/// XLA's dot handler on a given result sharding `out`: its base cases over
/// all devices, else over the groups that the axes tiling matching dims
/// alike (batch dims of all three, an operand's free dims and the
/// result's, both operands' contracting dims) split the devices into, as
/// XLA groups devices before it retries its base cases. Grouped axes keep
/// their dims; the base case settles the rest.
fn xla_dot_handler(
    d: &DotDims,
    (ls, rs): (&Sh, &Sh),
    ranks: (usize, usize),
    sizes: (f64, f64),
    out: &Sh,
    mesh: &crate::mesh::Mesh,
) -> Option<(Sh, Sh)> {
    // Dimension numbers past an operand's rank (a malformed dot) fit no case.
    let fits = |dims: &[usize], s: &Sh| dims.iter().all(|&k| k < s.rank());
    let sides = [
        (d.lb, ls),
        (d.lc, ls),
        (d.lfree, ls),
        (d.rb, rs),
        (d.rc, rs),
        (d.rfree, rs),
    ];
    let result_rank = d.lb.len() + d.lfree.len() + d.rfree.len();
    if !sides.iter().all(|(dims, s)| fits(dims, s))
        || result_rank != out.rank()
        || d.lb.len() != d.rb.len()
    {
        return None;
    }
    let all = mesh.count(&mesh.axes().collect::<Vec<_>>());
    if let Some(found) = xla_base_case(d, (ls, rs), ranks, sizes, out, mesh, all) {
        return Some(found);
    }
    let grouped = grouping_axes(d, ls, rs, out);
    if grouped.is_empty() {
        return None;
    }
    let strip = |s: &Sh| Sh {
        dims: s
            .dims
            .iter()
            .map(|axes| {
                axes.iter()
                    .filter(|a| !grouped.contains(a))
                    .copied()
                    .collect()
            })
            .collect(),
        ..Sh::replicated(0)
    };
    let n = all / mesh.count(&grouped);
    let (l, r) = xla_base_case(
        d,
        (&strip(ls), &strip(rs)),
        ranks,
        sizes,
        &strip(out),
        mesh,
        n,
    )?;
    let restore = |orig: &Sh, got: Sh| Sh {
        dims: orig
            .dims
            .iter()
            .zip(got.dims)
            .map(|(o, g)| {
                o.iter()
                    .filter(|a| grouped.contains(a))
                    .copied()
                    .chain(g)
                    .collect()
            })
            .collect(),
        ..Sh::replicated(0)
    };
    Some((restore(ls, l), restore(rs, r)))
}

/// Axes XLA groups a dot's devices by: each tiles matching dims alike —
/// a batch dim of both operands and the result, a free dim of one operand
/// and the result (the other operand not tiled by it), or a contracting
/// dim of both operands (the result not tiled by it).
fn grouping_axes(d: &DotDims, ls: &Sh, rs: &Sh, out: &Sh) -> Vec<Axis> {
    let mut axes = Vec::new();
    let nb = d.lb.len();
    for (i, (&l, &r)) in d.lb.iter().zip(d.rb).enumerate() {
        for a in &ls.dims[l] {
            if rs.dims[r].contains(a) && out.dims[i].contains(a) {
                axes.push(*a);
            }
        }
    }
    let free = [(ls, rs, d.lfree, nb), (rs, ls, d.rfree, nb + d.lfree.len())];
    for (s, other, dims, offset) in free {
        for (i, &k) in dims.iter().enumerate() {
            for a in &s.dims[k] {
                if out.dims[offset + i].contains(a) && !other.used().contains(a) {
                    axes.push(*a);
                }
            }
        }
    }
    for (&l, &r) in d.lc.iter().zip(d.rc) {
        for a in &ls.dims[l] {
            if rs.dims[r].contains(a) && !out.used().contains(a) {
                axes.push(*a);
            }
        }
    }
    axes.sort();
    axes.dedup();
    axes
}

/// The (operand dim, update dim) pairs of a scatter's window that every
/// update covers whole and no index addresses: the dims a scatter can pass
/// through tiled.
fn scatter_window_pairs(ins: &Instruction, og: &Shape, ug: &Shape) -> Vec<(usize, usize)> {
    let ints = |n: &str| ins.attr_ints(n).unwrap_or(&[]).to_vec();
    let inserted = ints("inserted_window_dims");
    let to_operand = ints("scatter_dims_to_operand_dims");
    let window = ints("update_window_dims");
    let operand_window = (0..og.rank()).filter(|&k| !inserted.contains(&(k as i64)));
    operand_window
        .zip(window.iter().map(|&u| u as usize))
        .filter(|&(k, u)| ug.dims().get(u) == og.dims().get(k) && !to_operand.contains(&(k as i64)))
        .collect()
}

/// How many transposes and reshapes a tiling asked of a value is carried
/// back through to the value's origin.
const MAX_ORIGIN_STEPS: usize = 8;

/// A shape op between a loop result, scatter or dot and a value computed
/// from it.
#[derive(Clone, Debug)]
enum ShapeStep {
    /// Dimension `k` of the result is dimension `perm[k]` of the operand.
    Transpose(Vec<usize>),
    Reshape {
        from: Vec<i64>,
        to: Vec<i64>,
    },
}

/// The tiling of the origin that `to`, a tiling of the value `steps` lead
/// to, comes from; `None` when a reshape does not carry it back.
fn undone(steps: &[ShapeStep], to: &Sh, mesh: &crate::mesh::Mesh) -> Option<Sh> {
    let mut at = to.without_partial();
    for step in steps.iter().rev() {
        at = match step {
            ShapeStep::Transpose(perm) => {
                let mut before = Sh::replicated(at.rank());
                for (k, &from) in perm.iter().enumerate() {
                    *before.dims.get_mut(from)? = at.dims.get(k)?.clone();
                }
                before
            }
            ShapeStep::Reshape { from, to } => reshape_sharding(to, from, &at, mesh)?,
        };
    }
    Some(at)
}

/// The leading axes of `axes` not in `used`.
fn take_free(axes: &[Axis], used: &[Axis]) -> Vec<Axis> {
    axes.iter()
        .take_while(|a| !used.contains(a))
        .copied()
        .collect()
}

/// The lhs's tiling (of every dim, or with `contracting` false of its batch
/// and free dims), a batch dim's only where even, then the rhs's free dims'
/// where the axes are still free: the axes used and both operand tilings.
fn lhs_then_rhs_free(
    d: &DotDims,
    ls: &Sh,
    rs: &Sh,
    lg: &Shape,
    mesh: &crate::mesh::Mesh,
    contracting: bool,
) -> (Vec<Axis>, Sh, Sh) {
    let even = |axes: &[Axis], g: i64| g % i64::from(mesh.count(axes)) == 0;
    let mut used: Vec<Axis> = Vec::new();
    let mut lcs = Sh::replicated(ls.rank());
    let mut rcs = Sh::replicated(rs.rank());
    for k in (0..ls.rank()).filter(|k| contracting || !d.lc.contains(k)) {
        let mut pick = take_free(&ls.dims[k], &used);
        if !even(&pick, lg.dims()[k]) && d.lb.contains(&k) {
            pick.clear();
        }
        used.extend(&pick);
        lcs.dims[k] = pick;
    }
    for &k in d.rfree {
        let pick = take_free(&rs.dims[k], &used);
        used.extend(&pick);
        rcs.dims[k] = pick;
    }
    (used, lcs, rcs)
}

/// The operand tilings when the lhs (activations, in JAX programs) keeps its
/// tiling on every dim; the rhs keeps its free dims' tiling where the axes
/// are still free, and its batch/contracting tiling only where the lhs had
/// none there.
fn lhs_keeping(d: &DotDims, ls: &Sh, rs: &Sh, lg: &Shape, mesh: &crate::mesh::Mesh) -> (Sh, Sh) {
    let even = |axes: &[Axis], g: i64| g % i64::from(mesh.count(axes)) == 0;
    let (mut used, mut lcs, mut rcs) = lhs_then_rhs_free(d, ls, rs, lg, mesh, true);
    for (l, r) in d.pairs() {
        if lcs.dims[l].is_empty() {
            let pick = take_free(&rs.dims[r], &used);
            if even(&pick, lg.dims()[l]) || d.lc.contains(&l) {
                used.extend(&pick);
                lcs.dims[l] = pick;
            }
        }
        rcs.dims[r] = lcs.dims[l].clone();
    }
    (lcs, rcs)
}

/// The operand tilings for the result XLA's dot propagation infers: the
/// lhs's batch and free dims' tiling, then the rhs's free dims' where the
/// axes are still free. Contracting dims keep the axes both operands tile
/// them by (or, with `keep_lhs_contracting`, the lhs's), which leaves a
/// partial result.
fn merged(
    d: &DotDims,
    ls: &Sh,
    rs: &Sh,
    lg: &Shape,
    mesh: &crate::mesh::Mesh,
    keep_lhs_contracting: bool,
) -> (Sh, Sh) {
    let even = |axes: &[Axis], g: i64| g % i64::from(mesh.count(axes)) == 0;
    let (mut used, mut lcs, mut rcs) = lhs_then_rhs_free(d, ls, rs, lg, mesh, false);
    for (&l, &r) in d.lb.iter().zip(d.rb) {
        if lcs.dims[l].is_empty() {
            let pick = take_free(&rs.dims[r], &used);
            if even(&pick, lg.dims()[l]) {
                used.extend(&pick);
                lcs.dims[l] = pick;
            }
        }
        rcs.dims[r] = lcs.dims[l].clone();
    }
    for (&l, &r) in d.lc.iter().zip(d.rc) {
        let pick = if keep_lhs_contracting {
            take_free(&ls.dims[l], &used)
        } else {
            let common: Vec<Axis> = ls.dims[l]
                .iter()
                .zip(&rs.dims[r])
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| *a)
                .collect();
            take_free(&common, &used)
        };
        used.extend(&pick);
        lcs.dims[l] = pick.clone();
        rcs.dims[r] = pick;
    }
    (lcs, rcs)
}

/// `merged` with the operands' roles swapped: the rhs's free dims keep their
/// tiling first (the cheaper side to gather when both tile their free dims
/// by the same axes).
fn rhs_first(
    d: &DotDims,
    ls: &Sh,
    rs: &Sh,
    rg: &Shape,
    mesh: &crate::mesh::Mesh,
    keep_rhs_contracting: bool,
) -> (Sh, Sh) {
    let swapped = DotDims {
        lb: d.rb,
        rb: d.lb,
        lc: d.rc,
        rc: d.lc,
        lfree: d.rfree,
        rfree: d.lfree,
    };
    let (r, l) = merged(&swapped, rs, ls, rg, mesh, keep_rhs_contracting);
    (l, r)
}

/// The result tiling of a dot whose operands are tiled `lcs` and `rcs`
/// (batch dims, lhs free dims, rhs free dims; partial over the contracting
/// dims' axes).
fn dot_result(d: &DotDims, lcs: &Sh, rcs: &Sh, rank: usize) -> Sh {
    let mut out = Sh::replicated(rank);
    let dims =
        d.lb.iter()
            .chain(d.lfree)
            .map(|&k| &lcs.dims[k])
            .chain(d.rfree.iter().map(|&k| &rcs.dims[k]));
    for (slot, axes) in out.dims.iter_mut().zip(dims) {
        *slot = axes.clone();
    }
    out.partial = d.lc.iter().flat_map(|&k| lcs.dims[k].clone()).collect();
    out
}

/// Bytes per device a reshard from `from` to `to` receives over the network
/// (a first-order estimate: data of axes that leave their dim must be
/// gathered or exchanged; slicing is free). Tile counts that trade places
/// move by all-to-alls (each sends all but its own share) and a
/// collective-permute (the whole shard), as `Out::reshard` does it.
fn reshard_bytes(mesh: &crate::mesh::Mesh, g: &[i64], elem: f64, from: &Sh, to: &Sh) -> f64 {
    if from.partial.is_empty() {
        if let Some(moves) = crate::build::swap_plan(mesh, g, from, to) {
            let local: f64 = from.local_dims(mesh, g).iter().map(|&x| x as f64).product();
            let mut after = from.clone();
            let swapped: f64 = moves
                .iter()
                .map(|(src, dst, moving)| {
                    let keep = after.dims[*src].len() - moving.len();
                    after.dims[*src].truncate(keep);
                    after.dims[*dst].extend(moving);
                    local * elem * (1.0 - 1.0 / f64::from(mesh.count(moving)))
                })
                .sum();
            let permuted = if after == *to { 0.0 } else { local * elem };
            return swapped + permuted;
        }
    }
    let moved: Vec<Axis> = from
        .dims
        .iter()
        .zip(&to.dims)
        .flat_map(|(f, t)| f.iter().filter(|a| !t.contains(a)).copied())
        .collect();
    let m = f64::from(mesh.count(&moved));
    if m <= 1.0 {
        return 0.0;
    }
    let local: f64 = to.local_dims(mesh, g).iter().map(|&x| x as f64).product();
    local * elem * (1.0 - 1.0 / m)
}

/// Bytes per device reducing a partial result moves (an all-reduce: twice
/// the local data).
fn partial_bytes(mesh: &crate::mesh::Mesh, g: &[i64], elem: f64, out: &Sh) -> f64 {
    let p = f64::from(mesh.count(&out.partial));
    if p <= 1.0 {
        return 0.0;
    }
    let local: f64 = out.local_dims(mesh, g).iter().map(|&x| x as f64).product();
    2.0 * local * elem * (1.0 - 1.0 / p)
}

/// Bytes per device taking a partial result `out` to the tiling `to`, as
/// `Out::reshard` does it: a reduce-scatter into the dim
/// [`scatter_target`] picks, an all-reduce of the shard over the other
/// partial axes, then the reshard of what differs (a whole all-reduce when
/// no dim takes partial axes).
fn reduce_into_bytes(mesh: &crate::mesh::Mesh, g: &[i64], elem: f64, out: &Sh, to: &Sh) -> f64 {
    let mut after = out.without_partial();
    let Some((d, scattered)) = scatter_target(mesh, g, &after, &out.partial, to) else {
        return partial_bytes(mesh, g, elem, out) + reshard_bytes(mesh, g, elem, &after, to);
    };
    after.dims[d].extend(&scattered);
    let local: f64 = out.local_dims(mesh, g).iter().map(|&x| x as f64).product();
    let ps = f64::from(mesh.count(&scattered));
    let pr = f64::from(mesh.count(&without(&out.partial, &scattered)));
    local * elem * (1.0 - 1.0 / ps)
        + 2.0 * local / ps * elem * (1.0 - 1.0 / pr)
        + reshard_bytes(mesh, g, elem, &after, to)
}

/// A reshape's dim groups: the shortest runs of input and output dims with
/// equal products, in order (size-1 dims joined to a neighbouring group).
pub(crate) fn reshape_groups(g_in: &[i64], g_out: &[i64]) -> Vec<(Range<usize>, Range<usize>)> {
    let mut groups = Vec::new();
    let (mut i, mut j) = (0usize, 0usize);
    while i < g_in.len() || j < g_out.len() {
        let (i0, j0) = (i, j);
        let (mut pi, mut pj) = (1i64, 1i64);
        loop {
            if pi == pj
                && (i > i0 || j > j0)
                && (pi != 1
                    || (i >= g_in.len() || g_in[i] != 1) && (j >= g_out.len() || g_out[j] != 1))
            {
                break;
            }
            if pi <= pj && i < g_in.len() {
                pi = pi.saturating_mul(g_in[i]);
                i += 1;
            } else if j < g_out.len() {
                pj = pj.saturating_mul(g_out[j]);
                j += 1;
            } else if i < g_in.len() {
                pi = pi.saturating_mul(g_in[i]);
                i += 1;
            } else {
                break;
            }
        }
        groups.push((i0..i, j0..j));
    }
    groups
}

/// Reshape's output sharding for operand sharding `s`, when every tiled input
/// dim maps onto an output dim it stays the major part of; `None` otherwise.
fn reshape_sharding(g_in: &[i64], g_out: &[i64], s: &Sh, mesh: &crate::mesh::Mesh) -> Option<Sh> {
    let mut out = Sh::replicated(g_out.len());
    for (ins, outs) in reshape_groups(g_in, g_out) {
        let sharded: Vec<usize> = ins.clone().filter(|&d| !s.dims[d].is_empty()).collect();
        match sharded.as_slice() {
            [] => {}
            [d] => {
                let major_in = ins.clone().find(|&k| g_in[k] != 1)?;
                let major_out = outs.clone().find(|&k| g_out[k] != 1)?;
                let t = i64::from(mesh.count(&s.dims[*d]));
                let one_to_one = ins.len() == 1 && outs.len() == 1;
                if *d != major_in || !(one_to_one || g_out[major_out] % t == 0 && g_in[*d] % t == 0)
                {
                    return None;
                }
                out.dims[major_out] = s.dims[*d].clone();
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Attributes of a copied instruction without the Shardy frontend attributes
/// (which mark a module as unpartitioned).
pub fn clean_attrs(attrs: &[tpusim_hlo::Attr]) -> Vec<tpusim_hlo::Attr> {
    attrs
        .iter()
        .filter(|a| {
            !(a.name == "frontend_attributes"
                && matches!(&a.value, AttrValue::FrontendAttrs(kv) if kv.iter().all(|(k, _)| k.starts_with("xla.sdy"))))
        })
        .cloned()
        .collect()
}

pub fn sharding_text(s: &SingleSharding) -> String {
    let m = tpusim_hlo::parse_module("HloModule s\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n");
    match m {
        Ok(m) => {
            let mut out = String::new();
            tpusim_hlo::printer::write_attr_value(
                &mut out,
                &m,
                &AttrValue::Sharding(Box::new(Sharding::Single(s.clone()))),
            );
            out
        }
        Err(_) => format!("{s:?}"),
    }
}

impl Partitioner<'_> {
    /// The global-side shardings of a shard_map's exit (`LocalToGlobalShape`:
    /// its `out_shardings`), for a propagation pass that runs before the
    /// partitioning walk.
    pub(crate) fn exit_shardings(&self, ins: &Instruction) -> Result<Vec<Sh>, SpmdError> {
        let manual = self.manual_axes(ins)?;
        let ranks: Vec<usize> = leaves_of(&ins.shape).iter().map(|l| l.rank()).collect();
        self.sdy_shardings(ins, "xla.sdy.out_shardings", &manual, &ranks)
    }

    /// Sharding of `values` of a Shardy per-value attribute over manual axes.
    /// The shardings of `key` (one per value), each checked against the rank
    /// of the value it describes (`ranks`): resharding indexes both by dim.
    fn sdy_shardings(
        &self,
        ins: &Instruction,
        key: &str,
        manual: &[String],
        ranks: &[usize],
    ) -> Result<Vec<Sh>, SpmdError> {
        let text = tpusim_hlo::sdy::frontend_attr(ins, key)
            .ok_or_else(|| self.unsupported(ins, format!("no {key}")))?;
        let values =
            tpusim_hlo::sdy::parse_per_value(text).map_err(|e| self.unsupported(ins, e))?;
        let have: Vec<usize> = values.iter().map(Vec::len).collect();
        if have != ranks {
            return Err(SpmdError::BadSharding {
                instr: ins.name.clone(),
                sharding: text.to_string(),
                why: format!(
                    "{key} gives shardings of ranks {have:?} for values of ranks {ranks:?}"
                ),
            });
        }
        values
            .iter()
            .map(|dims| {
                let mut sh = Sh::replicated(dims.len());
                for (d, axes) in dims.iter().enumerate() {
                    for r in axes {
                        if !manual.contains(&r.name) {
                            return Err(self.unsupported(
                                ins,
                                format!(
                                    "sharding {text} tiles a dim by the free axis '{}' of a partially manual region",
                                    r.name
                                ),
                            ));
                        }
                        let f = self.out.mesh.named_axes(&r.name, r.sub).ok_or_else(|| {
                            SpmdError::UnknownAxis {
                                instr: ins.name.clone(),
                                axis: r.name.clone(),
                                sharding: text.to_string(),
                                mesh: format!("{:?}", self.out.mesh.named),
                            }
                        })?;
                        sh.dims[d].extend(f);
                    }
                }
                Ok(sh)
            })
            .collect()
    }

    /// The factor axes of the named mesh axes `names`.
    fn factor_axes(&self, names: &[String]) -> Vec<Axis> {
        names
            .iter()
            .filter_map(|n| self.out.mesh.named_axes(n, None))
            .flatten()
            .collect()
    }

    /// The free (not manual) axes of `current` that can keep tiling a value
    /// entering a manual region as `manual` (its in_sharding): per dim, those
    /// after the manual ones, not used elsewhere, dividing the dim evenly.
    fn free_tiling(&self, current: &Sh, manual: &Sh, g: &Shape, manual_axes: &[Axis]) -> Sh {
        let mut free = Sh::replicated(g.rank());
        if current.rank() != g.rank() || manual.rank() != g.rank() {
            return free;
        }
        let mut used: Vec<Axis> = manual.used();
        used.extend(manual_axes);
        for d in 0..g.rank() {
            let axes: Vec<Axis> = current.dims[d]
                .iter()
                .copied()
                .filter(|a| !used.contains(a))
                .collect();
            let mut all = manual.dims[d].clone();
            all.extend(&axes);
            if !axes.is_empty() && g.dims()[d] % i64::from(self.out.mesh.count(&all)) == 0 {
                used.extend(&axes);
                free.dims[d] = axes;
            }
        }
        free
    }

    /// Inside a manual region, what a `Sharding` constraint asks with its
    /// Shardy form: the free axes it names, an open dim (`?`) left as it is,
    /// a closed empty dim whole. `None` without a Shardy form.
    fn manual_constraint(&self, ins: &Instruction, current: &Sh) -> Option<Sh> {
        let text = tpusim_hlo::sdy::frontend_attr(ins, "xla.sdy.sharding")?;
        let body = &text[text.find('@')?..];
        let dims_text = &body[body.find('[')? + 1..body.find(']')?];
        let mut out = Sh::replicated(current.rank());
        let mut d = 0;
        let mut rest = dims_text;
        while let Some(o) = rest.find('{') {
            let c = rest[o..].find('}')? + o;
            let inner: Vec<&str> = rest[o + 1..c].split(',').map(str::trim).collect();
            let open = inner.contains(&"?");
            let mut axes = Vec::new();
            for a in inner.iter().filter(|a| !a.is_empty() && **a != "?") {
                let name = a.trim_matches('\\').trim_matches('"');
                axes.extend(self.out.mesh.named_axes(name, None)?);
            }
            if d >= out.rank() {
                return None;
            }
            out.dims[d] = if axes.is_empty() && open {
                current.dims[d].clone()
            } else {
                axes
            };
            d += 1;
            rest = &rest[c + 1..];
        }
        (d == out.rank()).then_some(out)
    }

    fn manual_axes(&self, ins: &Instruction) -> Result<Vec<String>, SpmdError> {
        let text = tpusim_hlo::sdy::frontend_attr(ins, "xla.sdy.manual_axes")
            .ok_or_else(|| self.unsupported(ins, "no xla.sdy.manual_axes"))?;
        Ok(tpusim_hlo::sdy::parse_manual_axes(text))
    }

    /// Checks that a local value has the per-device dims `sh` gives `global`.
    fn check_local(
        &self,
        ins: &Instruction,
        id: InstrId,
        global: &Shape,
        sh: &Sh,
    ) -> Result<(), SpmdError> {
        let want = sh.local_dims(&self.out.mesh, global.dims());
        let have = self.out.dims(id);
        if want != have
            || global
                .dims()
                .iter()
                .zip(&want)
                .enumerate()
                .any(|(d, (g, w))| w * i64::from(sh.tiles(&self.out.mesh, d)) != *g)
        {
            return Err(SpmdError::BadSharding {
                instr: ins.name.clone(),
                sharding: format!("{sh:?}"),
                why: format!(
                    "its shards {have:?} do not tile the global dims {:?} evenly",
                    global.dims()
                ),
            });
        }
        Ok(())
    }

    fn global_to_local(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let manual = self.manual_axes(ins)?;
        if let Some(outer) = self.manual.iter().flatten().find(|a| manual.contains(a)) {
            return Err(SpmdError::ConflictingManual {
                instr: ins.name.clone(),
                why: format!("axis '{outer}' is already manual in an enclosing shard_map region"),
            });
        }
        let ranks: Vec<usize> = ins
            .operands
            .iter()
            .map(|&o| self.src.instr(o).shape.rank())
            .collect();
        let shs = self.sdy_shardings(ins, "xla.sdy.in_shardings", &manual, &ranks)?;
        if shs.len() != ops.len() {
            return Err(self.unsupported(ins, "in_shardings do not match the operands"));
        }
        let manual_factors = self.factor_axes(&manual);
        let mut ids = Vec::new();
        let mut inside = Vec::new();
        for (k, (o, sh)) in ops.iter().zip(&shs).enumerate() {
            let g = &self.src.instr(ins.operands[k]).shape;
            // The free axes tiling the operand keep tiling it inside the
            // region (minor to the manual ones): a partially manual body is
            // partitioned along them, as XLA partitions it.
            let free =
                o.sh.first()
                    .map(|s| self.free_tiling(s, sh, g, &manual_factors))
                    .unwrap_or_else(|| Sh::replicated(g.rank()));
            let mut full = sh.clone();
            for (d, axes) in free.dims.iter().enumerate() {
                full.dims[d].extend(axes);
            }
            let x = self.arr(cb, o, g, &full)?;
            self.check_local(ins, x, g, &full)?;
            ids.push(x);
            inside.push(free);
        }
        self.manual.push(manual);
        let sh = inside;
        if ins.shape.is_tuple() {
            let shape = Shape::Tuple(ids.iter().map(|&i| self.out.shape(i).clone()).collect());
            let id = self
                .out
                .emit(cb, "tuple", Opcode::Tuple, shape, ids, vec![]);
            return Ok(Val { id, sh });
        }
        Ok(Val { id: ids[0], sh })
    }

    fn local_to_global(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
    ) -> Result<Val, SpmdError> {
        let manual = self.manual_axes(ins)?;
        match self.manual.last() {
            Some(m) if *m == manual => {
                self.manual.pop();
            }
            _ => {
                return Err(SpmdError::ConflictingManual {
                    instr: ins.name.clone(),
                    why: format!("it leaves a region manual over {manual:?}, which is not the innermost one entered"),
                })
            }
        }
        let leaves = leaves_of(&ins.shape);
        let ranks: Vec<usize> = leaves.iter().map(|l| l.rank()).collect();
        let shs = self.sdy_shardings(ins, "xla.sdy.out_shardings", &manual, &ranks)?;
        if shs.len() != ops.len() || leaves.len() != ops.len() {
            return Err(self.unsupported(ins, "out_shardings do not match the operands"));
        }
        let ranks_match = ins
            .operands
            .iter()
            .zip(&leaves)
            .all(|(&o, l)| self.src.instr(o).shape.rank() == l.rank());
        if !ranks_match {
            return Err(self.unsupported(ins, "an operand's rank differs from its result's"));
        }
        let mut ids = Vec::new();
        let mut outside = Vec::new();
        for (k, (o, sh)) in ops.iter().zip(&shs).enumerate() {
            let g = &self.src.instr(ins.operands[k]).shape;
            // Free axes still tiling a result leave the region with it, minor
            // to the manual ones (when the whole dim divides evenly).
            let body =
                o.sh.first()
                    .map(Sh::without_partial)
                    .unwrap_or_else(|| Sh::replicated(g.rank()));
            let mut kept = Sh::replicated(g.rank());
            let mut full = sh.clone();
            for d in 0..g.rank().min(body.rank()) {
                let mut axes = sh.dims[d].clone();
                axes.extend(&body.dims[d]);
                let whole = leaves[k].dims().get(d).copied().unwrap_or(0);
                if whole % i64::from(self.out.mesh.count(&axes)) == 0 {
                    kept.dims[d] = body.dims[d].clone();
                    full.dims[d] = axes;
                }
            }
            let x = self.arr(cb, o, g, &kept)?;
            self.check_local(ins, x, &leaves[k], &full)?;
            ids.push(x);
            outside.push(full);
        }
        if ins.shape.is_tuple() {
            let shape = Shape::Tuple(ids.iter().map(|&i| self.out.shape(i).clone()).collect());
            let id = self
                .out
                .emit(cb, "tuple", Opcode::Tuple, shape, ids, vec![]);
            return Ok(Val { id, sh: outside });
        }
        Ok(Val {
            id: ids[0],
            sh: outside,
        })
    }
}

impl Partitioner<'_> {
    /// Scatter-add with indices tiled along their batch dims (an embedding
    /// gradient): every device scatters its updates into zeros, the partial
    /// results are all-reduced and added to the (replicated) operand, as XLA's
    /// index-parallel strategy does. Other scatters run replicated.
    fn scatter(&mut self, cb: &mut CompB, i: InstrId, ops: &[Val]) -> Result<Val, SpmdError> {
        let src = self.src;
        let ins = src.instr(i);
        // The tiling the ops after this scatter asked of its result in an
        // earlier round (XLA propagates it backward into the scatter).
        let hint = self.loop_hints.get(&(i, 0)).cloned();
        let is_add = ops.len() == 3
            && ins.attr_comp("to_apply").is_some_and(|c| {
                let c = src.comp(c);
                src.instr(c.root).opcode == Opcode::Add && c.params.len() == 2
            });
        let ig = src.instr(ins.operands[1]).shape.clone();
        let ug = src.instr(ins.operands[2]).shape.clone();
        let og = src.instr(ins.operands[0]).shape.clone();
        let ivd = ins.attr_int("index_vector_dim").unwrap_or(ig.rank() as i64) as usize;
        let window: Vec<usize> = ins
            .attr_ints("update_window_dims")
            .unwrap_or(&[])
            .iter()
            .map(|&d| d as usize)
            .collect();
        let has_batching = ins
            .attr_ints("input_batching_dims")
            .is_some_and(|d| !d.is_empty());
        let mut idx_sh = ops[1].sh[0].without_partial();
        if let Some(d) = idx_sh.dims.get_mut(ivd) {
            d.clear();
        }
        if has_batching && ops.len() == 3 {
            return self.scatter_batched(cb, ins, ops, idx_sh, ivd, &window, hint.as_ref());
        }
        if let Some((d, axes)) = self.row_update(ins, &og, &ig, ops, &idx_sh, hint.as_ref()) {
            return self.scatter_into_rows(cb, ins, ops, idx_sh, (d, axes), is_add);
        }
        if ops.len() == 3 {
            if let Some(v) = self.scatter_toward_given(cb, ins, ops, (&og, &ig, &ug), is_add)? {
                return Ok(v);
            }
        }
        if !is_add || has_batching || idx_sh.used().is_empty() || og.as_array().is_none() {
            return self.replicated_fallback(cb, ins, ops);
        }
        let batch_in: Vec<usize> = (0..ig.rank()).filter(|&d| d != ivd).collect();
        let scatter_dims: Vec<usize> = (0..ug.rank()).filter(|d| !window.contains(d)).collect();
        let mut upd_sh = Sh::replicated(ug.rank());
        for (&u, &i) in scatter_dims.iter().zip(&batch_in) {
            upd_sh.dims[u] = idx_sh.dims[i].clone();
        }
        let partial = idx_sh.used();
        // Operand dims every update covers whole keep their tiling (with the
        // updates' matching window dims), as XLA passes them through.
        let op_sh = self.scatter_passthrough(
            ins,
            (&og, &ug),
            (&ops[0].sh[0], &ops[2].sh[0]),
            &partial,
            &mut upd_sh,
        );
        let operand = self.arr(cb, &ops[0], &og, &op_sh)?;
        let idx = self.arr(cb, &ops[1], &ig, &idx_sh)?;
        let upd = self.arr(cb, &ops[2], &ug, &upd_sh)?;
        Ok(self.scatter_summed(cb, ins, [operand, idx, upd], &partial, op_sh))
    }

    /// A scatter whose own sharding is given (XLA's propagated form) and
    /// tiles only operand dims every update window covers whole: each device
    /// scatters the updates' columns of its own part (the updates resharded
    /// to match), as XLA passes such dims through; the indices stay tiled
    /// by the axes left free, gathered along the others. `None` when the
    /// sharding is not of that kind.
    fn scatter_toward_given(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
        (og, ig, ug): (&Shape, &Shape, &Shape),
        is_add: bool,
    ) -> Result<Option<Val>, SpmdError> {
        let Some(out) = self.annotation(ins)?.and_then(|mut s| s.pop()) else {
            return Ok(None);
        };
        if out.is_replicated() || out.rank() != og.rank() {
            return Ok(None);
        }
        let mut upd_sh = Sh::replicated(ug.rank());
        let mut covered = vec![false; og.rank()];
        for (k, u) in scatter_window_pairs(ins, og, ug) {
            upd_sh.dims[u] = out.dims[k].clone();
            covered[k] = true;
        }
        let window = ins.attr_ints("update_window_dims").unwrap_or(&[]).to_vec();
        // Other dims the sharding tiles are computed whole and sliced after
        // (each device's rows of the result, no communication).
        let mut out = out;
        for (k, axes) in out.dims.iter_mut().enumerate() {
            if !covered[k] {
                axes.clear();
            }
        }
        if out.is_replicated() {
            return Ok(None);
        }
        // The indices keep their tiling by axes the sharding leaves free:
        // each device then holds partial sums over those (an add-scatter).
        let ivd = ins.attr_int("index_vector_dim").unwrap_or(ig.rank() as i64) as usize;
        let mut idx_sh = ops[1].sh[0].without_partial();
        let taken = out.used();
        for (d, axes) in idx_sh.dims.iter_mut().enumerate() {
            *axes = if d == ivd {
                Vec::new()
            } else {
                take_free(axes, &taken)
            };
        }
        let partial = idx_sh.used();
        if !partial.is_empty() && !is_add {
            return Ok(None);
        }
        let batch_in = (0..ig.rank()).filter(|&d| d != ivd);
        let scatter_dims = (0..ug.rank()).filter(|&d| !window.contains(&(d as i64)));
        for (u, i) in scatter_dims.zip(batch_in) {
            upd_sh.dims[u] = idx_sh.dims[i].clone();
        }
        let operand = self.arr(cb, &ops[0], og, &out)?;
        let idx = self.arr(cb, &ops[1], ig, &idx_sh)?;
        let upd = self.arr(cb, &ops[2], ug, &upd_sh)?;
        if !partial.is_empty() {
            return Ok(Some(self.scatter_summed(
                cb,
                ins,
                [operand, idx, upd],
                &partial,
                out,
            )));
        }
        let shape = self.out.shape(operand).clone();
        let id = self.copy_as(cb, ins, shape, vec![operand, idx, upd], ins.attrs.clone());
        Ok(Some(Val { id, sh: vec![out] }))
    }

    /// An add-scatter of updates spread over devices along `partial`: each
    /// device scatters its updates into zeros, the results are all-reduced
    /// and added to the operand (`ops`: operand, indices, updates, local).
    fn scatter_summed(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        [operand, idx, upd]: [InstrId; 3],
        partial: &[Axis],
        op_sh: Sh,
    ) -> Val {
        let shape = self.out.shape(operand).clone();
        let ty = self.out.ty(operand);
        let zero = self.out.zero(cb, ty);
        let zeros = self.out.splat(cb, zero, ty, shape.dims());
        let local = self.copy_as(
            cb,
            ins,
            shape.clone(),
            vec![zeros, idx, upd],
            ins.attrs.clone(),
        );
        let summed = self
            .out
            .all_reduce(cb, local, partial, ins.attr_comp("to_apply"));
        let id = self
            .out
            .emit(cb, "add", Opcode::Add, shape, vec![operand, summed], vec![]);
        Val {
            id,
            sh: vec![op_sh],
        }
    }

    /// The operand tiling an index-parallel scatter keeps: the tiling of the
    /// dims each update window covers whole (the operand's own, else the
    /// updates'; by axes the indices do not use), on operand and updates.
    fn scatter_passthrough(
        &self,
        ins: &Instruction,
        (og, ug): (&Shape, &Shape),
        (os, us): (&Sh, &Sh),
        used: &[Axis],
        upd_sh: &mut Sh,
    ) -> Sh {
        let mut op_sh = Sh::replicated(og.rank());
        for (k, u) in scatter_window_pairs(ins, og, ug) {
            let mut axes = os.dims.get(k).cloned().unwrap_or_default();
            if axes.is_empty() {
                axes = us.dims.get(u).cloned().unwrap_or_default();
            }
            let even = og.dims()[k] % i64::from(self.out.mesh.count(&axes)) == 0;
            let free = axes
                .iter()
                .all(|a| !used.contains(a) && !op_sh.used().contains(a));
            if even && free {
                op_sh.dims[k] = axes.clone();
                upd_sh.dims[u] = axes;
            }
        }
        op_sh
    }
}

impl Partitioner<'_> {
    /// The operand dim of a scatter that can stay tiled by the axes returned:
    /// one operand updated row by row (an inserted window dim) through the
    /// only component of `s32` indices, tiled evenly by axes the indices do
    /// not use.
    fn row_update(
        &self,
        ins: &Instruction,
        og: &Shape,
        ig: &Shape,
        ops: &[Val],
        idx_sh: &Sh,
        hint: Option<&Sh>,
    ) -> Option<(usize, Vec<Axis>)> {
        let ints = |n: &str| ins.attr_ints(n).unwrap_or(&[]).to_vec();
        let [d] = ints("scatter_dims_to_operand_dims")[..] else {
            return None;
        };
        let d = usize::try_from(d).ok()?;
        let ivd = usize::try_from(ins.attr_int("index_vector_dim")?).ok()?;
        let one_component = ivd == ig.rank() || ig.dims().get(ivd) == Some(&1);
        let mut axes = ops.first()?.sh.first()?.dims.get(d)?.clone();
        if axes.is_empty() {
            // Untiled rows take the tiling asked of the result.
            axes = hint
                .and_then(|h| h.dims.get(d))
                .cloned()
                .unwrap_or_default();
        }
        let rows = *og.dims().get(d)?;
        let used = idx_sh.used();
        let fits = ops.len() == 3
            && one_component
            && ig
                .as_array()
                .is_some_and(|a| a.ty == tpusim_hlo::PrimitiveType::S32)
            && ints("inserted_window_dims").contains(&(d as i64))
            && !ints("input_batching_dims").contains(&(d as i64))
            && !axes.is_empty()
            && axes.iter().all(|a| !used.contains(a))
            && rows % i64::from(self.out.mesh.count(&axes)) == 0;
        fits.then_some((d, axes))
    }

    /// A scatter into rows the operand tiles (an embedding's gradient), as
    /// XLA partitions it: each device applies the updates that land in its
    /// own rows (indices made shard-relative; a scatter skips the others).
    /// Updates spread over devices by the indices' tiling are combined first
    /// (scattered into zeros, summed, then added: `add` scatters only).
    fn scatter_into_rows(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
        idx_sh: Sh,
        (d, axes): (usize, Vec<Axis>),
        is_add: bool,
    ) -> Result<Val, SpmdError> {
        let src = self.src;
        let og = src.instr(ins.operands[0]).shape.clone();
        let ig = src.instr(ins.operands[1]).shape.clone();
        let ug = src.instr(ins.operands[2]).shape.clone();
        let partial = idx_sh.used();
        if !partial.is_empty() && !is_add {
            return self.replicated_fallback(cb, ins, ops);
        }
        let ivd = ins.attr_int("index_vector_dim").unwrap_or(ig.rank() as i64) as usize;
        let window: Vec<usize> = (ins.attr_ints("update_window_dims").unwrap_or(&[]).iter())
            .map(|&w| w as usize)
            .collect();
        let batch_in: Vec<usize> = (0..ig.rank()).filter(|&k| k != ivd).collect();
        let scatter_dims: Vec<usize> = (0..ug.rank()).filter(|k| !window.contains(k)).collect();
        let mut upd_sh = Sh::replicated(ug.rank());
        for (&u, &i) in scatter_dims.iter().zip(&batch_in) {
            upd_sh.dims[u] = idx_sh.dims[i].clone();
        }
        let mut op_sh = Sh::replicated(og.rank());
        op_sh.dims[d] = axes.clone();
        let local = op_sh.local_dims(&self.out.mesh, og.dims());
        let operand = self.arr(cb, &ops[0], &og, &op_sh)?;
        let idx = self.arr(cb, &ops[1], &ig, &idx_sh)?;
        let upd = self.arr(cb, &ops[2], &ug, &upd_sh)?;
        let rel = self.out.shard_relative(cb, idx, (&axes, local[d]));
        let shape = self.out.shape(operand).clone();
        if partial.is_empty() {
            let id = self.copy_as(cb, ins, shape, vec![operand, rel, upd], ins.attrs.clone());
            return Ok(Val {
                id,
                sh: vec![op_sh],
            });
        }
        Ok(self.scatter_summed(cb, ins, [operand, rel, upd], &partial, op_sh))
    }

    /// Scatter with batching dims (the gradient of take_along_axis): operand
    /// and updates are tiled like the indices' batching dims, so every device
    /// scatters into its own slice, with no communication (as XLA does).
    #[allow(clippy::too_many_arguments)]
    fn scatter_batched(
        &mut self,
        cb: &mut CompB,
        ins: &Instruction,
        ops: &[Val],
        mut idx_sh: Sh,
        ivd: usize,
        window: &[usize],
        hint: Option<&Sh>,
    ) -> Result<Val, SpmdError> {
        let src = self.src;
        let og = src.instr(ins.operands[0]).shape.clone();
        let ig = src.instr(ins.operands[1]).shape.clone();
        let ug = src.instr(ins.operands[2]).shape.clone();
        let ints = |n: &str| -> Vec<usize> {
            ins.attr_ints(n)
                .unwrap_or(&[])
                .iter()
                .map(|&d| d as usize)
                .collect()
        };
        let op_batch = ints("input_batching_dims");
        let idx_batch = ints("scatter_indices_batching_dims");
        for d in 0..idx_sh.rank() {
            if !idx_batch.contains(&d) {
                idx_sh.dims[d].clear();
            }
        }
        let mut op_sh = Sh::replicated(og.rank());
        for (k, &d) in idx_batch.iter().enumerate() {
            if let (Some(&o), Some(axes)) = (op_batch.get(k), idx_sh.dims.get(d)) {
                op_sh.dims[o] = axes.clone();
            }
        }
        let batch_in: Vec<usize> = (0..ig.rank()).filter(|&d| d != ivd).collect();
        let scatter_dims: Vec<usize> = (0..ug.rank()).filter(|d| !window.contains(d)).collect();
        let mut upd_sh = Sh::replicated(ug.rank());
        for (&u, &i) in scatter_dims.iter().zip(&batch_in) {
            upd_sh.dims[u] = idx_sh.dims[i].clone();
        }
        // Rows tiled (or asked tiled) by other axes stay tiled
        // (take_along_axis's gradient into vocab-tiled logits): each device
        // applies the updates that land in its rows.
        let rows = self
            .row_update(ins, &og, &ig, ops, &idx_sh, hint)
            .filter(|(_, axes)| axes.iter().all(|a| !op_sh.used().contains(a)));
        if let Some((d, axes)) = &rows {
            op_sh.dims[*d] = axes.clone();
        }
        let x = self.arr(cb, &ops[0], &og, &op_sh)?;
        let mut y = self.arr(cb, &ops[1], &ig, &idx_sh)?;
        if let Some((d, axes)) = &rows {
            let local = op_sh.local_dims(&self.out.mesh, og.dims())[*d];
            y = self.out.shard_relative(cb, y, (axes, local));
        }
        let z = self.arr(cb, &ops[2], &ug, &upd_sh)?;
        self.local_op(cb, ins, vec![x, y, z], op_sh, ins.attrs.clone())
    }
}

/// The one dim `sh` tiles, when it tiles exactly one.
fn only_tiled_dim(sh: &Sh) -> Option<usize> {
    let mut tiled = (0..sh.rank()).filter(|&d| !sh.dims[d].is_empty());
    let d = tiled.next()?;
    tiled.next().is_none().then_some(d)
}

/// `sh` with the tiles of `dim` moved onto the first other dim whose
/// rows divide among its tiles and them (XLA's
/// GetFirstTargetDimToMoveShardingTiles and MoveAndMergeShardingTiles);
/// `None` when `dim` is not tiled or no dim can take its tiles.
fn tiles_moved_off(mesh: &crate::mesh::Mesh, dims: &[i64], sh: &Sh, dim: usize) -> Option<Sh> {
    let moved = i64::from(sh.tiles(mesh, dim));
    if moved < 2 {
        return None;
    }
    let target = (0..dims.len())
        .filter(|&t| t != dim)
        .find(|&t| dims[t] % (moved * i64::from(sh.tiles(mesh, t))) == 0)?;
    let mut temp = sh.clone();
    let axes = std::mem::take(&mut temp.dims[dim]);
    temp.dims[target].extend(axes);
    Some(temp)
}

/// Per dim of a static slice or a pad: (low, high, stride, interior) of the
/// window of one row XLA reads it as (a slice's start and end cut rows:
/// negative padding).
fn slice_or_pad_windows(ins: &Instruction, base: &[i64]) -> Option<Vec<(i64, i64, i64, i64)>> {
    let windows: Vec<(i64, i64, i64, i64)> =
        match (ins.opcode, ins.attr("slice"), ins.attr("padding")) {
            (Opcode::Slice, Some(AttrValue::Slice(sl)), _) => sl
                .iter()
                .zip(base)
                .map(|(s, &n)| (-s.start, s.limit - n, s.stride, 0))
                .collect(),
            (Opcode::Pad, _, Some(AttrValue::Padding(pads))) => pads
                .iter()
                .map(|p| (p.low, p.high, 1, p.interior))
                .collect(),
            _ => return None,
        };
    (windows.len() == base.len()).then_some(windows)
}

/// Whether `ins` is a constant whose every element is zero.
fn is_zero_constant(ins: &Instruction) -> bool {
    ins.opcode == Opcode::Constant
        && ins
            .literal
            .as_ref()
            .is_some_and(tpusim_hlo::literal::Literal::is_all_zero)
}

/// A slice or pad read as windows of one row: its operand, the operand's
/// global shape, (low, high, stride, interior) per dim, and the padding value
/// (partitioned, and whether it is a literal zero; a slice has none).
struct Windowed {
    operand: Val,
    global: Shape,
    windows: Vec<(i64, i64, i64, i64)>,
    fill: Option<(InstrId, bool)>,
}
