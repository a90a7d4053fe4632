//! tpusim-compile: the TPU compiler stage. It turns the HLO a user can get
//! without a TPU (pre-optimization, SPMD-partitioned) into the program XLA:TPU
//! would run on the chosen chip, as a pipeline of passes like XLA's
//! HloPassPipeline: each pass is a plain named function over the module that
//! says what it changed; the verifier runs after each in tests; every pass's
//! output can be kept for dumps.
//!
//! Passes, in order: trip-count annotation, call inlining, algebraic
//! simplification (degenerate reductions), all-reduce folding
//! (`all-reduce(all-reduce)` over two sets of groups → one), all-reduce reassociation
//! (`add` of two all-reduces → one all-reduce), all-reduce + dynamic-slice →
//! reduce-scatter, dead-code elimination, collective combiners (chip
//! thresholds), TPU fusion (`tpusim_hlo::passes::fuse`, for unfused input),
//! async conversion of collectives, latency-hiding scheduling.
//!
//! This crate never prints, never panics on a parsed module, and never
//! depends on the CLI, the pod crate or Python bindings (collectives are
//! priced through perf's `CommModel` seam).

mod async_collectives;
mod cleanup;
mod collective_matmul;
mod combine;
mod fold;
pub mod normalize;
mod reassociate;
mod reduce_scatter;
mod schedule;
mod simplify;
mod transpose_folding;
mod util;

pub use async_collectives::convert_async_collectives;
pub use cleanup::{annotate_trip_counts, compact, dead_code_elimination};
pub use collective_matmul::decompose_all_gather_dots;
pub use combine::combine_collectives;
pub use fold::fold_all_reduces;
pub use reassociate::reassociate_all_reduces;
pub use reduce_scatter::all_reduce_to_reduce_scatter;
pub use schedule::{latency_hiding_schedule, SchedulerLimits};
pub use simplify::simplify_degenerate_reductions;
pub use transpose_folding::fold_transposes_into_dots;

use serde::{Deserialize, Serialize};
use tpusim_arch::Chip;
use tpusim_hlo::Module;
use tpusim_perf::CommModel;

/// What a pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    No,
    /// Changed, with a one-line summary ("27 all-reduces → reduce-scatter").
    Yes(String),
}

impl Changed {
    /// `Yes(describe(n))` when `n > 0`.
    pub fn count(n: usize, describe: impl FnOnce(usize) -> String) -> Changed {
        if n == 0 {
            Changed::No
        } else {
            Changed::Yes(describe(n))
        }
    }
}

/// Errors of the compile stage.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("pass {pass} left an invalid module: {message}")]
    Invalid { pass: String, message: String },
    /// `CompileOptions::cancel` was set (Ctrl-C).
    #[error(transparent)]
    Cancelled(#[from] tpusim_hlo::Cancelled),
}

/// How to compile.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Reschedule a module that is already scheduled (`is_scheduled=true`).
    pub reschedule: bool,
    /// Keep the module text after every pass (for `--dump-passes`).
    pub keep_dumps: bool,
    /// Run the verifier after every pass (tests; costs time on big modules).
    pub verify_each: bool,
    /// Decompose all-gather + dot pairs into collective matmuls (XLA:TPU's
    /// `xla_tpu_decompose_all_gather_einsum`, off by default as in XLA).
    pub collective_matmul: bool,
    /// Set to stop at the next pass boundary, or midway through the
    /// analysis ([`CompileError::Cancelled`]).
    pub cancel: tpusim_hlo::Cancel,
}

/// One pass's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassRecord {
    pub pass: String,
    /// What it changed, or `None` when it left the module as it was.
    pub change: Option<String>,
    /// Why it did not run, when skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// What the pipeline did.
#[derive(Clone, Debug, Default)]
pub struct CompileReport {
    pub passes: Vec<PassRecord>,
    /// (pass name, module text after it), when asked for.
    pub dumps: Vec<(String, String)>,
}

impl CompileReport {
    /// One line per pass that changed the program, for an analysis's assumptions.
    pub fn assumptions(&self) -> Vec<String> {
        let changes: Vec<String> = self
            .passes
            .iter()
            .filter_map(|p| p.change.as_ref().map(|c| format!("{c} ({})", p.pass)))
            .collect();
        let mut out = Vec::new();
        if !changes.is_empty() {
            out.push(format!(
                "priced the program tpusim's TPU compiler made of the input (--as-given prices it untouched): {}",
                changes.join("; ")
            ));
        }
        for p in &self.passes {
            if let Some(why) = &p.skipped {
                out.push(format!("compiler pass {} skipped: {why}", p.pass));
            }
        }
        out
    }
}

struct Pipeline<'a> {
    m: &'a mut Module,
    opts: &'a CompileOptions,
    report: CompileReport,
}

impl Pipeline<'_> {
    fn run(
        &mut self,
        name: &str,
        pass: impl FnOnce(&mut Module) -> Changed,
    ) -> Result<(), CompileError> {
        self.opts.cancel.check()?;
        let changed = pass(self.m);
        compact(self.m);
        if self.opts.verify_each {
            if let Err(errors) = tpusim_hlo::verify(self.m) {
                return Err(CompileError::Invalid {
                    pass: name.to_string(),
                    message: errors
                        .first()
                        .map(|e| e.message.clone())
                        .unwrap_or_default(),
                });
            }
        }
        if self.opts.keep_dumps {
            self.report
                .dumps
                .push((name.to_string(), tpusim_hlo::print_module(self.m)));
        }
        self.report.passes.push(PassRecord {
            pass: name.to_string(),
            change: match changed {
                Changed::No => None,
                Changed::Yes(s) => Some(s),
            },
            skipped: None,
        });
        Ok(())
    }

    fn skip(&mut self, name: &str, why: &str) {
        self.report.passes.push(PassRecord {
            pass: name.to_string(),
            change: None,
            skipped: Some(why.to_string()),
        });
    }
}

/// Compiles `m` in place for `chip`, pricing collectives with `comm` where a
/// pass needs their cost (the scheduler).
pub fn compile(
    m: &mut Module,
    chip: &Chip,
    comm: &dyn CommModel,
    opts: &CompileOptions,
) -> Result<CompileReport, CompileError> {
    let mut p = Pipeline {
        m,
        opts,
        report: CompileReport::default(),
    };
    if opts.keep_dumps {
        p.report
            .dumps
            .push(("input".to_string(), tpusim_hlo::print_module(p.m)));
    }
    let scheduled = p.m.config.is_scheduled == Some(true);
    p.run("while-loop-trip-count-annotator", annotate_trip_counts)?;
    // XLA:TPU makes every collective asynchronous and tiles every layout, so
    // a scheduled module with synchronous collectives, or with neither tiled
    // layouts nor any asynchronous op, was compiled by another backend
    // (XLA:CPU): its fusions, precision and schedule are not a TPU's. (A
    // hand-written scheduled module with async ops keeps its program.)
    let foreign = scheduled
        && (has_synchronous_collectives(p.m)
            || (!normalize::has_tpu_layouts(p.m) && !has_async_ops(p.m)));
    if scheduled && !opts.reschedule && !foreign {
        p.skip(
            "collective passes",
            "the module is already scheduled (is_scheduled=true): its program is kept",
        );
        return Ok(p.report);
    }
    if foreign {
        p.report.passes.push(PassRecord {
            pass: "backend-check".to_string(),
            change: Some(
                "compiled by another backend (scheduled, with synchronous collectives or \
                 without XLA:TPU's tiled layouts and async ops, e.g. XLA:CPU): its fusions, \
                 layout copies and float normalization undone, then compiled for the TPU and \
                 rescheduled"
                    .to_string(),
            ),
            skipped: None,
        });
        for (name, pass) in normalize::FOREIGN_PASSES {
            p.run(name, pass)?;
        }
    }
    let unfused =
        !p.m.instrs
            .iter()
            .any(|i| i.opcode == tpusim_hlo::Opcode::Fusion);
    p.run("call-inliner", |m| {
        let s = tpusim_hlo::passes::inline_calls(m);
        Changed::count(s.inlined + s.left, |_| {
            let left = if s.left > 0 {
                format!("; {} left as calls (module size bound)", s.left)
            } else {
                String::new()
            };
            format!("{} calls inlined{left}", s.inlined)
        })
    })?;
    p.run("algebraic-simplifier", simplify_degenerate_reductions)?;
    p.run("all-reduce-folder", fold_all_reduces)?;
    p.run("all-reduce-reassociate", reassociate_all_reduces)?;
    p.run("reduce-scatter-creator", all_reduce_to_reduce_scatter)?;
    p.run("dce", dead_code_elimination)?;
    match &chip.compiler {
        Some(cfg) => p.run("collective-combiner", |m| combine_collectives(m, cfg))?,
        None => p.skip(
            "collective-combiner",
            "the chip file has no [compiler] table",
        ),
    }
    match chip.mxu_dim() {
        Some(edge) if opts.collective_matmul => p.run("collective-matmul", |m| {
            decompose_all_gather_dots(m, i64::from(edge))
        })?,
        None if opts.collective_matmul => {
            p.skip("collective-matmul", "the chip has no MXU (not a TPU)")
        }
        _ => {}
    }
    p.run("transpose-folding", fold_transposes_into_dots)?;
    if unfused {
        p.run("tpu-fusion", |m| {
            let s = tpusim_hlo::passes::fuse(m);
            Changed::count(s.fusions, |n| {
                format!(
                    "{} instructions fused into {n} fusions ({} cheap producers computed again \
                     in a second consumer, {} reductions also outputting the producer they read)",
                    s.fused_instructions, s.duplicated, s.multi_output
                )
            })
        })?;
    }
    p.run("async-collective-conversion", convert_async_collectives)?;
    let limits = SchedulerLimits {
        overlap_limit: chip
            .compiler
            .as_ref()
            .map_or(1, |c| c.collective_overlap_limit),
        // The scheduler counts the buffers the program allocates; the entry
        // parameters (weights, optimizer state, the batch) already hold
        // their share of HBM.
        memory_limit_bytes: chip
            .memory
            .hbm_bytes
            .saturating_sub(entry_parameter_bytes(p.m)),
    };
    p.run("latency-hiding-scheduler", |m| {
        latency_hiding_schedule(m, chip, comm, &limits)
    })?;
    // A pass that priced collectives may have been cut short by the flag.
    opts.cancel.check()?;
    Ok(p.report)
}

/// Bytes of the entry computation's parameters (resident for the whole step).
fn entry_parameter_bytes(m: &Module) -> u64 {
    m.entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i))
        .filter(|i| i.opcode == tpusim_hlo::Opcode::Parameter)
        .map(|i| i.shape.byte_size())
        .fold(0, u64::saturating_add)
}

/// Whether a computation runs a collective synchronously.
fn has_synchronous_collectives(m: &Module) -> bool {
    use tpusim_hlo::Opcode::*;
    m.comps.iter().filter(|c| !c.is_async_sugar).any(|c| {
        c.instrs.iter().any(|&i| {
            matches!(
                m.instr(i).opcode,
                AllReduce | AllGather | ReduceScatter | CollectivePermute | AllToAll
            )
        })
    })
}

/// Whether any computation starts an asynchronous op (a collective, a copy,
/// a wrapped computation).
fn has_async_ops(m: &Module) -> bool {
    use tpusim_hlo::Opcode::*;
    m.instrs.iter().any(|i| {
        i.async_sugar.is_some()
            || matches!(
                i.opcode,
                AsyncStart
                    | AllGatherStart
                    | AllReduceStart
                    | CollectivePermuteStart
                    | CopyStart
                    | Send
                    | Recv
            )
    })
}

/// How a program is priced: compiled for the chip (the default), or as given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Compile,
    /// Price the input untouched (a TPU-compiled dump).
    AsGiven,
}

/// The program that is priced and what the compiler did to it.
pub struct Prepared {
    pub module: Module,
    pub report: CompileReport,
}

/// The one path every front end (CLI, Python) takes: compiles `m` unless
/// `mode` is [`Mode::AsGiven`], analyzes the result, and lists in the
/// analysis's assumptions what the compiler changed.
pub fn analyze(
    m: &Module,
    chip: &Chip,
    comm: &dyn CommModel,
    mode: Mode,
    opts: &CompileOptions,
) -> Result<(Prepared, tpusim_perf::Analysis), CompileError> {
    let mut module = m.clone();
    let report = match mode {
        Mode::AsGiven => CompileReport::default(),
        Mode::Compile => compile(&mut module, chip, comm, opts)?,
    };
    opts.cancel.check()?;
    let mut a = tpusim_perf::analyze_cancellable(&module, chip, comm, &opts.cancel)?;
    let mut notes = report.assumptions();
    if mode == Mode::AsGiven {
        notes.push("priced as given (--as-given): no TPU compiler passes ran".to_string());
    }
    let c = &a.communication;
    if mode == Mode::Compile && c.communication_s > 0.0 {
        notes.push(format!(
            "{:.0}% of communication hidden behind compute by the schedule",
            100.0 * (c.communication_s - c.exposed_communication_s) / c.communication_s
        ));
    }
    notes.append(&mut a.assumptions);
    a.assumptions = notes;
    Ok((Prepared { module, report }, a))
}
