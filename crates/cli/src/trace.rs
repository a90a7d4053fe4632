//! `tpusim trace`: profiler views of a simulated run, written to a folder:
//! `trace.json.gz` (Chrome trace for ui.perfetto.dev), `report.html` (a
//! self-contained report) and `plugins/profile/<run>/<host>.xplane.pb`, the
//! XSpace that `xprof --logdir DIR` reads.

use crate::analyze::{ChipArgs, PodArgs};
use crate::input;
use crate::out;
use anyhow::Result;
use std::path::{Path, PathBuf};
use tpusim_perf::{CommModel, LocalOnly};
use tpusim_views::Views;

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin); a file with several modules gets a folder per module
    file: String,
    #[command(flatten)]
    chip: ChipArgs,
    /// Folder to write the views into (created if missing)
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    out: PathBuf,
    #[command(flatten)]
    pod: PodArgs,
}

pub fn run(args: &Args) -> Result<bool> {
    let chip = args.chip.load()?;
    let modules = input::load(&args.file)?;
    let several = modules.len() > 1;
    for (m, _) in modules {
        let (m, note) = input::partition_if_needed(m)?;
        let m = &m;
        let dir = if several {
            args.out.join(folder_name(&m.name))
        } else {
            args.out.clone()
        };
        let pod = args.pod.model(&chip, m)?;
        let comm: &dyn CommModel = match &pod {
            Some(p) => p,
            None => &LocalOnly,
        };
        let views = crate::progress::with_spinner("simulating", || -> Result<Views> {
            let mut analysis = tpusim_perf::analyze_with(m, &chip, comm);
            analysis.assumptions.splice(0..0, note.iter().cloned());
            write_views(m, &chip, &analysis, comm, &dir)
        })?;
        print_views(&views, &dir);
    }
    Ok(true)
}

/// Writes every view of one simulated run into `dir`.
pub fn write_views(
    m: &tpusim_hlo::Module,
    chip: &tpusim_arch::Chip,
    analysis: &tpusim_perf::Analysis,
    comm: &dyn CommModel,
    dir: &Path,
) -> Result<Views> {
    let generator = format!("tpusim {}", env!("CARGO_PKG_VERSION"));
    Ok(tpusim_views::write_views(
        m, chip, analysis, comm, dir, &generator,
    )?)
}

/// Tells the user what was written and how to open it.
pub fn print_views(v: &Views, dir: &Path) {
    out::line(format!(
        "wrote {} ({} events): drag it into https://ui.perfetto.dev",
        v.trace.display(),
        v.trace_events
    ));
    if let Some(note) = &v.trace_note {
        out::line(format!("  note: {note}"));
    }
    out::line(format!(
        "wrote {}: open it in a browser",
        v.report.display()
    ));
    out::line(format!(
        "wrote {}: run `xprof --logdir {}` (pip install xprof) and open http://localhost:8791",
        v.xspace.display(),
        dir.display()
    ));
}

/// A module name as a folder name: letters, digits, `-`, `_` and `.` kept.
fn folder_name(module: &str) -> String {
    let s: String = module
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("module_{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_are_safe() {
        assert_eq!(folder_name("jit_step"), "jit_step");
        assert_eq!(folder_name("a/b c"), "a_b_c");
        assert_eq!(folder_name(".."), "module_..");
        assert_eq!(folder_name(""), "module_");
    }
}
