//! c64 and c128 arithmetic: elementwise kernels, `complex`, `real`/`imag`, and
//! complex dots, one generic code path over the component type.
//!
//! Every op follows XLA's real expansion (`complex_math`), so results at
//! infinite, NaN and zero components are XLA's.

use crate::complex_math::{self as cm, Real, C};
use crate::gemm::{batched_matmul, GemmScalar, Strides};
use crate::value::{Array, Data};
use crate::InterpError;
use tpusim_hlo::{Opcode, PrimitiveType as T};

/// A component type with its complex and real storage variants.
pub(crate) trait Component: Real + GemmScalar {
    /// The complex element type (`c64` / `c128`).
    const TY: T;
    fn complex(d: &Data) -> Option<&[C<Self>]>;
    fn wrap_complex(v: Vec<C<Self>>) -> Data;
    fn wrap_real(v: Vec<Self>) -> Data;
    /// Every element of a real array, converted.
    fn reals(a: &Array) -> Vec<Self>;
}

impl Component for f32 {
    const TY: T = T::C64;
    fn complex(d: &Data) -> Option<&[C<f32>]> {
        match d {
            Data::C64(v) => Some(v),
            _ => None,
        }
    }
    fn wrap_complex(v: Vec<C<f32>>) -> Data {
        Data::C64(v)
    }
    fn wrap_real(v: Vec<f32>) -> Data {
        Data::F32(v)
    }
    fn reals(a: &Array) -> Vec<f32> {
        a.to_f32s()
    }
}

impl Component for f64 {
    const TY: T = T::C128;
    fn complex(d: &Data) -> Option<&[C<f64>]> {
        match d {
            Data::C128(v) => Some(v),
            _ => None,
        }
    }
    fn wrap_complex(v: Vec<C<f64>>) -> Data {
        Data::C128(v)
    }
    fn wrap_real(v: Vec<f64>) -> Data {
        Data::F64(v)
    }
    fn reals(a: &Array) -> Vec<f64> {
        a.to_f64s()
    }
}

fn unsupported(op: Opcode, ty: T) -> InterpError {
    InterpError::Unsupported(format!("opcode '{}' on element type '{ty}'", op.name()))
}

fn values<F: Component>(a: &Array) -> Result<&[C<F>], InterpError> {
    F::complex(&a.data).ok_or_else(|| {
        InterpError::Internal(format!("expected a {} operand, found {}", F::TY, a.ty))
    })
}

/// Unary op on a complex array; `abs`, `real` and `imag` produce its component type.
pub fn unary(op: Opcode, a: &Array, out: T) -> Result<Array, InterpError> {
    match a.data {
        Data::C128(_) => unary_t::<f64>(op, a, out),
        _ => unary_t::<f32>(op, a, out),
    }
}

fn unary_t<F: Component>(op: Opcode, a: &Array, out: T) -> Result<Array, InterpError> {
    let v = values::<F>(a)?;
    let dims = a.dims.clone();
    let real_out = |f: fn(C<F>) -> F| {
        Array::new(
            out,
            dims.clone(),
            F::wrap_real(v.iter().map(|&c| f(c)).collect()),
        )
    };
    match op {
        Opcode::Real => return Ok(real_out(|c| c.0)),
        Opcode::Imag => return Ok(real_out(|c| c.1)),
        Opcode::Abs => return Ok(real_out(cm::abs)),
        _ => {}
    }
    let f: fn(C<F>) -> C<F> = match op {
        Opcode::Negate => |c| (-c.0, -c.1),
        Opcode::Exp => cm::exp_c,
        Opcode::Expm1 => cm::expm1_c,
        Opcode::Log => cm::log_c,
        Opcode::Log1p => cm::log1p_c,
        Opcode::Sqrt => cm::sqrt_c,
        Opcode::Rsqrt => cm::rsqrt_c,
        Opcode::Sin => cm::sin_c,
        Opcode::Cos => cm::cos_c,
        Opcode::Tan => cm::tan_c,
        Opcode::Tanh => cm::tanh_c,
        Opcode::Sign => cm::sign_c,
        _ => return Err(unsupported(op, a.ty)),
    };
    Ok(Array::new(
        out,
        dims,
        F::wrap_complex(v.iter().map(|&c| f(c)).collect()),
    ))
}

/// Binary op on two complex arrays of the same type.
pub fn binary(op: Opcode, a: &Array, b: &Array, out: T) -> Result<Array, InterpError> {
    match a.data {
        Data::C128(_) => binary_t::<f64>(op, a, b, out),
        _ => binary_t::<f32>(op, a, b, out),
    }
}

fn binary_t<F: Component>(op: Opcode, a: &Array, b: &Array, out: T) -> Result<Array, InterpError> {
    let (x, y) = (values::<F>(a)?, values::<F>(b)?);
    let f: fn(C<F>, C<F>) -> C<F> = match op {
        Opcode::Add => |p, q| (p.0 + q.0, p.1 + q.1),
        Opcode::Subtract => |p, q| (p.0 - q.0, p.1 - q.1),
        Opcode::Multiply => cm::mul,
        Opcode::Divide => cm::div,
        Opcode::Power => cm::pow_c,
        _ => return Err(unsupported(op, a.ty)),
    };
    Ok(Array::new(
        out,
        a.dims.clone(),
        F::wrap_complex(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()),
    ))
}

/// `complex(re, im)` from two real arrays.
pub fn make(re: &Array, im: &Array, out: T) -> Result<Array, InterpError> {
    let data = match out {
        T::C64 => Data::C64(re.to_f32s().into_iter().zip(im.to_f32s()).collect()),
        T::C128 => Data::C128(re.to_f64s().into_iter().zip(im.to_f64s()).collect()),
        _ => return Err(InterpError::Unsupported(format!("element type '{out}'"))),
    };
    Ok(Array::new(out, re.dims.clone(), data))
}

/// Batched complex GEMM `[bn, m, k] x [bn, k, n]` as four real GEMMs, producing `out`
/// (c64 or c128) storage.
pub fn gemm(
    x: &Array,
    y: &Array,
    (bn, m, k, n): (usize, usize, usize, usize),
    out: T,
) -> Result<Data, InterpError> {
    match out {
        T::C128 => Ok(Data::C128(gemm_t::<f64>(x, y, bn, m, k, n)?)),
        _ => Ok(Data::C64(gemm_t::<f32>(x, y, bn, m, k, n)?)),
    }
}

fn gemm_t<F: Component>(
    x: &Array,
    y: &Array,
    bn: usize,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<C<F>>, InterpError> {
    let parts = |a: &Array| -> (Vec<F>, Vec<F>) {
        match F::complex(&a.data) {
            Some(v) => v.iter().copied().unzip(),
            None => {
                let r = F::reals(a);
                let zeros = vec![F::ZERO; r.len()];
                (r, zeros)
            }
        }
    };
    let ((xr, xi), (yr, yi)) = (parts(x), parts(y));
    let g = |p: &[F], q: &[F]| {
        batched_matmul(
            bn,
            m,
            k,
            n,
            p,
            Strides::dense(m, k),
            q,
            Strides::dense(k, n),
        )
    };
    let (rr, ii, ri, ir) = (g(&xr, &yr)?, g(&xi, &yi)?, g(&xr, &yi)?, g(&xi, &yr)?);
    Ok((0..bn * m * n)
        .map(|j| (rr[j] - ii[j], ri[j] + ir[j]))
        .collect())
}

/// Adds or multiplies complex groups (the fast path of `reduce`).
pub fn fold<F: Component>(
    op: Opcode,
    v: &[C<F>],
    init: C<F>,
    groups: &[Vec<usize>],
) -> Result<Vec<C<F>>, InterpError> {
    let f: fn(C<F>, C<F>) -> C<F> = match op {
        Opcode::Add => |p, q| (p.0 + q.0, p.1 + q.1),
        Opcode::Multiply => |p, q| (p.0 * q.0 - p.1 * q.1, p.0 * q.1 + p.1 * q.0),
        _ => {
            return Err(InterpError::Unsupported(format!(
                "reduce with '{}' on {}",
                op.name(),
                F::TY
            )))
        }
    };
    Ok(groups
        .iter()
        .map(|g| g.iter().fold(init, |acc, &r| f(acc, v[r])))
        .collect())
}
