//! tpusim's layout normalization (crates/compile/src/normalize.rs) turns a
//! bitcast between layouts into logical transposes and reshapes and drops
//! every layout: on random shapes and layouts the interpreter, which honours
//! layouts in bitcasts, must compute the same arrays from both programs.

use proptest::prelude::*;
use tpusim_interp::{execute, Array, Value};

/// `dims` with a minor-to-major layout.
fn shape(dims: &[i64], minor_to_major: &[usize]) -> String {
    let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
    let l: Vec<String> = minor_to_major.iter().map(|x| x.to_string()).collect();
    format!("f32[{}]{{{}}}", d.join(","), l.join(","))
}

fn permutation(rank: usize) -> impl Strategy<Value = Vec<usize>> {
    Just((0..rank).collect::<Vec<usize>>()).prop_shuffle()
}

/// Dims, the operand's layout, a permutation of the dims for the first
/// bitcast, its layout, and the last bitcast's layout.
type Case = (Vec<i64>, Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>);

fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec(1i64..=4, 1..=3).prop_flat_map(|dims| {
        let r = dims.len();
        (
            Just(dims),
            permutation(r),
            permutation(r),
            permutation(r),
            permutation(r),
        )
    })
}

fn leaves(v: Value) -> Vec<Vec<f64>> {
    match v {
        Value::Array(a) => vec![a.to_f64s()],
        Value::Tuple(t) => t
            .into_iter()
            .flat_map(|v| leaves(std::sync::Arc::unwrap_or_clone(v)))
            .collect(),
    }
}

/// Runs `m` on 0, 1, 2, ... in its parameter's logical order.
fn run(m: &tpusim_hlo::Module) -> Vec<Vec<f64>> {
    let shape = m.entry_parameter_shapes()[0].clone();
    let n: i64 = shape.dims().iter().product();
    let x = Array::from_f64s(
        tpusim_hlo::PrimitiveType::F32,
        shape.dims().iter().map(|&d| d as usize).collect(),
        &(0..n).map(|v| v as f64).collect::<Vec<_>>(),
    );
    execute(m, vec![Value::Array(x)])
        .expect("runs")
        .into_iter()
        .flat_map(leaves)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// x (any layout) bitcast to a permutation of its dims (any layout), and
    /// that bitcast again, flat and to a third layout: each bitcast reads the
    /// layout its operand was written with.
    #[test]
    fn bitcasts_between_layouts_keep_their_values(
        (dims, l_in, order, l_mid, l_out) in case()
    ) {
        let mid: Vec<i64> = order.iter().map(|&k| dims[k]).collect();
        let flat: i64 = dims.iter().product();
        let text = format!(
            "HloModule p, is_scheduled=true\n\nENTRY main {{\n  x = {} parameter(0)\n  \
             a = {} bitcast(x)\n  b = f32[{flat}]{{0}} bitcast(a)\n  c = {} bitcast(a)\n  \
             ROOT t = (f32[{flat}]{{0}}, {}) tuple(b, c)\n}}\n",
            shape(&dims, &l_in),
            shape(&mid, &l_mid),
            shape(&dims, &l_out),
            shape(&dims, &l_out),
        );
        let original = tpusim_hlo::parse_module(&text).expect("parses");
        let mut normalized = original.clone();
        tpusim_compile::normalize::normalize_layouts(&mut normalized);
        tpusim_compile::compact(&mut normalized);
        tpusim_hlo::verify(&normalized).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(run(&original), run(&normalized), "{}", text);
    }
}
