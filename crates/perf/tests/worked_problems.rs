//! Single-device matmul and elementwise timings from the scaling book's worked
//! problems (testdata/worked_problems.json, the entries of
//! shared/reference/worked_problems.json used here). Each test writes the HLO
//! of the problem, runs the performance model and compares with the book's
//! answer at the problem's stated tolerance.

use serde_json::Value;
use tpusim_arch::by_id;
use tpusim_perf::{analyze, Analysis, Bound, OpStat};

fn problem(id: &str) -> Value {
    let all: Vec<Value> =
        serde_json::from_str(include_str!("../testdata/worked_problems.json")).unwrap();
    all.into_iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no worked problem `{id}`"))
}

/// Asserts `computed` is within the "+-N%" tolerance of `expected_answer[path]`.
fn check(id: &str, path: &[&str], computed: f64) {
    let p = problem(id);
    let mut expected = &p["expected_answer"];
    for key in path {
        expected = &expected[*key];
    }
    let expected = expected
        .as_f64()
        .unwrap_or_else(|| panic!("{id} {path:?}: not a number"));
    let percent: f64 = p["tolerance_hint"]
        .as_str()
        .unwrap()
        .trim_start_matches("+-")
        .split('%')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let err = (computed - expected) / expected;
    eprintln!(
        "{id} {path:?}: predicted {computed:.4} expected {expected} ({:+.2}%)",
        100.0 * err
    );
    assert!(
        err.abs() <= percent / 100.0,
        "{id} {path:?}: predicted {computed}, expected {expected} +-{percent}%"
    );
}

/// `lhs[M,K] . rhs[K,N] -> out[M,N]`.
fn matmul(lhs: &str, rhs: &str, out: &str, m: u64, k: u64, n: u64) -> String {
    format!(
        "HloModule mm\n\nENTRY e {{\n  a = {lhs}[{m},{k}] parameter(0)\n  \
         w = {rhs}[{k},{n}] parameter(1)\n  \
         ROOT d = {out}[{m},{n}] dot(a, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n"
    )
}

/// The book's problems ask for the ideal roofline (peak MXU rate, peak HBM
/// bandwidth), which is what tpusim computes for a chip without its
/// `[tensorcore]` table; measured problems use the full model ([`run_model`]).
fn run(text: &str, chip: &str) -> Analysis {
    let m = tpusim_hlo::parse_module(text).unwrap();
    let mut c = by_id(chip).unwrap();
    c.tensorcore = None;
    analyze(&m, &c)
}

/// The chip's full model (TensorCore model where the chip has one).
fn run_model(text: &str, chip: &str) -> Analysis {
    let m = tpusim_hlo::parse_module(text).unwrap();
    analyze(&m, &by_id(chip).unwrap())
}

fn only_op(a: &Analysis) -> &OpStat {
    assert_eq!(a.ops.len(), 1, "{:?}", a.ops);
    &a.ops[0]
}

/// The batch at which a matmul turns compute-bound in the model. MXU and HBM
/// times are both linear in the batch at sublane-aligned batches, so the
/// crossing of the two lines (measured at B = 128 and 1024) is the critical
/// batch; the model's bound label must flip around it.
fn critical_batch(chip: &str, build: impl Fn(u64) -> String) -> f64 {
    let at = |b: u64| {
        let a = run(&build(b), chip);
        let o = only_op(&a).clone();
        (o.mxu_time_s, o.hbm_time_s, o.bound)
    };
    let (b0, b1) = (128.0, 1024.0);
    let ((m0, h0, _), (m1, h1, _)) = (at(128), at(1024));
    // mxu(B) = m0 + (m1-m0)(B-b0)/(b1-b0), likewise hbm; solve mxu = hbm.
    let (dm, dh) = ((m1 - m0) / (b1 - b0), (h1 - h0) / (b1 - b0));
    let crit = b0 + (h0 - m0) / (dm - dh);
    let below = ((crit / 8.0).floor() * 8.0 - 8.0) as u64;
    let above = ((crit / 8.0).ceil() * 8.0 + 8.0) as u64;
    assert_eq!(
        at(below).2,
        Bound::Hbm,
        "{chip}: B={below} should be memory-bound"
    );
    assert_eq!(
        at(above).2,
        Bound::Mxu,
        "{chip}: B={above} should be compute-bound"
    );
    crit
}

const BIG: u64 = 1 << 18;

#[test]
fn critical_batch_bf16_v5e() {
    let crit = critical_batch("v5e", |b| matmul("bf16", "bf16", "bf16", b, BIG, BIG));
    check("roofline-critical-intensity-v5e", &[], crit);
}

#[test]
fn critical_batch_int8_v5e() {
    let crit = critical_batch("v5e", |b| matmul("s8", "s8", "s8", b, BIG, BIG));
    check("roofline-q1-int8-matmul", &["B_threshold"], crit);
}

#[test]
fn critical_batch_int8_weights_16384x4096_v5e() {
    // int8[16384,4096] weights x int8[B,4096] activations.
    let crit = critical_batch("v5e", |b| matmul("s8", "s8", "s8", b, 4096, 16384));
    check("tpus-q4-int8-matmul-v5e", &["B_hbm_threshold"], crit);
}

#[test]
fn critical_batch_bf16_h100() {
    let crit = critical_batch("h100", |b| matmul("bf16", "bf16", "bf16", b, BIG, BIG));
    check("roofline-q5-h100-critical-batch", &[], crit);
}

#[test]
fn teraflop_matmul_v6e_and_h100() {
    // 2·7936³ = 0.9996e12 flops; 7936 = 31·256 pads to nothing on either MXU.
    let text = matmul("bf16", "bf16", "bf16", 7936, 7936, 7936);
    for (chip, key) in [("v6e", "v6e_ms"), ("h100", "h100_ms")] {
        let a = run(&text, chip);
        assert!((a.flops - 1e12).abs() / 1e12 < 1e-3);
        assert_eq!(only_op(&a).bound, Bound::Mxu);
        check("roofline-time-1e12-flops", &[key], a.step_time_s * 1e3);
    }
}

#[test]
fn ffw_up_projection_v2_measured() {
    // One v2 core's shard: bf16[8,1024,8192] x bf16[8192,16384].
    let text = "HloModule ffw\n\nENTRY e {\n  x = bf16[8,1024,8192] parameter(0)\n  \
                w = bf16[8192,16384] parameter(1)\n  \
                ROOT up = bf16[8,1024,16384] dot(x, w), lhs_contracting_dims={2}, \
                rhs_contracting_dims={0}\n}\n";
    let a = run_model(text, "v2");
    assert_eq!(only_op(&a).bound, Bound::Mxu);
    check(
        "profiling-ffw-matmul-v2-8",
        &["MEASURED_ms"],
        a.step_time_s * 1e3,
    );
    check(
        "profiling-ffw-matmul-v2-8",
        &["predicted_ms"],
        a.step_time_s * 1e3,
    );
}

#[test]
fn vector_add_h100_measured() {
    let add = |n: u64| {
        format!(
            "HloModule add\n\nENTRY e {{\n  a = f32[{n}] parameter(0)\n  b = f32[{n}] parameter(1)\n  \
             ROOT c = f32[{n}] add(a, b)\n}}\n"
        )
    };
    let small = run(&add(65536), "h100");
    let id = "gpus-h100-vector-add-measured";
    check(
        id,
        &["N65536_roofline_us"],
        only_op(&small).hbm_time_s * 1e6,
    );
    // The measured 1.5 µs is mostly launch overhead, which the model charges per op.
    check(id, &["N65536_MEASURED_us"], small.step_time_s * 1e6);
    assert_eq!(only_op(&small).bound, Bound::Overhead);
    let big = run(&add(1 << 30), "h100");
    check(id, &["N2^30_roofline_ms"], only_op(&big).hbm_time_s * 1e3);
    check(id, &["N2^30_MEASURED_ms"], big.step_time_s * 1e3);
    assert_eq!(only_op(&big).bound, Bound::Hbm);
}

#[test]
fn critical_batch_int8_weights_bf16_compute_v5e() {
    // bf16 activations x int8 weights, computed in bf16: half the weight bytes,
    // so the critical batch halves.
    let crit = critical_batch("v5e", |b| matmul("bf16", "s8", "bf16", b, BIG, BIG));
    check("roofline-q2-int8-weights-bf16-compute", &[], crit);
}

#[test]
fn critical_intensity_fp8_h100() {
    // The answer is an intensity: with 1-byte weights a batch of B does 2B
    // FLOPs per weight byte, so the critical intensity is twice the batch.
    let crit = critical_batch("h100", |b| {
        matmul("f8e4m3fn", "f8e4m3fn", "bf16", b, BIG, BIG)
    });
    check("gpus-critical-intensity", &["h100_fp8"], 2.0 * crit);
}

#[test]
fn parameter_load_per_v5e_chip() {
    // 18.4e9 int8 parameters over a v5e 4x4: each chip streams its 1.15e9 bytes
    // from HBM once per decode step (a reduction over them is memory-bound).
    let per_chip = 18_400_000_000u64 / 16;
    let text = format!(
        "HloModule load\n\nadd {{\n  a = s8[] parameter(0)\n  b = s8[] parameter(1)\n  ROOT s = s8[] add(a, b)\n}}\n\n\
         ENTRY e {{\n  p = s8[{per_chip}] parameter(0)\n  z = s8[] constant(0)\n  \
         ROOT r = s8[] reduce(p, z), dimensions={{0}}, to_apply=add\n}}\n"
    );
    let a = run(&text, "v5e");
    assert_eq!(only_op(&a).bound, Bound::Hbm);
    check("inference-q3-param-load", &[], a.step_time_s * 1e3);
}

#[test]
fn vpu_rate_of_a_v5p_chip() {
    // A loop fusion doing 200 multiplies per element is VPU-bound; the rate it
    // achieves (overhead aside) is the chip's vector FLOP/s.
    let n = 1u64 << 26;
    let mut body = format!("  x = f32[{n}] parameter(0)\n  m0 = f32[{n}] multiply(x, x)\n");
    for k in 1..200 {
        body += &format!("  m{k} = f32[{n}] multiply(m{}, x)\n", k - 1);
    }
    let text = format!(
        "HloModule vpu\n\nf {{\n{body}}}\n\nENTRY e {{\n  p = f32[{n}] parameter(0)\n  \
         ROOT r = f32[{n}] fusion(p), kind=kLoop, calls=f\n}}\n"
    );
    let a = run(&text, "v5p");
    let op = only_op(&a);
    assert_eq!(op.bound, Bound::Vpu);
    check("tpus-vpu-flops-v5p", &[], op.flops / op.vpu_time_s);
}

#[test]
fn int8_matmul_runtime_at_several_batches_v5e() {
    // The book's runtime T(B) = max((6.7e7 + 2e4 B)/8.2e11, 1.3e8 B/3.94e14) for
    // int8[16384,4096] weights x int8[B,4096]. Below the critical batch it is
    // the weight and activation traffic; above it the book rounds the FLOPs
    // 2·16384·4096 = 1.342e8 down to 1.3e8 (3.2%), so only memory-bound
    // batches are compared with its formula (the crossover has its own test).
    let p = problem("tpus-q4-int8-matmul-v5e");
    assert!(p["expected_answer"]["T"]
        .as_str()
        .unwrap()
        .contains("6.7e7 + 2e4*B"));
    for b in [32u64, 128, 256] {
        let a = run(&matmul("s8", "s8", "s8", b, 4096, 16384), "v5e");
        let book = ((6.7e7 + 2e4 * b as f64) / 8.2e11).max(1.3e8 * b as f64 / 3.94e14);
        let err = (a.step_time_s - book) / book;
        eprintln!(
            "tpus-q4 T(B={b}): predicted {:.2} us, book {:.2} us ({:+.2}%)",
            a.step_time_s * 1e6,
            book * 1e6,
            100.0 * err
        );
        assert!(err.abs() <= 0.03, "B={b}: {err}");
        assert_eq!(only_op(&a).bound, Bound::Hbm);
    }
}
