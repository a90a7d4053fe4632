//! `tpusim demo`: the main job. For now it reads a real JAX-generated transformer
//! train step compiled into the binary, verifies it and prints a readable summary.
//! Later issues extend it to simulate and report.

use crate::out;
use crate::render::{bytes, table};
use anyhow::{bail, Result};
use tpusim_hlo::summary::summarize;

/// A real module: `jax.jit(train_step).lower(...)` of a small transformer (jax 0.10.2).
const DEMO_HLO: &str =
    include_str!("../../../testdata/corpus/jax_generated/transformer_train_step.lowered.hlo");
const DEMO_NAME: &str = "transformer_train_step.lowered.hlo";

#[derive(clap::Args)]
pub struct Args {
    /// How many of the largest tensors to list
    #[arg(long, default_value_t = 10)]
    top: usize,
}

pub fn run(args: &Args) -> Result<bool> {
    let m = match tpusim_hlo::parse_module(DEMO_HLO) {
        Ok(m) => m,
        Err(e) => bail!("{}", e.render(DEMO_NAME, DEMO_HLO)),
    };
    if let Err(errors) = tpusim_hlo::verifier::verify(&m) {
        bail!("embedded module failed verification: {}", errors[0].message);
    }
    let s = summarize(&m, args.top);
    out::line(format_args!(
        "tpusim demo — {DEMO_NAME} (a real JAX transformer train step, before XLA optimization)\n"
    ));
    out::line(format_args!(
        "module {}: {} computations, {} instructions, verified ok",
        s.name, s.computations, s.instructions
    ));
    out::line(format_args!(
        "inputs  {} in {} parameters",
        bytes(s.parameter_bytes()),
        s.parameters.len()
    ));
    out::line(format_args!(
        "outputs {} in {} arrays\n",
        bytes(s.output_bytes()),
        s.outputs.len()
    ));

    let mut t = table(&["#", "parameter", "shape", "bytes"]);
    for (i, p) in s.parameters.iter().enumerate() {
        t.add_row(vec![
            i.to_string(),
            p.name.clone(),
            p.shape.without_layouts().to_string(),
            bytes(p.bytes),
        ]);
    }
    out::line(format_args!("{t}\n"));

    let mut t = table(&["opcode", "count"]);
    for (op, n) in s.op_histogram.iter().take(15) {
        t.add_row(vec![op.clone(), n.to_string()]);
    }
    if s.op_histogram.len() > 15 {
        t.add_row(vec![
            format!("… {} more opcodes", s.op_histogram.len() - 15),
            String::new(),
        ]);
    }
    out::line(format_args!("op histogram\n{t}\n"));

    let mut t = table(&["largest tensors", "opcode", "computation", "shape", "bytes"]);
    for x in &s.largest {
        t.add_row(vec![
            x.name.clone(),
            x.opcode.clone(),
            x.computation.clone(),
            x.shape.without_layouts().to_string(),
            bytes(x.bytes),
        ]);
    }
    out::line(format_args!("{t}"));
    Ok(true)
}
