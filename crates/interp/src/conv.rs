//! `convolution`, lowered to one batched GEMM through [`ops::dot`] (im2col).
//!
//! The kernel is put in canonical order (`[O, I, spatial...]`); the input is read
//! where it lies, through its strides in canonical order (`[N, C, spatial...]`).
//! For each feature group (or batch group) the input windows are gathered into a
//! `[rows, I * window]` matrix, padded and dilated positions reading a zero. One
//! batched dot over the groups then produces every output, with the same
//! accumulation and rounding rules as `dot` (f32 for narrow floats, wrapping i64 for
//! integers). The result is permuted into the output's dimension order (one move
//! when there is one group).

use crate::eval::Interp;
use crate::ops::{dot, transpose};
use crate::value::{elem_count, map_data, strides, Array, Data};
use crate::InterpError;
use tpusim_hlo::attr::{AttrValue, ConvDimLabels, WindowDim};
use tpusim_hlo::{InstrId, PrimitiveType as T};

fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

fn to_usize(v: &[i64]) -> Vec<usize> {
    v.iter().map(|&d| d.max(0) as usize).collect()
}

/// Group layout: how the lhs batch/features and the rhs output features split.
struct Groups {
    /// Number of groups (feature_group_count × batch_group_count; one of them is 1).
    count: usize,
    /// Whether groups split the lhs batch (batch_group_count > 1) or its features.
    by_batch: bool,
}

/// Evaluates `convolution(lhs, rhs)` producing `ty[dims]`.
pub fn convolution(
    interp: &Interp,
    id: InstrId,
    lhs: &Array,
    rhs: &Array,
    ty: T,
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    let ins = interp.m.instr(id);
    let Some(AttrValue::DimLabels(labels)) = ins.attr("dim_labels") else {
        return Err(internal("convolution without dim_labels"));
    };
    let ns = labels.input_spatial.len();
    let window: Vec<WindowDim> = match ins.attr("window") {
        Some(AttrValue::Window(w)) => w.dims.clone(),
        _ => vec![WindowDim::default(); ns],
    };
    if window.len() != ns || labels.kernel_spatial.len() != ns || labels.output_spatial.len() != ns
    {
        return Err(internal(
            "convolution window rank does not match dim_labels",
        ));
    }
    if window
        .iter()
        .any(|w| w.stride < 1 || w.base_dilation < 1 || w.window_dilation < 1)
    {
        return Err(internal(
            "convolution window with a non-positive stride or dilation",
        ));
    }
    let fgc = ins.attr_int("feature_group_count").unwrap_or(1).max(1) as usize;
    let bgc = ins.attr_int("batch_group_count").unwrap_or(1).max(1) as usize;
    if fgc > 1 && bgc > 1 {
        return Err(InterpError::Unsupported(
            "convolution with both feature_group_count and batch_group_count > 1".into(),
        ));
    }
    let groups = Groups {
        count: fgc * bgc,
        by_batch: bgc > 1,
    };
    conv_general(lhs, rhs, labels, &window, &groups, ty, dims)
}

#[allow(clippy::too_many_arguments)]
fn conv_general(
    lhs: &Array,
    rhs: &Array,
    l: &ConvDimLabels,
    window: &[WindowDim],
    groups: &Groups,
    ty: T,
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    let lperm: Vec<usize> = to_usize(
        &[l.input_batch, l.input_feature]
            .into_iter()
            .chain(l.input_spatial.iter().copied())
            .collect::<Vec<_>>(),
    );
    let rperm: Vec<usize> = to_usize(
        &[l.kernel_output_feature, l.kernel_input_feature]
            .into_iter()
            .chain(l.kernel_spatial.iter().copied())
            .collect::<Vec<_>>(),
    );
    let operm: Vec<usize> = to_usize(
        &[l.output_batch, l.output_feature]
            .into_iter()
            .chain(l.output_spatial.iter().copied())
            .collect::<Vec<_>>(),
    );
    let in_range = |p: &[usize], rank: usize| p.len() == rank && p.iter().all(|&d| d < rank);
    if !in_range(&lperm, lhs.dims.len())
        || !in_range(&rperm, rhs.dims.len())
        || !in_range(&operm, dims.len())
    {
        return Err(internal(
            "convolution dim_labels do not match operand ranks",
        ));
    }
    // The input is read where it lies: its dims and strides in canonical order.
    let lhs_strides = strides(&lhs.dims);
    let in_dims: Vec<usize> = lperm.iter().map(|&d| lhs.dims[d]).collect();
    let in_strides: Vec<usize> = lperm.iter().map(|&d| lhs_strides[d]).collect();
    let rc = reverse_kernel(&transpose(rhs, &rperm)?, window);
    let (n, c) = (in_dims[0], in_dims[1]);
    let (o, i) = (rc.dims[0], rc.dims[1]);
    let out_canon: Vec<usize> = operm.iter().map(|&d| dims[d]).collect();
    let g = groups.count;
    let n_out = out_canon[0];
    let consistent = o % g == 0
        && out_canon[1] == o
        && if groups.by_batch {
            n == n_out * g && c == i
        } else {
            n == n_out && c == i * g
        };
    if !consistent {
        return Err(internal(format!(
            "convolution operand sizes do not fit: lhs {:?}, rhs {:?}, out {:?}, {g} groups",
            in_dims, rc.dims, out_canon
        )));
    }
    let taps = tap_table(
        &in_dims[2..],
        &in_strides[2..],
        &rc.dims[2..],
        &out_canon[2..],
        window,
    );
    let (p, kw) = (elem_count(&out_canon[2..]), elem_count(&rc.dims[2..]));
    let k = i * kw;
    let windows = Windows {
        taps: &taps,
        kw,
        groups: g,
        by_batch: groups.by_batch,
        batch: n_out,
        per_group: i,
        batch_stride: in_strides[0],
        channel_stride: in_strides[1],
    };
    // The input with one zero after it: padding and holes read that element.
    let padded = Data::concat(&[&lhs.data, &Array::zeros(lhs.ty, vec![1])?.data])?;
    let cols = Array::new(
        lhs.ty,
        vec![g, n_out * p, k],
        map_data!(&padded, v => windows.gather(v)),
    );
    let kernel = Array::new(rc.ty, vec![g, o / g, k], rc.data);
    let prod = dot(
        &cols,
        &kernel,
        &[0],
        &[2],
        &[0],
        &[2],
        ty,
        vec![g, n_out * p, o / g],
    )?;
    // Output dim d sits at canonical position inv[d].
    let mut inv = vec![0usize; dims.len()];
    for (pos, &d) in operm.iter().enumerate() {
        inv[d] = pos;
    }
    if g == 1 {
        // The product is [N, spatial..., O]: one move into the output's order.
        let mut prod_dims = vec![n_out];
        prod_dims.extend_from_slice(&out_canon[2..]);
        prod_dims.push(o);
        let last = prod_dims.len() - 1;
        let from = |pos: usize| match pos {
            0 => 0,
            1 => last,
            s => s - 1,
        };
        let perm: Vec<usize> = inv.iter().map(|&pos| from(pos)).collect();
        let prod = Array::new(ty, prod_dims, prod.data);
        let moved = if perm.iter().enumerate().all(|(a, &b)| a == b) {
            prod
        } else {
            transpose(&prod, &perm)?
        };
        return Ok(Array::new(ty, dims, moved.data));
    }
    // [g, n, p, o/g] -> [n, g, o/g, p] = canonical [N, O, spatial...].
    let grouped = Array::new(ty, vec![g, n_out, p, o / g], prod.data);
    let canon = transpose(&grouped, &[1, 0, 3, 2])?;
    let canon = Array::new(ty, out_canon, canon.data);
    transpose(&canon, &inv)
}

/// The im2col matrix of a convolution's input: per group, a row per
/// (batch, output position) holding every (channel, kernel tap) element.
struct Windows<'a> {
    /// Per (output position, tap), the spatial offset read (see [`tap_table`]).
    taps: &'a [Option<usize>],
    /// Taps per output position.
    kw: usize,
    groups: usize,
    /// Whether groups split the batch (else the channels).
    by_batch: bool,
    /// Batch rows per group.
    batch: usize,
    /// Input channels per group.
    per_group: usize,
    /// Input elements between consecutive batch rows and channels.
    batch_stride: usize,
    channel_stride: usize,
}

impl Windows<'_> {
    /// The matrix, read from `v`: the input followed by one zero, which
    /// padding and dilation holes read. Values are copied as they are
    /// found, without listing their indices first.
    fn gather<T: Copy>(&self, v: &[T]) -> Vec<T> {
        let zero = v.len().saturating_sub(1);
        let kw = self.kw.max(1);
        let p = self.taps.len() / kw;
        let mut out = Vec::with_capacity(self.groups * self.batch * p * self.per_group * self.kw);
        for grp in 0..self.groups {
            let (b0, f0) = if self.by_batch {
                (grp * self.batch, 0)
            } else {
                (0, grp * self.per_group)
            };
            for b in 0..self.batch {
                for taps in self.taps.chunks_exact(kw) {
                    for ch in 0..self.per_group {
                        let base = (b0 + b) * self.batch_stride + (f0 + ch) * self.channel_stride;
                        out.extend(taps.iter().map(|t| v[t.map_or(zero, |off| base + off)]));
                    }
                }
            }
        }
        out
    }
}

/// Flips the kernel's spatial dims that have `rhs_reversal` set.
fn reverse_kernel(rc: &Array, window: &[WindowDim]) -> Array {
    if !window.iter().any(|w| w.reversal) {
        return rc.clone();
    }
    let st = strides(&rc.dims);
    let idx: Vec<usize> = (0..rc.len())
        .map(|lin| {
            let mut src = 0;
            for (d, &s) in st.iter().enumerate() {
                let mut x = (lin / s) % rc.dims[d];
                if d >= 2 && window[d - 2].reversal {
                    x = rc.dims[d] - 1 - x;
                }
                src += x * s;
            }
            src
        })
        .collect();
    Array::new(rc.ty, rc.dims.clone(), rc.data.take(&idx))
}

/// For every (output position, kernel tap), the input spatial offset it reads
/// (with the input's spatial strides `ist`), or `None` where it falls on
/// padding or between dilated input elements.
fn tap_table(
    in_dims: &[usize],
    ist: &[usize],
    k_dims: &[usize],
    out_dims: &[usize],
    window: &[WindowDim],
) -> Vec<Option<usize>> {
    let (p, kw) = (elem_count(out_dims), elem_count(k_dims));
    let (kst, ost) = (strides(k_dims), strides(out_dims));
    let mut table = Vec::with_capacity(p * kw);
    for pos in 0..p {
        for tap in 0..kw {
            let mut off = Some(0usize);
            for (d, w) in window.iter().enumerate() {
                let od = ((pos / ost[d]) % out_dims[d]) as i64;
                let kd = ((tap / kst[d]) % k_dims[d]) as i64;
                let mut u = od * w.stride - w.padding_low + kd * w.window_dilation;
                if w.base_dilation > 1 {
                    if u.rem_euclid(w.base_dilation) != 0 {
                        off = None;
                        break;
                    }
                    u = u.div_euclid(w.base_dilation);
                }
                if u < 0 || u >= in_dims[d] as i64 {
                    off = None;
                    break;
                }
                off = off.map(|x| x + u as usize * ist[d]);
            }
            table.push(off);
        }
    }
    table
}
