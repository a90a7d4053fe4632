//! `tpusim run`: execute a module with the reference interpreter, on as many
//! simulated devices as it declares (global arrays in and out, split and
//! assembled by the shardings), after checking its memory estimate against a cap,
//! under the step and time limits given and stopping cleanly on Ctrl-C.

use crate::input;
use crate::interrupt::{self, Interrupted};
use crate::out;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::{Duration, Instant};
use tpusim_hlo::Cancel;
use tpusim_interp::sharding::OutputLayout;
use tpusim_interp::{memory, npz, sharding, GlobalRun, InterpError, RunLimits, StopReason, Value};

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin) holding one module
    file: String,
    /// How values of an unpartitioned module without a sharding get one
    #[arg(long, value_enum, default_value_t)]
    propagation: input::Propagation,
    /// Arguments as an .npz archive with arrays arg0..argN (bf16/f16 as uint16 bits, f8 as uint8)
    #[arg(long, value_name = "IN.npz", conflicts_with = "random_inputs")]
    inputs: Option<String>,
    /// Use deterministic pseudo-random arguments from this seed instead of --inputs
    #[arg(long, value_name = "SEED")]
    random_inputs: Option<u64>,
    /// Write the flattened results as out0..outM to this .npz archive
    #[arg(long, value_name = "OUT.npz")]
    output: Option<String>,
    /// Execute N times and print the median `exec_seconds: X` on stderr
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    repeat: Option<u32>,
    /// Refuse modules whose estimated peak memory (all devices) exceeds this, e.g. 8G, 512M
    /// [default: 75% of physical memory]
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    max_memory: Option<u64>,
    /// Sharding of the outputs of a multi-device module whose root carries none: HLO text
    /// such as '{devices=[2,1,4]<=[8] last_tile_dim_replicate}' (a tuple sharding for several
    /// outputs), or the unpartitioned HLO file (its root's sharding, else its global shapes)
    #[arg(long, value_name = "SHARDING|FILE")]
    output_sharding: Option<String>,
    /// Stop with an error naming the running while loop after N steps (instructions
    /// evaluated, summed over all devices)
    #[arg(long, value_name = "N")]
    max_steps: Option<u64>,
    /// Stop with an error naming the running while loop after SECONDS of execution
    /// (each of --repeat's executions), e.g. 0.5
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    timeout: Option<Duration>,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("the timeout must be positive, got {s}"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("timeout {s} is too large"))
}

/// Runs the module once under the limits; an interrupt becomes [`Interrupted`].
fn run_limited(
    m: &tpusim_hlo::Module,
    inputs: Vec<Value>,
    opts: &mut GlobalRun,
    timeout: Option<Duration>,
) -> Result<Vec<Value>> {
    // The deadline counts from this execution's start.
    opts.limits = std::mem::take(&mut opts.limits).with_timeout(timeout);
    match tpusim_interp::run_global(m, inputs, opts) {
        Err(
            e @ InterpError::Stopped {
                reason: StopReason::Interrupted,
                ..
            },
        ) => Err(Interrupted(e.to_string()).into()),
        other => Ok(other?),
    }
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    memory::parse_size(s)
}

/// What `--output-sharding` says about the outputs: shardings parsed from HLO
/// text, or what the unpartitioned module in an HLO file says about them.
fn output_info(arg: &str, leaves: usize) -> Result<OutputLayout> {
    if arg.trim_start().starts_with('{') {
        return Ok((Some(sharding::parse_shardings(arg, leaves)?), None));
    }
    let modules = input::load(arg)?;
    let [(m, _)] = modules.as_slice() else {
        bail!("{arg}: --output-sharding needs a file with exactly one module");
    };
    sharding::outputs_of_unpartitioned(m, leaves).with_context(|| arg.to_string())
}

pub fn run(args: &Args) -> Result<bool> {
    // From here on Ctrl-C only sets the flag: the run stops at the next phase
    // boundary or instruction and exits 130.
    let interrupt = interrupt::flag();
    let modules = input::load(&args.file)?;
    let [(m, _)] = modules.as_slice() else {
        bail!(
            "{}: holds {} modules; tpusim run takes exactly one",
            input::display_name(&args.file),
            modules.len()
        );
    };
    // An unpartitioned sharded module runs as tpusim's partitioner splits it,
    // on as many simulated devices as its mesh has; arrays stay global.
    let global_shapes = m.entry_parameter_shapes();
    let global_outputs: Vec<Vec<usize>> = tpusim_interp::spmd::root_leaf_dims(m);
    let unpartitioned = tpusim_spmd::needs_partitioning(m);
    let partitioned = input::partition_if_needed(
        m.clone(),
        &Cancel::from_flag(interrupt.clone()),
        args.propagation,
    )?
    .module;
    let m = &partitioned;
    let cap = args.max_memory.unwrap_or_else(memory::default_cap);
    memory::check_run(m, cap, unpartitioned.then_some(global_outputs.as_slice()))?;
    let shapes = if unpartitioned {
        global_shapes
    } else {
        tpusim_interp::spmd::global_parameter_shapes(m)?
    };
    let inputs = match (&args.inputs, args.random_inputs) {
        // Checked against the shapes before reading. The global arrays of a
        // partitioned module may be smaller than shard × tiles (padding):
        // bounded here, checked exactly against the shardings when split.
        // Every other module takes exactly its shapes.
        (Some(path), _) if !unpartitioned && tpusim_interp::spmd::simulated_devices(m) > 1 => {
            npz::read_named_at_most(Path::new(path), "arg", &shapes)?
        }
        (Some(path), _) => npz::read_named(Path::new(path), "arg", &shapes)?,
        (None, Some(seed)) => npz::random_args(&shapes, seed)?,
        (None, None) if shapes.is_empty() => Vec::new(),
        (None, None) => bail!(
            "the module takes {} parameters: give --inputs IN.npz or --random-inputs SEED",
            shapes.len()
        ),
    };
    interrupt::check(&interrupt)?;
    let leaves = m.instr(m.entry().root).shape.leaves().len();
    let (output_shardings, output_dims) = match &args.output_sharding {
        Some(s) => output_info(s, leaves)?,
        None if unpartitioned => (None, Some(global_outputs)),
        None => (None, None),
    };
    let mut opts = GlobalRun {
        output_shardings,
        output_dims,
        // A single buffer larger than the machine would abort the process
        // whatever --max-memory says.
        max_alloc: cap.min(memory::physical_memory().unwrap_or(u64::MAX)),
        limits: RunLimits {
            max_steps: args.max_steps,
            interrupt: interrupt.clone(),
            ..RunLimits::default()
        },
    };
    let repeat = args.repeat.unwrap_or(1) as usize;
    let mut times = Vec::with_capacity(repeat);
    let mut results = Vec::new();
    let mut inputs = Some(inputs);
    for k in 0..repeat {
        // Copying the inputs is I/O-side work: keep it out of the timed
        // region. The last run takes them, so a single run holds one copy.
        let inputs = if k + 1 == repeat {
            inputs.take().unwrap_or_default()
        } else {
            inputs.clone().unwrap_or_default()
        };
        let t = Instant::now();
        results = run_limited(m, inputs, &mut opts, args.timeout)?;
        times.push(t.elapsed().as_secs_f64());
    }
    // Ctrl-C after the last step: the results are not written.
    interrupt::check(&interrupt)?;
    if args.repeat.is_some() {
        times.sort_by(f64::total_cmp);
        out::diag(format_args!("exec_seconds: {:.9}", times[times.len() / 2]));
    }
    match &args.output {
        Some(path) => {
            npz::write_outputs(Path::new(path), &results).context("cannot write the outputs")?
        }
        None => {
            for (k, v) in results.iter().enumerate() {
                out::line(format!("out{k}: {}", summary(v)));
            }
        }
    }
    Ok(true)
}

/// `f32[2,3] {1, 2, 3, ...}`: the type, dims and the first few values.
fn summary(v: &Value) -> String {
    let Ok(a) = v.as_array() else {
        return "tuple".to_string();
    };
    const SHOWN: usize = 8;
    let dims: Vec<String> = a.dims.iter().map(usize::to_string).collect();
    let vals: Vec<String> = match &a.data {
        tpusim_interp::Data::Pred(x) => x.iter().take(SHOWN).map(|b| b.to_string()).collect(),
        tpusim_interp::Data::I64(x) => x.iter().take(SHOWN).map(|b| b.to_string()).collect(),
        tpusim_interp::Data::U64(x) => x.iter().take(SHOWN).map(|b| b.to_string()).collect(),
        // Only the shown values are converted (a whole f64 copy of a large
        // result would double the peak memory).
        _ => a
            .prefix(SHOWN)
            .to_f64s()
            .iter()
            .take(SHOWN)
            .map(|x| format!("{x}"))
            .collect(),
    };
    let more = if a.len() > SHOWN { ", ..." } else { "" };
    format!("{}[{}] {{{}{more}}}", a.ty, dims.join(","), vals.join(", "))
}
