//! Branch-free f32 `exp` and `tanh` that compilers vectorize.
//!
//! XLA's CPU backend (and the TPU) evaluate f32 transcendentals with
//! polynomial approximations rather than the C library, so bit-exactness with
//! libm is not what XLA gives either. These are accurate to a few ulp (the
//! tests compare against libm over many inputs), keep XLA's special values
//! (NaN, ±inf, ±0, subnormal results) and, being free of calls and branches,
//! run 4-16 lanes at a time in the tiled fusion evaluator.

/// Adding and subtracting this rounds an f32 of magnitude below 2^22 to the
/// nearest integer, ties to even: unlike `round_ties_even`, it needs no SSE4.1
/// or libm call, so loops over it vectorize on any x86-64.
const ROUNDER: f32 = 12_582_912.0;

/// `2^k` for an integral `k` in `[-126, 127]`, built from its bit pattern
/// with float adds and a shift only (no float-to-int conversion, whose
/// saturating form does not vectorize on SSE2): `k + 127 + 2^23` holds
/// `k + 127` in its low mantissa bits, and shifting them into the exponent
/// field drops the rest.
#[inline(always)]
fn pow2(k: f32) -> f32 {
    const BIAS: f32 = 127.0 + 8_388_608.0;
    f32::from_bits((k.clamp(-126.0, 127.0) + BIAS).to_bits() << 23)
}

/// `e^x` within about 2 ulp; NaN stays NaN, overflow gives inf, underflow 0
/// (through subnormals).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Cody-Waite split of ln 2: k * LN2_HI is exact for |k| < 2^10.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let xc = x.clamp(-104.0, 89.0);
    let k = (xc * std::f32::consts::LOG2_E + ROUNDER) - ROUNDER;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    // Taylor series of e^r to r^7 on |r| <= ln2/2: truncation below 1e-8.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    // Scale in two halves (k is in [-150, 128]) so that 2^k below 2^-126
    // (subnormal results) and above 2^127 (overflow to inf) both come out
    // right: p * 2^half is exact and normal, the second product rounds once.
    let half = (k * 0.5 + ROUNDER) - ROUNDER;
    p * pow2(half) * pow2(k - half)
}

/// `tanh(x)` within a few ulp; NaN stays NaN, ±0 keeps its sign.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    // |x| < 0.3: the odd Taylor series to x^11 (truncation below 1e-9 relative).
    let x2 = x * x;
    let small = x
        * (1.0
            + x2 * (-1.0 / 3.0
                + x2 * (2.0 / 15.0
                    + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0 + x2 * (-1382.0 / 155_925.0))))));
    // Otherwise 1 - 2 / (e^{2|x|} + 1); beyond 10 that is 1.0 in f32.
    let e = exp(2.0 * a.min(10.0));
    let big = (1.0 - 2.0 / (e + 1.0)).copysign(x);
    let t = if a < 0.3 { small } else { big };
    if x.is_nan() {
        x
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    /// Distance in units in the last place between two finite f32 values.
    fn ulps(a: f32, b: f32) -> u32 {
        let key = |v: f32| {
            let i = v.to_bits() as i32;
            if i < 0 {
                i32::MIN - i
            } else {
                i
            }
        };
        key(a).abs_diff(key(b))
    }

    fn inputs() -> impl Iterator<Item = f32> {
        // Dense around 0 and across the whole useful range, both signs.
        (-200_000..=200_000).map(|i| i as f32 * 1e-4).chain(
            (-2000..=2000).map(|i| i as f32 * 0.05), // to ±100
        )
    }

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        let mut worst = 0;
        for x in inputs() {
            let (got, want) = (super::exp(x), x.exp());
            if want.is_finite() && want > f32::MIN_POSITIVE {
                worst = worst.max(ulps(got, want));
            }
        }
        assert!(worst <= 3, "worst error {worst} ulp");
    }

    #[test]
    fn tanh_is_within_a_few_ulp_of_libm() {
        let mut worst = 0;
        for x in inputs() {
            worst = worst.max(ulps(super::tanh(x), x.tanh()));
        }
        assert!(worst <= 4, "worst error {worst} ulp");
    }

    #[test]
    fn special_values_match_xla() {
        use super::{exp, tanh};
        assert!(exp(f32::NAN).is_nan() && tanh(f32::NAN).is_nan());
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert_eq!(exp(0.0), 1.0);
        // A subnormal result, not zero.
        let tiny = exp(-100.0);
        assert!(tiny > 0.0 && tiny < f32::MIN_POSITIVE, "{tiny:e}");
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh(20.0), 1.0);
    }
}
