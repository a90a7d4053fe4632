//! Spot checks of the builtin figures against the scaling book's worked
//! problems (testdata/worked_problems.json, a copy of
//! shared/reference/worked_problems.json). Each answer is recomputed from the
//! chip database alone and compared with the book's answer at the problem's
//! stated tolerance, so a wrong figure in a chip file fails here.

use serde_json::Value;
use tpusim_arch::{by_id, Chip, MatmulDtype};

fn problems() -> Vec<Value> {
    let text = include_str!("../testdata/worked_problems.json");
    serde_json::from_str(text).expect("worked_problems.json parses")
}

fn chip(id: &str) -> Chip {
    by_id(id).unwrap()
}

/// Checks `computed` against the expected answer of problem `id` at `path`
/// inside `expected_answer`, within the problem's `tolerance_hint` ("+-N%").
fn check(id: &str, path: &[&str], computed: f64) {
    let problems = problems();
    let problem = problems
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no worked problem `{id}`"));
    let mut expected = &problem["expected_answer"];
    for key in path {
        expected = &expected[*key];
    }
    let expected = expected
        .as_f64()
        .unwrap_or_else(|| panic!("{id} {path:?}: not a number"));
    let hint = problem["tolerance_hint"].as_str().unwrap();
    let percent: f64 = hint
        .trim_start_matches("+-")
        .split('%')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{id}: tolerance `{hint}`"));
    let error = (computed / expected - 1.0).abs();
    assert!(
        error <= percent / 100.0,
        "{id} {path:?}: database gives {computed}, the book {expected} (off by {:.2} %, allowed {percent} %)",
        error * 100.0
    );
}

#[test]
fn rooflines() {
    let bf16 = MatmulDtype::Bf16;
    // R1: v5e critical intensity 1.97e14 / 8.2e11 = 240 FLOP/byte.
    check(
        "roofline-critical-intensity-v5e",
        &[],
        chip("v5e").ridge_point_flops_per_byte(bf16),
    );
    // R4: v5e int8 hardware intensity 3.94e14 / 8.2e11 = 480.
    check(
        "roofline-q1-int8-matmul",
        &["int8_hw_intensity"],
        chip("v5e").ridge_point_flops_per_byte(MatmulDtype::Int8),
    );
    // R8 and the GPU chapter: H100 bf16 295, fp8 590.
    let h100 = chip("h100");
    check(
        "roofline-q5-h100-critical-batch",
        &[],
        h100.ridge_point_flops_per_byte(bf16),
    );
    check(
        "gpus-critical-intensity",
        &["h100_bf16"],
        h100.ridge_point_flops_per_byte(bf16),
    );
    check(
        "gpus-critical-intensity",
        &["h100_fp8"],
        h100.ridge_point_flops_per_byte(MatmulDtype::Fp8),
    );
    // R2: 1e12 FLOPs at peak.
    let ms = |c: &Chip| 1e12 / c.peak_flops(bf16) * 1e3;
    check("roofline-time-1e12-flops", &["h100_ms"], ms(&h100));
    check("roofline-time-1e12-flops", &["v6e_ms"], ms(&chip("v6e")));
}

#[test]
fn tpu_chapter() {
    // T1: 200B bf16 parameters over 32 v4 chips: 12.5e9 B per chip / HBM BW ≈ 10 ms.
    let v4 = chip("v4");
    check(
        "tpus-q1-200B-load-32-v4p",
        &[],
        200e9 * 2.0 / 32.0 / v4.memory.hbm_bandwidth_bytes_per_s * 1e3,
    );
    // T2: pod totals (256 v5e chips; 8960 v5p chips).
    let v5e = chip("v5e");
    let v5p = chip("v5p");
    let pod = |c: &Chip, chips: f64| {
        let devices = chips * f64::from(c.devices_per_chip);
        (
            devices * c.peak_flops(MatmulDtype::Bf16),
            devices * c.memory.hbm_bytes as f64 / 1e12,
            devices * f64::from(c.tensorcores_per_device().unwrap()),
        )
    };
    let (flops, hbm_tb, cores) = pod(&v5e, 256.0);
    check("tpus-q2-pod-totals", &["v5e", "flops"], flops);
    check("tpus-q2-pod-totals", &["v5e", "hbm_TB"], hbm_tb);
    check("tpus-q2-pod-totals", &["v5e", "tensorcores"], cores);
    let (flops, hbm_tb, cores) = pod(&v5p, 8960.0);
    check("tpus-q2-pod-totals", &["v5p", "flops"], flops);
    check("tpus-q2-pod-totals", &["v5p", "hbm_TB"], hbm_tb);
    check("tpus-q2-pod-totals", &["v5p", "tensorcores"], cores);
    // T5: bf16[8,128,8192] from (0,0) to (3,3) of a v5e 4x4 (no wraparound):
    // 6 hops, two outgoing links in use.
    let ici = &v5e.ici;
    assert!(!ici.topology.axis_wraps(&[4, 4], 0));
    let bytes = 2.0 * 8.0 * 128.0 * 8192.0;
    let bandwidth_us = bytes / (2.0 * ici.link_bandwidth_bytes_per_s_per_direction) * 1e6;
    let first_byte_us = 6.0 * ici.hop_latency_s * 1e6;
    check(
        "tpus-q5-ici-transfer-v5e-4x4",
        &["first_byte_us"],
        first_byte_us,
    );
    check(
        "tpus-q5-ici-transfer-v5e-4x4",
        &["bandwidth_time_us"],
        bandwidth_us,
    );
    check(
        "tpus-q5-ici-transfer-v5e-4x4",
        &["total_us"],
        first_byte_us + bandwidth_us,
    );
    // T7: v5p VPU rate, from the stored rate and from the VPU shape.
    check("tpus-vpu-flops-v5p", &[], v5p.vector.f32_flops_per_s);
    let t = v5p.tpu.as_ref().unwrap();
    let from_shape =
        f64::from(t.tensorcores_per_device * t.vpu_sublanes * t.vpu_lanes * t.vpu_alus_per_lane)
            * v5p.clock_hz;
    check("tpus-vpu-flops-v5p", &[], from_shape);
}

#[test]
fn sharding_and_training() {
    // S5: buffers below one hop's worth of bandwidth-time are latency-bound.
    let v5e = chip("v5e");
    check(
        "sharding-latency-bound-threshold",
        &[],
        v5e.ici.link_bandwidth_bytes_per_s_per_direction * v5e.ici.hop_latency_s,
    );
    // S7: AllGather_X of bf16[B_X, D_Y] on a v4 4x4x4 (wraparound, bidirectional ring).
    let v4 = chip("v4");
    assert!(v4.ici.topology.axis_wraps(&[4, 4, 4], 0));
    let bidi = 2.0 * v4.ici.link_bandwidth_bytes_per_s_per_direction;
    let gathered = 2.0 * 1024.0 * 4096.0 / 4.0;
    check(
        "sharding-q2-allgather-v4p",
        &["AG_X_us"],
        gathered / bidi * 1e6,
    );
    // Training: DP compute-bound per-chip batch C / W_ici (one axis, bidi), and over DCN.
    let v5p = chip("v5p");
    let c = v5p.peak_flops(MatmulDtype::Bf16);
    let w_ici = 2.0 * v5p.ici.link_bandwidth_bytes_per_s_per_direction;
    check(
        "training-dp-critical-batch-v5p",
        &["per_chip_1_axis"],
        c / w_ici,
    );
    check(
        "training-dp-critical-batch-v5p",
        &["per_chip_3_axes"],
        c / (3.0 * w_ici),
    );
    check(
        "training-dcn-critical-batch",
        &[],
        c / v5p.host.dcn_bytes_per_s_per_direction,
    );
}

#[test]
fn inference_and_profiling() {
    // Inference Q3: 18.4e9 int8 parameters read over 16 v5e chips: 1.4 ms.
    let v5e = chip("v5e");
    check(
        "inference-q3-param-load",
        &[],
        18.4e9 / (16.0 * v5e.memory.hbm_bandwidth_bytes_per_s) * 1e3,
    );
    // Profiling (MEASURED 96 ms): local bf16[8,1024,8192] x [8192,16384] on each of 8 v2 cores.
    let v2 = chip("v2");
    let flops = 2.0 * 32.0 * 1024.0 * 8192.0 * 32768.0;
    let ms = flops / (8.0 * v2.peak_flops(MatmulDtype::Bf16)) * 1e3;
    check("profiling-ffw-matmul-v2-8", &["predicted_ms"], ms);
    check("profiling-ffw-matmul-v2-8", &["MEASURED_ms"], ms);
    // Profiling (MEASURED 1.13 ms): 128 MiB ReduceScatter over one v2 link, both directions.
    let bidi = 2.0 * v2.ici.link_bandwidth_bytes_per_s_per_direction;
    let ms = 134_217_728.0 / bidi * 1e3;
    check("profiling-reduce-scatter-v2-8", &["predicted_ms"], ms);
    check("profiling-reduce-scatter-v2-8", &["MEASURED_ms"], ms);
}

/// The figures chosen where HARDWARE_REFERENCE.md §5 lists disagreements,
/// asserted exactly: the tolerances above cannot tell 8.1e11 from 8.2e11.
#[test]
fn chosen_figures_match_the_reference_document() {
    let v5e = chip("v5e");
    assert_eq!(v5e.peak_flops(MatmulDtype::Bf16), 1.97e14); // §2.1-§2.3
    assert_eq!(v5e.memory.hbm_bandwidth_bytes_per_s, 8.2e11); // §5.1: newest book, JAX
    let ridge = v5e.ridge_point_flops_per_byte(MatmulDtype::Bf16);
    assert!((ridge - 240.0).abs() < 0.5, "{ridge}"); // §1.1 R1: 240
    assert_eq!(v5e.ici.link_bandwidth_bytes_per_s_per_direction, 4.5e10); // §5.3: book
    let v5p = chip("v5p");
    assert_eq!(v5p.memory.hbm_bytes, 96_000_000_000); // §5.2: book, smallest
    assert_eq!(v5p.memory.hbm_bandwidth_bytes_per_s, 2.765e12); // §5.2: Cloud
    assert_eq!(v5p.ici.link_bandwidth_bytes_per_s_per_direction, 9.0e10); // §5.3: book
    assert_eq!(v5p.clock_hz, 1.75e9); // §2.3
    assert_eq!(chip("v6e").tpu.unwrap().mxus_per_tensorcore, 4); // §5.6
    assert_eq!(chip("v6e").host.pcie_bytes_per_s_per_direction, 3.2e10); // §2.3: v6e 3.2e10
    assert_eq!(chip("v2").max_slice_chips(), 256); // §5.5: 256 chips, not 512
    assert_eq!(chip("h100").memory.hbm_bandwidth_bytes_per_s, 3.35e12); // §4.1 text, R8
    assert_eq!(chip("h100").peak_flops(MatmulDtype::Bf16), 9.89e14); // §4.1, R2, R8
}
