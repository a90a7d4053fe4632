//! `triangular-solve` and `cholesky` over batched matrices (the last two dims).
//!
//! Both run in complex f64 (real inputs have a zero imaginary part) so one code path
//! serves every float type and `ADJOINT`; results round once to the element type.

use crate::value::{Array, Data};
use crate::InterpError;
use num_complex::Complex64 as C;
use tpusim_hlo::PrimitiveType as T;

fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

pub(crate) fn to_complex(a: &Array) -> Result<Vec<C>, InterpError> {
    match &a.data {
        Data::C64(v) => Ok(v.iter().map(|&(r, i)| C::new(r as f64, i as f64)).collect()),
        Data::C128(v) => Ok(v.iter().map(|&(r, i)| C::new(r, i)).collect()),
        _ if a.ty.is_float() => Ok(a.to_f64s().into_iter().map(|r| C::new(r, 0.0)).collect()),
        _ => Err(InterpError::Unsupported(format!(
            "linear algebra on element type '{}'",
            a.ty
        ))),
    }
}

pub(crate) fn from_complex(ty: T, dims: Vec<usize>, v: &[C]) -> Array {
    if ty == T::C64 {
        Array::new(
            ty,
            dims,
            Data::C64(v.iter().map(|z| (z.re as f32, z.im as f32)).collect()),
        )
    } else if ty == T::C128 {
        Array::new(
            ty,
            dims,
            Data::C128(v.iter().map(|z| (z.re, z.im)).collect()),
        )
    } else {
        Array::from_f64s(ty, dims, &v.iter().map(|z| z.re).collect::<Vec<_>>())
    }
}

/// The last two dims of `a`, checked square when `square`.
fn matrix_dims(a: &Array) -> Result<(usize, usize), InterpError> {
    let r = a.dims.len();
    if r < 2 {
        return Err(internal("linear algebra operand of rank < 2"));
    }
    Ok((a.dims[r - 2], a.dims[r - 1]))
}

/// Options of `triangular-solve`.
pub struct SolveOptions<'a> {
    pub left_side: bool,
    pub lower: bool,
    pub unit_diagonal: bool,
    /// NO_TRANSPOSE, TRANSPOSE or ADJOINT.
    pub transpose_a: &'a str,
}

/// `triangular-solve(a, b)`: `op(a) x = b` (left side) or `x op(a) = b`.
pub fn triangular_solve(a: &Array, b: &Array, o: &SolveOptions) -> Result<Array, InterpError> {
    let (m, m2) = matrix_dims(a)?;
    let (br, bc) = matrix_dims(b)?;
    let k = if o.left_side { br } else { bc };
    if m != m2 || k != m {
        return Err(internal("triangular-solve operand shapes do not fit"));
    }
    let (av, bv) = (to_complex(a)?, to_complex(b)?);
    if m == 0 || br * bc == 0 {
        return Ok(b.clone());
    }
    let batches = av.len() / (m * m);
    if bv.len() != batches * br * bc {
        return Err(internal("triangular-solve batch dimensions do not match"));
    }
    let mut out = Vec::with_capacity(bv.len());
    for i in 0..batches {
        let am = &av[i * m * m..(i + 1) * m * m];
        let bm = &bv[i * br * bc..(i + 1) * br * bc];
        out.extend(solve_one(am, bm, m, br, bc, o)?);
    }
    Ok(from_complex(b.ty, b.dims.clone(), &out))
}

fn solve_one(
    a: &[C],
    b: &[C],
    m: usize,
    br: usize,
    bc: usize,
    o: &SolveOptions,
) -> Result<Vec<C>, InterpError> {
    let zero = C::new(0.0, 0.0);
    // The triangle of `a` that is read, with a unit diagonal if asked.
    let tri = |i: usize, j: usize| -> C {
        if (o.lower && j > i) || (!o.lower && j < i) {
            zero
        } else if i == j && o.unit_diagonal {
            C::new(1.0, 0.0)
        } else {
            a[i * m + j]
        }
    };
    let (transposed, conj) = match o.transpose_a {
        "NO_TRANSPOSE" => (false, false),
        "TRANSPOSE" => (true, false),
        "ADJOINT" => (true, true),
        other => return Err(InterpError::Unsupported(format!("transpose_a={other}"))),
    };
    let op = |i: usize, j: usize| -> C {
        let v = if transposed { tri(j, i) } else { tri(i, j) };
        if conj {
            v.conj()
        } else {
            v
        }
    };
    let op_lower = o.lower != transposed;
    // Reduce to T x = rhs with T m×m: left side T = op(a); right side
    // x op(a) = b  <=>  op(a)^T x^T = b^T.
    let (t_lower, n) = if o.left_side {
        (op_lower, bc)
    } else {
        (!op_lower, br)
    };
    let t = |i: usize, j: usize| if o.left_side { op(i, j) } else { op(j, i) };
    let rhs = |i: usize, c: usize| {
        if o.left_side {
            b[i * bc + c]
        } else {
            b[c * bc + i]
        }
    };
    let mut x = vec![zero; m * n];
    let rows: Vec<usize> = if t_lower {
        (0..m).collect()
    } else {
        (0..m).rev().collect()
    };
    for c in 0..n {
        for &i in &rows {
            let mut s = rhs(i, c);
            let done: Box<dyn Iterator<Item = usize>> = if t_lower {
                Box::new(0..i)
            } else {
                Box::new(i + 1..m)
            };
            for j in done {
                s -= t(i, j) * x[j * n + c];
            }
            x[i * n + c] = s / t(i, i);
        }
    }
    if o.left_side {
        return Ok(x);
    }
    // x holds x^T (m×n); the result is n×m = br×bc.
    Ok((0..br * bc).map(|p| x[(p % bc) * n + p / bc]).collect())
}

/// `cholesky(a), lower`: the factor in the requested triangle and zeros in the
/// other. Only that triangle of `a` is read. A matrix that is not positive definite
/// gives all NaNs.
pub fn cholesky(a: &Array, lower: bool) -> Result<Array, InterpError> {
    let (n, n2) = matrix_dims(a)?;
    if n != n2 {
        return Err(internal("cholesky of a non-square matrix"));
    }
    if n == 0 {
        return Ok(a.clone());
    }
    let av = to_complex(a)?;
    let mut out = Vec::with_capacity(av.len());
    for mat in av.chunks(n * n) {
        // Hermitian matrix from the stored triangle: h(i, j) for j <= i.
        let h = |i: usize, j: usize| {
            if lower {
                mat[i * n + j]
            } else {
                mat[j * n + i].conj()
            }
        };
        let l = factor(n, h);
        let f = |i: usize, j: usize| -> C {
            match &l {
                None => C::new(f64::NAN, f64::NAN),
                Some(l) if lower => {
                    if j <= i {
                        l[i * n + j]
                    } else {
                        C::new(0.0, 0.0)
                    }
                }
                Some(l) => {
                    if j >= i {
                        l[j * n + i].conj()
                    } else {
                        C::new(0.0, 0.0)
                    }
                }
            }
        };
        out.extend((0..n * n).map(|p| f(p / n, p % n)));
    }
    Ok(from_complex(a.ty, a.dims.clone(), &out))
}

/// Lower Cholesky factor of the Hermitian matrix `h`, or None if it is not
/// positive definite.
fn factor(n: usize, h: impl Fn(usize, usize) -> C) -> Option<Vec<C>> {
    let mut l = vec![C::new(0.0, 0.0); n * n];
    for j in 0..n {
        let mut d = h(j, j).re;
        for k in 0..j {
            d -= l[j * n + k].norm_sqr();
        }
        if d.is_nan() || d <= 0.0 {
            return None;
        }
        let djj = d.sqrt();
        l[j * n + j] = C::new(djj, 0.0);
        for i in j + 1..n {
            let mut s = h(i, j);
            for k in 0..j {
                s -= l[i * n + k] * l[j * n + k].conj();
            }
            l[i * n + j] = s / djj;
        }
    }
    Some(l)
}

/// LAPACK `potrf`: the factor in the `lower` (or upper) triangle, the other triangle
/// of `a` unchanged, and per matrix whether it was positive definite.
pub fn potrf(a: &Array, lower: bool) -> Result<(Array, Vec<bool>), InterpError> {
    let (n, n2) = matrix_dims(a)?;
    if n != n2 {
        return Err(internal("potrf of a non-square matrix"));
    }
    if n == 0 {
        let batch = a.dims[..a.dims.len() - 2].iter().product();
        return Ok((a.clone(), vec![true; batch]));
    }
    let av = to_complex(a)?;
    let mut out = Vec::with_capacity(av.len());
    let mut ok = Vec::new();
    for mat in av.chunks(n * n) {
        let h = |i: usize, j: usize| {
            if lower {
                mat[i * n + j]
            } else {
                mat[j * n + i].conj()
            }
        };
        let l = factor(n, h);
        ok.push(l.is_some());
        out.extend((0..n * n).map(|p| {
            let (i, j) = (p / n, p % n);
            let in_triangle = if lower { j <= i } else { j >= i };
            match &l {
                Some(l) if in_triangle && lower => l[i * n + j],
                Some(l) if in_triangle => l[j * n + i].conj(),
                None if in_triangle => C::new(f64::NAN, f64::NAN),
                _ => mat[p],
            }
        }));
    }
    Ok((from_complex(a.ty, a.dims.clone(), &out), ok))
}
