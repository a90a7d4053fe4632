//! XLA's expansions of the c64 functions into real f32 formulas.
//!
//! XLA does not evaluate complex functions by C99 Annex G: its elemental
//! emitter expands each one into real arithmetic (Smith's division, tanh from
//! expm1 and cos²/sin·cos, abs as max·sqrt(1 + (min/max)²), pow through
//! |z|^c·e^(−d·arg z), ...) and patches a few corner cases with selects. At
//! infinite, NaN and zero components the results are whatever those formulas
//! give, so we evaluate the same formulas: arithmetic in f32 (so overflow
//! happens where XLA's does), each real elementary function evaluated in f64
//! and rounded once (at least as accurate as XLA's f32 intrinsics).

pub(crate) type C = (f32, f32);

fn exp(x: f32) -> f32 {
    (x as f64).exp() as f32
}
fn expm1(x: f32) -> f32 {
    (x as f64).exp_m1() as f32
}
fn ln(x: f32) -> f32 {
    (x as f64).ln() as f32
}
fn ln_1p(x: f32) -> f32 {
    (x as f64).ln_1p() as f32
}
fn sin(x: f32) -> f32 {
    (x as f64).sin() as f32
}
fn cos(x: f32) -> f32 {
    (x as f64).cos() as f32
}
/// cos(x) − 1 without cancellation near 0 (NaN at ±inf and NaN, like cos − 1).
fn cosm1(x: f32) -> f32 {
    let h = (x as f64 * 0.5).sin();
    (-2.0 * h * h) as f32
}
fn atan2(y: f32, x: f32) -> f32 {
    (y as f64).atan2(x as f64) as f32
}
fn sqrt(x: f32) -> f32 {
    x.sqrt()
}
fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}
fn pow(x: f32, y: f32) -> f32 {
    (x as f64).powf(y as f64) as f32
}
/// XLA's NaN-propagating maximum and minimum (operands here are never −0).
fn max_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}
fn min_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.min(b)
    }
}

/// (min, max, 1 + (min/max)²) of |re| and |im|: the pieces of every |z|.
fn abs_parts(z: C) -> (f32, f32, f32) {
    let (ar, ai) = (z.0.abs(), z.1.abs());
    let (mx, mn) = (max_nan(ar, ai), min_nan(ar, ai));
    let d = mn / mx;
    (mn, mx, 1.0 + d * d)
}

/// |z| = max·sqrt(1 + (min/max)²); where that is NaN ((0,0), (inf,inf), NaN) it is min.
pub(crate) fn abs(z: C) -> f32 {
    let (mn, mx, s) = abs_parts(z);
    let r = mx * sqrt(s);
    if r.is_nan() {
        mn
    } else {
        r
    }
}

fn sqrt_abs(z: C) -> f32 {
    let (mn, mx, s) = abs_parts(z);
    let r = sqrt(mx) * pow(s, 0.25);
    if r.is_nan() {
        mn
    } else {
        r
    }
}

fn rsqrt_abs(z: C) -> f32 {
    let (mn, mx, s) = abs_parts(z);
    let r = rsqrt(mx) * rsqrt(sqrt(s));
    if r.is_nan() {
        rsqrt(mn)
    } else {
        r
    }
}

pub(crate) fn mul(p: C, q: C) -> C {
    (p.0 * q.0 - p.1 * q.1, p.0 * q.1 + p.1 * q.0)
}

/// Smith's division, then XLA's fixes where it gives (NaN, NaN): a zero
/// denominator, an infinite numerator over a finite one, and the reverse.
pub(crate) fn div(a: C, b: C) -> C {
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
    let inf = f32::INFINITY;
    let unit_if = |cond: bool, sign_of: f32| (if cond { 1.0f32 } else { 0.0 }).copysign(sign_of);
    if br_abs == 0.0 && bi_abs == 0.0 && (!ar.is_nan() || !ai.is_nan()) {
        let s = inf.copysign(br);
        return (s * ar, s * ai);
    }
    let finite = |x: f32| x.abs() != inf && !x.is_nan();
    let infinite = |x: f32| x.abs() == inf;
    if (infinite(ar) || infinite(ai)) && finite(br) && finite(bi) {
        let (sr, si) = (unit_if(infinite(ar), ar), unit_if(infinite(ai), ai));
        return (inf * (sr * br + si * bi), inf * (si * br - sr * bi));
    }
    if (infinite(br) || infinite(bi)) && finite(ar) && finite(ai) {
        let (sr, si) = (unit_if(infinite(br), br), unit_if(infinite(bi), bi));
        return (0.0 * (ar * sr + ai * si), 0.0 * (ai * sr - ar * si));
    }
    (cr, ci)
}

pub(crate) fn exp_c(z: C) -> C {
    let e = exp(z.0);
    (e * cos(z.1), e * sin(z.1))
}

/// (expm1(a)·cos b + cosm1 b, b == 0 ? 0 : e^a·sin b).
pub(crate) fn expm1_c(z: C) -> C {
    let (a, b) = z;
    let em1 = expm1(a);
    let cm1 = cosm1(b);
    let re = em1 * (cm1 + 1.0) + cm1;
    let im = if b == 0.0 { 0.0 } else { (em1 + 1.0) * sin(b) };
    (re, im)
}

pub(crate) fn log_c(z: C) -> C {
    (ln(abs(z)), atan2(z.1, z.0))
}

/// log|z + 1| as log1p(max − 1) + ½·log1p((min/max)²), arg as atan2(b, a + 1).
pub(crate) fn log1p_c(z: C) -> C {
    let (a, b) = z;
    let a1 = a + 1.0;
    let (abs_a1, abs_b) = (a1.abs(), b.abs());
    let (mx, mn) = (max_nan(abs_a1, abs_b), min_nan(abs_a1, abs_b));
    let mx_m1 = if a1 > abs_b { a } else { mx - 1.0 };
    let ratio = mn / mx;
    let r = 0.5 * ln_1p(ratio * ratio) + ln_1p(mx_m1);
    let re = if r.is_nan() { mn } else { r };
    (re, atan2(b, a1))
}

/// sin and cos through sinh/cosh of the imaginary part from one exp.
fn sin_cos_c(z: C, want_sin: bool) -> C {
    let (x, y) = z;
    let e = exp(y);
    let (half_e, half_inv) = (0.5 * e, 0.5 / e);
    let (sinh, cosh) = (half_e - half_inv, half_e + half_inv);
    if want_sin {
        (sin(x) * cosh, cos(x) * sinh)
    } else {
        (cos(x) * cosh, -(sin(x) * sinh))
    }
}
pub(crate) fn sin_c(z: C) -> C {
    sin_cos_c(z, true)
}
pub(crate) fn cos_c(z: C) -> C {
    sin_cos_c(z, false)
}

/// tanh(a + bi) = (e^2a − e^−2a + 2i·sin 2b) / (e^2a + e^−2a + 2cos 2b),
/// from expm1 and cos²/sin·cos, with XLA's limits when the exponentials overflow.
pub(crate) fn tanh_c(z: C) -> C {
    let (a, b) = z;
    let e2 = expm1(a + a);
    let en2 = expm1(-(a + a));
    let real_num = e2 - en2;
    let (cb, sb) = (cos(b), sin(b));
    let imag_num = 4.0 * (cb * sb);
    let exp_sum_m2 = e2 + en2;
    let denom = exp_sum_m2 + cb * cb * 4.0;
    let mut re = if exp_sum_m2 == f32::INFINITY {
        1.0f32.copysign(a)
    } else {
        real_num / denom
    };
    let mut im = imag_num / denom;
    let a_inf = a.abs() == f32::INFINITY;
    let sin_2b_nan = imag_num.is_nan();
    if sin_2b_nan && !a_inf {
        re = f32::NAN;
    }
    if b == 0.0 || (a_inf && sin_2b_nan) {
        im = 0.0;
    }
    (re, im)
}

/// tan(x + yi) = −i·tanh(−y + xi).
pub(crate) fn tan_c(z: C) -> C {
    let t = tanh_c((-z.1, z.0));
    (t.1, -t.0)
}

/// √r·(cos(t/2), sin(t/2)) with r = |z|, t = arg z, and XLA's infinite cases.
pub(crate) fn sqrt_c(z: C) -> C {
    let (a, b) = z;
    let r = sqrt_abs(z);
    let angle = atan2(b, a) * 0.5;
    let (c, s) = (cos(angle), sin(angle));
    let inf = f32::INFINITY;
    let b_inf = b.abs() == inf;
    let re = if b_inf || a == inf {
        inf
    } else if a == -inf && !b_inf {
        0.0
    } else {
        r * c
    };
    let im = if b_inf || a == -inf {
        inf.copysign(b)
    } else if r.is_nan() {
        f32::NAN
    } else if s == 0.0 {
        s
    } else {
        r * s
    };
    if r == 0.0 {
        (0.0, 0.0)
    } else {
        (re, im)
    }
}

/// r^(−1/2)·(cos(−t/2), sin(−t/2)) with XLA's zero and infinite cases.
pub(crate) fn rsqrt_c(z: C) -> C {
    let (a, b) = z;
    let r = rsqrt_abs(z);
    let angle = atan2(b, a) * -0.5;
    let (re, im) = (r * cos(angle), r * sin(angle));
    if a == 0.0 && b == 0.0 {
        return (f32::INFINITY, f32::NAN);
    }
    if (b.abs() == f32::INFINITY && a.is_nan()) || a.abs() == f32::INFINITY {
        return (0.0f32.copysign(a), -(0.0f32.copysign(b)));
    }
    (re, im)
}

/// sign(z) = z / |z|, (0, 0) where |z| == 0.
pub(crate) fn sign_c(z: C) -> C {
    let m = abs(z);
    if m == 0.0 {
        (0.0, 0.0)
    } else {
        (z.0 / m, z.1 / m)
    }
}

/// (a + bi)^(c + di) = |z|^c·e^(−d·arg z)·(cos q, sin q), q = c·arg z + d·ln|z|,
/// with XLA's cut-offs for 0^w, z^0, 1^w and inf^c.
pub(crate) fn pow_c(x: C, y: C) -> C {
    let ((a, b), (c, d)) = (x, y);
    let m = abs(x);
    let arg = atan2(b, a);
    let coeff = pow(m, c) * exp(-d * arg);
    let q = c * arg + d * ln(m);
    let inf = f32::INFINITY;
    if a == inf && b == 0.0 && d == 0.0 && c < 0.0 {
        return (0.0, 0.0);
    }
    if a == inf && b == 0.0 && d == 0.0 && c > 0.0 {
        return (inf, 0.0);
    }
    if a == 1.0 && b == 0.0 {
        return (1.0, 0.0);
    }
    if c == 0.0 && d == 0.0 {
        return (1.0, 0.0);
    }
    if m == 0.0 && d == 0.0 && 0.0 <= c {
        return (if c == 0.0 { 1.0 } else { 0.0 }, 0.0);
    }
    (coeff * cos(q), coeff * sin(q))
}
