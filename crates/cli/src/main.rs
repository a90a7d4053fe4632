//! `tpusim`: the command-line front door of the TPU system simulator.
//!
//! Output meant for pipes goes to stdout; diagnostics and progress go to stderr.
//! Exit codes: 0 success, 1 any error (including usage errors), 130 for a
//! command interrupted by Ctrl-C (`run`, `analyze`, `trace`, `compile`,
//! `partition`) — never another code.

mod alloc;
mod analyze;
mod check;
mod chips;
mod compile;
mod demo;
mod fmt;
mod input;
mod interrupt;
mod out;
mod partition;
mod profile;
mod progress;
mod render;
mod run;
mod trace;

use clap::{Parser, Subcommand};

// HLO modules are many small allocations; mimalloc is markedly faster than glibc's.
#[global_allocator]
static GLOBAL: alloc::MiMalloc = alloc::MiMalloc;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tpusim",
    version,
    about = "TPU system simulator: reads, checks and simulates XLA HLO programs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parse and verify HLO files; prints `ok NAME (N computations, M instructions)` per module
    Check(check::Args),
    /// Print a module as canonical HLO text on stdout
    Fmt(fmt::Args),
    /// Run the built-in demo: summarize a real JAX transformer train step
    Demo(demo::Args),
    /// List the hardware database (TPU generations and GPUs)
    Chips(chips::Args),
    /// Print the program XLA:TPU would run: tpusim's compiler passes over the module
    Compile(compile::Args),
    /// Predict the step time of a module on a chip or pod: each op priced on one device, collectives on the pod's torus
    Analyze(analyze::Args),
    /// Print the per-device module of an unpartitioned sharded module (tpusim's SPMD partitioner)
    Partition(partition::Args),
    /// Execute a module with the reference interpreter on its devices (global npz in, npz out)
    Run(run::Args),
    /// Summarize a real jax.profiler capture per HLO op (optionally against a prediction)
    Profile(profile::Args),
    /// Write profiler views of a simulated run: Perfetto trace, HTML report, xprof XSpace
    Trace(trace::Args),
}

fn main() -> ExitCode {
    alloc::keep_freed_memory();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are successes; usage errors are errors (exit 1, not clap's 2).
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.cmd {
        Cmd::Check(args) => check::run(&args),
        Cmd::Fmt(args) => fmt::run(&args),
        Cmd::Demo(args) => demo::run(&args),
        Cmd::Chips(args) => chips::run(&args),
        Cmd::Analyze(args) => analyze::run(&args),
        Cmd::Compile(args) => compile::run(&args),
        Cmd::Run(args) => run::run(&args),
        Cmd::Partition(args) => partition::run(&args),
        Cmd::Profile(args) => profile::run(&args),
        Cmd::Trace(args) => trace::run(&args),
    };
    // Output that did not reach stdout makes the run a failure whatever its result.
    let result = result.and_then(|ok| match out::finish() {
        Ok(()) => Ok(ok),
        Err(write_error) => Err(anyhow::anyhow!(write_error)),
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            if interrupt::is_interrupt(&e) {
                // The shell convention for SIGINT: 128 + 2.
                match e.downcast_ref::<interrupt::Interrupted>() {
                    Some(stop) => out::diag(format_args!("{stop}")),
                    None => out::diag(format_args!("interrupted")),
                }
                return ExitCode::from(130);
            }
            match e.downcast_ref::<input::Rendered>() {
                Some(diagnostic) => out::diag(format_args!("{diagnostic}")),
                None => out::diag(format_args!("error: {}", out::error_chain(&e))),
            }
            ExitCode::from(1)
        }
    }
}
