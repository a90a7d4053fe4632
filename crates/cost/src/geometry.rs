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
    let mut positions: i64 = 1;
    for (k, w) in window.iter().enumerate() {
        let at = |v: &Vec<i64>, s: &[i64]| v.get(k).map_or(1, |&d| dim(s, d));
        let (inp, ker, o) = (
            at(&dn.input_spatial, lhs),
            at(&dn.kernel_spatial, rhs),
            at(&dn.output_spatial, out),
        );
        positions *= valid_positions(w, inp, ker, o);
    }
    let fgc = i.attr_int("feature_group_count").unwrap_or(1).max(1);
    let bgc = i.attr_int("batch_group_count").unwrap_or(1).max(1);
    let fma = (dim(lhs, dn.input_feature) / fgc)
        * dim(out, dn.output_feature)
        * (dim(lhs, dn.input_batch) / bgc)
        * positions;
    2.0 * fma as f32
}

/// Kernel/output index pairs of one spatial dimension that read a real
/// (not padding, not dilation-hole) input element.
fn valid_positions(w: &WindowDim, input: i64, kernel: i64, output: i64) -> i64 {
    let mut count = 0;
    for k in 0..kernel {
        for o in 0..output {
            let undilated = o * w.stride - w.padding_low + k * w.window_dilation;
            let b = w.base_dilation.max(1);
            if undilated % b != 0 {
                continue;
            }
            let idx = undilated / b;
            if (0..input).contains(&idx) {
                count += 1;
            }
        }
    }
    count
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
    (win - 1) * out
}
