//! Element (primitive) types, with their HLO spellings and bit widths.

macro_rules! primitive_types {
    ($( $variant:ident = $name:literal, $bits:expr, $kind:ident; )*) => {
        /// An HLO element type. Names print exactly as in HLO text (`f32`, `bf16`, ...).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum PrimitiveType { $($variant),* }

        impl PrimitiveType {
            /// Every type, in declaration order.
            pub const ALL: &'static [PrimitiveType] = &[$(PrimitiveType::$variant),*];

            /// The HLO spelling, e.g. `f8e4m3fn`.
            pub fn name(self) -> &'static str {
                match self { $(PrimitiveType::$variant => $name),* }
            }

            /// Parses an HLO spelling; `None` if it is not a type name.
            pub fn from_name(name: &str) -> Option<PrimitiveType> {
                match name {
                    $($name => Some(PrimitiveType::$variant),)*
                    "opaque_type" => Some(PrimitiveType::Opaque),
                    _ => None,
                }
            }

            /// Width of one element in bits (0 for token and opaque).
            pub fn bit_width(self) -> u32 {
                match self { $(PrimitiveType::$variant => $bits),* }
            }

            /// What family of values this type holds.
            pub fn kind(self) -> TypeKind {
                match self { $(PrimitiveType::$variant => TypeKind::$kind),* }
            }
        }
    };
}

/// Families of element types, for shape rules and literal parsing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TypeKind {
    Pred,
    Signed,
    Unsigned,
    Float,
    Complex,
    Token,
    Opaque,
    Invalid,
}

primitive_types! {
    Pred = "pred", 8, Pred;
    S1 = "s1", 1, Signed;
    S2 = "s2", 2, Signed;
    S4 = "s4", 4, Signed;
    S8 = "s8", 8, Signed;
    S16 = "s16", 16, Signed;
    S32 = "s32", 32, Signed;
    S64 = "s64", 64, Signed;
    U1 = "u1", 1, Unsigned;
    U2 = "u2", 2, Unsigned;
    U4 = "u4", 4, Unsigned;
    U8 = "u8", 8, Unsigned;
    U16 = "u16", 16, Unsigned;
    U32 = "u32", 32, Unsigned;
    U64 = "u64", 64, Unsigned;
    F16 = "f16", 16, Float;
    Bf16 = "bf16", 16, Float;
    F32 = "f32", 32, Float;
    F64 = "f64", 64, Float;
    F8E5M2 = "f8e5m2", 8, Float;
    F8E4M3 = "f8e4m3", 8, Float;
    F8E4M3FN = "f8e4m3fn", 8, Float;
    F8E4M3B11FNUZ = "f8e4m3b11fnuz", 8, Float;
    F8E5M2FNUZ = "f8e5m2fnuz", 8, Float;
    F8E4M3FNUZ = "f8e4m3fnuz", 8, Float;
    F8E3M4 = "f8e3m4", 8, Float;
    F4E2M1FN = "f4e2m1fn", 4, Float;
    F8E8M0FNU = "f8e8m0fnu", 8, Float;
    C64 = "c64", 64, Complex;
    C128 = "c128", 128, Complex;
    Token = "token", 0, Token;
    Opaque = "opaque", 0, Opaque;
    Invalid = "primitive_type_invalid", 0, Invalid;
}

impl PrimitiveType {
    pub fn is_float(self) -> bool {
        self.kind() == TypeKind::Float
    }
    pub fn is_complex(self) -> bool {
        self.kind() == TypeKind::Complex
    }
    pub fn is_integral(self) -> bool {
        matches!(self.kind(), TypeKind::Signed | TypeKind::Unsigned)
    }
    pub fn is_signed_int(self) -> bool {
        self.kind() == TypeKind::Signed
    }
    pub fn is_unsigned_int(self) -> bool {
        self.kind() == TypeKind::Unsigned
    }
    /// True for types that hold array data (not token/opaque/invalid).
    pub fn is_array_type(self) -> bool {
        !matches!(
            self.kind(),
            TypeKind::Token | TypeKind::Opaque | TypeKind::Invalid
        )
    }
    /// Bytes one element occupies unpacked (sub-byte types take a whole byte).
    pub fn byte_size(self) -> u64 {
        (self.bit_width() as u64).div_ceil(8)
    }
    /// The real component type of a complex type (`c64` -> `f32`).
    pub fn complex_component(self) -> Option<PrimitiveType> {
        match self {
            PrimitiveType::C64 => Some(PrimitiveType::F32),
            PrimitiveType::C128 => Some(PrimitiveType::F64),
            _ => None,
        }
    }
}

impl std::fmt::Display for PrimitiveType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &t in PrimitiveType::ALL {
            assert_eq!(PrimitiveType::from_name(t.name()), Some(t));
        }
        assert_eq!(PrimitiveType::from_name("tuple"), None);
        assert_eq!(
            PrimitiveType::from_name("opaque_type"),
            Some(PrimitiveType::Opaque)
        );
    }
}
