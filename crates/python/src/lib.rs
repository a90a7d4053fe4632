//! tpusim-python: the PyO3 bindings behind the `tpusim` Python package (`python/`).
//!
//! A thin layer: every function takes HLO text (the Python side turns paths and JAX
//! objects into text), calls the core crates with the GIL released, and returns
//! plain data — JSON text identical to the CLI's `--json` output, or NumPy arrays.
//! Each core error becomes one class of the exception hierarchy in [`errors`]; a
//! panic is caught and raised as `InternalError`, never unwound into Python.
//!
//! The core crates must never depend on this crate or on PyO3. Built by maturin
//! (`pip install ./python`); a plain `cargo build` compiles it too, for clippy.
//!
//! Adding a core feature is one `#[pyfunction]` here (run through [`detached`],
//! returning JSON text or arrays), its line in `python/tpusim/_tpusim.pyi`, and a
//! typed wrapper in `python/tpusim/__init__.py`. New `Analysis` fields need nothing:
//! they reach `Report.to_dict()` through the JSON; `Report` properties read the
//! ones most often wanted. Pod keywords (`topology=`, `slices=`, `network=`,
//! `device_order=`) go through [`pod::PodArgs`], the CLI's `tpusim_pod::PodOptions`.

mod arrays;
mod errors;
mod load;
mod pod;

use errors::BindError;
use pod::PodArgs;
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;
use tpusim_hlo::Cancel;
use tpusim_interp::GlobalRun;

/// Runs `work` with the GIL released; a panic inside becomes `BindError::Internal`.
fn detached<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> Result<T, BindError> + Send,
) -> Result<T, BindError> {
    py.detach(|| no_panic(work))
}

/// Runs `work`, turning a panic into `BindError::Internal` instead of unwinding.
fn no_panic<T>(work: impl FnOnce() -> Result<T, BindError>) -> Result<T, BindError> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(BindError::Internal(format!(
            "internal error in tpusim (this is a bug): {what}"
        )))
    })
}

/// Resolves a chip from a builtin id or a TOML file.
fn chip(id: Option<&str>, file: Option<&str>) -> Result<tpusim_arch::Chip, BindError> {
    Ok(match (id, file) {
        (_, Some(path)) => tpusim_arch::from_path(std::path::Path::new(path))?,
        (Some(id), None) => tpusim_arch::by_id(id)?,
        (None, None) => return Err(BindError::Argument("give a chip id or a chip file".into())),
    })
}

/// The library path the CLI takes: TPU compiler passes (unless `as_given`), then the analysis.
fn compiled_analysis(
    module: &tpusim_hlo::Module,
    chip: &tpusim_arch::Chip,
    comm: &dyn tpusim_perf::CommModel,
    as_given: bool,
    collective_matmul: bool,
    cancel: &Cancel,
) -> Result<(tpusim_compile::Prepared, tpusim_perf::Analysis), BindError> {
    let mode = if as_given {
        tpusim_compile::Mode::AsGiven
    } else {
        tpusim_compile::Mode::Compile
    };
    Ok(tpusim_compile::analyze(
        module,
        chip,
        comm,
        mode,
        &tpusim_compile::CompileOptions {
            collective_matmul,
            cancel: cancel.clone(),
            ..Default::default()
        },
    )?)
}

fn to_json<T: serde::Serialize>(value: &T, what: &str) -> Result<String, BindError> {
    serde_json::to_string_pretty(value)
        .map_err(|e| BindError::Internal(format!("{what} to JSON: {e}")))
}

/// Analyzes the one module in `text` on a chip — on a pod when it is sharded or a
/// topology is given; returns the analysis as the JSON text `tpusim analyze --json`
/// prints for the same input and flags.
#[pyfunction]
#[pyo3(signature = (
    text, name, chip_id=None, chip_file=None,
    topology=None, slices=1, network=None, device_order=None, as_given=false,
    collective_matmul=false, mesh=None, propagation=None,
))]
#[allow(clippy::too_many_arguments)] // one per keyword of `tpusim.analyze`
fn analyze_json(
    py: Python<'_>,
    text: String,
    name: String,
    chip_id: Option<String>,
    chip_file: Option<String>,
    topology: Option<String>,
    slices: u32,
    network: Option<String>,
    device_order: Option<String>,
    as_given: bool,
    collective_matmul: bool,
    mesh: Option<Vec<u32>>,
    propagation: Option<String>,
) -> PyResult<String> {
    let pod_args = PodArgs {
        topology,
        slices,
        network,
        device_order,
        mesh,
    };
    let cancel = Cancel::default();
    Ok(interruptible(py, &cancel, || {
        let chip = chip(chip_id.as_deref(), chip_file.as_deref())?;
        let module = load::one_module(&name, &text, "analyze")?;
        let propagation = load::propagation(propagation.as_deref())?;
        let tpusim_spmd::ForPricing {
            module,
            notes,
            mesh,
        } = load::partition_if_needed(module, &cancel, propagation)?;
        let pod = pod_args.model(&chip, &module, mesh.as_deref(), &cancel)?;
        let comm = pod::comm(&pod);
        let (_, mut analysis) =
            compiled_analysis(&module, &chip, comm, as_given, collective_matmul, &cancel)?;
        analysis.assumptions.splice(0..0, notes);
        to_json(&analysis, "analysis")
    })?)
}

/// Writes the profiler views of one simulated run of the module in `text` into
/// `dir` (as `tpusim trace` does); returns the paths of the Chrome trace, the
/// HTML report and the XSpace.
#[pyfunction]
#[pyo3(signature = (
    text, name, dir, chip_id=None, chip_file=None,
    topology=None, slices=1, network=None, device_order=None, as_given=false,
    collective_matmul=false, force=false, timestamp=false, mesh=None, propagation=None,
))]
#[allow(clippy::too_many_arguments)] // one per keyword of `tpusim.trace`
fn trace_views(
    py: Python<'_>,
    text: String,
    name: String,
    dir: String,
    chip_id: Option<String>,
    chip_file: Option<String>,
    topology: Option<String>,
    slices: u32,
    network: Option<String>,
    device_order: Option<String>,
    as_given: bool,
    collective_matmul: bool,
    force: bool,
    timestamp: bool,
    mesh: Option<Vec<u32>>,
    propagation: Option<String>,
) -> PyResult<(String, String, String)> {
    let pod_args = PodArgs {
        topology,
        slices,
        network,
        device_order,
        mesh,
    };
    let cancel = Cancel::default();
    Ok(interruptible(py, &cancel, || {
        let chip = chip(chip_id.as_deref(), chip_file.as_deref())?;
        let module = load::one_module(&name, &text, "trace")?;
        let propagation = load::propagation(propagation.as_deref())?;
        let tpusim_spmd::ForPricing {
            module,
            notes,
            mesh,
        } = load::partition_if_needed(module, &cancel, propagation)?;
        let pod = pod_args.model(&chip, &module, mesh.as_deref(), &cancel)?;
        let comm = pod::comm(&pod);
        let (prepared, mut analysis) =
            compiled_analysis(&module, &chip, comm, as_given, collective_matmul, &cancel)?;
        analysis.assumptions.splice(0..0, notes);
        let opts = tpusim_views::ViewsOptions {
            generator: format!("tpusim {} (Python)", env!("CARGO_PKG_VERSION")),
            existing: if force {
                tpusim_trace::Existing::Replace
            } else {
                tpusim_trace::Existing::Refuse
            },
            timestamp,
            cancel: cancel.clone(),
        };
        let dir = std::path::Path::new(&dir);
        let views =
            tpusim_views::write_views(&prepared.module, &chip, &analysis, comm, dir, &opts)?;
        let text = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
        Ok((text(views.trace), text(views.report), text(views.xspace)))
    })?)
}

/// Summarizes a real `jax.profiler` capture per HLO op: the JSON text of
/// `tpusim profile PATH --json`, with `--hlo`/`--chip` predictions when `hlo`
/// (text, name) and `chip_id` are given.
#[pyfunction]
#[pyo3(signature = (path, hlo=None, chip_id=None))]
fn profile_json(
    py: Python<'_>,
    path: String,
    hlo: Option<(String, String)>,
    chip_id: Option<String>,
) -> PyResult<String> {
    Ok(detached(py, move || {
        let (summary, spaces) = tpusim_trace::read_profile_spaces(std::path::Path::new(&path))?;
        let report = match (hlo, chip_id) {
            (Some((text, name)), Some(id)) => {
                // As `tpusim profile --hlo`: matched to the capture's program
                // by structure, a different program refused.
                let chip = tpusim_arch::by_id(&id)?;
                let modules = load::modules(&name, &text)?;
                let analyses: Vec<_> = modules
                    .iter()
                    .map(|m| tpusim_perf::analyze(m, &chip))
                    .collect();
                let pairs: Vec<_> = modules.iter().zip(&analyses).collect();
                let c = tpusim_trace::compare(&path, &summary, &spaces, &pairs, &chip.name, &name)
                    .map_err(tpusim_trace::TraceError::from)?;
                tpusim_trace::comparison_json(&summary, &c)
            }
            (None, None) => tpusim_trace::profile_json(&summary, &Default::default()),
            _ => {
                return Err(BindError::Argument(
                    "give both hlo= and chip= to predict each op".into(),
                ))
            }
        }
        .map_err(|e| BindError::Internal(format!("profile to JSON: {e}")))?;
        to_json(&report, "profile")
    })?)
}

/// How `tpusim.run` is told the layout of a sharded module's outputs (the CLI's
/// `--output-sharding`): HLO sharding text, or the unpartitioned module's text.
#[derive(FromPyObject)]
enum OutputSharding {
    #[pyo3(transparent)]
    Text(String),
    #[pyo3(transparent)]
    Module((String, String)),
}

/// `tpusim.run(max_memory=)`: bytes, or a size such as `8G` (`tpusim run --max-memory`).
#[derive(FromPyObject)]
enum MaxMemory {
    #[pyo3(transparent)]
    Bytes(u64),
    #[pyo3(transparent)]
    Text(String),
}

impl MaxMemory {
    fn bytes(&self) -> Result<u64, BindError> {
        match self {
            MaxMemory::Bytes(b) => Ok(*b),
            MaxMemory::Text(t) => tpusim_interp::memory::parse_size(t)
                .map_err(|e| BindError::Argument(format!("max_memory: {e}"))),
        }
    }
}

/// Executes the one module in `text` on `arrays` (C-contiguous NumPy arrays whose
/// logical dtype names are `dtypes`), on as many simulated devices as it declares:
/// global arrays in and out, as `tpusim run`. Returns `(array, dtype name)` per
/// result leaf.
#[pyfunction]
#[pyo3(signature = (text, name, arrays, dtypes, max_memory=None, output_sharding=None, max_steps=None, timeout=None, propagation=None))]
#[allow(clippy::too_many_arguments)] // the Python keywords, one each
fn run<'py>(
    py: Python<'py>,
    text: String,
    name: String,
    arrays: Vec<Bound<'py, PyAny>>,
    dtypes: Vec<String>,
    max_memory: Option<MaxMemory>,
    output_sharding: Option<OutputSharding>,
    max_steps: Option<u64>,
    timeout: Option<f64>,
    propagation: Option<String>,
) -> PyResult<Vec<(Bound<'py, PyAny>, &'static str)>> {
    let timeout = timeout.map(timeout_duration).transpose()?;
    let propagation = load::propagation(propagation.as_deref())?;
    // Conversions hold the GIL; they too are guarded so no panic reaches Python.
    let call = RunCall {
        text,
        name,
        dtypes,
        max_memory,
        output_sharding,
        max_steps,
        timeout,
        propagation,
    };
    Ok(no_panic(|| run_guarded(py, call, arrays))?)
}

struct RunCall {
    text: String,
    name: String,
    dtypes: Vec<String>,
    max_memory: Option<MaxMemory>,
    output_sharding: Option<OutputSharding>,
    max_steps: Option<u64>,
    timeout: Option<Duration>,
    propagation: tpusim_spmd::Propagation,
}

/// `timeout=` seconds as a duration: positive and finite.
fn timeout_duration(secs: f64) -> Result<Duration, BindError> {
    if secs.is_nan() || secs <= 0.0 {
        return Err(BindError::Argument(format!(
            "timeout must be a positive number of seconds, got {secs}"
        )));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| BindError::Argument(format!("timeout {secs} is too large")))
}

/// The module, checked against the memory cap, and its run options; the
/// partitioning stops when `cancel` is set, and the run's interrupt flag is
/// `cancel`'s, so one Ctrl-C stops either.
fn prepare_run(
    call: RunCall,
    cancel: &Cancel,
) -> Result<(tpusim_hlo::Module, GlobalRun), BindError> {
    use tpusim_interp::{memory, sharding};
    let m = load::one_module(&call.name, &call.text, "run")?;
    // An unpartitioned sharded program runs partitioned, on global arrays.
    let global_outputs: Vec<Vec<usize>> = tpusim_interp::spmd::root_leaf_dims(&m);
    let unpartitioned = tpusim_spmd::needs_partitioning(&m);
    let m = load::partition_if_needed(m, cancel, call.propagation)?.module;
    let cap = match &call.max_memory {
        Some(limit) => limit.bytes()?,
        None => memory::default_cap(),
    };
    memory::check_run(&m, cap, unpartitioned.then_some(global_outputs.as_slice()))?;
    let leaves = m.instr(m.entry().root).shape.leaves().len();
    let (output_shardings, output_dims) = match call.output_sharding {
        None if unpartitioned => (None, Some(global_outputs)),
        None => (None, None),
        Some(OutputSharding::Text(t)) => (Some(sharding::parse_shardings(&t, leaves)?), None),
        Some(OutputSharding::Module((text, name))) => {
            let source = load::one_module(&name, &text, "run(output_sharding=)")?;
            sharding::outputs_of_unpartitioned(&source, leaves)
                .map_err(|e| BindError::Argument(format!("{name}: {e}")))?
        }
    };
    let opts = GlobalRun {
        output_shardings,
        output_dims,
        // A single buffer larger than the machine would abort the process.
        max_alloc: cap.min(memory::physical_memory().unwrap_or(u64::MAX)),
        limits: tpusim_interp::RunLimits {
            max_steps: call.max_steps,
            interrupt: cancel.flag(),
            ..Default::default()
        },
    };
    Ok((m, opts))
}

fn run_guarded<'py>(
    py: Python<'py>,
    mut call: RunCall,
    arrays: Vec<Bound<'py, PyAny>>,
) -> Result<Vec<(Bound<'py, PyAny>, &'static str)>, BindError> {
    let dtypes = std::mem::take(&mut call.dtypes);
    let timeout = call.timeout;
    // Partitioning a large sharded program takes a while: Ctrl-C stops it too.
    let cancel = Cancel::default();
    let (module, opts) = interruptible(py, &cancel, || prepare_run(call, &cancel))?;
    let shapes = module.entry_parameter_shapes();
    if arrays.len() != shapes.len() || dtypes.len() != arrays.len() {
        return Err(BindError::Argument(format!(
            "the program takes {} arguments, {} given",
            shapes.len(),
            arrays.len()
        )));
    }
    // A partitioned module takes global arrays: their dims are checked against
    // the parameters' shardings when they are split across devices.
    let check_dims = tpusim_interp::spmd::simulated_devices(&module) <= 1;
    let inputs = arrays
        .into_iter()
        .zip(dtypes)
        .zip(&shapes)
        .enumerate()
        .map(|(i, ((array, dtype), shape))| {
            arrays::to_value(i, shape, &arrays::Input { array, dtype }, check_dims)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let leaves = run_interruptible(py, &module, inputs, opts, timeout)?;
    leaves
        .into_iter()
        .map(|leaf| arrays::to_numpy(py, leaf))
        .collect()
}

/// How often a run waiting for its worker thread looks for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Stack of the worker thread: the interpreter recurses into called
/// computations (as much as a process's main thread allows, and more).
const WORKER_STACK_BYTES: usize = 64 << 20;

/// Runs the module on a worker thread (the deadline counting from its start)
/// while this thread waits for it (see [`interruptible`]): Ctrl-C sets the
/// run's interrupt flag, the worker stops at its next instruction, and the
/// handler's `KeyboardInterrupt` is raised.
fn run_interruptible(
    py: Python<'_>,
    module: &tpusim_hlo::Module,
    inputs: Vec<tpusim_interp::Value>,
    mut opts: GlobalRun,
    timeout: Option<Duration>,
) -> Result<Vec<tpusim_interp::Value>, BindError> {
    let cancel = Cancel::from_flag(opts.limits.interrupt.clone());
    interruptible(py, &cancel, move || {
        opts.limits = std::mem::take(&mut opts.limits).with_timeout(timeout);
        Ok(tpusim_interp::run_global(module, inputs, &opts)?)
    })
}

/// Runs `work` on a worker thread while this thread, without the GIL, waits
/// for it and every [`SIGNAL_POLL`] runs Python's signal handlers. When a
/// handler raises (Ctrl-C's `KeyboardInterrupt`), `cancel` is set, the worker
/// stops at its next check (a pass, an instruction, a loop iteration, a batch
/// of network events) and the handler's exception is raised; the worker's
/// cut-short result is dropped. A panic in `work` becomes `InternalError`.
fn interruptible<T: Send>(
    py: Python<'_>,
    cancel: &Cancel,
    work: impl FnOnce() -> Result<T, BindError> + Send,
) -> Result<T, BindError> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (tx, mut rx) = channel();
    std::thread::scope(|s| {
        let work = move || {
            let _ = tx.send(no_panic(work));
        };
        let worker = std::thread::Builder::new()
            .name("tpusim-work".into())
            .stack_size(WORKER_STACK_BYTES)
            .spawn_scoped(s, work)
            .map_err(|e| BindError::Internal(format!("cannot start the work thread: {e}")))?;
        let mut signal = None;
        let result = loop {
            // The receiver moves in and out: the closure run without the GIL must be Send.
            let (back, got) = py.detach(move || {
                let got = rx.recv_timeout(SIGNAL_POLL);
                (rx, got)
            });
            rx = back;
            match got {
                Ok(r) => break r,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    break Err(BindError::Internal("the work thread gave no result".into()))
                }
            }
            if signal.is_none() {
                if let Err(e) = py.check_signals() {
                    cancel.cancel();
                    signal = Some(e);
                }
            }
        };
        let _ = worker.join();
        match signal {
            Some(e) => Err(BindError::Python(e)),
            None => result,
        }
    })
}

/// One chip (a builtin id or a TOML file) as the JSON `tpusim chips --json` prints for it.
#[pyfunction]
#[pyo3(signature = (chip_id=None, chip_file=None))]
fn chip_json(
    py: Python<'_>,
    chip_id: Option<String>,
    chip_file: Option<String>,
) -> PyResult<String> {
    Ok(detached(py, move || {
        let chip = chip(chip_id.as_deref(), chip_file.as_deref())?;
        to_json(&chip, "chip")
    })?)
}

/// The hardware database as the JSON text `tpusim chips --json` prints.
#[pyfunction]
fn chips_json(py: Python<'_>) -> PyResult<String> {
    Ok(detached(py, || to_json(&tpusim_arch::builtin(), "chips"))?)
}

#[pymodule]
fn _tpusim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(analyze_json, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(trace_views, m)?)?;
    m.add_function(wrap_pyfunction!(profile_json, m)?)?;
    m.add_function(wrap_pyfunction!(chips_json, m)?)?;
    m.add_function(wrap_pyfunction!(chip_json, m)?)?;
    errors::register(m)
}
