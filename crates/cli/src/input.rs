//! Reading HLO text from files or stdin, and parsing it with rendered diagnostics.

use anyhow::{Context, Result};
use std::io::Read;
use tpusim_hlo::{Cancel, Module, SourceMap};

/// Reads a file, or stdin for `-`; gzip-compressed input (`.hlo.gz`, found by its
/// magic bytes, not its name) is decompressed. Invalid UTF-8 is an error naming the
/// byte offset; StableHLO/MLIR text is an error naming what it is and the fix.
pub fn read_text(path: &str) -> Result<String> {
    let bytes = decompress_if_gzip(path, read_bytes(path)?)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not valid UTF-8 text (invalid byte at offset {})",
            display_name(path),
            e.utf8_error().valid_up_to()
        )
    })?;
    if let Some(what) = mlir_dialect(&text) {
        anyhow::bail!(
            "{}: this is {what} text, not HLO text; tpusim reads HLO. Print the program as HLO: \
             `lowered.as_text(dialect=\"hlo\")` or `jax.jit(f).lower(...).compiler_ir(\"hlo\").as_hlo_text()`",
            display_name(path)
        );
    }
    Ok(text)
}

/// The two magic bytes every gzip stream starts with (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

fn decompress_if_gzip(path: &str, bytes: Vec<u8>) -> Result<Vec<u8>> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes.as_slice())
        .read_to_end(&mut out)
        .with_context(|| format!("{}: corrupt gzip data", display_name(path)))?;
    Ok(out)
}

/// Names the MLIR dialect of `text` when it is an MLIR module (what
/// `Lowered.as_text()` prints by default) rather than HLO text.
pub fn mlir_dialect(text: &str) -> Option<&'static str> {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('#'))?;
    let is_mlir = first.starts_with("module @")
        || first.starts_with("module {")
        || first.starts_with("module attributes")
        || first.starts_with("func.func");
    if !is_mlir {
        return None;
    }
    Some(if text.contains("stablehlo.") {
        "StableHLO (MLIR)"
    } else if text.contains("mhlo.") {
        "MHLO (MLIR)"
    } else {
        "MLIR"
    })
}

fn read_bytes(path: &str) -> Result<Vec<u8>> {
    Ok(if path == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .context("cannot read stdin")?;
        b
    } else {
        std::fs::read(path).with_context(|| format!("cannot read {path}"))?
    })
}

/// The name to show for a path in messages.
pub fn display_name(path: &str) -> &str {
    if path == "-" {
        "<stdin>"
    } else {
        path
    }
}

/// Parses every module in `text`; on failure returns the rendered diagnostic.
pub fn parse(path: &str, text: &str) -> Result<Vec<(Module, SourceMap)>, String> {
    tpusim_hlo::parse_modules_with_spans(text).map_err(|e| e.render(display_name(path), text))
}

/// A diagnostic already rendered with its own `error:` prefix, location and
/// snippet; `main` prints it as it is instead of prefixing it again.
#[derive(Debug)]
pub struct Rendered(pub String);

impl std::fmt::Display for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Rendered {}

/// Reads, parses and verifies one file, turning a parse or verifier failure
/// into an error: every command checks its input before executing or pricing
/// it, so no later stage sees a module whose shapes disagree.
pub fn load(path: &str) -> Result<Vec<(Module, SourceMap)>> {
    let text = read_text(path)?;
    let modules = parse(path, &text).map_err(Rendered)?;
    for (m, spans) in &modules {
        if let Err(errors) = tpusim_hlo::verifier::verify(m) {
            let rendered: Vec<String> = errors
                .iter()
                .map(|e| e.render(display_name(path), &text, m, spans))
                .collect();
            return Err(Rendered(rendered.join("\n")).into());
        }
    }
    Ok(modules)
}

pub use tpusim_spmd::ForPricing;

/// `--propagation`: how an unpartitioned module's values without a sharding
/// get one.
#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum Propagation {
    /// A pass of its own first, both ways along each op's factors as
    /// Shardy (XLA's propagation) does
    #[default]
    Factors,
    /// During the partitioning walk, from operands to results with XLA's
    /// backward steps where they matter (tpusim's earlier propagation: it
    /// keeps the tokens' batch tiling at an unconstrained embedding lookup
    /// and says so)
    Forward,
}

impl From<Propagation> for tpusim_spmd::Propagation {
    fn from(p: Propagation) -> Self {
        match p {
            Propagation::Forward => tpusim_spmd::Propagation::Forward,
            Propagation::Factors => tpusim_spmd::Propagation::Factors,
        }
    }
}

/// An unpartitioned sharded module (what `jax.jit(...).lower(...)` prints) is
/// partitioned by tpusim's SPMD partitioner before it is simulated; the note
/// goes into the report's assumptions. Other modules come back unchanged.
pub fn partition_if_needed(
    m: Module,
    cancel: &Cancel,
    propagation: Propagation,
) -> Result<ForPricing> {
    let options = tpusim_spmd::PartitionOptions {
        cancel: cancel.clone(),
        propagation: propagation.into(),
        ..Default::default()
    };
    let name = m.name.clone();
    tpusim_spmd::partition_for_pricing(m, &options)
        .with_context(|| format!("partitioning module '{name}'"))
}
