//! The linear-algebra custom calls JAX emits: jaxlib's CPU LAPACK FFI calls
//! (`lapack_?{potrf,trsm,getrf,geqrf,orgqr,ungqr,gesdd,syevd,heevd,geev}_ffi`)
//! and the TPU ones (`LuDecomposition`, `Qr`,
//! `ProductOfElementaryHouseholderReflectors`, `Eigh`).
//!
//! Each runs over the leading batch dims of its operand, one matrix (the last
//! two dims) at a time, with the results' element types and dims taken from the
//! instruction, checked against what the operands imply. The TPU calls return
//! what the matching LAPACK routine does, so one program lowered for TPU and the
//! same function compiled for CPU agree (LU pivots are 0-based there, and come
//! with the row permutation).

use crate::decomp;
use crate::eval::{array_dims, Interp};
use crate::linalg::{self, from_complex, to_complex};
use crate::value::{elem_count, Array, Value};
use crate::InterpError;
use num_complex::{Complex, Complex64 as C};
use std::sync::Arc;
use tpusim_hlo::{InstrId, PrimitiveType as T};

fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

/// The routine a custom-call target names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Potrf,
    Trsm,
    Getrf,
    Geqrf,
    Orgqr,
    Gesdd,
    Syevd,
    Geev,
    /// TPU `LuDecomposition`: (lu, 0-based pivots, permutation).
    TpuLu,
    /// TPU `Eigh`: (eigenvectors, eigenvalues), options in backend_config.
    TpuEigh,
}

fn kind(target: &str) -> Option<Kind> {
    match target {
        "LuDecomposition" => return Some(Kind::TpuLu),
        "Qr" => return Some(Kind::Geqrf),
        "ProductOfElementaryHouseholderReflectors" => return Some(Kind::Orgqr),
        "Eigh" => return Some(Kind::TpuEigh),
        _ => {}
    }
    let name = target.strip_prefix("lapack_")?.strip_suffix("_ffi")?;
    let (ty, op) = name.split_at_checked(1)?;
    let complex = match ty {
        "s" | "d" => false,
        "c" | "z" => true,
        _ => return None,
    };
    Some(match (op, complex) {
        ("potrf", _) => Kind::Potrf,
        ("trsm", _) => Kind::Trsm,
        ("getrf", _) => Kind::Getrf,
        ("geqrf", _) => Kind::Geqrf,
        ("orgqr", false) | ("ungqr", true) => Kind::Orgqr,
        ("gesdd", _) => Kind::Gesdd,
        ("syevd", false) | ("heevd", true) => Kind::Syevd,
        ("geev", _) => Kind::Geev,
        _ => return None,
    })
}

/// Whether `target` is a linear-algebra custom call the interpreter runs.
pub fn is_linalg_target(target: &str) -> bool {
    kind(target).is_some()
}

/// A character option `key = N : ui8` from the FFI backend_config text.
fn flag(interp: &Interp, id: InstrId, key: &str) -> Option<char> {
    let text = backend_config(interp, id)?;
    let at = text.find(&format!("{key} ="))?;
    let rest = text[at + key.len() + 2..].trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<u8>().ok().map(char::from)
}

fn backend_config<'a>(interp: &'a Interp, id: InstrId) -> Option<&'a str> {
    match interp.m.instr(id).attr("backend_config")? {
        tpusim_hlo::AttrValue::Str(t) | tpusim_hlo::AttrValue::Raw(t) => Some(t),
        _ => None,
    }
}

/// The batched matrices of one operand, as complex f64.
struct Batch {
    vals: Vec<C>,
    /// How many matrices, rows, columns.
    count: usize,
    m: usize,
    n: usize,
    real: bool,
    /// Single precision (f32, c64 and narrower): LU and QR run in f32.
    single: bool,
}

impl Batch {
    fn new(a: &Array) -> Result<Batch, InterpError> {
        let r = a.dims.len();
        if r < 2 {
            return Err(internal("linear algebra operand of rank < 2"));
        }
        let (m, n) = (a.dims[r - 2], a.dims[r - 1]);
        Ok(Batch {
            vals: to_complex(a)?,
            count: elem_count(&a.dims[..r - 2]),
            m,
            n,
            real: !a.ty.is_complex(),
            single: !matches!(a.ty, T::F64 | T::C128),
        })
    }

    fn matrix(&self, b: usize) -> &[C] {
        let size = self.m * self.n;
        &self.vals[b * size..(b + 1) * size]
    }

    fn square(&self, what: &str) -> Result<usize, InterpError> {
        if self.m != self.n {
            return Err(internal(format!("{what} of a non-square matrix")));
        }
        Ok(self.n)
    }
}

fn narrow(v: &[C]) -> Vec<Complex<f32>> {
    v.iter()
        .map(|z| Complex::new(z.re as f32, z.im as f32))
        .collect()
}

fn widen(v: &[Complex<f32>]) -> Vec<C> {
    v.iter().map(|z| C::new(z.re as f64, z.im as f64)).collect()
}

/// `decomp::lu` in the operand's precision: (L\U, pivots, info).
fn lu_in(x: &Batch, mat: &[C]) -> (Vec<C>, Vec<usize>, usize) {
    if x.single {
        let mut a = narrow(mat);
        let (piv, info) = decomp::lu(&mut a, x.m, x.n);
        (widen(&a), piv, info)
    } else {
        let mut a = mat.to_vec();
        let (piv, info) = decomp::lu(&mut a, x.m, x.n);
        (a, piv, info)
    }
}

/// `decomp::geqrf` in the operand's precision: (packed, taus).
fn geqrf_in(x: &Batch, mat: &[C]) -> (Vec<C>, Vec<C>) {
    if x.single {
        let mut a = narrow(mat);
        let taus = decomp::geqrf(&mut a, x.m, x.n);
        (widen(&a), widen(&taus))
    } else {
        let mut a = mat.to_vec();
        let taus = decomp::geqrf(&mut a, x.m, x.n);
        (a, taus)
    }
}

/// `decomp::orgqr` in the operand's precision.
fn orgqr_in(x: &Batch, mat: &[C], taus: &[C]) -> Vec<C> {
    if x.single {
        widen(&decomp::orgqr(&narrow(mat), x.m, x.n, &narrow(taus)))
    } else {
        decomp::orgqr(mat, x.m, x.n, taus)
    }
}

/// The instruction's results: the tuple's leaves, or the one array.
fn result_shapes(interp: &Interp, id: InstrId) -> Result<Vec<(T, Vec<usize>)>, InterpError> {
    let shape = &interp.m.instr(id).shape;
    match shape.tuple_elements() {
        Some(t) => t.iter().map(array_dims).collect(),
        None => Ok(vec![array_dims(shape)?]),
    }
}

/// Builds the results from one value vector per output (complex for float
/// outputs, integers for the rest), checking each against its declared shape.
struct Out {
    shapes: Vec<(T, Vec<usize>)>,
    what: &'static str,
}

impl Out {
    fn new(interp: &Interp, id: InstrId, what: &'static str, n: usize) -> Result<Out, InterpError> {
        let shapes = result_shapes(interp, id)?;
        if shapes.len() != n {
            return Err(internal(format!("{what} must have {n} results")));
        }
        Ok(Out { shapes, what })
    }

    fn check(&self, k: usize, len: usize) -> Result<&(T, Vec<usize>), InterpError> {
        let s = &self.shapes[k];
        if elem_count(&s.1) != len {
            return Err(internal(format!(
                "{} result {k} has shape {:?}, which does not fit its operand",
                self.what, s.1
            )));
        }
        Ok(s)
    }

    fn float(&self, k: usize, v: &[C]) -> Result<Value, InterpError> {
        let (ty, dims) = self.check(k, v.len())?;
        if !ty.is_float() && !ty.is_complex() {
            return Err(internal(format!("{} result {k} is not a float", self.what)));
        }
        Ok(Value::Array(from_complex(*ty, dims.clone(), v)))
    }

    fn real(&self, k: usize, v: &[f64]) -> Result<Value, InterpError> {
        let z: Vec<C> = v.iter().map(|&x| C::new(x, 0.0)).collect();
        self.float(k, &z)
    }

    fn int(&self, k: usize, v: &[i64]) -> Result<Value, InterpError> {
        let (ty, dims) = self.check(k, v.len())?;
        if !ty.is_integral() {
            return Err(internal(format!(
                "{} result {k} is not an integer",
                self.what
            )));
        }
        Ok(Value::Array(Array::from_i64s(*ty, dims.clone(), v)))
    }

    /// Result `k` filled with zeros (outputs LAPACK leaves unwritten).
    fn zeros(&self, k: usize) -> Result<Value, InterpError> {
        let (ty, dims) = &self.shapes[k];
        Ok(Value::Array(Array::zeros(*ty, dims.clone())?))
    }
}

fn tuple(v: Vec<Value>) -> Arc<Value> {
    Arc::new(Value::tuple(v))
}

const NAN: C = C::new(f64::NAN, f64::NAN);

/// Runs the linear-algebra custom call `target` (see the module docs).
pub fn call(
    interp: &Interp,
    id: InstrId,
    target: &str,
    ops: &[Arc<Value>],
) -> Result<Arc<Value>, InterpError> {
    let a: Vec<&Array> = ops.iter().map(|v| v.as_array()).collect::<Result<_, _>>()?;
    let first = *a.first().ok_or_else(|| internal("missing operand"))?;
    let lower = flag(interp, id, "uplo").unwrap_or('L') == 'L';
    match kind(target) {
        Some(Kind::Trsm) => {
            let b = a.get(1).ok_or_else(|| internal("missing operand 1"))?;
            let transpose_a = match flag(interp, id, "trans_x").unwrap_or('N') {
                'T' => "TRANSPOSE",
                'C' => "ADJOINT",
                _ => "NO_TRANSPOSE",
            };
            let opts = linalg::SolveOptions {
                left_side: flag(interp, id, "side").unwrap_or('L') == 'L',
                lower,
                unit_diagonal: flag(interp, id, "diag").unwrap_or('N') == 'U',
                transpose_a,
            };
            Ok(Arc::new(Value::Array(linalg::triangular_solve(
                first, b, &opts,
            )?)))
        }
        Some(Kind::Potrf) => potrf(interp, id, first, lower),
        Some(Kind::Getrf) => lu(interp, id, first, false),
        Some(Kind::TpuLu) => lu(interp, id, first, true),
        Some(Kind::Geqrf) => geqrf(interp, id, first),
        Some(Kind::Orgqr) => {
            let taus = a
                .get(1)
                .ok_or_else(|| internal("missing operand 1 (taus)"))?;
            orgqr(interp, id, first, taus)
        }
        Some(Kind::Gesdd) => gesdd(interp, id, first, flag(interp, id, "mode").unwrap_or('A')),
        Some(Kind::Syevd) => {
            let vectors = flag(interp, id, "mode").unwrap_or('V') == 'V';
            eigh(interp, id, first, lower, vectors, true)
        }
        Some(Kind::TpuEigh) => {
            // backend_config "lower,sort_eigenvalues,max_iter,tol": eigenvalues
            // come out ascending either way (unsorted allows any order).
            let lower = backend_config(interp, id)
                .and_then(|t| t.split(',').next())
                .is_none_or(|f| f.trim() != "0");
            eigh(interp, id, first, lower, true, false)
        }
        Some(Kind::Geev) => geev(interp, id, first),
        None => Err(InterpError::Unsupported(format!(
            "custom-call target '{target}'"
        ))),
    }
}

/// `?potrf`: (factor, info); the factor in the `uplo` triangle, the other
/// triangle as it was; `info` is 0, or 1 for a matrix that is not positive
/// definite (jaxlib only tests it against 0 and then masks the factor with NaNs).
fn potrf(interp: &Interp, id: InstrId, a: &Array, lower: bool) -> Result<Arc<Value>, InterpError> {
    let (factor, ok) = linalg::potrf(a, lower)?;
    let out = Out::new(interp, id, "potrf", 2)?;
    let info: Vec<i64> = ok.iter().map(|&good| if good { 0 } else { 1 }).collect();
    Ok(tuple(vec![Value::Array(factor), out.int(1, &info)?]))
}

/// `?getrf`: (L\U, 1-based pivots, info); TPU `LuDecomposition`: (L\U, 0-based
/// pivots, permutation).
fn lu(interp: &Interp, id: InstrId, a: &Array, tpu: bool) -> Result<Arc<Value>, InterpError> {
    let x = Batch::new(a)?;
    let out = Out::new(interp, id, "LU", 3)?;
    let (mut lu, mut pivots, mut third) = (Vec::with_capacity(x.vals.len()), vec![], vec![]);
    for b in 0..x.count {
        let (mat, piv, info) = lu_in(&x, x.matrix(b));
        lu.extend(mat);
        let base = if tpu { 0 } else { 1 };
        pivots.extend(piv.iter().map(|&p| p as i64 + base));
        if tpu {
            third.extend(decomp::permutation(&piv, x.m).iter().map(|&p| p as i64));
        } else {
            third.push(info as i64);
        }
    }
    Ok(tuple(vec![
        out.float(0, &lu)?,
        out.int(1, &pivots)?,
        out.int(2, &third)?,
    ]))
}

/// `?geqrf` / TPU `Qr`: (reflectors and R packed, taus).
fn geqrf(interp: &Interp, id: InstrId, a: &Array) -> Result<Arc<Value>, InterpError> {
    let x = Batch::new(a)?;
    let out = Out::new(interp, id, "QR", 2)?;
    let (mut packed, mut taus) = (Vec::with_capacity(x.vals.len()), vec![]);
    for b in 0..x.count {
        let (mat, t) = geqrf_in(&x, x.matrix(b));
        packed.extend(mat);
        taus.extend(t);
    }
    Ok(tuple(vec![out.float(0, &packed)?, out.float(1, &taus)?]))
}

/// `?orgqr`/`?ungqr` / TPU `ProductOfElementaryHouseholderReflectors`: Q with
/// the operand's shape from the reflectors and taus.
fn orgqr(interp: &Interp, id: InstrId, a: &Array, taus: &Array) -> Result<Arc<Value>, InterpError> {
    let x = Batch::new(a)?;
    let t = to_complex(taus)?;
    let k = taus.dims.last().copied().unwrap_or(0);
    if taus.dims.is_empty() || x.n > x.m || k > x.n || t.len() != x.count * k {
        return Err(internal(format!(
            "householder product of {:?} with taus {:?}: need taus [batch, k], k <= n <= m",
            a.dims, taus.dims
        )));
    }
    let out = Out::new(interp, id, "householder product", 1)?;
    let mut q = Vec::with_capacity(x.vals.len());
    for b in 0..x.count {
        q.extend(orgqr_in(&x, x.matrix(b), &t[b * k..(b + 1) * k]));
    }
    out.float(0, &q).map(Arc::new)
}

/// `?gesdd`: (A overwritten, s, u, vt, info) with mode 'A' (full u and vt),
/// 'S' (thin) or 'N' (values only; u and vt zeros). A matrix with a NaN or an
/// infinity gives `info = -4` (LAPACK's check for NaN), one that does not
/// converge `info = 1`; both NaN results (jaxlib masks them with NaN anyway).
fn gesdd(interp: &Interp, id: InstrId, a: &Array, mode: char) -> Result<Arc<Value>, InterpError> {
    let x = Batch::new(a)?;
    let out = Out::new(interp, id, "SVD", 5)?;
    let (m, n, k) = (x.m, x.n, x.m.min(x.n));
    let vectors = mode != 'N';
    let full = mode == 'A';
    let (uc, vr) = if full { (m, n) } else { (k, k) };
    let (mut s, mut u, mut vt, mut info) = (vec![], vec![], vec![], vec![]);
    for b in 0..x.count {
        let mat = x.matrix(b);
        let finite = decomp::all_finite(mat);
        let d = if finite {
            decomp::svd(mat, m, n, x.real, vectors, full)
        } else {
            None
        };
        info.push(match (&d, finite) {
            (Some(_), _) => 0,
            (None, false) => -4,
            (None, true) => 1,
        });
        let d = d.unwrap_or_else(|| decomp::Svd {
            s: vec![f64::NAN; k],
            u: if vectors { vec![NAN; m * uc] } else { vec![] },
            vt: if vectors { vec![NAN; vr * n] } else { vec![] },
        });
        s.extend(d.s);
        u.extend(d.u);
        vt.extend(d.vt);
    }
    let (u, vt) = if vectors {
        (out.float(2, &u)?, out.float(3, &vt)?)
    } else {
        (out.zeros(2)?, out.zeros(3)?)
    };
    Ok(tuple(vec![
        Value::Array(a.clone()),
        out.real(1, &s)?,
        u,
        vt,
        out.int(4, &info)?,
    ]))
}

/// `?syevd`/`?heevd`: (eigenvectors as columns, eigenvalues ascending, info);
/// TPU `Eigh` (`lapack` false): (eigenvectors, eigenvalues). Without `vectors`
/// the first result is the operand. A matrix with a NaN or an infinity, or one
/// that does not converge, gives NaNs and `info = 1`.
fn eigh(
    interp: &Interp,
    id: InstrId,
    a: &Array,
    lower: bool,
    vectors: bool,
    lapack: bool,
) -> Result<Arc<Value>, InterpError> {
    let x = Batch::new(a)?;
    let n = x.square("eigh")?;
    let out = Out::new(interp, id, "eigh", if lapack { 3 } else { 2 })?;
    let (mut v, mut w, mut info) = (Vec::with_capacity(x.vals.len()), vec![], vec![]);
    for b in 0..x.count {
        let mat = x.matrix(b);
        let d = if decomp::all_finite(mat) {
            decomp::eigh(mat, n, lower, x.real)
        } else {
            None
        };
        info.push(if d.is_some() { 0 } else { 1 });
        let (wb, vb) = d.unwrap_or_else(|| (vec![f64::NAN; n], vec![NAN; n * n]));
        w.extend(wb);
        v.extend(if vectors { vb } else { mat.to_vec() });
    }
    let mut results = vec![out.float(0, &v)?, out.real(1, &w)?];
    if lapack {
        results.push(out.int(2, &info)?);
    }
    Ok(tuple(results))
}

/// `?geev`: real (wr, wi, vl, vr, info), complex (w, vl, vr, info); `vl`/`vr`
/// are complex, columns of unit norm with the largest component real, and zeros
/// unless `compute_left`/`compute_right` is 'V'. A matrix with a NaN or an
/// infinity, or one that does not converge, gives NaNs and `info = 1`.
fn geev(interp: &Interp, id: InstrId, a: &Array) -> Result<Arc<Value>, InterpError> {
    let x = Batch::new(a)?;
    let n = x.square("eig")?;
    let left = flag(interp, id, "compute_left").unwrap_or('N') == 'V';
    let right = flag(interp, id, "compute_right").unwrap_or('V') == 'V';
    let out = Out::new(interp, id, "eig", if x.real { 5 } else { 4 })?;
    let (mut w, mut vl, mut vr, mut info) = (vec![], vec![], vec![], vec![]);
    for b in 0..x.count {
        let mat = x.matrix(b);
        let d = if decomp::all_finite(mat) {
            decomp::eig(mat, n, x.real, left, right)
        } else {
            None
        };
        info.push(if d.is_some() { 0 } else { 1 });
        let d = d.unwrap_or_else(|| decomp::Eig {
            w: vec![NAN; n],
            vl: if left { vec![NAN; n * n] } else { vec![] },
            vr: if right { vec![NAN; n * n] } else { vec![] },
        });
        w.extend(d.w);
        vl.extend(d.vl);
        vr.extend(d.vr);
    }
    let base = if x.real { 2 } else { 1 };
    let vl = if left {
        out.float(base, &vl)?
    } else {
        out.zeros(base)?
    };
    let vr = if right {
        out.float(base + 1, &vr)?
    } else {
        out.zeros(base + 1)?
    };
    let mut results = if x.real {
        let wr: Vec<f64> = w.iter().map(|z| z.re).collect();
        let wi: Vec<f64> = w.iter().map(|z| z.im).collect();
        vec![out.real(0, &wr)?, out.real(1, &wi)?]
    } else {
        vec![out.float(0, &w)?]
    };
    results.extend([vl, vr, out.int(base + 2, &info)?]);
    Ok(tuple(results))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_routine_and_type() {
        assert_eq!(kind("lapack_zgetrf_ffi"), Some(Kind::Getrf));
        assert_eq!(kind("lapack_cungqr_ffi"), Some(Kind::Orgqr));
        assert_eq!(kind("lapack_dorgqr_ffi"), Some(Kind::Orgqr));
        assert_eq!(kind("lapack_dungqr_ffi"), None);
        assert_eq!(kind("lapack_zheevd_ffi"), Some(Kind::Syevd));
        assert_eq!(kind("lapack_qgetrf_ffi"), None);
        assert_eq!(kind("Qr"), Some(Kind::Geqrf));
    }
}
