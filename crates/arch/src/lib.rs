//! tpusim-arch: the hardware database of tpusim.
//!
//! One description per accelerator (TPU v2, v3, v4, v5e, v5p, v6e, TPU7x and,
//! for comparison, NVIDIA A100, H100 and H200), each a TOML file under
//! `crates/arch/chips/` that is embedded in the binary with `include_str!`.
//! Every number in those files carries a `# source:` comment naming where it
//! comes from (mostly `shared/spec/HARDWARE_REFERENCE.md`) and, where sources
//! disagree, which figure was chosen and why. Users can describe their own chip
//! in the same format and load it with [`from_toml_str`] or [`from_path`]
//! (the CLI's `--chip-file my.toml`); the [`schema`] module documents every
//! field and unit.
//!
//! A [`Chip`] describes **one JAX device** — what that is differs by chip (a
//! single TensorCore on v2/v3, a two-TensorCore megacore chip on v4/v5p, a
//! chiplet on TPU7x, one GPU) and is stated in [`Chip::device`]. Compute,
//! VMEM and HBM figures are per device; interconnect, PCIe and DCN figures
//! are per physical chip.
//!
//! This crate must never:
//! - print to stdout or stderr: every problem is returned as an [`ArchError`]
//!   whose `Display` is a complete `file:line:col: message` line;
//! - hold hardware numbers in code: every figure lives in a chip TOML file with
//!   its source (the code holds only schema rules such as "an MXU is 128 or 256
//!   wide");
//! - panic on user input (a broken *builtin* file is a bug that the tests catch);
//! - depend on other tpusim crates: it is a leaf that the simulator reads.

mod chip;
mod dtype;
mod error;
mod span;
mod table;
mod validate;

use std::path::Path;
use std::sync::OnceLock;

pub use chip::{
    Chip, ChipKind, CompilerConfig, GpuCores, HostLinks, Interconnect, MatmulPeaks, Memory,
    TensorCoreTiming, Topology, TpuCores, VectorUnit, Wraparound,
};
pub use dtype::{MatmulDtype, UnknownDtype};
pub use error::{ArchError, Location};
pub use table::{chips_table_rows, ChipSummary};

/// The chip-file format: every table, field and unit, with an example.
pub mod schema {
    #![doc = include_str!("../README.md")]
}

/// The builtin chip files, in listing order: id and TOML text.
const BUILTIN_FILES: [(&str, &str); 10] = [
    ("v2", include_str!("../chips/v2.toml")),
    ("v3", include_str!("../chips/v3.toml")),
    ("v4", include_str!("../chips/v4.toml")),
    ("v5e", include_str!("../chips/v5e.toml")),
    ("v5p", include_str!("../chips/v5p.toml")),
    ("v6e", include_str!("../chips/v6e.toml")),
    ("tpu7x", include_str!("../chips/tpu7x.toml")),
    ("a100", include_str!("../chips/a100.toml")),
    ("h100", include_str!("../chips/h100.toml")),
    ("h200", include_str!("../chips/h200.toml")),
];

/// Parses the builtin files once.
fn builtin_chips() -> &'static [Chip] {
    static CHIPS: OnceLock<Vec<Chip>> = OnceLock::new();
    CHIPS.get_or_init(|| {
        BUILTIN_FILES
            .iter()
            .map(|(id, text)| {
                from_toml_str(text, &format!("chips/{id}.toml"))
                    .unwrap_or_else(|e| panic!("builtin chip file is invalid (a tpusim bug): {e}"))
            })
            .collect()
    })
}

/// Every builtin chip, in listing order (TPUs oldest first, then GPUs).
pub fn builtin() -> Vec<Chip> {
    builtin_chips().to_vec()
}

/// The ids of the builtin chips, in listing order.
pub fn builtin_ids() -> Vec<&'static str> {
    BUILTIN_FILES.iter().map(|(id, _)| *id).collect()
}

/// The TOML text of a builtin chip file (with its source comments), e.g. as a
/// starting point for a user's own chip file.
pub fn builtin_source(id: &str) -> Option<&'static str> {
    let id = id.to_ascii_lowercase();
    BUILTIN_FILES
        .iter()
        .find(|(known, _)| *known == id)
        .map(|(_, text)| *text)
}

/// Looks up a builtin chip by id (case-insensitive). An unknown id yields
/// [`ArchError::UnknownChip`], whose message lists the valid ids.
pub fn by_id(id: &str) -> Result<Chip, ArchError> {
    let wanted = id.to_ascii_lowercase();
    builtin_chips()
        .iter()
        .find(|chip| chip.id == wanted)
        .cloned()
        .ok_or_else(|| ArchError::UnknownChip {
            id: id.to_string(),
            valid: builtin_ids().into_iter().map(str::to_string).collect(),
        })
}

/// Parses and validates a chip description. `origin` names the text in error
/// messages (normally the file path). Unknown fields are rejected, and every
/// error carries the field's dotted path and its `line:col` when known.
pub fn from_toml_str(text: &str, origin: &str) -> Result<Chip, ArchError> {
    let chip: Chip = toml::from_str(text).map_err(|e| {
        let message = e.message().trim_end().to_string();
        let error_span = e.span();
        let mut field = error_span
            .clone()
            .and_then(|s| span::key_path_containing(text, s));
        // A missing field is reported on its table: name the field itself.
        if let Some(missing) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            field = Some(match field {
                Some(table) => format!("{table}.{missing}"),
                None => missing.to_string(),
            });
        }
        ArchError::Parse {
            origin: origin.to_string(),
            location: error_span.map(|s| span::location(text, s.start)),
            field,
            message,
        }
    })?;
    validate::validate(&chip, text, origin)?;
    Ok(chip)
}

/// Reads, parses and validates a chip file; errors name the path.
pub fn from_path(path: &Path) -> Result<Chip, ArchError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ArchError::Io {
        origin: origin.clone(),
        source,
    })?;
    from_toml_str(&text, &origin)
}
