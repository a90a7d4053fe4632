//! The replayed schedule agrees with the analysis, unrolls loops, truncates
//! long ones without losing time, and overlaps async transfers with compute.

use tpusim_arch::by_id;
use tpusim_hlo::{InstrId, Module, Opcode};
use tpusim_perf::schedule::MAX_EVENTS;
use tpusim_perf::{
    analyze, op_name_path, schedule, CommCost, CommModel, Lane, LocalOnly, Schedule,
};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-30)
}

fn corpus_files() -> Vec<std::path::PathBuf> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/corpus");
    let mut files = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(root)];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "hlo") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn tensorcore_and_dma(s: &Schedule) -> f64 {
    s.busy_s(Lane::TensorCore) + s.busy_s(Lane::Dma)
}

#[test]
fn busy_time_equals_the_analysis_step_on_the_corpus() {
    let chip = by_id("v5e").unwrap();
    let mut checked = 0;
    for path in corpus_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let Ok(modules) = tpusim_hlo::parse_modules(&text) else {
            continue;
        };
        for m in modules {
            let a = analyze(&m, &chip);
            let s = schedule(&m, &chip, &LocalOnly);
            let name = path.display();
            assert!(!s.truncated, "{name}");
            assert!(
                close(tensorcore_and_dma(&s), a.step_time_s),
                "{name}: busy {} vs step {}",
                tensorcore_and_dma(&s),
                a.step_time_s
            );
            // Without copy-start nothing overlaps: the clock is the step.
            if s.busy_s(Lane::Dma) == 0.0 {
                assert!(close(s.step_s, a.step_time_s), "{name}");
                assert!(close(s.busy_s(Lane::TensorCore), a.step_time_s), "{name}");
            }
            let sm = s.module(&m);
            for e in &s.events {
                assert!(e.dur_s >= 0.0 && e.start_s >= 0.0, "{name}");
                assert!(e.instr.index() < sm.instrs.len(), "{name}");
            }
            let mut last = 0.0;
            for e in s.events.iter().filter(|e| e.lane == Lane::TensorCore) {
                assert!(e.start_s >= last - 1e-15, "{name}: overlapping ops");
                last = e.end_s();
            }
            checked += 1;
        }
    }
    assert!(checked >= 200, "{checked} modules");
}

fn loop_module(trips: u64) -> String {
    format!(
        r#"HloModule loop

body {{
  p = (s32[], f32[1024,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  x = f32[1024,1024] get-tuple-element(p), index=1
  e = f32[1024,1024] exponential(x), metadata={{op_name="jit(f)/while/body/exp"}}
  ROOT t = (s32[], f32[1024,1024]) tuple(n, e)
}}

cond {{
  p = (s32[], f32[1024,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant({trips})
  ROOT lt = pred[] compare(i, b), direction=LT
}}

ENTRY e {{
  x = f32[1024,1024] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[1024,1024]) tuple(zero, x)
  ROOT w = (s32[], f32[1024,1024]) while(t), condition=cond, body=body
}}
"#
    )
}

#[test]
fn loops_are_unrolled_with_iteration_numbers_and_scopes() {
    let m = tpusim_hlo::parse_module(&loop_module(10)).unwrap();
    let chip = by_id("v5e").unwrap();
    let s = schedule(&m, &chip, &LocalOnly);
    let sm = s.module(&m);
    let exps: Vec<_> = s
        .events
        .iter()
        .filter(|e| op_name_path(sm, e.instr).last() == Some(&"exp"))
        .collect();
    assert_eq!(exps.len(), 10);
    for (k, e) in exps.iter().enumerate() {
        assert_eq!(e.iteration, Some(k as u64));
    }
    assert_eq!(
        op_name_path(sm, exps[0].instr),
        vec!["jit(f)", "while", "body", "exp"]
    );
    assert!(close(s.step_s, analyze(&m, &chip).step_time_s));
}

#[test]
fn long_loops_are_truncated_but_keep_their_time() {
    let m = tpusim_hlo::parse_module(&loop_module(1_000_000)).unwrap();
    let chip = by_id("v5e").unwrap();
    let s = schedule(&m, &chip, &LocalOnly);
    assert!(s.truncated);
    assert!(s.events.len() <= MAX_EVENTS + 16, "{}", s.events.len());
    let a = analyze(&m, &chip);
    assert!(
        (s.step_s - a.step_time_s).abs() <= 1e-6 * a.step_time_s,
        "{} vs {}",
        s.step_s,
        a.step_time_s
    );
}

/// Every all-reduce takes 1 ms on the interconnect.
struct FixedComm;

impl CommModel for FixedComm {
    fn cost(&self, m: &Module, id: InstrId) -> Option<CommCost> {
        matches!(
            m.instr(id).opcode,
            Opcode::AllReduceStart | Opcode::AllReduce
        )
        .then(|| CommCost {
            time_s: 1e-3,
            ..CommCost::default()
        })
    }
}

const ASYNC: &str = r#"HloModule overlap

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  g = f32[1024,1024] parameter(0)
  x = f32[1024,1024] parameter(1)
  ars = f32[1024,1024] all-reduce-start(g), replica_groups={}, to_apply=add
  d = f32[1024,1024] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ard = f32[1024,1024] all-reduce-done(ars)
  ROOT r = (f32[1024,1024], f32[1024,1024]) tuple(ard, d)
}
"#;

#[test]
fn async_collectives_overlap_compute_between_start_and_done() {
    let m = tpusim_hlo::parse_module(ASYNC).unwrap();
    let chip = by_id("v5e").unwrap();
    let s = schedule(&m, &chip, &FixedComm);
    let sm = s.module(&m);
    let ici: Vec<_> = s.events.iter().filter(|e| e.lane == Lane::Ici).collect();
    assert_eq!(ici.len(), 1);
    assert_eq!(ici[0].dur_s, 1e-3);
    let flow = ici[0].flow.expect("flow id");
    let linked: Vec<_> = s.events.iter().filter(|e| e.flow == Some(flow)).collect();
    assert_eq!(linked.len(), 3, "start marker, transfer, done marker");
    let done = linked.last().unwrap();
    assert_eq!(sm.instr(done.instr).name, "ard");
    assert!(close(done.start_s, 1e-3), "done waits for the transfer");
    // The dot ran inside the transfer.
    let compute = s.busy_s(Lane::TensorCore);
    let dot = s
        .events
        .iter()
        .find(|e| e.lane == Lane::TensorCore && e.dur_s > 0.0)
        .unwrap();
    assert!(dot.end_s() < 1e-3);
    assert!(s.step_s < 1e-3 + compute, "overlap saves the dot's time");
    assert!(s.step_s >= 1e-3);
    // Without an interconnect model the collective is local traffic.
    let local = schedule(&m, &chip, &LocalOnly);
    assert!(local.events.iter().all(|e| e.lane == Lane::TensorCore));
    assert!(close(local.step_s, analyze(&m, &chip).step_time_s));
}

/// A scan body whose all-reduce result is written into a loop-carried buffer
/// (`pipelined`), or also read by the body's next op (not pipelinable).
fn gradient_loop(pipelined: bool) -> String {
    let (out, read) = if pipelined {
        ("d", "")
    } else {
        (
            "g",
            "g = f32[4096,4096] pad(ard, f32[] constant(0)), padding=0_3584x0_3584",
        )
    };
    format!(
        r#"HloModule grads

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

body {{
  p = (s32[], f32[4096,4096], f32[4,512,512]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  x = f32[4096,4096] get-tuple-element(p), index=1
  buf = f32[4,512,512] get-tuple-element(p), index=2
  s = f32[512,512] slice(x), slice={{[0:512], [0:512]}}
  ars = f32[512,512] all-reduce-start(s), replica_groups={{}}, to_apply=add
  ard = f32[512,512] all-reduce-done(ars)
  d = f32[4096,4096] dot(x, x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  {read}
  u = f32[1,512,512] reshape(ard)
  z = s32[] constant(0)
  nb = f32[4,512,512] dynamic-update-slice(buf, u, i, z, z)
  ROOT t = (s32[], f32[4096,4096], f32[4,512,512]) tuple(n, {out}, nb)
}}

cond {{
  p = (s32[], f32[4096,4096], f32[4,512,512]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant(4)
  ROOT lt = pred[] compare(i, b), direction=LT
}}

ENTRY e {{
  x = f32[4096,4096] parameter(0)
  buf = f32[4,512,512] parameter(1)
  zero = s32[] constant(0)
  t = (s32[], f32[4096,4096], f32[4,512,512]) tuple(zero, x, buf)
  ROOT w = (s32[], f32[4096,4096], f32[4,512,512]) while(t), condition=cond, body=body
}}
"#
    )
}

#[test]
fn collectives_that_only_update_a_carried_buffer_overlap_the_next_iteration() {
    let chip = by_id("v5e").unwrap();
    let step = |pipelined: bool| {
        let m = tpusim_hlo::parse_module(&gradient_loop(pipelined)).unwrap();
        let a = tpusim_perf::analyze_with(&m, &chip, &FixedComm);
        let s = schedule(&m, &chip, &FixedComm);
        // The replayed schedule models the pipelining as the walk does.
        assert!(
            (s.step_s - a.step_time_s).abs() <= 0.05 * a.step_time_s,
            "replay {} vs analysis {}",
            s.step_s,
            a.step_time_s
        );
        let noted = a
            .assumptions
            .iter()
            .any(|x| x.contains("pipelined across iterations"));
        assert_eq!(noted, pipelined, "{:?}", a.assumptions);
        a.step_time_s
    };
    let (with, without) = (step(true), step(false));
    // The 1 ms all-reduce is waited for at once when the body reads it; when
    // it only updates the buffer, the next iteration's dot hides it.
    assert!(with < 0.8 * without, "{with} vs {without}");
}

/// Every all-reduce takes 1 ms and blocks the TensorCore (as one across
/// slices does).
struct BlockingComm;

impl CommModel for BlockingComm {
    fn cost(&self, m: &Module, id: InstrId) -> Option<CommCost> {
        FixedComm.cost(m, id).map(|c| CommCost {
            blocking: true,
            ..c
        })
    }
}

#[test]
fn a_blocking_collective_overlaps_nothing_even_when_async() {
    let m = tpusim_hlo::parse_module(ASYNC).unwrap();
    let chip = by_id("v5e").unwrap();
    let overlapped = tpusim_perf::analyze_with(&m, &chip, &FixedComm);
    let blocked = tpusim_perf::analyze_with(&m, &chip, &BlockingComm);
    let s = schedule(&m, &chip, &BlockingComm);
    let compute = s.busy_s(Lane::TensorCore);
    assert!(compute > 0.0);
    // The dot waits for the whole transfer, in the walk and in the replay.
    assert!(
        close(blocked.step_time_s, 1e-3 + compute),
        "{}",
        blocked.step_time_s
    );
    assert!(
        close(s.step_s, blocked.step_time_s),
        "{} vs {}",
        s.step_s,
        blocked.step_time_s
    );
    assert!(overlapped.step_time_s < blocked.step_time_s - 0.5 * compute);
    assert!(close(blocked.communication.exposed_communication_s, 1e-3));
}

/// A scan body whose gradients are all-reduced together (one combined
/// collective, a tuple) and each written into its own loop-carried buffer.
const COMBINED_GRADIENTS: &str = r#"HloModule grads

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

body {
  p = (s32[], f32[4096,4096], f32[4,512,512], f32[4,512,512]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  x = f32[4096,4096] get-tuple-element(p), index=1
  ba = f32[4,512,512] get-tuple-element(p), index=2
  bb = f32[4,512,512] get-tuple-element(p), index=3
  sa = f32[512,512] slice(x), slice={[0:512], [0:512]}
  sb = f32[512,512] slice(x), slice={[512:1024], [0:512]}
  ars = (f32[512,512], f32[512,512]) all-reduce-start(sa, sb), replica_groups={}, to_apply=add
  ard = (f32[512,512], f32[512,512]) all-reduce-done(ars)
  d = f32[4096,4096] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ga = f32[512,512] get-tuple-element(ard), index=0
  gb = f32[512,512] get-tuple-element(ard), index=1
  ua = f32[1,512,512] reshape(ga)
  ub = f32[1,512,512] reshape(gb)
  z = s32[] constant(0)
  na = f32[4,512,512] dynamic-update-slice(ba, ua, i, z, z)
  nb = f32[4,512,512] dynamic-update-slice(bb, ub, i, z, z)
  ROOT t = (s32[], f32[4096,4096], f32[4,512,512], f32[4,512,512]) tuple(n, d, na, nb)
}

cond {
  p = (s32[], f32[4096,4096], f32[4,512,512], f32[4,512,512]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  b = s32[] constant(4)
  ROOT lt = pred[] compare(i, b), direction=LT
}

ENTRY e {
  x = f32[4096,4096] parameter(0)
  buf = f32[4,512,512] parameter(1)
  zero = s32[] constant(0)
  t = (s32[], f32[4096,4096], f32[4,512,512], f32[4,512,512]) tuple(zero, x, buf, buf)
  ROOT w = (s32[], f32[4096,4096], f32[4,512,512], f32[4,512,512]) while(t), condition=cond, body=body
}
"#;

#[test]
fn a_combined_collective_whose_elements_all_update_carried_buffers_is_pipelined() {
    let chip = by_id("v5e").unwrap();
    let m = tpusim_hlo::parse_module(COMBINED_GRADIENTS).unwrap();
    let a = tpusim_perf::analyze_with(&m, &chip, &FixedComm);
    assert!(
        a.assumptions
            .iter()
            .any(|x| x.contains("pipelined across iterations")),
        "{:?}",
        a.assumptions
    );
    // Reading one element in the body (padded into the carried matrix)
    // keeps the collective in its iteration.
    let read = COMBINED_GRADIENTS.replace(
        "  ROOT t = (s32[], f32[4096,4096], f32[4,512,512], f32[4,512,512]) tuple(n, d, na, nb)",
        "  e = f32[4096,4096] pad(gb, f32[] constant(0)), padding=0_3584x0_3584\n  \
         ROOT t = (s32[], f32[4096,4096], f32[4,512,512], f32[4,512,512]) tuple(n, e, na, nb)",
    );
    assert_ne!(read, COMBINED_GRADIENTS);
    let m = tpusim_hlo::parse_module(&read).unwrap();
    let b = tpusim_perf::analyze_with(&m, &chip, &FixedComm);
    assert!(
        !b.assumptions
            .iter()
            .any(|x| x.contains("pipelined across iterations")),
        "{:?}",
        b.assumptions
    );
}
