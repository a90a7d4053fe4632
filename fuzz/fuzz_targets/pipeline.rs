//! Fuzz target: the whole pipeline a CLI command takes must never panic or
//! hang on any module that parses and verifies: partition (an unpartitioned
//! sharded module), pod model, TPU compiler passes, the analysis (`analyze`,
//! priced on v5e with the link-level network simulation), the schedule replay
//! behind `trace`, and the reference interpreter (`run`) on random inputs
//! under a step budget and a memory cap. Errors are fine; panics are not.
//!
//! Run with `cargo +nightly fuzz run pipeline` from the repository root
//! (seed it with small files from testdata/corpus, see fuzz/README.md).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tpusim_hlo::Module;
use tpusim_interp::{memory, npz, GlobalRun, RunLimits};

/// Modules with more instructions than this are not priced or run (fuzzing
/// wants many small inputs per second, not one large one).
const MAX_INSTRUCTIONS: usize = 400;
/// Steps (instructions evaluated, all devices) a run may take: a loop that
/// never ends stops here.
const MAX_STEPS: u64 = 100_000;
/// Memory a run may use, estimated before it starts and checked per buffer.
const MAX_RUN_BYTES: u64 = 1 << 20;

fn pipeline(text: &str) {
    let Ok(modules) = tpusim_hlo::parse_modules(text) else {
        return;
    };
    for m in &modules {
        if m.instrs.len() > MAX_INSTRUCTIONS || tpusim_hlo::verify(m).is_err() {
            continue;
        }
        one(m);
    }
}

fn one(global: &Module) {
    let unpartitioned = tpusim_spmd::needs_partitioning(global);
    let m = if unpartitioned {
        let options = tpusim_spmd::PartitionOptions::default();
        match tpusim_spmd::partition(global, &options) {
            Ok(p) => p,
            Err(_) => return,
        }
    } else {
        global.clone()
    };
    price(&m);
    run(global, &m, unpartitioned);
}

/// `analyze --chip v5e --network sim`, then the schedule `trace` replays.
fn price(m: &Module) {
    let Ok(chip) = tpusim_arch::by_id("v5e") else {
        return;
    };
    let opts = tpusim_pod::PodOptions {
        network: tpusim_pod::Network::Sim,
        ..Default::default()
    };
    let Ok(pod) = opts.model_for(&chip, m) else {
        return;
    };
    let comm: &dyn tpusim_perf::CommModel = match &pod {
        Some(p) => p,
        None => &tpusim_perf::LocalOnly,
    };
    let compile = tpusim_compile::CompileOptions::default();
    for mode in [tpusim_compile::Mode::Compile, tpusim_compile::Mode::AsGiven] {
        if let Ok((prepared, _)) = tpusim_compile::analyze(m, &chip, comm, mode, &compile) {
            let _ = tpusim_perf::schedule_with_memory(&prepared.module, &chip, comm);
        }
    }
}

/// `run --random-inputs 0 --max-steps MAX_STEPS --max-memory MAX_RUN_BYTES`.
fn run(global: &Module, m: &Module, unpartitioned: bool) {
    if memory::check(m, MAX_RUN_BYTES).is_err() {
        return;
    }
    let shapes = if unpartitioned {
        global.entry_parameter_shapes()
    } else {
        match tpusim_interp::spmd::global_parameter_shapes(m) {
            Ok(s) => s,
            Err(_) => return,
        }
    };
    let Ok(args) = npz::random_args(&shapes, 0) else {
        return;
    };
    let output_dims = unpartitioned.then(|| tpusim_interp::spmd::root_leaf_dims(global));
    let opts = GlobalRun {
        output_shardings: None,
        output_dims,
        max_alloc: MAX_RUN_BYTES,
        limits: RunLimits {
            max_steps: Some(MAX_STEPS),
            ..RunLimits::default()
        },
    };
    let _ = tpusim_interp::run_global(m, args, &opts);
}

fuzz_target!(|data: &[u8]| {
    match std::str::from_utf8(data) {
        Ok(text) => pipeline(text),
        Err(_) => pipeline(&String::from_utf8_lossy(data)),
    }
});
