//! Hints rank by the time at stake, name a fix, and never repeat: checked on the
//! GPT-2 forward passes under bench/ (HBM-bound steps, one matmul per layer alike).

use std::io::Read;
use tpusim_arch::by_id;
use tpusim_perf::analyze;

fn gpt2(name: &str) -> tpusim_perf::Analysis {
    let path = format!(
        "{}/../../bench/kernels/models/{name}.hlo.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let m = tpusim_hlo::parse_module(&text).unwrap();
    analyze(&m, &by_id("v5e").unwrap())
}

#[test]
fn an_hbm_bound_step_gets_a_whole_step_hint_with_fixes() {
    let a = gpt2("gpt2_s1024_b1");
    // Most of the step is HBM-bound (69% with calls inlined and slices and
    // transposes fused).
    let hbm = a.time_by_bound[&tpusim_perf::Bound::Hbm] / a.step_time_s;
    assert!(hbm > 0.5, "{hbm}");
    let hint = a
        .hints
        .iter()
        .find(|h| h.contains("of the step is HBM-bound"))
        .unwrap_or_else(|| panic!("{:?}", a.hints));
    assert!(hint.contains(&format!("{:.1}%", 100.0 * hbm)), "{hint}");
    assert!(hint.contains("a larger batch"), "{hint}");
}

#[test]
fn alike_ops_share_one_hint_and_no_hint_repeats() {
    for name in ["gpt2_s1024_b1", "gpt2_s128_b1", "gpt2_s512_b8"] {
        let a = gpt2(name);
        let mut seen = a.hints.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), a.hints.len(), "{:?}", a.hints);
        // Before grouping, the 12 per-layer matmuls gave 12 hints differing only by name.
        let per_op = a
            .hints
            .iter()
            .filter(|h| h.contains(" memory-bound ("))
            .count();
        assert!(per_op <= 4, "{per_op} per-op hints: {:?}", a.hints);
    }
    let a = gpt2("gpt2_s1024_b1");
    assert!(
        a.hints.iter().any(|h| h.contains("and 11 ops like it")),
        "{:?}",
        a.hints
    );
}

#[test]
fn hints_rank_by_time_at_stake() {
    let a = gpt2("gpt2_s1024_b1");
    // The flash-attention fix (38% of the step) leads; the whole-step HBM hint follows.
    assert!(a.hints[0].contains("flash-attention"), "{:?}", a.hints);
    assert!(a.hints[1].contains("HBM-bound"), "{:?}", a.hints);
}

#[test]
fn the_overhead_hint_states_what_each_overhead_bound_op_takes() {
    // Eight tiny dependent adds: every kernel is its fixed cost.
    let mut text = String::from("HloModule tiny\nENTRY e {\n  a0 = f32[8]{0} parameter(0)\n");
    for i in 1..=8 {
        text += &format!("  a{i} = f32[8]{{0}} add(a{}, a0)\n", i - 1);
    }
    text += "  ROOT r = f32[8]{0} negate(a8)\n}\n";
    let m = tpusim_hlo::parse_module(&text).unwrap();
    let a = analyze(&m, &by_id("v4").unwrap());
    let ops: Vec<_> = a
        .ops
        .iter()
        .filter(|o| o.bound == tpusim_perf::Bound::Overhead)
        .collect();
    let n: u64 = ops.iter().map(|o| o.occurrences).sum();
    let each = ops.iter().map(|o| o.time_s).sum::<f64>() / n as f64;
    let hint = a
        .hints
        .iter()
        .find(|h| h.contains("overhead-bound"))
        .unwrap_or_else(|| panic!("{:?}", a.hints));
    // Not the flat per-op overhead of the roofline (0.50 µs) that the hint
    // used to quote whatever the model charged.
    assert!(
        hint.contains(&format!("at {:.2} µs each", each * 1e6)),
        "{hint} (each {each})"
    );
}
