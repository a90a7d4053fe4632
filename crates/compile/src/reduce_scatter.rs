//! `all-reduce` whose only user slices out this device's shard
//! (`dynamic-slice` at an offset computed from `partition-id`/`replica-id`)
//! becomes a `reduce-scatter` (XLA's ReduceScatterCreator): each device
//! receives only its shard, so the collective moves `1/n` of the bytes.
//!
//! A slice separated from its all-reduce by element-wise ops, transposes and
//! reshapes that nothing else reads (the dequantization of an int8 dot's
//! partial sums, a convert to bf16, the transpose of a weight gradient) is
//! first moved above them: slicing commutes with element-wise ops (their
//! other operands are sliced alike), with a transpose (on the dimension the
//! sliced one comes from) and with a reshape that keeps the sliced dimension
//! whole, so the rewrite is exact and the ops then run on the shard only.

use crate::util::{
    all_names, control_computations, expanded_groups, group_size, push_instr, replace_all_uses,
    replace_uses, resized, sort_attrs, topo_sort, users,
};
use crate::Changed;
use rustc_hash::{FxHashMap, FxHashSet};
use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::NameTable;
use tpusim_hlo::{Attr, AttrValue, CompId, InstrId, Instruction, Module, Opcode};

/// How far up an offset's operands the pass looks for the device id.
const MAX_OFFSET_DEPTH: u32 = 12;

/// How many element-wise ops, transposes and reshapes a slice is moved above to reach
/// its all-reduce.
const MAX_SINK_DEPTH: usize = 8;

/// Rounds of slice moving per computation.
const MAX_SINK_ROUNDS: usize = 4;

/// Rewrites every matching all-reduce + dynamic-slice pair; returns how many.
pub fn all_reduce_to_reduce_scatter(m: &mut Module) -> Changed {
    let mut rewritten = 0;
    let mut sunk = 0;
    let mut gathers = 0;
    let mut channels = crate::util::ChannelIds::new(m);
    let mut names = None;
    for c in control_computations(m) {
        // Slicing an element-wise op slices its other operands too, which
        // may lead to further all-reduces: repeat while slices move.
        for _ in 0..MAX_SINK_ROUNDS {
            let moved = sink_slices_to_all_reduces(m, c, &mut channels, &mut gathers, &mut names);
            sunk += moved;
            if moved == 0 {
                break;
            }
        }
        let uses = users(m, c);
        let mut pairs = Vec::new();
        for &ds in &m.comp(c).instrs {
            let ins = m.instr(ds);
            if ins.opcode != Opcode::DynamicSlice {
                continue;
            }
            let ar = ins.operands[0];
            let only_user = uses.get(&ar).is_some_and(|u| u.len() == 1);
            if m.comp(c).root == ar || !only_user {
                continue;
            }
            if let Some(dim) = shard_dimension(m, ar, ds) {
                pairs.push((ar, ds, dim));
            }
        }
        // All pairs of the computation rewritten in one sweep of its order
        // and uses.
        let mut gone = FxHashSet::default();
        let mut by_slice = FxHashMap::default();
        for (ar, ds, dim) in pairs {
            by_slice.insert(ds, reduce_scatter_for(m, ar, ds, dim));
            gone.insert(ar);
            rewritten += 1;
        }
        if !by_slice.is_empty() {
            let comp = &mut m.comps[c.index()];
            comp.instrs.retain(|i| !gone.contains(i));
            for i in &mut comp.instrs {
                if let Some(&rs) = by_slice.get(i) {
                    *i = rs;
                }
            }
            replace_all_uses(m, c, &by_slice);
        }
    }
    Changed::count(rewritten, |n| {
        let moved = match (sunk, gathers) {
            (0, _) => String::new(),
            (s, 0) => format!(" ({s} slices first moved above the ops between them)"),
            (s, g) => format!(
                " ({s} slices first moved above the ops between them; {g} values \
                 also read whole rebuilt by an all-gather of the narrower shard)"
            ),
        };
        format!("{n} all-reduce + dynamic-slice → reduce-scatter{moved}")
    })
}

/// A dynamic-slice that takes `size` elements of dimension `dim` at
/// `offset` and all of every other dimension (at constant zero offsets, one
/// of which is `zero`; none in rank 1).
#[derive(Clone, Copy)]
struct OneDimSlice {
    dim: usize,
    size: i64,
    offset: InstrId,
    zero: Option<InstrId>,
}

fn one_dim_slice(m: &Module, ds: InstrId) -> Option<OneDimSlice> {
    let ins = m.instr(ds);
    let full = m.instr(*ins.operands.first()?).shape.dims();
    let sizes = ins.attr_ints("dynamic_slice_sizes")?;
    let offsets = &ins.operands[1..];
    if sizes.len() != full.len() || offsets.len() != full.len() {
        return None;
    }
    let mut sliced = None;
    let mut zero = None;
    for (d, (&size, &dim)) in sizes.iter().zip(full).enumerate() {
        if size == dim && is_zero(m.instr(offsets[d])) {
            zero = Some(offsets[d]);
            continue;
        }
        if sliced.is_some() {
            return None;
        }
        sliced = Some((d, size, offsets[d]));
    }
    let (dim, size, offset) = sliced?;
    Some(OneDimSlice {
        dim,
        size,
        offset,
        zero,
    })
}

/// The slice of `op`'s operand `from` that equals slicing `op`'s result with
/// `s`, when `op` is element-wise, a transpose (the slice moves to the
/// operand dimension the sliced one comes from) or a reshape keeping
/// dimension `s.dim` whole.
fn slice_through(m: &Module, op: InstrId, from: InstrId, s: OneDimSlice) -> Option<OneDimSlice> {
    let ins = m.instr(op);
    if ins.opcode.is_elementwise() {
        return (m.instr(from).shape.dims() == ins.shape.dims()).then_some(s);
    }
    if ins.opcode == Opcode::Transpose {
        let from_dim = *ins.attr_ints("dimensions")?.get(s.dim)?;
        return Some(OneDimSlice {
            dim: usize::try_from(from_dim).ok()?,
            ..s
        });
    }
    if ins.opcode != Opcode::Reshape {
        return None;
    }
    let out = ins.shape.dims();
    let inp = m.instr(from).shape.dims();
    let before: i64 = out[..s.dim].iter().product();
    let mut acc = 1i64;
    for (e, &d) in inp.iter().enumerate() {
        if acc == before && d == out[s.dim] {
            return Some(OneDimSlice { dim: e, ..s });
        }
        acc = acc.checked_mul(d)?;
    }
    None
}

/// Ops from a dynamic-slice's operand up to (not including) an all-reduce
/// that only this chain reads, each read only by the next: `(op, operand
/// on the path, slice of that operand)`.
type SinkPath = Vec<(InstrId, InstrId, OneDimSlice)>;

/// The path from `ds` up to its all-reduce, and whether the slice's own
/// operand is also read whole by others (a branch: those then read an
/// all-gather of the shard).
fn path_to_all_reduce(
    m: &Module,
    c: CompId,
    uses: &FxHashMap<InstrId, Vec<InstrId>>,
    ds: InstrId,
) -> Option<(SinkPath, InstrId, OneDimSlice, bool)> {
    let single_use = |i: InstrId| m.comp(c).root != i && uses.get(&i).is_some_and(|u| u.len() == 1);
    let mut s = one_dim_slice(m, ds)?;
    let mut cur = m.instr(ds).operands[0];
    let branch = !single_use(cur);
    let mut path = Vec::new();
    for _ in 0..MAX_SINK_DEPTH {
        let is_branch = branch && path.is_empty() && m.comp(c).root != cur;
        if !single_use(cur) && !is_branch {
            return None;
        }
        if m.instr(cur).opcode == Opcode::AllReduce {
            return (!path.is_empty() && single_use(cur)).then_some((path, cur, s, branch));
        }
        let ins = m.instr(cur);
        let next =
            ins.operands.iter().copied().find(|&o| {
                single_use(o) && reaches_all_reduce(m, o, MAX_SINK_DEPTH - path.len())
            })?;
        let below = slice_through(m, cur, next, s)?;
        path.push((cur, next, s));
        s = below;
        cur = next;
    }
    None
}

fn reaches_all_reduce(m: &Module, id: InstrId, depth: usize) -> bool {
    let ins = m.instr(id);
    ins.opcode == Opcode::AllReduce
        || (depth > 0
            && (ins.opcode.is_elementwise()
                || matches!(ins.opcode, Opcode::Reshape | Opcode::Transpose))
            && ins
                .operands
                .iter()
                .any(|&o| reaches_all_reduce(m, o, depth - 1)))
}

/// Moves every dynamic-slice that reaches an all-reduce through element-wise
/// ops and reshapes above them, so it reads the all-reduce directly.
fn sink_slices_to_all_reduces(
    m: &mut Module,
    c: CompId,
    channels: &mut crate::util::ChannelIds,
    gathers: &mut usize,
    module_names: &mut Option<NameTable>,
) -> usize {
    let uses = users(m, c);
    let slices: Vec<InstrId> = m
        .comp(c)
        .instrs
        .iter()
        .copied()
        .filter(|&i| m.instr(i).opcode == Opcode::DynamicSlice)
        .collect();
    let mut sunk = 0;
    for ds in slices {
        let Some((path, ar, top, branch)) = path_to_all_reduce(m, c, &uses, ds) else {
            continue;
        };
        // A value others read whole is rebuilt by an all-gather of the
        // shard: worth it only when it is narrower than the all-reduce
        // (reduce-scatter + all-gather then move fewer bytes), and exact only
        // when the slice is this device's shard of the all-reduce's group.
        let full = path[0].0;
        if branch
            && (m.instr(full).shape.byte_size() >= m.instr(ar).shape.byte_size()
                || !is_group_shard(m, ar, top)
                || !others_uniform(m, &path, ar))
        {
            continue;
        }
        // Every name in the module, gathered once and only when needed.
        let names = module_names.get_or_insert_with(|| all_names(m));
        let mut added = Vec::new();
        // Slicing the path's other operands needs a zero offset for their
        // other dimensions (a reshape on the way may add some); a rank-1
        // slice has none of its own.
        let (path, top) = match top.zero {
            Some(_) => (path, top),
            None => {
                let zero = zero_like(m, names, ds, top.offset);
                added.push(zero);
                let with_zero = |s: OneDimSlice| OneDimSlice {
                    zero: Some(zero),
                    ..s
                };
                let path = path
                    .into_iter()
                    .map(|(op, on_path, s)| (op, on_path, with_zero(s)))
                    .collect();
                (path, with_zero(top))
            }
        };
        let mut below = slice_instr(m, names, ds, ar, top);
        added.push(below);
        for &(op, on_path, s) in path.iter().rev() {
            let ins = m.instr(op).clone();
            let mut operands = Vec::with_capacity(ins.operands.len());
            for &o in &ins.operands {
                if o == on_path {
                    operands.push(below);
                } else {
                    let sliced = slice_instr(m, names, ds, o, s);
                    added.push(sliced);
                    operands.push(sliced);
                }
            }
            below = push_instr(
                m,
                Instruction {
                    shape: resized(&ins.shape, s.dim, s.size),
                    operands,
                    name: names.fresh(&format!("{}.shard", ins.name)),
                    ..ins
                },
            );
            added.push(below);
        }
        m.comps[c.index()].instrs.extend(added);
        replace_uses(m, c, ds, below);
        if branch {
            let first = path[0].2;
            let gathered = gather_instr(m, names, ar, below, full, first.dim, channels.fresh());
            m.comps[c.index()].instrs.push(gathered);
            replace_uses(m, c, full, gathered);
            *gathers += 1;
        }
        let chain: Vec<InstrId> = path.iter().map(|p| p.0).chain([ds]).collect();
        m.comps[c.index()].instrs.retain(|i| !chain.contains(i));
        topo_sort(m, c);
        sunk += 1;
    }
    sunk
}

/// Whether `s` (a slice of all-reduce `ar`'s result) takes this device's
/// `1/n` of the dimension, `n` the all-reduce's group size.
fn is_group_shard(m: &Module, ar: InstrId, s: OneDimSlice) -> bool {
    let a = m.instr(ar);
    group_size(m, a).is_some_and(|n| {
        n > 1
            && s.size.checked_mul(n) == a.shape.dims().get(s.dim).copied()
            && depends_on_device_id(m, s.offset, MAX_OFFSET_DEPTH)
    })
}

/// Whether every operand the path's ops read besides the path itself holds
/// the same value on every device of `ar`'s groups: only then does an
/// all-gather of the shards rebuild what each device computed whole.
fn others_uniform(m: &Module, path: &SinkPath, ar: InstrId) -> bool {
    let Some(ours) = expanded_groups(m.instr(ar)).filter(|g| !g.is_empty()) else {
        return false;
    };
    let ctx = Uniformity {
        group_of: ours
            .iter()
            .enumerate()
            .flat_map(|(k, g)| g.iter().map(move |&d| (d, k)))
            .collect(),
        ours,
    };
    let mut memo = FxHashMap::default();
    path.iter().all(|&(op, on_path, _)| {
        m.instr(op)
            .operands
            .iter()
            .filter(|&&o| o != on_path)
            .all(|&o| ctx.uniform(m, o, MAX_UNIFORM_DEPTH, &mut memo))
    })
}

/// How far up its operands a value is followed to show it uniform.
const MAX_UNIFORM_DEPTH: u32 = 16;

/// Which values hold the same on every device of each of `ours`.
struct Uniformity {
    ours: Vec<Vec<i64>>,
    group_of: FxHashMap<i64, usize>,
}

impl Uniformity {
    /// Whether `id` is the same on every device of each of our groups: a
    /// constant; an all-reduce or all-gather over our groups or all devices,
    /// or over groups that pair our groups' devices position by position
    /// (another mesh axis) of a uniform operand; or an op of uniform
    /// operands that does not read the device id, a parameter, a random
    /// state or a called computation (those are not shown uniform).
    fn uniform(
        &self,
        m: &Module,
        id: InstrId,
        depth: u32,
        memo: &mut FxHashMap<InstrId, bool>,
    ) -> bool {
        if let Some(&known) = memo.get(&id) {
            return known;
        }
        let ins = m.instr(id);
        let operands_uniform = |memo: &mut FxHashMap<InstrId, bool>| {
            depth > 0
                && ins
                    .operands
                    .iter()
                    .all(|&o| self.uniform(m, o, depth - 1, memo))
        };
        let answer = match ins.opcode {
            Opcode::Constant | Opcode::Iota => true,
            Opcode::AllReduce | Opcode::AllGather => match expanded_groups(ins) {
                Some(theirs) if theirs.is_empty() || theirs == self.ours => true,
                Some(theirs) => self.aligned(&theirs) && operands_uniform(memo),
                None => false,
            },
            Opcode::Parameter
            | Opcode::PartitionId
            | Opcode::ReplicaId
            | Opcode::Rng
            | Opcode::RngBitGenerator
            | Opcode::RngGetAndUpdateState
            | Opcode::CustomCall
            | Opcode::While
            | Opcode::Call
            | Opcode::Conditional
            | Opcode::Fusion
            | Opcode::Infeed
            | Opcode::Recv => false,
            op if op.category() == tpusim_hlo::OpCategory::Collective => false,
            _ => operands_uniform(memo),
        };
        memo.insert(id, answer);
        answer
    }

    /// Whether, for any two devices of one of our groups, their groups in
    /// `theirs` hold, position by position, devices of one of our groups.
    fn aligned(&self, theirs: &[Vec<i64>]) -> bool {
        let of: FxHashMap<i64, &Vec<i64>> = theirs
            .iter()
            .flat_map(|g| g.iter().map(move |&d| (d, g)))
            .collect();
        self.ours.iter().all(|g| {
            let Some(first) = g.first().and_then(|d| of.get(d)) else {
                return false;
            };
            g.iter().skip(1).all(|d| {
                of.get(d).is_some_and(|other| {
                    other.len() == first.len()
                        && first
                            .iter()
                            .zip(other.iter())
                            .all(|(a, b)| self.group_of.get(a) == self.group_of.get(b))
                })
            })
        })
    }
}

/// `all-gather(shard)` along `dim` over `ar`'s groups, shaped like `full`.
fn gather_instr(
    m: &mut Module,
    names: &mut NameTable,
    ar: InstrId,
    shard: InstrId,
    full: InstrId,
    dim: usize,
    channel: i64,
) -> InstrId {
    let a = m.instr(ar);
    let mut attrs: Vec<Attr> = a
        .attrs
        .iter()
        .filter(|x| !matches!(x.name.as_ref(), "to_apply" | "metadata" | "channel_id"))
        .cloned()
        .collect();
    attrs.push(Attr {
        name: "dimensions".into(),
        value: AttrValue::Ints(vec![dim as i64]),
    });
    if a.attr("channel_id").is_some() {
        attrs.push(Attr {
            name: "channel_id".into(),
            value: AttrValue::Int(channel),
        });
    }
    sort_attrs(&mut attrs);
    let f = m.instr(full);
    let ins = Instruction {
        name: names.fresh(&format!("{}.gathered", f.name)),
        opcode: Opcode::AllGather,
        shape: f.shape.clone(),
        operands: vec![shard],
        attrs,
        parent: f.parent,
        parameter_number: None,
        literal: None,
        async_sugar: None,
    };
    push_instr(m, ins)
}

/// A scalar zero of `offset`'s type, placed like `like`.
fn zero_like(m: &mut Module, names: &mut NameTable, like: InstrId, offset: InstrId) -> InstrId {
    let ins = Instruction {
        name: names.fresh("constant.zero"),
        opcode: Opcode::Constant,
        shape: m.instr(offset).shape.clone(),
        operands: Vec::new(),
        attrs: Vec::new(),
        parent: m.instr(like).parent,
        parameter_number: None,
        literal: Some(Literal::Array(LiteralData::Int(vec![0]))),
        async_sugar: None,
    };
    push_instr(m, ins)
}

/// A dynamic-slice of `of` described by `s`, named and placed like `like`.
fn slice_instr(
    m: &mut Module,
    names: &mut NameTable,
    like: InstrId,
    of: InstrId,
    s: OneDimSlice,
) -> InstrId {
    let src = m.instr(of);
    let rank = src.shape.rank();
    let shape = resized(&src.shape, s.dim, s.size);
    let sizes = shape.dims().to_vec();
    let mut operands = vec![of];
    // Every sunk slice has a zero offset (`zero_like` made one for a rank-1
    // slice); the offset stands in only where no other dimension needs it.
    let zero = s.zero.unwrap_or(s.offset);
    operands.extend((0..rank).map(|d| if d == s.dim { s.offset } else { zero }));
    let l = m.instr(like);
    let ins = Instruction {
        name: names.fresh(&l.name),
        opcode: Opcode::DynamicSlice,
        shape,
        operands,
        attrs: vec![Attr {
            name: "dynamic_slice_sizes".into(),
            value: AttrValue::Ints(sizes),
        }],
        parent: l.parent,
        parameter_number: None,
        literal: None,
        async_sugar: None,
    };
    push_instr(m, ins)
}

/// The dimension `ds` slices out of all-reduce `ar` when it takes exactly this
/// device's `1/n` shard of one dimension and all of the others.
fn shard_dimension(m: &Module, ar: InstrId, ds: InstrId) -> Option<usize> {
    let a = m.instr(ar);
    if a.opcode != Opcode::AllReduce || a.operands.len() != 1 || a.shape.is_tuple() {
        return None;
    }
    let s = one_dim_slice(m, ds)?;
    is_group_shard(m, ar, s).then_some(s.dim)
}

fn is_zero(ins: &Instruction) -> bool {
    ins.opcode == Opcode::Constant && ins.literal.as_ref().is_some_and(Literal::is_all_zero)
}

/// Whether `id` is computed from `partition-id`/`replica-id`, also through
/// a loop's invariant state: XLA:CPU's loop-invariant code motion hoists a
/// slice's offset out of a scan and carries it in, where XLA:TPU's
/// reduce-scatter creation, which runs before it, saw it computed in place.
fn depends_on_device_id(m: &Module, id: InstrId, depth: u32) -> bool {
    let ins = m.instr(id);
    if matches!(ins.opcode, Opcode::PartitionId | Opcode::ReplicaId) {
        return true;
    }
    if depth == 0 {
        return false;
    }
    if let Some(init) = loop_invariant_init(m, id) {
        return depends_on_device_id(m, init, depth - 1);
    }
    ins.operands
        .iter()
        .any(|&o| depends_on_device_id(m, o, depth - 1))
}

/// For `get-tuple-element(parameter, i)` in a loop body whose root passes
/// element `i` through unchanged, the value the loop starts with: element
/// `i` of the tuple its `while` is given.
fn loop_invariant_init(m: &Module, id: InstrId) -> Option<InstrId> {
    let element = |i: &Instruction| match i.attr("index") {
        Some(AttrValue::Int(k)) => usize::try_from(*k).ok(),
        _ => None,
    };
    let ins = m.instr(id);
    if ins.opcode != Opcode::GetTupleElement {
        return None;
    }
    let param = *ins.operands.first()?;
    if m.instr(param).opcode != Opcode::Parameter {
        return None;
    }
    let k = element(ins)?;
    let body = ins.parent;
    let root = m.instr(m.comp(body).root);
    let passed = m.instr(*root.operands.get(k)?);
    let invariant = root.opcode == Opcode::Tuple
        && passed.opcode == Opcode::GetTupleElement
        && passed.operands.first() == Some(&param)
        && element(passed) == Some(k);
    if !invariant {
        return None;
    }
    // The one `while` running this body (a body shared by several has no
    // single start value).
    let mut loops = m.instrs.iter().filter(|x| {
        x.opcode == Opcode::While
            && matches!(x.attr("body"), Some(AttrValue::Comp(b)) if *b == body)
    });
    let w = loops.next()?;
    if loops.next().is_some() {
        return None;
    }
    let init = m.instr(*w.operands.first()?);
    (init.opcode == Opcode::Tuple)
        .then(|| init.operands.get(k).copied())
        .flatten()
}

fn reduce_scatter_for(m: &mut Module, ar: InstrId, ds: InstrId, dim: usize) -> InstrId {
    let a = m.instr(ar).clone();
    let d = m.instr(ds);
    let mut attrs: Vec<Attr> = a
        .attrs
        .iter()
        .filter(|x| x.name != "metadata")
        .cloned()
        .collect();
    attrs.push(Attr {
        name: "dimensions".into(),
        value: AttrValue::Ints(vec![dim as i64]),
    });
    if let Some(md) = d.attr("metadata") {
        attrs.push(Attr {
            name: "metadata".into(),
            value: md.clone(),
        });
    }
    sort_attrs(&mut attrs);
    let rs = Instruction {
        name: d.name.clone(),
        opcode: Opcode::ReduceScatter,
        shape: d.shape.clone(),
        operands: a.operands.clone(),
        attrs,
        parent: a.parent,
        parameter_number: None,
        literal: None,
        async_sugar: None,
    };
    // The slice's name is taken over; rename the dead slice so names stay unique.
    m.instrs[ds.index()].name = format!("{}.sliced", d.name);
    push_instr(m, rs)
}
