//! Emitting instructions into the partitioned module, and the collectives and
//! resharding steps built from them.

use crate::halo::{CompactPlan, Exchange, HaloPlan, Piece, Take, Trim, WindowPlan};
use crate::mesh::{ceil_div, Axis, Mesh, Sh};
use crate::SpmdError;
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use tpusim_hlo::attr::{PadDim, ReplicaGroups, SliceDim};
use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{Attr, AttrValue, CompId, Computation, InstrId, Instruction, Module, Opcode};
use tpusim_hlo::{PrimitiveType, Shape};

/// The module being built: a copy of the source module's arenas with the
/// partitioned computations appended.
pub struct Out {
    pub m: Module,
    pub mesh: Mesh,
    taken: FxHashSet<String>,
    next_channel: i64,
    adders: FxHashMap<PrimitiveType, CompId>,
    /// Reshards already emitted, by (value, from, to): a value several users
    /// need on the same tiling is exchanged once (XLA's partitioner keeps the
    /// same cache per partitioned value).
    resharded: FxHashMap<(InstrId, Sh, Sh), InstrId>,
}

/// A computation under construction.
pub struct CompB {
    pub comp: CompId,
    pub instrs: Vec<InstrId>,
    pid: Option<InstrId>,
    zero: Option<InstrId>,
}

pub fn attr(name: &'static str, value: AttrValue) -> Attr {
    Attr {
        name: Cow::Borrowed(name),
        value,
    }
}

pub use tpusim_hlo::attr::set_attr;

fn zero_literal(ty: PrimitiveType) -> Literal {
    Literal::Array(if ty == PrimitiveType::Pred {
        LiteralData::Pred(vec![false])
    } else if ty.is_float() {
        LiteralData::Float(vec![0.0])
    } else if ty.is_complex() {
        LiteralData::Complex(vec![(0.0, 0.0)])
    } else {
        LiteralData::Int(vec![0])
    })
}

impl Out {
    pub fn new(src: &Module, mesh: Mesh) -> Out {
        Out {
            m: src.clone(),
            mesh,
            taken: src.instrs.iter().map(|i| i.name.clone()).collect(),
            next_channel: 1,
            adders: FxHashMap::default(),
            resharded: FxHashMap::default(),
        }
    }

    /// A name not used anywhere in the module, derived from `base`.
    pub fn fresh(&mut self, base: &str) -> String {
        let stem = base.split('.').next().unwrap_or(base);
        let mut k = self.taken.len();
        loop {
            let name = format!("{stem}.{k}");
            if self.taken.insert(name.clone()) {
                return name;
            }
            k += 1;
        }
    }

    pub fn begin(&mut self, name: &str) -> CompB {
        let comp = CompId(self.m.comps.len() as u32);
        let name = self.fresh(name);
        self.m.comps.push(Computation {
            name,
            instrs: Vec::new(),
            root: InstrId(0),
            params: Vec::new(),
            is_entry: false,
            execution_thread: None,
            is_async_sugar: false,
        });
        CompB {
            comp,
            instrs: Vec::new(),
            pid: None,
            zero: None,
        }
    }

    pub fn finish(&mut self, cb: CompB, root: InstrId) {
        let mut params: Vec<(i64, InstrId)> = cb
            .instrs
            .iter()
            .filter_map(|&i| self.m.instr(i).parameter_number.map(|n| (n, i)))
            .collect();
        params.sort();
        let c = &mut self.m.comps[cb.comp.index()];
        c.instrs = cb.instrs;
        c.root = root;
        c.params = params.into_iter().map(|p| p.1).collect();
    }

    pub fn shape(&self, id: InstrId) -> &Shape {
        &self.m.instr(id).shape
    }

    pub fn dims(&self, id: InstrId) -> Vec<i64> {
        self.shape(id).dims().to_vec()
    }

    pub fn ty(&self, id: InstrId) -> PrimitiveType {
        self.shape(id).element_type().unwrap_or(PrimitiveType::F32)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn emit_full(
        &mut self,
        cb: &mut CompB,
        name: String,
        opcode: Opcode,
        shape: Shape,
        operands: Vec<InstrId>,
        attrs: Vec<Attr>,
        parameter_number: Option<i64>,
        literal: Option<Literal>,
    ) -> InstrId {
        let id = InstrId(self.m.instrs.len() as u32);
        self.m.instrs.push(Instruction {
            name,
            opcode,
            shape,
            operands,
            attrs,
            parent: cb.comp,
            parameter_number,
            literal,
            async_sugar: None,
        });
        cb.instrs.push(id);
        id
    }

    pub fn emit(
        &mut self,
        cb: &mut CompB,
        base: &str,
        opcode: Opcode,
        shape: Shape,
        operands: Vec<InstrId>,
        attrs: Vec<Attr>,
    ) -> InstrId {
        let name = self.fresh(base);
        self.emit_full(cb, name, opcode, shape, operands, attrs, None, None)
    }

    fn constant(&mut self, cb: &mut CompB, shape: Shape, lit: Literal) -> InstrId {
        let name = self.fresh("constant");
        self.emit_full(
            cb,
            name,
            Opcode::Constant,
            shape,
            vec![],
            vec![],
            None,
            Some(lit),
        )
    }

    pub fn zero(&mut self, cb: &mut CompB, ty: PrimitiveType) -> InstrId {
        self.constant(cb, Shape::scalar(ty), zero_literal(ty))
    }

    fn s32_zero(&mut self, cb: &mut CompB) -> InstrId {
        if let Some(z) = cb.zero {
            return z;
        }
        let z = self.zero(cb, PrimitiveType::S32);
        cb.zero = Some(z);
        z
    }

    fn partition_id(&mut self, cb: &mut CompB) -> InstrId {
        if let Some(p) = cb.pid {
            return p;
        }
        let p = self.emit(
            cb,
            "partition-id",
            Opcode::PartitionId,
            Shape::scalar(PrimitiveType::U32),
            vec![],
            vec![],
        );
        cb.pid = Some(p);
        p
    }

    /// This device's entry of a per-device table, as an `s32[]`.
    pub fn per_device(&mut self, cb: &mut CompB, table: Vec<i64>) -> InstrId {
        if table.iter().all(|&v| v == 0) {
            return self.s32_zero(cb);
        }
        let n = table.len() as i64;
        let pid = self.partition_id(cb);
        let t = self.constant(
            cb,
            Shape::array(PrimitiveType::S32, vec![n]),
            Literal::Array(LiteralData::Int(table)),
        );
        let one = self.emit(
            cb,
            "dynamic-slice",
            Opcode::DynamicSlice,
            Shape::array(PrimitiveType::S32, vec![1]),
            vec![t, pid],
            vec![attr("dynamic_slice_sizes", AttrValue::Ints(vec![1]))],
        );
        self.emit(
            cb,
            "reshape",
            Opcode::Reshape,
            Shape::scalar(PrimitiveType::S32),
            vec![one],
            vec![],
        )
    }

    /// The scalar `add` computation for `ty` (for partial sums).
    pub fn adder(&mut self, ty: PrimitiveType) -> CompId {
        if let Some(&c) = self.adders.get(&ty) {
            return c;
        }
        let mut cb = self.begin("add.spmd");
        let s = Shape::scalar(ty);
        let mut ps = Vec::new();
        for k in 0..2 {
            let name = self.fresh(if k == 0 { "x" } else { "y" });
            ps.push(self.emit_full(
                &mut cb,
                name,
                Opcode::Parameter,
                s.clone(),
                vec![],
                vec![],
                Some(k),
                None,
            ));
        }
        let r = self.emit(&mut cb, "add", Opcode::Add, s, ps, vec![]);
        let c = cb.comp;
        self.finish(cb, r);
        self.adders.insert(ty, c);
        c
    }

    /// A channel id no other collective of the module has.
    pub fn fresh_channel(&mut self) -> i64 {
        let ch = self.next_channel;
        self.next_channel += 1;
        ch
    }

    fn collective_attrs(&mut self, axes: &[Axis]) -> Vec<Attr> {
        let ch = self.fresh_channel();
        vec![
            attr("channel_id", AttrValue::Int(ch)),
            attr(
                "replica_groups",
                AttrValue::ReplicaGroups(Box::new(ReplicaGroups::Explicit(self.mesh.groups(axes)))),
            ),
            attr("use_global_device_ids", AttrValue::Bool(true)),
        ]
    }

    pub fn all_reduce(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        axes: &[Axis],
        reducer: Option<CompId>,
    ) -> InstrId {
        let comp = reducer.unwrap_or_else(|| self.adder(self.ty(x)));
        let mut attrs = self.collective_attrs(axes);
        attrs.push(attr("to_apply", AttrValue::Comp(comp)));
        let shape = self.shape(x).clone();
        self.emit(cb, "all-reduce", Opcode::AllReduce, shape, vec![x], attrs)
    }

    pub fn reduce_scatter(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        axes: &[Axis],
        reducer: Option<CompId>,
    ) -> InstrId {
        let comp = reducer.unwrap_or_else(|| self.adder(self.ty(x)));
        let mut attrs = self.collective_attrs(axes);
        attrs.push(attr("dimensions", AttrValue::Ints(vec![dim as i64])));
        attrs.push(attr("to_apply", AttrValue::Comp(comp)));
        let mut dims = self.dims(x);
        dims[dim] /= i64::from(self.mesh.count(axes));
        let shape = Shape::array(self.ty(x), dims);
        self.emit(
            cb,
            "reduce-scatter",
            Opcode::ReduceScatter,
            shape,
            vec![x],
            attrs,
        )
    }

    pub fn all_gather(&mut self, cb: &mut CompB, x: InstrId, dim: usize, axes: &[Axis]) -> InstrId {
        let mut attrs = self.collective_attrs(axes);
        attrs.push(attr("dimensions", AttrValue::Ints(vec![dim as i64])));
        let mut dims = self.dims(x);
        dims[dim] *= i64::from(self.mesh.count(axes));
        let shape = Shape::array(self.ty(x), dims);
        self.emit(cb, "all-gather", Opcode::AllGather, shape, vec![x], attrs)
    }

    /// Moves the tiling by `axes` (the minor end of dim `from`'s tiling) to
    /// dim `to` (appended to its tiling): reshape, all-to-all, transpose, reshape.
    pub fn all_to_all(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        from: usize,
        to: usize,
        axes: &[Axis],
    ) -> InstrId {
        let g = i64::from(self.mesh.count(axes));
        let ty = self.ty(x);
        let dims = self.dims(x);
        // Split dim `to` into [g, to/g]: chunk k goes to group member k.
        let mut split = dims.clone();
        split[to] = dims[to] / g;
        split.insert(to, g);
        let r1 = self.emit(
            cb,
            "reshape",
            Opcode::Reshape,
            Shape::array(ty, split.clone()),
            vec![x],
            vec![],
        );
        let mut attrs = self.collective_attrs(axes);
        attrs.push(attr("dimensions", AttrValue::Ints(vec![to as i64])));
        let a2a = self.emit(
            cb,
            "all-to-all",
            Opcode::AllToAll,
            Shape::array(ty, split.clone()),
            vec![r1],
            attrs,
        );
        // The received chunks (indexed by source) become the minor tiles of `from`:
        // move the g dim right before `from`'s dim.
        let from_pos = if from > to { from + 1 } else { from };
        let mut perm: Vec<usize> = (0..split.len()).filter(|&d| d != to).collect();
        let at = perm.iter().position(|&d| d == from_pos).unwrap_or(0);
        perm.insert(at, to);
        let tdims: Vec<i64> = perm.iter().map(|&p| split[p]).collect();
        let t = self.emit(
            cb,
            "transpose",
            Opcode::Transpose,
            Shape::array(ty, tdims),
            vec![a2a],
            vec![attr(
                "dimensions",
                AttrValue::Ints(perm.iter().map(|&p| p as i64).collect()),
            )],
        );
        let mut outd = dims;
        outd[to] /= g;
        outd[from] *= g;
        self.emit(
            cb,
            "reshape",
            Opcode::Reshape,
            Shape::array(ty, outd),
            vec![t],
            vec![],
        )
    }

    /// `x[0:limits]` (a static slice keeping the low part of each dim).
    pub fn slice_low(&mut self, cb: &mut CompB, x: InstrId, limits: &[i64]) -> InstrId {
        if self.dims(x) == limits {
            return x;
        }
        let sl = limits
            .iter()
            .map(|&l| SliceDim {
                start: 0,
                limit: l,
                stride: 1,
            })
            .collect();
        self.slice(cb, x, sl)
    }

    /// `x[sl]` (unit strides).
    fn slice(&mut self, cb: &mut CompB, x: InstrId, sl: Vec<SliceDim>) -> InstrId {
        let dims = sl.iter().map(|d| d.limit - d.start).collect();
        let shape = Shape::array(self.ty(x), dims);
        self.emit(
            cb,
            "slice",
            Opcode::Slice,
            shape,
            vec![x],
            vec![attr("slice", AttrValue::Slice(sl))],
        )
    }

    /// Pads `x` at the high end to `dims`.
    pub fn pad_high(&mut self, cb: &mut CompB, x: InstrId, dims: &[i64]) -> InstrId {
        let cur = self.dims(x);
        if cur == dims {
            return x;
        }
        let z = self.zero(cb, self.ty(x));
        let pads = cur
            .iter()
            .zip(dims)
            .map(|(&c, &d)| PadDim {
                low: 0,
                high: d - c,
                interior: 0,
            })
            .collect();
        self.pad(cb, x, pads, z)
    }

    /// `x` padded with `fill` as `pads` say, one per dim.
    fn pad(&mut self, cb: &mut CompB, x: InstrId, pads: Vec<PadDim>, fill: InstrId) -> InstrId {
        let dims = self
            .dims(x)
            .iter()
            .zip(&pads)
            .map(|(&n, p)| p.low + n + p.high + (n - 1).max(0) * p.interior)
            .collect();
        let shape = Shape::array(self.ty(x), dims);
        self.emit(
            cb,
            "pad",
            Opcode::Pad,
            shape,
            vec![x, fill],
            vec![attr("padding", AttrValue::Padding(pads))],
        )
    }

    /// Each device's block of `x`: `sizes` at per-device `offsets` (None: 0).
    pub fn dynamic_slice(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        offsets: Vec<Option<Vec<i64>>>,
        sizes: &[i64],
    ) -> InstrId {
        let mut ops = vec![x];
        for o in offsets {
            let v = match o {
                Some(table) => self.per_device(cb, table),
                None => self.s32_zero(cb),
            };
            ops.push(v);
        }
        let shape = Shape::array(self.ty(x), sizes.to_vec());
        self.emit(
            cb,
            "dynamic-slice",
            Opcode::DynamicSlice,
            shape,
            ops,
            vec![attr("dynamic_slice_sizes", AttrValue::Ints(sizes.to_vec()))],
        )
    }

    /// `value` broadcast to an `s32` array of `dims`.
    fn s32_splat(&mut self, cb: &mut CompB, value: i64, dims: &[i64]) -> InstrId {
        let c = self.constant(
            cb,
            Shape::scalar(PrimitiveType::S32),
            Literal::Array(LiteralData::Int(vec![value])),
        );
        self.splat(cb, c, PrimitiveType::S32, dims)
    }

    /// The scalar `x` broadcast to an array of `dims`.
    pub fn splat(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        ty: PrimitiveType,
        dims: &[i64],
    ) -> InstrId {
        self.emit(
            cb,
            "broadcast",
            Opcode::Broadcast,
            Shape::array(ty, dims.to_vec()),
            vec![x],
            vec![attr("dimensions", AttrValue::Ints(vec![]))],
        )
    }

    /// Start indices (`s32`) of a gather along a dim of `rows` rows tiled by
    /// `axes`, `local` rows a device: the global start,
    /// clamped as a gather clamps it, made relative to this device's rows;
    /// and a mask of the starts that fall inside them.
    pub fn shard_starts(
        &mut self,
        cb: &mut CompB,
        starts: InstrId,
        rows: i64,
        (axes, local): (&[Axis], i64),
    ) -> (InstrId, InstrId) {
        let dims = self.dims(starts);
        let s32 = Shape::array(PrimitiveType::S32, dims.clone());
        let low = self.s32_splat(cb, 0, &dims);
        let high = self.s32_splat(cb, rows - 1, &dims);
        let clamped = self.emit(
            cb,
            "clamp",
            Opcode::Clamp,
            s32.clone(),
            vec![low, starts, high],
            vec![],
        );
        let rel = self.shard_relative(cb, clamped, (axes, local));
        let hit = self.within(cb, rel, Some(0), local);
        (rel, hit)
    }

    /// Whether each element of the `s32` array `x` lies in `lo..hi`.
    fn within(&mut self, cb: &mut CompB, x: InstrId, lo: Option<i64>, hi: i64) -> InstrId {
        let dims = self.dims(x);
        let pred = Shape::array(PrimitiveType::Pred, dims.clone());
        let direction = |d: &str| vec![attr("direction", AttrValue::Ident(d.into()))];
        let hi = self.s32_splat(cb, hi, &dims);
        let below = self.emit(
            cb,
            "compare",
            Opcode::Compare,
            pred.clone(),
            vec![x, hi],
            direction("LT"),
        );
        let Some(lo) = lo else {
            return below;
        };
        let lo = self.s32_splat(cb, lo, &dims);
        let from = self.emit(
            cb,
            "compare",
            Opcode::Compare,
            pred.clone(),
            vec![x, lo],
            direction("GE"),
        );
        self.emit(cb, "and", Opcode::And, pred, vec![from, below], vec![])
    }

    /// `x[start:limit]` along dim `dim` (every other dim whole).
    fn slice_dim(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        start: i64,
        limit: i64,
    ) -> InstrId {
        let dims = self.dims(x);
        let sl = dims
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                let (start, limit) = if d == dim { (start, limit) } else { (0, n) };
                SliceDim {
                    start,
                    limit,
                    stride: 1,
                }
            })
            .collect();
        self.slice(cb, x, sl)
    }

    /// `x` sent along `pairs` (`[source, target]` device ids).
    fn collective_permute(&mut self, cb: &mut CompB, x: InstrId, pairs: Vec<Vec<i64>>) -> InstrId {
        let ch = self.fresh_channel();
        let shape = self.shape(x).clone();
        self.emit(
            cb,
            "collective-permute",
            Opcode::CollectivePermute,
            shape,
            vec![x],
            vec![
                attr("channel_id", AttrValue::Int(ch)),
                attr("source_target_pairs", AttrValue::IntLists(pairs)),
            ],
        )
    }

    /// The local value `x`, tiled along `dim` by `axes`, with a halo of the
    /// neighbours' rows: `low` rows of the previous device before it and
    /// `high` rows of the next after it (zeros past the ends), as XLA
    /// exchanges halos for windowed ops: one collective-permute each way.
    pub fn with_halo(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        axes: &[Axis],
        (low, high): (i64, i64),
    ) -> InstrId {
        let dims = self.dims(x);
        let rows = dims[dim];
        let mut parts = Vec::with_capacity(3);
        if low > 0 {
            let tail = self.slice_dim(cb, x, dim, rows - low, rows);
            parts.push(self.send_along(cb, tail, axes, 1, false));
        }
        parts.push(x);
        if high > 0 {
            let head = self.slice_dim(cb, x, dim, 0, high);
            parts.push(self.send_along(cb, head, axes, -1, false));
        }
        self.concatenate(cb, parts, dim)
    }

    /// The input rows of a device's windows along `dim` (tiled by `axes`),
    /// gathered from its neighbours as `plan` says, XLA's `ExchangeHalo`:
    /// one collective-permute per piece, the pieces joined and padded with
    /// `fill`, and each device's rows cut out. With `mask` (the dim's global
    /// rows), rows of the padded dim outside the data become `fill` too.
    /// When the plan trims shards, only theirs take part (each device first
    /// keeps the rows of its own the plan names); the others' results are
    /// rows of padding, whatever they hold.
    pub fn exchange_halo(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        (dim, axes): (usize, &[Axis]),
        plan: &WindowPlan,
        fill: InstrId,
        mask: Option<i64>,
    ) -> InstrId {
        let n = i64::from(self.mesh.count(axes));
        let (x, shards, mask) = match &plan.trim {
            Some(trim) => {
                let x = self.trimmed_input(cb, x, (dim, axes), trim, fill, mask);
                (x, trim.shards.clone(), mask.map(|_| trim.base))
            }
            None => (x, (0..n).collect(), mask),
        };
        let at = Shards::new(&self.mesh, axes, shards);
        match &plan.exchange {
            Exchange::Halo(p) => self.halo_from_neighbours(cb, x, dim, &at, p, fill, mask),
            Exchange::Compact(c) => self.halo_compact(cb, x, dim, &at, c, fill, mask.is_some()),
        }
    }

    /// The rows of its own shard a device puts into a trimmed exchange,
    /// rows past the dim's end (`mask`) set to `fill` first where the plan
    /// says so.
    fn trimmed_input(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        (dim, axes): (usize, &[Axis]),
        trim: &Trim,
        fill: InstrId,
        mask: Option<i64>,
    ) -> InstrId {
        let rows = self.dims(x)[dim];
        let x = match mask {
            Some(base) if trim.premask => {
                let starts = self.mesh.first_rows(axes, rows);
                self.keep_rows(cb, x, dim, starts, (None, base), fill)
            }
            _ => x,
        };
        self.rows_of(cb, x, dim, trim.own, rows)
    }

    #[allow(clippy::too_many_arguments)]
    fn halo_from_neighbours(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        at: &Shards,
        plan: &HaloPlan,
        fill: InstrId,
        mask: Option<i64>,
    ) -> InstrId {
        let rows = self.dims(x)[dim];
        let mut parts = Vec::with_capacity(plan.pieces.len());
        for piece in &plan.pieces {
            let part = match *piece {
                Piece::Zeros(k) => {
                    let mut dims = self.dims(x);
                    dims[dim] = k;
                    let z = self.zero(cb, self.ty(x));
                    self.splat(cb, z, self.ty(x), &dims)
                }
                Piece::Own { start, limit } => self.rows_of(cb, x, dim, (start, limit), rows),
                Piece::FromLeft {
                    distance,
                    start,
                    limit,
                } => {
                    let sent = self.rows_of(cb, x, dim, (start, limit), rows);
                    let pairs = at.shifted(distance);
                    self.collective_permute(cb, sent, pairs)
                }
                Piece::FromRight {
                    distance,
                    start,
                    limit,
                } => {
                    let sent = self.rows_of(cb, x, dim, (start, limit), rows);
                    let pairs = at.shifted(-distance);
                    self.collective_permute(cb, sent, pairs)
                }
            };
            parts.push(part);
        }
        let joined = self.concatenate(cb, parts, dim);
        let padded = self.pad_dim(cb, joined, dim, plan.pad, fill);
        let index = at.index.clone();
        let cut = self.cut_rows(cb, padded, dim, (&plan.offsets, &index), plan.rows);
        let Some(base) = mask else {
            return cut;
        };
        if plan.low <= 0 && plan.padded - base - plan.low <= 0 {
            return cut;
        }
        let starts = index
            .iter()
            .map(|&i| plan.window_starts[i as usize])
            .collect();
        self.keep_rows(
            cb,
            cut,
            dim,
            starts,
            (Some(plan.low), base + plan.low),
            fill,
        )
    }

    /// `ExchangeHaloCompact`: the sends of `plan` (one collective-permute
    /// each), each block picked per device from what it was sent, its own
    /// rows or padding, the blocks joined, and each device's rows cut out;
    /// with `mask`, the rows of padding become `fill`.
    #[allow(clippy::too_many_arguments)]
    fn halo_compact(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        at: &Shards,
        plan: &CompactPlan,
        fill: InstrId,
        mask: bool,
    ) -> InstrId {
        let rows = self.dims(x)[dim];
        let index = at.index.clone();
        let fill = if mask {
            fill
        } else {
            self.zero(cb, self.ty(x))
        };
        let sent: Vec<InstrId> = plan
            .sends
            .iter()
            .map(|send| {
                let part = self.rows_of(cb, x, dim, (send.start, send.limit), rows);
                let pairs = at.pairs(send.pairs.iter().copied());
                self.collective_permute(cb, part, pairs)
            })
            .collect();
        let mut blocks = Vec::with_capacity(plan.sizes.len());
        for (b, (&size, takes)) in plan.sizes.iter().zip(&plan.takes).enumerate() {
            let mut dims = self.dims(x);
            dims[dim] = size;
            let padding = self.splat(cb, fill, self.ty(x), &dims);
            // The distinct blocks, in the order the shards first take them.
            let mut unique: Vec<(Take, InstrId)> = Vec::new();
            let mut choice = Vec::with_capacity(takes.len());
            for &take in takes {
                if let Some(k) = unique.iter().position(|(t, _)| *t == take) {
                    choice.push(k as i64);
                    continue;
                }
                let piece = match take {
                    Take::Sent(k) => sent[k],
                    Take::Own(start) => {
                        self.rows_of(cb, x, dim, (start, start + size.min(rows - start)), rows)
                    }
                    Take::Padding => padding,
                };
                let have = self.dims(piece)[dim];
                let piece = if have == size {
                    piece
                } else if b == 0 {
                    self.pad_dim(cb, piece, dim, (size - have, 0), fill)
                } else {
                    self.pad_dim(cb, piece, dim, (0, size - have), fill)
                };
                choice.push(unique.len() as i64);
                unique.push((take, piece));
            }
            let first = usize::from(unique.len() > 1 && unique[0].0 == Take::Padding);
            let mut picked = unique[first].1;
            if unique.len() > first + 1 {
                let table = index.iter().map(|&i| choice[i as usize]).collect();
                let selector = self.per_device(cb, table);
                for (k, (take, piece)) in unique.iter().enumerate().skip(first + 1) {
                    if *take == Take::Padding {
                        continue;
                    }
                    let is = self.equals(cb, selector, k as i64, &dims);
                    picked = self.emit(
                        cb,
                        "select",
                        Opcode::Select,
                        Shape::array(self.ty(x), dims.clone()),
                        vec![is, *piece, picked],
                        vec![],
                    );
                }
            }
            blocks.push(picked);
        }
        let joined = self.concatenate(cb, blocks, dim);
        let have = self.dims(joined)[dim];
        let padded = self.pad_dim(cb, joined, dim, (0, plan.padded - have), fill);
        let cut = self.cut_rows(cb, padded, dim, (&plan.offsets, &index), plan.rows);
        if !mask {
            return cut;
        }
        // Rows outside each device's data are padding.
        let valid: Vec<(i64, i64)> = index.iter().map(|&i| plan.valid[i as usize]).collect();
        let dims = self.dims(cut);
        let pred = Shape::array(PrimitiveType::Pred, dims.clone());
        let iota = self.iota_s32(cb, &dims, dim);
        let limit = self.per_device(cb, valid.iter().map(|v| v.1).collect());
        let limit = self.splat(cb, limit, PrimitiveType::S32, &dims);
        let direction = |d: &str| vec![attr("direction", AttrValue::Ident(d.into()))];
        let mut inside = self.emit(
            cb,
            "compare",
            Opcode::Compare,
            pred.clone(),
            vec![iota, limit],
            direction("LT"),
        );
        if valid.iter().any(|v| v.0 > 0) {
            let start = self.per_device(cb, valid.iter().map(|v| v.0).collect());
            let start = self.splat(cb, start, PrimitiveType::S32, &dims);
            let from = self.emit(
                cb,
                "compare",
                Opcode::Compare,
                pred.clone(),
                vec![iota, start],
                direction("GE"),
            );
            inside = self.emit(cb, "and", Opcode::And, pred, vec![inside, from], vec![]);
        }
        self.keep_else_fill(cb, inside, cut, fill)
    }

    /// `rows` rows of `x` along `dim` from each device's offset (`offsets`
    /// by tile index, `index` the tile index of each device): `x` itself
    /// when it has no more, a slice when every offset is the same.
    fn cut_rows(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        (offsets, index): (&[i64], &[i64]),
        rows: i64,
    ) -> InstrId {
        let mut sizes = self.dims(x);
        if sizes[dim] == rows {
            return x;
        }
        if offsets.windows(2).all(|w| w[0] == w[1]) {
            let o = offsets.first().copied().unwrap_or(0);
            return self.slice_dim(cb, x, dim, o, o + rows);
        }
        sizes[dim] = rows;
        let mut starts: Vec<Option<Vec<i64>>> = vec![None; sizes.len()];
        starts[dim] = Some(index.iter().map(|&i| offsets[i as usize]).collect());
        self.dynamic_slice(cb, x, starts, &sizes)
    }

    /// An `s32` array of `dims` counting along `dim`.
    fn iota_s32(&mut self, cb: &mut CompB, dims: &[i64], dim: usize) -> InstrId {
        self.emit(
            cb,
            "iota",
            Opcode::Iota,
            Shape::array(PrimitiveType::S32, dims.to_vec()),
            vec![],
            vec![attr("iota_dimension", AttrValue::Int(dim as i64))],
        )
    }

    /// `x` where `keep` holds, else the scalar `fill`.
    fn keep_else_fill(
        &mut self,
        cb: &mut CompB,
        keep: InstrId,
        x: InstrId,
        fill: InstrId,
    ) -> InstrId {
        let (ty, dims) = (self.ty(x), self.dims(x));
        let fills = self.splat(cb, fill, ty, &dims);
        self.emit(
            cb,
            "select",
            Opcode::Select,
            Shape::array(ty, dims),
            vec![keep, x, fills],
            vec![],
        )
    }

    /// A `pred` array of `dims`: whether the `s32[]` `x` equals `value`.
    fn equals(&mut self, cb: &mut CompB, x: InstrId, value: i64, dims: &[i64]) -> InstrId {
        let c = self.constant(
            cb,
            Shape::scalar(PrimitiveType::S32),
            Literal::Array(LiteralData::Int(vec![value])),
        );
        let is = self.emit(
            cb,
            "compare",
            Opcode::Compare,
            Shape::scalar(PrimitiveType::Pred),
            vec![x, c],
            vec![attr("direction", AttrValue::Ident("EQ".into()))],
        );
        self.splat(cb, is, PrimitiveType::Pred, dims)
    }

    /// Each device's value sent to the device whose tile indices along each
    /// of `dims` (the axes tiling a reversed dim) are its own mirrored: the
    /// shards of a reversed dim change places (XLA's reshard to the
    /// reversed sharding, one collective-permute over every device).
    pub fn mirror_tiles(&mut self, cb: &mut CompB, x: InstrId, dims: &[&[Axis]]) -> InstrId {
        // Device d receives from the device mirrored along every dim (the
        // mirrors commute).
        let mut composed: Vec<i64> = (0..i64::from(self.mesh.n)).collect();
        for axes in dims {
            let mut step = composed.clone();
            for g in self.mesh.groups(axes) {
                let n = g.len();
                for (j, &d) in g.iter().enumerate() {
                    step[d as usize] = composed[g[n - 1 - j] as usize];
                }
            }
            composed = step;
        }
        let pairs = composed
            .iter()
            .enumerate()
            .map(|(d, &from)| vec![from, d as i64])
            .collect();
        self.collective_permute(cb, x, pairs)
    }

    /// Rows `start..limit` of `x` along `dim` (`x` itself when that is all
    /// of its `rows`).
    fn rows_of(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        (start, limit): (i64, i64),
        rows: i64,
    ) -> InstrId {
        if start == 0 && limit == rows {
            x
        } else {
            self.slice_dim(cb, x, dim, start, limit)
        }
    }

    /// `x` sent `by` tiles along `axes` (negative: towards lower indices).
    /// Devices no shard reaches receive zeros or, when `cyclic`, the shard
    /// from the other end. Pairs are listed by source going forward, by
    /// target going back.
    fn send_along(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        axes: &[Axis],
        by: i64,
        cyclic: bool,
    ) -> InstrId {
        let pairs: Vec<Vec<i64>> = self
            .mesh
            .groups(axes)
            .iter()
            .flat_map(|g| {
                let n = g.len() as i64;
                (0..n).filter_map(move |k| {
                    let (from, to) = if by > 0 { (k, k + by) } else { (k - by, k) };
                    let (from, to) = if cyclic {
                        (from.rem_euclid(n), to.rem_euclid(n))
                    } else {
                        (from, to)
                    };
                    ((0..n).contains(&from) && (0..n).contains(&to))
                        .then(|| vec![g[from as usize], g[to as usize]])
                })
            })
            .collect();
        self.collective_permute(cb, x, pairs)
    }

    /// `x` padded by `low` and `high` rows of `fill` along `dim`.
    fn pad_dim(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        (low, high): (i64, i64),
        fill: InstrId,
    ) -> InstrId {
        if low == 0 && high == 0 {
            return x;
        }
        let pads = (0..self.dims(x).len())
            .map(|d| {
                let (low, high) = if d == dim { (low, high) } else { (0, 0) };
                PadDim {
                    low,
                    high,
                    interior: 0,
                }
            })
            .collect();
        self.pad(cb, x, pads, fill)
    }

    /// `x` with its rows along `dim` outside `lo..hi` replaced by `fill`,
    /// row `r` of a device standing at `starts[device] + r` (no `lo`: rows
    /// stand at 0 or after, only `hi` is checked).
    fn keep_rows(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        starts: Vec<i64>,
        (lo, hi): (Option<i64>, i64),
        fill: InstrId,
    ) -> InstrId {
        let dims = self.dims(x);
        let s32 = Shape::array(PrimitiveType::S32, dims.clone());
        let iota = self.iota_s32(cb, &dims, dim);
        let off = self.per_device(cb, starts);
        let offb = self.splat(cb, off, PrimitiveType::S32, &dims);
        let pos = self.emit(cb, "add", Opcode::Add, s32, vec![iota, offb], vec![]);
        let inside = self.within(cb, pos, lo, hi);
        self.keep_else_fill(cb, inside, x, fill)
    }

    /// `parts` (of one type, alike but along `dim`) joined along `dim` (a
    /// single part is itself).
    fn concatenate(&mut self, cb: &mut CompB, parts: Vec<InstrId>, dim: usize) -> InstrId {
        if let [only] = parts[..] {
            return only;
        }
        let mut out = self.dims(parts[0]);
        out[dim] = parts.iter().map(|&p| self.dims(p)[dim]).sum();
        let shape = Shape::array(self.ty(parts[0]), out);
        self.emit(
            cb,
            "concatenate",
            Opcode::Concatenate,
            shape,
            parts,
            vec![attr("dimensions", AttrValue::Ints(vec![dim as i64]))],
        )
    }

    /// The local value `x`, tiled along `dim` by `axes`, rotated by `by` rows
    /// of the whole array (`by` > 0: row i takes row i + by, as
    /// `concatenate(x[by:], x[:by])`; `by` < 0: row i takes row i - |by|), no
    /// more than a device's rows: the rows that cross a device boundary go
    /// to the neighbour with one cyclic collective-permute, as XLA rotates.
    pub fn rotate(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        dim: usize,
        axes: &[Axis],
        by: i64,
    ) -> InstrId {
        let dims = self.dims(x);
        let rows = dims[dim];
        let k = by.abs();
        let (moved, kept, step) = if by > 0 {
            (
                self.slice_dim(cb, x, dim, 0, k),
                self.slice_dim(cb, x, dim, k, rows),
                -1,
            )
        } else {
            (
                self.slice_dim(cb, x, dim, rows - k, rows),
                self.slice_dim(cb, x, dim, 0, rows - k),
                1,
            )
        };
        let got = self.send_along(cb, moved, axes, step, true);
        let parts = if by > 0 {
            vec![kept, got]
        } else {
            vec![got, kept]
        };
        self.concatenate(cb, parts, dim)
    }

    /// Replaces the rows of `x` (a local value with a halo of `low` rows along
    /// `dim`, tiled by `axes` with `rows` rows a device) that lie outside the
    /// global `0..global` by the scalar `fill` (a window's padding value).
    pub fn fill_outside(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        (dim, axes): (usize, &[Axis]),
        (rows, low, global): (i64, i64, i64),
        fill: InstrId,
    ) -> InstrId {
        let first: Vec<i64> = self
            .mesh
            .first_rows(axes, rows)
            .into_iter()
            .map(|f| f - low)
            .collect();
        self.keep_rows(cb, x, dim, first, (Some(0), global), fill)
    }

    /// `s32` indices `starts` minus this device's first row of a dim tiled by
    /// `axes`, `local` rows a device.
    pub fn shard_relative(
        &mut self,
        cb: &mut CompB,
        starts: InstrId,
        (axes, local): (&[Axis], i64),
    ) -> InstrId {
        let dims = self.dims(starts);
        let first = self.mesh.first_rows(axes, local);
        let off = self.per_device(cb, first);
        let offb = self.splat(cb, off, PrimitiveType::S32, &dims);
        self.emit(
            cb,
            "subtract",
            Opcode::Subtract,
            Shape::array(PrimitiveType::S32, dims),
            vec![starts, offb],
            vec![],
        )
    }

    /// Replaces the padding of uneven dims of a local value by `fill` (a scalar).
    pub fn mask_padding(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        sh: &Sh,
        global: &[i64],
        fill: InstrId,
    ) -> InstrId {
        let local = self.dims(x);
        let mut cur = x;
        for d in 0..sh.rank() {
            let k = i64::from(sh.tiles(&self.mesh, d));
            if k <= 1 || global[d] % k == 0 {
                continue;
            }
            let first = self.mesh.first_rows(&sh.dims[d], local[d]);
            cur = self.keep_rows(cb, cur, d, first, (None, global[d]), fill);
        }
        cur
    }

    /// Reshards the local value `x` of a global array of dims `global` from `from`
    /// to `to` (which has no partial axes), choosing XLA's collectives:
    /// all-reduce or reduce-scatter for partial sums, all-to-all to move a tiling
    /// between dims, all-gather to remove tiling, dynamic-slice to add it.
    /// Resharding the same value the same way again reuses the first result.
    pub fn reshard(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        global: &[i64],
        from: &Sh,
        to: &Sh,
    ) -> Result<InstrId, SpmdError> {
        if from == to {
            return Ok(x);
        }
        let key = (x, from.clone(), to.clone());
        if let Some(&done) = self.resharded.get(&key) {
            return Ok(done);
        }
        let done = self.reshard_anew(cb, x, global, from, to)?;
        self.resharded.insert(key, done);
        Ok(done)
    }

    fn reshard_anew(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        global: &[i64],
        from: &Sh,
        to: &Sh,
    ) -> Result<InstrId, SpmdError> {
        // Both shardings index the array's dims; a mismatch comes from an
        // annotation of the wrong rank that escaped its own check.
        if from.rank() != global.len() || to.rank() != global.len() {
            return Err(SpmdError::Internal(format!(
                "resharding a rank-{} array from a rank-{} to a rank-{} sharding",
                global.len(),
                from.rank(),
                to.rank()
            )));
        }
        if let Some(b) = self.rebroadcast(cb, x, global, from, to) {
            return Ok(b);
        }
        let mesh = self.mesh.clone();
        let mut cur = x;
        let mut s = from.clone();
        // Partial sums reduced after the slicing: see `slice_before_reducing`.
        let mut reduce_last = None;
        if !s.partial.is_empty() {
            let p = std::mem::take(&mut s.partial);
            match scatter_target(&mesh, global, &s, &p, to) {
                Some((d, scattered)) => {
                    cur = self.reduce_scatter(cb, cur, d, &scattered, from.reducer);
                    s.dims[d].extend(&scattered);
                    let rest = without(&p, &scattered);
                    if !rest.is_empty() {
                        cur = self.all_reduce(cb, cur, &rest, from.reducer);
                    }
                }
                None if slice_before_reducing(&mesh, global, &s, &p, to) => {
                    reduce_last = Some((p, from.reducer));
                }
                None => cur = self.all_reduce(cb, cur, &p, from.reducer),
            }
            s.reducer = None;
        }
        // Tile counts that only trade places between dims: all-to-alls that
        // swap them, then one collective-permute into the target's device
        // order (XLA's ReshardWithAllToAll and ReshardWithCollectivePermute).
        if s.partial.is_empty() && reduce_last.is_none() {
            if let Some(moves) = swap_plan(&mesh, global, &s, to) {
                for (src, dst, moving) in moves {
                    cur = self.move_tiling(cb, cur, src, dst, &moving);
                    let keep = s.dims[src].len() - moving.len();
                    s.dims[src].truncate(keep);
                    s.dims[dst].extend(&moving);
                }
                if s != *to {
                    cur = self.permute_tiles(cb, cur, &s, to);
                }
                return Ok(cur);
            }
        }
        // All-to-all: the minor tiling of one dim moves to another.
        for a in 0..s.rank() {
            let lcp = common_prefix(&s.dims[a], &to.dims[a]);
            if lcp == s.dims[a].len() {
                continue;
            }
            let moving = s.dims[a][lcp..].to_vec();
            let target = (0..s.rank()).find(|&b| {
                b != a && {
                    let mut want = s.dims[b].clone();
                    want.extend(&moving);
                    // An untiled dim that the tiling does not divide is
                    // padded first (as XLA pads it), a tiled one is not.
                    let divides = global[b] % i64::from(mesh.count(&want)) == 0;
                    to.dims[b].starts_with(&want)
                        && (divides || s.dims[b].is_empty())
                        && global[a] % i64::from(mesh.count(&s.dims[a])) == 0
                }
            });
            if let Some(b) = target {
                cur = self.move_tiling(cb, cur, a, b, &moving);
                s.dims[a].truncate(lcp);
                s.dims[b].extend(&moving);
            }
        }
        // Untile what `to` does not tile the same way, as XLA's
        // ReplicatePartial does: dims whose shard is the whole (one row)
        // from the first shard, by a select and an all-reduce; then
        // all-gathers, the minor dims first; then dims of no more rows than
        // half their shards, each row put in place in zeros and all-reduced.
        let (broadcast, summed) = self.untiled_by_all_reduce(global, &s, to);
        if !broadcast.is_empty() {
            let axes: Vec<Axis> = broadcast.iter().flat_map(|(_, a)| a.clone()).collect();
            cur = self.first_shard_everywhere(cb, cur, &axes);
            for (d, a) in &broadcast {
                let keep = s.dims[*d].len() - a.len();
                s.dims[*d].truncate(keep);
            }
        }
        for d in (0..s.rank()).rev() {
            let lcp = common_prefix(&s.dims[d], &to.dims[d]);
            if lcp == s.dims[d].len() || summed.iter().any(|(e, _)| *e == d) {
                continue;
            }
            let keep = s.dims[d][..lcp].to_vec();
            let gather = s.dims[d][lcp..].to_vec();
            let gathered = self.dims(cur)[d] * i64::from(mesh.count(&gather));
            let want = ceil_div(global[d], i64::from(mesh.count(&keep)));
            if gathered == want {
                cur = self.all_gather(cb, cur, d, &gather);
                s.dims[d] = keep;
            } else {
                // Uneven: gather the whole dim, drop the padding.
                let all = s.dims[d].clone();
                cur = self.all_gather(cb, cur, d, &all);
                let mut lim = self.dims(cur);
                lim[d] = global[d];
                cur = self.slice_low(cb, cur, &lim);
                s.dims[d].clear();
            }
        }
        if !summed.is_empty() {
            cur = self.rows_summed(cb, cur, global, &summed);
            for (d, a) in &summed {
                let keep = s.dims[*d].len() - a.len();
                s.dims[*d].truncate(keep);
            }
        }
        // Dynamic-slice what `to` tiles further.
        let mut offsets: Vec<Option<Vec<i64>>> = vec![None; s.rank()];
        let mut sizes = self.dims(cur);
        let mut padded = self.dims(cur);
        let mut any = false;
        for d in 0..s.rank() {
            if s.dims[d] == to.dims[d] {
                continue;
            }
            let have = s.dims[d].len();
            let extra = to.dims[d][have..].to_vec();
            let c_new = ceil_div(global[d], i64::from(mesh.count(&to.dims[d])));
            let g = i64::from(mesh.count(&extra));
            if have > 0 && self.dims(cur)[d] != c_new * g {
                // Uneven nesting: regather this dim and slice from the whole.
                let all = s.dims[d].clone();
                cur = self.all_gather(cb, cur, d, &all);
                let mut lim = self.dims(cur);
                lim[d] = global[d];
                cur = self.slice_low(cb, cur, &lim);
                s.dims[d].clear();
                return self.reshard(cb, cur, global, &s, to);
            }
            let axes = if have > 0 { extra } else { to.dims[d].clone() };
            offsets[d] = Some(mesh.first_rows(&axes, c_new));
            sizes[d] = c_new;
            padded[d] = c_new * i64::from(mesh.count(&axes));
            any = true;
        }
        if any {
            cur = self.pad_high(cb, cur, &padded);
            cur = self.dynamic_slice(cb, cur, offsets, &sizes);
        }
        if let Some((p, reducer)) = reduce_last {
            cur = self.all_reduce(cb, cur, &p, reducer);
        }
        Ok(cur)
    }
}

impl Out {
    /// The dims (and the axes untiling them) that XLA's ReplicatePartial
    /// untiles by all-reduces rather than all-gathers: those whose shard
    /// already spans the rows left to each device (`broadcast`), and those
    /// with no more rows than half their shards (`summed`).
    #[allow(clippy::type_complexity)]
    fn untiled_by_all_reduce(
        &self,
        global: &[i64],
        s: &Sh,
        to: &Sh,
    ) -> (Vec<(usize, Vec<Axis>)>, Vec<(usize, Vec<Axis>)>) {
        let (mut broadcast, mut summed) = (Vec::new(), Vec::new());
        // Only dims untiled whole: XLA untiles part of a dim's tiling by
        // these only after a halo exchange that moves rows into the groups'
        // shards, which tpusim does not do (it gathers such a dim whole).
        let untiled = s.dims.iter().zip(&to.dims).zip(global).enumerate();
        for (d, ((have, want_axes), &rows)) in untiled {
            if have.is_empty() || common_prefix(have, want_axes) > 0 {
                continue;
            }
            let parts = i64::from(self.mesh.count(have));
            if ceil_div(rows, parts) == rows {
                broadcast.push((d, have.clone()));
            } else if rows <= parts / 2 {
                summed.push((d, have.clone()));
            }
        }
        (broadcast, summed)
    }

    /// `x` as the first device along `axes` holds it, on every device: the
    /// others' values zeroed, then summed (XLA's PartitionedHlo::Broadcast).
    fn first_shard_everywhere(&mut self, cb: &mut CompB, x: InstrId, axes: &[Axis]) -> InstrId {
        let (ty, dims) = (self.ty(x), self.dims(x));
        let index = self.mesh.first_rows(axes, 1);
        let tile = self.per_device(cb, index);
        let first = self.equals(cb, tile, 0, &dims);
        let zero = self.zero(cb, ty);
        let kept = self.keep_else_fill(cb, first, x, zero);
        self.all_reduce(cb, kept, axes, None)
    }

    /// `x` with the one-row shards of `summed` dims put in place in zeros
    /// of the dims' rows (shards past the last row zeroed) and summed over
    /// their axes: one dynamic-update-slice and one all-reduce.
    fn rows_summed(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        global: &[i64],
        summed: &[(usize, Vec<Axis>)],
    ) -> InstrId {
        let ty = self.ty(x);
        let zero = self.zero(cb, ty);
        let mut cur = x;
        let mut full = self.dims(x);
        let mut offsets: Vec<Option<Vec<i64>>> = vec![None; full.len()];
        for (d, gather) in summed {
            let want = global[*d];
            let tiles = self.mesh.first_rows(gather, 1);
            let parts = i64::from(self.mesh.count(gather));
            if parts != want {
                cur = self.keep_rows(cb, cur, *d, tiles.clone(), (None, want), zero);
            }
            offsets[*d] = Some(tiles.iter().map(|&t| t.min(want - 1)).collect());
            full[*d] = want;
        }
        let zeros = self.splat(cb, zero, ty, &full);
        let mut ops = vec![zeros, cur];
        for o in offsets {
            ops.push(match o {
                Some(table) => self.per_device(cb, table),
                None => self.s32_zero(cb),
            });
        }
        let placed = self.emit(
            cb,
            "dynamic-update-slice",
            Opcode::DynamicUpdateSlice,
            Shape::array(ty, full),
            ops,
            vec![],
        );
        let axes: Vec<Axis> = summed.iter().flat_map(|(_, a)| a.clone()).collect();
        self.all_reduce(cb, placed, &axes, None)
    }

    /// Moves the tiling by `moving` (the minor end of dim `src`'s) to the
    /// minor end of dim `dst`'s, padding `dst` to a multiple of the parts.
    fn move_tiling(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        src: usize,
        dst: usize,
        moving: &[Axis],
    ) -> InstrId {
        let parts = i64::from(self.mesh.count(moving));
        let mut padded = self.dims(x);
        padded[dst] = ceil_div(padded[dst], parts) * parts;
        let x = self.pad_high(cb, x, &padded);
        self.all_to_all(cb, x, src, dst, moving)
    }

    /// Sends each device's tile to the device that holds the same tile (and
    /// the same replica) under `to`: `from` and `to` tile every dim into as
    /// many parts, over different axes. Every device is a pair, itself
    /// included, as in XLA's collective-permute.
    fn permute_tiles(&mut self, cb: &mut CompB, x: InstrId, from: &Sh, to: &Sh) -> InstrId {
        let mesh = &self.mesh;
        // A device's place: its tile index in each dim, then its index among
        // the devices holding the same tile (the axes the sharding leaves out).
        let digits = |sh: &Sh| -> Vec<Vec<Axis>> {
            let used = sh.used();
            let mut d = sh.dims.clone();
            d.push(mesh.axes().filter(|a| !used.contains(a)).collect());
            d
        };
        let (from_digits, to_digits) = (digits(from), digits(to));
        let place = |digits: &[Vec<Axis>], d: u32| -> u64 {
            digits.iter().fold(0u64, |acc, axes| {
                acc * u64::from(mesh.count(axes)) + u64::from(mesh.index(d, axes))
            })
        };
        let mut holder = vec![0i64; mesh.n as usize];
        for d in 0..mesh.n {
            if let Some(slot) = holder.get_mut(place(&to_digits, d) as usize) {
                *slot = i64::from(d);
            }
        }
        let pairs: Vec<Vec<i64>> = (0..mesh.n)
            .map(|d| {
                let target = holder.get(place(&from_digits, d) as usize).copied();
                vec![i64::from(d), target.unwrap_or(i64::from(d))]
            })
            .collect();
        self.collective_permute(cb, x, pairs)
    }
}

/// XLA's all-to-all resharding (GetReshardAllToAllSourceTargetDims): when
/// the dims whose tile counts differ between `s` and `to` hold the same
/// counts, only in other dims, each all-to-all swaps one dim's count into
/// place; what is left differs in device order only. Returns the moves
/// (source dim, target dim, the minor axes of the source that move), or
/// `None` when the counts do not trade places or a move does not divide.
pub(crate) fn swap_plan(
    mesh: &Mesh,
    global: &[i64],
    s: &Sh,
    to: &Sh,
) -> Option<Vec<(usize, usize, Vec<Axis>)>> {
    use std::collections::BTreeMap;
    if s == to || s.total_tiles(mesh) != to.total_tiles(mesh) || !to.partial.is_empty() {
        return None;
    }
    let mut have: Vec<u32> = (0..s.rank()).map(|d| s.tiles(mesh, d)).collect();
    let want: Vec<u32> = (0..to.rank()).map(|d| to.tiles(mesh, d)).collect();
    let mut src_by_count: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    let mut dst_by_count: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for d in (0..have.len()).filter(|&d| have[d] != want[d]) {
        src_by_count.entry(have[d]).or_default().push(d);
        dst_by_count.entry(want[d]).or_default().push(d);
    }
    let same_spread = src_by_count.len() == dst_by_count.len()
        && src_by_count
            .iter()
            .all(|(c, ds)| dst_by_count.get(c).is_some_and(|t| t.len() == ds.len()));
    if !same_spread {
        return None;
    }
    let mut dims = s.dims.clone();
    let mut moves = Vec::new();
    // Each step puts one dim's count in place, so rank steps suffice.
    for _ in 0..=have.len() {
        let Some(i) = (0..have.len())
            .filter(|&d| have[d] != want[d])
            .min_by_key(|&d| (have[d], std::cmp::Reverse(d)))
        else {
            return (!moves.is_empty() || dims != to.dims).then_some(moves);
        };
        let (count_i, want_i) = (have[i], want[i]);
        if want_i % count_i != 0 {
            return None;
        }
        // The dim whose count `i` wants: preferably one that wants `i`'s
        // count back (one swap settles both), or, when `i` is untiled, one
        // that stays tiled (its leftover tiling serves another dim).
        let candidates: Vec<usize> = (0..have.len())
            .filter(|&d| d != i && have[d] != want[d] && have[d] == want_i)
            .collect();
        let preferred = |d: usize| {
            if count_i == 1 {
                want[d] != 1
            } else {
                want[d] == count_i
            }
        };
        let j = *candidates
            .iter()
            .find(|&&d| preferred(d))
            .or(candidates.first())?;
        let factor = want_i / count_i;
        let moving = minor_axes_with_count(mesh, &dims[j], factor)?;
        let even_src = global[j] % i64::from(have[j]) == 0;
        let even_dst = dims[i].is_empty() || global[i] % i64::from(want_i) == 0;
        if !even_src || !even_dst {
            return None;
        }
        let keep = dims[j].len() - moving.len();
        dims[j].truncate(keep);
        dims[i].extend(&moving);
        have[j] /= factor;
        have[i] *= factor;
        moves.push((j, i, moving));
    }
    None
}

/// The minor end of `axes` whose sizes multiply to `count`, if one does.
fn minor_axes_with_count(mesh: &Mesh, axes: &[Axis], count: u32) -> Option<Vec<Axis>> {
    let mut prod = 1u32;
    for k in (0..=axes.len()).rev() {
        if prod == count {
            return Some(axes[k..].to_vec());
        }
        if k == 0 || prod > count {
            break;
        }
        prod *= mesh.size(axes[k - 1]);
    }
    None
}

/// Where partial sums over `partial` on tiling `s` are reduce-scattered on
/// their way to `to`: the dim `to` tiles further, right after `s`'s own
/// tiling of it and evenly, by partial axes only (an FSDP weight's gradient,
/// partial over data and fsdp, wanted tiled by fsdp), the most such axes
/// first; the rest of `partial` is all-reduced on the shard.
pub(crate) fn scatter_target(
    mesh: &Mesh,
    global: &[i64],
    s: &Sh,
    partial: &[Axis],
    to: &Sh,
) -> Option<(usize, Vec<Axis>)> {
    let mut best: Option<(usize, Vec<Axis>)> = None;
    for (d, &size) in global.iter().enumerate() {
        let Some(extra) = to.dims.get(d)?.strip_prefix(&s.dims.get(d)?[..]) else {
            continue;
        };
        let fits = !extra.is_empty()
            && extra.iter().all(|a| partial.contains(a))
            && size % i64::from(mesh.count(&to.dims[d])) == 0;
        let more = best
            .as_ref()
            .is_none_or(|(_, axes)| mesh.count(extra) > mesh.count(axes));
        if fits && more {
            best = Some((d, extra.to_vec()));
        }
    }
    best
}

/// The axes of `axes` not in `gone`.
pub(crate) fn without(axes: &[Axis], gone: &[Axis]) -> Vec<Axis> {
    axes.iter().filter(|a| !gone.contains(a)).copied().collect()
}

/// Whether partial sums over `partial` that `to` only tiles further (evenly,
/// by other axes) are better sliced first and reduced after: the all-reduce
/// then moves the shard, not the whole value (devices summed together hold
/// the same slice, since the new tiling's axes are not the partial ones).
fn slice_before_reducing(mesh: &Mesh, global: &[i64], s: &Sh, partial: &[Axis], to: &Sh) -> bool {
    let adds_only = (0..s.rank()).all(|d| to.dims[d].starts_with(&s.dims[d]));
    let even = (0..s.rank()).all(|d| global[d] % i64::from(mesh.count(&to.dims[d])) == 0);
    let disjoint = to.used().iter().all(|a| !partial.contains(a));
    adds_only && even && disjoint && to.dims != s.dims
}

impl Out {
    /// A replicated broadcast tiled only along the dims it creates is the same
    /// broadcast at the local shape (XLA never materializes the global one).
    fn rebroadcast(
        &mut self,
        cb: &mut CompB,
        x: InstrId,
        global: &[i64],
        from: &Sh,
        to: &Sh,
    ) -> Option<InstrId> {
        let ins = self.m.instr(x);
        if ins.opcode != Opcode::Broadcast || !from.is_replicated() || !to.partial.is_empty() {
            return None;
        }
        let mapped: Vec<usize> = ins
            .attr_ints("dimensions")?
            .iter()
            .map(|&d| d as usize)
            .collect();
        if (0..to.rank()).any(|d| mapped.contains(&d) && !to.dims[d].is_empty()) {
            return None;
        }
        let operand = *ins.operands.first()?;
        let attrs = ins.attrs.clone();
        let shape = Shape::array(self.ty(x), to.local_dims(&self.mesh, global));
        Some(self.emit(
            cb,
            "broadcast",
            Opcode::Broadcast,
            shape,
            vec![operand],
            attrs,
        ))
    }
}

fn common_prefix(a: &[Axis], b: &[Axis]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The shards of a dim that take part in a halo exchange: the exchange's
/// shard `k` is tile `shards[k]` of the dim's axes (every tile, in order,
/// unless the plan trims some).
struct Shards {
    groups: Vec<Vec<i64>>,
    shards: Vec<i64>,
    /// Per device: its exchange shard (0 for a device left out: its rows
    /// are padding).
    index: Vec<i64>,
}

impl Shards {
    fn new(mesh: &Mesh, axes: &[Axis], shards: Vec<i64>) -> Shards {
        let index = mesh
            .first_rows(axes, 1)
            .into_iter()
            .map(|tile| shards.iter().position(|&s| s == tile).unwrap_or(0) as i64)
            .collect();
        Shards {
            groups: mesh.groups(axes),
            shards,
            index,
        }
    }

    /// Device pairs, in every group, for pairs of exchange shards.
    fn pairs(&self, shard_pairs: impl Iterator<Item = (i64, i64)> + Clone) -> Vec<Vec<i64>> {
        self.groups
            .iter()
            .flat_map(|g| {
                shard_pairs.clone().map(move |(a, b)| {
                    let tile = |k: i64| g[self.shards[k as usize] as usize];
                    vec![tile(a), tile(b)]
                })
            })
            .collect()
    }

    /// Each shard sent `by` shards along (negative: towards lower ones);
    /// listed by source going forward, by target going back.
    fn shifted(&self, by: i64) -> Vec<Vec<i64>> {
        let n = self.shards.len() as i64;
        let shard_pairs = (0..n).filter_map(move |k| {
            let (from, to) = if by > 0 { (k, k + by) } else { (k - by, k) };
            ((0..n).contains(&from) && (0..n).contains(&to)).then_some((from, to))
        });
        self.pairs(shard_pairs)
    }
}
