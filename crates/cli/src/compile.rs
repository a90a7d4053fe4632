//! `tpusim compile`: the program XLA:TPU would run, as tpusim's compiler
//! passes make it from the input; prints it as HLO text, a summary of each
//! pass on stderr, and optionally every pass's output into a folder.

use crate::analyze::{ChipArgs, PodArgs};
use crate::input;
use crate::out;
use anyhow::{Context, Result};
use tpusim_perf::{CommModel, LocalOnly};

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin)
    file: String,
    #[command(flatten)]
    chip: ChipArgs,
    /// Write the module after every pass into DIR (NN-pass.hlo)
    #[arg(long, value_name = "DIR")]
    dump_passes: Option<std::path::PathBuf>,
    /// Reschedule a module that is already scheduled (is_scheduled=true)
    #[arg(long)]
    reschedule: bool,
    /// Decompose each all-gather read by a dot into a collective matmul whose
    /// chunks overlap (XLA:TPU's --xla_tpu_decompose_all_gather_einsum)
    #[arg(long)]
    collective_matmul: bool,
    #[command(flatten)]
    pod: PodArgs,
}

pub fn run(args: &Args) -> Result<bool> {
    let cancel = crate::interrupt::cancel();
    let chip = args.chip.load()?;
    let modules = input::load(&args.file)?;
    let opts = tpusim_compile::CompileOptions {
        reschedule: args.reschedule,
        keep_dumps: args.dump_passes.is_some(),
        verify_each: true,
        collective_matmul: args.collective_matmul,
        cancel: cancel.clone(),
    };
    for (k, (m, _)) in modules.iter().enumerate() {
        let pod = args.pod.model(&chip, m, None, &cancel)?;
        let comm: &dyn CommModel = match &pod {
            Some(p) => p,
            None => &LocalOnly,
        };
        let mut module = m.clone();
        let report = tpusim_compile::compile(&mut module, &chip, comm, &opts)?;
        for p in &report.passes {
            let what = match (&p.change, &p.skipped) {
                (Some(c), _) => c.clone(),
                (None, Some(why)) => format!("skipped: {why}"),
                (None, None) => "no change".to_string(),
            };
            eprintln!("{}: {:<32} {what}", module.name, p.pass);
        }
        if let Some(dir) = &args.dump_passes {
            let dir = if modules.len() > 1 {
                dir.join(format!("{k:02}-{}", m.name))
            } else {
                dir.clone()
            };
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for (n, (pass, text)) in report.dumps.iter().enumerate() {
                let path = dir.join(format!("{n:02}-{pass}.hlo"));
                std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        out::raw(&tpusim_hlo::print_module(&module));
    }
    Ok(true)
}
