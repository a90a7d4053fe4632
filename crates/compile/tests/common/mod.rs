//! Helpers shared by the compile crate's integration tests.

use tpusim_compile::{compact, Changed};
use tpusim_hlo::{parse_module, verify, Module};

/// Parses a test module that must verify.
pub fn parse(text: &str) -> Module {
    let m = parse_module(text).expect("test module parses");
    verify(&m).expect("test module verifies");
    m
}

/// Runs `pass`, compacts and verifies, printing the module if it is invalid.
pub fn checked(m: &mut Module, pass: impl FnOnce(&mut Module) -> Changed) -> Changed {
    let c = pass(m);
    compact(m);
    if let Err(e) = verify(m) {
        panic!(
            "invalid after pass: {}\n{}",
            e[0].message,
            tpusim_hlo::print_module(m)
        );
    }
    c
}
