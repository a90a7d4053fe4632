//! The performance model with collectives priced on a pod: async overlap,
//! the communication summary, the sharded corpus modules and a 1024-device
//! module.

mod common;

use std::path::Path;
use tpusim_arch::by_id;
use tpusim_perf::{analyze_with, Analysis, Bound};
use tpusim_pod::{default_shape, parse_shape, Network, Pod, PodModel};

fn on_pod(text: &str, chip: &str, shape: &str, net: Network) -> Analysis {
    let m = tpusim_hlo::parse_module(text).unwrap();
    let chip = by_id(chip).unwrap();
    let pod = Pod::for_chip(&chip, &parse_shape(shape).unwrap(), 1).unwrap();
    analyze_with(&m, &chip, &PodModel::new(pod, net))
}

/// An all-gather of `[8,8192] -> [32,8192]`-style shards over 4 devices with
/// `work` matmuls between its start and done (or a synchronous one).
fn overlap_module(work: usize, is_async: bool) -> String {
    let mut s = String::from(
        "HloModule m, num_partitions=4\n\nENTRY e {\n  w = bf16[2048,8192] parameter(0)\n  \
         x = bf16[1024,1024] parameter(1)\n",
    );
    if is_async {
        s += "  ag = (bf16[2048,8192], bf16[8192,8192]) all-gather-start(w), channel_id=1, \
              replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true\n";
    } else {
        s += "  ag = bf16[8192,8192] all-gather(w), channel_id=1, replica_groups={{0,1,2,3}}, \
              dimensions={0}, use_global_device_ids=true\n";
    }
    let mut prev = "x".to_string();
    for k in 0..work {
        s += &format!(
            "  d{k} = bf16[1024,1024] dot({prev}, x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
        );
        prev = format!("d{k}");
    }
    if is_async {
        s += "  g = bf16[8192,8192] all-gather-done(ag)\n";
    } else {
        s += "  g = bf16[8192,8192] copy(ag)\n";
    }
    s += &format!("  ROOT t = (bf16[8192,8192], bf16[1024,1024]) tuple(g, {prev})\n}}\n");
    s
}

#[test]
fn async_collectives_overlap_compute() {
    let sync = on_pod(&overlap_module(4, false), "v5e", "4x1", Network::Analytic);
    let comm = sync.communication.communication_s;
    assert!(comm > 0.0);
    // Synchronous: the whole transfer is exposed.
    assert_eq!(sync.communication.exposed_communication_s, comm);
    let dot = sync.ops.iter().find(|o| o.name == "d0").unwrap().time_s;
    for work in [0usize, 4, 400] {
        let a = on_pod(&overlap_module(work, true), "v5e", "4x1", Network::Analytic);
        let c = &a.communication;
        assert!((c.communication_s - comm).abs() < 1e-12);
        let want = (comm - work as f64 * dot).max(0.0);
        assert!(
            (c.exposed_communication_s - want).abs() < 1e-9,
            "{work}: {} vs {want}",
            c.exposed_communication_s
        );
        let coll = &c.collectives[0];
        assert!(coll.is_async && coll.exposed_s == c.exposed_communication_s);
        // The step is compute plus what the network did not hide.
        assert!((a.step_time_s - (c.compute_s + c.exposed_communication_s)).abs() < 1e-12);
        assert!(a.ops.iter().any(|o| o.bound == Bound::Network) || want == 0.0);
    }
}

#[test]
fn json_fields() {
    let a = on_pod(&overlap_module(2, true), "v5e", "4x1", Network::Analytic);
    let v = serde_json::to_value(&a).unwrap();
    for key in [
        "compute_s",
        "communication_s",
        "exposed_communication_s",
        "collectives",
        "network",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let c = &v["collectives"][0];
    for key in [
        "name",
        "kind",
        "bytes",
        "group_size",
        "axes",
        "time_s",
        "exposed_s",
    ] {
        assert!(c.get(key).is_some(), "missing collectives[].{key}");
    }
    assert_eq!(c["kind"], "all-gather");
    assert_eq!(c["axes"], serde_json::json!(["x"]));
    assert_eq!(v["devices"], 4);
    // The JSON reads back.
    let back: Analysis = serde_json::from_value(v).unwrap();
    assert_eq!(back.communication, a.communication);
}

fn corpus(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/corpus")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Sharded corpus modules: every collective is priced by both network
/// models on the default topology, with groups of the expected size.
#[test]
fn sharded_corpus_modules() {
    let cases: &[(&str, &[(&str, u32)])] = &[
        ("jax_cases/dp_sum_loss/post.hlo", &[("all-reduce", 8)]),
        ("jax_cases/tp_column_row/post.hlo", &[("all-reduce", 4)]),
        ("jax_generated/sharded_matmul.compiled.hlo", &[("all-reduce", 4)]),
        (
            "jax_generated/shard_map_collectives.compiled.hlo",
            &[
                ("all-reduce", 4),
                ("all-gather", 2),
                ("reduce-scatter", 4),
                ("collective-permute", 2),
                ("all-to-all", 4),
            ],
        ),
        (
            "jax_generated/transformer_train_step_sharded.compiled.hlo",
            &[("all-reduce", 4)],
        ),
        (
            "xla/zml__xla__xla__tools__benchmarks__hlo__hlo_llama31_8b_bf16_1x8.hlo",
            &[("all-reduce", 8)],
        ),
        (
            "xla/zml__xla__xla__service__latency_hiding_scheduler_test.cc__AllGatherAsyncBalance__2.hlo",
            &[],
        ),
        (
            "xla/zml__xla__xla__service__latency_hiding_scheduler_test.cc__AllToAllAsyncBalance__29.hlo",
            &[("all-to-all", 2)],
        ),
    ];
    for chip_id in ["v5e", "v5p"] {
        let chip = by_id(chip_id).unwrap();
        for (file, want) in cases {
            let m = tpusim_hlo::parse_module(&corpus(file)).unwrap();
            let devices = tpusim_pod::collective::devices_used(&m);
            let shape = default_shape(&chip, devices);
            for net in [Network::Analytic, Network::Sim] {
                let pod = Pod::for_chip(&chip, &shape, 1).unwrap();
                let model = PodModel::new(pod, net);
                model.check(&m).unwrap();
                let a = analyze_with(&m, &chip, &model);
                let c = &a.communication;
                assert_eq!(u64::from(a.devices), devices, "{file}");
                assert!(
                    !a.assumptions
                        .iter()
                        .any(|s| s.contains("local memory traffic only")),
                    "{file}: {:?}",
                    a.assumptions
                );
                for (kind, size) in *want {
                    let s = c
                        .collectives
                        .iter()
                        .find(|s| s.kind == *kind && s.group_size == *size)
                        .unwrap_or_else(|| panic!("{file}: no {kind} over {size}"));
                    assert!(s.time_s > 0.0 && s.time_s.is_finite(), "{file} {kind}");
                }
                assert!(c.exposed_communication_s <= c.communication_s + 1e-15);
                assert!(c.compute_s >= 0.0 && a.step_time_s.is_finite());
                if !c.collectives.is_empty() {
                    assert!(c.communication_s > 0.0, "{file}");
                }
            }
        }
    }
}

#[test]
fn async_start_wrappers_are_collectives() {
    // Two async all-to-alls done back to back: nothing hides them.
    let text = corpus(
        "xla/zml__xla__xla__service__latency_hiding_scheduler_test.cc__AllToAllAsyncBalance__29.hlo",
    );
    let a = on_pod(&text, "v5e", "2x1", Network::Analytic);
    let c = &a.communication;
    assert_eq!(c.collectives.len(), 2);
    assert!(c
        .collectives
        .iter()
        .all(|s| s.is_async && s.kind == "all-to-all"));
    assert!((c.exposed_communication_s - c.communication_s).abs() < 1e-15);
}

#[test]
fn thousand_device_module() {
    let text = common::sharded_module(2);
    let a = on_pod(&text, "v5p", "8x8x16", Network::Analytic);
    let c = &a.communication;
    assert_eq!(a.devices, 1024);
    let kinds: Vec<&str> = c.collectives.iter().map(|s| s.kind.as_str()).collect();
    for k in [
        "all-gather",
        "all-reduce",
        "reduce-scatter",
        "collective-permute",
    ] {
        assert!(kinds.contains(&k), "{kinds:?}");
    }
    let fsdp = c.collectives.iter().find(|s| s.name == "ags0").unwrap();
    assert_eq!(
        (fsdp.group_size, fsdp.axes.clone()),
        (1024, vec!["x".into(), "y".into(), "z".into()])
    );
    // [128,8]<=[1024]: 8 consecutive ids, a whole x axis of 8 (it wraps).
    let tp = c.collectives.iter().find(|s| s.name == "ar0").unwrap();
    assert_eq!((tp.group_size, tp.axes.clone()), (8, vec!["x".into()]));
    // [128,8]<=[128,8]T(1,0): stride 128 ids, i.e. 2 along y and z.
    let rs = c.collectives.iter().find(|s| s.name == "rs0").unwrap();
    assert_eq!(rs.group_size, 8);
    assert!(rs.axes.iter().all(|x| x != "x"), "{:?}", rs.axes);
    assert!(c.exposed_communication_s <= c.communication_s);
}

#[test]
fn pods_beyond_the_device_limit_are_refused_before_anything_is_built() {
    let chip = by_id("v5e").expect("v5e");
    let too_many = Pod::unchecked(&chip, &[16, 16], u32::MAX).expect_err("2^40 chips");
    assert!(
        too_many.to_string().contains("at most 262144"),
        "{too_many}"
    );
    assert!(Pod::unchecked(&chip, &[16, 16], 0).is_err(), "zero slices");
    let largest = (tpusim_hlo::MAX_DEVICES / 256) as u32;
    assert!(Pod::unchecked(&chip, &[16, 16], largest).is_ok());
    assert!(Pod::unchecked(&chip, &[16, 16], largest + 1).is_err());
}

/// Three alike all-reduces across two slices: the network's note on DCN is
/// one line naming all three, not one line each; a synchronous one that no
/// compute hides gets the ranked hint to make it asynchronous.
#[test]
fn network_notes_name_every_collective_once() {
    let mut text = String::from(
        "HloModule m, num_partitions=8\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  p = f32[1024,1024] parameter(0)\n",
    );
    for k in 0..3 {
        text += &format!(
            "  ar{k} = f32[1024,1024] all-reduce(p), channel_id={}, replica_groups={{{{0,4}},{{1,5}},{{2,6}},{{3,7}}}}, use_global_device_ids=true, to_apply=add\n",
            k + 1
        );
    }
    text += "  ROOT t = (f32[1024,1024], f32[1024,1024], f32[1024,1024]) tuple(ar0, ar1, ar2)\n}\n";
    let m = tpusim_hlo::parse_module(&text).unwrap();
    let chip = by_id("v5e").unwrap();
    let pod = Pod::for_chip(&chip, &parse_shape("2x2").unwrap(), 2).unwrap();
    let a = analyze_with(&m, &chip, &PodModel::new(pod, Network::Analytic));
    let dcn: Vec<&String> = a.hints.iter().filter(|h| h.contains("over DCN")).collect();
    let note = dcn
        .iter()
        .find(|h| h.contains("slices, "))
        .unwrap_or_else(|| panic!("{:?}", a.hints));
    assert!(
        note.starts_with("ar0, ar1 and ar2: over DCN across 2 slices"),
        "{note}"
    );
    assert_eq!(
        a.hints.iter().filter(|h| h.contains(" slices, ")).count(),
        1,
        "{:?}",
        a.hints
    );
    assert!(
        a.hints[0].starts_with("all-reduces over torus axes dcn (groups of 2)")
            && a.hints[0].contains("synchronously"),
        "{:?}",
        a.hints
    );
}
