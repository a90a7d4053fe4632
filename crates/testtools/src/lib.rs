//! Test support: the external tools some integration tests need — a Python
//! virtualenv with pinned packages (real xprof for `crates/trace/tests/xprof.rs`)
//! and headless Chromium (`crates/report/tests/browser.rs`) — provisioned on
//! first use into the project-local tool cache (`target/tools`, or
//! `$TPUSIM_TOOLS_DIR`) and reused afterwards, so that `cargo test` on a fresh
//! machine needs no set-up step.
//!
//! The provisioning itself (file lock, install into a temporary directory and
//! rename, apt-get when allowed) is `tools/provision.py`, shared with
//! `tools/python_tests.py`; this crate only calls it. Its progress and what it
//! installed, with the time taken, reach the terminal directly (stderr is
//! inherited, so it shows even while the test harness captures output).
//!
//! A dev-dependency of tests only: no library or binary may depend on it. As
//! test code it panics, with the provisioner's message (which names the one
//! command to run by hand), when a tool cannot be had.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The repository root (this crate lives in `crates/testtools`).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tool cache beside the test's `CARGO_TARGET_TMPDIR` (`<target>/tmp`):
/// `<target>/tools`, so it follows `CARGO_TARGET_DIR`.
fn tools_dir(target_tmpdir: &str) -> PathBuf {
    let tmp = Path::new(target_tmpdir);
    tmp.parent().unwrap_or(tmp).join("tools")
}

/// Runs `tools/provision.py ARGS` and returns the path it prints.
fn provision(target_tmpdir: &str, args: &[&str]) -> PathBuf {
    let out = Command::new("python3")
        .arg(repo().join("tools/provision.py"))
        .arg("--tools-dir")
        .arg(tools_dir(target_tmpdir))
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 tools/provision.py: {e}"));
    assert!(
        out.status.success(),
        "could not provision {args:?} (see the [provision] lines above)"
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "tools/provision.py printed no path for {args:?}"
    );
    PathBuf::from(path)
}

/// The `python` of virtualenv `<target>/tools/NAME` holding exactly
/// `requirements` (pinned pip specs); built on first use. Run its tools as
/// `python -m TOOL`. Pass `env!("CARGO_TARGET_TMPDIR")` as `target_tmpdir`.
pub fn python_venv(target_tmpdir: &str, name: &str, requirements: &[&str]) -> PathBuf {
    let mut args = vec!["venv", name];
    args.extend_from_slice(requirements);
    provision(target_tmpdir, &args)
}

/// A Chromium (or Chrome) executable: the one on `PATH`, else installed with
/// the system package manager when that is allowed. Pass
/// `env!("CARGO_TARGET_TMPDIR")` as `target_tmpdir`.
pub fn chromium(target_tmpdir: &str) -> PathBuf {
    provision(target_tmpdir, &["chromium"])
}
