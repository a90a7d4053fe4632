//! Whole-array elementwise kernels: unary, binary, compare, clamp, convert.

use crate::strided::{map1, map2};
use crate::value::{same_dims, wrap_signed, wrap_unsigned, Array, Data};
use crate::InterpError;
use tpusim_hlo::{Opcode, PrimitiveType as T};

fn unsupported(op: Opcode, ty: T) -> InterpError {
    InterpError::Unsupported(format!("opcode '{}' on element type '{ty}'", op.name()))
}

fn len_check(a: &Array, b: &Array) -> Result<(), InterpError> {
    if !same_dims(&a.dims, &b.dims) {
        return Err(InterpError::Internal(format!(
            "operand shapes differ: {:?} vs {:?}",
            a.dims, b.dims
        )));
    }
    Ok(())
}

macro_rules! float_unary {
    ($op:expr, $t:ty, $pi:expr) => {{
        let f: fn($t) -> $t = match $op {
            Opcode::Abs => |x| x.abs(),
            Opcode::Negate => |x| -x,
            Opcode::Exp => |x| x.exp(),
            Opcode::Expm1 => |x| x.exp_m1(),
            Opcode::Log => |x| x.ln(),
            Opcode::Log1p => |x| x.ln_1p(),
            Opcode::Sqrt => |x| x.sqrt(),
            Opcode::Rsqrt => |x| 1.0 / x.sqrt(),
            Opcode::Cbrt => |x| x.cbrt(),
            Opcode::Tanh => |x| x.tanh(),
            Opcode::Sin => |x| x.sin(),
            Opcode::Cos => |x| x.cos(),
            Opcode::Tan => |x| x.tan(),
            Opcode::Sinh => |x| x.sinh(),
            Opcode::Cosh => |x| x.cosh(),
            Opcode::Asin => |x| x.asin(),
            Opcode::Acos => |x| x.acos(),
            Opcode::Atan => |x| x.atan(),
            Opcode::Asinh => |x| x.asinh(),
            Opcode::Acosh => |x| x.acosh(),
            Opcode::Atanh => |x| x.atanh(),
            Opcode::Floor => |x| x.floor(),
            Opcode::Ceil => |x| x.ceil(),
            Opcode::RoundNearestAfz => |x| x.round(),
            Opcode::RoundNearestEven => |x| x.round_ties_even(),
            Opcode::Logistic => |x| 1.0 / (1.0 + (-x).exp()),
            Opcode::Sign => |x| {
                if x.is_nan() || x == 0.0 {
                    x
                } else {
                    x.signum()
                }
            },
            Opcode::Real => |x| x,
            Opcode::Imag => |_| 0.0,
            Opcode::Erf => |x| libm::erf(x as f64) as $t,
            _ => return None,
        };
        let _ = $pi;
        Some(f)
    }};
}

pub(crate) fn float_unary32(op: Opcode) -> Option<fn(f32) -> f32> {
    // Polynomial exp/tanh, as XLA's CPU backend uses (see `fastmath`).
    match op {
        Opcode::Exp => Some(crate::fastmath::exp),
        Opcode::Tanh => Some(crate::fastmath::tanh),
        _ => float_unary!(op, f32, 0),
    }
}
fn float_unary64(op: Opcode) -> Option<fn(f64) -> f64> {
    float_unary!(op, f64, 0)
}

/// Applies a unary op; `out` is the result element type.
pub fn unary(op: Opcode, a: &Array, out: T) -> Result<Array, InterpError> {
    let dims = a.dims.clone();
    if op == Opcode::IsFinite {
        let v: Vec<bool> = match &a.data {
            Data::F64(v) => v.iter().map(|x| x.is_finite()).collect(),
            _ if a.ty.is_float() => a.to_f32s().iter().map(|x| x.is_finite()).collect(),
            _ => return Err(unsupported(op, a.ty)),
        };
        return Ok(Array::new(T::Pred, dims, Data::Pred(v)));
    }
    if let Data::C64(_) | Data::C128(_) = a.data {
        return crate::complex::unary(op, a, out);
    }
    let bits = a.ty.bit_width();
    match &a.data {
        Data::F64(v) => {
            let f = float_unary64(op).ok_or_else(|| unsupported(op, a.ty))?;
            Ok(Array::new(out, dims, Data::F64(map1(v, |&x| f(x)))))
        }
        Data::F32(_) | Data::Bf16(_) | Data::F16(_) | Data::F8(_) => {
            let v = match &a.data {
                Data::F32(x) => crate::fused::unary_f32(op, x),
                _ => crate::fused::unary_f32(op, &a.to_f32s()),
            }
            .ok_or_else(|| unsupported(op, a.ty))?;
            Ok(Array::from_op_f32s(out, dims, v))
        }
        Data::I64(v) => {
            let mask = wrap_unsigned(u64::MAX, bits);
            let f: Box<dyn Fn(i64) -> i64> = match op {
                Opcode::Abs => Box::new(|x: i64| x.wrapping_abs()),
                Opcode::Negate => Box::new(|x: i64| x.wrapping_neg()),
                Opcode::Not => Box::new(|x: i64| !x),
                Opcode::Sign => Box::new(|x: i64| x.signum()),
                Opcode::Popcnt => Box::new(move |x: i64| ((x as u64) & mask).count_ones() as i64),
                Opcode::Clz => Box::new(move |x: i64| {
                    (((x as u64) & mask).leading_zeros() - (64 - bits)) as i64
                }),
                _ => return Err(unsupported(op, a.ty)),
            };
            Ok(Array::new(
                out,
                dims,
                Data::I64(v.iter().map(|&x| wrap_signed(f(x), bits)).collect()),
            ))
        }
        Data::U64(v) => {
            let f: Box<dyn Fn(u64) -> u64> = match op {
                Opcode::Abs => Box::new(|x| x),
                Opcode::Negate => Box::new(|x: u64| x.wrapping_neg()),
                Opcode::Not => Box::new(|x: u64| !x),
                Opcode::Sign => Box::new(|x: u64| (x != 0) as u64),
                Opcode::Popcnt => Box::new(|x: u64| x.count_ones() as u64),
                Opcode::Clz => Box::new(move |x: u64| (x.leading_zeros() - (64 - bits)) as u64),
                _ => return Err(unsupported(op, a.ty)),
            };
            Ok(Array::new(
                out,
                dims,
                Data::U64(v.iter().map(|&x| wrap_unsigned(f(x), bits)).collect()),
            ))
        }
        Data::Pred(v) if op == Opcode::Not => Ok(Array::new(
            out,
            dims,
            Data::Pred(v.iter().map(|&x| !x).collect()),
        )),
        _ => Err(unsupported(op, a.ty)),
    }
}

/// The float kernel of a simple reducer or combiner (add, multiply, max, min).
pub(crate) fn float_reducer<
    F: num_like::Float + std::ops::Add<Output = F> + std::ops::Mul<Output = F>,
>(
    op: Opcode,
) -> Option<fn(F, F) -> F> {
    Some(match op {
        Opcode::Add => |a, b| a + b,
        Opcode::Multiply => |a, b| a * b,
        Opcode::Maximum => fmax,
        Opcode::Minimum => fmin,
        _ => return None,
    })
}

/// XLA's maximum: NaN-propagating (lhs NaN first) and IEEE 754-2019 on
/// zeros, +0 above -0 whichever side it is on.
pub fn fmax<F: num_like::Float>(a: F, b: F) -> F {
    if a.is_nan_() {
        a
    } else if b.is_nan_() || a < b || (a == b && a.is_sign_negative_()) {
        b
    } else {
        a
    }
}
/// XLA's minimum: NaN-propagating (lhs NaN first) and IEEE 754-2019 on
/// zeros, -0 below +0 whichever side it is on.
pub fn fmin<F: num_like::Float>(a: F, b: F) -> F {
    if a.is_nan_() {
        a
    } else if b.is_nan_() || b < a || (a == b && b.is_sign_negative_()) {
        b
    } else {
        a
    }
}

pub(crate) mod num_like {
    pub trait Float: Copy + PartialOrd {
        fn is_nan_(self) -> bool;
        fn is_sign_negative_(self) -> bool;
    }
    impl Float for f32 {
        fn is_nan_(self) -> bool {
            self.is_nan()
        }
        fn is_sign_negative_(self) -> bool {
            self.is_sign_negative()
        }
    }
    impl Float for f64 {
        fn is_nan_(self) -> bool {
            self.is_nan()
        }
        fn is_sign_negative_(self) -> bool {
            self.is_sign_negative()
        }
    }
}

macro_rules! float_binary {
    ($op:expr, $t:ty) => {{
        let f: fn($t, $t) -> $t = match $op {
            Opcode::Add => |x, y| x + y,
            Opcode::Subtract => |x, y| x - y,
            Opcode::Multiply => |x, y| x * y,
            Opcode::Divide => |x, y| x / y,
            Opcode::Remainder => |x, y| x % y,
            Opcode::Maximum => fmax,
            Opcode::Minimum => fmin,
            Opcode::Atan2 => |y, x| y.atan2(x),
            Opcode::Power => |x, y| {
                if y == 0.0 || x == 1.0 {
                    1.0
                } else {
                    x.powf(y)
                }
            },
            _ => return None,
        };
        Some(f)
    }};
}
pub(crate) fn float_binary32(op: Opcode) -> Option<fn(f32, f32) -> f32> {
    float_binary!(op, f32)
}
fn float_binary64(op: Opcode) -> Option<fn(f64, f64) -> f64> {
    float_binary!(op, f64)
}

fn int_pow(mut base: i64, mut exp: i64) -> i64 {
    if exp == 0 || base == 1 {
        return 1;
    }
    if exp < 0 {
        return 0;
    }
    let mut acc: i64 = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}

/// Signed binary op at width `bits` (values already sign-extended).
pub fn signed_binary(op: Opcode, x: i64, y: i64, bits: u32) -> Option<i64> {
    let ucount = wrap_unsigned(y as u64, bits);
    let r = match op {
        Opcode::Add => x.wrapping_add(y),
        Opcode::Subtract => x.wrapping_sub(y),
        Opcode::Multiply => x.wrapping_mul(y),
        Opcode::Divide => {
            if y == 0 {
                -1
            } else {
                x.wrapping_div(y)
            }
        }
        Opcode::Remainder => {
            if y == 0 {
                x
            } else {
                x.wrapping_rem(y)
            }
        }
        Opcode::Maximum => x.max(y),
        Opcode::Minimum => x.min(y),
        Opcode::And => x & y,
        Opcode::Or => x | y,
        Opcode::Xor => x ^ y,
        Opcode::ShiftLeft => {
            if ucount >= bits as u64 {
                0
            } else {
                x << ucount
            }
        }
        Opcode::ShiftRightLogical => {
            if ucount >= bits as u64 {
                0
            } else {
                (wrap_unsigned(x as u64, bits) >> ucount) as i64
            }
        }
        Opcode::ShiftRightArithmetic => {
            if ucount >= bits as u64 {
                if x < 0 {
                    -1
                } else {
                    0
                }
            } else {
                x >> ucount
            }
        }
        Opcode::Power => int_pow(x, y),
        Opcode::Mulhi => ((x as i128 * y as i128) >> bits) as i64,
        _ => return None,
    };
    Some(wrap_signed(r, bits))
}

/// Unsigned binary op at width `bits` (values already masked).
pub fn unsigned_binary(op: Opcode, x: u64, y: u64, bits: u32) -> Option<u64> {
    let r = match op {
        Opcode::Add => x.wrapping_add(y),
        Opcode::Subtract => x.wrapping_sub(y),
        Opcode::Multiply => x.wrapping_mul(y),
        Opcode::Divide => x.checked_div(y).unwrap_or(u64::MAX),
        Opcode::Remainder => {
            if y == 0 {
                x
            } else {
                x % y
            }
        }
        Opcode::Maximum => x.max(y),
        Opcode::Minimum => x.min(y),
        Opcode::And => x & y,
        Opcode::Or => x | y,
        Opcode::Xor => x ^ y,
        Opcode::ShiftLeft => {
            if y >= bits as u64 {
                0
            } else {
                x << y
            }
        }
        Opcode::ShiftRightLogical => {
            if y >= bits as u64 {
                0
            } else {
                x >> y
            }
        }
        Opcode::ShiftRightArithmetic => {
            let s = wrap_signed(x as i64, bits);
            if y >= bits as u64 {
                if s < 0 {
                    u64::MAX
                } else {
                    0
                }
            } else {
                (s >> y) as u64
            }
        }
        Opcode::Power => {
            if y == 0 || x == 1 {
                1
            } else {
                int_pow(x as i64, (y.min(i64::MAX as u64)) as i64) as u64
            }
        }
        Opcode::Mulhi => ((x as u128 * y as u128) >> bits) as u64,
        _ => return None,
    };
    Some(wrap_unsigned(r, bits))
}

/// Applies a binary op (including `compare`); `out` is the result element type.
pub fn binary(
    op: Opcode,
    a: &Array,
    b: &Array,
    out: T,
    direction: Option<&str>,
    cmp_type: Option<&str>,
) -> Result<Array, InterpError> {
    len_check(a, b)?;
    if a.ty != b.ty {
        return Err(InterpError::Internal(format!(
            "operand types differ: {} vs {}",
            a.ty, b.ty
        )));
    }
    let dims = a.dims.clone();
    if op == Opcode::Compare {
        let dir =
            direction.ok_or_else(|| InterpError::Internal("compare without direction".into()))?;
        return Ok(Array::new(
            T::Pred,
            dims,
            Data::Pred(compare(a, b, dir, cmp_type)?),
        ));
    }
    if op == Opcode::Complex {
        return crate::complex::make(a, b, out);
    }
    if let Data::C64(_) | Data::C128(_) = a.data {
        return crate::complex::binary(op, a, b, out);
    }
    let bits = a.ty.bit_width();
    match (&a.data, &b.data) {
        (Data::F64(x), Data::F64(y)) => {
            let f = float_binary64(op).ok_or_else(|| unsupported(op, a.ty))?;
            Ok(Array::new(
                out,
                dims,
                Data::F64(map2(x, y, |&p, &q| f(p, q))),
            ))
        }
        (Data::F32(x), Data::F32(y)) => {
            let v = crate::fused::binary_f32(op, x, y).ok_or_else(|| unsupported(op, a.ty))?;
            Ok(Array::new(out, dims, Data::F32(v)))
        }
        (Data::Bf16(_), _) | (Data::F16(_), _) | (Data::F8(_), _) => {
            let (x, y) = (a.to_f32s(), b.to_f32s());
            let v = crate::fused::binary_f32(op, &x, &y).ok_or_else(|| unsupported(op, a.ty))?;
            Ok(Array::from_op_f32s(out, dims, v))
        }
        (Data::I64(x), Data::I64(y)) => {
            signed_binary(op, 0, 0, bits).ok_or_else(|| unsupported(op, a.ty))?;
            let v = map2(x, y, |&p, &q| signed_binary(op, p, q, bits).unwrap_or(0));
            Ok(Array::new(out, dims, Data::I64(v)))
        }
        (Data::U64(x), Data::U64(y)) => {
            unsigned_binary(op, 0, 0, bits).ok_or_else(|| unsupported(op, a.ty))?;
            let v = map2(x, y, |&p, &q| unsigned_binary(op, p, q, bits).unwrap_or(0));
            Ok(Array::new(out, dims, Data::U64(v)))
        }
        (Data::Pred(x), Data::Pred(y)) => {
            let f: fn(bool, bool) -> bool = match op {
                Opcode::And | Opcode::Minimum | Opcode::Multiply => |p, q| p & q,
                Opcode::Or | Opcode::Maximum | Opcode::Add => |p, q| p | q,
                Opcode::Xor => |p, q| p ^ q,
                _ => return Err(unsupported(op, a.ty)),
            };
            Ok(Array::new(
                out,
                dims,
                Data::Pred(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()),
            ))
        }
        _ => Err(unsupported(op, a.ty)),
    }
}

fn ord_result(dir: &str, o: Option<std::cmp::Ordering>) -> Result<bool, InterpError> {
    use std::cmp::Ordering::*;
    Ok(match dir {
        "EQ" => o == Some(Equal),
        "NE" => o != Some(Equal),
        "LT" => o == Some(Less),
        "LE" => matches!(o, Some(Less | Equal)),
        "GT" => o == Some(Greater),
        "GE" => matches!(o, Some(Greater | Equal)),
        _ => {
            return Err(InterpError::Unsupported(format!(
                "compare direction '{dir}'"
            )))
        }
    })
}

fn cmp_all<X: Copy>(
    x: &[X],
    y: &[X],
    dir: &str,
    f: impl Fn(X, X) -> Option<std::cmp::Ordering>,
) -> Result<Vec<bool>, InterpError> {
    ord_result(dir, None)?;
    x.iter()
        .zip(y)
        .map(|(&p, &q)| ord_result(dir, f(p, q)))
        .collect()
}

fn compare(
    a: &Array,
    b: &Array,
    dir: &str,
    cmp_type: Option<&str>,
) -> Result<Vec<bool>, InterpError> {
    let total = cmp_type == Some("TOTALORDER");
    match (&a.data, &b.data) {
        (Data::Pred(x), Data::Pred(y)) => cmp_all(x, y, dir, |p, q| Some(p.cmp(&q))),
        (Data::I64(x), Data::I64(y)) => cmp_all(x, y, dir, |p, q| Some(p.cmp(&q))),
        (Data::U64(x), Data::U64(y)) => cmp_all(x, y, dir, |p, q| Some(p.cmp(&q))),
        (Data::F32(x), Data::F32(y)) if total => cmp_all(x, y, dir, |p, q| Some(p.total_cmp(&q))),
        (Data::F32(x), Data::F32(y)) => cmp_all(x, y, dir, |p, q| p.partial_cmp(&q)),
        (Data::C64(x), Data::C64(y)) => complex_eq(x, y, dir, a.ty),
        (Data::C128(x), Data::C128(y)) => complex_eq(x, y, dir, a.ty),
        _ => {
            let (x, y) = (a.to_f64s(), b.to_f64s());
            if total {
                cmp_all(&x, &y, dir, |p, q| Some(p.total_cmp(&q)))
            } else {
                cmp_all(&x, &y, dir, |p, q| p.partial_cmp(&q))
            }
        }
    }
}

/// EQ/NE of complex values (componentwise IEEE equality); other directions are errors.
fn complex_eq<X: PartialEq>(x: &[X], y: &[X], dir: &str, ty: T) -> Result<Vec<bool>, InterpError> {
    if dir != "EQ" && dir != "NE" {
        return Err(InterpError::Unsupported(format!(
            "compare direction '{dir}' on {ty}"
        )));
    }
    Ok(x.iter()
        .zip(y)
        .map(|(p, q)| (p == q) == (dir == "EQ"))
        .collect())
}

/// `clamp(lo, x, hi)` with scalar or full-shape bounds.
pub fn clamp(lo: &Array, x: &Array, hi: &Array) -> Result<Array, InterpError> {
    let n = x.len();
    let pick = |arr: &Array| -> Result<Array, InterpError> {
        if arr.len() == n {
            Ok(arr.clone())
        } else if arr.len() == 1 {
            Ok(Array::new(arr.ty, x.dims.clone(), arr.data.splat(0, n)))
        } else {
            Err(InterpError::Internal("clamp bound shape mismatch".into()))
        }
    };
    let (lo, hi) = (pick(lo)?, pick(hi)?);
    let lo_x = binary(Opcode::Maximum, x, &lo, x.ty, None, None)?;
    let mut r = binary(Opcode::Minimum, &hi, &lo_x, x.ty, None, None)?;
    // NaN in lo propagates ahead of x (min(hi, max(x, lo)) checks x first).
    if x.ty.is_float() {
        let (lv, xv) = (lo.to_f64s(), x.to_f64s());
        let nan_lo: Vec<usize> = (0..n)
            .filter(|&i| lv[i].is_nan() && !xv[i].is_nan())
            .collect();
        if !nan_lo.is_empty() {
            r.data.put(&nan_lo, &lo.data.take(&nan_lo))?;
        }
    }
    Ok(r)
}

/// `convert`: float→int saturates (NaN→0), anything→pred is `x != 0`.
pub fn convert(a: &Array, to: T) -> Result<Array, InterpError> {
    let dims = a.dims.clone();
    if a.ty == to {
        return Ok(a.clone());
    }
    let bits = to.bit_width();
    if to == T::Pred {
        let v: Vec<bool> = match &a.data {
            Data::I64(v) => v.iter().map(|&x| x != 0).collect(),
            Data::U64(v) => v.iter().map(|&x| x != 0).collect(),
            Data::C64(v) => v.iter().map(|&(r, i)| r != 0.0 || i != 0.0).collect(),
            Data::C128(v) => v.iter().map(|&(r, i)| r != 0.0 || i != 0.0).collect(),
            _ => a.to_f64s().iter().map(|&x| x != 0.0).collect(),
        };
        return Ok(Array::new(to, dims, Data::Pred(v)));
    }
    if to.is_signed_int() || to.is_unsigned_int() {
        let (lo, hi): (f64, f64) = if to.is_signed_int() {
            (
                -(2f64.powi(bits as i32 - 1)),
                2f64.powi(bits as i32 - 1) - 1.0,
            )
        } else {
            (0.0, 2f64.powi(bits as i32) - 1.0)
        };
        let data = match (&a.data, to.is_signed_int()) {
            (Data::Pred(v), true) => Data::I64(v.iter().map(|&x| x as i64).collect()),
            (Data::Pred(v), false) => Data::U64(v.iter().map(|&x| x as u64).collect()),
            (Data::I64(v), true) => Data::I64(v.iter().map(|&x| wrap_signed(x, bits)).collect()),
            (Data::I64(v), false) => {
                Data::U64(v.iter().map(|&x| wrap_unsigned(x as u64, bits)).collect())
            }
            (Data::U64(v), true) => {
                Data::I64(v.iter().map(|&x| wrap_signed(x as i64, bits)).collect())
            }
            (Data::U64(v), false) => Data::U64(v.iter().map(|&x| wrap_unsigned(x, bits)).collect()),
            (_, signed) => {
                // Complex sources convert their real parts.
                let f = a.to_f64s();
                // XLA saturates by comparing with the bounds rounded to the source
                // type: f4e2m1fn rounds 7 (or 2^31 - 1) to 6.0, so 6.0 gives the max.
                let src = a.ty.complex_component().unwrap_or(a.ty);
                let in_src = |v: f64| Array::from_f64s(src, vec![1], &[v]).to_f64s()[0];
                let (lo_s, hi_s) = (in_src(lo), in_src(hi));
                let sat = |x: f64| {
                    if x >= hi_s {
                        hi
                    } else if x <= lo_s {
                        lo
                    } else {
                        x
                    }
                };
                if signed {
                    // `as` saturates at i64 and maps NaN to 0; then clamp to the width.
                    Data::I64(
                        f.iter()
                            .map(|&x| (sat(x) as i64).clamp(lo as i64, hi as i64))
                            .collect(),
                    )
                } else {
                    Data::U64(f.iter().map(|&x| (sat(x) as u64).min(hi as u64)).collect())
                }
            }
        };
        return Ok(Array::new(to, dims, data));
    }
    if to.is_complex() {
        return Ok(Array::new(to, dims, to_complex(a, to)));
    }
    // Float targets: one rounding from the exact source value.
    Ok(match (&a.data, to) {
        (Data::I64(v), T::F32) => {
            Array::new(to, dims, Data::F32(v.iter().map(|&x| x as f32).collect()))
        }
        (Data::U64(v), T::F32) => {
            Array::new(to, dims, Data::F32(v.iter().map(|&x| x as f32).collect()))
        }
        (Data::C64(_) | Data::C128(_), _) => Array::from_f64s(to, dims, &a.to_f64s()),
        (Data::F8(_), _) | (Data::Bf16(_), _) | (Data::F16(_), _) | (Data::F32(_), _) => {
            Array::from_f32s(to, dims, a.to_f32s())
        }
        _ => Array::from_f64s(to, dims, &a.to_f64s()),
    })
}

/// `convert` to c64 or c128: complex sources round each component, real ones
/// become the real part (one rounding from the exact value).
fn to_complex(a: &Array, to: T) -> Data {
    match (&a.data, to) {
        (Data::C64(v), T::C128) => Data::C128(
            v.iter()
                .map(|&(r, i)| (f64::from(r), f64::from(i)))
                .collect(),
        ),
        (Data::C128(v), T::C64) => {
            Data::C64(v.iter().map(|&(r, i)| (r as f32, i as f32)).collect())
        }
        (Data::C64(v), _) => Data::C64(v.clone()),
        (Data::C128(v), _) => Data::C128(v.clone()),
        (_, T::C128) => Data::C128(a.to_f64s().into_iter().map(|r| (r, 0.0)).collect()),
        (Data::F64(v), _) => Data::C64(v.iter().map(|&x| (x as f32, 0.0)).collect()),
        (Data::I64(v), _) => Data::C64(v.iter().map(|&x| (x as f32, 0.0)).collect()),
        (Data::U64(v), _) => Data::C64(v.iter().map(|&x| (x as f32, 0.0)).collect()),
        _ => Data::C64(a.to_f32s().into_iter().map(|r| (r, 0.0)).collect()),
    }
}
