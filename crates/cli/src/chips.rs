//! `tpusim chips`: the hardware database as a table or JSON.

use crate::out;
use crate::render::table;
use anyhow::Result;
use tpusim_arch::ChipSummary;

#[derive(clap::Args)]
pub struct Args {
    /// Print every field of every chip as JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Also load and validate a chip described in a TOML file (fields as `tpusim chips --json` prints them)
    #[arg(long, value_name = "FILE")]
    chip_file: Option<String>,
}

pub fn run(args: &Args) -> Result<bool> {
    let mut chips = tpusim_arch::builtin();
    if let Some(path) = &args.chip_file {
        chips.push(tpusim_arch::from_path(std::path::Path::new(path))?);
    }
    if args.json {
        out::line(serde_json::to_string_pretty(&chips)?);
        return Ok(true);
    }
    let mut t = table(&ChipSummary::HEADER);
    for chip in &chips {
        crate::render::add_row(&mut t, ChipSummary::from_chip(chip).cells().to_vec());
    }
    out::line(&t);
    Ok(true)
}
