//! The TensorCore model (chips with a `[tensorcore]` table): MXU tile
//! schedule, DMA pipeline, launch costs, custom calls and `explain_op`.

use tpusim_arch::by_id;
use tpusim_perf::tensorcore::{explain_op, schedule_matmul};
use tpusim_perf::{analyze, op_time_in, TimingContext};

fn module(text: &str) -> tpusim_hlo::Module {
    tpusim_hlo::parse_module(text).unwrap()
}

fn dot(m: u64, k: u64, n: u64) -> String {
    format!(
        "HloModule mm\n\nENTRY e {{\n  a = bf16[{m},{k}] parameter(0)\n  w = bf16[{k},{n}] parameter(1)\n  \
         ROOT d = bf16[{m},{n}] dot(a, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n"
    )
}

fn root_time(text: &str, chip: &str, ctx: TimingContext) -> tpusim_perf::OpTime {
    let m = module(text);
    let root = m.comp(m.entry).root;
    op_time_in(&m, &by_id(chip).unwrap(), root, ctx)
}

#[test]
fn a_large_gemm_runs_near_but_below_mxu_peak() {
    let chip = by_id("v4").unwrap();
    let t = root_time(&dot(4096, 4096, 4096), "v4", TimingContext::default());
    let ideal = 2.0 * 4096f64.powi(3) / chip.matmul.bf16_flops_per_s;
    let efficiency = ideal / t.time_s;
    // Result pops cost mxu_pass_overhead_cycles per 128 streamed rows.
    let tc = chip.tensorcore.clone().unwrap();
    let expected = 128.0 / (128.0 + tc.mxu_pass_overhead_cycles);
    assert!(
        (efficiency - expected).abs() < 0.01,
        "{efficiency} vs {expected}"
    );
}

#[test]
fn a_tiny_gemm_costs_the_launch_floor() {
    let chip = by_id("v4").unwrap();
    let tc = chip.tensorcore.clone().unwrap();
    let t = root_time(&dot(8, 8, 8), "v4", TimingContext::default());
    assert!(t.time_s >= tc.kernel_launch_s);
    assert!(t.time_s < tc.kernel_launch_s + 1e-6, "{}", t.time_s);
    let inside = root_time(
        &dot(8, 8, 8),
        "v4",
        TimingContext {
            in_program: true,
            warm_operands: false,
        },
    );
    // Inside a program the floor is the in-program kernel cost (a kernel's
    // span plus the gap to the next), not the lone kernel's span.
    assert!(inside.time_s >= tc.in_program_kernel_s);
    assert!(
        inside.time_s < tc.in_program_kernel_s + 1e-6,
        "{}",
        inside.time_s
    );
}

#[test]
fn tiles_pad_to_the_mxu_and_the_cheaper_role_assignment_wins() {
    let chip = by_id("v4").unwrap();
    let tc = chip.tensorcore.clone().unwrap();
    let m = module(&dot(1000, 300, 256));
    let root = m.comp(m.entry).root;
    let mm = op_time_in(&m, &chip, root, TimingContext::default())
        .matmul
        .unwrap();
    let s = schedule_matmul(&chip, &tc, &mm);
    // K = 300 -> 3 tiles of 128; N = 256 -> 2: 6 weight tiles of 1000 rows
    // (a multiple of 8), over 8 MXUs.
    assert_eq!((s.tiles, s.rows, s.mxus, s.swapped), (6, 1000, 8, false));
    // N = 200 would pad to 256 (28% waste): streaming N instead wastes less.
    let m = module(&dot(1000, 300, 200));
    let root = m.comp(m.entry).root;
    let mm = op_time_in(&m, &chip, root, TimingContext::default())
        .matmul
        .unwrap();
    let s = schedule_matmul(&chip, &tc, &mm);
    assert_eq!((s.tiles, s.rows, s.swapped), (3 * 8, 200, true));
    // A skinny product streams the long side: 8 rows x (K/128 * M/128) tiles.
    let m = module(&dot(5000, 256, 8));
    let root = m.comp(m.entry).root;
    let mm = op_time_in(&m, &chip, root, TimingContext::default())
        .matmul
        .unwrap();
    let s = schedule_matmul(&chip, &tc, &mm);
    assert!(s.swapped);
    assert_eq!((s.rows, s.tiles), (8, 2 * 40));
}

#[test]
fn transposes_move_bytes() {
    let text = "HloModule t\n\nENTRY e {\n  a = bf16[1024,4096] parameter(0)\n  \
                ROOT t = bf16[4096,1024] transpose(a), dimensions={1,0}\n}\n";
    let t = root_time(text, "v4", TimingContext::default());
    assert_eq!(t.bytes_accessed, 2.0 * 1024.0 * 4096.0 * 2.0);
    assert!(t.hbm_s > 0.0);
}

#[test]
fn small_minor_dims_pay_layout_padding() {
    // f32[4096,2]: the 2-wide minor dim moves as 8 sublanes x 128 lanes
    // tiles whichever way the layout is chosen.
    let text = "HloModule p\n\nENTRY e {\n  a = f32[4096,2] parameter(0)\n  \
                ROOT n = f32[4096,2] negate(a)\n}\n";
    let t = root_time(text, "v4", TimingContext::default());
    assert!(t.bytes_accessed > 4.0 * 4096.0 * 2.0 * 4.0);
}

const CUSTOM: &str = r#"HloModule k

ENTRY e {
  q = bf16[8,1024,128] parameter(0)
  ROOT o = bf16[8,1024,128] custom-call(q), custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {"body": "xyz", "cost_estimate": {"flops": 2147483648, "transcendentals": 8388608, "bytes_accessed": 4194304}}}
}
"#;

#[test]
fn tpu_custom_calls_are_priced_from_their_cost_estimate() {
    let chip = by_id("v4").unwrap();
    let t = root_time(CUSTOM, "v4", TimingContext::default());
    assert_eq!(t.flops, 2147483648.0);
    // Full MXU passes, each paying its overhead: above the peak's time, by
    // about the pass overhead (16 of 128 + 16 cycles on v4) and one fill.
    let peak = 2147483648.0 / chip.matmul.bf16_flops_per_s;
    assert!(
        t.mxu_s > 1.05 * peak && t.mxu_s < 1.25 * peak,
        "{} vs {peak}",
        t.mxu_s
    );
    let a = analyze(&module(CUSTOM), &chip);
    assert!(
        a.assumptions
            .iter()
            .any(|s| s.contains("custom call o") && s.contains("cost_estimate")),
        "{:?}",
        a.assumptions
    );
}

#[test]
fn alike_custom_calls_share_one_assumption() {
    // One kernel per layer: the report names the group once, not per layer.
    let text = r#"HloModule m

ENTRY e {
  q = bf16[8,128] parameter(0)
  a = bf16[8,128] custom-call(q), custom_call_target="my_attention"
  b = bf16[8,128] custom-call(a), custom_call_target="my_attention"
  ROOT c = bf16[8,128] custom-call(b), custom_call_target="my_attention"
}
"#;
    let a = analyze(&module(text), &by_id("v4").unwrap());
    let about: Vec<&String> = a
        .assumptions
        .iter()
        .filter(|s| s.contains("my_attention"))
        .collect();
    assert_eq!(about.len(), 1, "{about:?}");
    assert!(
        about[0].starts_with("3 custom calls (a, b, c): my_attention: no cost_estimate"),
        "{}",
        about[0]
    );
}

#[test]
fn a_custom_call_without_an_estimate_is_an_assumption_not_a_silent_zero() {
    let text = CUSTOM.replace(
        r#", "cost_estimate": {"flops": 2147483648, "transcendentals": 8388608, "bytes_accessed": 4194304}"#,
        "",
    );
    let a = analyze(&module(&text), &by_id("v4").unwrap());
    assert!(a.step_time_s > 0.0);
    assert!(
        a.assumptions
            .iter()
            .any(|s| s.contains("custom call o") && s.contains("no cost_estimate")),
        "{:?}",
        a.assumptions
    );
}

/// The backward kernels of JAX's Pallas flash attention: q, k, v, the
/// forward's statistics, do and di in; dq, or (dk, dv), out; no estimate.
const FLASH_BACKWARD: &str = r#"HloModule fb

ENTRY e {
  q = bf16[2,8,512,128] parameter(0)
  k = bf16[2,4,1024,128] parameter(1)
  v = bf16[2,4,1024,128] parameter(2)
  l = f32[2,8,512,128] parameter(3)
  m = f32[2,8,512,128] parameter(4)
  do = bf16[2,8,512,128] parameter(5)
  di = f32[2,8,512,128] parameter(6)
  dq = bf16[2,8,512,128] custom-call(q, k, v, l, m, do, di), custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {"body": "xyz"}}
  dkv = (bf16[2,4,1024,128], bf16[2,4,1024,128]) custom-call(q, k, v, l, m, do, di), custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {"body": "xyz"}}
  dk = bf16[2,4,1024,128] get-tuple-element(dkv), index=0
  ROOT t = (bf16[2,8,512,128], bf16[2,4,1024,128]) tuple(dq, dk)
}
"#;

#[test]
fn flash_attention_backward_kernels_are_recognized_from_their_shapes() {
    let m = module(FLASH_BACKWARD);
    let by_name = |n: &str| {
        let id = tpusim_hlo::InstrId(m.instrs.iter().position(|i| i.name == n).unwrap() as u32);
        tpusim_perf::pallas::flash_attention_backward(&m, id)
    };
    // Scores: batch 2 x 8 query heads x 512 queries x 1024 keys.
    let scores = 2.0 * 8.0 * 512.0 * 1024.0;
    let dq = by_name("dq").expect("dq kernel");
    assert_eq!(dq.kernel, "flash attention backward (dq)");
    assert_eq!(dq.flops(), 2.0 * 3.0 * scores * 128.0);
    assert_eq!(dq.transcendentals, scores);
    let dkv = by_name("dkv").expect("dkv kernel");
    assert_eq!(dkv.kernel, "flash attention backward (dkv)");
    assert_eq!(dkv.flops(), 2.0 * 4.0 * scores * 128.0);
    let chip = by_id("v4").unwrap();
    let a = analyze(&m, &chip);
    let said = a.assumptions.join("\n");
    assert!(
        said.contains("recognized from its shapes as flash attention backward (dq)"),
        "{said}"
    );
    assert!(
        said.contains("recognized from its shapes as flash attention backward (dkv)"),
        "{said}"
    );
    // Priced as MXU work, not as traffic only.
    let dkv_id = tpusim_hlo::InstrId(m.instrs.iter().position(|i| i.name == "dkv").unwrap() as u32);
    let t = op_time_in(&m, &chip, dkv_id, TimingContext::default());
    assert!(
        t.mxu_s >= dkv.flops() / chip.matmul.bf16_flops_per_s,
        "{t:?}"
    );
    assert_eq!(t.flops, dkv.flops(), "counted in the step's flops");
}

#[test]
fn a_custom_call_shaped_otherwise_is_not_taken_for_attention() {
    // Same operands, but a result that is neither dq nor (dk, dv).
    let text = FLASH_BACKWARD
        .replace(
            "dq = bf16[2,8,512,128] custom-call",
            "dq = bf16[2,8,512,64] custom-call",
        )
        .replace(
            "(bf16[2,8,512,128], bf16[2,4,1024,128]) tuple",
            "(bf16[2,8,512,64], bf16[2,4,1024,128]) tuple",
        );
    let m = module(&text);
    let id = tpusim_hlo::InstrId(m.instrs.iter().position(|i| i.name == "dq").unwrap() as u32);
    assert_eq!(tpusim_perf::pallas::flash_attention_backward(&m, id), None);
    let a = analyze(&m, &by_id("v4").unwrap());
    assert!(
        a.assumptions
            .iter()
            .any(|s| s.contains("custom call dq") && s.contains("compute unknown")),
        "{:?}",
        a.assumptions
    );
}

#[test]
fn explain_names_tiles_cycles_dma_and_the_bound() {
    let m = module(&dot(4096, 4096, 4096));
    let lines = explain_op(&m, &by_id("v4").unwrap(), "d")
        .unwrap()
        .join("\n");
    for want in ["1024 weight tiles", "fill/drain 256", "DMA:", "MXU-bound"] {
        assert!(lines.contains(want), "missing {want:?} in\n{lines}");
    }
    assert!(explain_op(&m, &by_id("v4").unwrap(), "nope").is_none());
}

fn gz_module(path: &str) -> tpusim_hlo::Module {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap();
    module(&text)
}

#[test]
fn unfused_attention_gets_a_flash_hint_and_an_mlp_does_not() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/kernels/models/gpt2_s128_b1.hlo.gz"
    );
    let a = analyze(&gz_module(path), &by_id("v4").unwrap());
    let hint = a
        .hints
        .iter()
        .find(|h| h.contains("unfused attention"))
        .unwrap_or_else(|| panic!("no attention hint in {:?}", a.hints));
    // GPT-2: 12 layers, scores [1, 12 heads, 128, 128].
    assert!(
        hint.starts_with("12 unfused attention pattern(s)"),
        "{hint}"
    );
    assert!(hint.contains("[1,12,128,128]"), "{hint}");
    let mlp = "HloModule mlp\n\nENTRY e {\n  x = bf16[128,768] parameter(0)\n  \
               w1 = bf16[768,3072] parameter(1)\n  w2 = bf16[3072,768] parameter(2)\n  \
               h = bf16[128,3072] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
               g = bf16[128,3072] tanh(h)\n  \
               ROOT y = bf16[128,768] dot(g, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    let a = analyze(&module(mlp), &by_id("v4").unwrap());
    assert!(
        !a.hints.iter().any(|h| h.contains("attention")),
        "{:?}",
        a.hints
    );
}

/// A fusion that converts a stacked buffer and slices one layer out of it
/// reads one layer: XLA computes a fused element-wise producer only at the
/// elements its consumer reads.
#[test]
fn a_fused_convert_then_dynamic_slice_reads_only_the_slice() {
    let text = r#"
HloModule ds

fused {
  buf = f32[64,1024,1024] parameter(0)
  i = s32[] parameter(1)
  z = s32[] constant(0)
  narrow = bf16[64,1024,1024] convert(buf)
  ROOT ds = bf16[1,1024,1024] dynamic-slice(narrow, i, z, z), dynamic_slice_sizes={1,1024,1024}
}

ENTRY e {
  buf = f32[64,1024,1024] parameter(0)
  i = s32[] parameter(1)
  ROOT f = bf16[1,1024,1024] fusion(buf, i), kind=kLoop, calls=fused
}
"#;
    let t = root_time(text, "v4", TimingContext::default());
    let layer = 1024.0 * 1024.0;
    // One f32 layer read, one bf16 layer written (plus the index), not the
    // whole 256 MiB buffer.
    assert!(
        t.bytes_accessed < 7.0 * layer,
        "{} bytes, want about {}",
        t.bytes_accessed,
        6.0 * layer
    );
}

fn row_sum(rows: u64, cols: u64, dim: u64) -> String {
    let out = if dim == 1 { rows } else { cols };
    format!(
        "HloModule r\n\nadd {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  \
         ROOT s = f32[] add(a, b)\n}}\n\nENTRY e {{\n  x = f32[{rows},{cols}] parameter(0)\n  \
         z = f32[] constant(0)\n  ROOT r = f32[{out}] reduce(x, z), dimensions={{{dim}}}, to_apply=add\n}}\n"
    )
}

/// The v4 reduce data's floor doubles between 128 and 169 rows summed over
/// the lanes: results wider than one vreg row take a second kernel.
#[test]
fn a_lane_reduction_with_more_results_than_lanes_takes_a_second_kernel() {
    let tc = by_id("v4").unwrap().tensorcore.unwrap();
    let ctx = TimingContext::default();
    let narrow = root_time(&row_sum(128, 64, 1), "v4", ctx).time_s;
    let wide = root_time(&row_sum(256, 64, 1), "v4", ctx).time_s;
    let step = wide - narrow;
    assert!(
        (step - tc.kernel_launch_s).abs() < 0.2e-6,
        "128 -> 256 rows adds {step} s, not one launch"
    );
    // Summing over the major dim leaves the results along lanes already.
    let major = root_time(&row_sum(64, 256, 0), "v4", ctx).time_s;
    assert!(major < tc.kernel_launch_s + 0.2e-6, "{major}");
    let m = module(&row_sum(256, 64, 1));
    let lines = explain_op(&m, &by_id("v4").unwrap(), "r")
        .unwrap()
        .join("\n");
    assert!(lines.contains("second kernel"), "{lines}");
}

fn vector_add(shape: &str) -> String {
    format!(
        "HloModule v\n\nENTRY e {{\n  x = bf16[{shape}] parameter(0)\n  y = bf16[{shape}] parameter(1)\n  \
         ROOT a = bf16[{shape}] add(x, y)\n}}\n"
    )
}

/// A single-row array fills one sublane of each register: adding two such
/// rows moves three registers per 128 values through one core's load/store
/// slots, slower than their bytes stream from HBM (v4 measures 3.4-3.5
/// cycles per 128 values).
#[test]
fn single_row_arrays_are_bound_by_register_moves() {
    let chip = by_id("v4").unwrap();
    let tc = chip.tensorcore.clone().unwrap();
    let n = 131_072u64;
    let t = root_time(
        &vector_add(&format!("1,1,{n}")),
        "v4",
        TimingContext::default(),
    );
    let moves = 3.0 * (n / 128) as f64 / (tc.vreg_moves_per_cycle * chip.clock_hz);
    assert!(
        t.time_s >= moves + tc.kernel_launch_s * 0.99,
        "{} < {moves} + launch",
        t.time_s
    );
    // The same values as 8 rows fill every sublane: HBM-bound, and faster.
    let dense = root_time(
        &vector_add(&format!("8,{}", n / 8)),
        "v4",
        TimingContext::default(),
    );
    assert!(
        dense.time_s < 0.6 * t.time_s,
        "{} vs {}",
        dense.time_s,
        t.time_s
    );
    let m = module(&vector_add(&format!("1,1,{n}")));
    let lines = explain_op(&m, &chip, "a").unwrap().join("\n");
    assert!(lines.contains("load/store-bound"), "{lines}");
}

/// A matmul kernel is a pipeline of output blocks per core: with one block
/// per core nothing overlaps (load, compute and store in turn); with many,
/// the time approaches the slower of compute and DMA.
#[test]
fn a_gemm_of_few_blocks_pays_its_pipeline_fill_and_a_large_one_hides_it() {
    let lone = TimingContext::default();
    // dot(m, k, n): one 1024x1024 block per core, K = 64.
    let few = root_time(&dot(2048, 64, 1024), "v4", lone);
    let busiest = few.mxu_s.max(few.hbm_s);
    let serial = few.mxu_s + few.hbm_s;
    assert!(
        (few.time_s - few.overhead_s - serial).abs() < 0.02 * serial,
        "one block per core: {} vs compute + DMA {serial}",
        few.time_s - few.overhead_s
    );
    assert!(few.time_s - few.overhead_s > 1.3 * busiest);
    // 64 blocks per core: within 5% of the busier unit.
    let many = root_time(&dot(8192, 4096, 16384), "v4", lone);
    let busiest = many.mxu_s.max(many.hbm_s);
    assert!(many.time_s - many.overhead_s < 1.05 * busiest);
}

/// XLA's algebraic simplifier turns a dot with K = 1 into a multiply of
/// broadcasts: no MXU work; beyond one 128x128 block the column operand is
/// laid out by a copy kernel first.
#[test]
fn an_outer_product_runs_on_the_vpu_and_a_large_one_takes_two_kernels() {
    let chip = by_id("v4").unwrap();
    let tc = chip.tensorcore.clone().unwrap();
    let lone = TimingContext::default();
    let small = root_time(&dot(96, 1, 100), "v4", lone);
    assert_eq!(small.mxu_s, 0.0);
    assert_eq!(small.overhead_s, tc.kernel_launch_s);
    let large = root_time(&dot(443, 1, 4503), "v4", lone);
    assert_eq!(large.mxu_s, 0.0);
    assert_eq!(large.overhead_s, 2.0 * tc.kernel_launch_s);
    let k2 = root_time(&dot(443, 2, 4503), "v4", lone);
    assert!(k2.mxu_s > 0.0);
    assert_eq!(k2.overhead_s, tc.kernel_launch_s);
}
