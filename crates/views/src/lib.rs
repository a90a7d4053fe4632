//! tpusim-views: every profiler view of one simulated run, written to a folder.
//!
//! `DIR/trace.json.gz` (Chrome trace for ui.perfetto.dev), `DIR/report.html`
//! (self-contained report) and `DIR/plugins/profile/<run>/<host>.xplane.pb`
//! (the XSpace `xprof --logdir DIR` reads). Shared by `tpusim trace`,
//! `tpusim demo` and the Python package's `tpusim.trace`, so all three write
//! the same files.
//!
//! This crate only wires the models (`tpusim-perf`) to the renderers
//! (`tpusim-report`, `tpusim-trace`) and the file system; it never prints.

mod diff;

pub use diff::profile_diff_html;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tpusim_arch::Chip;
use tpusim_hlo::Module;
use tpusim_perf::{Analysis, CommModel};
use tpusim_report::{chrome_trace, report_html, MemoryView, ReportOptions, Run, TraceOptions};
use tpusim_trace::{create_file, Existing, SimulatedDevice, SimulatedRun};

/// Largest buffers at the peak the report lists.
const PEAK_BUFFERS: usize = 20;
/// Devices written to the XSpace at most (each SPMD device runs the same
/// schedule; the Chrome trace caps its processes the same way).
const MAX_XSPACE_DEVICES: u32 = 8;
/// Steps the XSpace lays out back to back (each the whole simulated
/// program), as a capture of a few training steps holds: xprof's per-step
/// tables, step-time averages and pod viewer get steps to show.
pub const XSPACE_STEPS: u32 = 3;
/// The host the simulated profile claims: the file is `<host>.xplane.pb`.
const HOST: &str = "tpusim";

/// Why the views could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ViewsError {
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Report {
        path: PathBuf,
        source: tpusim_report::ReportError,
    },
    #[error(transparent)]
    Trace(#[from] tpusim_trace::TraceError),
}

/// What [`write_views`] wrote.
#[derive(Clone, Debug)]
pub struct Views {
    pub trace: PathBuf,
    pub report: PathBuf,
    pub xspace: PathBuf,
    /// Events in the trace, and a note on what was left out of it.
    pub trace_events: usize,
    pub trace_note: Option<String>,
}

/// How [`write_views`] writes.
#[derive(Clone, Debug, Default)]
pub struct ViewsOptions {
    /// Names the program in the report's footer.
    pub generator: String,
    /// What to do with files already in the folder (refused by default).
    pub existing: Existing,
    /// Stamp the XSpace with the wall-clock start (and name its run folder
    /// after it, as `jax.profiler` does); without it every file is the same
    /// bytes on every run.
    pub timestamp: bool,
}

/// Replays the schedule of `m` (collectives priced by `comm`, as `analysis`
/// was) and writes every view into `dir`, creating it. Files already there
/// are replaced only as `opts.existing` allows, and links are never written
/// through.
pub fn write_views(
    m: &Module,
    chip: &Chip,
    analysis: &Analysis,
    comm: &dyn CommModel,
    dir: &Path,
    opts: &ViewsOptions,
) -> Result<Views, ViewsError> {
    let create = |path: &Path, source| ViewsError::Create {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| create(dir, e))?;
    let (schedule, profile) = tpusim_perf::schedule_with_memory(m, chip, comm);
    let memory = MemoryView::from_profile(&profile, PEAK_BUFFERS);
    let run = Run {
        module: m,
        chip,
        analysis,
        schedule: &schedule,
        memory: Some(&memory),
    };

    let trace = chrome_trace(&run, &TraceOptions::default());
    let trace_path = dir.join("trace.json.gz");
    let file = create_file(&trace_path, opts.existing)?;
    trace.write_gz(file).map_err(|source| ViewsError::Report {
        path: trace_path.clone(),
        source,
    })?;

    let report_path = dir.join("report.html");
    let report_opts = ReportOptions {
        generator: opts.generator.clone(),
        ..ReportOptions::default()
    };
    create_file(&report_path, opts.existing)?
        .write_all(report_html(&run, &report_opts).as_bytes())
        .map_err(|e| create(&report_path, e))?;

    let devices = (0..analysis.devices.clamp(1, MAX_XSPACE_DEVICES))
        .map(|ordinal| SimulatedDevice {
            ordinal,
            schedule: &schedule,
            memory: Some(&profile),
        })
        .collect();
    let xspace = tpusim_trace::write_xspace(
        dir,
        &SimulatedRun {
            module: m,
            chip,
            devices,
            host: HOST.to_string(),
            steps: XSPACE_STEPS,
            start_ns: if opts.timestamp { now_ns() } else { 0 },
        },
        opts.existing,
    )?;

    Ok(Views {
        trace: trace_path,
        report: report_path,
        xspace,
        trace_events: trace.trace_events.len(),
        trace_note: trace.other_data.get("note").cloned(),
    })
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
