//! Writing results to stdout and diagnostics to stderr.
//!
//! A closed pipe (`tpusim check ... | head`) is not an error of the work being
//! done: output stops quietly and the exit code still reports the work's
//! result. Any other failed write to stdout (a full disk, `> /dev/full`) is an
//! error: the first one is remembered and [`finish`] turns it into exit 1, so
//! a truncated result never looks like a success. Diagnostics on a closed
//! stderr are dropped rather than panicking.

use std::io::{ErrorKind, Write};
use std::sync::Mutex;

/// The first stdout write failure other than a closed pipe.
static STDOUT_FAILURE: Mutex<Option<String>> = Mutex::new(None);

fn remember(result: std::io::Result<()>) {
    let Err(e) = result else { return };
    if e.kind() == ErrorKind::BrokenPipe {
        return;
    }
    let mut failure = STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner());
    failure.get_or_insert_with(|| e.to_string());
}

/// Writes `text` and a newline to stdout.
pub fn line(text: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    remember(writeln!(out, "{text}"));
}

/// Writes `text` as is to stdout.
pub fn raw(text: &str) {
    remember(std::io::stdout().lock().write_all(text.as_bytes()));
}

/// Writes a diagnostic line to stderr; a closed stderr drops it.
pub fn diag(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Flushes stdout; the error of the first failed write, if any.
pub fn finish() -> Result<(), String> {
    remember(std::io::stdout().lock().flush());
    let failure = STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner());
    match failure.as_ref() {
        Some(e) => Err(format!("cannot write the output to stdout: {e}")),
        None => Ok(()),
    }
}

/// `e` and its causes as one line, `outer: cause: ...`, each cause once: a
/// library error that already quotes its source (`cannot read X: No such
/// file`) would otherwise have that source printed a second time.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_chain_names_each_cause_once() {
        let os = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        #[derive(Debug)]
        struct Quoting(std::io::Error);
        impl std::fmt::Display for Quoting {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot read x.toml: {}", self.0)
            }
        }
        impl std::error::Error for Quoting {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Quoting(os)).context("loading the chip");
        assert_eq!(
            super::error_chain(&e),
            "loading the chip: cannot read x.toml: No such file"
        );
    }
}
