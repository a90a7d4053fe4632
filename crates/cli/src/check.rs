//! `tpusim check`: parse and verify files, one status line per module.

use crate::input;
use crate::out;
use anyhow::Result;
use tpusim_hlo::{Module, SourceMap};

#[derive(clap::Args)]
pub struct Args {
    /// HLO text files (`-` for stdin); a file may hold several modules
    #[arg(required = true)]
    files: Vec<String>,
}

pub fn run(args: &Args) -> Result<bool> {
    let mut all_ok = true;
    for path in &args.files {
        // A panic is a bug, but it must not escape as exit code 101.
        let ok = std::panic::catch_unwind(|| check_file(path)).unwrap_or_else(|_| {
            out::diag(format_args!(
                "error: {}: internal error while checking (this is a tpusim bug)",
                input::display_name(path)
            ));
            false
        });
        all_ok &= ok;
    }
    Ok(all_ok)
}

fn check_file(path: &str) -> bool {
    let text = match input::read_text(path) {
        Ok(t) => t,
        Err(e) => {
            out::diag(format_args!("error: {}", out::error_chain(&e)));
            return false;
        }
    };
    let modules = match input::parse(path, &text) {
        Ok(m) => m,
        Err(diag) => {
            out::diag(format_args!("{diag}"));
            return false;
        }
    };
    let mut ok = true;
    for (m, spans) in &modules {
        ok &= report_module(path, &text, m, spans);
    }
    // Freeing a large module takes longer than the OS reclaiming it at exit.
    std::mem::forget(modules);
    ok
}

fn report_module(path: &str, text: &str, m: &Module, spans: &SourceMap) -> bool {
    match tpusim_hlo::verifier::verify(m) {
        Ok(()) => {
            let name = if m.name.is_empty() {
                "<unnamed>"
            } else {
                &m.name
            };
            out::line(format_args!(
                "ok {name} ({} computations, {} instructions)",
                m.visible_computation_count(),
                m.visible_instruction_count()
            ));
            true
        }
        Err(errors) => {
            for e in &errors {
                out::diag(format_args!(
                    "{}",
                    e.render(input::display_name(path), text, m, spans)
                ));
            }
            false
        }
    }
}
