//! c64 arithmetic: elementwise kernels, `complex`, `real`/`imag`, and complex dots.
//!
//! Every op follows XLA's real expansion (`complex_math`), so results at
//! infinite, NaN and zero components are XLA's.

use crate::complex_math as cm;
use crate::value::{Array, Data};
use crate::InterpError;
use tpusim_hlo::{Opcode, PrimitiveType as T};

type C = (f32, f32);

fn unsupported(op: Opcode) -> InterpError {
    InterpError::Unsupported(format!("opcode '{}' on element type 'c64'", op.name()))
}

fn values(a: &Array) -> Result<&[C], InterpError> {
    match &a.data {
        Data::C64(v) => Ok(v),
        _ => Err(InterpError::Internal(format!(
            "expected a c64 operand, found {}",
            a.ty
        ))),
    }
}

/// Unary op on a c64 array; `abs`, `real` and `imag` produce f32.
pub fn unary(op: Opcode, a: &Array, out: T) -> Result<Array, InterpError> {
    let v = values(a)?;
    let dims = a.dims.clone();
    let real_out = |f: fn(C) -> f32| {
        Array::new(
            out,
            dims.clone(),
            Data::F32(v.iter().map(|&c| f(c)).collect()),
        )
    };
    match op {
        Opcode::Real => return Ok(real_out(|c| c.0)),
        Opcode::Imag => return Ok(real_out(|c| c.1)),
        Opcode::Abs => return Ok(real_out(cm::abs)),
        _ => {}
    }
    let f: fn(C) -> C = match op {
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
        _ => return Err(unsupported(op)),
    };
    Ok(Array::new(
        out,
        dims,
        Data::C64(v.iter().map(|&c| f(c)).collect()),
    ))
}

/// Binary op on two c64 arrays.
pub fn binary(op: Opcode, a: &Array, b: &Array, out: T) -> Result<Array, InterpError> {
    let (x, y) = (values(a)?, values(b)?);
    let f: fn(C, C) -> C = match op {
        Opcode::Add => |p, q| (p.0 + q.0, p.1 + q.1),
        Opcode::Subtract => |p, q| (p.0 - q.0, p.1 - q.1),
        Opcode::Multiply => cm::mul,
        Opcode::Divide => cm::div,
        Opcode::Power => cm::pow_c,
        _ => return Err(unsupported(op)),
    };
    Ok(Array::new(
        out,
        a.dims.clone(),
        Data::C64(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()),
    ))
}

/// `complex(re, im)` from two f32 arrays.
pub fn make(re: &Array, im: &Array, out: T) -> Result<Array, InterpError> {
    if out != T::C64 {
        return Err(InterpError::Unsupported(format!("element type '{out}'")));
    }
    let (r, i) = (re.to_f32s(), im.to_f32s());
    Ok(Array::new(
        out,
        re.dims.clone(),
        Data::C64(r.into_iter().zip(i).collect()),
    ))
}

/// Batched complex GEMM `[bn, m, k] x [bn, k, n]` as four real GEMMs.
pub fn gemm(
    x: &Array,
    y: &Array,
    bn: usize,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<C>, InterpError> {
    let parts = |a: &Array| -> Result<(Vec<f32>, Vec<f32>), InterpError> {
        Ok(match &a.data {
            Data::C64(v) => v.iter().copied().unzip(),
            _ => (a.to_f32s(), vec![0.0; a.len()]),
        })
    };
    let ((xr, xi), (yr, yi)) = (parts(x)?, parts(y)?);
    let g = |p: &[f32], q: &[f32]| crate::ops::gemm_f32(p, q, bn, m, k, n);
    let (rr, ii, ri, ir) = (g(&xr, &yr)?, g(&xi, &yi)?, g(&xr, &yi)?, g(&xi, &yr)?);
    Ok((0..bn * m * n)
        .map(|j| (rr[j] - ii[j], ri[j] + ir[j]))
        .collect())
}

/// Adds or multiplies c64 groups (the fast path of `reduce`).
pub fn fold(op: Opcode, v: &[C], init: C, groups: &[Vec<usize>]) -> Result<Vec<C>, InterpError> {
    let f: fn(C, C) -> C = match op {
        Opcode::Add => |p, q| (p.0 + q.0, p.1 + q.1),
        Opcode::Multiply => |p, q| (p.0 * q.0 - p.1 * q.1, p.0 * q.1 + p.1 * q.0),
        _ => {
            return Err(InterpError::Unsupported(format!(
                "reduce with '{}' on c64",
                op.name()
            )))
        }
    };
    Ok(groups
        .iter()
        .map(|g| g.iter().fold(init, |acc, &r| f(acc, v[r])))
        .collect())
}
