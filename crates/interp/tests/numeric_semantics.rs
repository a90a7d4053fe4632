//! Hand-checked semantics of the ops JAX does not emit (so the generated reference
//! cases cannot cover them): mulhi, stochastic-convert, batch norm, async and copy
//! wrappers, host I/O errors, reduce-precision corner cases, and the linear-algebra
//! custom calls on empty, singular, NaN and mis-shaped input.

use tpusim_interp::{Array, Data};

mod common;
use common::{arrays, run};

fn ints(a: &Array) -> Vec<i64> {
    match &a.data {
        Data::I64(v) => v.clone(),
        Data::U64(v) => v.iter().map(|&x| x as i64).collect(),
        other => panic!("not ints: {other:?}"),
    }
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

#[test]
fn mulhi_is_the_high_half_of_the_full_product() {
    let a = arrays(
        "ENTRY e {
  x = s32[3] constant({1073741824, -1, 7})
  y = s32[3] constant({8, 1, 3})
  ROOT m = s32[3] mulhi(x, y)
}",
    );
    assert_eq!(ints(&a[0]), vec![2, -1, 0]);
    let u = arrays(
        "ENTRY e {
  x = u32[2] constant({4294967295, 65536})
  ROOT m = u32[2] mulhi(x, x)
}",
    );
    assert_eq!(ints(&u[0]), vec![4294967294, 1]);
}

#[test]
fn stochastic_convert_rounds_up_below_the_fraction() {
    // frac(2.25) * 2^32 = 2^30: r = 0 rounds the magnitude up, r = max does not.
    let a = arrays(
        "ENTRY e {
  x = f32[6] constant({2.25, -2.25, 2.25, nan, 1e10, -1e10})
  r = u32[6] constant({0, 0, 4294967295, 5, 0, 0})
  ROOT s = s32[6] stochastic-convert(x, r)
}",
    );
    assert_eq!(ints(&a[0]), vec![3, -3, 2, 0, 2147483647, -2147483648]);
}

#[test]
fn batch_norm_training_inference_and_grad() {
    let t = arrays(
        "ENTRY e {
  x = f32[2,2] constant({{1, 2}, {3, 6}})
  s = f32[2] constant({1, 2})
  o = f32[2] constant({0, 1})
  ROOT b = (f32[2,2], f32[2], f32[2]) batch-norm-training(x, s, o), epsilon=0, feature_index=1
}",
    );
    close(&t[0].to_f64s(), &[-1.0, -1.0, 1.0, 3.0]);
    close(&t[1].to_f64s(), &[2.0, 4.0]);
    close(&t[2].to_f64s(), &[1.0, 4.0]);
    let i = arrays(
        "ENTRY e {
  x = f32[2,2] constant({{1, 2}, {3, 6}})
  s = f32[2] constant({1, 2})
  o = f32[2] constant({0, 1})
  m = f32[2] constant({2, 4})
  v = f32[2] constant({1, 4})
  ROOT b = f32[2,2] batch-norm-inference(x, s, o, m, v), epsilon=0, feature_index=1
}",
    );
    close(&i[0].to_f64s(), &[-1.0, -1.0, 1.0, 3.0]);
    // x = {0, 0, 3}: mean 1, var 2; dy = {1, 0, 0}.
    let g = arrays(
        "ENTRY e {
  x = f32[3,1] constant({{0}, {0}, {3}})
  s = f32[1] constant({1})
  m = f32[1] constant({1})
  v = f32[1] constant({2})
  dy = f32[3,1] constant({{1}, {0}, {0}})
  ROOT b = (f32[3,1], f32[1], f32[1]) batch-norm-grad(x, s, m, v, dy), epsilon=0, feature_index=1
}",
    );
    let r = 0.5f64 / 2f64.sqrt();
    close(&g[0].to_f64s(), &[r, -r, 0.0]);
    close(&g[1].to_f64s(), &[-1.0 / 2f64.sqrt()]);
    close(&g[2].to_f64s(), &[1.0]);
}

#[test]
fn async_and_copy_wrappers_forward_the_wrapped_result() {
    let a = arrays(
        "wrapped {
  p = f32[2] parameter(0)
  ROOT n = f32[2] negate(p)
}

ENTRY e {
  x = f32[2] constant({1, -2})
  s = ((f32[2]), f32[2], s32[]) async-start(x), calls=wrapped
  u = ((f32[2]), f32[2], s32[]) async-update(s), calls=wrapped
  d = f32[2] async-done(u), calls=wrapped
  c = (f32[2], f32[2], u32[]) copy-start(d)
  ROOT r = f32[2] copy-done(c)
}",
    );
    close(&a[0].to_f64s(), &[-1.0, 2.0]);
}

#[test]
fn host_io_is_a_named_unsupported_error() {
    let e = run("ENTRY e {
  x = f32[2] constant({1, 2})
  t = token[] after-all()
  s = (f32[2], u32[], token[]) send(x, t), channel_id=1
  ROOT d = token[] send-done(s), channel_id=1
}")
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "unsupported opcode 'send' (host/device I/O needs a real device) in tpusim run"
    );
    let e = run("ENTRY e {
  x = f32[2] constant({1, 2})
  t = token[] after-all()
  ROOT o = token[] outfeed(x, t)
}")
    .unwrap_err()
    .to_string();
    assert!(e.contains("'outfeed'"), "{e}");
}

#[test]
fn reduce_precision_rounds_overflows_and_flushes() {
    let a = arrays(
        "ENTRY e {
  x = f32[6] constant({1.00390625, 1.01171875, 65520, 1e-5, nan, -70000})
  ROOT r = f32[6] reduce-precision(x), exponent_bits=5, mantissa_bits=7
}",
    );
    let v = a[0].to_f64s();
    // 1 + 2^-8 ties to even (1.0); 1 + 3*2^-8 rounds up to 1 + 2^-6.
    assert_eq!(v[0], 1.0);
    assert_eq!(v[1], 1.015625);
    assert_eq!(v[2], f64::INFINITY);
    assert_eq!(v[3], 0.0);
    assert!(v[4].is_nan());
    assert_eq!(v[5], f64::NEG_INFINITY);
}

#[test]
fn ragged_dot_with_a_ragged_batch_dim_is_a_plain_dot() {
    let a = arrays(
        "ENTRY e {
  l = f32[2,1,2] constant({{{1, 2}}, {{3, 4}}})
  r = f32[2,2,1] constant({{{1}, {1}}, {{2}, {0}}})
  g = s32[1] constant({1})
  ROOT d = f32[2,1,1] ragged-dot(l, r, g), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}, lhs_ragged_dims={0}
}",
    );
    close(&a[0].to_f64s(), &[3.0, 6.0]);
}

#[test]
fn scaled_dot_scales_blocks_along_the_contracting_dim() {
    // lhs 1x4 with scales {2, 10} over blocks of 2; rhs 4x1 of ones, scale 1.
    let a = arrays(
        "ENTRY e {
  l = f32[1,4] constant({{1, 1, 1, 1}})
  ls = f32[1,2] constant({{2, 10}})
  r = f32[4,1] constant({{1}, {1}, {1}, {1}})
  rs = f32[1,1] constant({{1}})
  ROOT d = f32[1,1] scaled-dot(l, ls, r, rs), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}",
    );
    close(&a[0].to_f64s(), &[24.0]);
}

#[test]
fn dot_algorithm_rounds_operands_to_bf16() {
    // 1 + 2^-10 is not a bf16 value: it rounds to 1 before the multiply.
    let body = |alg: &str| {
        format!(
            "ENTRY e {{
  l = f32[1,2] constant({{{{1.0009765625, 1}}}})
  r = f32[2,1] constant({{{{1}}, {{1}}}})
  ROOT d = f32[1,1] dot(l, r), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, algorithm={alg}
}}"
        )
    };
    assert_eq!(arrays(&body("dot_bf16_bf16_f32"))[0].to_f64s(), vec![2.0]);
    assert_eq!(
        arrays(&body("dot_bf16_bf16_f32_x6"))[0].to_f64s(),
        vec![2.0009765625]
    );
    assert_eq!(
        arrays(&body("dot_tf32_tf32_f32"))[0].to_f64s(),
        vec![2.0009765625]
    );
}

#[test]
fn complex_convolution_multiplies_complex_taps() {
    // out[p] = x[p] * 1 + x[p+1] * i.
    let a = arrays(
        "ENTRY e {
  x = c64[1,3,1] constant({{{(1, 0)}, {(0, 1)}, {(1, 1)}}})
  k = c64[2,1,1] constant({{{(1, 0)}}, {{(0, 1)}}})
  ROOT c = c64[1,2,1] convolution(x, k), window={size=2}, dim_labels=b0f_0io->b0f
}",
    );
    assert_eq!(a[0].data, Data::C64(vec![(0.0, 0.0), (-1.0, 2.0)]));
}

#[test]
fn linalg_custom_calls_take_empty_singular_and_non_finite_matrices() {
    // getrf of an empty matrix: nothing to pivot.
    let empty = arrays(
        "ENTRY e {\n  a = f32[2,0,3] constant({{}, {}})\n  \
         ROOT r = (f32[2,0,3], s32[2,0], s32[2]) custom-call(a), custom_call_target=\"lapack_sgetrf_ffi\"\n}",
    );
    assert_eq!(ints(&empty[2]), vec![0, 0]);
    // A zero second pivot: info = 2, that column left unscaled.
    let lu = arrays(
        "ENTRY e {\n  a = f64[2,2] constant({{1, 2}, {2, 4}})\n  \
         ROOT r = (f64[2,2], s32[2], s32[]) custom-call(a), custom_call_target=\"lapack_dgetrf_ffi\"\n}",
    );
    assert_eq!(lu[0].to_f64s(), vec![2.0, 4.0, 0.5, 0.0]);
    assert_eq!((ints(&lu[1]), ints(&lu[2])), (vec![2, 2], vec![2]));
    // gesdd of a NaN matrix reports LAPACK's info = -4 and NaN values.
    let svd = arrays(
        "ENTRY e {\n  a = f32[2,2] constant({{nan, 1}, {1, 2}})\n  \
         ROOT r = (f32[2,2], f32[2], f32[2,2], f32[2,2], s32[]) custom-call(a), \
         custom_call_target=\"lapack_sgesdd_ffi\", backend_config={mode = 65 : ui8}\n}",
    );
    assert!(svd[1].to_f64s().iter().all(|x| x.is_nan()));
    assert_eq!(ints(&svd[4]), vec![-4]);
}

#[test]
fn linalg_custom_calls_with_mismatched_shapes_are_errors() {
    let bad = [
        // Taus longer than the matrix has columns.
        "ENTRY e {\n  a = f32[3,2] constant({{1, 2}, {3, 4}, {5, 6}})\n  t = f32[3] constant({1, 1, 1})\n  \
         ROOT q = f32[3,2] custom-call(a, t), custom_call_target=\"lapack_sorgqr_ffi\"\n}",
        // A result that does not fit the operand.
        "ENTRY e {\n  a = f32[2,2] constant({{1, 2}, {3, 4}})\n  \
         ROOT r = (f32[2,2], f32[3]) custom-call(a), custom_call_target=\"Qr\"\n}",
        // eigh of a non-square matrix.
        "ENTRY e {\n  a = f32[2,3] constant({{1, 2, 3}, {3, 4, 5}})\n  \
         ROOT r = (f32[2,3], f32[2]) custom-call(a), custom_call_target=\"Eigh\", backend_config=\"1,1,100,1e-6\"\n}",
    ];
    for body in bad {
        assert!(run(body).is_err(), "{body}");
    }
}
