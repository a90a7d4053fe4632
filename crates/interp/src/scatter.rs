//! `scatter` (HLO_SEMANTICS §7.2) and the combiner machinery select-and-scatter reuses.

use crate::elementwise as ew;
use crate::eval::Interp;
use crate::gather::{dims_attr, offsets, StartIndices};
use crate::lift::{call_scalar, internal, lift_all, scalar_at};
use crate::value::same_dims;
use crate::value::{strides, Array, Data, Value};
use crate::InterpError;
use half::{bf16, f16};
use std::sync::Arc;
use tpusim_hlo::{CompId, Instruction, Opcode, PrimitiveType as T};

/// What a two-parameter combiner `f(p0, p1)` computes, when it is that simple.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Combiner {
    /// Returns p1.
    Second,
    /// Returns p0.
    First,
    /// `op(p0, p1)`, or `op(p1, p0)` when `swapped`.
    Binary { op: Opcode, swapped: bool },
}

/// Recognises combiners that are one parameter or one binary op of both parameters.
pub(crate) fn combiner(interp: &Interp, f: CompId) -> Option<Combiner> {
    let comp = interp.m.comp(f);
    let ps = &comp.params;
    if ps.len() != 2 {
        return None;
    }
    let root = interp.m.instr(comp.root);
    if comp.root == ps[1] {
        return Some(Combiner::Second);
    }
    if comp.root == ps[0] {
        return Some(Combiner::First);
    }
    let op = crate::ops::simple_reducer(interp, f)?;
    Some(Combiner::Binary {
        op,
        swapped: root.operands.first() == Some(&ps[1]),
    })
}

/// Rounds an f32 to element type `ty` and back (the evaluator computes narrow floats in f32).
fn round_fn(ty: T) -> Box<dyn Fn(f32) -> f32> {
    match ty {
        T::Bf16 => Box::new(|x| bf16::from_f32(x).to_f32()),
        T::F16 => Box::new(|x| f16::from_f32(x).to_f32()),
        _ if crate::f8::is_minifloat(ty) => {
            Box::new(move |x| Array::from_op_f32s(ty, vec![1], vec![x]).to_f32s()[0])
        }
        _ => Box::new(|x| x),
    }
}

/// Folds `upd[s]` into `out[d]` for each pair `(d, s)` in order with a simple combiner.
/// `upd_first` passes the update as the combiner's first argument (select-and-scatter).
/// Returns false when this element type / op pair needs the general path.
pub(crate) fn apply_simple(
    c: Combiner,
    upd_first: bool,
    out: &mut Array,
    upd: &Array,
    pairs: &[(usize, usize)],
) -> Result<bool, InterpError> {
    if out.ty != upd.ty {
        return Ok(false);
    }
    let (op, swap) = match c {
        Combiner::First if upd_first => (None, false),
        Combiner::Second if !upd_first => (None, false),
        Combiner::First | Combiner::Second => return Ok(true),
        Combiner::Binary { op, swapped } => (Some(op), swapped ^ upd_first),
    };
    let Some(op) = op else {
        // Overwrite: the last update to an element wins.
        let (d, s): (Vec<usize>, Vec<usize>) = pairs.iter().copied().unzip();
        out.data.put(&d, &upd.data.take(&s))?;
        return Ok(true);
    };
    macro_rules! fold {
        ($o:expr, $u:expr, $f:expr) => {{
            let f = $f;
            for &(d, s) in pairs {
                let (acc, x) = ($o[d], $u[s]);
                $o[d] = if swap { f(x, acc) } else { f(acc, x) };
            }
        }};
    }
    let bits = out.ty.bit_width();
    let ty = out.ty;
    match (&mut out.data, &upd.data) {
        (Data::F32(o), Data::F32(u)) => match ew::float_reducer::<f32>(op) {
            Some(f) => fold!(o, u, f),
            None => return Ok(false),
        },
        (Data::F64(o), Data::F64(u)) => match ew::float_reducer::<f64>(op) {
            Some(f) => fold!(o, u, f),
            None => return Ok(false),
        },
        (Data::I64(o), Data::I64(u)) => {
            if ew::signed_binary(op, 0, 0, bits).is_none() {
                return Ok(false);
            }
            fold!(o, u, |a, b| ew::signed_binary(op, a, b, bits).unwrap_or(0))
        }
        (Data::U64(o), Data::U64(u)) => {
            if ew::unsigned_binary(op, 0, 0, bits).is_none() {
                return Ok(false);
            }
            fold!(o, u, |a, b| ew::unsigned_binary(op, a, b, bits)
                .unwrap_or(0))
        }
        (Data::Pred(o), Data::Pred(u)) => {
            let f: fn(bool, bool) -> bool = match op {
                Opcode::And | Opcode::Minimum | Opcode::Multiply => |a, b| a & b,
                _ => |a, b| a | b,
            };
            fold!(o, u, f)
        }
        (Data::Bf16(_) | Data::F16(_) | Data::F8(_), _) => {
            let Some(f) = ew::float_reducer::<f32>(op) else {
                return Ok(false);
            };
            let round = round_fn(ty);
            let mut o = Array::new(ty, out.dims.clone(), out.data.clone()).to_f32s();
            let u = upd.to_f32s();
            fold!(o, u, |a, b| round(f(a, b)));
            *out = Array::from_op_f32s(ty, out.dims.clone(), o);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Folds with the computation `f`, one call per pair: `outs[k][d] = f(...)[k]`.
pub(crate) fn apply_general(
    interp: &Interp,
    f: CompId,
    upd_first: bool,
    outs: &mut [Array],
    upds: &[&Array],
    pairs: &[(usize, usize)],
) -> Result<(), InterpError> {
    for &(d, s) in pairs {
        let cur = outs.iter().map(|a| scalar_at(a, d));
        let new = upds.iter().map(|a| scalar_at(a, s));
        let args: Vec<Arc<Value>> = if upd_first {
            new.chain(cur).collect()
        } else {
            cur.chain(new).collect()
        };
        let res = call_scalar(interp, f, &args)?;
        if res.len() != outs.len() {
            return Err(internal("combiner returned the wrong number of values"));
        }
        for (o, r) in outs.iter_mut().zip(res) {
            if r.ty != o.ty {
                return Err(internal("combiner result type differs from the operand"));
            }
            o.data.put(&[d], &r.data)?;
        }
    }
    Ok(())
}

/// Folds with `f` lifted over waves of pairs: wave w holds the w-th update of every
/// destination, so a wave's destinations are distinct and the per-destination order is
/// kept. Returns false (having changed nothing) when `f` is not elementwise.
fn apply_waves(
    interp: &Interp,
    f: CompId,
    upd_first: bool,
    outs: &mut [Array],
    upds: &[&Array],
    pairs: &[(usize, usize)],
) -> Result<bool, InterpError> {
    let mut seen = vec![0usize; outs[0].len()];
    let mut waves: Vec<Vec<(usize, usize)>> = Vec::new();
    for &(d, s) in pairs {
        let w = seen[d];
        seen[d] += 1;
        if waves.len() <= w {
            waves.push(Vec::new());
        }
        waves[w].push((d, s));
    }
    for wave in &waves {
        let (dst, src): (Vec<usize>, Vec<usize>) = wave.iter().copied().unzip();
        let m = dst.len();
        let cur: Vec<Array> = outs
            .iter()
            .map(|a| Array::new(a.ty, vec![m], a.data.take(&dst)))
            .collect();
        let new: Vec<Array> = upds
            .iter()
            .map(|a| Array::new(a.ty, vec![m], a.data.take(&src)))
            .collect();
        let params: Vec<Option<&Array>> = if upd_first {
            new.iter().chain(&cur).map(Some).collect()
        } else {
            cur.iter().chain(&new).map(Some).collect()
        };
        let Some(res) = lift_all(interp, f, &params, &[m])? else {
            return Ok(false);
        };
        if res.len() != outs.len() {
            return Err(internal("combiner returned the wrong number of values"));
        }
        for (o, r) in outs.iter_mut().zip(res) {
            if r.ty != o.ty {
                return Err(internal("combiner result type differs from the operand"));
            }
            o.data.put(&dst, &r.data)?;
        }
    }
    Ok(true)
}

/// Applies all pairs with the fast path when `f` is simple, else lifted wave by wave,
/// else call by call.
pub(crate) fn combine(
    interp: &Interp,
    f: CompId,
    upd_first: bool,
    mut outs: Vec<Array>,
    upds: &[&Array],
    pairs: &[(usize, usize)],
) -> Result<Vec<Array>, InterpError> {
    if outs.len() == 1 {
        if let Some(c) = combiner(interp, f) {
            if apply_simple(c, upd_first, &mut outs[0], upds[0], pairs)? {
                return Ok(outs);
            }
        }
    }
    if outs.is_empty() || apply_waves(interp, f, upd_first, &mut outs, upds, pairs)? {
        return Ok(outs);
    }
    apply_general(interp, f, upd_first, &mut outs, upds, pairs)?;
    Ok(outs)
}

/// `(operand offset, update offset)` for every in-bounds update element, in the
/// evaluator's order (scatter positions outer, window positions inner).
fn scatter_pairs(
    ins: &Instruction,
    op_dims: &[usize],
    indices: &Array,
    upd_dims: &[usize],
) -> Result<Vec<(usize, usize)>, InterpError> {
    let window_dims = dims_attr(ins, "update_window_dims");
    let inserted = dims_attr(ins, "inserted_window_dims");
    let index_map = dims_attr(ins, "scatter_dims_to_operand_dims");
    let op_batching = dims_attr(ins, "input_batching_dims");
    let idx_batching = dims_attr(ins, "scatter_indices_batching_dims");
    let ivd = ins
        .attr_int("index_vector_dim")
        .ok_or_else(|| internal("scatter without index_vector_dim"))?
        .max(0) as usize;
    let rank = op_dims.len();
    let si = StartIndices::new(indices, ivd)?;
    si.check(rank, &index_map, &op_batching, &idx_batching)?;
    let scatter_dims: Vec<usize> = (0..upd_dims.len())
        .filter(|d| !window_dims.contains(d))
        .collect();
    let win_op: Vec<usize> = (0..rank)
        .filter(|d| !inserted.contains(d) && !op_batching.contains(d))
        .collect();
    let bad = win_op.len() != window_dims.len()
        || window_dims.iter().any(|&d| d >= upd_dims.len())
        || scatter_dims.len() != si.batch_sizes.len()
        || scatter_dims
            .iter()
            .zip(&si.batch_sizes)
            .any(|(&u, &b)| upd_dims[u] != b);
    if bad {
        return Err(internal(
            "scatter updates do not match its dimension numbers",
        ));
    }
    let mut wsize = vec![1usize; rank];
    for (&o, &u) in win_op.iter().zip(&window_dims) {
        wsize[o] = upd_dims[u];
    }
    let ost = strides(op_dims);
    let ust = strides(upd_dims);
    let win_shape: Vec<usize> = window_dims.iter().map(|&u| upd_dims[u]).collect();
    let win_in = offsets(
        &win_shape,
        &win_op.iter().map(|&o| ost[o]).collect::<Vec<_>>(),
    );
    let win_upd = offsets(
        &win_shape,
        &window_dims.iter().map(|&u| ust[u]).collect::<Vec<_>>(),
    );
    let upd_base = offsets(
        &si.batch_sizes,
        &scatter_dims.iter().map(|&u| ust[u]).collect::<Vec<_>>(),
    );
    let mut pairs = Vec::with_capacity(upd_base.len() * win_in.len());
    for (g, &ub) in upd_base.iter().enumerate() {
        let start = si.full_start(g, rank, &index_map, &op_batching, &idx_batching);
        let in_bounds = (0..rank)
            .all(|d| start[d] >= 0 && (start[d] as i128) <= op_dims[d] as i128 - wsize[d] as i128);
        if !in_bounds {
            continue;
        }
        let base: usize = (0..rank).map(|d| start[d] as usize * ost[d]).sum();
        pairs.extend(
            win_in
                .iter()
                .zip(&win_upd)
                .map(|(&i, &u)| (base + i, ub + u)),
        );
    }
    Ok(pairs)
}

/// `scatter(operands..., indices, updates...)`: one array, or a tuple for several operands.
pub(crate) fn scatter(
    interp: &Interp,
    id: tpusim_hlo::InstrId,
    ops: &[Arc<Value>],
) -> Result<Value, InterpError> {
    let ins = interp.m.instr(id);
    if ops.len() < 3 || ops.len().is_multiple_of(2) {
        return Err(internal("scatter takes N operands, indices and N updates"));
    }
    let n = (ops.len() - 1) / 2;
    let arrays: Vec<&Array> = ops.iter().map(|v| v.as_array()).collect::<Result<_, _>>()?;
    let (operands, rest) = arrays.split_at(n);
    let (indices, updates) = (rest[0], &rest[1..]);
    let op_dims = &operands[0].dims;
    if operands.iter().any(|a| !same_dims(&a.dims, op_dims))
        || updates
            .iter()
            .any(|u| !same_dims(&u.dims, &updates[0].dims))
    {
        return Err(internal("scatter operands (or updates) differ in shape"));
    }
    let f = ins
        .attr_comp("to_apply")
        .ok_or_else(|| internal("scatter without to_apply"))?;
    let pairs = scatter_pairs(ins, op_dims, indices, &updates[0].dims)?;
    let outs: Vec<Array> = operands.iter().map(|a| (*a).clone()).collect();
    let mut outs = combine(interp, f, false, outs, updates, &pairs)?;
    Ok(if n == 1 {
        Value::Array(outs.remove(0))
    } else {
        Value::tuple(outs.into_iter().map(Value::Array).collect())
    })
}
