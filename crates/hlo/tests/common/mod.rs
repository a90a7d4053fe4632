//! Checks the pass tests share.

use tpusim_hlo::{parse_module, print_module, verifier::verify, Module};

/// `m` verifies, and its printed text parses back to the same text.
pub fn assert_verifies_and_reprints(m: &Module, label: &str) {
    verify(m).unwrap_or_else(|e| panic!("{}", e[0].message));
    let printed = print_module(m);
    let back = parse_module(&printed).unwrap_or_else(|e| panic!("{}", e.render(label, &printed)));
    assert_eq!(print_module(&back), printed);
}
