//! Whole-array kernels for data movement, dot, select/clamp/convert and reduce.

use crate::elementwise as ew;
use crate::eval::Interp;
use crate::gemm::{batched_matmul, Strides};
use crate::tree_fold::tree_fold_init;
use crate::value::{elem_count, strides, wrap_signed, wrap_unsigned, Array, Data, Value};
use crate::InterpError;
use half::{bf16, f16};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::Arc;
use tpusim_hlo::attr::AttrValue;
use tpusim_hlo::{CompId, InstrId, Opcode, PrimitiveType as T, Shape};

fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

/// Source linear indices of an affine map: `src = base + Σ i_k * coef_k` over `out_dims`.
pub(crate) fn affine(out_dims: &[usize], coef: &[isize], base: isize) -> Vec<usize> {
    let n = elem_count(out_dims);
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let rank = out_dims.len();
    if rank == 0 {
        out.push(base as usize);
        return out;
    }
    let mut idx = vec![0usize; rank];
    let mut cur = base;
    let last = rank - 1;
    loop {
        for j in 0..out_dims[last] {
            out.push((cur + j as isize * coef[last]) as usize);
        }
        // advance dims above the last one
        let mut d = last;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            cur += coef[d];
            if idx[d] < out_dims[d] {
                break;
            }
            cur -= coef[d] * idx[d] as isize;
            idx[d] = 0;
        }
    }
}

fn ints(id: InstrId, interp: &Interp, name: &str) -> Result<Vec<i64>, InterpError> {
    interp
        .m
        .instr(id)
        .attr_ints(name)
        .map(<[i64]>::to_vec)
        .ok_or_else(|| internal(format!("missing attribute {name}")))
}

pub fn transpose(a: &Array, perm: &[usize]) -> Result<Array, InterpError> {
    if perm.len() == a.dims.len() && perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(a.clone());
    }
    let st = strides(&a.dims);
    let (out_dims, coef): (Vec<usize>, Vec<isize>) = perm
        .iter()
        .map(|&p| match (a.dims.get(p), st.get(p)) {
            (Some(&d), Some(&s)) => Ok((d, s as isize)),
            _ => Err(internal(format!("transpose dimension {p} out of range"))),
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    let data = a.data.take_affine(&out_dims, &coef, 0)?;
    Ok(Array::new(a.ty, out_dims, data))
}

/// Reads the array in the physical order of `minor_to_major` (major first).
fn physical_perm(mtm: &[i64]) -> Vec<usize> {
    mtm.iter().rev().map(|&d| d as usize).collect()
}

fn layout_of(shape: &Shape) -> Result<Option<Vec<i64>>, InterpError> {
    let a = shape
        .as_array()
        .ok_or_else(|| internal("bitcast of a tuple"))?;
    match &a.layout {
        None => Ok(None),
        Some(l) if l.tiles.is_empty() => Ok(Some(l.minor_to_major.clone())),
        Some(_) => Err(InterpError::Unsupported(
            "bitcast with a tiled layout".into(),
        )),
    }
}

fn bitcast(
    interp: &Interp,
    id: InstrId,
    a: &Array,
    ty: T,
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    if a.ty != ty {
        if a.ty.bit_width() != ty.bit_width() {
            return Err(InterpError::Unsupported(
                "bitcast that changes the element width".into(),
            ));
        }
        // Same width: reinterpret each element, then move elements as the layouts say.
        let converted = bitcast_convert(a, ty, a.dims.clone())?;
        return bitcast(interp, id, &converted, ty, dims);
    }
    if elem_count(&a.dims) != elem_count(&dims) {
        return Err(internal("bitcast changes the element count"));
    }
    let ins = interp.m.instr(id);
    let src_l = layout_of(interp.m.operand_shape(id, 0))?;
    let dst_l = layout_of(&ins.shape)?;
    // Linearise by the operand's physical layout, then read as the result's physical layout.
    let phys = match src_l {
        Some(mtm) if mtm.len() == a.dims.len() => transpose(a, &physical_perm(&mtm))?,
        _ => a.clone(),
    };
    match dst_l {
        Some(mtm) if mtm.len() == dims.len() => {
            let perm = physical_perm(&mtm);
            let phys_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
            let mut inv = vec![0usize; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            transpose(&Array::new(ty, phys_dims, phys.data), &inv)
        }
        _ => Ok(Array::new(ty, dims, phys.data)),
    }
}

fn to_bits(a: &Array) -> Vec<u64> {
    let bits = a.ty.bit_width();
    match &a.data {
        Data::Pred(v) => v.iter().map(|&b| b as u64).collect(),
        Data::I64(v) => v.iter().map(|&x| wrap_unsigned(x as u64, bits)).collect(),
        Data::U64(v) => v.clone(),
        Data::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        Data::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        Data::Bf16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        Data::F16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        Data::F8(v) => v.iter().map(|&x| x as u64).collect(),
        Data::C64(v) => v
            .iter()
            .map(|c| c.0.to_bits() as u64 | ((c.1.to_bits() as u64) << 32))
            .collect(),
        // 128-bit elements do not fit; `bitcast_convert` refuses them before this.
        Data::C128(v) => v.iter().map(|c| c.0.to_bits()).collect(),
    }
}

fn from_bits(ty: T, dims: Vec<usize>, b: &[u64]) -> Array {
    let bits = ty.bit_width();
    let data = match ty {
        T::Pred => Data::Pred(b.iter().map(|&x| x != 0).collect()),
        T::F32 => Data::F32(b.iter().map(|&x| f32::from_bits(x as u32)).collect()),
        T::F64 => Data::F64(b.iter().map(|&x| f64::from_bits(x)).collect()),
        T::Bf16 => Data::Bf16(b.iter().map(|&x| bf16::from_bits(x as u16)).collect()),
        T::F16 => Data::F16(b.iter().map(|&x| f16::from_bits(x as u16)).collect()),
        _ if crate::f8::is_minifloat(ty) => Data::F8(b.iter().map(|&x| x as u8).collect()),
        T::C64 => Data::C64(
            b.iter()
                .map(|&x| (f32::from_bits(x as u32), f32::from_bits((x >> 32) as u32)))
                .collect(),
        ),
        _ if ty.is_unsigned_int() => Data::U64(b.iter().map(|&x| wrap_unsigned(x, bits)).collect()),
        _ => Data::I64(b.iter().map(|&x| wrap_signed(x as i64, bits)).collect()),
    };
    Array::new(ty, dims, data)
}

pub(crate) fn bitcast_convert(a: &Array, ty: T, dims: Vec<usize>) -> Result<Array, InterpError> {
    let (src, dst) = (a.ty.bit_width(), ty.bit_width());
    if src > 64 || dst > 64 {
        return Err(InterpError::Unsupported(format!(
            "bitcast-convert between '{}' and '{ty}'",
            a.ty
        )));
    }
    let b = to_bits(a);
    if src == dst {
        return Ok(from_bits(ty, dims, &b));
    }
    // Sub-byte types split or pack little-endian like the rest (s8 -> s4[2]).
    let (narrow, wide) = (src.min(dst), src.max(dst));
    if narrow == 0 || !wide.is_multiple_of(narrow) {
        return Err(InterpError::Unsupported(format!(
            "bitcast-convert between '{}' and '{ty}'",
            a.ty
        )));
    }
    if src > dst {
        // Each source element splits into src/dst chunks, little-endian.
        let k = (src / dst) as usize;
        let mask = wrap_unsigned(u64::MAX, dst);
        let out: Vec<u64> = b
            .iter()
            .flat_map(|&x| (0..k).map(move |j| (x >> (j as u32 * dst)) & mask))
            .collect();
        Ok(from_bits(ty, dims, &out))
    } else {
        let k = (dst / src) as usize;
        let out: Vec<u64> = b
            .chunks(k)
            .map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0u64, |acc, (j, &x)| acc | (x << (j as u32 * src)))
            })
            .collect();
        Ok(from_bits(ty, dims, &out))
    }
}

fn scalar_starts(ops: &[Arc<Value>], first: usize) -> Result<Vec<i64>, InterpError> {
    let rest = &ops[first..];
    if rest.len() == 1 && rest[0].as_array()?.dims.len() == 1 {
        return rest[0].as_array()?.to_index_i64s();
    }
    rest.iter()
        .map(|v| v.as_array()?.first_index_i64())
        .collect()
}

fn clamp_starts(
    starts: &[i64],
    dims: &[usize],
    sizes: &[usize],
) -> Result<Vec<usize>, InterpError> {
    if starts.len() != dims.len() {
        return Err(internal("wrong number of start indices"));
    }
    Ok(starts
        .iter()
        .zip(dims.iter().zip(sizes))
        .map(|(&s, (&d, &z))| s.clamp(0, (d as i64 - z as i64).max(0)) as usize)
        .collect())
}

/// `pad(x, v)`: interior first, then (possibly negative) edge padding.
pub fn pad(a: &Array, value: &Array, cfg: &[(i64, i64, i64)]) -> Result<Array, InterpError> {
    if cfg.len() != a.dims.len() {
        return Err(internal("padding rank mismatch"));
    }
    let out_dims: Vec<i64> = a
        .dims
        .iter()
        .zip(cfg)
        .map(|(&n, &(lo, hi, int))| lo + hi + n as i64 + (n as i64 - 1).max(0) * int)
        .collect();
    if out_dims.iter().any(|&d| d < 0) {
        return Err(internal("negative padded size"));
    }
    let out_dims: Vec<usize> = out_dims.iter().map(|&d| d as usize).collect();
    let n = elem_count(&out_dims);
    let mut data = value.data.splat(0, n);
    let ost = strides(&out_dims);
    let mut src = Vec::new();
    let mut dst = Vec::new();
    let total = a.len();
    let st = strides(&a.dims);
    'outer: for i in 0..total {
        let mut off = 0usize;
        for k in 0..a.dims.len() {
            let ik = (i / st[k]) % a.dims[k];
            let p = cfg[k].0 + ik as i64 * (cfg[k].2 + 1);
            if p < 0 || p >= out_dims[k] as i64 {
                continue 'outer;
            }
            off += p as usize * ost[k];
        }
        src.push(i);
        dst.push(off);
    }
    data.put(&dst, &a.data.take(&src))?;
    Ok(Array::new(a.ty, out_dims, data))
}

/// Positions `offset + Σ i_k * out_stride_k` of an operand of `dims` inside an output.
fn placement(dims: &[usize], out_dims: &[usize], starts: &[usize]) -> Vec<usize> {
    let ost = strides(out_dims);
    let base: usize = starts.iter().zip(&ost).map(|(s, t)| s * t).sum();
    let coef: Vec<isize> = ost.iter().map(|&s| s as isize).collect();
    affine(dims, &coef, base as isize)
}

pub fn dynamic_slice(a: &Array, starts: &[i64], sizes: &[usize]) -> Result<Array, InterpError> {
    let s = clamp_starts(starts, &a.dims, sizes)?;
    let st = strides(&a.dims);
    let base: usize = s.iter().zip(&st).map(|(x, y)| x * y).sum();
    let coef: Vec<isize> = st.iter().map(|&x| x as isize).collect();
    let data = a.data.take_affine(sizes, &coef, base as isize)?;
    Ok(Array::new(a.ty, sizes.to_vec(), data))
}

pub fn dynamic_update_slice(a: &Array, upd: &Array, starts: &[i64]) -> Result<Array, InterpError> {
    let mut out = a.clone();
    update_slice(&mut out, upd, starts)?;
    Ok(out)
}

/// `dynamic-update-slice(operand, update, starts...)` written into the
/// operand itself, when `ops[0]` is its only holder: the result is that
/// value, moved out of `ops`. `None` (nothing changed) when it is shared or
/// not an array of the update's type.
pub(crate) fn update_slice_in_place(
    ops: &mut Vec<Arc<Value>>,
) -> Result<Option<Arc<Value>>, InterpError> {
    if ops.len() < 2 {
        return Ok(None);
    }
    let starts = scalar_starts(ops, 2)?;
    let (first, rest) = ops.split_at_mut(1);
    let upd = rest[0].as_array()?;
    let Some(Value::Array(a)) = Arc::get_mut(&mut first[0]) else {
        return Ok(None);
    };
    if a.ty != upd.ty || a.dims.len() != upd.dims.len() {
        return Ok(None);
    }
    update_slice(a, upd, &starts)?;
    Ok(Some(ops.swap_remove(0)))
}

/// `reshape` of `ops[0]` by relabelling its dims, when it is the only
/// holder of its storage (row-major data needs no move); `None`, changing
/// nothing, otherwise.
pub(crate) fn reshape_in_place(
    ins: &tpusim_hlo::Instruction,
    ops: &mut Vec<Arc<Value>>,
) -> Result<Option<Arc<Value>>, InterpError> {
    let (ty, dims) = crate::eval::array_dims(&ins.shape)?;
    let Some(Value::Array(a)) = ops.first_mut().and_then(Arc::get_mut) else {
        return Ok(None);
    };
    if a.ty != ty || a.len() != elem_count(&dims) {
        return Ok(None);
    }
    a.dims = dims;
    Ok(Some(ops.swap_remove(0)))
}

/// Writes `upd` into `a` at `starts` (clamped as XLA clamps them), one
/// contiguous row of the update at a time.
fn update_slice(a: &mut Array, upd: &Array, starts: &[i64]) -> Result<(), InterpError> {
    let s = clamp_starts(starts, &a.dims, &upd.dims)?;
    if upd.dims.len() != a.dims.len() {
        return Err(internal("update rank differs from the operand's"));
    }
    let Some((&row, outer_dims)) = upd.dims.split_last() else {
        return a.data.copy_run(0, &upd.data, 0, 1);
    };
    if row == 0 || upd.is_empty() {
        return Ok(());
    }
    let ost = strides(&a.dims);
    let base: usize = s.iter().zip(&ost).map(|(x, t)| x * t).sum();
    let ust = strides(outer_dims);
    for r in 0..upd.len() / row {
        let off: usize = outer_dims
            .iter()
            .zip(&ust)
            .zip(&ost)
            .map(|((&d, &u), &o)| (r / u) % d * o)
            .sum();
        a.data.copy_run(base + off, &upd.data, r * row, row)?;
    }
    Ok(())
}

/// A dot's dimension numbers and algorithm, read from its attributes once
/// per run (a loop body's dot is evaluated once per iteration).
pub(crate) struct DotNumbers {
    lhs_batch: DimList,
    lhs_contracting: DimList,
    rhs_batch: DimList,
    rhs_contracting: DimList,
    algorithm: Option<String>,
}

impl DotNumbers {
    pub(crate) fn of(ins: &tpusim_hlo::Instruction) -> DotNumbers {
        let dims = |name: &str| -> DimList {
            ins.attr_ints(name)
                .unwrap_or(&[])
                .iter()
                .map(|&d| d as usize)
                .collect()
        };
        DotNumbers {
            lhs_batch: dims("lhs_batch_dims"),
            lhs_contracting: dims("lhs_contracting_dims"),
            rhs_batch: dims("rhs_batch_dims"),
            rhs_contracting: dims("rhs_contracting_dims"),
            algorithm: ins.attr_ident("algorithm").map(str::to_owned),
        }
    }
}

pub(crate) use crate::value::DimList;

/// Stride of a group of dimensions read as one flattened index (in the order
/// given), if the layout allows it without a copy. Size-1 dimensions never matter.
fn merged_stride(dims: &[usize], st: &[usize], group: &[usize]) -> Option<usize> {
    let mut prev: Option<usize> = None;
    for &d in group.iter().filter(|&&d| dims[d] != 1) {
        if prev.is_some_and(|p| st[p] != st[d] * dims[d]) {
            return None;
        }
        prev = Some(d);
    }
    Some(prev.map_or(0, |last| st[last]))
}

/// An operand seen as `[batch, rows, cols]` matrices: strided when its layout
/// allows, otherwise transposed into that order first.
fn matrix_view<'a>(
    a: &'a Array,
    batch: &[usize],
    rows: &[usize],
    cols: &[usize],
) -> Result<(Cow<'a, Array>, Strides), InterpError> {
    let st = strides(&a.dims);
    let merged = [batch, rows, cols].map(|g| merged_stride(&a.dims, &st, g));
    if let [Some(b), Some(r), Some(c)] = merged {
        return Ok((
            Cow::Borrowed(a),
            Strides {
                batch: b,
                row: r,
                col: c,
            },
        ));
    }
    let perm: Vec<usize> = batch.iter().chain(rows).chain(cols).copied().collect();
    let size = |g: &[usize]| g.iter().map(|&d| a.dims[d]).product::<usize>();
    Ok((
        Cow::Owned(transpose(a, &perm)?),
        Strides::dense(size(rows), size(cols)),
    ))
}

/// General dot: both sides viewed as `[B, M, K]` x `[B, K, N]` matrices, one GEMM per batch.
#[allow(clippy::too_many_arguments)]
pub fn dot(
    lhs: &Array,
    rhs: &Array,
    lb: &[usize],
    lc: &[usize],
    rb: &[usize],
    rc: &[usize],
    ty: T,
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    let free = |rank: usize, b: &[usize], c: &[usize]| -> DimList {
        (0..rank)
            .filter(|d| !b.contains(d) && !c.contains(d))
            .collect()
    };
    let lf = free(lhs.dims.len(), lb, lc);
    let rf = free(rhs.dims.len(), rb, rc);
    let size = |a: &Array, ds: &[usize]| ds.iter().map(|&d| a.dims[d]).product::<usize>();
    let (bn, m, k, n) = (size(lhs, lb), size(lhs, &lf), size(lhs, lc), size(rhs, &rf));
    if size(rhs, rc) != k || size(rhs, rb) != bn || bn * m * n != elem_count(&dims) {
        return Err(internal("dot dimension sizes do not match"));
    }
    if ty.is_signed_int() || ty.is_unsigned_int() || ty == T::Pred {
        let lperm: Vec<usize> = lb.iter().chain(&lf).chain(lc).copied().collect();
        let rperm: Vec<usize> = rb.iter().chain(rc).chain(&rf).copied().collect();
        let (x, y) = (transpose(lhs, &lperm)?, transpose(rhs, &rperm)?);
        if ty == T::Pred {
            // XLA's pred dot is an or of ands: any true product makes the sum nonzero.
            let counts = int_dot(&x, &y, (bn, m, k, n), T::S64, dims)?;
            return ew::convert(&counts, T::Pred);
        }
        return int_dot(&x, &y, (bn, m, k, n), ty, dims);
    }
    let (lt, ls) = matrix_view(lhs, lb, &lf, lc)?;
    let (rt, rs) = matrix_view(rhs, rb, rc, &rf)?;
    match ty {
        T::F64 => {
            let (x, y) = (lt.to_f64s(), rt.to_f64s());
            let out = batched_matmul(bn, m, k, n, &x, ls, &y, rs)?;
            Ok(Array::new(ty, dims, Data::F64(out)))
        }
        _ if matches!(ty, T::F32 | T::Bf16 | T::F16) || crate::f8::is_minifloat(ty) => {
            let out = match (&lt.data, &rt.data) {
                (Data::F32(x), Data::F32(y)) => batched_matmul(bn, m, k, n, x, ls, y, rs)?,
                _ => batched_matmul(bn, m, k, n, &lt.to_f32s(), ls, &rt.to_f32s(), rs)?,
            };
            Ok(Array::from_op_f32s(ty, dims, out))
        }
        T::C64 | T::C128 => {
            // The complex kernel takes dense [B, M, K] x [B, K, N] operands.
            let lperm: Vec<usize> = lb.iter().chain(&lf).chain(lc).copied().collect();
            let rperm: Vec<usize> = rb.iter().chain(rc).chain(&rf).copied().collect();
            let (x, y) = (transpose(lhs, &lperm)?, transpose(rhs, &rperm)?);
            let data = crate::complex::gemm(&x, &y, (bn, m, k, n), ty)?;
            Ok(Array::new(ty, dims, data))
        }
        _ => Err(InterpError::Unsupported(format!(
            "dot with result type '{ty}'"
        ))),
    }
}

/// Integer dot on `[B, M, K]` x `[B, K, N]` operands, wrapping like XLA.
fn int_dot(
    lt: &Array,
    rt: &Array,
    (bn, m, k, n): (usize, usize, usize, usize),
    ty: T,
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    let as_i64 = |a: &Array| -> Result<Vec<i64>, InterpError> {
        match ew::convert(a, T::S64)?.data {
            Data::I64(v) => Ok(v),
            _ => Err(internal("int dot conversion")),
        }
    };
    let (x, y) = (as_i64(lt)?, as_i64(rt)?);
    let mut out = vec![0i64; bn * m * n];
    for b in 0..bn {
        for i in 0..m {
            for p in 0..k {
                let xv = x[b * m * k + i * k + p];
                for j in 0..n {
                    let o = &mut out[b * m * n + i * n + j];
                    *o = o.wrapping_add(xv.wrapping_mul(y[b * k * n + p * n + j]));
                }
            }
        }
    }
    Ok(Array::from_i64s(ty, dims, &out))
}

/// The remaining ops that produce one array.
pub fn array_op(
    interp: &Interp,
    id: InstrId,
    ty: T,
    dims: Vec<usize>,
    ops: &[Arc<Value>],
) -> Result<Array, InterpError> {
    let ins = interp.m.instr(id);
    let arr = |i: usize| -> Result<&Array, InterpError> {
        ops.get(i)
            .ok_or_else(|| internal(format!("missing operand {i}")))?
            .as_array()
    };
    match ins.opcode {
        Opcode::Iota => {
            let d = ins.attr_int("iota_dimension").unwrap_or(0) as usize;
            if d >= dims.len() {
                return Err(internal("iota dimension out of range"));
            }
            let st = strides(&dims);
            let v: Vec<i64> = (0..elem_count(&dims))
                .map(|i| ((i / st[d]) % dims[d]) as i64)
                .collect();
            Ok(Array::from_i64s(ty, dims, &v))
        }
        Opcode::Convert => ew::convert(arr(0)?, ty),
        Opcode::BitcastConvert => bitcast_convert(arr(0)?, ty, dims),
        Opcode::Reshape => {
            let a = arr(0)?;
            if a.len() != elem_count(&dims) {
                return Err(internal("reshape changes the element count"));
            }
            Ok(Array::new(ty, dims, a.data.clone()))
        }
        Opcode::Bitcast => bitcast(interp, id, arr(0)?, ty, dims),
        Opcode::Broadcast => {
            let a = arr(0)?;
            let bd = ints(id, interp, "dimensions").unwrap_or_default();
            if bd.len() != a.dims.len() {
                return Err(internal(
                    "broadcast dimensions do not match the operand rank",
                ));
            }
            let st = strides(&a.dims);
            let mut coef = vec![0isize; dims.len()];
            for (k, &d) in bd.iter().enumerate() {
                coef[d as usize] = st[k] as isize;
            }
            Ok(Array::new(
                ty,
                dims.clone(),
                a.data.take_affine(&dims, &coef, 0)?,
            ))
        }
        Opcode::Transpose => {
            let perm: Vec<usize> = ints(id, interp, "dimensions")?
                .iter()
                .map(|&d| d as usize)
                .collect();
            transpose(arr(0)?, &perm)
        }
        Opcode::Reverse => {
            let a = arr(0)?;
            let rd = ints(id, interp, "dimensions")?;
            let st = strides(&a.dims);
            let mut base = 0isize;
            let coef: Vec<isize> = (0..a.dims.len())
                .map(|k| {
                    if rd.contains(&(k as i64)) {
                        base += (a.dims[k].saturating_sub(1) * st[k]) as isize;
                        -(st[k] as isize)
                    } else {
                        st[k] as isize
                    }
                })
                .collect();
            Ok(Array::new(
                ty,
                dims.clone(),
                a.data.take_affine(&dims, &coef, base)?,
            ))
        }
        Opcode::Slice => {
            let a = arr(0)?;
            let Some(AttrValue::Slice(sl)) = ins.attr("slice") else {
                return Err(internal("slice without slice attribute"));
            };
            let st = strides(&a.dims);
            let base: isize = sl
                .iter()
                .zip(&st)
                .map(|(s, &t)| s.start as isize * t as isize)
                .sum();
            let coef: Vec<isize> = sl
                .iter()
                .zip(&st)
                .map(|(s, &t)| s.stride as isize * t as isize)
                .collect();
            Ok(Array::new(
                ty,
                dims.clone(),
                a.data.take_affine(&dims, &coef, base)?,
            ))
        }
        // The verifier checked that the result shape is `dynamic_slice_sizes`.
        Opcode::DynamicSlice => dynamic_slice(arr(0)?, &scalar_starts(ops, 1)?, &dims),
        Opcode::DynamicUpdateSlice => {
            dynamic_update_slice(arr(0)?, arr(1)?, &scalar_starts(ops, 2)?)
        }
        Opcode::Concatenate => {
            let d = ints(id, interp, "dimensions")?
                .first()
                .copied()
                .unwrap_or(0) as usize;
            let parts: Vec<&Array> = ops.iter().map(|v| v.as_array()).collect::<Result<_, _>>()?;
            let first = parts.first().ok_or_else(|| internal("empty concatenate"))?;
            let mut data = first.data.splat_or_empty(elem_count(&dims))?;
            let mut off = 0usize;
            for p in &parts {
                let mut starts = vec![0usize; dims.len()];
                starts[d] = off;
                data.put(&placement(&p.dims, &dims, &starts), &p.data)?;
                off += p.dims[d];
            }
            Ok(Array::new(ty, dims, data))
        }
        Opcode::Pad => {
            let Some(AttrValue::Padding(p)) = ins.attr("padding") else {
                return Err(internal("pad without padding attribute"));
            };
            let cfg: Vec<(i64, i64, i64)> = p.iter().map(|d| (d.low, d.high, d.interior)).collect();
            pad(arr(0)?, arr(1)?, &cfg)
        }
        Opcode::Select => {
            let (p, t, f) = (arr(0)?, arr(1)?, arr(2)?);
            let Data::Pred(pv) = &p.data else {
                return Err(internal("select predicate is not pred"));
            };
            let n = t.len();
            let pick: Vec<usize> = (0..n)
                .filter(|&i| !pv[if pv.len() == 1 { 0 } else { i }])
                .collect();
            let mut out = t.clone();
            out.data.put(&pick, &f.data.take(&pick))?;
            Ok(out)
        }
        Opcode::Clamp => ew::clamp(arr(0)?, arr(1)?, arr(2)?),
        Opcode::Dot => {
            let d = interp.dot_numbers(id);
            let (lb, lc, rb, rc) = (
                &d.lhs_batch,
                &d.lhs_contracting,
                &d.rhs_batch,
                &d.rhs_contracting,
            );
            if let Some(alg) = &d.algorithm {
                let l = crate::dots::round_for_algorithm(alg, arr(0)?)?;
                let r = crate::dots::round_for_algorithm(alg, arr(1)?)?;
                return dot(&l, &r, lb, lc, rb, rc, ty, dims);
            }
            dot(arr(0)?, arr(1)?, lb, lc, rb, rc, ty, dims)
        }
        Opcode::Convolution => crate::conv::convolution(interp, id, arr(0)?, arr(1)?, ty, dims),
        Opcode::GetDimensionSize => {
            let d = ins.attr_int("dimensions").unwrap_or(0) as usize;
            let n = arr(0)?.dims.get(d).copied().unwrap_or(0);
            Ok(Array::from_i64s(ty, dims, &[n as i64]))
        }
        op if crate::more_ops::is_array_op(op) => {
            crate::more_ops::array_op(interp, id, ty, dims, ops)
        }
        op => Err(InterpError::Unsupported(format!("opcode '{}'", op.name()))),
    }
}

impl Data {
    fn splat_or_empty(&self, n: usize) -> Result<Data, InterpError> {
        if self.is_empty() {
            // An empty first operand: build zeros of the same variant.
            Ok(crate::value::map_data!(self, _v => vec![Default::default(); n]))
        } else {
            Ok(self.splat(0, n))
        }
    }
}

/// Recognises reducers `f(a, b) = a OP b` over two scalar parameters.
pub(crate) fn simple_reducer(interp: &Interp, c: CompId) -> Option<Opcode> {
    let comp = interp.m.comp(c);
    if comp.params.len() != 2 {
        return None;
    }
    let root = interp.m.instr(comp.root);
    let ok = matches!(
        root.opcode,
        Opcode::Add
            | Opcode::Multiply
            | Opcode::Maximum
            | Opcode::Minimum
            | Opcode::And
            | Opcode::Or
    );
    let ps = &comp.params;
    (ok && root.operands.len() == 2
        && ((root.operands[0] == ps[0] && root.operands[1] == ps[1])
            || (root.operands[0] == ps[1] && root.operands[1] == ps[0])))
        .then_some(root.opcode)
}

/// For each output element, the input linear indices to fold, in row-major order.
fn reduce_plan(dims: &[usize], rdims: &[usize]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let st = strides(dims);
    let keep: Vec<usize> = (0..dims.len()).filter(|d| !rdims.contains(d)).collect();
    let out_dims: Vec<usize> = keep.iter().map(|&d| dims[d]).collect();
    let red_dims: Vec<usize> = rdims.iter().map(|&d| dims[d]).collect();
    let mut rsorted = rdims.to_vec();
    rsorted.sort_unstable();
    let red_dims_sorted: Vec<usize> = rsorted.iter().map(|&d| dims[d]).collect();
    let _ = red_dims;
    let outs = affine(
        &out_dims,
        &keep.iter().map(|&d| st[d] as isize).collect::<Vec<_>>(),
        0,
    );
    let inner = affine(
        &red_dims_sorted,
        &rsorted.iter().map(|&d| st[d] as isize).collect::<Vec<_>>(),
        0,
    );
    (out_dims, outs, inner)
}

pub fn reduce(
    interp: &Interp,
    inputs: &[&Array],
    dims: &[i64],
    f: CompId,
) -> Result<Vec<Array>, InterpError> {
    if !inputs.len().is_multiple_of(2) || inputs.is_empty() {
        return Err(internal("reduce takes N inputs and N inits"));
    }
    let nv = inputs.len() / 2;
    let (xs, inits) = inputs.split_at(nv);
    let rdims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    if let Some(out) = reduce_trailing_f32(interp, xs, inits, &rdims, f) {
        return Ok(vec![out]);
    }
    let (out_dims, outs, inner) = reduce_plan(&xs[0].dims, &rdims);
    let groups: Vec<Vec<usize>> = outs
        .iter()
        .map(|&o| inner.iter().map(|&r| o + r).collect())
        .collect();
    fold_groups(interp, xs, inits, f, out_dims, &groups, Order::Tree)
}

/// How a fold visits the elements of one output.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    /// XLA:CPU's `reduce`: partial accumulators combined as a tree (see `tree_fold`).
    Tree,
    /// Left to right (`reduce-window`, whose windows XLA folds in order).
    Sequential,
}

/// The array, its f32 elements and the f32 init of a reduction of one f32
/// input (the fast paths' case); `None` otherwise.
fn one_f32_input<'a>(xs: &[&'a Array], inits: &[&Array]) -> Option<(&'a Array, &'a [f32], f32)> {
    let ([x], [init]) = (xs, inits) else {
        return None;
    };
    let (Data::F32(v), Data::F32(i0)) = (&x.data, &init.data) else {
        return None;
    };
    Some((x, v, *i0.first()?))
}

/// `reduce` of an f32 array over its trailing dimensions with a simple
/// reducer (softmax and norm statistics): each output folds one contiguous
/// run in tree order, exactly as the general path would, in parallel across outputs.
fn reduce_trailing_f32(
    interp: &Interp,
    xs: &[&Array],
    inits: &[&Array],
    rdims: &[usize],
    f: CompId,
) -> Option<Array> {
    let (x, v, init) = one_f32_input(xs, inits)?;
    let rank = x.dims.len();
    let mut sorted = rdims.to_vec();
    sorted.sort_unstable();
    let trailing = sorted
        .iter()
        .enumerate()
        .all(|(k, &d)| d == rank - sorted.len() + k);
    if !trailing || sorted.is_empty() {
        return None;
    }
    let op = simple_reducer(interp, f)?;
    let keep = rank - sorted.len();
    let inner: usize = x.dims[keep..].iter().product();
    let out_dims = x.dims[..keep].to_vec();
    let outer = elem_count(&out_dims);
    if inner == 0 || v.len() != outer * inner {
        return None;
    }
    // One loop per reducer, so that the fold is inlined and vectorizes.
    let out: Vec<f32> = match op {
        Opcode::Add => fold_rows(v, inner, init, |a, b| a + b),
        Opcode::Multiply => fold_rows(v, inner, init, |a, b| a * b),
        Opcode::Maximum => fold_rows(v, inner, init, ew::fmax::<f32>),
        Opcode::Minimum => fold_rows(v, inner, init, ew::fmin::<f32>),
        _ => return None,
    };
    Some(Array::new(x.ty, out_dims, Data::F32(out)))
}

/// Each `inner`-element row of `v` tree-folded from `init`; in parallel
/// across rows when there is enough work to share.
fn fold_rows(
    v: &[f32],
    inner: usize,
    init: f32,
    fold: impl Fn(f32, f32) -> f32 + Copy + Send + Sync,
) -> Vec<f32> {
    if v.len() < crate::strided::PAR_MIN_ELEMS {
        v.chunks_exact(inner)
            .map(|r| tree_fold_init(init, r, fold))
            .collect()
    } else {
        v.par_chunks_exact(inner)
            .map(|r| tree_fold_init(init, r, fold))
            .collect()
    }
}

/// `reduce-window` of one f32 array with a simple reducer (max and average
/// pooling): each output folds its in-bounds window elements left to right
/// from init, exactly as the general path does, without listing the windows
/// first; one monomorphic loop per reducer, in parallel across outputs.
fn reduce_window_f32(
    interp: &Interp,
    xs: &[&Array],
    inits: &[&Array],
    window: &tpusim_hlo::attr::Window,
    out_dims: &[usize],
    f: CompId,
) -> Option<Array> {
    let (x, v, init) = one_f32_input(xs, inits)?;
    let geom = WindowGeometry::new(&x.dims, window, out_dims)?;
    let out = match simple_reducer(interp, f)? {
        Opcode::Add => geom.fold(v, init, |a, b| a + b),
        Opcode::Multiply => geom.fold(v, init, |a, b| a * b),
        Opcode::Maximum => geom.fold(v, init, ew::fmax::<f32>),
        Opcode::Minimum => geom.fold(v, init, ew::fmin::<f32>),
        _ => return None,
    };
    Some(Array::new(x.ty, out_dims.to_vec(), Data::F32(out)))
}

/// The dimensions a window moves over, and the elements in the trailing
/// ones it leaves alone (size 1, unit stride, no padding or dilation, as
/// long in `out_dims` as in `dims`): there, one window element of a run of
/// consecutive outputs is a run of consecutive operand elements (pooling
/// over `[N, H, W, C]` runs along `C`). Shared by reduce-window and
/// select-and-scatter.
pub(crate) fn trailing_run(
    window: &[tpusim_hlo::attr::WindowDim],
    dims: &[usize],
    out_dims: &[usize],
) -> (usize, usize) {
    let untouched = |k: &usize| {
        let w = &window[*k];
        w.size == 1
            && w.stride == 1
            && w.padding_low == 0
            && w.padding_high == 0
            && w.base_dilation == 1
            && w.window_dilation == 1
            && out_dims.get(*k) == dims.get(*k)
    };
    let rank = dims.len().min(window.len());
    let lead = rank - (0..rank).rev().take_while(untouched).count();
    (lead, dims[lead..rank].iter().product())
}

/// Where the windows of a `reduce-window` read its operand.
struct WindowGeometry<'a> {
    dims: &'a [usize],
    window: &'a [tpusim_hlo::attr::WindowDim],
    out_dims: &'a [usize],
    in_strides: DimList,
    out_strides: DimList,
}

impl<'a> WindowGeometry<'a> {
    fn new(
        dims: &'a [usize],
        window: &'a tpusim_hlo::attr::Window,
        out_dims: &'a [usize],
    ) -> Option<WindowGeometry<'a>> {
        (window.dims.len() == dims.len() && out_dims.len() == dims.len()).then(|| WindowGeometry {
            dims,
            window: &window.dims,
            out_dims,
            in_strides: strides(dims),
            out_strides: strides(out_dims),
        })
    }

    /// Appends to `taps` the operand offsets along dimension `k` that output
    /// coordinate `p` reads, in window order (padding and holes skipped).
    fn taps(&self, k: usize, p: usize, taps: &mut Vec<usize>) {
        let wd = &self.window[k];
        for wk in 0..wd.size.max(0) {
            let mut b = p as i64 * wd.stride + wk * wd.window_dilation - wd.padding_low;
            if wd.base_dilation > 1 {
                if b.rem_euclid(wd.base_dilation) != 0 {
                    continue;
                }
                b = b.div_euclid(wd.base_dilation);
            }
            if (0..self.dims[k] as i64).contains(&b) {
                taps.push(b as usize * self.in_strides[k]);
            }
        }
    }

    /// Every output's window folded from `init` in row-major window order.
    ///
    /// The outputs are taken a run at a time (see [`trailing_run`]):
    /// the window's offsets are worked out once per run and each window
    /// element is folded into the whole run, which keeps every output's
    /// fold order and turns the inner loop into a vector loop.
    fn fold(
        &self,
        v: &[f32],
        init: f32,
        f: impl Fn(f32, f32) -> f32 + Copy + Send + Sync,
    ) -> Vec<f32> {
        let n = elem_count(self.out_dims);
        let (lead, run) = trailing_run(self.window, self.dims, self.out_dims);
        let mut out = vec![init; n];
        if n == 0 {
            return out;
        }
        let work = |first_run: usize, part: &mut [f32]| {
            // Per leading dimension, the offsets this run's window reads.
            let mut taps: Vec<Vec<usize>> = vec![Vec::new(); lead];
            let mut at = vec![0usize; lead];
            for (j, dst) in part.chunks_mut(run).enumerate() {
                let o = (first_run + j) * run;
                for (k, t) in taps.iter_mut().enumerate() {
                    t.clear();
                    self.taps(k, (o / self.out_strides[k]) % self.out_dims[k], t);
                }
                if taps.iter().any(Vec::is_empty) {
                    continue;
                }
                at.fill(0);
                'window: loop {
                    let lin: usize = taps.iter().zip(&at).map(|(t, &i)| t[i]).sum();
                    match v.get(lin..lin + dst.len()) {
                        Some(src) => {
                            for (d, &x) in dst.iter_mut().zip(src) {
                                *d = f(*d, x);
                            }
                        }
                        None => dst.fill(f32::NAN),
                    }
                    for k in (0..lead).rev() {
                        at[k] += 1;
                        if at[k] < taps[k].len() {
                            continue 'window;
                        }
                        at[k] = 0;
                    }
                    break;
                }
            }
        };
        let chunk = run * (1024 / run).max(1);
        if n < crate::strided::PAR_MIN_ELEMS {
            work(0, &mut out);
        } else {
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(c, part)| work(c * (chunk / run), part));
        }
        out
    }
}

/// `reduce-window`: each output folds the in-bounds window elements, starting from init.
pub fn reduce_window(
    interp: &Interp,
    inputs: &[&Array],
    window: &tpusim_hlo::attr::Window,
    out_dims: Vec<usize>,
    f: CompId,
) -> Result<Vec<Array>, InterpError> {
    if !inputs.len().is_multiple_of(2) || inputs.is_empty() {
        return Err(internal("reduce-window takes N inputs and N inits"));
    }
    let nv = inputs.len() / 2;
    let (xs, inits) = inputs.split_at(nv);
    let dims = &xs[0].dims;
    if window.dims.len() != dims.len() || out_dims.len() != dims.len() {
        return Err(internal("window rank does not match the operand"));
    }
    if window
        .dims
        .iter()
        .any(|w| w.reversal || w.stride < 1 || w.base_dilation < 1 || w.window_dilation < 1)
    {
        return Err(InterpError::Unsupported(
            "reduce-window with window reversal or non-positive strides".into(),
        ));
    }
    if let Some(out) = reduce_window_f32(interp, xs, inits, window, &out_dims, f) {
        return Ok(vec![out]);
    }
    let st = strides(dims);
    let wsizes: Vec<usize> = window.dims.iter().map(|w| w.size.max(0) as usize).collect();
    let ost = strides(&out_dims);
    let wst = strides(&wsizes);
    let nw = elem_count(&wsizes);
    let groups: Vec<Vec<usize>> = (0..elem_count(&out_dims))
        .map(|o| {
            (0..nw)
                .filter_map(|w| {
                    let mut lin = 0usize;
                    for k in 0..dims.len() {
                        let wd = &window.dims[k];
                        let p = ((o / ost[k]) % out_dims[k]) as i64;
                        let wk = ((w / wst[k]) % wsizes[k]) as i64;
                        let mut b = p * wd.stride + wk * wd.window_dilation - wd.padding_low;
                        if wd.base_dilation > 1 {
                            if b.rem_euclid(wd.base_dilation) != 0 {
                                return None;
                            }
                            b = b.div_euclid(wd.base_dilation);
                        }
                        if b < 0 || b >= dims[k] as i64 {
                            return None;
                        }
                        lin += b as usize * st[k];
                    }
                    Some(lin)
                })
                .collect()
        })
        .collect();
    fold_groups(interp, xs, inits, f, out_dims, &groups, Order::Sequential)
}

/// Folds `xs[groups[o]]` into output element `o` for every output, starting from init.
fn fold_groups(
    interp: &Interp,
    xs: &[&Array],
    inits: &[&Array],
    f: CompId,
    out_dims: Vec<usize>,
    groups: &[Vec<usize>],
    order: Order,
) -> Result<Vec<Array>, InterpError> {
    let nv = xs.len();
    if nv == 1 {
        if let Some(op) = simple_reducer(interp, f) {
            return Ok(vec![fast_reduce(
                op, xs[0], inits[0], &out_dims, groups, order,
            )?]);
        }
    }
    // General path: fold with the computation, one scalar at a time.
    let mut results: Vec<Vec<Value>> = vec![Vec::with_capacity(groups.len()); nv];
    let scalar =
        |a: &Array, i: usize| Arc::new(Value::Array(Array::new(a.ty, vec![], a.data.take(&[i]))));
    for g in groups {
        let mut acc: Vec<Arc<Value>> = inits.iter().map(|a| scalar(a, 0)).collect();
        for &r in g {
            let mut args = acc.clone();
            args.extend(xs.iter().map(|a| scalar(a, r)));
            let v = interp.run(f, &args)?;
            acc = match &*v {
                Value::Tuple(t) => t.clone(),
                Value::Array(_) => vec![v],
            };
            if acc.len() != nv {
                return Err(internal("reducer returned the wrong number of values"));
            }
        }
        for (k, a) in acc.into_iter().enumerate() {
            results[k].push((*a).clone());
        }
    }
    results
        .into_iter()
        .enumerate()
        .map(|(k, vals)| {
            let parts: Vec<&Data> = vals
                .iter()
                .map(|v| v.as_array().map(|a| &a.data))
                .collect::<Result<_, _>>()?;
            let data = if parts.is_empty() {
                inits[k].data.take(&[])
            } else {
                Data::concat(&parts)?
            };
            let ty = vals
                .first()
                .map(|v| v.as_array().map(|a| a.ty))
                .transpose()?
                .unwrap_or(inits[k].ty);
            Ok(Array::new(ty, out_dims.clone(), data))
        })
        .collect()
}

fn fast_reduce(
    op: Opcode,
    x: &Array,
    init: &Array,
    out_dims: &[usize],
    groups: &[Vec<usize>],
    order: Order,
) -> Result<Array, InterpError> {
    let dims = out_dims.to_vec();
    // Gathers each group and folds it in tree order, in parallel across groups.
    macro_rules! tree {
        ($v:expr, $i:expr, $f:expr) => {{
            let (v, i, f) = ($v, $i, $f);
            groups
                .par_iter()
                .map_init(Vec::new, |buf, g| {
                    buf.clear();
                    buf.extend(g.iter().map(|&r| v[r]));
                    tree_fold_init(i, buf, f)
                })
                .collect::<Vec<_>>()
        }};
    }
    macro_rules! fold {
        ($v:expr, $i:expr, $f:expr) => {{
            let f = $f;
            groups
                .iter()
                .map(|g| g.iter().fold($i, |acc, &r| f(acc, $v[r])))
                .collect::<Vec<_>>()
        }};
    }
    let bits = x.ty.bit_width();
    Ok(match (&x.data, &init.data) {
        (Data::F64(v), Data::F64(i)) => {
            let f = ew::float_reducer::<f64>(op).ok_or_else(|| {
                InterpError::Unsupported(format!("reduce with '{}' on f64", op.name()))
            })?;
            let r = match order {
                Order::Tree => tree!(v, i[0], f),
                Order::Sequential => fold!(v, i[0], f),
            };
            Array::new(x.ty, dims, Data::F64(r))
        }
        (Data::I64(v), Data::I64(i)) => {
            let r = fold!(v, i[0], |a, b| ew::signed_binary(op, a, b, bits)
                .unwrap_or(0));
            Array::new(x.ty, dims, Data::I64(r))
        }
        (Data::U64(v), Data::U64(i)) => {
            let r = fold!(v, i[0], |a, b| ew::unsigned_binary(op, a, b, bits)
                .unwrap_or(0));
            Array::new(x.ty, dims, Data::U64(r))
        }
        (Data::Pred(v), Data::Pred(i)) => {
            let f: fn(bool, bool) -> bool = match op {
                Opcode::And | Opcode::Minimum | Opcode::Multiply => |a, b| a & b,
                _ => |a, b| a | b,
            };
            Array::new(x.ty, dims, Data::Pred(fold!(v, i[0], f)))
        }
        (Data::C64(v), Data::C64(i)) => Array::new(
            x.ty,
            dims,
            Data::C64(crate::complex::fold(op, v, i[0], groups)?),
        ),
        (Data::C128(v), Data::C128(i)) => Array::new(
            x.ty,
            dims,
            Data::C128(crate::complex::fold(op, v, i[0], groups)?),
        ),
        _ => {
            // f32 and narrower floats: accumulate in f32 per step, rounding like the
            // element type after each step for narrow types (the evaluator's semantics).
            let (v, i) = (x.to_f32s(), init.to_f32s());
            let f = ew::float_reducer::<f32>(op).ok_or_else(|| {
                InterpError::Unsupported(format!("reduce with '{}' on {}", op.name(), x.ty))
            })?;
            let r = if x.ty == T::F32 && order == Order::Tree {
                tree!(&v, i[0], f)
            } else if x.ty == T::F32 {
                fold!(v, i[0], f)
            } else {
                let ty = x.ty;
                let round = move |y: f32| Array::from_op_f32s(ty, vec![1], vec![y]).to_f32s()[0];
                fold!(v, i[0], |a, b| round(f(a, b)))
            };
            Array::from_op_f32s(x.ty, dims, r)
        }
    })
}

#[cfg(test)]
mod in_place_tests {
    use super::*;

    fn array(dims: Vec<usize>, v: Vec<f32>) -> Arc<Value> {
        Arc::new(Value::Array(Array::from_f32s(T::F32, dims, v)))
    }

    fn index(i: i64) -> Arc<Value> {
        Arc::new(Value::Array(Array::from_i64s(T::S32, vec![], &[i])))
    }

    fn data_ptr(v: &Arc<Value>) -> *const f32 {
        match &v.as_array().unwrap().data {
            Data::F32(d) => d.as_ptr(),
            _ => panic!("not f32"),
        }
    }

    #[test]
    fn an_unshared_operand_is_updated_in_its_own_storage() {
        let operand = array(vec![3, 4], (0..12).map(|i| i as f32).collect());
        let before = data_ptr(&operand);
        // Row 2 clamps to row 1: a [2, 2] update fits only from row 1 on.
        let update = array(vec![2, 2], vec![-1.0, -2.0, -3.0, -4.0]);
        let mut ops = vec![operand, update.clone(), index(2), index(1)];
        let out = update_slice_in_place(&mut ops).unwrap().expect("in place");
        assert_eq!(data_ptr(&out), before);
        let want = [0., 1., 2., 3., 4., -1., -2., 7., 8., -3., -4., 11.];
        assert_eq!(out.as_array().unwrap().to_f32s(), want);
        let copy = dynamic_update_slice(
            &Array::from_f32s(T::F32, vec![3, 4], (0..12).map(|i| i as f32).collect()),
            update.as_array().unwrap(),
            &[2, 1],
        )
        .unwrap();
        assert_eq!(copy.to_f32s(), want);
    }

    #[test]
    fn a_shared_operand_is_left_alone() {
        let operand = array(vec![4], vec![1.0; 4]);
        let keep = operand.clone();
        let mut ops = vec![operand, array(vec![1], vec![9.0]), index(0)];
        assert!(update_slice_in_place(&mut ops).unwrap().is_none());
        assert_eq!(keep.as_array().unwrap().to_f32s(), vec![1.0; 4]);
        let mut ops = vec![keep.clone(), keep];
        let ins = tpusim_hlo::parse_module(
            "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT r = f32[2,2] reshape(p)\n}\n",
        )
        .unwrap();
        let reshape = ins.instr(ins.comp(ins.entry).root);
        assert!(reshape_in_place(reshape, &mut ops).unwrap().is_none());
    }

    #[test]
    fn an_unshared_reshape_keeps_its_storage() {
        let m = tpusim_hlo::parse_module(
            "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT r = f32[2,2] reshape(p)\n}\n",
        )
        .unwrap();
        let reshape = m.instr(m.comp(m.entry).root);
        let operand = array(vec![4], vec![1.0, 2.0, 3.0, 4.0]);
        let before = data_ptr(&operand);
        let mut ops = vec![operand];
        let out = reshape_in_place(reshape, &mut ops)
            .unwrap()
            .expect("in place");
        assert_eq!(data_ptr(&out), before);
        assert_eq!(out.as_array().unwrap().dims, vec![2, 2]);
    }
}
