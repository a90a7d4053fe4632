//! Writing results to stdout. A closed pipe (`tpusim check ... | head`) is not
//! an error of the work being done: output stops quietly, the exit code still
//! reports the work's result, and nothing panics.

use std::io::Write;

/// Writes `text` and a newline to stdout, ignoring a closed pipe.
pub fn line(text: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
}

/// Writes `text` as is to stdout, ignoring a closed pipe.
pub fn raw(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
