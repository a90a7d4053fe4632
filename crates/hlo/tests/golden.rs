//! Snapshot tests of the canonical printer over testdata/golden/*.hlo.
//! Bless changes with `INSTA_UPDATE=always cargo test` (or `cargo insta review`).

use tpusim_hlo::{parse_modules, print_module};

#[test]
fn canonical_printing() {
    insta::glob!("../../../testdata/golden", "*.hlo", |path| {
        let text = std::fs::read_to_string(path).unwrap();
        let modules = parse_modules(&text).unwrap();
        let printed: String = modules.iter().map(print_module).collect();
        insta::assert_snapshot!(printed);
    });
}
