//! tpusim-views: every profiler view of one simulated run, written to a folder.
//!
//! `DIR/trace.json.gz` (Chrome trace for ui.perfetto.dev), `DIR/report.html`
//! (self-contained report) and `DIR/plugins/profile/<run>/<host>.xplane.pb`
//! (the XSpace `xprof --logdir DIR` reads). Shared by `tpusim trace`,
//! `tpusim demo` and the Python package's `tpusim.trace`, so all three write
//! the same files.
//!
//! [`build_views`] builds them in memory; [`write_views`] writes them.
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
use tpusim_report::{
    chrome_trace, report_html, ChromeTrace, MemoryView, ReportOptions, Run, TraceOptions,
};
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
    /// `ViewsOptions::cancel` was set (Ctrl-C).
    #[error(transparent)]
    Cancelled(#[from] tpusim_hlo::Cancelled),
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
    /// Set to stop the schedule replay and the building of the views.
    pub cancel: tpusim_hlo::Cancel,
}

/// Every view of one simulated run, built in memory ([`build_views`]).
pub struct BuiltViews {
    /// The Chrome trace (`trace.json.gz` once gzipped).
    pub trace: ChromeTrace,
    /// The self-contained HTML report.
    pub report_html: String,
    /// The encoded XSpace (`<host>.xplane.pb`).
    pub xspace: Vec<u8>,
    /// When the run started for the XSpace (0: an untimed run).
    pub start_ns: u64,
}

/// Replays the schedule of `m` (collectives priced by `comm`, as `analysis`
/// was) and builds every view in memory. Stops with
/// [`ViewsError::Cancelled`] once `opts.cancel` is set.
pub fn build_views(
    m: &Module,
    chip: &Chip,
    analysis: &Analysis,
    comm: &dyn CommModel,
    opts: &ViewsOptions,
) -> Result<BuiltViews, ViewsError> {
    opts.cancel.check()?;
    let (schedule, profile) =
        tpusim_perf::schedule_with_memory_cancellable(m, chip, comm, &opts.cancel)?;
    let memory = MemoryView::from_profile(&profile, PEAK_BUFFERS);
    let run = Run {
        module: m,
        chip,
        analysis,
        schedule: &schedule,
        memory: Some(&memory),
    };
    let trace = chrome_trace(&run, &TraceOptions::default());
    opts.cancel.check()?;
    let report_opts = ReportOptions {
        generator: opts.generator.clone(),
        ..ReportOptions::default()
    };
    let report_html = report_html(&run, &report_opts);
    opts.cancel.check()?;
    let devices = (0..analysis.devices.clamp(1, MAX_XSPACE_DEVICES))
        .map(|ordinal| SimulatedDevice {
            ordinal,
            schedule: &schedule,
            memory: Some(&profile),
        })
        .collect();
    let start_ns = if opts.timestamp { now_ns() } else { 0 };
    let xspace = tpusim_trace::xspace_bytes(&SimulatedRun {
        module: m,
        chip,
        devices,
        host: HOST.to_string(),
        steps: XSPACE_STEPS,
        start_ns,
    });
    opts.cancel.check()?;
    Ok(BuiltViews {
        trace,
        report_html,
        xspace,
        start_ns,
    })
}

/// Builds every view ([`build_views`]) and writes them into `dir`, creating
/// it. Files already there are replaced only as `opts.existing` allows, and
/// links are never written through.
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
    let built = build_views(m, chip, analysis, comm, opts)?;

    let trace_path = dir.join("trace.json.gz");
    let file = create_file(&trace_path, opts.existing)?;
    built
        .trace
        .write_gz(file)
        .map_err(|source| ViewsError::Report {
            path: trace_path.clone(),
            source,
        })?;

    let report_path = dir.join("report.html");
    create_file(&report_path, opts.existing)?
        .write_all(built.report_html.as_bytes())
        .map_err(|e| create(&report_path, e))?;

    let xspace =
        tpusim_trace::write_xspace_bytes(dir, &built.xspace, HOST, built.start_ns, opts.existing)?;

    Ok(Views {
        trace: trace_path,
        report: report_path,
        xspace,
        trace_events: built.trace.trace_events.len(),
        trace_note: built.trace.other_data.get("note").cloned(),
    })
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
