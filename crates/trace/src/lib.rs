//! tpusim-trace: XSpace profiles, the format `jax.profiler` writes and xprof
//! reads. [`write_xspace`] turns a simulated schedule into a profile that
//! xprof opens like a TPU capture; [`read_profile`] summarizes a real capture
//! per HLO op, and [`profile_json`] sets it next to a prediction.
//!
//! This crate never prints, never panics on any input file, and never runs
//! the model itself: callers pass the schedule and memory profile in.

mod compare;
mod diff;
pub mod hlo_proto;
mod output;
mod read;
mod write;

pub use compare::{predicted_avg_times, profile_json};
pub use diff::{
    capture_device, captured_programs, compare, comparison_json, diff_rows, match_module,
    timed_ops, CapturedProgram, CompareError, Comparison, DiffRow, Mismatch, ModuleMatch,
    ProfileDiff, Verdict, MAX_MISMATCHES,
};
pub use output::{create_dirs_within, create_file, Existing};

pub use read::{
    find_xplanes, read_profile, read_profile_spaces, read_xspace, summarize, Gap, IdleSummary,
    OpSummary, ProfileSummary, StepSummary, MAX_GAPS,
};
pub mod xplane;

pub use write::{
    build_xspace, done_waits, hlo_category, is_sync_collective, run_folder_name, utilization,
    write_xspace, write_xspace_bytes, xspace_bytes, SimulatedDevice, SimulatedRun, PROGRAM_ID,
};

use std::path::PathBuf;

/// What can go wrong reading or writing profiles.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an XSpace protobuf: {source}")]
    Decode {
        path: PathBuf,
        source: prost::DecodeError,
    },
    #[error("{0}: no .xplane.pb file found")]
    NoProfile(PathBuf),
    #[error("{0} already exists: tpusim does not replace files it did not write (pass --force to replace it)")]
    Exists(PathBuf),
    #[error("{0} is not a folder (a link or a file): tpusim writes only inside the output folder")]
    NotAFolder(PathBuf),
    #[error(transparent)]
    Compare(#[from] CompareError),
}
