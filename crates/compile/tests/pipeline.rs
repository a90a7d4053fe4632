//! The compile pipeline: each pass on small programs whose result is known,
//! and the whole pipeline (verifier after every pass) on the corpus.

mod common;
use common::{checked, parse};

use tpusim_compile::{
    all_reduce_to_reduce_scatter, combine_collectives, compile, convert_async_collectives,
    latency_hiding_schedule, reassociate_all_reduces, Changed, CompileOptions, SchedulerLimits,
};
use tpusim_hlo::{parse_module, verify, Module, Opcode};
use tpusim_perf::LocalOnly;

fn count(m: &Module, op: Opcode) -> usize {
    m.comps
        .iter()
        .filter(|c| !c.is_async_sugar)
        .flat_map(|c| &c.instrs)
        .filter(|&&i| m.instr(i).opcode == op)
        .count()
}

const AR_DS: &str = r#"
HloModule ar_ds, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,16] parameter(0)
  ar = f32[8,16] all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  pid = u32[] partition-id()
  table = s32[4] constant({0, 2, 4, 6})
  off = s32[1] dynamic-slice(table, pid), dynamic_slice_sizes={1}
  o = s32[] reshape(off)
  zero = s32[] constant(0)
  ROOT ds = f32[2,16] dynamic-slice(ar, o, zero), dynamic_slice_sizes={2,16}
}
"#;

#[test]
fn all_reduce_then_own_shard_becomes_reduce_scatter() {
    let mut m = parse(AR_DS);
    let c = checked(&mut m, all_reduce_to_reduce_scatter);
    assert!(matches!(c, Changed::Yes(_)), "{c:?}");
    assert_eq!(count(&m, Opcode::ReduceScatter), 1);
    assert_eq!(count(&m, Opcode::AllReduce), 0);
    let root = m.instr(m.entry().root);
    assert_eq!(root.opcode, Opcode::ReduceScatter);
    assert_eq!(root.attr_ints("dimensions"), Some(&[0i64][..]));
}

const AR_SUM: &str = r#"
HloModule ar_sum, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,16] parameter(0)
  q = f32[8,16] parameter(1)
  r = f32[8,16] parameter(2)
  ar0 = f32[8,16] all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ar1 = f32[8,16] all-reduce(q), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ar2 = f32[8,16] all-reduce(r), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  sum0 = f32[8,16] add(ar0, ar1)
  sum1 = f32[8,16] add(sum0, ar2)
  ROOT n = f32[8,16] negate(sum1)
}
"#;

#[test]
fn sums_of_all_reduces_become_one_all_reduce_of_the_sum() {
    let mut m = parse(AR_SUM);
    let c = checked(&mut m, reassociate_all_reduces);
    assert!(matches!(c, Changed::Yes(_)), "{c:?}");
    assert_eq!(count(&m, Opcode::AllReduce), 1);
    // The operands' two sums, plus the reducer's own add.
    assert_eq!(count(&m, Opcode::Add), 3, "the operands are summed first");
    let root = m.instr(m.entry().root);
    assert_eq!(m.instr(root.operands[0]).opcode, Opcode::AllReduce);
}

#[test]
fn all_reduces_over_other_groups_or_read_elsewhere_are_kept() {
    let other_groups = AR_SUM.replace(
        "channel_id=2, replica_groups={{0,1,2,3}}",
        "channel_id=2, replica_groups={{0,1},{2,3}}",
    );
    let read_elsewhere = AR_SUM.replace("negate(sum1)", "add(sum1, ar1)");
    for text in [other_groups, read_elsewhere] {
        let mut m = parse(&text);
        checked(&mut m, reassociate_all_reduces);
        // Only ar0 + ar1 could have merged; neither case allows it.
        assert!(
            count(&m, Opcode::AllReduce) >= 2,
            "{}",
            tpusim_hlo::print_module(&m)
        );
    }
}

#[test]
fn slice_not_by_device_id_stays_all_reduce() {
    let text = AR_DS.replace(
        "ds = f32[2,16] dynamic-slice(ar, o, zero)",
        "ds = f32[2,16] dynamic-slice(ar, zero, zero)",
    );
    let mut m = parse(&text);
    assert_eq!(checked(&mut m, all_reduce_to_reduce_scatter), Changed::No);
    assert_eq!(count(&m, Opcode::AllReduce), 1);
}

const THREE_AR: &str = r#"
HloModule three, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[64] parameter(0)
  p1 = f32[32] parameter(1)
  a0 = f32[64] all-reduce(p0), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add
  a1 = f32[32] all-reduce(p1), channel_id=2, replica_groups={{0,1,2,3}}, to_apply=add
  e = f32[32] exponential(a1)
  a2 = f32[32] all-reduce(e), channel_id=3, replica_groups={{0,1,2,3}}, to_apply=add
  ROOT t = (f32[64], f32[32], f32[32]) tuple(a0, a1, a2)
}
"#;

fn v5e() -> tpusim_arch::Chip {
    tpusim_arch::by_id("v5e").expect("builtin chip")
}

#[test]
fn independent_all_reduces_combine_dependent_ones_do_not() {
    let mut m = parse(THREE_AR);
    let cfg = v5e().compiler.expect("v5e has a [compiler] table");
    let c = checked(&mut m, |m| combine_collectives(m, &cfg));
    assert_eq!(c, Changed::Yes("3 collectives combined into 2".to_string()));
    assert_eq!(count(&m, Opcode::AllReduce), 2);
}

#[test]
fn combiner_respects_the_byte_threshold() {
    let mut m = parse(THREE_AR);
    let mut cfg = v5e().compiler.expect("v5e has a [compiler] table");
    cfg.all_reduce_combine_threshold_bytes = 300; // a0 (256 B) + a1 (128 B) do not fit
    assert_eq!(
        checked(&mut m, |m| combine_collectives(m, &cfg)),
        Changed::No
    );
}

#[test]
fn every_collective_becomes_async() {
    let text = r#"
HloModule c, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,16] parameter(0)
  ar = f32[8,16] all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add
  ag = f32[32,16] all-gather(ar), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  rs = f32[8,16] reduce-scatter(ag), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add
  cp = f32[8,16] collective-permute(rs), channel_id=4, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT a2a = f32[8,16] all-to-all(cp), channel_id=5, replica_groups={{0,1,2,3}}, dimensions={0}
}
"#;
    let mut m = parse(text);
    let c = checked(&mut m, convert_async_collectives);
    assert_eq!(
        c,
        Changed::Yes("5 collectives made asynchronous".to_string())
    );
    for op in [
        Opcode::AllReduce,
        Opcode::AllGather,
        Opcode::ReduceScatter,
        Opcode::CollectivePermute,
        Opcode::AllToAll,
    ] {
        assert_eq!(count(&m, op), 0, "{op:?} left synchronous");
    }
    assert_eq!(count(&m, Opcode::AllReduceStart), 1);
    assert_eq!(count(&m, Opcode::AsyncStart), 2);
    // The printed program parses back to the same text.
    let printed = tpusim_hlo::print_module(&m);
    let again = parse(&printed);
    assert_eq!(tpusim_hlo::print_module(&again), printed);
}

#[test]
fn scheduler_overlaps_a_collective_with_independent_compute() {
    let text = r#"
HloModule s, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[1024,1024] parameter(0)
  w = f32[1024,1024] parameter(1)
  start = f32[1024,1024] all-reduce-start(p), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add
  done = f32[1024,1024] all-reduce-done(start)
  d = f32[1024,1024] dot(w, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[1024,1024] add(done, d)
}
"#;
    let mut m = parse(text);
    let limits = SchedulerLimits {
        overlap_limit: 1,
        memory_limit_bytes: 1 << 40,
    };
    let chip = v5e();
    checked(&mut m, |m| {
        latency_hiding_schedule(m, &chip, &LocalOnly, &limits)
    });
    let names: Vec<&str> = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).name.as_str())
        .collect();
    let at = |n: &str| names.iter().position(|x| *x == n).expect("scheduled");
    assert!(at("start") < at("d") && at("d") < at("done"), "{names:?}");
    assert_eq!(m.config.is_scheduled, Some(true));
}

fn corpus(dir: &str) -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/corpus")
        .join(dir);
    let mut files: Vec<_> = std::fs::read_dir(root)
        .expect("corpus folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .collect();
    files.sort();
    files
}

/// The whole pipeline, verifier after every pass, on every generated corpus
/// module (pre-optimization, XLA:CPU-compiled and partitioned ones).
#[test]
fn pipeline_keeps_every_corpus_module_valid() {
    let chip = v5e();
    let opts = CompileOptions {
        verify_each: true,
        ..Default::default()
    };
    let mut compiled = 0;
    for path in corpus("jax_generated") {
        let text = std::fs::read_to_string(&path).expect("readable");
        let Ok(mut m) = parse_module(&text) else {
            continue;
        };
        if verify(&m).is_err() {
            continue;
        }
        if let Err(e) = compile(&mut m, &chip, &LocalOnly, &opts) {
            panic!("{}: {e}", path.display());
        }
        compiled += 1;
    }
    assert!(compiled > 20, "only {compiled} corpus modules compiled");
}

/// An XLA:CPU-compiled module is scheduled, but with synchronous collectives
/// and without the tiled layouts XLA:TPU gives every array: the pipeline
/// undoes its fusions and recompiles it. A scheduled module with TPU layouts
/// keeps its program.
#[test]
fn scheduled_cpu_programs_are_recompiled_tpu_programs_kept() {
    let chip = v5e();
    let opts = CompileOptions::default();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/corpus/jax_generated");
    for file in [
        "transformer_train_step_sharded.compiled.hlo",
        "mlp_grad.compiled.hlo",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("corpus");
        let mut m = parse(&text);
        assert_eq!(m.config.is_scheduled, Some(true));
        let report = compile(&mut m, &chip, &LocalOnly, &opts).expect("compiles");
        let ran = |name: &str| {
            report
                .passes
                .iter()
                .any(|p| p.pass == name && p.change.is_some())
        };
        assert!(
            ran("backend-check") && ran("fusion-inliner"),
            "{file}: {:?}",
            report.passes
        );
        assert_eq!(
            count(&m, Opcode::AllReduce) + count(&m, Opcode::AllGather),
            0,
            "{file}: collectives left synchronous"
        );
        verify(&m).expect("valid");
    }

    let tpu = r#"
HloModule tpu, is_scheduled=true

ENTRY %main (p: f32[8,128]) -> f32[8,128] {
  %p = f32[8,128]{1,0:T(8,128)} parameter(0)
  %e = f32[8,128]{1,0:T(8,128)} exponential(%p)
  ROOT %n = f32[8,128]{1,0:T(8,128)} negate(%e)
}
"#;
    let mut m = parse(tpu);
    let before = tpusim_hlo::print_module(&m);
    let report = compile(&mut m, &chip, &LocalOnly, &opts).expect("compiles");
    assert!(report.passes.iter().any(|p| p.skipped.is_some()));
    assert_eq!(tpusim_hlo::print_module(&m), before);
}

/// An async reduce-scatter (an `async-start` whose start also carries the
/// reducer) is priced on the pod as an overlappable reduce-scatter.
#[test]
fn async_reduce_scatter_is_priced_as_an_async_collective() {
    let text = r#"
HloModule rs, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[1024,1024] parameter(0)
  w = f32[1024,1024] parameter(1)
  rs = f32[256,1024] reduce-scatter(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add
  d = f32[1024,1024] dot(w, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[256,1024], f32[1024,1024]) tuple(rs, d)
}
"#;
    let m = parse(text);
    let chip = tpusim_arch::by_id("v5p").expect("builtin chip");
    let pod = tpusim_pod::PodOptions::default()
        .model_for(&chip, &m)
        .expect("pod")
        .expect("a sharded module gets a pod");
    let (_, a) = tpusim_compile::analyze(
        &m,
        &chip,
        &pod,
        tpusim_compile::Mode::Compile,
        &CompileOptions::default(),
    )
    .expect("compiles");
    let rs = a
        .communication
        .collectives
        .iter()
        .find(|c| c.kind == "reduce-scatter")
        .expect("the reduce-scatter is priced as a collective");
    assert!(rs.is_async, "{rs:?}");
    assert!(rs.exposed_s < rs.time_s, "{rs:?}");
}

/// XLA's TransposeFolding: a transpose feeding only dots folds into their
/// dimension numbers, unless that would reorder a dot's free dimensions.
#[test]
fn transposes_fold_into_dots_that_keep_their_free_dimension_order() {
    let mut m = parse(
        r#"
HloModule t
ENTRY main {
  x = f32[16,8] parameter(0)
  w = f32[16,4] parameter(1)
  xt = f32[8,16] transpose(x), dimensions={1,0}
  ROOT d = f32[8,4] dot(xt, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"#,
    );
    let c = checked(&mut m, tpusim_compile::fold_transposes_into_dots);
    assert!(matches!(c, Changed::Yes(_)));
    let d = m.instr(m.entry().root);
    assert_eq!(m.instr(d.operands[0]).name, "x");
    assert_eq!(d.attr_ints("lhs_contracting_dims"), Some(&[0][..]));
    assert_eq!(count(&m, Opcode::Transpose), 0);

    // Swapping the two free dims of a 3-D operand would transpose the result.
    let mut m = parse(
        r#"
HloModule t
ENTRY main {
  x = f32[2,3,16] parameter(0)
  w = f32[16,4] parameter(1)
  xt = f32[3,2,16] transpose(x), dimensions={1,0,2}
  ROOT d = f32[3,2,4] dot(xt, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}
"#,
    );
    assert_eq!(
        checked(&mut m, tpusim_compile::fold_transposes_into_dots),
        Changed::No
    );
}

/// Positions of `names` in computation `comp`'s scheduled order.
fn positions(m: &Module, comp: &str, names: &[&str]) -> Vec<usize> {
    let c = m
        .comps
        .iter()
        .find(|c| c.name == comp)
        .expect("computation");
    let order: Vec<&str> = c.instrs.iter().map(|&i| m.instr(i).name.as_str()).collect();
    names
        .iter()
        .map(|n| {
            order
                .iter()
                .position(|x| x == n)
                .unwrap_or_else(|| panic!("{n} not in {order:?}"))
        })
        .collect()
}

fn schedule(m: &mut Module, memory_limit_bytes: u64) {
    schedule_with(m, &LocalOnly, memory_limit_bytes);
}

/// The latency-hiding scheduler on v5e, one collective of a kind in flight.
fn schedule_with(m: &mut Module, comm: &dyn tpusim_perf::CommModel, memory_limit_bytes: u64) {
    let limits = SchedulerLimits {
        overlap_limit: 1,
        memory_limit_bytes,
    };
    let chip = v5e();
    checked(m, |m| latency_hiding_schedule(m, &chip, comm, &limits));
}

#[test]
fn scheduler_issues_first_the_collective_needed_first() {
    // Both all-reduces can start at once and one slot is free: `late` comes
    // first in the text but is needed last, so `soon` goes first.
    let text = r#"
HloModule s, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[512,512] parameter(0)
  q = f32[512,512] parameter(1)
  late = f32[512,512] all-reduce-start(p), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add
  soon = f32[512,512] all-reduce-start(q), channel_id=2, replica_groups={{0,1,2,3}}, to_apply=add
  soon_done = f32[512,512] all-reduce-done(soon)
  e = f32[512,512] exponential(soon_done)
  late_done = f32[512,512] all-reduce-done(late)
  ROOT s = f32[512,512] add(e, late_done)
}
"#;
    let mut m = parse(text);
    schedule(&mut m, 1 << 40);
    let at = positions(&m, "main", &["soon", "late"]);
    assert!(at[0] < at[1], "{at:?}\n{}", tpusim_hlo::print_module(&m));
}

/// Every collective started by an op of this opcode takes 1 ms on the
/// interconnect.
struct OneMsPer(Opcode);

impl tpusim_perf::CommModel for OneMsPer {
    fn cost(&self, m: &Module, id: tpusim_hlo::InstrId) -> Option<tpusim_perf::CommCost> {
        (m.instr(id).opcode == self.0).then(|| tpusim_perf::CommCost {
            time_s: 1e-3,
            ..Default::default()
        })
    }
}

#[test]
fn independent_compute_later_in_the_program_fills_a_collectives_wait() {
    // `use` needs the all-reduce right after it starts; `d`, later in the
    // text and independent of it, runs between the start and the done (as
    // XLA's scheduler places it), not after the done.
    let text = r#"
HloModule s, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[512,512] parameter(0)
  w = f32[512,512] parameter(1)
  start = f32[512,512] all-reduce-start(p), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add
  done = f32[512,512] all-reduce-done(start)
  use = f32[512,512] exponential(done)
  d = f32[512,512] dot(w, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[512,512] add(use, d)
}
"#;
    let mut m = parse(text);
    schedule_with(&mut m, &OneMsPer(Opcode::AllReduceStart), 1 << 40);
    let at = positions(&m, "main", &["start", "d", "done"]);
    assert!(
        at[0] < at[1] && at[1] < at[2],
        "{at:?}\n{}",
        tpusim_hlo::print_module(&m)
    );
    // Without memory for the dot's result, the done keeps its place.
    let mut m = parse(text);
    schedule_with(&mut m, &OneMsPer(Opcode::AllReduceStart), 3 * 512 * 512 * 2);
    let at = positions(&m, "main", &["done", "d"]);
    assert!(at[0] < at[1], "{at:?}\n{}", tpusim_hlo::print_module(&m));
}

#[test]
fn a_reduce_scatter_and_an_all_to_all_are_in_flight_together() {
    // XLA's scheduler gives each collective kind its own resource: both
    // start before either is waited for, though both are `async-start`s.
    let text = r#"
HloModule s, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[512,512] parameter(0)
  q = f32[512,512] parameter(1)
  rs = f32[128,512] reduce-scatter(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add
  a2a = f32[512,512] all-to-all(q), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  e = f32[128,512] exponential(rs)
  f = f32[512,512] exponential(a2a)
  ROOT t = (f32[128,512], f32[512,512]) tuple(e, f)
}
"#;
    let mut m = parse(text);
    checked(&mut m, convert_async_collectives);
    schedule_with(&mut m, &OneMsPer(Opcode::AsyncStart), 1 << 40);
    let kinds: Vec<Opcode> = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).opcode)
        .filter(|op| matches!(op, Opcode::AsyncStart | Opcode::AsyncDone))
        .collect();
    assert_eq!(
        kinds,
        [
            Opcode::AsyncStart,
            Opcode::AsyncStart,
            Opcode::AsyncDone,
            Opcode::AsyncDone
        ],
        "{}",
        tpusim_hlo::print_module(&m)
    );
}

/// A loop whose body could prefetch a 2 MiB all-gather before its compute,
/// called while the entry holds `held` (3 MiB) live across the loop.
const LOOP_WITH_PREFETCH: &str = r#"
HloModule l, num_partitions=4

cond {
  c = (s32[], f32[1024,1024], f32[128,1024]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  b = (s32[], f32[1024,1024], f32[128,1024]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[1024,1024] get-tuple-element(b), index=1
  y = f32[128,1024] get-tuple-element(b), index=2
  e1 = f32[1024,1024] exponential(x)
  e2 = f32[1024,1024] exponential(e1)
  ag = (f32[128,1024], f32[512,1024]) all-gather-start(y), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  agd = f32[512,1024] all-gather-done(ag)
  s = f32[128,1024] slice(agd), slice={[0:128], [0:1024]}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[1024,1024], f32[128,1024]) tuple(j, e2, s)
}

ENTRY main {
  p = f32[1024,1024] parameter(0)
  y0 = f32[128,1024] parameter(1)
  z = f32[768,1024] parameter(2)
  held = f32[768,1024] exponential(z)
  zero = s32[] constant(0)
  init = (s32[], f32[1024,1024], f32[128,1024]) tuple(zero, p, y0)
  w = (s32[], f32[1024,1024], f32[128,1024]) while(init), condition=cond, body=body
  r = f32[1024,1024] get-tuple-element(w), index=1
  h = f32[768,1024] slice(r), slice={[0:768], [0:1024]}
  ROOT o = f32[768,1024] add(h, held)
}
"#;

#[test]
fn loop_body_prefetches_only_within_the_memory_its_caller_leaves() {
    let limit = 9 << 20;
    // Alone, the body prefetches the gather before its compute.
    let free = LOOP_WITH_PREFETCH
        .replace("  held = f32[768,1024] exponential(z)\n", "")
        .replace(
            "  ROOT o = f32[768,1024] add(h, held)",
            "  held = f32[768,1024] exponential(h)\n  ROOT o = f32[768,1024] add(h, held)",
        );
    let mut m = parse(&free);
    schedule(&mut m, limit);
    let at = positions(&m, "body", &["ag", "e1"]);
    assert!(at[0] < at[1], "prefetched when memory allows: {at:?}");
    // With 3 MiB held by the caller across the loop (and the loop's own
    // 4.5 MiB state), the 2 MiB gather no longer fits early.
    let mut m = parse(LOOP_WITH_PREFETCH);
    schedule(&mut m, limit);
    let at = positions(&m, "body", &["ag", "e2"]);
    assert!(
        at[0] > at[1],
        "held to its place: {at:?}\n{}",
        tpusim_hlo::print_module(&m)
    );
}

#[test]
fn collective_matmul_chunks_are_scheduled_as_a_pipeline() {
    // Through the whole pipeline: every chunk's gather starts before the
    // dot of the chunk before it (only the first gather is waited for).
    let text = r#"
HloModule cm, num_partitions=8

ENTRY main {
  x = bf16[4096,512] parameter(0)
  w = bf16[4096,4096] parameter(1)
  ag = bf16[4096,4096] all-gather(x), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={1}, use_global_device_ids=true
  ROOT d = bf16[4096,4096] dot(ag, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"#;
    let mut m = parse(text);
    let opts = CompileOptions {
        collective_matmul: true,
        verify_each: true,
        ..Default::default()
    };
    let report = compile(&mut m, &v5e(), &LocalOnly, &opts).expect("compiles");
    assert!(report
        .passes
        .iter()
        .any(|p| p.pass == "collective-matmul" && p.change.is_some()));
    let ops: Vec<Opcode> = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).opcode)
        .filter(|op| {
            matches!(
                op,
                Opcode::AllGatherStart | Opcode::AllGatherDone | Opcode::Dot
            )
        })
        .collect();
    assert_eq!(
        ops.iter().filter(|&&o| o == Opcode::AllGatherStart).count(),
        8
    );
    // The i-th dot runs after the gather of chunk i + 1 has started (the
    // last dot, fused with the concatenation, may follow every gather).
    let (mut started, mut dots) = (0, 0);
    for op in &ops {
        match op {
            Opcode::AllGatherStart => started += 1,
            Opcode::Dot => {
                dots += 1;
                assert!(started > dots || started == 8, "{ops:?}");
            }
            _ => {}
        }
    }
    assert!(dots >= 7, "{ops:?}");
}

/// A scan whose body slices this device's shard of an all-reduce at an
/// offset computed before the loop and carried through it unchanged (as
/// XLA:CPU's loop-invariant code motion leaves it).
const CARRIED_OFFSET: &str = r#"
HloModule carried, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  c = (s32[], f32[8,16], s32[]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  b = (s32[], f32[8,16], s32[]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[8,16] get-tuple-element(b), index=1
  off = s32[] get-tuple-element(b), index=2
  ar = f32[8,16] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  zero = s32[] constant(0)
  shard = f32[2,16] dynamic-slice(ar, off, zero), dynamic_slice_sizes={2,16}
  zero.f = f32[] constant(0)
  padded = f32[8,16] pad(shard, zero.f), padding=0_6x0_0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8,16], s32[]) tuple(j, padded, off)
}

ENTRY main {
  p = f32[8,16] parameter(0)
  pid = u32[] partition-id()
  table = s32[4] constant({0, 2, 4, 6})
  o1 = s32[1] dynamic-slice(table, pid), dynamic_slice_sizes={1}
  o = s32[] reshape(o1)
  zero = s32[] constant(0)
  init = (s32[], f32[8,16], s32[]) tuple(zero, p, o)
  w = (s32[], f32[8,16], s32[]) while(init), condition=cond, body=body
  ROOT r = f32[8,16] get-tuple-element(w), index=1
}
"#;

#[test]
fn an_offset_carried_unchanged_through_a_loop_still_names_the_shard() {
    let mut m = parse(CARRIED_OFFSET);
    let c = checked(&mut m, all_reduce_to_reduce_scatter);
    assert!(matches!(c, Changed::Yes(_)), "{c:?}");
    assert_eq!(count(&m, Opcode::ReduceScatter), 1);
}

#[test]
fn an_offset_the_loop_changes_is_not_taken_for_the_shard() {
    // The loop adds one to the carried offset: what it starts with says
    // nothing about later iterations.
    let text = CARRIED_OFFSET.replace(
        "ROOT t = (s32[], f32[8,16], s32[]) tuple(j, padded, off)",
        "next = s32[] add(off, one)\n  ROOT t = (s32[], f32[8,16], s32[]) tuple(j, padded, next)",
    );
    let mut m = parse(&text);
    assert_eq!(checked(&mut m, all_reduce_to_reduce_scatter), Changed::No);
}

/// A set cancel flag stops the pipeline at its first pass boundary and the
/// analysis before it prices anything, with the typed error.
#[test]
fn a_set_cancel_flag_stops_compile_and_analyze_with_cancelled() {
    let m = parse_module(
        "HloModule m\n\nENTRY e {\n  a = f32[128,128] parameter(0)\n  ROOT d = f32[128,128] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    )
    .expect("parses");
    let chip = tpusim_arch::by_id("v5e").expect("builtin");
    let opts = CompileOptions::default();
    assert!(
        tpusim_compile::analyze(&m, &chip, &LocalOnly, tpusim_compile::Mode::Compile, &opts)
            .is_ok()
    );
    opts.cancel.cancel();
    let mut c = m.clone();
    assert!(matches!(
        compile(&mut c, &chip, &LocalOnly, &opts),
        Err(tpusim_compile::CompileError::Cancelled(_))
    ));
    for mode in [tpusim_compile::Mode::Compile, tpusim_compile::Mode::AsGiven] {
        assert!(matches!(
            tpusim_compile::analyze(&m, &chip, &LocalOnly, mode, &opts),
            Err(tpusim_compile::CompileError::Cancelled(_))
        ));
    }
    assert!(tpusim_perf::analyze_cancellable(&m, &chip, &LocalOnly, &opts.cancel).is_err());
    assert!(
        tpusim_perf::schedule_with_memory_cancellable(&m, &chip, &LocalOnly, &opts.cancel).is_err()
    );
}
