//! The evaluator's fast paths against its general ones: leaf calls spliced
//! into their caller's plan, and the f32 `reduce-window` / `select-and-scatter`
//! loops, must give exactly what the general evaluation gives.

use proptest::prelude::*;
use tpusim_interp::{execute, Array, InterpError, Value};

fn run(text: &str) -> Result<Vec<Value>, InterpError> {
    let m = tpusim_hlo::parse_module(text).expect("test module parses");
    execute(&m, vec![])
}

fn arrays(text: &str) -> Vec<Array> {
    run(text)
        .expect("executes")
        .into_iter()
        .map(|v| match v {
            Value::Array(a) => a,
            Value::Tuple(_) => panic!("tuple leaf"),
        })
        .collect()
}

/// Calls of every shape a splice must handle: an identity (its root is its
/// parameter), an operand passed twice, a call as the root, the same
/// computation called twice, and calls inside a loop body.
#[test]
fn spliced_calls_compute_what_the_calls_do() {
    let out = arrays(
        "HloModule t

ident {
  ROOT p = f32[3] parameter(0)
}

twice {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  s = f32[3] add(a, b)
  ROOT m = f32[3] multiply(s, a)
}

body {
  st = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  v = f32[3] get-tuple-element(st), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f32[3] call(v, v), to_apply=twice
  k = f32[3] call(w), to_apply=ident
  ROOT r = (s32[], f32[3]) tuple(j, k)
}

cond {
  st = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY e {
  x = f32[3] constant({1, -2, 0.5})
  y = f32[3] call(x), to_apply=ident
  z = f32[3] call(y, x), to_apply=twice
  zero = s32[] constant(0)
  init = (s32[], f32[3]) tuple(zero, x)
  loop = (s32[], f32[3]) while(init), condition=cond, body=body
  l = f32[3] get-tuple-element(loop), index=1
  ROOT out = (f32[3], f32[3], f32[3]) tuple(y, z, l)
}
",
    );
    let v = |a: &Array| a.to_f64s();
    assert_eq!(v(&out[0]), vec![1.0, -2.0, 0.5]);
    // (x + x) * x = 2x^2
    assert_eq!(v(&out[1]), vec![2.0, 8.0, 0.5]);
    // two iterations of v -> 2v^2: 1 -> 2 -> 8, -2 -> 8 -> 128, 0.5 -> 0.5 -> 0.5
    assert_eq!(v(&out[2]), vec![8.0, 128.0, 0.5]);
}

/// A failure inside a spliced call still names the instruction that failed.
#[test]
fn an_error_inside_a_spliced_call_names_its_instruction() {
    let err = run("HloModule t

inner {
  p = f32[4] parameter(0)
  ROOT bad = f32[4] custom-call(p), custom_call_target=\"no_such_target\"
}

ENTRY e {
  x = f32[4] constant({1, 2, 3, 4})
  ROOT c = f32[4] call(x), to_apply=inner
}
")
    .expect_err("an unknown custom-call fails");
    assert!(err.to_string().contains("no_such_target"), "{err}");
}

/// `v` joined with `sep`: HLO's `2x3` window sizes and `2,3` dims.
fn join(v: &[usize], sep: &str) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(sep)
}

/// HLO's window padding, `low_high` per dimension.
fn pads(pad: &[(usize, usize)]) -> String {
    pad.iter()
        .map(|(l, h)| format!("{l}_{h}"))
        .collect::<Vec<_>>()
        .join("x")
}

/// HLO lines defining `x`, a `ty[dims]` operand of pseudo-random small
/// integers below `modulus` (a small modulus gives many ties).
fn operand(ty: &str, dims: &[usize], modulus: usize) -> String {
    let n: usize = dims.iter().product();
    let shape = join(dims, ",");
    format!(
        "  i = s32[{n}] iota(), iota_dimension=0
  k = s32[] constant(7919)
  kk = s32[{n}] broadcast(k), dimensions={{}}
  h = s32[{n}] multiply(i, kk)
  q = s32[] constant({modulus})
  qq = s32[{n}] broadcast(q), dimensions={{}}
  r = s32[{n}] remainder(h, qq)
  f = {ty}[{n}] convert(r)
  x = {ty}[{shape}] reshape(f)"
    )
}

/// A window over an operand: the shapes the properties draw.
#[derive(Clone, Debug)]
struct Geom {
    dims: Vec<usize>,
    size: Vec<usize>,
    stride: Vec<usize>,
    pad: Vec<(usize, usize)>,
    lhs: Vec<usize>,
    rhs: Vec<usize>,
}

fn window_text(ty: &str, g: &Geom, op: &str) -> String {
    let Geom {
        dims,
        size,
        stride,
        pad,
        lhs,
        rhs,
    } = g;
    let pads = pads(pad);
    // Output extent per dimension, as XLA's shape inference computes it.
    let out: Vec<usize> = (0..dims.len())
        .map(|k| {
            let base = (dims[k] - 1) * lhs[k] + 1 + pad[k].0 + pad[k].1;
            let win = (size[k] - 1) * rhs[k] + 1;
            if base < win {
                0
            } else {
                (base - win) / stride[k] + 1
            }
        })
        .collect();
    format!(
        "HloModule t

red {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT r = {ty}[] {op}(a, b)
}}

ENTRY e {{
{operand}
  z = {ty}[] constant(-3)
  ROOT w = {ty}[{out}] reduce-window(x, z), window={{size={size} stride={stride} pad={pads} lhs_dilate={lhs} rhs_dilate={rhs}}}, to_apply=red
}}
",
        operand = operand(ty, dims, 1009),
        out = join(&out, ","),
        size = join(size, "x"),
        stride = join(stride, "x"),
        lhs = join(lhs, "x"),
        rhs = join(rhs, "x"),
    )
}

fn geometry() -> impl Strategy<Value = Geom> {
    (1usize..=3).prop_flat_map(|rank| {
        (
            prop::collection::vec(1usize..=6, rank),
            prop::collection::vec(1usize..=3, rank),
            prop::collection::vec(1usize..=3, rank),
            prop::collection::vec((0usize..=2, 0usize..=2), rank),
            prop::collection::vec(1usize..=2, rank),
            prop::collection::vec(1usize..=2, rank),
            prop::collection::vec(prop::bool::ANY, rank),
        )
            .prop_map(
                |(dims, mut size, mut stride, mut pad, mut lhs, mut rhs, keep)| {
                    // Dims the window leaves alone (size 1, unit stride, no padding
                    // or dilation), half the time: trailing ones take the fast
                    // paths' run-at-a-time loops.
                    for (d, _) in keep.iter().enumerate().filter(|(_, &k)| k) {
                        (size[d], stride[d], pad[d], lhs[d], rhs[d]) = (1, 1, (0, 0), 1, 1);
                    }
                    Geom {
                        dims,
                        size,
                        stride,
                        pad,
                        lhs,
                        rhs,
                    }
                },
            )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The f32 loop (used for f32 with a simple reducer) against the general
    /// path (used for f64): every window geometry gives the same values. The
    /// inputs are small integers, so sums are exact in both types.
    #[test]
    fn f32_reduce_window_matches_the_general_path(
        g in geometry(),
        op in prop::sample::select(vec!["maximum", "minimum", "add"]),
    ) {
        let f32_out = arrays(&window_text("f32", &g, op));
        let f64_out = arrays(&window_text("f64", &g, op));
        prop_assert_eq!(&f32_out[0].dims, &f64_out[0].dims);
        prop_assert_eq!(f32_out[0].to_f64s(), f64_out[0].to_f64s());
    }
}

/// `select-and-scatter` over `dims`; with `general`, the select compares its
/// parameters the other way round with the flipped direction (the same
/// function), which the evaluator does not recognize as a plain compare.
fn select_scatter_text(g: &Geom, dir: &str, general: bool) -> String {
    let Geom {
        dims,
        size,
        stride,
        pad,
        ..
    } = g;
    let ty = "f32";
    let select = if general {
        let flipped = match dir {
            "GE" => "LE",
            "GT" => "LT",
            "LE" => "GE",
            _ => "GT",
        };
        format!("compare(b, a), direction={flipped}")
    } else {
        format!("compare(a, b), direction={dir}")
    };
    let pads = pads(pad);
    let src: Vec<usize> = (0..dims.len())
        .map(|k| {
            let base = dims[k] + pad[k].0 + pad[k].1;
            if base < size[k] {
                0
            } else {
                (base - size[k]) / stride[k] + 1
            }
        })
        .collect();
    let ns: usize = src.iter().product();
    format!(
        "HloModule t

sel {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT c = pred[] {select}
}}

sum {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT s = {ty}[] add(a, b)
}}

ENTRY e {{
{operand}
  j = s32[{ns}] iota(), iota_dimension=0
  g = {ty}[{ns}] convert(j)
  s = {ty}[{src}] reshape(g)
  z = {ty}[] constant(0)
  ROOT w = {ty}[{shape}] select-and-scatter(x, s, z), window={{size={size} stride={stride} pad={pads}}}, select=sel, scatter=sum
}}
",
        operand = operand(ty, dims, 13),
        shape = join(dims, ","),
        src = join(&src, ","),
        size = join(size, "x"),
        stride = join(stride, "x"),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The compare-select loop against the general select (the select
    /// computation evaluated), on values with many ties: same positions chosen.
    #[test]
    fn select_and_scatter_by_compare_matches_the_general_path(
        g in geometry(),
        dir in prop::sample::select(vec!["GE", "GT", "LE", "LT"]),
    ) {
        let fast = arrays(&select_scatter_text(&g, dir, false));
        let general = arrays(&select_scatter_text(&g, dir, true));
        prop_assert_eq!(fast[0].to_f64s(), general[0].to_f64s());
    }
}
