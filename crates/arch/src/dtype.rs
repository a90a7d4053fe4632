//! Matrix-multiply operand types with a peak rate in the chip files.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The operand type of a matrix multiply, as far as peak throughput goes.
///
/// `Tf32` is not a storage type: it is how GPUs run f32 dots at XLA's default
/// precision. All fp8 variants (`f8e4m3fn`, `f8e5m2`, ...) share one rate, and
/// signed and unsigned integers of one width share one rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatmulDtype {
    /// Full-precision f32 (XLA `HIGHEST`).
    F32,
    /// TensorFloat-32 (NVIDIA tensor cores).
    Tf32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
    /// Any 8-bit float.
    Fp8,
    /// 8-bit integers (`s8`, `u8`).
    Int8,
    /// 4-bit integers (`s4`, `u4`).
    Int4,
}

impl MatmulDtype {
    /// Every variant, widest first.
    pub const ALL: [MatmulDtype; 7] = [
        MatmulDtype::F32,
        MatmulDtype::Tf32,
        MatmulDtype::Bf16,
        MatmulDtype::F16,
        MatmulDtype::Fp8,
        MatmulDtype::Int8,
        MatmulDtype::Int4,
    ];

    /// Short lowercase name (`"bf16"`, `"fp8"`, ...), as accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            MatmulDtype::F32 => "f32",
            MatmulDtype::Tf32 => "tf32",
            MatmulDtype::Bf16 => "bf16",
            MatmulDtype::F16 => "f16",
            MatmulDtype::Fp8 => "fp8",
            MatmulDtype::Int8 => "int8",
            MatmulDtype::Int4 => "int4",
        }
    }

    /// Maps an HLO element type name (`f32`, `bf16`, `f16`, `f8e4m3fn`,
    /// `f8e5m2`, `s8`, `u8`, `s4`, `u4`, ...) to its matmul rate class.
    /// Returns `None` for types with no matmul peak (`pred`, `s32`, `f64`, ...).
    pub fn from_hlo_name(name: &str) -> Option<MatmulDtype> {
        match name {
            "f32" => Some(MatmulDtype::F32),
            "bf16" => Some(MatmulDtype::Bf16),
            "f16" => Some(MatmulDtype::F16),
            "s8" | "u8" => Some(MatmulDtype::Int8),
            "s4" | "u4" => Some(MatmulDtype::Int4),
            n if n.starts_with("f8") => Some(MatmulDtype::Fp8),
            _ => None,
        }
    }

    /// The type whose rate is charged when a chip has no native rate for
    /// `self`: XLA widens such operands (int4 → int8 → bf16, fp8 → bf16,
    /// f16 → bf16) and runs TF32 requests as f32. `None` for f32 and bf16,
    /// which every chip file must give.
    pub fn fallback(self) -> Option<MatmulDtype> {
        match self {
            MatmulDtype::F32 | MatmulDtype::Bf16 => None,
            MatmulDtype::Tf32 => Some(MatmulDtype::F32),
            MatmulDtype::F16 | MatmulDtype::Fp8 | MatmulDtype::Int8 => Some(MatmulDtype::Bf16),
            MatmulDtype::Int4 => Some(MatmulDtype::Int8),
        }
    }
}

impl fmt::Display for MatmulDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error from parsing a [`MatmulDtype`] name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown matmul dtype `{0}`; expected one of f32, tf32, bf16, f16, fp8, int8, int4 or an HLO type name such as s8 or f8e4m3fn")]
pub struct UnknownDtype(pub String);

impl FromStr for MatmulDtype {
    type Err = UnknownDtype;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        MatmulDtype::ALL
            .into_iter()
            .find(|d| d.name() == lower)
            .or_else(|| MatmulDtype::from_hlo_name(&lower))
            .ok_or_else(|| UnknownDtype(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in MatmulDtype::ALL {
            assert_eq!(d.name().parse::<MatmulDtype>().unwrap(), d);
        }
    }

    #[test]
    fn hlo_names_map_to_rate_classes() {
        assert_eq!(
            MatmulDtype::from_hlo_name("f8e4m3fn"),
            Some(MatmulDtype::Fp8)
        );
        assert_eq!(MatmulDtype::from_hlo_name("u8"), Some(MatmulDtype::Int8));
        assert_eq!(MatmulDtype::from_hlo_name("s32"), None);
        assert!("f64".parse::<MatmulDtype>().is_err());
    }

    #[test]
    fn fallback_chains_end_at_a_required_rate() {
        for d in MatmulDtype::ALL {
            let mut cur = d;
            while let Some(next) = cur.fallback() {
                cur = next;
            }
            assert!(matches!(cur, MatmulDtype::F32 | MatmulDtype::Bf16), "{d}");
        }
    }
}
