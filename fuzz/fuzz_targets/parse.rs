//! Fuzz target: the HLO parser must never panic or hang on any bytes, its
//! errors must render, and whatever it accepts must print to text that parses
//! again and prints identically (print is a fixpoint).
//!
//! Run with `cargo +nightly fuzz run parse` from the repository root
//! (seed it with small files from testdata/corpus, see fuzz/README.md).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tpusim_hlo::{parse_module, parse_modules, print_module};

fn check(text: &str) {
    let modules = match parse_modules(text) {
        Ok(m) => m,
        Err(e) => {
            // Errors point into the source and render without panicking.
            assert!(e.offset <= text.len(), "offset {} past the end", e.offset);
            let rendered = e.render("fuzz.hlo", text);
            assert!(rendered.contains("fuzz.hlo:"), "{rendered}");
            return;
        }
    };
    for m in &modules {
        let printed = print_module(m);
        let reparsed = parse_module(&printed).unwrap_or_else(|e| {
            panic!(
                "printed module does not parse again: {}\n--- input ---\n{text}\n--- printed ---\n{printed}",
                e.render("<printed>", &printed)
            )
        });
        let again = print_module(&reparsed);
        assert_eq!(
            printed, again,
            "print is not a fixpoint\n--- input ---\n{text}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    match std::str::from_utf8(data) {
        Ok(text) => check(text),
        Err(_) => check(&String::from_utf8_lossy(data)),
    }
});
