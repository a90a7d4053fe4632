//! Real xprof reads our XSpace: hlo_stats and op_profile list our ops with
//! our FLOPs and times summing to the predicted step; roofline_model and
//! overview_page are populated. xprof runs from a virtualenv under
//! `target/tools` that the first run builds (see `tpusim-testtools`).

use std::path::{Path, PathBuf};
use std::process::Command;
use tpusim_arch::by_id;
use tpusim_perf::{op_time, schedule_with_memory, CommCost, CommModel, Lane, LocalOnly};
use tpusim_trace::{write_xspace, SimulatedDevice, SimulatedRun};

/// The xprof that tools/xprof_check.py was written against.
const XPROF: &str = "xprof==2.24.2";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Writes `m` as an XSpace of `devices` identical devices and runs
/// tools/xprof_check.py on it.
fn check_with_xprof(tag: &str, m: &tpusim_hlo::Module, comm: &dyn CommModel, devices: u32) {
    let chip = by_id("v5e").unwrap();
    let (s, mem) = schedule_with_memory(m, &chip, comm);
    let steps = 3;
    let run = SimulatedRun {
        module: m,
        chip: &chip,
        devices: (0..devices)
            .map(|ordinal| SimulatedDevice {
                ordinal,
                schedule: &s,
                memory: Some(&mem),
            })
            .collect(),
        host: "simhost".into(),
        steps,
        start_ns: 1_795_279_132_000_000_000,
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("xprof_check_{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    let path = write_xspace(&dir, &run, tpusim_trace::Existing::Replace).unwrap();
    assert!(
        path.ends_with("plugins/profile/2026_11_21_16_38_52/simhost.xplane.pb"),
        "{}",
        path.display()
    );

    // What xprof must report: every op's per-run FLOPs and its total time.
    let sm = s.module(m);
    let mut expected = serde_json::Map::new();
    let n = f64::from(steps * devices);
    // Ops on the TensorCore line: its own ops and synchronous collectives.
    let on_ops_line = |e: &&tpusim_perf::Event| {
        e.dur_s > 0.0
            && (e.lane == Lane::TensorCore
                || (e.lane == Lane::Ici && tpusim_trace::is_sync_collective(sm, e.instr)))
    };
    // ... and the `-done` ops the TensorCore waits at, for the wait.
    let waits = tpusim_trace::done_waits(sm, &s);
    let timed: Vec<(tpusim_hlo::InstrId, f64)> = s
        .events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match waits.get(&i) {
            Some(&(_, wait)) => Some((e.instr, wait)),
            None => on_ops_line(&e).then_some((e.instr, e.dur_s)),
        })
        .collect();
    let busy_s: f64 = timed.iter().map(|t| t.1).sum();
    for &(instr, dur_s) in &timed {
        let name = sm.instr(instr).name.clone();
        let entry = expected.entry(name).or_insert_with(|| {
            let t = op_time(sm, &chip, instr);
            serde_json::json!({"flops": t.flops, "bytes": t.bytes_accessed.round(), "time_s": 0.0, "occurrences": 0,
                "category": tpusim_trace::hlo_category(sm, instr)})
        });
        let t = entry["time_s"].as_f64().unwrap() + dur_s * n;
        entry["time_s"] = t.into();
        entry["occurrences"] = (entry["occurrences"].as_u64().unwrap() + n as u64).into();
    }
    let (mxu_percent, hbm_percent) = tpusim_trace::utilization(&run);
    // xprof calls a JAX program training when an op's name scopes hold a
    // `transpose(` (the backward pass): our HloProto must carry the metadata.
    let is_training = sm.instrs.iter().any(|i| {
        i.metadata()
            .and_then(|md| md.op_name.as_deref())
            .is_some_and(|n| n.split('/').any(|scope| scope.starts_with("transpose(")))
    });
    let want = serde_json::json!({
        "is_training": is_training,
        "mxu_percent": mxu_percent,
        "hbm_percent": hbm_percent,
        "module": format!("{}({})", sm.name, tpusim_trace::PROGRAM_ID),
        "step_s": s.step_s,
        "busy_s": busy_s,
        "peak_bytes": mem.peak_bytes,
        "steps": steps,
        "devices": devices,
        "ops": expected,
    });
    let want_path = dir.join("expected.json");
    std::fs::write(&want_path, want.to_string()).unwrap();

    let python = tpusim_testtools::python_venv(env!("CARGO_TARGET_TMPDIR"), "xprof-venv", &[XPROF]);
    let out = Command::new(python)
        .arg(repo().join("tools/xprof_check.py"))
        .arg(&path)
        .arg(&want_path)
        .output()
        .expect("the venv's python runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "xprof check failed:\n{log}");
    eprintln!("{log}");
}

#[test]
fn xprof_reads_our_xspace_like_a_tpu_profile() {
    let file = repo().join("testdata/corpus/jax_generated/mlp_grad.compiled.hlo");
    let m = tpusim_hlo::parse_module(&std::fs::read_to_string(file).unwrap()).unwrap();
    check_with_xprof("mlp", &m, &LocalOnly, 1);
}

/// Every all-reduce takes 20 µs on the interconnect.
struct FixedComm;

impl CommModel for FixedComm {
    fn cost(&self, m: &tpusim_hlo::Module, id: tpusim_hlo::InstrId) -> Option<CommCost> {
        matches!(
            m.instr(id).opcode,
            tpusim_hlo::Opcode::AllReduceStart | tpusim_hlo::Opcode::AllReduce
        )
        .then(|| CommCost {
            time_s: 20e-6,
            ..CommCost::default()
        })
    }
}

/// Two devices, an async all-reduce on ICI overlapping a matmul: the
/// transfers go on a separate line and leave xprof's op statistics alone.
#[test]
fn async_transfers_and_several_devices_keep_the_op_statistics() {
    let text = r#"HloModule overlap

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
    let m = tpusim_hlo::parse_module(text).unwrap();
    check_with_xprof("async", &m, &FixedComm, 2);
}

/// Every all-reduce takes 200 µs on the interconnect: longer than the
/// matmul it overlaps.
struct SlowComm;

impl CommModel for SlowComm {
    fn cost(&self, m: &tpusim_hlo::Module, id: tpusim_hlo::InstrId) -> Option<CommCost> {
        FixedComm.cost(m, id).map(|c| CommCost {
            time_s: 200e-6,
            ..c
        })
    }
}

/// An async all-reduce that outlasts the compute before its `-done`: the
/// TensorCore waits at the `-done`, and xprof shows that wait as the
/// `-done` op's time (as on a TPU), so the ops fill the step with no idle.
#[test]
fn the_wait_at_an_async_done_is_the_done_ops_time() {
    let text = r#"HloModule exposed

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
    let m = tpusim_hlo::parse_module(text).unwrap();
    let chip = by_id("v5e").unwrap();
    let (s, _) = tpusim_perf::schedule_with_memory(&m, &chip, &SlowComm);
    let waits = tpusim_trace::done_waits(s.module(&m), &s);
    assert_eq!(waits.len(), 1, "one exposed wait");
    let (_, wait) = *waits.values().next().unwrap();
    let dot = s.busy_s(Lane::TensorCore);
    assert!(
        (dot + wait - s.step_s).abs() < 1e-12,
        "{dot} + {wait} != {}",
        s.step_s
    );
    check_with_xprof("exposed", &m, &SlowComm, 1);
}

/// A synchronous all-reduce holds the TensorCore: xprof lists it as an op
/// (category all-reduce) and counts its time as busy, not idle.
#[test]
fn a_synchronous_collective_is_an_op_not_idle_time() {
    let text = r#"HloModule sync

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[1024,1024] parameter(0)
  d = f32[1024,1024] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT ar = f32[1024,1024] all-reduce(d), replica_groups={}, to_apply=add
}
"#;
    let m = tpusim_hlo::parse_module(text).unwrap();
    check_with_xprof("sync", &m, &FixedComm, 2);
}

/// An async all-gather returns a tuple (its operand and the gathered
/// array): the gathered leaf, live across the matmul, is a buffer of the
/// HloProto's assignment (at its shape index), so memory_viewer's peak is
/// the predicted one.
#[test]
fn tuple_leaves_are_buffers_of_the_assignment() {
    let text = r#"HloModule gather, num_partitions=4

ENTRY e {
  w = f32[256,1024] parameter(0)
  x = f32[1024,1024] parameter(1)
  ags = (f32[256,1024], f32[1024,1024]) all-gather-start(w), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  d = f32[1024,1024] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ag = f32[1024,1024] all-gather-done(ags)
  ROOT r = f32[1024,1024] add(ag, d)
}
"#;
    let m = tpusim_hlo::parse_module(text).unwrap();
    let chip = by_id("v5e").unwrap();
    let (_, mem) = schedule_with_memory(&m, &chip, &FixedComm);
    assert!(
        mem.peak_buffers.iter().any(|b| b.name == "ags{1}"),
        "the gathered leaf is live at the peak: {:?}",
        mem.peak_buffers
    );
    check_with_xprof("tuple", &m, &FixedComm, 1);
}

/// Modules with the attributes XLA's `CreateFromProto` insists on (fusions,
/// loops, async collectives, composite calls with frontend attributes,
/// ragged dots, outfeed shapes, gathers, convolutions, sorts): xprof builds
/// an XLA module from each XSpace's HloProto and prints it.
#[test]
fn xprof_builds_an_xla_module_from_every_hlo_proto() {
    let files = [
        "jax_generated/mlp_grad.compiled.hlo",
        "xla/zml__xla__xla__hlo__translate__hlo_to_mhlo__tests__composite_call__part2.hlo",
        "xla/zml__xla__xla__hlo__translate__hlo_to_mhlo__tests__ragged_dot__part0.hlo",
        "xla/zml__xla__xla__service__copy_insertion_test.cc__NestedWhilesWithParamRoot__8.hlo",
        "xla/kek__xla__xla__translate__hlo_to_mhlo__tests__import_async.hlo",
        "xla/kek__xla__xla__translate__mhlo_to_lhlo_with_xla__tests__hlo_text_to_lhlo_no_opt__part31.hlo",
    ];
    let chip = by_id("v5p").unwrap();
    let mut paths = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let text = std::fs::read_to_string(repo().join("testdata/corpus").join(f)).unwrap();
        let m = tpusim_hlo::parse_module(&text).unwrap();
        let (s, mem) = schedule_with_memory(&m, &chip, &LocalOnly);
        let run = SimulatedRun {
            module: &m,
            chip: &chip,
            devices: vec![SimulatedDevice {
                ordinal: 0,
                schedule: &s,
                memory: Some(&mem),
            }],
            host: "simhost".into(),
            steps: 1,
            start_ns: 0,
        };
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("xprof_modules_{k}"));
        let _ = std::fs::remove_dir_all(&dir);
        paths.push(write_xspace(&dir, &run, tpusim_trace::Existing::Replace).unwrap());
    }
    let python = tpusim_testtools::python_venv(env!("CARGO_TARGET_TMPDIR"), "xprof-venv", &[XPROF]);
    let out = Command::new(python)
        .arg(repo().join("tools/xprof_check.py"))
        .arg("--modules")
        .args(&paths)
        .output()
        .expect("the venv's python runs");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "xprof check failed:\n{log}");
    assert_eq!(log.matches("lines of HLO").count(), files.len(), "{log}");
}
