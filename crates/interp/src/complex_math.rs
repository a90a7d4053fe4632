//! XLA's expansions of the complex functions into real formulas, for c64
//! (f32 components) and c128 (f64 components) alike.
//!
//! XLA does not evaluate complex functions by C99 Annex G: its elemental
//! emitter expands each one into real arithmetic (Smith's division, tanh from
//! expm1 and cos²/sin·cos, abs as max·sqrt(1 + (min/max)²), pow through
//! |z|^c·e^(−d·arg z), ...) and patches a few corner cases with selects. At
//! infinite, NaN and zero components the results are whatever those formulas
//! give, so we evaluate the same formulas: arithmetic in the component type
//! (so overflow happens where XLA's does), each real elementary function
//! evaluated in f64 and rounded once (for c64 at least as accurate as XLA's
//! f32 intrinsics).

use std::ops::{Add, Div, Mul, Neg, Sub};

/// A complex value as (re, im).
pub(crate) type C<F> = (F, F);

/// A complex component type: f32 (c64) or f64 (c128).
pub(crate) trait Real:
    Copy
    + PartialOrd
    + Send
    + Sync
    + 'static
    + Neg<Output = Self>
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    const INF: Self;
    const NAN: Self;
    /// Rounds an f64 to this type.
    fn of(x: f64) -> Self;
    /// Widens to f64 (exact).
    fn wide(self) -> f64;
    fn abs(self) -> Self;
    fn sqrt(self) -> Self;
    fn copysign(self, sign: Self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            const INF: $t = <$t>::INFINITY;
            const NAN: $t = <$t>::NAN;
            fn of(x: f64) -> $t {
                x as $t
            }
            fn wide(self) -> f64 {
                self as f64
            }
            fn abs(self) -> $t {
                <$t>::abs(self)
            }
            fn sqrt(self) -> $t {
                <$t>::sqrt(self)
            }
            fn copysign(self, sign: $t) -> $t {
                <$t>::copysign(self, sign)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
real!(f32);
real!(f64);

fn k<F: Real>(x: f64) -> F {
    F::of(x)
}
fn lift<F: Real>(x: F, f: fn(f64) -> f64) -> F {
    F::of(f(x.wide()))
}
fn exp<F: Real>(x: F) -> F {
    lift(x, f64::exp)
}
fn expm1<F: Real>(x: F) -> F {
    lift(x, f64::exp_m1)
}
fn ln<F: Real>(x: F) -> F {
    lift(x, f64::ln)
}
fn ln_1p<F: Real>(x: F) -> F {
    lift(x, f64::ln_1p)
}
fn sin<F: Real>(x: F) -> F {
    lift(x, f64::sin)
}
fn cos<F: Real>(x: F) -> F {
    lift(x, f64::cos)
}
/// cos(x) − 1 without cancellation near 0 (NaN at ±inf and NaN, like cos − 1).
fn cosm1<F: Real>(x: F) -> F {
    let h = (x.wide() * 0.5).sin();
    F::of(-2.0 * h * h)
}
fn atan2<F: Real>(y: F, x: F) -> F {
    F::of(y.wide().atan2(x.wide()))
}
fn sqrt<F: Real>(x: F) -> F {
    x.sqrt()
}
fn rsqrt<F: Real>(x: F) -> F {
    k::<F>(1.0) / x.sqrt()
}
fn pow<F: Real>(x: F, y: F) -> F {
    F::of(x.wide().powf(y.wide()))
}
/// XLA's NaN-propagating maximum and minimum (operands here are never −0).
fn max_nan<F: Real>(a: F, b: F) -> F {
    if a.is_nan() || b.is_nan() {
        F::NAN
    } else {
        if a < b {
            b
        } else {
            a
        }
    }
}
fn min_nan<F: Real>(a: F, b: F) -> F {
    if a.is_nan() || b.is_nan() {
        F::NAN
    } else {
        if b < a {
            b
        } else {
            a
        }
    }
}

/// (min, max, 1 + (min/max)²) of |re| and |im|: the pieces of every |z|.
fn abs_parts<F: Real>(z: C<F>) -> (F, F, F) {
    let (ar, ai) = (z.0.abs(), z.1.abs());
    let (mx, mn) = (max_nan(ar, ai), min_nan(ar, ai));
    let d = mn / mx;
    (mn, mx, k::<F>(1.0) + d * d)
}

/// |z| = max·sqrt(1 + (min/max)²); where that is NaN ((0,0), (inf,inf), NaN) it is min.
pub(crate) fn abs<F: Real>(z: C<F>) -> F {
    let (mn, mx, s) = abs_parts(z);
    let r = mx * sqrt(s);
    if r.is_nan() {
        mn
    } else {
        r
    }
}

fn sqrt_abs<F: Real>(z: C<F>) -> F {
    let (mn, mx, s) = abs_parts(z);
    let r = sqrt(mx) * pow(s, k::<F>(0.25));
    if r.is_nan() {
        mn
    } else {
        r
    }
}

fn rsqrt_abs<F: Real>(z: C<F>) -> F {
    let (mn, mx, s) = abs_parts(z);
    let r = rsqrt(mx) * rsqrt(sqrt(s));
    if r.is_nan() {
        rsqrt(mn)
    } else {
        r
    }
}

pub(crate) fn mul<F: Real>(p: C<F>, q: C<F>) -> C<F> {
    (p.0 * q.0 - p.1 * q.1, p.0 * q.1 + p.1 * q.0)
}

/// Smith's division, then XLA's fixes where it gives (NaN, NaN): a zero
/// denominator, an infinite numerator over a finite one, and the reverse.
pub(crate) fn div<F: Real>(a: C<F>, b: C<F>) -> C<F> {
    let (ar, ai, br, bi) = (a.0, a.1, b.0, b.1);
    let r_over_i = br / bi;
    let r_i_denom = bi + r_over_i * br;
    let i_over_r = bi / br;
    let i_r_denom = br + i_over_r * bi;
    let (br_abs, bi_abs) = (br.abs(), bi.abs());
    let (cr, ci) = if br_abs < bi_abs {
        (
            (r_over_i * ar + ai) / r_i_denom,
            (r_over_i * ai - ar) / r_i_denom,
        )
    } else {
        (
            (i_over_r * ai + ar) / i_r_denom,
            (ai - i_over_r * ar) / i_r_denom,
        )
    };
    if !(cr.is_nan() && ci.is_nan()) {
        return (cr, ci);
    }
    let inf = F::INF;
    let unit_if =
        |cond: bool, sign_of: F| (if cond { k::<F>(1.0) } else { k::<F>(0.0) }).copysign(sign_of);
    if br_abs == k::<F>(0.0) && bi_abs == k::<F>(0.0) && (!ar.is_nan() || !ai.is_nan()) {
        let s = inf.copysign(br);
        return (s * ar, s * ai);
    }
    let finite = |x: F| x.abs() != inf && !x.is_nan();
    let infinite = |x: F| x.abs() == inf;
    if (infinite(ar) || infinite(ai)) && finite(br) && finite(bi) {
        let (sr, si) = (unit_if(infinite(ar), ar), unit_if(infinite(ai), ai));
        return (inf * (sr * br + si * bi), inf * (si * br - sr * bi));
    }
    if (infinite(br) || infinite(bi)) && finite(ar) && finite(ai) {
        let (sr, si) = (unit_if(infinite(br), br), unit_if(infinite(bi), bi));
        return (
            k::<F>(0.0) * (ar * sr + ai * si),
            k::<F>(0.0) * (ai * sr - ar * si),
        );
    }
    (cr, ci)
}

pub(crate) fn exp_c<F: Real>(z: C<F>) -> C<F> {
    let e = exp(z.0);
    (e * cos(z.1), e * sin(z.1))
}

/// (expm1(a)·cos b + cosm1 b, b == 0 ? 0 : e^a·sin b).
pub(crate) fn expm1_c<F: Real>(z: C<F>) -> C<F> {
    let (a, b) = z;
    let em1 = expm1(a);
    let cm1 = cosm1(b);
    let re = em1 * (cm1 + k::<F>(1.0)) + cm1;
    let im = if b == k::<F>(0.0) {
        k::<F>(0.0)
    } else {
        (em1 + k::<F>(1.0)) * sin(b)
    };
    (re, im)
}

pub(crate) fn log_c<F: Real>(z: C<F>) -> C<F> {
    (ln(abs(z)), atan2(z.1, z.0))
}

/// log|z + 1| as log1p(max − 1) + ½·log1p((min/max)²), arg as atan2(b, a + 1).
pub(crate) fn log1p_c<F: Real>(z: C<F>) -> C<F> {
    let (a, b) = z;
    let a1 = a + k::<F>(1.0);
    let (abs_a1, abs_b) = (a1.abs(), b.abs());
    let (mx, mn) = (max_nan(abs_a1, abs_b), min_nan(abs_a1, abs_b));
    let mx_m1 = if a1 > abs_b { a } else { mx - k::<F>(1.0) };
    let ratio = mn / mx;
    let r = k::<F>(0.5) * ln_1p(ratio * ratio) + ln_1p(mx_m1);
    let re = if r.is_nan() { mn } else { r };
    (re, atan2(b, a1))
}

/// sin and cos through sinh/cosh of the imaginary part from one exp.
fn sin_cos_c<F: Real>(z: C<F>, want_sin: bool) -> C<F> {
    let (x, y) = z;
    let e = exp(y);
    let (half_e, half_inv) = (k::<F>(0.5) * e, k::<F>(0.5) / e);
    let (sinh, cosh) = (half_e - half_inv, half_e + half_inv);
    if want_sin {
        (sin(x) * cosh, cos(x) * sinh)
    } else {
        (cos(x) * cosh, -(sin(x) * sinh))
    }
}
pub(crate) fn sin_c<F: Real>(z: C<F>) -> C<F> {
    sin_cos_c(z, true)
}
pub(crate) fn cos_c<F: Real>(z: C<F>) -> C<F> {
    sin_cos_c(z, false)
}

/// tanh(a + bi) = (e^2a − e^−2a + 2i·sin 2b) / (e^2a + e^−2a + 2cos 2b),
/// from expm1 and cos²/sin·cos, with XLA's limits when the exponentials overflow.
pub(crate) fn tanh_c<F: Real>(z: C<F>) -> C<F> {
    let (a, b) = z;
    let e2 = expm1(a + a);
    let en2 = expm1(-(a + a));
    let real_num = e2 - en2;
    let (cb, sb) = (cos(b), sin(b));
    let imag_num = k::<F>(4.0) * (cb * sb);
    let exp_sum_m2 = e2 + en2;
    let denom = exp_sum_m2 + cb * cb * k::<F>(4.0);
    let mut re = if exp_sum_m2 == F::INF {
        k::<F>(1.0).copysign(a)
    } else {
        real_num / denom
    };
    let mut im = imag_num / denom;
    let a_inf = a.abs() == F::INF;
    let sin_2b_nan = imag_num.is_nan();
    if sin_2b_nan && !a_inf {
        re = F::NAN;
    }
    if b == k::<F>(0.0) || (a_inf && sin_2b_nan) {
        im = k::<F>(0.0);
    }
    (re, im)
}

/// tan(x + yi) = −i·tanh(−y + xi).
pub(crate) fn tan_c<F: Real>(z: C<F>) -> C<F> {
    let t = tanh_c((-z.1, z.0));
    (t.1, -t.0)
}

/// √r·(cos(t/2), sin(t/2)) with r = |z|, t = arg z, and XLA's infinite cases.
pub(crate) fn sqrt_c<F: Real>(z: C<F>) -> C<F> {
    let (a, b) = z;
    let r = sqrt_abs(z);
    let angle = atan2(b, a) * k::<F>(0.5);
    let (c, s) = (cos(angle), sin(angle));
    let inf = F::INF;
    let b_inf = b.abs() == inf;
    let re = if b_inf || a == inf {
        inf
    } else if a == -inf && !b_inf {
        k::<F>(0.0)
    } else {
        r * c
    };
    let im = if b_inf || a == -inf {
        inf.copysign(b)
    } else if r.is_nan() {
        F::NAN
    } else if s == k::<F>(0.0) {
        s
    } else {
        r * s
    };
    if r == k::<F>(0.0) {
        (k::<F>(0.0), k::<F>(0.0))
    } else {
        (re, im)
    }
}

/// r^(−1/2)·(cos(−t/2), sin(−t/2)) with XLA's zero and infinite cases.
pub(crate) fn rsqrt_c<F: Real>(z: C<F>) -> C<F> {
    let (a, b) = z;
    let r = rsqrt_abs(z);
    let angle = atan2(b, a) * k::<F>(-0.5);
    let (re, im) = (r * cos(angle), r * sin(angle));
    if a == k::<F>(0.0) && b == k::<F>(0.0) {
        return (F::INF, F::NAN);
    }
    if (b.abs() == F::INF && a.is_nan()) || a.abs() == F::INF {
        return (k::<F>(0.0).copysign(a), -(k::<F>(0.0).copysign(b)));
    }
    (re, im)
}

/// sign(z) = z / |z|, (0, 0) where |z| == 0.
pub(crate) fn sign_c<F: Real>(z: C<F>) -> C<F> {
    let m = abs(z);
    if m == k::<F>(0.0) {
        (k::<F>(0.0), k::<F>(0.0))
    } else {
        (z.0 / m, z.1 / m)
    }
}

/// (a + bi)^(c + di) = |z|^c·e^(−d·arg z)·(cos q, sin q), q = c·arg z + d·ln|z|,
/// with XLA's cut-offs for 0^w, z^0, 1^w and inf^c.
pub(crate) fn pow_c<F: Real>(x: C<F>, y: C<F>) -> C<F> {
    let ((a, b), (c, d)) = (x, y);
    let m = abs(x);
    let arg = atan2(b, a);
    let coeff = pow(m, c) * exp(-d * arg);
    let q = c * arg + d * ln(m);
    let inf = F::INF;
    if a == inf && b == k::<F>(0.0) && d == k::<F>(0.0) && c < k::<F>(0.0) {
        return (k::<F>(0.0), k::<F>(0.0));
    }
    if a == inf && b == k::<F>(0.0) && d == k::<F>(0.0) && c > k::<F>(0.0) {
        return (inf, k::<F>(0.0));
    }
    if a == k::<F>(1.0) && b == k::<F>(0.0) {
        return (k::<F>(1.0), k::<F>(0.0));
    }
    if c == k::<F>(0.0) && d == k::<F>(0.0) {
        return (k::<F>(1.0), k::<F>(0.0));
    }
    if m == k::<F>(0.0) && d == k::<F>(0.0) && k::<F>(0.0) <= c {
        return (
            if c == k::<F>(0.0) {
                k::<F>(1.0)
            } else {
                k::<F>(0.0)
            },
            k::<F>(0.0),
        );
    }
    (coeff * cos(q), coeff * sin(q))
}
