//! Batched matrix products on strided views, through the `gemm` crate.
//!
//! `dot` and (lowered) convolution end here. Operands are described by strides
//! instead of being copied into `[B, M, K]` / `[B, K, N]` order, so the common
//! layouts (row-major weights, batch-major activations) run without a transpose.

use crate::InterpError;
use gemm::Parallelism;
use rayon::prelude::*;

/// Element `(b, i, j)` of a batch of matrices lives at `b*batch + i*row + j*col`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strides {
    pub batch: usize,
    pub row: usize,
    pub col: usize,
}

impl Strides {
    /// Dense row-major `[B, R, C]` storage.
    pub fn dense(rows: usize, cols: usize) -> Strides {
        Strides {
            batch: rows * cols,
            row: cols,
            col: 1,
        }
    }

    /// Offset of the last element of a `[b, r, c]` view, `None` if it is empty.
    fn last_offset(&self, b: usize, r: usize, c: usize) -> Option<usize> {
        if b == 0 || r == 0 || c == 0 {
            return None;
        }
        Some((b - 1) * self.batch + (r - 1) * self.row + (c - 1) * self.col)
    }
}

/// Element types the GEMM kernels handle.
pub trait GemmScalar: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;

    /// `dst[i] = Σ_p lhs[i*row + p] · rhs[p]` (a matrix with contiguous rows
    /// times a contiguous vector) by a kernel made for it, when this type and
    /// CPU have one; `false`, writing nothing, otherwise.
    fn row_matvec(_lhs: &[Self], _row: usize, _rhs: &[Self], _dst: &mut [Self]) -> bool {
        false
    }
}

impl GemmScalar for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;

    fn row_matvec(lhs: &[f32], row: usize, rhs: &[f32], dst: &mut [f32]) -> bool {
        let (m, k) = (dst.len(), rhs.len());
        let fits = m == 0 || (row >= k && (m - 1) * row + k <= lhs.len());
        #[cfg(target_arch = "x86_64")]
        if fits && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: AVX2 and FMA are present (checked above), and every row
            // `i < m` lies within `lhs` (`fits`).
            unsafe { matvec_rows_avx2(lhs, row, rhs, dst) };
            return true;
        }
        let _ = fits;
        false
    }
}

/// [`GemmScalar::row_matvec`] for f32 with AVX2 and FMA: four rows at a time,
/// each accumulated 8 lanes wide, so one load of the vector serves four
/// products. (`gemm` runs a matrix-vector product through its matrix
/// kernels; this is 1.4x faster on a 128x128 matvec, a scan step's.)
///
/// # Safety
/// The CPU must have AVX2 and FMA, and `(dst.len() - 1) * row + rhs.len()`
/// must not exceed `lhs.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn matvec_rows_avx2(lhs: &[f32], row: usize, rhs: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let (m, k) = (dst.len(), rhs.len());
    let k8 = k / 8 * 8;
    let x = rhs.as_ptr();
    let lanes_sum = |v: __m256| {
        let mut l = [0f32; 8];
        _mm256_storeu_ps(l.as_mut_ptr(), v);
        ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
    };
    let tail = |r: *const f32, mut s: f32| {
        for q in k8..k {
            s = (*r.add(q)).mul_add(*x.add(q), s);
        }
        s
    };
    let mut i = 0;
    while i + 4 <= m {
        let r0 = lhs.as_ptr().add(i * row);
        let rows = [r0, r0.add(row), r0.add(2 * row), r0.add(3 * row)];
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut p = 0;
        while p < k8 {
            let xv = _mm256_loadu_ps(x.add(p));
            for (a, r) in acc.iter_mut().zip(rows) {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(r.add(p)), xv, *a);
            }
            p += 8;
        }
        for j in 0..4 {
            dst[i + j] = tail(rows[j], lanes_sum(acc[j]));
        }
        i += 4;
    }
    for (j, d) in dst.iter_mut().enumerate().skip(i) {
        let r = lhs.as_ptr().add(j * row);
        let mut a = _mm256_setzero_ps();
        let mut p = 0;
        while p < k8 {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(r.add(p)), _mm256_loadu_ps(x.add(p)), a);
            p += 8;
        }
        *d = tail(r, lanes_sum(a));
    }
}

impl GemmScalar for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

/// Below this many multiply-adds per matrix, batches run in parallel instead of
/// each product: the kernel's own threading does not pay for small matrices.
const SMALL_GEMM_MACS: usize = 1 << 18;

/// `out[b] = lhs[b] (m×k) · rhs[b] (k×n)` for `b < batch`, row-major `[batch, m, n]`.
///
/// Fails (never panics, never reads out of bounds) when a view does not fit its slice.
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul<T: GemmScalar>(
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    lhs: &[T],
    ls: Strides,
    rhs: &[T],
    rs: Strides,
) -> Result<Vec<T>, InterpError> {
    let fits = |data: &[T], s: Strides, r: usize, c: usize| {
        s.last_offset(batch, r, c).is_none_or(|o| o < data.len())
    };
    if !fits(lhs, ls, m, k) || !fits(rhs, rs, k, n) {
        return Err(InterpError::Internal(
            "matrix view exceeds its operand".into(),
        ));
    }
    let mut out = vec![T::ZERO; batch * m * n];
    if m * n == 0 {
        return Ok(out);
    }
    let product = |b: usize, dst: &mut [T], par: Parallelism| {
        if k == 0 {
            return; // an empty sum: zeros
        }
        // SAFETY: every index the kernel touches is (b, i, p) with i < m, p < k for
        // lhs, (b, p, j) with p < k, j < n for rhs and (i, j) for dst, whose largest
        // offsets were checked against the slice lengths above; dst is m*n long.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                lhs.as_ptr().add(b * ls.batch),
                ls.col as isize,
                ls.row as isize,
                rhs.as_ptr().add(b * rs.batch),
                rs.col as isize,
                rs.row as isize,
                T::ZERO,
                T::ONE,
                false,
                false,
                false,
                par,
            )
        }
    };
    if n == 1 && k > 0 && ls.col == 1 && rs.row == 1 {
        // Every batch takes the kernel, or none does (it depends on the type,
        // the CPU and the row stride only).
        let taken = out.chunks_mut(m).enumerate().all(|(b, dst)| {
            let (lhs_b, rhs_b) = (&lhs[b * ls.batch..], &rhs[b * rs.batch..][..k]);
            T::row_matvec(lhs_b, ls.row, rhs_b, dst)
        });
        if taken {
            return Ok(out);
        }
    }
    if batch > 1 && m * n * k < SMALL_GEMM_MACS {
        out.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(b, dst)| product(b, dst, Parallelism::None));
    } else {
        for (b, dst) in out.chunks_mut(m * n).enumerate() {
            product(b, dst, Parallelism::Rayon(0));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(b: usize, m: usize, k: usize, n: usize, x: &[f64], y: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; b * m * n];
        for bb in 0..b {
            for i in 0..m {
                for j in 0..n {
                    out[bb * m * n + i * n + j] = (0..k)
                        .map(|p| x[bb * m * k + i * k + p] * y[bb * k * n + p * n + j])
                        .sum();
                }
            }
        }
        out
    }

    #[test]
    fn matches_naive_product_dense_and_transposed() {
        let (b, m, k, n) = (3, 5, 7, 4);
        let x: Vec<f64> = (0..b * m * k).map(|i| (i % 11) as f64 - 5.0).collect();
        let y: Vec<f64> = (0..b * k * n).map(|i| (i % 7) as f64 * 0.5).collect();
        let want = naive(b, m, k, n, &x, &y);
        let got = batched_matmul(
            b,
            m,
            k,
            n,
            &x,
            Strides::dense(m, k),
            &y,
            Strides::dense(k, n),
        )
        .unwrap();
        assert_eq!(got, want);
        // The same rhs stored as [b, n, k] and read through strides.
        let mut yt = vec![0.0; y.len()];
        for bb in 0..b {
            for p in 0..k {
                for j in 0..n {
                    yt[bb * k * n + j * k + p] = y[bb * k * n + p * n + j];
                }
            }
        }
        let ts = Strides {
            batch: k * n,
            row: 1,
            col: k,
        };
        let got = batched_matmul(b, m, k, n, &x, Strides::dense(m, k), &yt, ts).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn matrix_vector_products_match_the_naive_sum() {
        // Row counts around the 4-row blocks, lengths around the 8 lanes, and
        // rows farther apart than their length (a slice of a wider matrix).
        for (m, k, row) in [
            (1, 1, 1),
            (3, 7, 7),
            (4, 8, 8),
            (5, 9, 12),
            (9, 17, 20),
            (128, 128, 128),
        ] {
            let b = 2;
            let x: Vec<f32> = (0..b * m * row)
                .map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5)
                .collect();
            let y: Vec<f32> = (0..b * k)
                .map(|i| ((i * 5) % 11) as f32 * 0.5 - 2.0)
                .collect();
            let ls = Strides {
                batch: m * row,
                row,
                col: 1,
            };
            let got = batched_matmul(b, m, k, 1, &x, ls, &y, Strides::dense(k, 1)).unwrap();
            for bb in 0..b {
                for i in 0..m {
                    let want: f64 = (0..k)
                        .map(|p| x[bb * m * row + i * row + p] as f64 * y[bb * k + p] as f64)
                        .sum();
                    let g = got[bb * m + i] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                        "m={m} k={k}: {g} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn rejects_views_past_the_end_and_handles_empty() {
        let x = vec![1.0f32; 6];
        assert!(batched_matmul(
            1,
            2,
            4,
            1,
            &x,
            Strides::dense(2, 4),
            &x,
            Strides::dense(4, 1)
        )
        .is_err());
        let z = batched_matmul(
            2,
            2,
            0,
            3,
            &x,
            Strides::dense(2, 0),
            &x,
            Strides::dense(0, 3),
        );
        assert_eq!(z.unwrap(), vec![0.0; 12]);
    }
}
