use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::io::Read;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "tpusim", version, about = "TPU system simulator")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parse and verify HLO files
    Check { files: Vec<String> },
    /// Print canonical HLO text
    Fmt { file: String },
}

fn read_input(path: &str) -> Result<String> {
    if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check { files } => {
            let mut ok = true;
            for f in &files {
                let text = match read_input(f) {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("error: {e:#}");
                        ok = false;
                        continue;
                    }
                };
                match tpusim_hlo::parse_modules(&text) {
                    Ok(ms) => {
                        for m in ms {
                            println!(
                                "ok {} ({} computations, {} instructions)",
                                m.name,
                                m.visible_computation_count(),
                                m.visible_instruction_count()
                            );
                        }
                    }
                    Err(e) => {
                        eprintln!("{}", e.render(f, &text));
                        ok = false;
                    }
                }
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Cmd::Fmt { file } => {
            let text = read_input(&file).unwrap();
            match tpusim_hlo::parse_modules(&text) {
                Ok(ms) => {
                    for m in ms {
                        print!("{}", tpusim_hlo::print_module(&m));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{}", e.render(&file, &text));
                    ExitCode::from(1)
                }
            }
        }
    }
}
