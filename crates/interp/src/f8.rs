//! The sub-16-bit float types (every f8 variant and f4e2m1fn), table-driven:
//! each is described by its exponent/mantissa widths, bias and how it spells
//! infinity and NaN, and one encoder/decoder serves them all.
//!
//! Rounding follows ml_dtypes / XLA: round to nearest even from the exact
//! value; overflow (and an infinite input) gives infinity where the type has
//! one, NaN where it only has NaN (`fn`/`fnuz` types), and saturates to the
//! largest finite value for f4e2m1fn, which has neither. `fnuz` types have no
//! −0 (a negative zero or negative underflow is +0) and one NaN, 0x80. XLA
//! encodes every NaN as 0x8 (−0) in f4e2m1fn. f8e8m0fnu (the MX scale type) is
//! a bare power of two, 2^(bits−127), 0xFF is NaN.

use tpusim_hlo::PrimitiveType as T;

/// How a type spells NaN.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum NanCode {
    /// IEEE-like: exponent all ones, nonzero mantissa; canonical quiet NaN has
    /// the top mantissa bit set (f8e5m2, f8e4m3, f8e3m4).
    Ieee,
    /// Every bit but the sign set (f8e4m3fn).
    AllOnes,
    /// The negative-zero pattern, 0x80 (the `fnuz` types).
    NegZero,
    /// No NaN (f4e2m1fn): XLA writes NaN as the −0 pattern.
    None,
}

/// Bit layout of one minifloat type.
#[derive(Clone, Copy, Debug)]
pub struct Format {
    exp: u32,
    man: u32,
    bias: i32,
    has_inf: bool,
    nan: NanCode,
}

const fn fmt(exp: u32, man: u32, bias: i32, has_inf: bool, nan: NanCode) -> Format {
    Format {
        exp,
        man,
        bias,
        has_inf,
        nan,
    }
}

/// The format of `ty`, or `None` if it is not one of the table-driven minifloats
/// (f8e8m0fnu has no sign or mantissa and is handled on its own).
pub fn format(ty: T) -> Option<Format> {
    Some(match ty {
        T::F8E5M2 => fmt(5, 2, 15, true, NanCode::Ieee),
        T::F8E4M3 => fmt(4, 3, 7, true, NanCode::Ieee),
        T::F8E3M4 => fmt(3, 4, 3, true, NanCode::Ieee),
        T::F8E4M3FN => fmt(4, 3, 7, false, NanCode::AllOnes),
        T::F8E4M3FNUZ => fmt(4, 3, 8, false, NanCode::NegZero),
        T::F8E5M2FNUZ => fmt(5, 2, 16, false, NanCode::NegZero),
        T::F8E4M3B11FNUZ => fmt(4, 3, 11, false, NanCode::NegZero),
        T::F4E2M1FN => fmt(2, 1, 1, false, NanCode::None),
        _ => return None,
    })
}

/// True for every type stored as one byte of bits (`Data::F8`).
pub fn is_minifloat(ty: T) -> bool {
    ty == T::F8E8M0FNU || format(ty).is_some()
}

impl Format {
    fn sign_bit(&self) -> u8 {
        1 << (self.exp + self.man)
    }
    fn exp_ones(&self) -> u32 {
        (1 << self.exp) - 1
    }
    fn man_mask(&self) -> u32 {
        (1 << self.man) - 1
    }
    /// The largest finite pattern without the sign.
    fn max_bits(&self) -> u32 {
        let all = (self.exp_ones() << self.man) | self.man_mask();
        match (self.has_inf, self.nan) {
            // Top exponent reserved for inf/NaN.
            (true, _) => ((self.exp_ones() - 1) << self.man) | self.man_mask(),
            (false, NanCode::AllOnes) => all - 1,
            _ => all,
        }
    }
    /// The canonical NaN written for a NaN input of sign `sign`.
    fn nan_bits(&self, sign: u8) -> u8 {
        match self.nan {
            NanCode::Ieee => sign | ((self.exp_ones() << self.man) | (1 << (self.man - 1))) as u8,
            NanCode::AllOnes => sign | ((self.exp_ones() << self.man) | self.man_mask()) as u8,
            NanCode::NegZero | NanCode::None => self.sign_bit(),
        }
    }
    /// What overflow and infinite inputs of sign `sign` become.
    fn overflow_bits(&self, sign: u8) -> u8 {
        if self.has_inf {
            sign | (self.exp_ones() << self.man) as u8
        } else if self.nan == NanCode::None {
            sign | self.max_bits() as u8
        } else {
            self.nan_bits(sign)
        }
    }

    /// Rounds `x` to this format (nearest even) and returns its bits.
    pub fn encode(&self, x: f64) -> u8 {
        let sign = if x.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        if x.is_nan() {
            return self.nan_bits(sign);
        }
        if x.is_infinite() {
            return self.overflow_bits(sign);
        }
        let mag = self.round_magnitude(x.abs());
        if mag > self.max_bits() {
            return self.overflow_bits(sign);
        }
        if mag == 0 && self.nan == NanCode::NegZero {
            return 0; // no negative zero
        }
        sign | mag as u8
    }

    /// The unsigned bit pattern nearest to finite `a >= 0` (may exceed `max_bits`).
    fn round_magnitude(&self, a: f64) -> u32 {
        // Anything this small rounds to zero in every format (and avoids f64 subnormals).
        if a < 2f64.powi(-200) {
            return 0;
        }
        let emin = 1 - self.bias;
        let e = (((a.to_bits() >> 52) & 0x7FF) as i32 - 1023).max(emin);
        let one = 1u64 << self.man;
        // a / 2^(e - man) is exact in f64 (a power-of-two scaling in range);
        // below `one` it is a subnormal.
        let q = a * 2f64.powi(self.man as i32 - e);
        if q >= (1u64 << 40) as f64 {
            return u32::MAX; // far beyond any format's range
        }
        let mut r = q.round_ties_even() as u64;
        let mut e = e;
        if r == 2 * one {
            e += 1;
            r = one;
        }
        if r < one {
            return r as u32;
        }
        let field = (e + self.bias) as u64;
        let bits = (field << self.man) | (r - one);
        u32::try_from(bits).unwrap_or(u32::MAX)
    }

    /// The value of `bits` (NaNs keep their sign bit as a quiet NaN).
    pub fn decode(&self, bits: u8) -> f64 {
        let neg = bits & self.sign_bit() != 0;
        let mag = (bits & (self.sign_bit() - 1)) as u32;
        let nan = match self.nan {
            NanCode::Ieee => mag >> self.man == self.exp_ones() && mag & self.man_mask() != 0,
            NanCode::AllOnes => mag == (self.exp_ones() << self.man) | self.man_mask(),
            NanCode::NegZero => neg && mag == 0,
            NanCode::None => false,
        };
        let s = if neg { -1.0 } else { 1.0 };
        if nan {
            return f64::NAN.copysign(s);
        }
        let (field, m) = (mag >> self.man, mag & self.man_mask());
        if self.has_inf && field == self.exp_ones() {
            return f64::INFINITY.copysign(s);
        }
        let v = if field == 0 {
            m as f64 * 2f64.powi(1 - self.bias - self.man as i32)
        } else {
            (1.0 + m as f64 / (1u32 << self.man) as f64) * 2f64.powi(field as i32 - self.bias)
        };
        v.copysign(s)
    }
}

/// The value of f8e8m0fnu bits.
pub fn decode_e8m0(b: u8) -> f32 {
    if b == 0xFF {
        f32::NAN
    } else {
        (2f64.powi(b as i32 - 127)) as f32
    }
}

/// f32 to f8e8m0fnu as ml_dtypes does: the nearest power of two with ties rounding
/// up, clamped below at 2^-127; zero, negatives, NaN, inf and overflow give NaN.
fn encode_e8m0(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 || x.is_infinite() {
        return 0xFF;
    }
    let bits = (x as f64).to_bits();
    let mut e = ((bits >> 52) & 0x7FF) as i64 - 1023;
    if bits & (1u64 << 51) != 0 {
        e += 1; // mantissa >= 1.5 rounds up
    }
    match e + 127 {
        c if c < 0 => 0,
        c if c > 254 => 0xFF,
        c => c as u8,
    }
}

/// Rounds `x` to the minifloat type `ty` and returns its bits (NaN bits for a
/// type that is not a minifloat, which callers never pass).
pub fn encode(ty: T, x: f32) -> u8 {
    encode_f64(ty, x as f64)
}

/// Like [`encode`] from an f64, with one rounding.
pub fn encode_f64(ty: T, x: f64) -> u8 {
    match format(ty) {
        Some(f) => f.encode(x),
        None => encode_e8m0(x as f32),
    }
}

/// The value of minifloat bits of type `ty` as f32 (exact: every minifloat fits).
pub fn decode(ty: T, b: u8) -> f32 {
    match format(ty) {
        Some(f) => f.decode(b) as f32,
        None => decode_e8m0(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_and_overflows_like_ml_dtypes() {
        let e4 = |x| encode(T::F8E4M3FN, x);
        let e5 = |x| encode(T::F8E5M2, x);
        assert_eq!(e4(1.0), 0x38);
        assert_eq!(e4(448.0), 0x7E);
        assert_eq!(e4(460.0), 0x7E);
        assert_eq!(e4(470.0), 0x7F);
        assert_eq!(e4(f32::INFINITY), 0x7F);
        assert_eq!(e4(-f32::INFINITY), 0xFF);
        assert_eq!(e4(2f32.powi(-9)), 0x01);
        assert_eq!(e4(1.0625), 0x38); // tie to even
        assert_eq!(e5(57344.0), 0x7B);
        assert_eq!(e5(61440.0), 0x7C);
        assert_eq!(e5(-1.0), 0xBC);
        assert_eq!(e5(2f32.powi(-16)), 0x01);
        assert_eq!(e5(f32::NAN), 0x7E);
    }

    /// Bits from ml_dtypes for 0, −0, inf, −inf, NaN, −NaN, 1e30, −1e30,
    /// 1.01·max, 1.2·max, ±half the smallest subnormal, 0.51 of it.
    #[test]
    fn specials_match_ml_dtypes() {
        let table: [(T, [u8; 13]); 6] = [
            (
                T::F8E4M3FNUZ,
                [
                    0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f, 0x80, 0, 0, 1,
                ],
            ),
            (
                T::F8E5M2FNUZ,
                [
                    0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f, 0x80, 0, 0, 1,
                ],
            ),
            (
                T::F8E4M3B11FNUZ,
                [
                    0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f, 0x80, 0, 0, 1,
                ],
            ),
            (
                T::F8E4M3,
                [
                    0, 0x80, 0x78, 0xf8, 0x7c, 0xfc, 0x78, 0xf8, 0x77, 0x78, 0, 0x80, 1,
                ],
            ),
            (
                T::F8E3M4,
                [
                    0, 0x80, 0x70, 0xf0, 0x78, 0xf8, 0x70, 0xf0, 0x6f, 0x70, 0, 0x80, 1,
                ],
            ),
            // XLA (not ml_dtypes) writes −NaN as 0x8 too.
            (T::F4E2M1FN, [0, 8, 7, 0xf, 8, 8, 7, 0xf, 7, 7, 0, 8, 1]),
        ];
        for (ty, want) in table {
            let f = format(ty).expect("minifloat");
            let max = f.decode(f.max_bits() as u8);
            let sub = f.decode(1);
            let xs = [
                0.0,
                -0.0,
                f64::INFINITY,
                -f64::INFINITY,
                f64::NAN,
                -f64::NAN,
                1e30,
                -1e30,
                max * 1.01,
                max * 1.2,
                sub * 0.5,
                -sub * 0.5,
                sub * 0.51,
            ];
            for (x, w) in xs.iter().zip(want) {
                assert_eq!(f.encode(*x), w, "{ty} {x}");
            }
        }
    }

    #[test]
    fn every_pattern_round_trips() {
        for ty in [
            T::F8E5M2,
            T::F8E4M3,
            T::F8E3M4,
            T::F8E4M3FN,
            T::F8E4M3FNUZ,
            T::F8E5M2FNUZ,
            T::F8E4M3B11FNUZ,
            T::F4E2M1FN,
        ] {
            let f = format(ty).expect("minifloat");
            let n = 1u32 << (f.exp + f.man + 1);
            for b in 0..n as u8 {
                let x = f.decode(b);
                if !x.is_nan() {
                    assert_eq!(f.encode(x), b, "{ty} {b:#x}");
                }
            }
        }
        assert_eq!(decode(T::F8E4M3FNUZ, 0x7F), 240.0);
        assert_eq!(decode(T::F8E4M3B11FNUZ, 0x7F), 30.0);
        assert_eq!(decode(T::F8E3M4, 0x6F), 15.5);
        assert_eq!(decode(T::F4E2M1FN, 0x7), 6.0);
        assert!(decode(T::F8E5M2FNUZ, 0x80).is_nan());
    }

    #[test]
    fn e8m0_matches_ml_dtypes() {
        // Expected bits from ml_dtypes.float8_e8m0fnu.
        let cases: [(f32, u8); 15] = [
            (0.0, 0xFF),
            (1.0, 0x7F),
            (1.5, 0x80),
            (1.4999, 0x7F),
            (3.0, 0x81),
            (2.9, 0x80),
            (6.0, 0x82),
            (0.75, 0x7F),
            (-2.0, 0xFF),
            (f32::NAN, 0xFF),
            (f32::INFINITY, 0xFF),
            (1e-40, 0x00),
            (f32::from_bits(0x0060_0000), 0x01), // 1.5 * 2^-127
            (1.7e38, 0xFE),
            (3.4e38, 0xFF),
        ];
        for (x, want) in cases {
            assert_eq!(encode(T::F8E8M0FNU, x), want, "{x}");
        }
        assert_eq!(decode_e8m0(0x7F), 1.0);
        assert_eq!(decode_e8m0(0x00), 2f32.powi(-127));
        assert!(decode_e8m0(0xFF).is_nan());
    }
}
