//! `tpusim profile`: a real `jax.profiler` capture summarized per HLO op,
//! optionally next to tpusim's prediction for the same module.

use crate::input;
use crate::out;
use crate::render::{seconds, table};
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::path::Path;
use tpusim_trace::{
    create_file, read_profile_spaces, Comparison, Existing, OpSummary, ProfileSummary, Verdict,
};

#[derive(clap::Args)]
pub struct Args {
    /// A `jax.profiler.trace` log dir, one run folder, or one `.xplane.pb`
    path: String,
    /// Print the summary as JSON
    #[arg(long)]
    json: bool,
    /// The profiled program's HLO (post-optimization): predicts each op
    #[arg(long, value_name = "FILE", requires = "chip")]
    hlo: Option<String>,
    /// Chip to predict on (with --hlo)
    #[arg(long, value_name = "NAME", requires = "hlo")]
    chip: Option<String>,
    /// Write the measured-vs-predicted page (per op: measured, predicted,
    /// ratio, sorted by time at stake) to this HTML file (with --hlo)
    #[arg(long, value_name = "FILE", requires = "hlo")]
    html: Option<String>,
    /// Replace the --html file if it exists
    #[arg(long)]
    force: bool,
}

/// Rows of the op table.
const TOP_OPS: usize = 25;

/// An op as printed: measured, and predicted when a module was given.
struct OpRow<'a> {
    measured: &'a OpSummary,
    predicted_avg_s: Option<f64>,
}

pub fn run(args: &Args) -> Result<bool> {
    let (summary, spaces) = read_profile_spaces(Path::new(&args.path))?;
    let comparison = match (&args.hlo, &args.chip) {
        (Some(hlo), Some(chip)) => Some(compare(args, hlo, chip, &summary, &spaces)?),
        _ => None,
    };
    let predicted = comparison.as_ref().map(|c| &c.predicted);
    let rows: Vec<OpRow> = summary
        .ops
        .iter()
        .map(|o| {
            let module = o.module.as_deref().map(base_name).unwrap_or("");
            let key = (module.to_string(), o.name.clone());
            OpRow {
                measured: o,
                predicted_avg_s: predicted.and_then(|p| p.get(&key)).copied(),
            }
        })
        .collect();
    if args.json {
        let report = match &comparison {
            Some(c) => tpusim_trace::comparison_json(&summary, c)?,
            None => tpusim_trace::profile_json(&summary, &HashMap::new())?,
        };
        out::line(serde_json::to_string_pretty(&report)?);
        return Ok(true);
    }
    print_text(&summary, &rows, comparison.is_some());
    Ok(true)
}

/// Matches each module of `hlo` to the capture's program by structure (a
/// different program is refused) and predicts its ops; writes the diff page
/// when asked.
fn compare(
    args: &Args,
    hlo: &str,
    chip_id: &str,
    summary: &ProfileSummary,
    spaces: &[tpusim_trace::xplane::XSpace],
) -> Result<Comparison> {
    let chip = tpusim_arch::by_id(chip_id)?;
    let modules: Vec<_> = input::load(hlo)?.into_iter().map(|(m, _)| m).collect();
    let analyses: Vec<_> = modules
        .iter()
        .map(|m| tpusim_perf::analyze(m, &chip))
        .collect();
    let pairs: Vec<_> = modules.iter().zip(&analyses).collect();
    let c = tpusim_trace::compare(&args.path, summary, spaces, &pairs, &chip.name, hlo)?;
    for d in &c.diffs {
        if d.matching.verdict == Verdict::NoProgram {
            eprintln!(
                "note: the capture carries no HloProto, so {} is matched to its ops by name only",
                d.module
            );
        }
    }
    if let Some(path) = &args.html {
        let html = tpusim_views::profile_diff_html(&c.diffs);
        let existing = if args.force {
            Existing::Replace
        } else {
            Existing::Refuse
        };
        let mut f = create_file(Path::new(path), existing)?;
        std::io::Write::write_all(&mut f, html.as_bytes())
            .with_context(|| format!("cannot write {path}"))?;
        eprintln!("wrote {path}");
    }
    Ok(c)
}

fn base_name(program: &str) -> &str {
    match program.rfind('(') {
        Some(k) if program.ends_with(')') => &program[..k],
        _ => program,
    }
}

fn print_text(s: &ProfileSummary, rows: &[OpRow], with_prediction: bool) {
    for f in &s.files {
        out::line(format!("profile {}", f.display()));
    }
    out::line(format!(
        "  {} HLO ops, {} in all",
        s.ops.len(),
        seconds(s.op_time_s)
    ));
    if rows.is_empty() {
        out::line("no HLO op events in this profile");
    } else {
        let mut header = vec!["op", "module", "runs", "total", "avg", "self", "% (self)"];
        if with_prediction {
            header.extend(["predicted avg", "measured / predicted"]);
        }
        let mut t = table(&header);
        for r in rows.iter().take(TOP_OPS) {
            let o = r.measured;
            let mut row = vec![
                o.name.clone(),
                o.module.clone().unwrap_or_default(),
                o.occurrences.to_string(),
                seconds(o.total_s),
                seconds(o.avg_s),
                seconds(o.self_s),
                format!("{:.1}", o.percent),
            ];
            if with_prediction {
                match r.predicted_avg_s {
                    Some(p) => {
                        row.push(seconds(p));
                        row.push(if p > 0.0 {
                            format!("{:.2}x", o.avg_s / p)
                        } else {
                            "-".into()
                        });
                    }
                    None => row.extend(["-".to_string(), "-".to_string()]),
                }
            }
            crate::render::add_row(&mut t, row);
        }
        out::line(&t);
        if rows.len() > TOP_OPS {
            out::line(format!("({} more ops)", rows.len() - TOP_OPS));
        }
    }
    if !s.steps.is_empty() {
        let mut t = table(&["step", "name", "start", "time", "recorded on"]);
        for st in &s.steps {
            crate::render::add_row(
                &mut t,
                vec![
                    st.step_num.map_or("-".into(), |n| n.to_string()),
                    st.name.clone(),
                    seconds(st.start_s),
                    seconds(st.duration_s),
                    st.plane.clone(),
                ],
            );
        }
        out::line(&t);
    }
    out::line(format!(
        "idle between ops: {} in {} gaps",
        seconds(s.idle.total_s),
        s.idle.count
    ));
    for g in s.idle.longest.iter().take(5) {
        out::line(format!(
            "  {} after {} before {} ({})",
            seconds(g.duration_s),
            g.after,
            g.before,
            g.timeline
        ));
    }
}
