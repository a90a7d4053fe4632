//! Measured against predicted: which program of a real capture a module is,
//! decided by structure (every instruction's opcode and shape, as the
//! capture's own `HloProto` in `/host:metadata` records them), and the
//! per-op rows of the diff view, sorted by the time at stake.

use crate::hlo_proto::module_proto;
use crate::xplane::{x_stat, XSpace};
use crate::ProfileSummary;
use prost::Message;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use tpusim_hlo::{Module, Opcode};
use tpusim_xla_proto as xp;

/// A program the capture carries (`/host:metadata`, stat `Hlo Proto`).
#[derive(Clone, Debug)]
pub struct CapturedProgram {
    pub program_id: i64,
    /// As xprof names it: `jit_step(8)`.
    pub name: String,
    pub module: xp::HloModuleProto,
}

/// Every program whose `HloProto` the capture holds (undecodable ones are
/// skipped: the capture's timing does not depend on them).
pub fn captured_programs(spaces: &[XSpace]) -> Vec<CapturedProgram> {
    let mut out = Vec::new();
    for plane in spaces
        .iter()
        .flat_map(|s| &s.planes)
        .filter(|p| p.name == "/host:metadata")
    {
        let Some(stat_id) = plane
            .stat_metadata
            .values()
            .find(|m| m.name == "Hlo Proto")
            .map(|m| m.id)
        else {
            continue;
        };
        for em in plane.event_metadata.values() {
            for st in em.stats.iter().filter(|s| s.metadata_id == stat_id) {
                let Some(x_stat::Value::BytesValue(bytes)) = &st.value else {
                    continue;
                };
                if let Ok(proto) = xp::HloProto::decode(bytes.as_slice()) {
                    if let Some(module) = proto.hlo_module {
                        out.push(CapturedProgram {
                            program_id: em.id,
                            name: em.name.clone(),
                            module,
                        });
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name).then(a.program_id.cmp(&b.program_id)));
    out
}

/// `f32[8,32]`, `(f32[2], s32[])`: a shape without its layout.
fn shape_text(s: &xp::ShapeProto) -> String {
    let ty = xp::PrimitiveType::try_from(s.element_type).unwrap_or(xp::PrimitiveType::Invalid);
    if ty == xp::PrimitiveType::Tuple {
        let parts: Vec<String> = s.tuple_shapes.iter().map(shape_text).collect();
        return format!("({})", parts.join(", "));
    }
    let dims: Vec<String> = s.dimensions.iter().map(i64::to_string).collect();
    format!(
        "{}[{}]",
        ty.as_str_name().to_ascii_lowercase(),
        dims.join(",")
    )
}

/// Each instruction's structure: name → `opcode shape`.
fn signatures(m: &xp::HloModuleProto) -> BTreeMap<String, String> {
    m.computations
        .iter()
        .flat_map(|c| &c.instructions)
        .map(|i| {
            let shape = i.shape.as_ref().map(shape_text).unwrap_or_default();
            (i.name.clone(), format!("{} {shape}", i.opcode))
        })
        .collect()
}

/// A 64-bit FNV-1a hash of every instruction's name, opcode and shape: equal
/// programs have equal fingerprints, whatever their layouts or metadata.
fn fingerprint(sigs: &BTreeMap<String, String>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, sig) in sigs {
        for b in name.bytes().chain([0]).chain(sig.bytes()).chain([b'\n']) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// One instruction whose structure differs.
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    pub name: String,
    /// `opcode shape` in the given module.
    pub given: String,
    /// In the capture's program; `None` when it has no such instruction.
    pub captured: Option<String>,
}

/// How a module compares with the capture's programs.
#[derive(Clone, Debug, Serialize)]
pub struct ModuleMatch {
    /// The capture's program it was compared with (`jit_step(8)`).
    pub program: String,
    pub given_fingerprint: String,
    pub captured_fingerprint: String,
    /// Instructions of the capture's program present in the module with the
    /// same opcode and shape.
    pub matched: usize,
    pub captured_total: usize,
    pub given_total: usize,
    /// The first differences (at most [`MAX_MISMATCHES`]).
    pub mismatches: Vec<Mismatch>,
    pub verdict: Verdict,
}

/// The most differences a [`ModuleMatch`] lists.
pub const MAX_MISMATCHES: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Same instructions, opcodes and shapes: the program the capture ran.
    Same,
    /// Every op the capture timed is in the module with its opcode and shape
    /// (the module differs elsewhere, e.g. in ops that never ran).
    TimedOpsMatch,
    /// The module is the program before XLA's optimizations (no fusions, not
    /// scheduled) while the capture ran the optimized one: its op names are
    /// not the ones the capture timed.
    PreOptimization,
    /// A different program.
    Different,
    /// The capture carries no program to compare with (op names only).
    NoProgram,
}

fn base_name(program: &str) -> &str {
    match program.rfind('(') {
        Some(k) if program.ends_with(')') => &program[..k],
        _ => program,
    }
}

/// Compares `given` with the capture's programs: the one named like it (or,
/// failing that, the one sharing most instructions). `timed` are the op
/// names the capture timed in that program.
pub fn match_module(
    given: &Module,
    programs: &[CapturedProgram],
    timed: &dyn Fn(&str) -> Vec<String>,
) -> ModuleMatch {
    let given_sigs = signatures(&module_proto(given, 0));
    let given_fp = format!("{:016x}", fingerprint(&given_sigs));
    let score = |p: &CapturedProgram| {
        let sigs = signatures(&p.module);
        sigs.iter()
            .filter(|(n, s)| given_sigs.get(*n) == Some(s))
            .count()
    };
    let named: Vec<&CapturedProgram> = programs
        .iter()
        .filter(|p| base_name(&p.name) == given.name)
        .collect();
    let pool: Vec<&CapturedProgram> = if named.is_empty() {
        programs.iter().collect()
    } else {
        named
    };
    let Some(best) = pool.iter().max_by_key(|p| score(p)).copied() else {
        return ModuleMatch {
            program: String::new(),
            given_fingerprint: given_fp,
            captured_fingerprint: String::new(),
            matched: 0,
            captured_total: 0,
            given_total: given_sigs.len(),
            mismatches: Vec::new(),
            verdict: Verdict::NoProgram,
        };
    };
    let captured = signatures(&best.module);
    let captured_fp = format!("{:016x}", fingerprint(&captured));
    let matched = captured
        .iter()
        .filter(|(n, s)| given_sigs.get(*n) == Some(s))
        .count();
    let timed_ops = timed(base_name(&best.name));
    let timed_ok = !timed_ops.is_empty()
        && timed_ops
            .iter()
            .all(|n| captured.contains_key(n) && captured.get(n) == given_sigs.get(n));
    let mut listed = std::collections::HashSet::new();
    let mut mismatches: Vec<Mismatch> = timed_ops
        .iter()
        .chain(captured.keys())
        .filter(|n| captured.get(*n) != given_sigs.get(*n) && listed.insert(n.as_str()))
        .filter_map(|n| {
            Some(Mismatch {
                name: n.clone(),
                given: given_sigs.get(n).cloned().unwrap_or_else(|| "-".into()),
                captured: Some(captured.get(n)?.clone()),
            })
        })
        .collect();
    mismatches.truncate(MAX_MISMATCHES);
    let given_fused = given.instrs.iter().any(|i| i.opcode == Opcode::Fusion);
    let captured_fused = captured.values().any(|s| s.starts_with("fusion "));
    let verdict = if captured_fp == given_fp {
        Verdict::Same
    } else if timed_ok {
        Verdict::TimedOpsMatch
    } else if !given_fused && captured_fused && given.config.is_scheduled != Some(true) {
        Verdict::PreOptimization
    } else {
        Verdict::Different
    };
    ModuleMatch {
        program: best.name.clone(),
        given_fingerprint: given_fp,
        captured_fingerprint: captured_fp,
        matched,
        captured_total: captured.len(),
        given_total: given_sigs.len(),
        mismatches,
        verdict,
    }
}

/// One op of the diff view.
#[derive(Clone, Debug, Serialize)]
pub struct DiffRow {
    pub name: String,
    pub occurrences: u64,
    pub measured_avg_s: f64,
    pub measured_total_s: f64,
    pub predicted_avg_s: Option<f64>,
    /// measured / predicted.
    pub ratio: Option<f64>,
    /// |measured − predicted| over all runs: what getting this op right
    /// is worth. Without a prediction, its measured self time (a loop's
    /// body ops have rows of their own).
    pub at_stake_s: f64,
}

/// The measured-vs-predicted view of one program.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileDiff {
    pub capture: String,
    /// What the capture ran on: `TPU`, `GPU`, or `CPU` when it has no
    /// device planes (a CPU run; its ratios then compare a CPU with the chip).
    pub capture_device: String,
    pub module: String,
    pub chip: String,
    pub matching: ModuleMatch,
    pub measured_total_s: f64,
    pub predicted_total_s: f64,
    /// Largest time at stake first.
    pub rows: Vec<DiffRow>,
}

/// The ops `summary` timed in program `module` (by base name), each next to
/// `predicted` (avg seconds per run, by op name of the same program).
pub fn diff_rows(
    summary: &ProfileSummary,
    module: &str,
    predicted: &HashMap<String, f64>,
) -> Vec<DiffRow> {
    let mut rows: Vec<DiffRow> = summary
        .ops
        .iter()
        .filter(|o| o.module.as_deref().map(base_name) == Some(module))
        .map(|o| {
            let p = predicted.get(&o.name).copied();
            let predicted_total = p.map(|p| p * o.occurrences as f64);
            DiffRow {
                name: o.name.clone(),
                occurrences: o.occurrences,
                measured_avg_s: o.avg_s,
                measured_total_s: o.total_s,
                predicted_avg_s: p,
                ratio: p.filter(|&p| p > 0.0).map(|p| o.avg_s / p),
                at_stake_s: predicted_total.map_or(o.self_s, |t| (o.total_s - t).abs()),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.at_stake_s
            .total_cmp(&a.at_stake_s)
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// The op names `summary` timed in program `module` (by base name).
pub fn timed_ops(summary: &ProfileSummary, module: &str) -> Vec<String> {
    summary
        .ops
        .iter()
        .filter(|o| o.module.as_deref().map(base_name) == Some(module))
        .map(|o| o.name.clone())
        .collect()
}

/// A capture next to tpusim's predictions for the modules a user says it ran.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Predicted time per run, by (the capture's module name, op name).
    pub predicted: HashMap<(String, String), f64>,
    /// One per module, in the order given.
    pub diffs: Vec<ProfileDiff>,
}

/// Why a module cannot be compared with a capture.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The module is not a program the capture ran, or not in the form it
    /// ran (the message says which and shows the differences).
    #[error("{0}")]
    NotTheProgram(String),
}

fn differences(file: &str, r: &ModuleMatch) -> String {
    r.mismatches
        .iter()
        .take(5)
        .map(|x| {
            let given = match x.given.as_str() {
                "-" => format!("absent from {file}"),
                g => format!("{g} in {file}"),
            };
            let captured = x.captured.as_deref().unwrap_or("absent");
            format!("\n  {}: {given}, {captured} in the capture", x.name)
        })
        .collect()
}

/// Refuses a module that is not the program the capture ran, saying why.
fn check_match(file: &str, m: &Module, r: &ModuleMatch) -> Result<(), CompareError> {
    match r.verdict {
        Verdict::Same | Verdict::TimedOpsMatch | Verdict::NoProgram => Ok(()),
        Verdict::PreOptimization => Err(CompareError::NotTheProgram(format!(
            "{file} ({}) is the program before XLA's optimizations: it has no fusions and is not \
             scheduled, while the capture ran the optimized program {} ({} instructions, {} of them \
             the same). The optimized program names its ops differently (fusions, copies), so \
             no op the capture timed is in {file} and every prediction would be \"-\". Pass the \
             compiled module instead: jax.jit(f).lower(...).compile().as_text(), or \
             XLA_FLAGS=--xla_dump_to=DIR (the *after_optimizations.txt file).{}",
            m.name,
            r.program,
            r.captured_total,
            r.matched,
            differences(file, r)
        ))),
        Verdict::Different => Err(CompareError::NotTheProgram(format!(
            "{file} ({}, fingerprint {}) is not the program the capture ran: it was compared \
             with {} (fingerprint {}), and {} of that program's {} instructions have the same \
             opcode and shape. Differences:{}",
            m.name,
            r.given_fingerprint,
            r.program,
            r.captured_fingerprint,
            r.matched,
            r.captured_total,
            differences(file, r)
        ))),
    }
}

/// `TPU` or `GPU` when the capture has such device planes, else `CPU`.
pub fn capture_device(spaces: &[XSpace]) -> String {
    let names = || {
        spaces
            .iter()
            .flat_map(|s| &s.planes)
            .map(|p| p.name.as_str())
    };
    if names().any(|n| n.starts_with("/device:TPU")) {
        "TPU".into()
    } else if names().any(|n| n.starts_with("/device:GPU")) {
        "GPU".into()
    } else {
        "CPU".into()
    }
}

/// Matches each module (with the analysis tpusim made of it) to the
/// capture's program by structure and sets its predictions next to what the
/// capture measured. `file` names the modules' source in messages.
pub fn compare(
    capture: &str,
    summary: &ProfileSummary,
    spaces: &[XSpace],
    modules: &[(&Module, &tpusim_perf::Analysis)],
    chip_name: &str,
    file: &str,
) -> Result<Comparison, CompareError> {
    let programs = captured_programs(spaces);
    let mut predicted = HashMap::new();
    let mut diffs = Vec::new();
    for &(m, analysis) in modules {
        let matching = match_module(m, &programs, &|module| timed_ops(summary, module));
        check_match(file, m, &matching)?;
        let module = match matching.verdict {
            Verdict::NoProgram => m.name.clone(),
            _ => base_name(&matching.program).to_string(),
        };
        let times = crate::predicted_avg_times(std::slice::from_ref(analysis));
        let rows = diff_rows(summary, &module, &times);
        if rows.is_empty() {
            return Err(CompareError::NotTheProgram(format!(
                "the capture timed no op of program {module}: {file} is not a program this capture ran"
            )));
        }
        for r in &rows {
            if let Some(t) = r.predicted_avg_s {
                predicted.insert((module.clone(), r.name.clone()), t);
            }
        }
        diffs.push(ProfileDiff {
            capture: capture.to_string(),
            capture_device: capture_device(spaces),
            module,
            chip: chip_name.to_string(),
            measured_total_s: rows.iter().map(|r| r.measured_total_s).sum(),
            predicted_total_s: rows
                .iter()
                .filter_map(|r| r.predicted_avg_s.map(|p| p * r.occurrences as f64))
                .sum(),
            matching,
            rows,
        });
    }
    Ok(Comparison { predicted, diffs })
}

/// `summary` as JSON (`tpusim profile --json`) with each op of a compared
/// program carrying `predicted_avg_s`, and how each module matched
/// (`matches`).
pub fn comparison_json(
    summary: &ProfileSummary,
    comparison: &Comparison,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut report = crate::profile_json(summary, &HashMap::new())?;
    if let Some(ops) = report.get_mut("ops").and_then(|v| v.as_array_mut()) {
        for (op, measured) in ops.iter_mut().zip(&summary.ops) {
            let module = measured.module.as_deref().map(base_name).unwrap_or("");
            let key = (module.to_string(), measured.name.clone());
            if let (Some(obj), Some(p)) = (op.as_object_mut(), comparison.predicted.get(&key)) {
                obj.insert("predicted_avg_s".into(), (*p).into());
            }
        }
    }
    let matches: Vec<&ModuleMatch> = comparison.diffs.iter().map(|d| &d.matching).collect();
    report["matches"] = serde_json::to_value(matches)?;
    Ok(report)
}
