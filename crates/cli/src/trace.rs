//! `tpusim trace`: profiler views of a simulated run, written to a folder:
//! `trace.json.gz` (Chrome trace for ui.perfetto.dev), `report.html` (a
//! self-contained report) and `plugins/profile/<run>/<host>.xplane.pb`, the
//! XSpace that `xprof --logdir DIR` reads.

use crate::analyze::{ChipArgs, CompileArgs, PodArgs};
use crate::input;
use crate::out;
use anyhow::Result;
use std::path::{Path, PathBuf};
use tpusim_perf::{CommModel, LocalOnly};
use tpusim_trace::Existing;
use tpusim_views::{Views, ViewsOptions};

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin); a file with several modules gets a folder per module
    file: String,
    #[command(flatten)]
    chip: ChipArgs,
    /// How values of an unpartitioned module without a sharding get one
    #[arg(long, value_enum, default_value_t)]
    propagation: input::Propagation,
    /// Folder to write the views into (created if missing)
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    out: PathBuf,
    #[command(flatten)]
    pod: PodArgs,
    /// Replace view files already in the folder (by default tpusim refuses to
    /// overwrite a file it did not write in this run)
    #[arg(long)]
    force: bool,
    /// Stamp the XSpace with the wall-clock time and name its run folder
    /// after it, as jax.profiler does (by default the views are the same bytes
    /// on every run, in `plugins/profile/tpusim/`)
    #[arg(long)]
    timestamp: bool,
    #[command(flatten)]
    compile: CompileArgs,
}

pub fn run(args: &Args) -> Result<bool> {
    // Ctrl-C from here on stops the work at its next check; `main` exits 130.
    let cancel = crate::interrupt::cancel();
    let chip = args.chip.load()?;
    let modules = input::load(&args.file)?;
    let names: Vec<&str> = modules.iter().map(|(m, _)| m.name.as_str()).collect();
    let folders = folder_names(&names);
    let several = modules.len() > 1;
    let opts = ViewsOptions {
        generator: generator(),
        existing: if args.force {
            Existing::Replace
        } else {
            Existing::Refuse
        },
        timestamp: args.timestamp,
        cancel: cancel.clone(),
    };
    for ((m, _), folder) in modules.into_iter().zip(&folders) {
        let input::ForPricing {
            module: m,
            notes,
            mesh,
        } = input::partition_if_needed(m, &cancel, args.propagation)?;
        let m = &m;
        let dir = if several {
            args.out.join(folder)
        } else {
            args.out.clone()
        };
        let pod = args.pod.model(&chip, m, mesh.as_deref(), &cancel)?;
        let comm: &dyn CommModel = match &pod {
            Some(p) => p,
            None => &LocalOnly,
        };
        let views = crate::progress::with_spinner("simulating", || -> Result<Views> {
            let (prepared, mut analysis) = args.compile.analyze(m, &chip, comm, &cancel)?;
            analysis.assumptions.splice(0..0, notes.iter().cloned());
            Ok(tpusim_views::write_views(
                &prepared.module,
                &chip,
                &analysis,
                comm,
                &dir,
                &opts,
            )?)
        })?;
        print_views(&views, &dir);
    }
    Ok(true)
}

/// Names the CLI in the report's footer.
pub fn generator() -> String {
    format!("tpusim {}", env!("CARGO_PKG_VERSION"))
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

/// A folder per module: its name made safe, and `_2`, `_3`, ... after the
/// first when several modules share a name, so none writes over another.
fn folder_names(modules: &[&str]) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    modules
        .iter()
        .map(|m| {
            let base = folder_name(m);
            let mut name = base.clone();
            let mut k = 1;
            while !taken.insert(name.clone()) {
                k += 1;
                name = format!("{base}_{k}");
            }
            name
        })
        .collect()
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

    #[test]
    fn modules_sharing_a_name_get_their_own_folders() {
        assert_eq!(
            folder_names(&["m", "m", "a/b", "a_b", "m"]),
            ["m", "m_2", "a_b", "a_b_2", "m_3"]
        );
    }
}
