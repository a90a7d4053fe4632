//! Functional exactness: every sharded JAX case partitioned by tpusim, run on N
//! simulated devices with the interpreter (global arrays split by the parameter
//! shardings, results assembled by the result shardings), gives JAX's outputs.

mod common;

use common::{case_dirs, run_case};

#[test]
fn shared_corpus_sharded_cases_match_jax() {
    let cases = case_dirs("corpus/jax_cases", true);
    assert!(cases.len() >= 2, "sharded corpus cases missing");
    let mut failures = Vec::new();
    for dir in &cases {
        if let Err(e) = run_case(dir) {
            failures.push(format!("{}: {e}", dir.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The interpreter's shard_map and sharded-jit cases (Shardy manual regions,
/// psum/pmax/all_gather/all_to_all/ppermute inside them, uneven constraints).
#[test]
fn interp_spmd_cases_match_jax() {
    let mut dirs = case_dirs("interp_cases", false);
    dirs.retain(|d| {
        d.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("spmd_"))
    });
    assert!(dirs.len() >= 10, "spmd interpreter cases missing");
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|d| run_case(d).err().map(|e| format!("{}: {e}", d.display())))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
