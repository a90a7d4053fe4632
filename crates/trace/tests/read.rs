//! The profile reader against JAX's own Chrome trace of the same captures
//! (expected.json, written by tools/gen_profiles.py), and round trips of
//! our own XSpace.

use std::path::{Path, PathBuf};
use tpusim_arch::by_id;
use tpusim_perf::{schedule_with_memory, Lane, LocalOnly};
use tpusim_trace::{
    find_xplanes, read_profile, write_xspace, ProfileSummary, SimulatedDevice, SimulatedRun,
    TraceError,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every op and step JAX's Chrome trace lists, with the same counts and
/// times (the JSON has µs with 3 decimals).
fn check_against_chrome(summary: &ProfileSummary, expected: &Path) {
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(expected).unwrap()).unwrap();
    let ops = want["ops"].as_object().unwrap();
    assert_eq!(summary.ops.len(), ops.len(), "{:?}", summary.ops);
    for (key, w) in ops {
        let (module, name) = key.split_once('/').unwrap();
        let got = summary
            .ops
            .iter()
            .find(|o| o.name == name && o.module.as_deref() == Some(module))
            .unwrap_or_else(|| panic!("{key} missing"));
        assert_eq!(got.occurrences, w["occurrences"].as_u64().unwrap(), "{key}");
        let total = w["total_us"].as_f64().unwrap() * 1e-6;
        assert!(
            (got.total_s - total).abs() <= 1e-9 * got.occurrences as f64,
            "{key}: {} vs {total}",
            got.total_s
        );
        assert!((got.avg_s * got.occurrences as f64 - got.total_s).abs() < 1e-12);
    }
    let steps = want["steps"].as_array().unwrap();
    assert_eq!(summary.steps.len(), steps.len());
    for (got, w) in summary.steps.iter().zip(steps) {
        assert_eq!(got.step_num, w["step_num"].as_i64());
        assert_eq!(got.name, w["name"].as_str().unwrap());
        let d = w["duration_us"].as_f64().unwrap() * 1e-6;
        assert!(
            (got.duration_s - d).abs() <= 1e-9,
            "{} vs {d}",
            got.duration_s
        );
    }
    let percent: f64 = summary.ops.iter().map(|o| o.percent).sum();
    assert!((percent - 100.0).abs() < 1e-6, "{percent}");
}

#[test]
fn the_shared_jax_cpu_sample_matches_its_chrome_trace() {
    let dir = repo().join("testdata/profiles/jax_cpu");
    let s = read_profile(&dir.join("vm.xplane.pb")).unwrap();
    check_against_chrome(&s, &dir.join("expected.json"));
    let top = &s.ops[0];
    assert_eq!((top.name.as_str(), top.occurrences), ("ynn_fusion", 3));
    assert!(s.idle.count > 0 && s.idle.total_s > 0.0);
}

#[test]
fn a_log_dir_is_read_through_its_newest_run() {
    let dir = repo().join("testdata/profiles/jax_mlp");
    let s = read_profile(&dir).unwrap();
    assert_eq!(s.files.len(), 1);
    check_against_chrome(&s, &dir.join("expected.json"));
    // The fori_loop's while holds its body's ops: its self time excludes them.
    let w = s.ops.iter().find(|o| o.name.starts_with("while")).unwrap();
    assert!(w.self_s < w.total_s, "{w:?}");
}

#[test]
fn xprof_cache_files_and_garbage_are_handled() {
    let src = repo().join("testdata/profiles/jax_cpu/vm.xplane.pb");
    let run = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("reader_cache/plugins/profile/2026_01_01_00_00_00");
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).unwrap();
    std::fs::copy(&src, run.join("vm.xplane.pb")).unwrap();
    for cache in [
        "vm.SSTABLE",
        "vm.metadata.SSTABLE",
        "ALL_HOSTS.op_stats_v2.pb",
        "jit_step(6).hlo_proto.pb",
    ] {
        std::fs::write(run.join(cache), b"not a profile").unwrap();
    }
    let logdir = run.parent().unwrap().parent().unwrap().parent().unwrap();
    assert_eq!(
        find_xplanes(logdir).unwrap(),
        vec![run.join("vm.xplane.pb")]
    );
    assert_eq!(find_xplanes(&run).unwrap(), vec![run.join("vm.xplane.pb")]);
    let garbage = run.join("bad.xplane.pb");
    std::fs::write(&garbage, [0xff, 0xff, 0xff, 0x01, 0x02]).unwrap();
    assert!(matches!(
        read_profile(&garbage),
        Err(TraceError::Decode { .. })
    ));
    let empty = run.parent().unwrap().join("nothing");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(matches!(
        read_profile(&empty),
        Err(TraceError::NoProfile(_))
    ));
}

#[test]
fn our_xspace_reads_back_as_the_schedule() {
    let file = repo().join("testdata/corpus/jax_generated/mlp_grad.compiled.hlo");
    let m = tpusim_hlo::parse_module(&std::fs::read_to_string(file).unwrap()).unwrap();
    let chip = by_id("v5e").unwrap();
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
        steps: 2,
        start_ns: 0,
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("roundtrip");
    let _ = std::fs::remove_dir_all(&dir);
    write_xspace(&dir, &run, tpusim_trace::Existing::Replace).unwrap();
    let back = read_profile(&dir).unwrap();
    let sm = s.module(&m);
    let ops: Vec<_> = s
        .events
        .iter()
        .filter(|e| e.lane == Lane::TensorCore && e.dur_s > 0.0)
        .collect();
    let runs: u64 = back.ops.iter().map(|o| o.occurrences).sum();
    assert_eq!(runs, 2 * ops.len() as u64);
    for e in ops {
        let name = &sm.instr(e.instr).name;
        assert!(back.ops.iter().any(|o| &o.name == name), "{name}");
    }
    assert!(
        (back.op_time_s - 2.0 * s.step_s).abs() < 1e-9,
        "{}",
        back.op_time_s
    );
    assert_eq!(back.steps.len(), 2);
    assert!((back.steps[1].start_s - s.step_s).abs() < 1e-11);
    assert!((back.steps[0].duration_s - s.step_s).abs() < 1e-11);
    // Ops run back to back on the simulated TensorCore.
    assert_eq!(back.idle.count, 0, "{:?}", back.idle.longest);
}

mod synthetic {
    use std::collections::BTreeMap;
    use tpusim_trace::summarize;
    use tpusim_trace::xplane::{
        x_event, x_stat, XEvent, XEventMetadata, XLine, XPlane, XSpace, XStat, XStatMetadata,
    };

    fn stat(id: i64, v: x_stat::Value) -> XStat {
        XStat {
            metadata_id: id,
            value: Some(v),
        }
    }

    fn ev(md: i64, offset_ps: i64, dur: i64, stats: Vec<XStat>) -> XEvent {
        XEvent {
            metadata_id: md,
            data: Some(x_event::Data::OffsetPs(offset_ps)),
            duration_ps: dur,
            stats,
        }
    }

    /// What real files do: id-0 planes, negative line ids, a stat given twice
    /// (the first wins), names as references, aggregated events.
    #[test]
    fn tolerates_what_real_files_do() {
        let names = [
            "hlo_op",
            "hlo_module",
            "fusion.7",
            "jit_f",
            "step_num",
            "bogus",
        ];
        let stat_metadata: BTreeMap<i64, XStatMetadata> = names
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let id = k as i64 + 1;
                (
                    id,
                    XStatMetadata {
                        id,
                        name: n.to_string(),
                        description: String::new(),
                    },
                )
            })
            .collect();
        let event_metadata: BTreeMap<i64, XEventMetadata> = [(1, "thunk"), (2, "train")]
            .into_iter()
            .map(|(id, n)| {
                (
                    id,
                    XEventMetadata {
                        id,
                        name: n.into(),
                        ..XEventMetadata::default()
                    },
                )
            })
            .collect();
        let op_stats = || {
            vec![
                stat(1, x_stat::Value::RefValue(3)),
                stat(1, x_stat::Value::StrValue("ignored".into())),
                stat(2, x_stat::Value::RefValue(4)),
                stat(99, x_stat::Value::Int64Value(1)),
            ]
        };
        let line = XLine {
            id: -4_920_069_173_187_870_779,
            name: "worker".into(),
            timestamp_ns: 1000,
            events: vec![
                ev(
                    2,
                    0,
                    10_000_000,
                    vec![stat(5, x_stat::Value::Int64Value(0))],
                ),
                ev(1, 1_000_000, 2_000_000, op_stats()),
                ev(1, 5_000_000, 3_000_000, op_stats()),
                XEvent {
                    metadata_id: 1,
                    data: Some(x_event::Data::NumOccurrences(4)),
                    duration_ps: 1_000_000,
                    stats: op_stats(),
                },
            ],
            ..XLine::default()
        };
        let plane = XPlane {
            id: 0,
            name: "/host:CPU".into(),
            lines: vec![line],
            event_metadata,
            stat_metadata,
            stats: Vec::new(),
        };
        let space = XSpace {
            planes: vec![plane.clone(), XPlane { ..plane }],
            ..XSpace::default()
        };
        let s = summarize(&[space]);
        assert_eq!(s.ops.len(), 1, "{:?}", s.ops);
        let op = &s.ops[0];
        assert_eq!(op.name, "fusion.7");
        assert_eq!(op.module.as_deref(), Some("jit_f"));
        // Two planes, each: two timed runs and four aggregated ones.
        assert_eq!(op.occurrences, 2 * 6);
        assert!((op.total_s - 2.0 * 9e-6).abs() < 1e-15);
        assert_eq!(s.steps.len(), 2);
        assert_eq!(s.steps[0].step_num, Some(0));
        assert!((s.steps[0].start_s - 1e-6).abs() < 1e-15);
        // One gap per plane: 3 µs to 5 µs after the line's 1 µs origin.
        assert_eq!(s.idle.count, 2);
        assert!((s.idle.total_s - 4e-6).abs() < 1e-15);
    }
}
