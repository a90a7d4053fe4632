//! `fft` (FFT, IFFT, RFFT, IRFFT over the last 1–3 dims) with rustfft.
//!
//! Transforms run in f64 and round once to f32. IFFT and IRFFT scale by 1/N (numpy's
//! convention, as XLA does).

use crate::value::{strides, Array, Data};
use crate::InterpError;
use num_complex::Complex64;
use rustfft::FftPlanner;
use tpusim_hlo::PrimitiveType as T;

fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

/// Applies a 1-D transform of length `dims[axis]` to every line along `axis`.
fn along_axis(
    planner: &mut FftPlanner<f64>,
    data: &mut [Complex64],
    dims: &[usize],
    axis: usize,
    inverse: bool,
) {
    let n = dims[axis];
    if n == 0 || data.is_empty() {
        return;
    }
    let plan = if inverse {
        planner.plan_fft_inverse(n)
    } else {
        planner.plan_fft_forward(n)
    };
    let st = strides(dims);
    let step = st[axis];
    let lines = data.len() / n;
    let mut line = vec![Complex64::new(0.0, 0.0); n];
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    for l in 0..lines {
        // Line l: outer index (above axis) and inner index (below it).
        let (outer, inner) = (l / step, l % step);
        let base = outer * n * step + inner;
        for (j, v) in line.iter_mut().enumerate() {
            *v = data[base + j * step];
        }
        plan.process(&mut line);
        for (j, v) in line.iter().enumerate() {
            data[base + j * step] = v * scale;
        }
    }
}

fn complex_input(a: &Array) -> Vec<Complex64> {
    match &a.data {
        Data::C64(v) => v
            .iter()
            .map(|&(r, i)| Complex64::new(r as f64, i as f64))
            .collect(),
        Data::C128(v) => v.iter().map(|&(r, i)| Complex64::new(r, i)).collect(),
        _ => a
            .to_f64s()
            .into_iter()
            .map(|r| Complex64::new(r, 0.0))
            .collect(),
    }
}

/// Evaluates `fft(a)` with `fft_type` and `fft_length` into `ty[dims]`.
pub fn fft(
    a: &Array,
    fft_type: &str,
    lengths: &[i64],
    ty: T,
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    let rank = a.dims.len();
    let r = lengths.len();
    if r == 0 || r > 3 || r > rank || dims.len() != rank {
        return Err(internal(format!(
            "fft_length {lengths:?} does not fit rank {rank}"
        )));
    }
    let axes: Vec<usize> = (rank - r..rank).collect();
    let mut planner = FftPlanner::new();
    let mut x = complex_input(a);
    let out: Vec<Complex64> = match fft_type {
        "FFT" | "IFFT" => {
            for &ax in &axes {
                along_axis(&mut planner, &mut x, &a.dims, ax, fft_type == "IFFT");
            }
            x
        }
        "RFFT" => {
            for &ax in &axes {
                along_axis(&mut planner, &mut x, &a.dims, ax, false);
            }
            truncate_last(&x, &a.dims, dims[rank - 1])
        }
        "IRFFT" => {
            for &ax in &axes[..r - 1] {
                along_axis(&mut planner, &mut x, &a.dims, ax, true);
            }
            let (mut y, full_dims) = hermitian_extend(&x, &a.dims, dims[rank - 1]);
            along_axis(&mut planner, &mut y, &full_dims, rank - 1, true);
            y
        }
        other => return Err(InterpError::Unsupported(format!("fft_type '{other}'"))),
    };
    let data = if ty == T::C64 {
        Data::C64(out.iter().map(|z| (z.re as f32, z.im as f32)).collect())
    } else if ty == T::C128 {
        Data::C128(out.iter().map(|z| (z.re, z.im)).collect())
    } else {
        return Ok(Array::from_f64s(
            ty,
            dims,
            &out.iter().map(|z| z.re).collect::<Vec<_>>(),
        ));
    };
    Ok(Array::new(ty, dims, data))
}

/// Keeps the first `keep` entries of the last dim.
fn truncate_last(x: &[Complex64], dims: &[usize], keep: usize) -> Vec<Complex64> {
    let n = dims.last().copied().unwrap_or(1).max(1);
    x.chunks(n)
        .flat_map(|row| row[..keep.min(n)].iter().copied())
        .collect()
}

/// Rebuilds full length-`len` spectra along the last dim from their first
/// `len/2 + 1` entries, using `X[len-k] = conj(X[k])`.
fn hermitian_extend(x: &[Complex64], dims: &[usize], len: usize) -> (Vec<Complex64>, Vec<usize>) {
    let half = dims.last().copied().unwrap_or(1).max(1);
    let mut out_dims = dims.to_vec();
    if let Some(l) = out_dims.last_mut() {
        *l = len;
    }
    let mut out = Vec::with_capacity(x.len() / half * len);
    for row in x.chunks(half) {
        for k in 0..len {
            let v = if k < half && k <= len / 2 {
                row[k]
            } else {
                let j = len - k;
                if j < half {
                    row[j].conj()
                } else {
                    Complex64::new(0.0, 0.0)
                }
            };
            out.push(v);
        }
    }
    (out, out_dims)
}
