//! The op model: MXU padding, dtype rates and precision passes, control flow,
//! and every JAX corpus module analyzing cleanly. These pin the roofline
//! (the model of chips without a `[tensorcore]` table), so the chips are
//! used without theirs; tests/tensorcore.rs covers the TensorCore model.

use tpusim_arch::by_id;
use tpusim_perf::{analyze, padded_dim, Analysis, Bound, Category};

fn run(text: &str, chip: &str) -> Analysis {
    let m = tpusim_hlo::parse_module(text).unwrap();
    analyze(&m, &roofline(chip))
}

/// `chip` timed by the plain roofline.
fn roofline(chip: &str) -> tpusim_arch::Chip {
    let mut c = by_id(chip).unwrap();
    c.tensorcore = None;
    c
}

fn dot(ty: &str, m: u64, k: u64, n: u64, extra: &str) -> String {
    format!(
        "HloModule mm\n\nENTRY e {{\n  a = {ty}[{m},{k}] parameter(0)\n  w = {ty}[{k},{n}] parameter(1)\n  \
         ROOT d = {ty}[{m},{n}] dot(a, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{extra}\n}}\n"
    )
}

fn mxu_s(text: &str, chip: &str) -> f64 {
    let a = run(text, chip);
    assert_eq!(a.ops.len(), 1);
    a.ops[0].mxu_time_s
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-30)
}

#[test]
fn padded_dims_follow_the_mxu_edge() {
    assert_eq!(padded_dim(1000, 128), 1024);
    assert_eq!(padded_dim(1000, 256), 1024);
    assert_eq!(padded_dim(1100, 128), 1152);
    assert_eq!(padded_dim(1100, 256), 1280);
    assert_eq!(padded_dim(1024, 256), 1024);
    assert_eq!(padded_dim(7, 0), 7);
}

#[test]
fn mxu_time_charges_padded_contracting_and_output_dims() {
    for (chip, mxu) in [("v5e", 128u64), ("v6e", 256)] {
        let c = by_id(chip).unwrap();
        let peak = c.matmul.bf16_flops_per_s;
        for dim in [1000u64, 1100] {
            let padded = padded_dim(dim, mxu) as f64;
            // Contracting dim.
            let t = mxu_s(&dot("bf16", 512, dim, 2048, ""), chip);
            assert!(
                close(t, 2.0 * 512.0 * padded * 2048.0 / peak),
                "{chip} K={dim}"
            );
            // Output dim.
            let t = mxu_s(&dot("bf16", 512, 2048, dim, ""), chip);
            assert!(
                close(t, 2.0 * 512.0 * 2048.0 * padded / peak),
                "{chip} N={dim}"
            );
        }
    }
    // 1000 -> 1024 on both edges; 1100 -> 1152 (v5e) vs 1280 (v6e).
    let a = run(&dot("bf16", 512, 1000, 2048, ""), "v5e");
    let mm = a.ops[0].matmul.as_ref().unwrap();
    assert_eq!(mm.padded_dims, vec![(1000, 1024)]);
    assert!((mm.padding_waste - 24.0 / 1024.0).abs() < 1e-12);
    assert!(a
        .hints
        .iter()
        .any(|h| h.contains("dim 1000 pads to 1024: 2.3% of MXU work wasted")));
}

#[test]
fn rows_pad_to_sublanes_and_gpus_do_not_pad() {
    let c = by_id("v5e").unwrap();
    let t = mxu_s(&dot("bf16", 5, 1024, 1024, ""), "v5e");
    assert!(close(
        t,
        2.0 * 8.0 * 1024.0 * 1024.0 / c.matmul.bf16_flops_per_s
    ));
    let h = by_id("h100").unwrap();
    let t = mxu_s(&dot("bf16", 5, 1000, 1000, ""), "h100");
    assert!(close(
        t,
        2.0 * 5.0 * 1000.0 * 1000.0 / h.matmul.bf16_flops_per_s
    ));
}

#[test]
fn dtype_rates_and_f32_precision_passes() {
    let c = by_id("v5e").unwrap();
    let flops = 2.0 * 1024f64.powi(3);
    let bf16 = flops / c.matmul.bf16_flops_per_s;
    assert!(close(
        mxu_s(&dot("bf16", 1024, 1024, 1024, ""), "v5e"),
        bf16
    ));
    let int8 = mxu_s(&dot("s8", 1024, 1024, 1024, ""), "v5e");
    assert!(close(int8, flops / c.matmul.int8_ops_per_s.unwrap()));
    // v5e has no fp8 rate: bf16's. v6e has one.
    assert!(close(
        mxu_s(&dot("f8e4m3fn", 1024, 1024, 1024, ""), "v5e"),
        bf16
    ));
    let v6e = by_id("v6e").unwrap();
    assert!(close(
        mxu_s(&dot("f8e4m3fn", 1024, 1024, 1024, ""), "v6e"),
        flops / v6e.matmul.fp8_flops_per_s.unwrap()
    ));
    // f32: DEFAULT = 1 bf16 pass, HIGH = 3, HIGHEST = 6.
    for (extra, passes) in [
        ("", 1.0),
        (", operand_precision={default,default}", 1.0),
        (", operand_precision={high,high}", 3.0),
        (", operand_precision={highest,highest}", 6.0),
        (", operand_precision={highest,default}", 6.0),
    ] {
        let t = mxu_s(&dot("f32", 1024, 1024, 1024, extra), "v5e");
        assert!(close(t, passes * bf16), "{extra}: {t} vs {}", passes * bf16);
    }
}

#[test]
fn op_time_is_the_max_resource_plus_overhead() {
    let c = by_id("v5e").unwrap();
    let a = run(&dot("bf16", 4096, 4096, 4096, ""), "v5e");
    let o = &a.ops[0];
    assert_eq!(o.bound, Bound::Mxu);
    assert_eq!(o.category, Category::Matmul);
    let busiest = o.mxu_time_s.max(o.vpu_time_s).max(o.hbm_time_s);
    assert!(close(o.time_s, busiest + c.op_overhead_s));
    assert!(o.time_s >= o.flops / c.matmul.bf16_flops_per_s);
    assert!(o.time_s >= o.bytes_accessed / c.memory.hbm_bandwidth_bytes_per_s);
    assert!(a.mfu > 0.9 && a.mfu <= 1.0, "{}", a.mfu);
}

#[test]
fn while_loops_multiply_by_trip_count_and_unknown_counts_are_stated() {
    let body = |bound: &str| {
        format!(
            r#"HloModule loop

body {{
  p = (s32[], f32[1024,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  x = f32[1024,1024] get-tuple-element(p), index=1
  e = f32[1024,1024] exponential(x)
  ROOT t = (s32[], f32[1024,1024]) tuple(n, e)
}}

cond {{
  p = (s32[], f32[1024,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] {bound}
  ROOT lt = pred[] compare(i, b), direction=LT
}}

ENTRY e {{
  x = f32[1024,1024] parameter(0)
  lim = s32[] parameter(1)
  zero = s32[] constant(0)
  t = (s32[], f32[1024,1024]) tuple(zero, x)
  ROOT w = (s32[], f32[1024,1024]) while(t), condition=cond, body=body
}}
"#
        )
    };
    let known = run(&body("constant(10)"), "v5e");
    assert!(
        known.assumptions.iter().all(|s| !s.contains("while")),
        "{:?}",
        known.assumptions
    );
    let exp = known.ops.iter().find(|o| o.transcendentals > 0.0).unwrap();
    assert_eq!(exp.occurrences, 10);
    assert_eq!(exp.transcendentals, 10.0 * 1024.0 * 1024.0);
    assert!(known.transcendentals >= 10.0 * known.xla_cost.transcendentals - 1.0);

    // The bound is a parameter of the body's caller: unknown, assumed 1.
    let unknown = run(&body("get-tuple-element(p), index=0"), "v5e");
    let exp = unknown
        .ops
        .iter()
        .find(|o| o.transcendentals > 0.0)
        .unwrap();
    assert_eq!(exp.occurrences, 1);
    assert!(
        unknown
            .assumptions
            .iter()
            .any(|s| s.contains("while loop w") && s.contains("assumed 1")),
        "{:?}",
        unknown.assumptions
    );
}

#[test]
fn conditional_takes_longest_branch_unless_constant() {
    let text = |pred: &str| {
        format!(
            r#"HloModule c

small {{
  p = f32[1024,1024] parameter(0)
  ROOT n = f32[1024,1024] negate(p)
}}

big {{
  p = f32[1024,1024] parameter(0)
  d = f32[1024,1024] dot(p, p), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT l = f32[1024,1024] exponential(d)
}}

ENTRY e {{
  pr = pred[] {pred}
  a = f32[1024,1024] parameter(0)
  ROOT r = f32[1024,1024] conditional(pr, a, a), true_computation=small, false_computation=big
}}
"#
        )
    };
    let data = run(&text("parameter(1)"), "v5e");
    assert!(
        data.ops
            .iter()
            .any(|o| o.name == "l" || o.opcode == "fusion"),
        "{:?}",
        data.ops
    );
    assert!(data.transcendentals > 0.0);
    assert!(data
        .assumptions
        .iter()
        .any(|s| s.contains("longest branch")));
    let taken = run(&text("constant(true)"), "v5e");
    assert_eq!(taken.transcendentals, 0.0);
    assert!(taken.step_time_s < data.step_time_s);
    assert!(taken
        .assumptions
        .iter()
        .all(|s| !s.contains("longest branch")));
}

#[test]
fn every_jax_corpus_module_analyzes_on_v5e() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/corpus/jax_generated"
    );
    let chip = by_id("v5e").unwrap();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hlo"))
        .collect();
    files.sort();
    assert!(files.len() >= 40, "{} corpus files", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for m in tpusim_hlo::parse_modules(&text).unwrap() {
            let a = analyze(&m, &chip);
            let name = path.display();
            assert!(a.step_time_s > 0.0, "{name}: step time {}", a.step_time_s);
            assert!(a.step_time_s.is_finite() && a.mfu.is_finite(), "{name}");
            assert!(a.mfu >= 0.0 && a.mfu <= 1.0, "{name}: mfu {}", a.mfu);
            let loops = m
                .instrs
                .iter()
                .any(|i| i.opcode == tpusim_hlo::Opcode::While);
            if !loops {
                assert!(
                    a.flops >= a.xla_cost.flops * (1.0 - 1e-6),
                    "{name}: flops {} < xla {}",
                    a.flops,
                    a.xla_cost.flops
                );
            }
            for o in &a.ops {
                assert!(o.time_s >= 0.0 && o.occurrences > 0, "{name}: {o:?}");
            }
            serde_json::to_string(&a).unwrap();
        }
    }
}
