//! While-loop trip counts on real modules: recorded by XLA, inferred from the
//! induction variable, or reported unknown with a reason.

use std::path::Path;
use tpusim_hlo::analysis::{inferred_trip_count, while_trip_count, TripCount};
use tpusim_hlo::{parse_modules, Module, Opcode};

fn load(rel: &str) -> Vec<Module> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/corpus")
        .join(rel);
    parse_modules(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn trip_counts(rel: &str) -> Vec<TripCount> {
    load(rel)
        .iter()
        .flat_map(|m| {
            m.instrs
                .iter()
                .enumerate()
                .filter(|(_, i)| i.opcode == Opcode::While)
                .map(|(k, _)| while_trip_count(m, tpusim_hlo::InstrId(k as u32)))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn scan_of_ten_steps() {
    // jax.lax.scan over 10 elements: XLA records 10 after optimization, and the
    // unoptimized loop's counter runs 0..10.
    assert_eq!(
        trip_counts("jax_generated/scan_while.compiled.hlo"),
        vec![TripCount::Known(10)]
    );
    assert_eq!(
        trip_counts("jax_generated/scan_while.lowered.hlo"),
        vec![TripCount::Inferred(10)]
    );
}

#[test]
fn recorded_trip_count_is_read_from_backend_config() {
    let counts = trip_counts(
        "xla/zml__xla__xla__tools__multihost_hlo_runner__data__while_with_known_trip_count.hlo",
    );
    assert_eq!(counts, vec![TripCount::Known(7)]);
}

#[test]
fn data_dependent_loops_are_unknown() {
    // fori_loop with a bound passed as an argument, and a loop on a float value.
    for rel in [
        "jax_generated/while_fori.lowered.hlo",
        "jax_cases/while_count/pre.hlo",
    ] {
        let counts = trip_counts(rel);
        assert_eq!(counts.len(), 1, "{rel}");
        assert!(
            matches!(counts[0], TripCount::Unknown(_)),
            "{rel}: {:?}",
            counts[0]
        );
    }
}

#[test]
fn escaped_string_backend_config_is_read_too() {
    let counts = trip_counts("xla/zml__xla__xla__service__collective_pipeliner_test.cc__TransformRecvSendBackwards__39.hlo");
    assert_eq!(counts, vec![TripCount::Known(25)]);
}

#[test]
fn inference_agrees_with_every_count_xla_recorded() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/corpus");
    let (mut known, mut agreed) = (0, 0);
    let dirs = ["xla", "jax_generated"].map(|d| corpus.join(d));
    let cases = std::fs::read_dir(corpus.join("jax_cases"))
        .unwrap()
        .map(|e| e.unwrap().path());
    let files = dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()))
        .chain(cases.map(|c| c.join("post.hlo")));
    for path in files {
        if path.extension().is_none_or(|e| e != "hlo") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for m in parse_modules(&text).unwrap() {
            for (k, ins) in m.instrs.iter().enumerate() {
                let id = tpusim_hlo::InstrId(k as u32);
                if ins.opcode != Opcode::While {
                    continue;
                }
                if let TripCount::Known(n) = while_trip_count(&m, id) {
                    known += 1;
                    if let Ok(inferred) = inferred_trip_count(&m, id) {
                        assert_eq!(inferred, n, "{}", ins.name);
                        agreed += 1;
                    }
                }
            }
        }
    }
    assert!(known >= 4 && agreed >= 2, "known {known}, agreed {agreed}");
}
