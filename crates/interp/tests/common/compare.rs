//! Comparison of interpreter results with XLA's (shared by the generated
//! differential suites, tests/dtypes.rs and tests/lax_suite.rs): integer,
//! pred and narrow-float results bit-exact (any NaN matches any NaN: XLA does
//! not define a computed NaN's sign); f32/f64/complex components NaN where
//! XLA's are, the same infinity, and finite values within a few ulp of the
//! component type, relative to the larger of the value and 1e-3 of the
//! array's largest finite magnitude.

use tpusim_interp::{Array, Data};

/// One real component against XLA's; `floor` bounds the error of finite values.
fn real_ok(g: f64, w: f64, rtol: f64, floor: f64) -> bool {
    if g.is_nan() || w.is_nan() {
        return g.is_nan() && w.is_nan();
    }
    if g.is_infinite() || w.is_infinite() {
        return g == w;
    }
    (g - w).abs() <= rtol * floor
}

/// Component pairs of a float or complex array (imaginary 0 for reals).
fn components(a: &Array) -> Option<Vec<(f64, f64)>> {
    Some(match &a.data {
        Data::F32(v) => v.iter().map(|&x| (x as f64, 0.0)).collect(),
        Data::F64(v) => v.iter().map(|&x| (x, 0.0)).collect(),
        Data::C64(v) => v.iter().map(|&(r, i)| (r as f64, i as f64)).collect(),
        Data::C128(v) => v.clone(),
        _ => return None,
    })
}

/// The first mismatching element of one output, if any.
pub fn mismatch(got: &Array, want: &Array) -> Option<String> {
    if got.ty != want.ty || got.dims != want.dims {
        return Some(format!(
            "got {}{:?}, want {}{:?}",
            got.ty, got.dims, want.ty, want.dims
        ));
    }
    if let (Some(g), Some(w)) = (components(got), components(want)) {
        let rtol = if matches!(want.ty.name(), "f32" | "c64") {
            4e-7
        } else {
            1e-14
        };
        let mag = |z: &(f64, f64)| z.0.hypot(z.1);
        let big = w
            .iter()
            .map(mag)
            .filter(|m| m.is_finite())
            .fold(0f64, f64::max);
        for (i, (x, y)) in g.iter().zip(&w).enumerate() {
            let floor = mag(y).max(1e-3 * big).max(f64::MIN_POSITIVE);
            if !(real_ok(x.0, y.0, rtol, floor) && real_ok(x.1, y.1, rtol, floor)) {
                return Some(format!("element {i}: got {x:?}, want {y:?}"));
            }
        }
        return None;
    }
    if let (Data::F8(_) | Data::Bf16(_) | Data::F16(_), true) = (&got.data, got.ty.is_float()) {
        let (gf, wf) = (got.to_f64s(), want.to_f64s());
        for (i, ((x, y), (xf, yf))) in bits(got)
            .iter()
            .zip(bits(want))
            .zip(gf.iter().zip(&wf))
            .enumerate()
        {
            if !(x == &y || (xf.is_nan() && yf.is_nan())) {
                return Some(format!(
                    "element {i}: bits {x:#x} ({xf}), want {y:#x} ({yf})"
                ));
            }
        }
        return None;
    }
    if got.data != want.data {
        let i = (0..got.len())
            .find(|&i| got.data.take(&[i]) != want.data.take(&[i]))
            .unwrap_or(0);
        return Some(format!(
            "element {i}: got {:?}, want {:?}",
            got.data.take(&[i]),
            want.data.take(&[i])
        ));
    }
    None
}

/// Narrow-float outputs whose bit patterns are at most one apart in value order.
pub fn within_one_ulp(got: &Array, want: &Array) -> bool {
    let width = got.ty.bit_width();
    let ordered = |b: u16| {
        let sign = 1i32 << (width - 1);
        let b = b as i32;
        if b & sign != 0 {
            -(b & (sign - 1))
        } else {
            b
        }
    };
    let (g, w) = (bits(got), bits(want));
    !g.is_empty()
        && g.len() == w.len()
        && g.iter()
            .zip(&w)
            .all(|(&x, &y)| (ordered(x) - ordered(y)).abs() <= 1)
}

pub fn bits(a: &Array) -> Vec<u16> {
    match &a.data {
        Data::F8(v) => v.iter().map(|&b| b as u16).collect(),
        Data::Bf16(v) => v.iter().map(|x| x.to_bits()).collect(),
        Data::F16(v) => v.iter().map(|x| x.to_bits()).collect(),
        _ => Vec::new(),
    }
}
