//! `tpusim profile`: a real `jax.profiler` capture summarized per HLO op,
//! optionally next to tpusim's prediction for the same module.

use crate::input;
use crate::out;
use crate::render::{seconds, table};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::Path;
use tpusim_trace::{
    captured_programs, create_file, diff_rows, find_xplanes, match_module, read_xspace, summarize,
    timed_ops, Existing, ModuleMatch, OpSummary, ProfileDiff, ProfileSummary, Verdict,
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
    let files = find_xplanes(Path::new(&args.path))?;
    let spaces = files
        .iter()
        .map(|f| read_xspace(f))
        .collect::<Result<Vec<_>, _>>()?;
    let mut summary = summarize(&spaces);
    summary.files = files;
    let (predicted, matches) = match (&args.hlo, &args.chip) {
        (Some(hlo), Some(chip)) => compare(args, hlo, chip, &summary, &spaces)?,
        _ => (HashMap::new(), Vec::new()),
    };
    let rows: Vec<OpRow> = summary
        .ops
        .iter()
        .map(|o| OpRow {
            measured: o,
            predicted_avg_s: predicted.get(&(o.module.clone(), o.name.clone())).copied(),
        })
        .collect();
    if args.json {
        let mut report = tpusim_trace::profile_json(&summary, &HashMap::new())?;
        if let Some(ops) = report.get_mut("ops").and_then(|v| v.as_array_mut()) {
            for (op, row) in ops.iter_mut().zip(&rows) {
                if let (Some(obj), Some(p)) = (op.as_object_mut(), row.predicted_avg_s) {
                    obj.insert("predicted_avg_s".into(), p.into());
                }
            }
        }
        if !matches.is_empty() {
            report["matches"] = serde_json::to_value(&matches)?;
        }
        out::line(serde_json::to_string_pretty(&report)?);
        return Ok(true);
    }
    print_text(&summary, &rows, !predicted.is_empty());
    Ok(true)
}

/// Predicted time per run of the ops of the capture's program that each
/// module of `hlo` is, keyed by (the capture's module name, op name), after
/// checking by structure that the module is that program; writes the diff
/// page when asked.
fn compare(
    args: &Args,
    hlo: &str,
    chip_id: &str,
    summary: &ProfileSummary,
    spaces: &[tpusim_trace::xplane::XSpace],
) -> Result<Predictions> {
    let chip = tpusim_arch::by_id(chip_id)?;
    let programs = captured_programs(spaces);
    let mut out = HashMap::new();
    let mut diffs = Vec::new();
    for (m, _) in input::load(hlo)? {
        let matching = match_module(&m, &programs, &|module| timed_ops(summary, module));
        check_match(hlo, &m, &matching)?;
        let module = match matching.verdict {
            Verdict::NoProgram => m.name.clone(),
            _ => base_name(&matching.program).to_string(),
        };
        let analysis = tpusim_perf::analyze(&m, &chip);
        let times = tpusim_trace::predicted_avg_times(std::slice::from_ref(&analysis));
        let rows = diff_rows(summary, &module, &times);
        if rows.is_empty() {
            bail!(
                "the capture timed no op of program {module}: {hlo} is not a program this capture ran"
            );
        }
        for r in &rows {
            if let Some(t) = r.predicted_avg_s {
                out.insert((Some(module.clone()), r.name.clone()), t);
            }
        }
        diffs.push(ProfileDiff {
            capture: args.path.clone(),
            module,
            chip: chip.name.clone(),
            measured_total_s: rows.iter().map(|r| r.measured_total_s).sum(),
            predicted_total_s: rows
                .iter()
                .filter_map(|r| r.predicted_avg_s.map(|p| p * r.occurrences as f64))
                .sum(),
            matching,
            rows,
        });
    }
    if let Some(path) = &args.html {
        let html = tpusim_views::profile_diff_html(&diffs);
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
    let matches = diffs.into_iter().map(|d| d.matching).collect();
    Ok((out, matches))
}

/// Predicted time per run by (module, op), and how each module matched.
type Predictions = (HashMap<(Option<String>, String), f64>, Vec<ModuleMatch>);

fn base_name(program: &str) -> &str {
    match program.rfind('(') {
        Some(k) if program.ends_with(')') => &program[..k],
        _ => program,
    }
}

/// Refuses a module that is not the program the capture ran, saying why.
fn check_match(hlo: &str, m: &tpusim_hlo::Module, r: &ModuleMatch) -> Result<()> {
    let differences = || {
        r.mismatches
            .iter()
            .take(5)
            .map(|x| {
                let given = match x.given.as_str() {
                    "-" => format!("absent from {hlo}"),
                    g => format!("{g} in {hlo}"),
                };
                let captured = x.captured.as_deref().unwrap_or("absent");
                format!("\n  {}: {given}, {captured} in the capture", x.name)
            })
            .collect::<String>()
    };
    match r.verdict {
        Verdict::Same | Verdict::TimedOpsMatch => Ok(()),
        Verdict::NoProgram => {
            eprintln!(
                "note: the capture carries no HloProto, so {} is matched to its ops by name only",
                m.name
            );
            Ok(())
        }
        Verdict::PreOptimization => bail!(
            "{hlo} ({}) is the program before XLA's optimizations: it has no fusions and is not \
             scheduled, while the capture ran the optimized program {} ({} instructions, {} of them \
             the same). The optimized program names its ops differently (fusions, copies), so \
             no op the capture timed is in {hlo} and every prediction would be \"-\". Pass the \
             compiled module instead: jax.jit(f).lower(...).compile().as_text(), or \
             XLA_FLAGS=--xla_dump_to=DIR (the *after_optimizations.txt file).{}",
            m.name,
            r.program,
            r.captured_total,
            r.matched,
            differences()
        ),
        Verdict::Different => bail!(
            "{hlo} ({}, fingerprint {}) is not the program the capture ran: it was compared \
             with {} (fingerprint {}), and {} of that program's {} instructions have the same \
             opcode and shape. Differences:{}",
            m.name,
            r.given_fingerprint,
            r.program,
            r.captured_fingerprint,
            r.matched,
            r.captured_total,
            differences()
        ),
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
            t.add_row(row);
        }
        out::line(&t);
        if rows.len() > TOP_OPS {
            out::line(format!("({} more ops)", rows.len() - TOP_OPS));
        }
    }
    if !s.steps.is_empty() {
        let mut t = table(&["step", "name", "start", "time", "recorded on"]);
        for st in &s.steps {
            t.add_row(vec![
                st.step_num.map_or("-".into(), |n| n.to_string()),
                st.name.clone(),
                seconds(st.start_s),
                seconds(st.duration_s),
                st.plane.clone(),
            ]);
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
