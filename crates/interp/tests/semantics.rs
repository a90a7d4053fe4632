//! Unit tests for the tricky XLA semantics the interpreter implements.

use tpusim_interp::{execute, Array, Data, InterpError, Value};

fn run(body: &str) -> Result<Vec<Value>, InterpError> {
    let text = format!("HloModule t\n\n{body}\n");
    let m = tpusim_hlo::parse_module(&text).expect("test module parses");
    execute(&m, vec![])
}

fn one(body: &str) -> Array {
    match run(body).expect("executes").remove(0) {
        Value::Array(a) => a,
        Value::Tuple(_) => panic!("tuple leaf"),
    }
}

fn ints(a: &Array) -> Vec<i64> {
    match &a.data {
        Data::I64(v) => v.clone(),
        Data::U64(v) => v.iter().map(|&x| x as i64).collect(),
        other => panic!("not ints: {other:?}"),
    }
}

fn floats(a: &Array) -> Vec<f64> {
    a.to_f64s()
}

#[test]
fn integer_division_and_remainder_by_zero() {
    let a = one("ENTRY e {
  x = s32[4] constant({7, -7, -2147483648, 5})
  y = s32[4] constant({0, 0, -1, 2})
  ROOT d = s32[4] divide(x, y)
}");
    assert_eq!(ints(&a), vec![-1, -1, -2147483648, 2]);
    let r = one("ENTRY e {
  x = s32[4] constant({7, -7, -2147483648, -5})
  y = s32[4] constant({0, 0, -1, 2})
  ROOT d = s32[4] remainder(x, y)
}");
    assert_eq!(ints(&r), vec![7, -7, 0, -1]);
    let u = one("ENTRY e {
  x = u8[2] constant({7, 9})
  y = u8[2] constant({0, 2})
  ROOT d = u8[2] divide(x, y)
}");
    assert_eq!(ints(&u), vec![255, 4]);
}

#[test]
fn shifts_at_or_beyond_bit_width() {
    let l = one("ENTRY e {
  x = s32[4] constant({1, 1, -8, -8})
  y = s32[4] constant({31, 32, 40, -1})
  ROOT d = s32[4] shift-left(x, y)
}");
    assert_eq!(ints(&l), vec![-2147483648, 0, 0, 0]);
    let a = one("ENTRY e {
  x = s32[3] constant({-8, 8, -8})
  y = s32[3] constant({1, 32, 33})
  ROOT d = s32[3] shift-right-arithmetic(x, y)
}");
    assert_eq!(ints(&a), vec![-4, 0, -1]);
    let r = one("ENTRY e {
  x = s8[3] constant({-128, -1, 64})
  y = s8[3] constant({7, 8, 1})
  ROOT d = s8[3] shift-right-logical(x, y)
}");
    assert_eq!(ints(&r), vec![1, 0, 32]);
}

#[test]
fn float_to_int_conversion_saturates() {
    let a = one("ENTRY e {
  x = f32[5] constant({1e10, -1e10, nan, 3.7, -3.7})
  ROOT c = s32[5] convert(x)
}");
    assert_eq!(ints(&a), vec![2147483647, -2147483648, 0, 3, -3]);
    let u = one("ENTRY e {
  x = f32[4] constant({-5, 300, inf, nan})
  ROOT c = u8[4] convert(x)
}");
    assert_eq!(ints(&u), vec![0, 255, 255, 0]);
}

#[test]
fn maximum_and_minimum_propagate_nan() {
    let mx = one("ENTRY e {
  x = f32[3] constant({nan, 1, 2})
  y = f32[3] constant({1, nan, 3})
  ROOT m = f32[3] maximum(x, y)
}");
    let v = floats(&mx);
    assert!(v[0].is_nan() && v[1].is_nan());
    assert_eq!(v[2], 3.0);
    let mn = one("ENTRY e {
  x = f32[3] constant({nan, 1, 2})
  y = f32[3] constant({1, nan, 3})
  ROOT m = f32[3] minimum(x, y)
}");
    let v = floats(&mn);
    assert!(v[0].is_nan() && v[1].is_nan());
    assert_eq!(v[2], 2.0);
    // Reductions with a max reducer propagate NaN too.
    let r = one("max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY e {
  x = f32[3] constant({1, nan, 3})
  i = f32[] constant(-inf)
  ROOT r = f32[] reduce(x, i), dimensions={0}, to_apply=max
}");
    assert!(floats(&r)[0].is_nan());
}

#[test]
fn pad_with_negative_and_interior_padding() {
    let a = one("ENTRY e {
  x = s32[4] constant({1, 2, 3, 4})
  z = s32[] constant(0)
  ROOT p = s32[6] pad(x, z), padding=-1_0_1
}");
    // interior: 1 0 2 0 3 0 4 (7), then drop one at the low edge.
    assert_eq!(ints(&a), vec![0, 2, 0, 3, 0, 4]);
    let b = one("ENTRY e {
  x = s32[2,2] constant({{1, 2}, {3, 4}})
  z = s32[] constant(9)
  ROOT p = s32[3,1] pad(x, z), padding=1_0x0_-1
}");
    assert_eq!(ints(&b), vec![9, 1, 3]);
}

#[test]
fn dynamic_slice_and_update_clamp_start_indices() {
    let a = one("ENTRY e {
  x = s32[5] constant({0, 1, 2, 3, 4})
  i = s32[] constant(4)
  ROOT d = s32[3] dynamic-slice(x, i), dynamic_slice_sizes={3}
}");
    assert_eq!(ints(&a), vec![2, 3, 4]);
    let b = one("ENTRY e {
  x = s32[5] constant({0, 1, 2, 3, 4})
  i = s32[] constant(-3)
  ROOT d = s32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}
}");
    assert_eq!(ints(&b), vec![0, 1]);
    let c = one("ENTRY e {
  x = s32[5] constant({0, 1, 2, 3, 4})
  u = s32[2] constant({8, 9})
  i = u32[] constant(7)
  ROOT d = s32[5] dynamic-update-slice(x, u, i)
}");
    assert_eq!(ints(&c), vec![0, 1, 2, 8, 9]);
}

#[test]
fn compare_totalorder_orders_signed_zeros_and_nans() {
    let a = one("ENTRY e {
  x = f32[3] constant({-0.0, nan, -nan})
  y = f32[3] constant({0, nan, -inf})
  ROOT c = pred[3] compare(x, y), direction=LT, type=TOTALORDER
}");
    assert_eq!(a.data, Data::Pred(vec![true, false, true]));
    let b = one("ENTRY e {
  x = f32[2] constant({-0.0, nan})
  y = f32[2] constant({0, nan})
  ROOT c = pred[2] compare(x, y), direction=LT
}");
    assert_eq!(b.data, Data::Pred(vec![false, false]));
}

#[test]
fn bf16_arithmetic_rounds_to_nearest_even() {
    let a = one("ENTRY e {
  x = bf16[2] constant({1, 256})
  y = bf16[2] constant({0.00390625, 1})
  ROOT s = bf16[2] add(x, y)
}");
    // 1 + 2^-8 is a tie between 1 and 1+2^-7 -> even (1); 256 + 1 -> 256 (tie to even).
    assert_eq!(floats(&a), vec![1.0, 256.0]);
}

#[test]
fn variadic_reduce_runs_the_reducer_computation() {
    let a = run("argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(b, a), direction=GT
  v = f32[] select(gt, b, a)
  i = s32[] select(gt, bi, ai)
  ROOT t = (f32[], s32[]) tuple(v, i)
}

ENTRY e {
  x = f32[2,3] constant({{1, 5, 2}, {7, 0, 7}})
  ix = s32[2,3] iota(), iota_dimension=1
  m = f32[] constant(-inf)
  z = s32[] constant(0)
  ROOT r = (f32[2], s32[2]) reduce(x, ix, m, z), dimensions={1}, to_apply=argmax
}")
    .unwrap();
    assert_eq!(floats(a[0].as_array().unwrap()), vec![5.0, 7.0]);
    assert_eq!(ints(a[1].as_array().unwrap()), vec![1, 0]);
}

#[test]
fn dot_with_batch_and_contracting_dims() {
    let a = one(
        "ENTRY e {
  x = f32[2,1,2] constant({{{1, 2}}, {{3, 4}}})
  y = f32[2,2,1] constant({{{5}, {6}}, {{7}, {8}}})
  ROOT d = f32[2,1,1] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}",
    );
    assert_eq!(floats(&a), vec![17.0, 53.0]);
    let i = one("ENTRY e {
  x = s8[2] constant({100, 100})
  y = s8[2] constant({2, 3})
  ROOT d = s32[] dot(x, y), lhs_contracting_dims={0}, rhs_contracting_dims={0}
}");
    assert_eq!(ints(&i), vec![500]);
}

#[test]
fn bitcast_follows_physical_layouts() {
    let a = one("ENTRY e {
  x = s32[2,3]{1,0} constant({{1, 2, 3}, {4, 5, 6}})
  ROOT b = s32[3,2]{0,1} bitcast(x)
}");
    // Same bytes read column-major: logical [3,2] is the transpose.
    assert_eq!(ints(&a), vec![1, 4, 2, 5, 3, 6]);
}

#[test]
fn bitcast_convert_splits_little_endian() {
    let a = one("ENTRY e {
  x = f32[] constant(1)
  ROOT b = u8[4] bitcast-convert(x)
}");
    assert_eq!(ints(&a), vec![0, 0, 128, 63]);
}

#[test]
fn while_and_conditional() {
    let a = one("cond {
  s = s32[] parameter(0)
  n = s32[] constant(10)
  ROOT c = pred[] compare(s, n), direction=LT
}

body {
  s = s32[] parameter(0)
  o = s32[] constant(3)
  ROOT a = s32[] add(s, o)
}

neg {
  p = s32[] parameter(0)
  ROOT n = s32[] negate(p)
}

id {
  ROOT p = s32[] parameter(0)
}

ENTRY e {
  z = s32[] constant(0)
  w = s32[] while(z), condition=cond, body=body
  i = s32[] constant(7)
  ROOT c = s32[] conditional(i, w, w), branch_computations={neg, id}
}");
    // 0,3,6,9,12 -> 12; index 7 is out of range -> last branch (identity).
    assert_eq!(ints(&a), vec![12]);
}

#[test]
fn unsupported_features_are_named_errors() {
    let e = run("ENTRY e {
  t = token[] after-all()
  ROOT i = (f32[4], token[]) infeed(t)
}")
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "unsupported opcode 'infeed' (host/device I/O needs a real device) in tpusim run"
    );
    let e = run("ENTRY e {
  ROOT x = f32[4] constant({...})
}")
    .unwrap_err()
    .to_string();
    assert!(e.contains("elided"), "{e}");
    let e = run("ENTRY e {
  x = f32[4] constant({1, 2, 3, 4})
  ROOT c = f32[4] custom-call(x), custom_call_target=\"my_kernel\"
}")
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "unsupported custom-call target 'my_kernel' in tpusim run"
    );
}

#[test]
fn sharding_custom_calls_are_identity() {
    let a = one("ENTRY e {
  x = f32[2] constant({1, 2})
  s = f32[2] custom-call(x), custom_call_target=\"Sharding\", sharding={replicated}
  ROOT t = f32[2] custom-call(s), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}
}");
    assert_eq!(floats(&a), vec![1.0, 2.0]);
}

#[test]
fn npz_round_trip_and_argument_errors() {
    let dir = std::env::temp_dir().join(format!("tpusim-interp-npz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.npz");
    let vals = vec![
        Value::Array(Array::from_f64s(
            tpusim_hlo::PrimitiveType::Bf16,
            vec![2],
            &[1.5, -2.0],
        )),
        Value::Array(Array::from_i64s(
            tpusim_hlo::PrimitiveType::S32,
            vec![1, 2],
            &[3, -4],
        )),
    ];
    tpusim_interp::npz::write_outputs(&path, &vals).unwrap();
    let shapes = vec![
        tpusim_hlo::Shape::array(tpusim_hlo::PrimitiveType::Bf16, vec![2]),
        tpusim_hlo::Shape::array(tpusim_hlo::PrimitiveType::S32, vec![1, 2]),
    ];
    let back = tpusim_interp::npz::read_named(&path, "out", &shapes).unwrap();
    assert_eq!(back, vals);
    let bad = [tpusim_hlo::Shape::array(
        tpusim_hlo::PrimitiveType::F32,
        vec![2],
    )];
    let e = tpusim_interp::npz::read_named(&path, "out", &bad[..1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("out1"), "{e}");
    let two = vec![bad[0].clone(), shapes[1].clone()];
    let e = tpusim_interp::npz::read_named(&path, "out", &two)
        .unwrap_err()
        .to_string();
    assert!(e.contains("parameter 0") && e.contains("dtype"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reduce_window_skips_padding_positions() {
    // cumsum via reduce-window: window 3, pad 2 low.
    let a = one("add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

ENTRY e {
  x = s32[3] constant({1, 2, 3})
  z = s32[] constant(0)
  ROOT r = s32[3] reduce-window(x, z), window={size=3 pad=2_0}, to_apply=add
}");
    assert_eq!(ints(&a), vec![1, 3, 6]);
    // A non-identity init is applied once per output, never for padding.
    let b = one("add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

ENTRY e {
  x = s32[3] constant({1, 2, 3})
  z = s32[] constant(10)
  ROOT r = s32[2] reduce-window(x, z), window={size=2 stride=2 pad=0_1}, to_apply=add
}");
    assert_eq!(ints(&b), vec![13, 13]);
}

/// XLA orders +0 above -0 in maximum and minimum (IEEE 754-2019), on either
/// side, elementwise and in reductions; values checked against JAX 0.10.2.
#[test]
fn max_and_min_order_signed_zeros() {
    for ty in ["f32", "bf16", "f64", "f16"] {
        let signs = |op: &str| {
            let a = one(&format!(
                "ENTRY e {{
  x = {ty}[4] constant({{-0, 0, -0, 0}})
  y = {ty}[4] constant({{0, -0, -0, 0}})
  ROOT m = {ty}[4] {op}(x, y)
}}"
            ));
            floats(&a)
                .iter()
                .map(|v| v.is_sign_negative())
                .collect::<Vec<_>>()
        };
        assert_eq!(signs("maximum"), [false, false, true, false], "{ty} max");
        assert_eq!(signs("minimum"), [true, true, true, false], "{ty} min");
    }
    let reduced = one("max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY e {
  x = f32[2] constant({-0, 0})
  init = f32[] constant(-inf)
  ROOT r = f32[] reduce(x, init), dimensions={0}, to_apply=max
}");
    assert!(!floats(&reduced)[0].is_sign_negative());
}

/// An npz member whose header declares far more elements than the module
/// takes is refused from its header, before a byte of data is read.
#[test]
fn npz_members_are_checked_against_the_module_before_reading() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("tpusim-interp-liar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("liar.npz");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<118}\n");
    npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    npy.extend_from_slice(padded.as_bytes());
    npy.extend_from_slice(&[0u8; 64]);
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    zip.start_file("arg0.npy", zip::write::FileOptions::default())
        .unwrap();
    zip.write_all(&npy).unwrap();
    zip.finish().unwrap();
    let f32x4x4 = [tpusim_hlo::Shape::array(
        tpusim_hlo::PrimitiveType::F32,
        vec![4, 4],
    )];
    for read in [
        tpusim_interp::npz::read_named,
        tpusim_interp::npz::read_named_at_most,
    ] {
        let e = read(&path, "arg", &f32x4x4).unwrap_err().to_string();
        assert!(e.contains("liar.npz") && e.contains("[1000000000]"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
