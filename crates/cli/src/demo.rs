//! `tpusim demo`: the main job. It takes a real JAX training step compiled into
//! the binary, verifies it, summarizes it, simulates it on a chip and prints the
//! performance report, writing the same analysis as JSON beside it and the
//! profiler views (Perfetto trace, HTML report, xprof XSpace) into a folder.

use crate::out;
use crate::render::{bytes, table};
use anyhow::{bail, Context, Result};
use tpusim_hlo::summary::summarize;

/// The programs the demo can run: real modules produced by JAX, embedded so the
/// demo needs no input.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Model {
    /// A small transformer train step, `jax.jit(...).lower()` (jax 0.10.2), 26 KiB of HLO text
    Transformer,
    /// Llama 3.1 8B train step, one device of an 8-way SPMD program (XLA benchmark), 2.8 MiB of HLO text
    #[value(name = "llama3-8b")]
    Llama3_8b,
    /// Mixtral 8x7B train step, one device of an 8-way SPMD program (XLA benchmark), 3.7 MiB of HLO text
    #[value(name = "mixtral-8x7b")]
    Mixtral8x7b,
}

impl Model {
    fn source(self) -> (&'static str, &'static str) {
        match self {
            Model::Transformer => (
                "transformer_train_step.lowered.hlo",
                include_str!("../../../testdata/corpus/jax_generated/transformer_train_step.lowered.hlo"),
            ),
            Model::Llama3_8b => (
                "hlo_llama31_8b_bf16_1x8.hlo",
                include_str!("../../../testdata/corpus/xla/zml__xla__xla__tools__benchmarks__hlo__hlo_llama31_8b_bf16_1x8.hlo"),
            ),
            Model::Mixtral8x7b => (
                "hlo_mixtral_8x7b_bf16_1x8.hlo",
                include_str!("../../../testdata/corpus/xla/zml__xla__xla__tools__benchmarks__hlo__hlo_mixtral_8x7b_bf16_1x8.hlo"),
            ),
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Which embedded program to simulate
    #[arg(long, value_enum, default_value = "llama3-8b")]
    model: Model,
    /// Chip to simulate (see `tpusim chips`). The default Llama 3.1 8B step
    /// (batch 2 × 8192 tokens per device, FSDP over 8 chips, no
    /// rematerialization) needs ~70 GiB per device once compiled: it fits a
    /// v5p (89.4 GiB), not a v5e (14.9 GiB)
    #[arg(long, default_value = "v5p")]
    chip: String,
    /// Where to write the analysis as JSON
    #[arg(long, value_name = "PATH", default_value = "tpusim-demo.json")]
    json_out: String,
    /// Folder for the profiler views (trace.json.gz, report.html, plugins/profile/...)
    #[arg(long, value_name = "DIR", default_value = "tpusim-demo")]
    out_dir: std::path::PathBuf,
    /// How many of the largest tensors to list
    #[arg(long, default_value_t = 5)]
    top: usize,
    #[command(flatten)]
    compile: crate::analyze::CompileArgs,
}

pub fn run(args: &Args) -> Result<bool> {
    let cancel = crate::interrupt::cancel();
    let chip = tpusim_arch::by_id(&args.chip)?;
    let (name, text) = args.model.source();
    let m = match tpusim_hlo::parse_module(text) {
        Ok(m) => m,
        Err(e) => bail!("{}", e.render(name, text)),
    };
    if let Err(errors) = tpusim_hlo::verifier::verify(&m) {
        bail!("embedded module failed verification: {}", errors[0].message);
    }
    print_summary(name, &m, args.top);
    // A sharded program runs on a pod of the chip, as `tpusim analyze` would
    // place it by default: its collectives are priced on the ICI torus.
    let pod = tpusim_pod::PodOptions {
        cancel: cancel.clone(),
        ..Default::default()
    }
    .model_for(&chip, &m)?;
    let comm: &dyn tpusim_perf::CommModel = match &pod {
        Some(p) => p,
        None => &tpusim_perf::LocalOnly,
    };
    let (prepared, analysis) = crate::progress::with_spinner("compiling and simulating", || {
        args.compile.analyze(&m, &chip, comm, &cancel)
    })?;
    crate::analyze::report(&analysis, &chip.name);
    std::fs::write(
        &args.json_out,
        serde_json::to_string_pretty(&analysis)? + "\n",
    )
    .with_context(|| format!("cannot write {}", args.json_out))?;
    out::line(format_args!(
        "\nanalysis written to {} (schema in README.md); try --chip v6e, --as-given or --model mixtral-8x7b",
        args.json_out
    ));
    out::line("\nprofiler views of the simulated step:");
    // The demo's folder is its own: each run replaces the views it wrote before.
    let opts = tpusim_views::ViewsOptions {
        generator: crate::trace::generator(),
        existing: tpusim_trace::Existing::Replace,
        timestamp: false,
        cancel,
    };
    let views = tpusim_views::write_views(
        &prepared.module,
        &chip,
        &analysis,
        comm,
        &args.out_dir,
        &opts,
    )?;
    crate::trace::print_views(&views, &args.out_dir);
    Ok(true)
}

fn print_summary(name: &str, m: &tpusim_hlo::Module, top: usize) {
    let s = summarize(m, top);
    out::line(format_args!(
        "tpusim demo — {name}, a real JAX program embedded in tpusim\n"
    ));
    out::line(format_args!(
        "module {}: {} computations, {} instructions, verified ok; inputs {} in {} parameters, outputs {} in {} arrays",
        s.name,
        s.computations,
        s.instructions,
        bytes(s.parameter_bytes()),
        s.parameters.len(),
        bytes(s.output_bytes()),
        s.outputs.len()
    ));
    let ops: Vec<String> = s
        .op_histogram
        .iter()
        .take(8)
        .map(|(op, n)| format!("{op} {n}"))
        .collect();
    out::line(format_args!("most frequent ops: {}", ops.join(", ")));
    let mut t = table(&["largest tensors", "opcode", "shape", "bytes"]);
    for x in &s.largest {
        crate::render::add_row(
            &mut t,
            vec![
                x.name.clone(),
                x.opcode.clone(),
                x.shape.without_layouts().to_string(),
                bytes(x.bytes),
            ],
        );
    }
    out::line(format_args!("{t}\n"));
}
