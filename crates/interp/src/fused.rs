//! Tiled evaluation of elementwise chains.
//!
//! In any computation (a fusion body, a loop body, an unfused entry), a chain
//! of float elementwise ops (bias add, activation, scaling, residual add) that
//! ends where a non-elementwise op reads it is evaluated tile by tile: every op
//! of the chain runs on a few thousand elements that stay in cache, in
//! parallel across tiles, and only the chain's end is materialized. Whatever
//! feeds the chain (parameters, dots, reductions) is evaluated normally first;
//! scalar constants broadcast into it are never materialized. Results are identical to op-by-op evaluation: each
//! op computes in f32 and rounds to its own type (bf16/f16) exactly as the
//! whole-array kernels do.

use crate::elementwise::{float_binary32, float_unary32};
use crate::eval::{array_dims, Interp};
use crate::value::same_dims;
use crate::value::{Array, Data, Value};
use crate::InterpError;
use half::{bf16, f16};
use rayon::prelude::*;
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use tpusim_hlo::{CompId, InstrId, OpCategory, Opcode, PrimitiveType as T};

/// Elements per tile: large enough to amortize the per-op loop, small enough that
/// a chain's intermediates stay in L1/L2.
const TILE: usize = 2048;

/// From this many elements a chain is tiled even when it is a single op (its
/// tiles then run in parallel); below it, only chains of two or more ops,
/// which save an allocation and a dispatch per op (a scan body's small
/// elementwise chains run once per iteration).
const MIN_ELEMS: usize = 1 << 14;

/// One op of the chain, reading earlier nodes or inputs by index.
enum Node {
    /// Input `k` (a full-size array, read per tile).
    Input(usize),
    /// A scalar broadcast to the whole shape.
    Splat(f32),
    Unary(Un, usize),
    Binary(Bin, usize, usize),
}

/// A unary op: the common ones as variants so their tile loops are
/// monomorphic and vectorize; the rest through the whole-array kernel's function.
#[derive(Clone, Copy)]
enum Un {
    Negate,
    Abs,
    Exp,
    Tanh,
    Other(fn(f32) -> f32),
}

/// A binary op, likewise.
#[derive(Clone, Copy)]
enum Bin {
    Add,
    Subtract,
    Multiply,
    Divide,
    Maximum,
    Minimum,
    Other(fn(f32, f32) -> f32),
}

impl Un {
    fn of(op: Opcode) -> Option<Un> {
        Some(match op {
            Opcode::Negate => Un::Negate,
            Opcode::Abs => Un::Abs,
            Opcode::Exp => Un::Exp,
            Opcode::Tanh => Un::Tanh,
            _ => Un::Other(float_unary32(op)?),
        })
    }
}

impl Bin {
    fn of(op: Opcode) -> Option<Bin> {
        Some(match op {
            Opcode::Add => Bin::Add,
            Opcode::Subtract => Bin::Subtract,
            Opcode::Multiply => Bin::Multiply,
            Opcode::Divide => Bin::Divide,
            Opcode::Maximum => Bin::Maximum,
            Opcode::Minimum => Bin::Minimum,
            _ => Bin::Other(float_binary32(op)?),
        })
    }
}

/// `dst[i] = round(f(src[i]))` in a loop the compiler can vectorize. The
/// loops index directly (no iterator adapters, which the compiler may leave
/// as calls compiled without the caller's AVX2).
#[inline(always)]
fn map_un(src: &[f32], dst: &mut [f32], round: Round, f: impl Fn(f32) -> f32) {
    let n = dst.len().min(src.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    match round {
        Round::F32 => {
            for i in 0..n {
                dst[i] = f(src[i]);
            }
        }
        Round::Bf16 => {
            for i in 0..n {
                dst[i] = bf16::from_f32(f(src[i])).to_f32();
            }
        }
        Round::F16 => {
            for i in 0..n {
                dst[i] = f16::from_f32(f(src[i])).to_f32();
            }
        }
    }
}

#[inline(always)]
fn map_bin(x: &[f32], y: &[f32], dst: &mut [f32], round: Round, f: impl Fn(f32, f32) -> f32) {
    let n = dst.len().min(x.len()).min(y.len());
    let (x, y, dst) = (&x[..n], &y[..n], &mut dst[..n]);
    match round {
        Round::F32 => {
            for i in 0..n {
                dst[i] = f(x[i], y[i]);
            }
        }
        Round::Bf16 => {
            for i in 0..n {
                dst[i] = bf16::from_f32(f(x[i], y[i])).to_f32();
            }
        }
        Round::F16 => {
            for i in 0..n {
                dst[i] = f16::from_f32(f(x[i], y[i])).to_f32();
            }
        }
    }
}

#[inline(always)]
fn apply_un(op: Un, src: &[f32], dst: &mut [f32], round: Round) {
    match op {
        Un::Negate => map_un(src, dst, round, |x| -x),
        Un::Abs => map_un(src, dst, round, f32::abs),
        Un::Exp => map_un(src, dst, round, crate::fastmath::exp),
        Un::Tanh => map_un(src, dst, round, crate::fastmath::tanh),
        Un::Other(f) => map_un(src, dst, round, f),
    }
}

#[inline(always)]
fn apply_bin(op: Bin, x: &[f32], y: &[f32], dst: &mut [f32], round: Round) {
    match op {
        Bin::Add => map_bin(x, y, dst, round, |a, b| a + b),
        Bin::Subtract => map_bin(x, y, dst, round, |a, b| a - b),
        Bin::Multiply => map_bin(x, y, dst, round, |a, b| a * b),
        Bin::Divide => map_bin(x, y, dst, round, |a, b| a / b),
        Bin::Maximum => map_bin(x, y, dst, round, crate::elementwise::fmax),
        Bin::Minimum => map_bin(x, y, dst, round, crate::elementwise::fmin),
        Bin::Other(f) => map_bin(x, y, dst, round, f),
    }
}

/// A whole f32 array through unary `op`, with the chain's monomorphic loops
/// (a loop through a function pointer does not vectorize), in parallel chunks
/// for large arrays. `None` when `op` is not a float unary op.
pub(crate) fn unary_f32(op: Opcode, x: &[f32]) -> Option<Vec<f32>> {
    let u = Un::of(op)?;
    let mut out = vec![0.0f32; x.len()];
    if x.len() < crate::strided::PAR_MIN_ELEMS {
        apply_un(u, x, &mut out, Round::F32);
    } else {
        out.par_chunks_mut(TILE)
            .zip(x.par_chunks(TILE))
            .for_each(|(d, s)| apply_un(u, s, d, Round::F32));
    }
    Some(out)
}

/// Binary `op` over two f32 arrays of one length, likewise.
pub(crate) fn binary_f32(op: Opcode, x: &[f32], y: &[f32]) -> Option<Vec<f32>> {
    let b = Bin::of(op)?;
    let n = x.len().min(y.len());
    let mut out = vec![0.0f32; n];
    if n < crate::strided::PAR_MIN_ELEMS {
        apply_bin(b, &x[..n], &y[..n], &mut out, Round::F32);
    } else {
        out.par_chunks_mut(TILE)
            .zip(x.par_chunks(TILE).zip(y.par_chunks(TILE)))
            .for_each(|(d, (p, q))| apply_bin(b, p, q, d, Round::F32));
    }
    Some(out)
}

/// The element type a node's f32 result is rounded to when stored.
#[derive(Clone, Copy)]
enum Round {
    F32,
    Bf16,
    F16,
}

fn rounding(ty: T) -> Option<Round> {
    match ty {
        T::F32 => Some(Round::F32),
        T::Bf16 => Some(Round::Bf16),
        T::F16 => Some(Round::F16),
        _ => None,
    }
}

/// A compiled chain: nodes in evaluation order, the last one is the root.
pub(crate) struct Plan {
    nodes: Vec<(Node, Round)>,
    /// Instructions evaluated normally whose results feed `Node::Input`.
    pub inputs: Vec<InstrId>,
    /// Instructions the plan computes itself (chain ops, scalar broadcasts).
    covered: Vec<InstrId>,
    root_ty: T,
    dims: Vec<usize>,
    /// Nodes before the root that compute a tile (not inputs): the scratch
    /// tiles a tile's evaluation needs.
    scratch_tiles: usize,
}

impl Plan {
    fn worth_tiling(&self) -> bool {
        self.covered.len() >= 2 || self.dims.iter().product::<usize>() >= MIN_ELEMS
    }
}

fn is_chain_op(op: Opcode) -> bool {
    matches!(op.category(), OpCategory::Unary | OpCategory::Binary)
        && !matches!(
            op,
            Opcode::Convert | Opcode::ReducePrecision | Opcode::Compare | Opcode::IsFinite
        )
}

/// How computation `c` is evaluated with tiling: the instructions a plan
/// computes (chain ends), and those nobody needs materialized.
pub(crate) struct Tiling {
    pub plans: HashMap<InstrId, Rc<Plan>>,
    pub internal: HashSet<InstrId>,
}

/// Whether `id` can be a node of a tiled chain.
fn eligible(interp: &Interp, id: InstrId) -> bool {
    let ins = interp.m.instr(id);
    is_chain_op(ins.opcode) && array_dims(&ins.shape).is_ok_and(|(ty, _)| rounding(ty).is_some())
}

/// Finds the tiled chains of computation `c`.
pub(crate) fn tiling(interp: &Interp, c: CompId) -> Tiling {
    let m = interp.m;
    let comp = m.comp(c);
    let mut tiling = Tiling {
        plans: HashMap::new(),
        internal: HashSet::new(),
    };
    let candidates: Vec<InstrId> = comp
        .instrs
        .iter()
        .copied()
        .filter(|&id| eligible(interp, id))
        .collect();
    if candidates.is_empty() {
        return tiling;
    }
    let mut users: HashMap<InstrId, Vec<InstrId>> = HashMap::new();
    for &id in &comp.instrs {
        for &o in &m.instr(id).operands {
            users.entry(o).or_default().push(id);
        }
    }
    let no_users = Vec::new();
    let users_of = |id: &InstrId| users.get(id).unwrap_or(&no_users);
    for &id in &candidates {
        let ends_chain = id == comp.root || users_of(&id).iter().any(|&u| !eligible(interp, u));
        if ends_chain {
            if let Some(p) = plan(interp, id).filter(Plan::worth_tiling) {
                tiling.plans.insert(id, Rc::new(p));
            }
        }
    }
    let covered: HashSet<InstrId> = tiling
        .plans
        .values()
        .flat_map(|p| p.covered.iter().copied())
        .collect();
    tiling.internal = covered
        .iter()
        .copied()
        .filter(|id| {
            !tiling.plans.contains_key(id)
                && *id != comp.root
                && users_of(id).iter().all(|u| covered.contains(u))
        })
        .collect();
    tiling
}

/// Builds the plan of the chain ending at `root`.
fn plan(interp: &Interp, root: InstrId) -> Option<Plan> {
    let (root_ty, dims) = array_dims(&interp.m.instr(root).shape).ok()?;
    let mut index: HashMap<InstrId, usize> = HashMap::new();
    let mut p = Plan {
        nodes: Vec::new(),
        inputs: Vec::new(),
        covered: Vec::new(),
        root_ty,
        dims,
        scratch_tiles: 0,
    };
    build(interp, root, &mut index, &mut p, 0)?;
    let before_root = &p.nodes[..p.nodes.len().saturating_sub(1)];
    p.scratch_tiles = before_root
        .iter()
        .filter(|(n, _)| !matches!(n, Node::Input(_)))
        .count();
    Some(p)
}

/// Adds `id` (and what it reads) to the plan; returns its node index.
fn build(
    interp: &Interp,
    id: InstrId,
    index: &mut HashMap<InstrId, usize>,
    p: &mut Plan,
    depth: u32,
) -> Option<usize> {
    if let Some(&k) = index.get(&id) {
        return Some(k);
    }
    if depth > 256 {
        return None;
    }
    let ins = interp.m.instr(id);
    let (ty, dims) = array_dims(&ins.shape).ok()?;
    let round = rounding(ty)?;
    let node = if is_chain_op(ins.opcode) && same_dims(&dims, &p.dims) {
        let mut args = Vec::with_capacity(2);
        for &o in &ins.operands {
            args.push(build(interp, o, index, p, depth + 1)?);
        }
        match (ins.opcode.category(), args.as_slice()) {
            (OpCategory::Unary, [a]) => Node::Unary(Un::of(ins.opcode)?, *a),
            (OpCategory::Binary, [a, b]) => Node::Binary(Bin::of(ins.opcode)?, *a, *b),
            _ => return None,
        }
    } else if let Some(v) = scalar_broadcast(interp, id) {
        Node::Splat(v)
    } else if same_dims(&dims, &p.dims) {
        p.inputs.push(id);
        Node::Input(p.inputs.len() - 1)
    } else {
        return None;
    };
    if !matches!(node, Node::Input(_)) {
        p.covered.push(id);
    }
    p.nodes.push((node, round));
    index.insert(id, p.nodes.len() - 1);
    Some(p.nodes.len() - 1)
}

/// The value of `broadcast(constant scalar)`, if that is what `id` is.
fn scalar_broadcast(interp: &Interp, id: InstrId) -> Option<f32> {
    let m = interp.m;
    let ins = m.instr(id);
    if ins.opcode != Opcode::Broadcast {
        return None;
    }
    let src = m.instr(*ins.operands.first()?);
    if src.opcode != Opcode::Constant || !src.shape.as_array()?.dims.is_empty() {
        return None;
    }
    match src.literal.as_ref()? {
        tpusim_hlo::literal::Literal::Array(tpusim_hlo::literal::LiteralData::Float(v)) => {
            // The constant is stored in its own type; read it as that type would.
            let (ty, _) = array_dims(&src.shape).ok()?;
            rounding(ty)?;
            Array::from_f64s(ty, Vec::new(), &[*v.first()?])
                .to_f32s()
                .first()
                .copied()
        }
        _ => None,
    }
}

/// Evaluates plan `p` on the values of its inputs (in `p.inputs` order).
pub(crate) fn eval_plan(p: &Plan, values: &[Arc<Value>]) -> Result<Arc<Value>, InterpError> {
    // Chains have a handful of inputs and nodes: their lists stay inline
    // (a scan body evaluates its chains once per iteration).
    let arrays: SmallVec<[&Array; 8]> = values
        .iter()
        .map(|v| v.as_array())
        .collect::<Result<_, _>>()?;
    let owned: Vec<Vec<f32>> = arrays
        .iter()
        .filter(|a| !matches!(a.data, Data::F32(_)))
        .map(|a| a.to_f32s())
        .collect();
    let mut narrow = owned.iter();
    let mut inputs: SmallVec<[&[f32]; 8]> = SmallVec::new();
    for a in &arrays {
        match &a.data {
            Data::F32(v) => inputs.push(v),
            _ => inputs.push(
                narrow
                    .next()
                    .ok_or_else(|| InterpError::Internal("fused input count".into()))?,
            ),
        }
    }
    let n: usize = p.dims.iter().product();
    if inputs.len() != p.inputs.len() || inputs.iter().any(|v| v.len() != n) {
        return Err(InterpError::Internal(
            "tiled chain input has the wrong size".into(),
        ));
    }
    let mut out = vec![0f32; n];
    if n <= TILE {
        eval_tile(p, &inputs, 0, &mut out);
    } else {
        out.par_chunks_mut(TILE)
            .enumerate()
            .for_each(|(t, dst)| eval_tile(p, &inputs, t * TILE, dst));
    }
    Ok(Arc::new(Value::Array(Array::from_f32s(
        p.root_ty,
        p.dims.clone(),
        out,
    ))))
}

/// Evaluates every node on elements `[start, start + dst.len())`; inputs are
/// read in place and the last node (the chain's end) is written into `dst`.
///
/// On a CPU with AVX2 the node loops run 8 lanes wide instead of SSE2's 4.
/// The results are the same: AVX2 alone adds no fused multiply-add, and
/// Rust never contracts `a * b + c` into one.
fn eval_tile(p: &Plan, inputs: &[&[f32]], start: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { eval_tile_avx2(p, inputs, start, dst) };
    }
    eval_tile_any(p, inputs, start, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn eval_tile_avx2(p: &Plan, inputs: &[&[f32]], start: usize, dst: &mut [f32]) {
    eval_tile_any(p, inputs, start, dst)
}

#[inline(always)]
fn eval_tile_any(p: &Plan, inputs: &[&[f32]], start: usize, dst: &mut [f32]) {
    // Every node overwrites its whole tile before it is read, so the buffer
    // is only zeroed when it grows. (Taken out of the thread-local rather
    // than used in a closure, which would not run with the caller's AVX2.)
    let mut scratch = SCRATCH.with(std::cell::Cell::take);
    let need = p.scratch_tiles * dst.len();
    if scratch.len() < need {
        scratch.resize(need, 0.0);
    }
    eval_nodes(p, inputs, start, dst, &mut scratch[..need]);
    SCRATCH.with(|s| s.set(scratch));
}

thread_local! {
    /// Tiles of a chain's computed nodes, kept between chains: a scan's
    /// chains run once per iteration, on tiles too small to be worth an
    /// allocation each.
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The node loop of [`eval_tile`], with `scratch` holding one tile per
/// computed node.
#[inline(always)]
fn eval_nodes(p: &Plan, inputs: &[&[f32]], start: usize, dst: &mut [f32], scratch: &mut [f32]) {
    let len = dst.len();
    let range = start..start + len;
    let Some(((last, last_round), rest)) = p.nodes.split_last() else {
        return;
    };
    let mut free = scratch;
    let mut bufs: SmallVec<[&[f32]; 16]> = SmallVec::new();
    for &(ref node, round) in rest {
        let buf: &[f32] = match *node {
            Node::Input(i) => &inputs[i][range.clone()],
            _ => {
                let (v, tail) = std::mem::take(&mut free).split_at_mut(len);
                free = tail;
                eval_node(node, round, &bufs, inputs, start, v);
                v
            }
        };
        bufs.push(buf);
    }
    eval_node(last, *last_round, &bufs, inputs, start, dst);
}

/// Computes one node of a tile into `out`.
#[inline(always)]
fn eval_node(
    node: &Node,
    round: Round,
    bufs: &[&[f32]],
    inputs: &[&[f32]],
    start: usize,
    out: &mut [f32],
) {
    match *node {
        Node::Input(i) => out.copy_from_slice(&inputs[i][start..start + out.len()]),
        Node::Splat(x) => out.fill(x),
        Node::Unary(op, a) => apply_un(op, bufs[a], out, round),
        Node::Binary(op, a, b) => apply_bin(op, bufs[a], bufs[b], out, round),
    }
}
