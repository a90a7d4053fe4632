//! `tpusim fmt`: canonical HLO text on stdout.

use crate::input;
use anyhow::Result;
use std::io::Write;

#[derive(clap::Args)]
pub struct Args {
    /// HLO text file (`-` for stdin)
    file: String,
}

pub fn run(args: &Args) -> Result<bool> {
    let modules = input::load(&args.file)?;
    let mut out = std::io::stdout().lock();
    for (m, _) in &modules {
        out.write_all(tpusim_hlo::print_module(m).as_bytes())?;
    }
    Ok(true)
}
