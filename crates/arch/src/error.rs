//! Errors returned by the hardware database.

use std::fmt;

/// A 1-based line and column (in characters) inside a chip file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Everything that can go wrong when looking up or loading a chip.
///
/// The `Display` form is a complete one-line message in the usual
/// `file:line:col: message` shape, ready to show to a user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchError {
    /// `by_id` was given an id that no builtin chip has.
    #[error("unknown chip `{id}`; valid chips are: {}", .valid.join(", "))]
    UnknownChip {
        /// The id that was asked for.
        id: String,
        /// Every builtin id, in database order.
        valid: Vec<String>,
    },
    /// The file is not valid TOML, or does not fit the schema: a syntax error,
    /// a wrong type, a missing field or an unknown (misspelt) field.
    #[error("{}: {}{message}", at(.origin, .location), field_prefix(.field))]
    Parse {
        /// Where the text came from (a path, or `chips/<id>.toml` for builtins).
        origin: String,
        /// Position of the offending text, when the TOML parser reports one.
        location: Option<Location>,
        /// Dotted path of the key at that position (e.g. `memory.hbm_bytes`).
        field: Option<String>,
        /// The parser's description of the problem.
        message: String,
    },
    /// The file parsed, but a value breaks a rule of the schema (not positive,
    /// wrong unit, inconsistent with other fields, ...).
    #[error("{}: invalid `{field}`: {reason}", at(.origin, .location))]
    Invalid {
        /// Where the text came from.
        origin: String,
        /// Position of the offending value, when it is present in the file.
        location: Option<Location>,
        /// Dotted path of the field (e.g. `tpu.mxu_dim`).
        field: String,
        /// What is wrong and, where possible, how to fix it.
        reason: String,
    },
    /// A chip file could not be read.
    #[error("{origin}: cannot read chip file: {source}")]
    Io {
        /// The path that was read.
        origin: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl ArchError {
    /// The position inside the chip file, for errors that have one.
    pub fn location(&self) -> Option<Location> {
        match self {
            ArchError::Parse { location, .. } | ArchError::Invalid { location, .. } => *location,
            _ => None,
        }
    }

    /// The dotted field path the error is about, for errors that have one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ArchError::Parse { field, .. } => field.as_deref(),
            ArchError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

fn at(origin: &str, location: &Option<Location>) -> String {
    match location {
        Some(loc) => format!("{origin}:{loc}"),
        None => origin.to_string(),
    }
}

fn field_prefix(field: &Option<String>) -> String {
    match field {
        Some(f) => format!("`{f}`: "),
        None => String::new(),
    }
}
