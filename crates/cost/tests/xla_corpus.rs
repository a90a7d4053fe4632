//! Checks `xla_cost` against XLA's own HloCostAnalysis totals recorded in
//! `testdata/xla_cost.json` (see `tools/xla_cost_expectations.py`).
//!
//! Every file must match exactly unless it is listed in
//! `tests/known_mismatches.txt` with the reason; a listed file that now
//! matches must be removed from the list, so the matching set never shrinks
//! and the list never goes stale.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (path, metric) pairs expected to differ: `path metric  # reason`.
fn known_mismatches() -> BTreeMap<(String, String), String> {
    let text = include_str!("known_mismatches.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (entry, reason) = l.split_once('#').unwrap_or((l, ""));
            let mut parts = entry.split_whitespace();
            let path = parts.next().unwrap_or_default().to_string();
            let metric = parts.next().unwrap_or_default().to_string();
            ((path, metric), reason.trim().to_string())
        })
        .collect()
}

/// (path, metric) -> (ours, XLA's).
type Mismatches = BTreeMap<(String, String), (f64, f64)>;

/// The number of reference files, and every (path, metric) where our total
/// differs from XLA's.
fn mismatches() -> (usize, Mismatches) {
    let root = repo_root();
    let json = std::fs::read_to_string(root.join("testdata/xla_cost.json")).unwrap();
    let expect: serde_json::Value = serde_json::from_str(&json).unwrap();
    let expect = expect.as_object().unwrap();
    let mut out = BTreeMap::new();
    for (path, want) in expect {
        let text = std::fs::read_to_string(root.join(path)).unwrap();
        // Every reference file holds a single module (true of all 219 today).
        let modules = tpusim_hlo::parse_modules(&text).unwrap();
        let got = tpusim_cost::xla_cost(&modules[0]);
        for (metric, ours) in [
            ("flops", got.flops),
            ("transcendentals", got.transcendentals),
            ("bytes_accessed", got.bytes_accessed),
        ] {
            let theirs = want[metric].as_f64().unwrap();
            if ours != theirs {
                out.insert((path.clone(), metric.to_string()), (ours, theirs));
            }
        }
    }
    (expect.len(), out)
}

#[test]
fn totals_match_xla_cost_analysis() {
    let (files, found) = mismatches();
    assert_eq!(files, 219, "reference data changed size");
    let known = known_mismatches();
    let new: Vec<String> = found
        .iter()
        .filter(|(k, _)| !known.contains_key(*k))
        .map(|((p, m), (ours, theirs))| format!("{p} {m}: ours {ours} xla {theirs}"))
        .collect();
    let fixed: Vec<String> = known
        .keys()
        .filter(|k| !found.contains_key(*k))
        .map(|(p, m)| format!("{p} {m}"))
        .collect();
    assert!(new.is_empty(), "new mismatches:\n{}", new.join("\n"));
    assert!(
        fixed.is_empty(),
        "now matching, remove from known_mismatches.txt:\n{}",
        fixed.join("\n")
    );
    // The acceptance criterion: flops and transcendentals match everywhere,
    // so only bytes may ever be listed as a known mismatch.
    let compute: Vec<_> = known
        .keys()
        .filter(|(_, m)| m != "bytes_accessed")
        .collect();
    assert!(
        compute.is_empty(),
        "flops/transcendentals must match: {compute:?}"
    );
}
