//! Helpers shared by the hand-written semantics tests: run a module body with
//! no arguments and read back its result leaves.

#![allow(dead_code)]

pub mod compare;

use tpusim_interp::{execute, Array, InterpError, Value};

/// Executes `body` (computations, one of them ENTRY) as a module with no arguments.
pub fn run(body: &str) -> Result<Vec<Value>, InterpError> {
    let text = format!("HloModule t\n\n{body}\n");
    let m = tpusim_hlo::parse_module(&text).expect("test module parses");
    execute(&m, vec![])
}

/// The result leaves of `body` as arrays.
pub fn arrays(body: &str) -> Vec<Array> {
    run(body)
        .expect("executes")
        .into_iter()
        .map(|v| match v {
            Value::Array(a) => a,
            Value::Tuple(t) => panic!("tuple leaf {t:?}"),
        })
        .collect()
}
