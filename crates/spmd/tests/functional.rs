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
