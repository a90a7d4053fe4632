//! The shape-dependent helpers of the rules: layout checks, convolution
//! positions and reduce-window counts.

use tpusim_hlo::attr::{AttrValue, WindowDim};
use tpusim_hlo::{ArrayShape, Instruction, Layout, Module};

fn minor_to_major(a: &ArrayShape) -> Vec<i64> {
    a.layout
        .as_ref()
        .map(|l| l.minor_to_major.clone())
        .unwrap_or_else(|| Layout::default_for_rank(a.rank()).minor_to_major)
}

/// `ShapeUtil::TransposeIsBitcast`: the permutation only relabels the
/// layout, so no data moves (XLA then charges it like a bitcast).
pub(crate) fn transpose_is_bitcast(m: &Module, i: &Instruction) -> bool {
    let (Some(out), Some(&op)) = (i.shape.as_array(), i.operands.first()) else {
        return false;
    };
    let Some(inp) = m.instr(op).shape.as_array() else {
        return false;
    };
    let Some(perm) = i.attr_ints("dimensions") else {
        return false;
    };
    let (out_m2m, in_m2m) = (minor_to_major(out), minor_to_major(inp));
    out_m2m.len() == in_m2m.len()
        && out_m2m
            .iter()
            .zip(&in_m2m)
            .all(|(&o, &inn)| perm.get(o as usize) == Some(&inn))
}

/// Convolution flops: 2 x (input features / groups) x output features x
/// (batch / batch groups) x the product over spatial dims of valid
/// (kernel, output) position pairs.
pub(crate) fn conv_flops(m: &Module, i: &Instruction) -> f32 {
    let (Some(&l), Some(&r)) = (i.operands.first(), i.operands.get(1)) else {
        return 0.0;
    };
    let (lhs, rhs, out) = (
        m.instr(l).shape.dims(),
        m.instr(r).shape.dims(),
        i.shape.dims(),
    );
    let Some(AttrValue::DimLabels(dn)) = i.attr("dim_labels") else {
        return 0.0;
    };
    let dim = |s: &[i64], d: i64| s.get(d as usize).copied().unwrap_or(1);
    let window: Vec<WindowDim> = match i.attr("window") {
        Some(AttrValue::Window(w)) => w.dims.clone(),
        _ => Vec::new(),
    };
    // In f64: the factors come from the input and their product can pass i64.
    let mut positions = 1.0f64;
    for (k, w) in window.iter().enumerate() {
        let at = |v: &Vec<i64>, s: &[i64]| v.get(k).map_or(1, |&d| dim(s, d));
        let (inp, ker, o) = (
            at(&dn.input_spatial, lhs),
            at(&dn.kernel_spatial, rhs),
            at(&dn.output_spatial, out),
        );
        positions *= valid_positions(w, inp, ker, o) as f64;
    }
    let fgc = i.attr_int("feature_group_count").unwrap_or(1).max(1);
    let bgc = i.attr_int("batch_group_count").unwrap_or(1).max(1);
    let fma = (dim(lhs, dn.input_feature) / fgc) as f64
        * dim(out, dn.output_feature) as f64
        * (dim(lhs, dn.input_batch) / bgc) as f64
        * positions;
    (2.0 * fma) as f32
}

/// Kernel/output index pairs of one spatial dimension that read a real
/// (not padding, not dilation-hole) input element: pairs (k, o) with
/// `u = o * stride - padding_low + k * window_dilation` a multiple of the base
/// dilation `b` and `0 <= u / b < input`. Linear in the smaller of `kernel`
/// and `output` (the other index is counted in closed form), so a huge window
/// or output cannot make the cost model hang.
fn valid_positions(w: &WindowDim, input: i64, kernel: i64, output: i64) -> i64 {
    if input <= 0 || kernel <= 0 || output <= 0 {
        return 0;
    }
    let stride = i128::from(w.stride.max(1));
    let wd = i128::from(w.window_dilation.max(1));
    let b = i128::from(w.base_dilation.max(1));
    let pl = i128::from(w.padding_low);
    let last = (i128::from(input) - 1) * b;
    let total: i128 = if kernel <= output {
        (0..i128::from(kernel))
            .map(|k| count_hits(stride, k * wd - pl, i128::from(output), last, b))
            .sum()
    } else {
        (0..i128::from(output))
            .map(|o| count_hits(wd, o * stride - pl, i128::from(kernel), last, b))
            .sum()
    };
    i64::try_from(total).unwrap_or(i64::MAX)
}

/// How many `i` in `0..n` make `u = a * i + c` (a > 0) a multiple of `b` with
/// `0 <= u <= last`.
fn count_hits(a: i128, c: i128, n: i128, last: i128, b: i128) -> i128 {
    // The range of i with 0 <= a*i + c <= last, within 0..n.
    let lo = div_ceil(-c, a).max(0);
    let hi = (last - c).div_euclid(a).min(n - 1);
    if lo > hi {
        return 0;
    }
    if b == 1 {
        return hi - lo + 1;
    }
    // a*i ≡ -c (mod b): solvable when gcd(a, b) divides c; then the
    // solutions are one residue modulo b / gcd.
    let g = gcd(a, b);
    if c.rem_euclid(g) != 0 {
        return 0;
    }
    let m = b / g;
    let target = (-c / g).rem_euclid(m);
    let i0 = (target * mod_inverse((a / g).rem_euclid(m), m)).rem_euclid(m);
    let first = lo + (i0 - lo).rem_euclid(m);
    if first > hi {
        0
    } else {
        (hi - first) / m + 1
    }
}

fn div_ceil(x: i128, d: i128) -> i128 {
    -((-x).div_euclid(d))
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    while b != 0 {
        (a, b) = (b, a.rem_euclid(b));
    }
    a.abs()
}

/// The inverse of `a` modulo `m` (gcd(a, m) = 1; 0 for m = 1).
fn mod_inverse(a: i128, m: i128) -> i128 {
    if m == 1 {
        return 0;
    }
    // Extended Euclid on (a, m).
    let (mut r0, mut r1) = (a, m);
    let (mut s0, mut s1) = (1i128, 0i128);
    while r1 != 0 {
        let q = r0.div_euclid(r1);
        (r0, r1) = (r1, r0 - q * r1);
        (s0, s1) = (s1, s0 - q * s1);
    }
    s0.rem_euclid(m)
}

/// Reduce-window applications: (window - 1) per output element, except the
/// "reduce then broadcast back" pattern that XLA recognises and prices as a
/// single reduction.
pub(crate) fn reduce_window_count(
    i: &Instruction,
    window: &[WindowDim],
    win: i64,
    out: i64,
) -> i64 {
    let reducing = window.iter().filter(|d| d.size != 1).count();
    let padded = window
        .iter()
        .filter(|d| d.padding_low != 0 || d.padding_high != 0)
        .count();
    if reducing == 1 && padded == 1 && !i.shape.is_tuple() {
        let found = window.iter().position(|d| {
            d.size != 1
                && d.padding_low != 0
                && d.padding_low == d.padding_high
                && d.size == 2 * d.padding_low + 1
        });
        if let Some(k) = found {
            let span = i.shape.dims().get(k).copied().unwrap_or(0);
            if window[k].padding_low == span - 1 && span > 0 {
                return out / span + (span - 1);
            }
        }
    }
    win.saturating_sub(1).saturating_mul(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, pair by pair.
    fn brute(w: &WindowDim, input: i64, kernel: i64, output: i64) -> i64 {
        let mut count = 0;
        for k in 0..kernel {
            for o in 0..output {
                let u = o * w.stride - w.padding_low + k * w.window_dilation;
                let b = w.base_dilation.max(1);
                if u % b == 0 && (0..input).contains(&(u / b)) {
                    count += 1;
                }
            }
        }
        count
    }

    fn window(stride: i64, pl: i64, wd: i64, bd: i64) -> WindowDim {
        WindowDim {
            size: 1,
            stride,
            padding_low: pl,
            padding_high: 0,
            window_dilation: wd,
            base_dilation: bd,
            reversal: false,
        }
    }

    #[test]
    fn closed_form_counts_every_valid_pair() {
        let mut checked = 0;
        for stride in 1..4 {
            for pl in -3..5 {
                for wd in 1..4 {
                    for bd in 1..4 {
                        for (input, kernel, output) in
                            [(1, 1, 1), (5, 3, 7), (8, 2, 3), (4, 6, 9), (7, 7, 2)]
                        {
                            let w = window(stride, pl, wd, bd);
                            assert_eq!(
                                valid_positions(&w, input, kernel, output),
                                brute(&w, input, kernel, output),
                                "stride {stride} pad {pl} wd {wd} bd {bd} in {input} k {kernel} out {output}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 8 * 3 * 3 * 5);
    }

    /// Found by the mutation campaign: a window of 2^32 positions used to be
    /// walked pair by pair (hours); now the smaller side is walked.
    #[test]
    fn huge_windows_are_counted_without_walking_them() {
        let w = window(1, 0, 1, 1);
        let t = std::time::Instant::now();
        assert_eq!(
            valid_positions(&w, 1 << 32, 4, 1 << 32),
            4 * ((1 << 32) - 3) + 6
        );
        assert!(t.elapsed().as_secs() < 5);
    }
}
