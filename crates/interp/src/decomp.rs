//! Matrix decompositions behind the LAPACK and TPU linear-algebra custom calls:
//! LU with partial pivoting, Householder QR and forming Q, SVD, Hermitian and
//! general eigendecompositions. Every function works on one row-major matrix of
//! complex f64 (real inputs have a zero imaginary part, as in `linalg`).
//!
//! LU and QR write LAPACK's packed outputs (`getrf`'s L\U and pivots, `geqrf`'s
//! reflectors and taus), which callers read back element by element, so they are
//! written here step for step as LAPACK's unblocked `?getf2`/`?geqr2`/`?org2r`
//! define them. SVD and eigendecompositions come from `faer`: their values are
//! determined, their vectors only up to sign or phase, and only the values and
//! the decomposition properties are LAPACK's contract.
//!
//! LU and QR are generic over the real type so that single precision inputs are
//! factored in single precision, rounding where LAPACK's `s`/`c` routines do:
//! computing them in f64 would be more accurate than the reference, not equal.

use faer::linalg::solvers::DenseSolveCore;
use faer::{Mat, MatRef, Side};
use num_complex::{Complex, Complex64 as C};
use num_traits::{Float, NumAssign};

const ZERO: C = C::new(0.0, 0.0);
const ONE: C = C::new(1.0, 0.0);

/// The element type of [`lu`], [`geqrf`] and [`orgqr`]: f32 or f64.
pub trait Real: Float + NumAssign + std::iter::Sum + 'static {}
impl<T: Float + NumAssign + std::iter::Sum + 'static> Real for T {}

fn zero<T: Real>() -> Complex<T> {
    Complex::new(T::zero(), T::zero())
}

fn one<T: Real>() -> Complex<T> {
    Complex::new(T::one(), T::zero())
}

/// BLAS `i?amax`'s magnitude: |re| + |im| (not the modulus).
fn cabs1<T: Real>(z: Complex<T>) -> T {
    z.re.abs() + z.im.abs()
}

/// LAPACK `?getrf` on the `m`×`n` matrix `a`, in place: L (unit diagonal, not
/// stored) below the diagonal and U on and above it. Returns the 0-based pivot
/// row of each of the `min(m, n)` steps and `info`: 0, or the 1-based index of
/// the first exactly zero pivot (the factorization still completes, that column
/// is left unscaled, as LAPACK does).
pub fn lu<T: Real>(a: &mut [Complex<T>], m: usize, n: usize) -> (Vec<usize>, usize) {
    let k = m.min(n);
    let mut piv = Vec::with_capacity(k);
    let mut info = 0;
    for j in 0..k {
        // First row of largest |re| + |im|; a NaN is never "larger".
        let mut p = j;
        for i in j + 1..m {
            if cabs1(a[i * n + j]) > cabs1(a[p * n + j]) {
                p = i;
            }
        }
        piv.push(p);
        if a[p * n + j] != zero() {
            if p != j {
                for c in 0..n {
                    a.swap(j * n + c, p * n + c);
                }
            }
            let pivot = a[j * n + j];
            // LAPACK multiplies by the reciprocal unless that would overflow.
            if pivot.norm() >= T::min_positive_value() {
                let r = one::<T>() / pivot;
                (j + 1..m).for_each(|i| a[i * n + j] *= r);
            } else {
                (j + 1..m).for_each(|i| a[i * n + j] /= pivot);
            }
        } else if info == 0 {
            info = j + 1;
        }
        for i in j + 1..m {
            let l = a[i * n + j];
            for c in j + 1..n {
                let u = a[j * n + c];
                a[i * n + c] -= l * u;
            }
        }
    }
    (piv, info)
}

/// The row permutation `?getrf`'s pivots describe: row `i` of `P·A` is row
/// `perm[i]` of `A`.
pub fn permutation(piv: &[usize], m: usize) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..m).collect();
    for (j, &p) in piv.iter().enumerate() {
        if p < m && j < m {
            perm.swap(j, p);
        }
    }
    perm
}

/// `sqrt(x² + y² + z²)` without overflow or needless underflow (`?lapy3`).
fn hypot3<T: Real>(x: T, y: T, z: T) -> T {
    let w = x.abs().max(y.abs()).max(z.abs());
    if w == T::zero() || !w.is_finite() {
        return x.abs() + y.abs() + z.abs();
    }
    w * ((x / w).powi(2) + (y / w).powi(2) + (z / w).powi(2)).sqrt()
}

/// 2-norm of `x` with scaling (`?nrm2`'s result up to rounding).
fn norm2<T: Real>(x: impl Iterator<Item = Complex<T>> + Clone) -> T {
    let scale = x
        .clone()
        .fold(T::zero(), |m, z| m.max(z.re.abs()).max(z.im.abs()));
    if scale == T::zero() || !scale.is_finite() {
        return x.fold(T::zero(), |s, z| s + z.norm_sqr()).sqrt();
    }
    scale
        * x.fold(T::zero(), |s, z| {
            s + (z.re / scale).powi(2) + (z.im / scale).powi(2)
        })
        .sqrt()
}

/// LAPACK `?geqrf` on the `m`×`n` matrix `a`, in place: R on and above the
/// diagonal, the Householder vectors `v` below it (`v[0] = 1` implicit), and the
/// returned `tau`s, with `?larfg`'s conventions: `beta = -sign(Re alpha)·‖(alpha, x)‖`,
/// `tau = (beta - alpha) / beta`, `v = x / (alpha - beta)`; `tau = 0` when `x` is
/// zero and `alpha` real. (`?larfg`'s rescaling of a `beta` below the smallest
/// normal number is not done; it only changes results that underflow.)
pub fn geqrf<T: Real>(a: &mut [Complex<T>], m: usize, n: usize) -> Vec<Complex<T>> {
    let k = m.min(n);
    let mut taus = Vec::with_capacity(k);
    for j in 0..k {
        let alpha = a[j * n + j];
        let xnorm = norm2((j + 1..m).map(|i| a[i * n + j]));
        let tau = if xnorm == T::zero() && alpha.im == T::zero() {
            zero()
        } else {
            let beta = -hypot3(alpha.re, alpha.im, xnorm).copysign(alpha.re);
            let scale = one::<T>() / (alpha - beta);
            (j + 1..m).for_each(|i| a[i * n + j] *= scale);
            a[j * n + j] = Complex::new(beta, T::zero());
            Complex::new((beta - alpha.re) / beta, -alpha.im / beta)
        };
        taus.push(tau);
        // Apply H^H = I - conj(tau) v v^H to the columns right of j.
        let ct = tau.conj();
        if ct != zero() {
            apply_reflector(a, m, n, j, j, j + 1..n, ct);
        }
    }
    taus
}

/// `A[r0.., cols] -= t · v · (v^H A[r0.., cols])` where `v` is column `vcol` of
/// `a` from row `r0` down, with `v[r0] = 1`.
fn apply_reflector<T: Real>(
    a: &mut [Complex<T>],
    m: usize,
    n: usize,
    r0: usize,
    vcol: usize,
    cols: std::ops::Range<usize>,
    t: Complex<T>,
) {
    let v = |a: &[Complex<T>], i: usize| if i == r0 { one() } else { a[i * n + vcol] };
    for c in cols {
        let w: Complex<T> = (r0..m).map(|i| v(a, i).conj() * a[i * n + c]).sum();
        let tw = t * w;
        for i in r0..m {
            let vi = v(a, i);
            a[i * n + c] -= vi * tw;
        }
    }
}

/// LAPACK `?orgqr`/`?ungqr`: the `m`×`n` matrix with orthonormal columns
/// `H(0)·H(1)···H(k-1)·I[:, :n]`, `H(i) = I - tau[i]·v_i·v_i^H` with `v_i` stored
/// below the diagonal of column `i` of `a` (`m`×`n`, `k = taus.len() <= n <= m`).
pub fn orgqr<T: Real>(
    a: &[Complex<T>],
    m: usize,
    n: usize,
    taus: &[Complex<T>],
) -> Vec<Complex<T>> {
    let k = taus.len();
    let mut q = a.to_vec();
    // Columns past k start as the identity's.
    for c in k..n {
        for i in 0..m {
            q[i * n + c] = if i == c { one() } else { zero() };
        }
    }
    for i in (0..k).rev() {
        if i + 1 < n {
            apply_reflector(&mut q, m, n, i, i, i + 1..n, taus[i]);
        }
        for r in i + 1..m {
            q[r * n + i] *= -taus[i];
        }
        q[i * n + i] = one::<T>() - taus[i];
        for r in 0..i {
            q[r * n + i] = zero();
        }
    }
    q
}

/// Whether every element is finite: the iterative decompositions are not run on
/// anything else (LAPACK reports such input through `info` or NaNs).
pub fn all_finite(a: &[C]) -> bool {
    a.iter().all(|z| z.re.is_finite() && z.im.is_finite())
}

fn real_mat(a: &[C], m: usize, n: usize) -> Mat<f64> {
    Mat::from_fn(m, n, |i, j| a[i * n + j].re)
}

fn complex_mat(a: &[C], m: usize, n: usize) -> Mat<C> {
    Mat::from_fn(m, n, |i, j| a[i * n + j])
}

fn rows_of_real(u: MatRef<'_, f64>) -> Vec<C> {
    (0..u.nrows() * u.ncols())
        .map(|p| C::new(u[(p / u.ncols(), p % u.ncols())], 0.0))
        .collect()
}

fn rows_of(u: MatRef<'_, C>) -> Vec<C> {
    (0..u.nrows() * u.ncols())
        .map(|p| u[(p / u.ncols(), p % u.ncols())])
        .collect()
}

/// The conjugate transpose of a row-major `r`×`c` matrix.
fn adjoint(v: &[C], r: usize, c: usize) -> Vec<C> {
    (0..r * c).map(|p| v[(p % r) * c + p / r].conj()).collect()
}

/// A singular value decomposition: `s` (descending), and when asked `u` and
/// `vt` (`v^H`), row-major.
pub struct Svd {
    pub s: Vec<f64>,
    pub u: Vec<C>,
    pub vt: Vec<C>,
}

/// SVD of the finite `m`×`n` matrix `a`: `full` gives `u` `m`×`m` and `vt` `n`×`n`,
/// otherwise `m`×`k` and `k`×`n`; without `vectors` only `s`. `real` keeps the
/// vectors real. None when the iteration does not converge.
pub fn svd(a: &[C], m: usize, n: usize, real: bool, vectors: bool, full: bool) -> Option<Svd> {
    let k = m.min(n);
    if k == 0 {
        // Nothing to decompose: the vectors are the identity's columns.
        let eye = |r: usize, c: usize| -> Vec<C> {
            (0..r * c)
                .map(|p| if p / c == p % c { ONE } else { ZERO })
                .collect()
        };
        let (uc, vr) = if full { (m, n) } else { (k, k) };
        return Some(Svd {
            s: vec![],
            u: if vectors { eye(m, uc) } else { vec![] },
            vt: if vectors { eye(vr, n) } else { vec![] },
        });
    }
    if !vectors {
        let s = if real {
            real_mat(a, m, n).singular_values().ok()?
        } else {
            complex_mat(a, m, n).singular_values().ok()?
        };
        return Some(Svd {
            s,
            u: vec![],
            vt: vec![],
        });
    }
    let (s, u, v) = if real {
        let mat = real_mat(a, m, n);
        let d = if full { mat.svd() } else { mat.thin_svd() }.ok()?;
        let s = d.S().column_vector().iter().copied().collect();
        (s, rows_of_real(d.U()), rows_of_real(d.V()))
    } else {
        let mat = complex_mat(a, m, n);
        let d = if full { mat.svd() } else { mat.thin_svd() }.ok()?;
        let s = d.S().column_vector().iter().map(|z| z.re).collect();
        (s, rows_of(d.U()), rows_of(d.V()))
    };
    let vc = if full { n } else { k };
    Some(Svd {
        s,
        u,
        vt: adjoint(&v, n, vc),
    })
}

/// The Hermitian matrix whose `lower` (or upper) triangle `a` stores; the
/// diagonal's imaginary part is ignored, as LAPACK's `?heevd` does.
fn hermitian(a: &[C], n: usize, lower: bool) -> Vec<C> {
    (0..n * n)
        .map(|p| {
            let (i, j) = (p / n, p % n);
            let stored_here = if lower { j <= i } else { j >= i };
            match (i == j, stored_here) {
                (true, _) => C::new(a[p].re, 0.0),
                (false, true) => a[p],
                (false, false) => a[j * n + i].conj(),
            }
        })
        .collect()
}

/// Eigendecomposition of the Hermitian matrix stored in the `lower` (or upper)
/// triangle of the finite `n`×`n` `a`: eigenvalues ascending and the eigenvectors
/// as columns of a row-major `n`×`n` matrix. None when it does not converge.
pub fn eigh(a: &[C], n: usize, lower: bool, real: bool) -> Option<(Vec<f64>, Vec<C>)> {
    if n == 0 {
        return Some((vec![], vec![]));
    }
    let h = hermitian(a, n, lower);
    if real {
        let d = real_mat(&h, n, n).self_adjoint_eigen(Side::Lower).ok()?;
        let w = d.S().column_vector().iter().copied().collect();
        Some((w, rows_of_real(d.U())))
    } else {
        let d = complex_mat(&h, n, n).self_adjoint_eigen(Side::Lower).ok()?;
        let w = d.S().column_vector().iter().map(|z| z.re).collect();
        Some((w, rows_of(d.U())))
    }
}

/// An eigendecomposition of a general matrix: eigenvalues, and right and left
/// eigenvectors as columns of row-major `n`×`n` matrices (empty when not asked).
pub struct Eig {
    pub w: Vec<C>,
    pub vr: Vec<C>,
    pub vl: Vec<C>,
}

/// Scales each column of the `n`×`n` `v` to unit 2-norm with its largest
/// component real and positive (LAPACK `?geev`'s normalization, which fixes the
/// phase left free by the definition).
fn normalize_columns(v: &mut [C], n: usize) {
    for c in 0..n {
        let col = (0..n).map(|i| v[i * n + c]);
        let norm = norm2(col.clone());
        let big = col.fold(ZERO, |b, z| if z.norm() > b.norm() { z } else { b });
        if norm == 0.0 || big == ZERO || !norm.is_finite() {
            continue;
        }
        let phase = big.conj() / big.norm();
        (0..n).for_each(|i| v[i * n + c] = v[i * n + c] * phase / norm);
    }
}

/// Eigenvalues and eigenvectors of the finite `n`×`n` `a` (LAPACK `?geev`):
/// right eigenvectors `A v = w v` when `right`, left ones `u^H A = w u^H` when
/// `left` (the conjugated rows of `V^-1`). `real` marks a real matrix, whose
/// complex eigenvalues come in conjugate pairs. None when it does not converge.
pub fn eig(a: &[C], n: usize, real: bool, left: bool, right: bool) -> Option<Eig> {
    if n == 0 {
        return Some(Eig {
            w: vec![],
            vr: vec![],
            vl: vec![],
        });
    }
    let d = if real {
        faer::linalg::solvers::Eigen::new_from_real(real_mat(a, n, n).as_ref()).ok()?
    } else {
        complex_mat(a, n, n).eigen().ok()?
    };
    let w: Vec<C> = d.S().column_vector().iter().copied().collect();
    let vmat = d.U();
    let mut vr = rows_of(vmat);
    let mut vl = if left {
        let inv = vmat.partial_piv_lu().inverse();
        // Row j of V^-1 is u_j^H: the left eigenvector is its conjugate.
        adjoint(&rows_of(inv.as_ref()), n, n)
    } else {
        vec![]
    };
    if left {
        normalize_columns(&mut vl, n);
    }
    normalize_columns(&mut vr, n);
    if !right {
        vr.clear();
    }
    Some(Eig { w, vr, vl })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn re(v: &[f64]) -> Vec<C> {
        v.iter().map(|&x| C::new(x, 0.0)).collect()
    }

    #[test]
    fn lu_pivots_on_the_largest_and_reports_a_zero_pivot() {
        let mut a = re(&[0., 0., 1., 0., 0., 2., 1., 2., 3.]);
        let (piv, info) = lu(&mut a, 3, 3);
        assert_eq!(piv, vec![2, 1, 2]);
        assert_eq!(info, 2);
        assert_eq!(a, re(&[1., 2., 3., 0., 0., 2., 0., 0., 1.]));
        assert_eq!(permutation(&piv, 3), vec![2, 1, 0]);
    }

    #[test]
    fn qr_reflectors_follow_larfg() {
        // x = (3, 4): beta = -5, tau = (beta - 3) / beta = 1.6, v = (1, 4 / 8).
        let mut a = re(&[3., 4.]);
        let taus = geqrf(&mut a, 2, 1);
        assert_eq!(a, re(&[-5., 0.5]));
        assert_eq!(taus, re(&[1.6]));
        // Q e1 = (1 - tau, -tau·v1); 1 - 1.6 rounds.
        let q = orgqr(&a, 2, 1, &taus);
        assert_eq!(q, vec![C::new(1.0 - 1.6, 0.0), C::new(-0.8, -0.0)]);
    }
}
