//! HLO text to verified modules, with diagnostics rendered exactly as the CLI does
//! (`name:line:col`, snippet, caret), so a Python exception reads like `tpusim check`.

use crate::errors::BindError;
use tpusim_hlo::{Module, SourceMap};

/// Parses and verifies every module of `text`; `name` is shown in diagnostics.
pub fn modules(name: &str, text: &str) -> Result<Vec<Module>, BindError> {
    let parsed = tpusim_hlo::parse_modules_with_spans(text)
        .map_err(|e| BindError::Parse(e.render(name, text)))?;
    let mut out = Vec::with_capacity(parsed.len());
    for (m, spans) in parsed {
        if let Err(errors) = tpusim_hlo::verify(&m) {
            return Err(BindError::Verify(render_verify(
                name, text, &m, &spans, &errors,
            )));
        }
        out.push(m);
    }
    Ok(out)
}

/// Exactly one module, for operations that take one program.
pub fn one_module(name: &str, text: &str, what: &str) -> Result<Module, BindError> {
    let mut all = modules(name, text)?;
    match all.len() {
        1 => Ok(all.remove(0)),
        n => Err(BindError::Argument(format!(
            "{name}: holds {n} modules; tpusim.{what} takes exactly one"
        ))),
    }
}

fn render_verify(
    name: &str,
    text: &str,
    m: &Module,
    spans: &SourceMap,
    errors: &[tpusim_hlo::VerifyError],
) -> String {
    let rendered: Vec<String> = errors
        .iter()
        .map(|e| e.render(name, text, m, spans))
        .collect();
    rendered.join("\n")
}

/// An unpartitioned sharded module (a `jax.jit(...).lower(...)` program) is
/// partitioned by tpusim's SPMD partitioner, as the CLI does; the note is the
/// assumption the analysis reports. Other modules come back unchanged.
pub fn partition_if_needed(
    m: Module,
    cancel: &tpusim_hlo::Cancel,
) -> Result<(Module, Option<String>), BindError> {
    if !tpusim_spmd::needs_partitioning(&m) {
        return Ok((m, None));
    }
    let options = tpusim_spmd::PartitionOptions {
        cancel: cancel.clone(),
        ..Default::default()
    };
    let unsupported = |e: tpusim_spmd::SpmdError| match e {
        tpusim_spmd::SpmdError::Cancelled(c) => BindError::from(c),
        e => BindError::Unsupported(format!("partitioning '{}': {e}", m.name)),
    };
    let mesh = tpusim_spmd::mesh_of(&m, &options).map_err(unsupported)?;
    let p = tpusim_spmd::partition(&m, &options).map_err(unsupported)?;
    let devices: u32 = mesh.iter().map(|a| a.1).product();
    let axes: Vec<String> = mesh.iter().map(|(n, s)| format!("{n}={s}")).collect();
    let note = format!(
        "partitioned by tpusim's SPMD partitioner for {devices} devices (mesh {})",
        axes.join(" x ")
    );
    Ok((p, Some(note)))
}
