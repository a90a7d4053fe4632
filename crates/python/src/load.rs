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
/// partitioned by tpusim's SPMD partitioner, as the CLI does (with the
/// assumption the analysis reports and the mesh its device ids number). Other
/// modules come back unchanged.
pub fn partition_if_needed(
    m: Module,
    cancel: &tpusim_hlo::Cancel,
    propagation: tpusim_spmd::Propagation,
) -> Result<tpusim_spmd::ForPricing, BindError> {
    let options = tpusim_spmd::PartitionOptions {
        cancel: cancel.clone(),
        propagation,
        ..Default::default()
    };
    let name = m.name.clone();
    tpusim_spmd::partition_for_pricing(m, &options).map_err(|e| match e {
        tpusim_spmd::SpmdError::Cancelled(c) => BindError::from(c),
        e => BindError::Unsupported(format!("partitioning '{name}': {e}")),
    })
}

/// The propagation a `propagation=` keyword names (`None`: the default), as
/// the CLI's `--propagation` takes it.
pub fn propagation(name: Option<&str>) -> Result<tpusim_spmd::Propagation, BindError> {
    match name {
        None | Some("factors") => Ok(tpusim_spmd::Propagation::Factors),
        Some("forward") => Ok(tpusim_spmd::Propagation::Forward),
        Some(other) => Err(BindError::Argument(format!(
            "propagation must be 'factors' or 'forward', not {other:?}"
        ))),
    }
}
