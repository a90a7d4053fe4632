//! `sort` (HLO_SEMANTICS §7.3), `topk` and the `TopK` custom call (§7.4).
//!
//! Sorting is always stable (the evaluator's merge sort). When the comparator is
//! `compare(key(p_2k), key(p_2k+1))` with LT or GT, the key is computed once for the
//! whole array (lifted) and rows are sorted by it; any other comparator is called per
//! comparison.

use crate::eval::Interp;
use crate::lift::{call_scalar, internal, lift, mirrored, scalar_at, truth};
use crate::value::same_dims;
use crate::value::{elem_count, strides, Array, Data, Value};
use crate::InterpError;
use std::sync::Arc;
use tpusim_hlo::{CompId, Opcode, PrimitiveType as T};

/// Sort keys as u64s whose unsigned order is the compare's order (so rows sort as
/// `(key, position)` pairs, which is the stable order, with cache-friendly access).
struct Keys(Vec<u64>);

impl Keys {
    /// Keys of `a` ordered like `compare(.., type=TOTALORDER)` when `total`, else like
    /// an IEEE compare (None when a NaN makes that order partial); reversed when `desc`.
    fn of(a: &Array, total: bool, desc: bool) -> Option<Keys> {
        const SIGN: u64 = 1 << 63;
        let mut k: Vec<u64> = match &a.data {
            Data::I64(v) => v.iter().map(|&x| x as u64 ^ SIGN).collect(),
            Data::U64(v) => v.clone(),
            Data::Pred(v) => v.iter().map(|&b| b as u64).collect(),
            Data::C64(_) | Data::C128(_) => return None,
            _ => {
                let f = a.to_f64s();
                if !total && f.iter().any(|x| x.is_nan()) {
                    return None;
                }
                f.into_iter()
                    .map(|x| {
                        // IEEE compares see -0 == +0; TOTALORDER puts -0 first.
                        let bits = if total {
                            x.to_bits()
                        } else {
                            (x + 0.0).to_bits()
                        };
                        if bits & SIGN != 0 {
                            !bits
                        } else {
                            bits | SIGN
                        }
                    })
                    .collect()
            }
        };
        if desc {
            k.iter_mut().for_each(|x| *x = !*x);
        }
        Some(Keys(k))
    }
}

/// Bitwise equality of two arrays (NaN equals the same NaN).
fn same_bits(a: &Array, b: &Array) -> bool {
    match (&a.data, &b.data) {
        (Data::F32(x), Data::F32(y)) => x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
        (Data::F64(x), Data::F64(y)) => x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
        (Data::Bf16(x), Data::Bf16(y)) => x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
        (Data::F16(x), Data::F16(y)) => x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
        (Data::C64(_) | Data::C128(_), _) => false,
        _ => a.data == b.data,
    }
}

/// Keys (already reversed for a descending order) when `cmp` is a compare of one
/// lifted key.
fn fast_keys(interp: &Interp, cmp: CompId, xs: &[&Array]) -> Result<Option<Keys>, InterpError> {
    let comp = interp.m.comp(cmp);
    let root = interp.m.instr(comp.root);
    if root.opcode != Opcode::Compare || root.operands.len() != 2 {
        return Ok(None);
    }
    let desc = match root.attr_ident("direction") {
        Some("LT") => false,
        Some("GT") => true,
        _ => return Ok(None),
    };
    let total = root.attr_ident("type") == Some("TOTALORDER");
    let dims = &xs[0].dims;
    // `compare(key(a), key(b))` for operand k, or `compare(key(b), key(a))` (reversed).
    for k in 0..xs.len() {
        for reversed in [false, true] {
            let (pa, pb) = if reversed {
                (2 * k + 1, 2 * k)
            } else {
                (2 * k, 2 * k + 1)
            };
            let mut params: Vec<Option<&Array>> = vec![None; 2 * xs.len()];
            params[pa] = Some(xs[k]);
            let Some(ka) = lift(interp, cmp, root.operands[0], &params, dims)? else {
                continue;
            };
            // The usual comparator applies one key function to both sides: lift it once.
            let (x, y) = (root.operands[0], root.operands[1]);
            if mirrored(interp, x, y, pa as i64, pb as i64, &mut 1000) {
                return Ok(Keys::of(&ka, total, desc != reversed));
            }
            params.swap(pa, pb);
            let Some(kb) = lift(interp, cmp, root.operands[1], &params, dims)? else {
                continue;
            };
            if !same_bits(&ka, &kb) {
                return Ok(None);
            }
            return Ok(Keys::of(&ka, total, desc != reversed));
        }
    }
    Ok(None)
}

/// Stable bottom-up merge sort of `perm` with a fallible strict-weak-order `less`.
fn merge_sort(
    perm: &mut Vec<usize>,
    less: &mut dyn FnMut(usize, usize) -> Result<bool, InterpError>,
) -> Result<(), InterpError> {
    let n = perm.len();
    let mut buf = Vec::with_capacity(n);
    let mut width = 1;
    while width < n {
        buf.clear();
        for lo in (0..n).step_by(2 * width) {
            let mid = (lo + width).min(n);
            let hi = (lo + 2 * width).min(n);
            let (mut i, mut j) = (lo, mid);
            while i < mid && j < hi {
                if less(perm[j], perm[i])? {
                    buf.push(perm[j]);
                    j += 1;
                } else {
                    buf.push(perm[i]);
                    i += 1;
                }
            }
            buf.extend_from_slice(&perm[i..mid]);
            buf.extend_from_slice(&perm[j..hi]);
        }
        std::mem::swap(perm, &mut buf);
        width *= 2;
    }
    Ok(())
}

/// Whether element `a[t]` must come before `b[t]` for every pair `t`, by the lifted
/// comparator with ties broken by position (None when `c` is not elementwise).
fn lifted_before(
    interp: &Interp,
    c: CompId,
    xs: &[&Array],
    a: &[usize],
    b: &[usize],
) -> Result<Option<Vec<bool>>, InterpError> {
    let m = a.len();
    if m == 0 {
        return Ok(Some(Vec::new()));
    }
    let side = |idx: &[usize]| -> Vec<Array> {
        xs.iter()
            .map(|x| Array::new(x.ty, vec![m], x.data.take(idx)))
            .collect()
    };
    let (xa, xb) = (side(a), side(b));
    let root = interp.m.comp(c).root;
    let less = |first: &[Array], second: &[Array]| -> Result<Option<Vec<bool>>, InterpError> {
        let params: Vec<Option<&Array>> = first
            .iter()
            .zip(second)
            .flat_map(|(p, q)| [Some(p), Some(q)])
            .collect();
        Ok(match lift(interp, c, root, &params, &[m])? {
            Some(Array {
                data: Data::Pred(v),
                ..
            }) => Some(v),
            _ => None,
        })
    };
    let (Some(ab), Some(ba)) = (less(&xa, &xb)?, less(&xb, &xa)?) else {
        return Ok(None);
    };
    Ok(Some(
        (0..m).map(|t| ab[t] || (!ba[t] && a[t] < b[t])).collect(),
    ))
}

/// Sorts every row at once with a bitonic network: each stage's compare-exchanges
/// evaluate the lifted comparator over all pairs together, so a general comparator
/// costs whole-array ops instead of one interpreter call per comparison. Ties are
/// broken by original position, which gives exactly the stable sort. Returns the
/// sorted linear indices row after row, or None when `c` is not elementwise.
fn bitonic_lifted(
    interp: &Interp,
    c: CompId,
    xs: &[&Array],
    bases: &[usize],
    n: usize,
    sd: usize,
) -> Result<Option<Vec<usize>>, InterpError> {
    const PAD: usize = usize::MAX;
    let p2 = n.next_power_of_two();
    let mut slots: Vec<usize> = bases
        .iter()
        .flat_map(|&b| (0..p2).map(move |i| if i < n { b + i * sd } else { PAD }))
        .collect();
    let mut k = 2;
    while k <= p2 {
        let mut j = k / 2;
        while j > 0 {
            let (mut at, mut a, mut b) = (Vec::new(), Vec::new(), Vec::new());
            for s in 0..slots.len() {
                let p = s % p2;
                if p & j != 0 {
                    continue;
                }
                let ascending = p & k == 0;
                let (x, y) = (slots[s], slots[s + j]);
                if x != PAD && y != PAD {
                    at.push(s);
                    a.push(x);
                    b.push(y);
                } else if (x == PAD && y != PAD && ascending)
                    || (y == PAD && x != PAD && !ascending)
                {
                    // Padding sorts after every element.
                    slots.swap(s, s + j);
                }
            }
            let Some(before) = lifted_before(interp, c, xs, &a, &b)? else {
                return Ok(None);
            };
            for (t, &s) in at.iter().enumerate() {
                let ascending = (s % p2) & k == 0;
                if before[t] != ascending {
                    slots.swap(s, s + j);
                }
            }
            j /= 2;
        }
        k *= 2;
    }
    Ok(Some(slots.into_iter().filter(|&s| s != PAD).collect()))
}

/// For every row along `dim`, the linear source index of each sorted position.
fn sorted_sources(
    interp: &Interp,
    xs: &[&Array],
    dim: usize,
    cmp: Option<CompId>,
    default_desc: bool,
) -> Result<Vec<usize>, InterpError> {
    let dims = &xs[0].dims;
    if dim >= dims.len() || xs.iter().any(|a| !same_dims(&a.dims, dims)) {
        return Err(internal(
            "sort operands differ in shape or dimension is out of range",
        ));
    }
    let st = strides(dims);
    let (n, sd) = (dims[dim], st[dim]);
    let mut row_dims = dims.clone();
    row_dims[dim] = 1;
    let bases = crate::gather::offsets(&row_dims, &st);
    let fast = match cmp {
        Some(c) => fast_keys(interp, c, xs)?,
        None => Keys::of(xs[0], true, default_desc),
    };
    let mut src = vec![0usize; elem_count(dims)];
    if let (None, Some(c)) = (&fast, cmp) {
        if let Some(sorted) = bitonic_lifted(interp, c, xs, &bases, n, sd)? {
            for (r, &base) in bases.iter().enumerate() {
                for i in 0..n {
                    src[base + i * sd] = sorted[r * n + i];
                }
            }
            return Ok(src);
        }
    }
    let mut perm: Vec<usize> = Vec::with_capacity(n);
    let mut keyed: Vec<(u64, usize)> = Vec::with_capacity(n);
    for &base in &bases {
        perm.clear();
        match (&fast, cmp) {
            (Some(Keys(keys)), _) => {
                keyed.clear();
                keyed.extend((0..n).map(|i| (keys[base + i * sd], base + i * sd)));
                keyed.sort_unstable();
                perm.extend(keyed.iter().map(|&(_, p)| p));
            }
            (None, Some(c)) => {
                perm.extend((0..n).map(|i| base + i * sd));
                let mut less = |a: usize, b: usize| -> Result<bool, InterpError> {
                    let args: Vec<Arc<Value>> = xs
                        .iter()
                        .flat_map(|x| [scalar_at(x, a), scalar_at(x, b)])
                        .collect();
                    let r = call_scalar(interp, c, &args)?;
                    truth(
                        r.first()
                            .ok_or_else(|| internal("comparator returned nothing"))?,
                    )
                };
                merge_sort(&mut perm, &mut less)?;
            }
            (None, None) => {
                return Err(InterpError::Unsupported(format!("top-k on '{}'", xs[0].ty)))
            }
        }
        for (i, &p) in perm.iter().enumerate() {
            src[base + i * sd] = p;
        }
    }
    Ok(src)
}

/// `sort(xs...), dimensions={dim}, to_apply=cmp`.
pub(crate) fn sort(
    interp: &Interp,
    xs: &[&Array],
    dim: usize,
    cmp: CompId,
) -> Result<Value, InterpError> {
    if xs.is_empty() {
        return Err(internal("sort without operands"));
    }
    let src = sorted_sources(interp, xs, dim, Some(cmp), false)?;
    let mut outs: Vec<Value> = xs
        .iter()
        .map(|a| Value::Array(Array::new(a.ty, a.dims.clone(), a.data.take(&src))))
        .collect();
    Ok(if outs.len() == 1 {
        outs.remove(0)
    } else {
        Value::tuple(outs)
    })
}

/// The first `k` elements of every row along the last dim, with their s32 indices.
fn first_k(x: &Array, src: &[usize], k: usize) -> Result<Value, InterpError> {
    let rank = x.dims.len();
    let n = x.dims.last().copied().unwrap_or(1);
    if k > n {
        return Err(internal("top-k with k larger than the dimension"));
    }
    let rows = src.len().checked_div(n).unwrap_or(0);
    let mut take = Vec::with_capacity(rows * k);
    let mut idx = Vec::with_capacity(rows * k);
    for r in 0..rows {
        for &s in &src[r * n..r * n + k] {
            take.push(s);
            idx.push((s - r * n) as i64);
        }
    }
    let mut dims = x.dims.clone();
    if rank > 0 {
        dims[rank - 1] = k;
    }
    Ok(Value::tuple(vec![
        Value::Array(Array::new(x.ty, dims.clone(), x.data.take(&take))),
        Value::Array(Array::from_i64s(T::S32, dims, &idx)),
    ]))
}

/// `topk(x), k, largest`: sorted along the last dim, ties to the lower index.
pub(crate) fn topk(
    interp: &Interp,
    x: &Array,
    k: usize,
    largest: bool,
) -> Result<Value, InterpError> {
    let last = x.dims.len().saturating_sub(1);
    if x.dims.is_empty() {
        return Err(internal("topk of a scalar"));
    }
    let src = sorted_sources(interp, &[x], last, None, largest)?;
    first_k(x, &src, k)
}

/// `custom-call(x), custom_call_target="TopK"`: sort `(x, iota)` along the last dim
/// with the attached comparator, keep the first `k` (the result shape's last dim).
pub(crate) fn topk_custom_call(
    interp: &Interp,
    x: &Array,
    cmp: Option<CompId>,
    k: usize,
) -> Result<Value, InterpError> {
    let Some(cmp) = cmp else {
        return topk(interp, x, k, true);
    };
    let rank = x.dims.len();
    if rank == 0 {
        return Err(internal("TopK of a scalar"));
    }
    let n = x.dims[rank - 1];
    let iota: Vec<i64> = (0..x.len()).map(|i| (i % n.max(1)) as i64).collect();
    let iota = Array::from_i64s(T::S32, x.dims.clone(), &iota);
    let src = sorted_sources(interp, &[x, &iota], rank - 1, Some(cmp), true)?;
    first_k(x, &src, k)
}
