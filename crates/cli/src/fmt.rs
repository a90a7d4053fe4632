//! `tpusim fmt`: canonical HLO text on stdout.

use crate::input;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin)
    file: String,
}

pub fn run(args: &Args) -> Result<bool> {
    let modules = input::load(&args.file)?;
    for (m, _) in &modules {
        crate::out::raw(&tpusim_hlo::print_module(m));
    }
    Ok(true)
}
