//! Constant literals (HLO_GRAMMAR §7).

use crate::shape::Shape;
use crate::types::PrimitiveType;
use std::fmt::Write;

/// A constant's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// `{...}`: the printer dropped the values; only the shape is known.
    Elided,
    Tuple(Vec<Literal>),
    /// Values in row-major logical order (whatever the layout).
    Array(LiteralData),
}

/// Element values of an array literal, widened to a few storage kinds.
/// Equality compares floats bit for bit, so a NaN equals the same NaN.
#[derive(Clone, Debug)]
pub enum LiteralData {
    Pred(Vec<bool>),
    /// Signed and unsigned integers; u64 values above i64::MAX are kept as bit patterns.
    Int(Vec<i64>),
    /// Floats of every width, already rounded to the element type.
    Float(Vec<f64>),
    Complex(Vec<(f64, f64)>),
    /// A token literal has no data.
    Token,
}

impl PartialEq for LiteralData {
    fn eq(&self, other: &Self) -> bool {
        let bits = |a: &[f64], b: &[f64]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        };
        match (self, other) {
            (LiteralData::Pred(a), LiteralData::Pred(b)) => a == b,
            (LiteralData::Int(a), LiteralData::Int(b)) => a == b,
            (LiteralData::Float(a), LiteralData::Float(b)) => bits(a, b),
            (LiteralData::Complex(a), LiteralData::Complex(b)) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| {
                        x.0.to_bits() == y.0.to_bits() && x.1.to_bits() == y.1.to_bits()
                    })
            }
            (LiteralData::Token, LiteralData::Token) => true,
            _ => false,
        }
    }
}

impl LiteralData {
    pub fn len(&self) -> usize {
        match self {
            LiteralData::Pred(v) => v.len(),
            LiteralData::Int(v) => v.len(),
            LiteralData::Float(v) => v.len(),
            LiteralData::Complex(v) => v.len(),
            LiteralData::Token => 0,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Literal {
    /// Whether this is an array literal whose every element is zero (false,
    /// 0, 0.0 or -0.0); an elided or tuple literal is not.
    pub fn is_all_zero(&self) -> bool {
        match self {
            Literal::Array(LiteralData::Pred(v)) => v.iter().all(|&x| !x),
            Literal::Array(LiteralData::Int(v)) => v.iter().all(|&x| x == 0),
            Literal::Array(LiteralData::Float(v)) => v.iter().all(|&x| x == 0.0),
            Literal::Array(LiteralData::Complex(v)) => v.iter().all(|&(r, i)| r == 0.0 && i == 0.0),
            _ => false,
        }
    }
}

/// Rounds a value read as a double to the precision of `ty` (round to nearest even).
pub fn round_to_type(value: f64, ty: PrimitiveType) -> f64 {
    match ty {
        PrimitiveType::F32 | PrimitiveType::C64 => value as f32 as f64,
        PrimitiveType::F16 => half::f16::from_f64(value).to_f64(),
        PrimitiveType::Bf16 => half::bf16::from_f64(value).to_f64(),
        _ => value,
    }
}

/// Formats a float so that reading it back as a double and rounding to `ty`
/// gives the same value. Never prints a bare integer too large to lex.
pub fn format_float(out: &mut String, v: f64, ty: PrimitiveType) {
    if v.is_nan() {
        out.push_str(if v.is_sign_negative() { "-nan" } else { "nan" });
        return;
    }
    if v.is_infinite() {
        out.push_str(if v < 0.0 { "-inf" } else { "inf" });
        return;
    }
    let narrow = !matches!(ty, PrimitiveType::F64 | PrimitiveType::C128);
    let a = v.abs();
    let plain = a == 0.0 || (1e-5..1e16).contains(&a);
    match (narrow, plain) {
        (true, true) => write!(out, "{}", v as f32),
        (true, false) => write!(out, "{:e}", v as f32),
        (false, true) => write!(out, "{v}"),
        (false, false) => write!(out, "{v:e}"),
    }
    .expect("writing to a String cannot fail");
}

/// Writes a literal of `shape` in HLO syntax (nested braces, row-major order).
pub fn write_literal(out: &mut String, lit: &Literal, shape: &Shape) {
    match (lit, shape) {
        (Literal::Elided, _) => out.push_str("{...}"),
        (Literal::Tuple(elems), Shape::Tuple(shapes)) => {
            out.push_str("( ");
            for (i, (e, s)) in elems.iter().zip(shapes).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_literal(out, e, s);
            }
            out.push_str(" )");
        }
        (Literal::Array(data), Shape::Array(a)) => {
            if a.ty == PrimitiveType::Token {
                out.push_str("token");
                return;
            }
            let mut index = 0;
            write_nested(out, data, a.ty, &a.dims, &mut index);
        }
        // A literal that does not fit its shape cannot come out of the parser.
        _ => out.push_str("{...}"),
    }
}

fn write_nested(
    out: &mut String,
    data: &LiteralData,
    ty: PrimitiveType,
    dims: &[i64],
    index: &mut usize,
) {
    let Some((&n, rest)) = dims.split_first() else {
        write_scalar(out, data, ty, *index, true);
        *index += 1;
        return;
    };
    if rest.is_empty() {
        out.push('{');
        for i in 0..n {
            if i > 0 {
                out.push_str(", ");
            }
            write_scalar(out, data, ty, *index, false);
            *index += 1;
        }
        out.push('}');
        return;
    }
    out.push_str("{ ");
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        write_nested(out, data, ty, rest, index);
    }
    out.push_str(" }");
}

fn write_scalar(out: &mut String, data: &LiteralData, ty: PrimitiveType, i: usize, scalar: bool) {
    match data {
        LiteralData::Pred(v) => {
            let b = v.get(i).copied().unwrap_or(false);
            out.push_str(match (scalar, b) {
                (true, true) => "true",
                (true, false) => "false",
                (false, true) => "1",
                (false, false) => "0",
            });
        }
        LiteralData::Int(v) => {
            let x = v.get(i).copied().unwrap_or(0);
            if ty == PrimitiveType::U64 {
                let _ = write!(out, "{}", x as u64);
            } else {
                let _ = write!(out, "{x}");
            }
        }
        LiteralData::Float(v) => format_float(out, v.get(i).copied().unwrap_or(0.0), ty),
        LiteralData::Complex(v) => {
            let (re, im) = v.get(i).copied().unwrap_or((0.0, 0.0));
            out.push('(');
            format_float(out, re, ty);
            out.push_str(", ");
            format_float(out, im, ty);
            out.push(')');
        }
        LiteralData::Token => out.push_str("token"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_lexable() {
        let mut s = String::new();
        format_float(&mut s, 1e300, PrimitiveType::F64);
        assert_eq!(s, "1e300");
        s.clear();
        format_float(&mut s, 0.1f32 as f64, PrimitiveType::F32);
        assert_eq!(s, "0.1");
        s.clear();
        format_float(&mut s, 3.4028235e38f32 as f64, PrimitiveType::F32);
        assert_eq!(s, "3.4028235e38");
    }

    #[test]
    fn all_zero_means_every_element_of_an_array() {
        let zero = |d: LiteralData| Literal::Array(d).is_all_zero();
        assert!(zero(LiteralData::Float(vec![0.0, -0.0])));
        assert!(zero(LiteralData::Pred(vec![false])));
        assert!(zero(LiteralData::Complex(vec![(0.0, -0.0)])));
        assert!(!zero(LiteralData::Int(vec![0, 1])));
        assert!(!zero(LiteralData::Complex(vec![(0.0, 1.0)])));
        assert!(!zero(LiteralData::Float(vec![f64::NAN])));
        // Unknown values are not known to be zero.
        assert!(!Literal::Elided.is_all_zero());
        assert!(!Literal::Tuple(vec![Literal::Array(LiteralData::Int(vec![0]))]).is_all_zero());
    }
}
