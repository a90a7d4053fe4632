//! Hints rank by the time at stake, name a fix, and never repeat: checked on the
//! GPT-2 forward passes under bench/ (HBM-bound steps, one matmul per layer alike).

use std::io::Read;
use tpusim_arch::by_id;
use tpusim_perf::analyze;

fn gpt2(name: &str) -> tpusim_perf::Analysis {
    analyze_gz(&format!(
        "{}/../../bench/kernels/models/{name}.hlo.gz",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn analyze_gz(path: &str) -> tpusim_perf::Analysis {
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

/// A KV-cache decode step that copies its (not donated) caches: the copies
/// get a hint with their share of the step and the in-place fix.
#[test]
fn a_decode_step_copying_its_cache_gets_the_copy_hint() {
    let a = analyze_gz(&format!(
        "{}/../../testdata/hints/gpt2_decode.lowered.hlo.gz",
        env!("CARGO_MANIFEST_DIR")
    ));
    let moving = a.time_by_category[&tpusim_perf::Category::DataMovement] / a.step_time_s;
    assert!(moving > 0.2, "{moving}");
    let hint = a
        .hints
        .iter()
        .find(|h| h.starts_with("copies and slices take"))
        .unwrap_or_else(|| panic!("{:?}", a.hints));
    assert!(
        hint.contains(&format!("{:.1}% of the step", 100.0 * moving)),
        "{hint}"
    );
    assert!(hint.contains("dynamic_update_slice"), "{hint}");
    assert!(hint.contains("in place"), "{hint}");
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

/// Every collective takes `time_s` on the torus axes `axes`, 8 chips a group.
struct FixedComm {
    time_s: f64,
    axes: &'static [&'static str],
}

impl tpusim_perf::CommModel for FixedComm {
    fn cost(
        &self,
        m: &tpusim_hlo::Module,
        id: tpusim_hlo::InstrId,
    ) -> Option<tpusim_perf::CommCost> {
        use tpusim_hlo::Opcode::*;
        let kind = match m.instr(id).opcode {
            AllReduce | AllReduceStart => "all-reduce",
            AllGather | AllGatherStart => "all-gather",
            _ => return None,
        };
        Some(tpusim_perf::CommCost {
            time_s: self.time_s,
            bytes: 4.0 * 1024.0 * 1024.0,
            group_size: 8,
            axes: self.axes.iter().map(|a| a.to_string()).collect(),
            kind: kind.to_string(),
            hints: Vec::new(),
            blocking: false,
        })
    }

    fn devices(&self, _m: &tpusim_hlo::Module) -> u32 {
        8
    }
}

/// A matmul next to an all-reduce of its own size, async (`-start`/`-done`
/// around the matmul) or not.
fn all_reduce_beside_a_matmul(is_async: bool) -> tpusim_hlo::Module {
    let collective = if is_async {
        "  ars = f32[1024,1024] all-reduce-start(g), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=add\n  d = f32[1024,1024] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  ar = f32[1024,1024] all-reduce-done(ars)\n"
    } else {
        "  ar = f32[1024,1024] all-reduce(g), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=add\n  d = f32[1024,1024] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    };
    let text = format!(
        "HloModule tp, num_partitions=8\n\nadd {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}}\n\nENTRY e {{\n  g = f32[1024,1024] parameter(0)\n  x = f32[1024,1024] parameter(1)\n{collective}  ROOT r = (f32[1024,1024], f32[1024,1024]) tuple(ar, d)\n}}\n"
    );
    tpusim_hlo::parse_module(&text).unwrap()
}

fn comm_hint(a: &tpusim_perf::Analysis) -> &str {
    a.hints
        .iter()
        .find(|h| h.contains("all-reduces over torus axes"))
        .unwrap_or_else(|| panic!("{:?}", a.hints))
}

#[test]
fn exposed_collectives_get_a_hint_naming_their_axes_and_fix() {
    let chip = by_id("v5e").unwrap();
    // 1 ms on the torus: far longer than the matmul, so most of it is exposed.
    let tp = FixedComm {
        time_s: 1e-3,
        axes: &["x"],
    };
    let a = tpusim_perf::analyze_with(&all_reduce_beside_a_matmul(true), &chip, &tp);
    // The exposed collective is most of the step: its hint leads.
    assert!(
        a.hints[0].starts_with("all-reduces over torus axes x (groups of 8) expose"),
        "{:?}",
        a.hints
    );
    let share = 100.0 * a.communication.exposed_communication_s / a.step_time_s;
    assert!(a.hints[0].contains(&format!("expose {share:.1}% of the step (ars)")));
    assert!(a.hints[0].contains("tensor parallelism"), "{}", a.hints[0]);

    // Synchronous: nothing can hide it, whatever the kind.
    let a = tpusim_perf::analyze_with(&all_reduce_beside_a_matmul(false), &chip, &tp);
    assert!(comm_hint(&a).contains("synchronously"), "{}", comm_hint(&a));

    // Across slices: keep it inside one.
    let dcn = FixedComm {
        time_s: 1e-3,
        axes: &["x", "dcn"],
    };
    let a = tpusim_perf::analyze_with(&all_reduce_beside_a_matmul(true), &chip, &dcn);
    assert!(comm_hint(&a).contains("over DCN"), "{}", comm_hint(&a));
}

#[test]
fn hidden_communication_is_a_statement_not_a_fix() {
    // 1 µs on the torus: the matmul hides all of it.
    let fast = FixedComm {
        time_s: 1e-6,
        axes: &["x"],
    };
    let a = tpusim_perf::analyze_with(
        &all_reduce_beside_a_matmul(true),
        &by_id("v5e").unwrap(),
        &fast,
    );
    assert_eq!(a.communication.exposed_communication_s, 0.0);
    assert!(
        a.hints
            .iter()
            .any(|h| h.starts_with("communication takes") && h.contains("(0.0% exposed")),
        "{:?}",
        a.hints
    );
    assert!(!a.hints.iter().any(|h| h.contains("over torus axes")));
}
