//! Hand-written modules whose expected costs were read off XLA's
//! `hlo_module_cost_analysis` (jaxlib CPU client); each pins one rule.

fn cost(text: &str) -> (f64, f64, f64) {
    let m = tpusim_hlo::parse_module(text).unwrap();
    let c = tpusim_cost::xla_cost(&m);
    (c.flops, c.transcendentals, c.bytes_accessed)
}

fn entry(body: &str) -> String {
    format!("HloModule m, replica_count=2\nENTRY e {{\n{body}\n}}\n")
}

#[test]
fn elementwise_flop_and_transcendental() {
    let neg = entry("p = f32[4,8] parameter(0)\nROOT r = f32[4,8] negate(p)");
    assert_eq!(cost(&neg), (32.0, 0.0, 256.0));
    // acos is a transcendental for XLA, like exp.
    let acos = entry("p = f32[4,8] parameter(0)\nROOT r = f32[4,8] acos(p)");
    assert_eq!(cost(&acos), (0.0, 32.0, 256.0));
    let bc = entry("p = f32[4,8] parameter(0)\nROOT r = s32[4,8] bitcast-convert(p)");
    assert_eq!(cost(&bc), (32.0, 0.0, 256.0));
}

#[test]
fn tuple_operands_cost_their_pointer_table_results_their_leaves() {
    let ob =
        entry("p = (f32[4,8], f32[2]) parameter(0)\nROOT r = (f32[4,8], f32[2]) opt-barrier(p)");
    assert_eq!(cost(&ob), (0.0, 0.0, 152.0));
    let cp = entry(
        "p = f32[4,8] parameter(0)\n\
         s = (f32[4,8], f32[4,8], u32[], u32[]) collective-permute-start(p), source_target_pairs={{0,1}}\n\
         ROOT d = f32[4,8] collective-permute-done(s)",
    );
    assert_eq!(cost(&cp), (0.0, 0.0, 552.0));
}

#[test]
fn sizes_of_dynamic_and_packed_arrays() {
    let dynamic = entry("p = f32[<=4,8] parameter(0)\nROOT r = f32[<=4,8] negate(p)");
    assert_eq!(cost(&dynamic), (32.0, 0.0, 272.0));
    let packed = entry("p = u4[4,8]{1,0:E(4)} parameter(0)\nROOT r = u4[4,8]{1,0:E(4)} negate(p)");
    assert_eq!(cost(&packed), (32.0, 0.0, 32.0));
}

#[test]
fn linear_algebra_and_rng() {
    let tri = entry(
        "a = f32[4,4] parameter(0)\nb = f32[4,3] parameter(1)\n\
         ROOT r = f32[4,3] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE",
    );
    assert_eq!(cost(&tri), (96.0, 0.0, 128.0));
    let chol = entry("a = f32[2,4,4] parameter(0)\nROOT r = f32[2,4,4] cholesky(a), lower=true");
    assert_eq!(cost(&chol), (42.0, 0.0, 128.0));
    let rbg = entry(
        "p = u64[2] parameter(0)\n\
         ROOT r = (u64[2], u32[4,8]) rng-bit-generator(p), algorithm=rng_three_fry",
    );
    assert_eq!(cost(&rbg), (0.0, 34.0, 160.0));
}

const NESTED: &str = "HloModule m
inner {
  a = f32[4,8] parameter(0)
  ROOT n = f32[4,8] negate(a)
}
outer {
  p = f32[4,8] parameter(0)
  ROOT f = f32[4,8] fusion(p), kind=kLoop, calls=inner
}
ENTRY e {
  x = f32[4,8] parameter(0)
  ROOT r = f32[4,8] fusion(x), kind=kLoop, calls=outer
}
";

#[test]
fn nested_fusion_reads_follow_the_nested_fusions_users() {
    // The nested fusion is the root (no users): XLA charges no read.
    assert_eq!(cost(NESTED), (32.0, 0.0, 128.0));
    // Sliced afterwards: only the slice is read.
    let sliced = NESTED
        .replace(
            "ROOT f = f32[4,8] fusion(p), kind=kLoop, calls=inner",
            "f = f32[4,8] fusion(p), kind=kLoop, calls=inner\n  ROOT s = f32[2,8] slice(f), slice={[0:2],[0:8]}",
        )
        .replace("ROOT r = f32[4,8] fusion", "ROOT r = f32[2,8] fusion");
    assert_eq!(cost(&sliced), (32.0, 0.0, 128.0));
}
