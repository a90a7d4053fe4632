//! Data-parallel building blocks for whole-array kernels.
//!
//! Small arrays run on the calling thread; large ones are split across rayon's
//! pool. Nothing here allocates index vectors: strided copies walk rows.

use crate::value::{map_data, Data};
use crate::InterpError;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Arrays with fewer elements than this are processed sequentially: below it,
/// spawning work costs more than it saves.
pub const PAR_MIN_ELEMS: usize = 1 << 15;

/// `f` over every element, in parallel for large inputs.
pub fn map1<A: Sync, B: Send>(x: &[A], f: impl Fn(&A) -> B + Sync + Send) -> Vec<B> {
    if x.len() < PAR_MIN_ELEMS {
        x.iter().map(f).collect()
    } else {
        x.par_iter().map(f).collect()
    }
}

/// `f` over pairs of elements, in parallel for large inputs.
pub fn map2<A: Sync, B: Sync, C: Send>(
    x: &[A],
    y: &[B],
    f: impl Fn(&A, &B) -> C + Sync + Send,
) -> Vec<C> {
    if x.len() < PAR_MIN_ELEMS {
        x.iter().zip(y).map(|(a, b)| f(a, b)).collect()
    } else {
        x.par_iter().zip(y).map(|(a, b)| f(a, b)).collect()
    }
}

/// The source offset range `[min, max]` an affine map reaches, if any element.
fn reach(out_dims: &[usize], coef: &[isize], base: isize) -> Option<(isize, isize)> {
    if out_dims.contains(&0) {
        return None;
    }
    let (mut lo, mut hi) = (base, base);
    for (&d, &c) in out_dims.iter().zip(coef) {
        let span = (d as isize - 1) * c;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    Some((lo, hi))
}

/// `out[i] = src[base + Σ i_k * coef_k]` over the row-major index `i` of `out_dims`.
fn affine_copy<T: Copy + Send + Sync>(
    src: &[T],
    out_dims: &[usize],
    coef: &[isize],
    base: isize,
) -> Vec<T> {
    let n: usize = out_dims.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let Some((&inner, outer_dims)) = out_dims.split_last() else {
        return vec![src[base as usize]];
    };
    let step = coef[out_dims.len() - 1];
    let row_start = |mut r: usize| -> isize {
        let mut off = base;
        for (k, &d) in outer_dims.iter().enumerate().rev() {
            off += (r % d) as isize * coef[k];
            r /= d;
        }
        off
    };
    // Rows are written straight into the result's spare capacity: filling
    // it first would write every element twice (for a large copy, a whole
    // extra pass over memory).
    let fill = |(r, row): (usize, &mut [MaybeUninit<T>])| {
        let start = row_start(r);
        match step {
            0 => row.fill(MaybeUninit::new(src[start as usize])),
            1 => {
                let run = &src[start as usize..start as usize + inner];
                for (o, &x) in row.iter_mut().zip(run) {
                    o.write(x);
                }
            }
            _ => {
                for (j, o) in row.iter_mut().enumerate() {
                    o.write(src[(start + j as isize * step) as usize]);
                }
            }
        }
    };
    let mut out: Vec<T> = Vec::with_capacity(n);
    let spare = &mut out.spare_capacity_mut()[..n];
    if n < PAR_MIN_ELEMS {
        spare.chunks_mut(inner).enumerate().for_each(fill);
    } else {
        spare.par_chunks_mut(inner).enumerate().for_each(fill);
    }
    // SAFETY: the rows of `inner` elements cover all `n` spare elements (n is
    // a multiple of `inner`), and `fill` writes every element of its row, or
    // panics on an out-of-range read before the length is set.
    unsafe { out.set_len(n) };
    out
}

impl Data {
    /// Elements at the affine source offsets `base + Σ i_k * coef_k` over `out_dims`
    /// (transpose, broadcast, reverse and slice are all such maps).
    pub fn take_affine(
        &self,
        out_dims: &[usize],
        coef: &[isize],
        base: isize,
    ) -> Result<Data, InterpError> {
        if coef.len() != out_dims.len() {
            return Err(InterpError::Internal("affine map rank mismatch".into()));
        }
        if let Some((lo, hi)) = reach(out_dims, coef, base) {
            if lo < 0 || hi as usize >= self.len() {
                return Err(InterpError::Internal(format!(
                    "strided read [{lo}, {hi}] outside an operand of {} elements",
                    self.len()
                )));
            }
        }
        Ok(map_data!(self, v => affine_copy(v, out_dims, coef, base)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_broadcasts_and_reverses() {
        let d = Data::I64((0..6).collect());
        // [2,3] -> transpose -> [3,2]
        assert_eq!(
            d.take_affine(&[3, 2], &[1, 3], 0).unwrap(),
            Data::I64(vec![0, 3, 1, 4, 2, 5])
        );
        // [3] broadcast into [2,3] along dim 1
        let v = Data::I64(vec![7, 8, 9]);
        assert_eq!(
            v.take_affine(&[2, 3], &[0, 1], 0).unwrap(),
            Data::I64(vec![7, 8, 9, 7, 8, 9])
        );
        // reverse [6]
        assert_eq!(
            d.take_affine(&[6], &[-1], 5).unwrap(),
            Data::I64(vec![5, 4, 3, 2, 1, 0])
        );
        assert_eq!(d.take_affine(&[], &[], 4).unwrap(), Data::I64(vec![4]));
        assert_eq!(
            d.take_affine(&[0, 3], &[3, 1], 0).unwrap(),
            Data::I64(vec![])
        );
    }

    #[test]
    fn refuses_reads_outside_the_operand() {
        let d = Data::F32(vec![0.0; 4]);
        assert!(d.take_affine(&[5], &[1], 0).is_err());
        assert!(d.take_affine(&[2], &[-1], 0).is_err());
    }

    #[test]
    fn large_copies_match_sequential_ones() {
        let n = PAR_MIN_ELEMS * 2;
        let d = Data::F64((0..n).map(|i| i as f64).collect());
        let got = d.take_affine(&[2, n / 2], &[1, 2], 0).unwrap();
        let want: Vec<f64> = (0..2)
            .flat_map(|r| (0..n / 2).map(move |j| (r + 2 * j) as f64))
            .collect();
        assert_eq!(got, Data::F64(want));
    }
}
