//! The measured-vs-predicted page: one self-contained HTML file (no script,
//! no network) with how the module matched the capture and, per op, the
//! measured and predicted time per run, their ratio and the time at stake,
//! largest first.

use std::fmt::Write;
use tpusim_trace::{ProfileDiff, Verdict};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `1.234 ms`, `56.7 µs`, `890 ns`.
fn time(s: f64) -> String {
    let a = s.abs();
    if a >= 1.0 {
        format!("{s:.3} s")
    } else if a >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else if a >= 1e-6 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.0} ns", s * 1e9)
    }
}

fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Same => "the same program (every instruction's opcode and shape)",
        Verdict::TimedOpsMatch => {
            "every op the capture timed has the same opcode and shape (the programs differ elsewhere)"
        }
        Verdict::PreOptimization => "the module before XLA's optimizations",
        Verdict::Different => "a different program",
        Verdict::NoProgram => "not checked: the capture carries no program (op names only)",
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:24px;color:#222}\
h1{font-size:20px}table{border-collapse:collapse;margin-top:12px}\
th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}\
th{background:#f3f3f3;position:sticky;top:0}td.name,th.name{text-align:left}\
.slow{color:#b00020}.fast{color:#1a7f37}.bar{display:inline-block;height:10px;background:#6b8fd6}\
dl{display:grid;grid-template-columns:max-content auto;gap:4px 16px}dt{color:#666}dd{margin:0}";

/// The diff view of each module as one HTML page.
pub fn profile_diff_html(diffs: &[ProfileDiff]) -> String {
    let title: Vec<&str> = diffs.iter().map(|d| d.module.as_str()).collect();
    let mut h = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tpusim: {} measured vs predicted</title><style>{STYLE}</style></head><body>",
        esc(&title.join(", "))
    );
    for d in diffs {
        section(&mut h, d);
    }
    h.push_str(
        "<p>Time at stake: |measured − predicted| over all runs of the op \
         (its measured self time when tpusim predicts nothing for it).</p></body></html>\n",
    );
    h
}

/// One module: how it matched, then its ops.
fn section(h: &mut String, d: &ProfileDiff) {
    let m = &d.matching;
    let _ = write!(
        h,
        "<section class=\"module\"><h1>{}: measured vs predicted on {}</h1><dl class=\"summary\">",
        esc(&d.module),
        esc(&d.chip)
    );
    let rows = [
        ("capture", esc(&d.capture)),
        (
            "ran on",
            if d.capture_device == "TPU" {
                "TPU".to_string()
            } else {
                format!(
                    "{} (no TPU in the capture: the ratios compare it with the predicted {})",
                    esc(&d.capture_device),
                    esc(&d.chip)
                )
            },
        ),
        ("program in the capture", esc(&m.program)),
        (
            "match",
            format!(
                "{} — {} of the capture's {} instructions have the same opcode and shape",
                verdict_text(m.verdict),
                m.matched,
                m.captured_total
            ),
        ),
        (
            "fingerprints",
            format!(
                "module {}, capture {}",
                m.given_fingerprint, m.captured_fingerprint
            ),
        ),
        ("measured op time", time(d.measured_total_s)),
        ("predicted op time", time(d.predicted_total_s)),
        (
            "measured / predicted",
            if d.predicted_total_s > 0.0 {
                format!("{:.2}x", d.measured_total_s / d.predicted_total_s)
            } else {
                "-".into()
            },
        ),
    ];
    for (k, v) in rows {
        let _ = write!(h, "<dt>{k}</dt><dd>{v}</dd>");
    }
    h.push_str("</dl>");
    let max_stake = d.rows.iter().map(|r| r.at_stake_s).fold(0.0, f64::max);
    h.push_str(
        "<table class=\"ops\"><thead><tr><th class=\"name\">op</th><th>runs</th>\
         <th>measured / run</th><th>predicted / run</th><th>measured / predicted</th>\
         <th>time at stake</th><th class=\"name\"></th></tr></thead><tbody>",
    );
    for r in &d.rows {
        let (pred, ratio, class) = match (r.predicted_avg_s, r.ratio) {
            (Some(p), Some(x)) => (
                time(p),
                format!("{x:.2}x"),
                if x > 1.0 { "slow" } else { "fast" },
            ),
            (Some(p), None) => (time(p), "-".into(), ""),
            _ => ("-".into(), "-".into(), ""),
        };
        let width = if max_stake > 0.0 {
            (120.0 * r.at_stake_s / max_stake).round()
        } else {
            0.0
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{pred}</td>\
             <td class=\"{class}\">{ratio}</td><td>{}</td>\
             <td class=\"name\"><span class=\"bar\" style=\"width:{width}px\"></span></td></tr>",
            esc(&r.name),
            r.occurrences,
            time(r.measured_avg_s),
            time(r.at_stake_s)
        );
    }
    h.push_str("</tbody></table></section>");
}
