//! The Python exception hierarchy and the one place core errors become Python errors.
//!
//! ```text
//! TpusimError(Exception)
//! ├── ParseError        HLO text that does not parse (message: file:line:col + snippet)
//! ├── VerifyError       HLO that parses but is malformed (rendered diagnostics)
//! ├── ChipError         unknown chip id, or a chip file that does not validate
//! ├── ArgumentError     arguments that do not fit the program (count, shape, dtype)
//! ├── TopologyError     a pod that cannot be built or does not fit the module
//! ├── UnsupportedError  a feature tpusim does not simulate yet (names it)
//! ├── LimitError        a run stopped by max_steps=, timeout= or the loop cap (names the loop)
//! └── InternalError     a tpusim bug, including a caught Rust panic
//! ```

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use tpusim_interp::InterpError;

create_exception!(
    _tpusim,
    TpusimError,
    PyException,
    "Base class of every tpusim error."
);
create_exception!(
    _tpusim,
    ParseError,
    TpusimError,
    "The HLO text does not parse."
);
create_exception!(
    _tpusim,
    VerifyError,
    TpusimError,
    "The HLO parses but is malformed."
);
create_exception!(
    _tpusim,
    ChipError,
    TpusimError,
    "Unknown chip, or an invalid chip file."
);
create_exception!(
    _tpusim,
    ArgumentError,
    TpusimError,
    "Arguments that do not fit the program."
);
create_exception!(
    _tpusim,
    TopologyError,
    TpusimError,
    "A topology, slice count or device order that cannot be built or does not fit the module."
);
create_exception!(
    _tpusim,
    UnsupportedError,
    TpusimError,
    "A feature tpusim does not simulate yet."
);
create_exception!(
    _tpusim,
    LimitError,
    TpusimError,
    "A run stopped by its step or time limit (max_steps=, timeout=) or the while-loop cap."
);
create_exception!(
    _tpusim,
    InternalError,
    TpusimError,
    "A tpusim bug (a caught panic or a broken invariant)."
);

/// Why a binding call failed; each variant maps to one Python exception class.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Rendered parse diagnostic.
    #[error("{0}")]
    Parse(String),
    /// Rendered verifier diagnostics, one per line group.
    #[error("{0}")]
    Verify(String),
    #[error(transparent)]
    Chip(#[from] tpusim_arch::ArchError),
    #[error("{0}")]
    Argument(String),
    /// A pod that cannot be built (`tpusim_pod::PodError`, rendered).
    #[error("{0}")]
    Topology(String),
    #[error("{0}")]
    Unsupported(String),
    /// A run stopped by a limit (names the while loop).
    #[error("{0}")]
    Limit(String),
    #[error("{0}")]
    Internal(String),
    /// A Python exception to raise as it is (`KeyboardInterrupt` from Ctrl-C).
    #[error(transparent)]
    Python(#[from] PyErr),
    /// Any other failure (a loop limit, an I/O error): plain `TpusimError`.
    #[error("{0}")]
    Other(String),
}

impl From<InterpError> for BindError {
    fn from(e: InterpError) -> BindError {
        let text = e.to_string();
        match e {
            InterpError::Unsupported(_) | InterpError::MultiDevice(_) => {
                BindError::Unsupported(text)
            }
            InterpError::BadArgument(_) | InterpError::ElidedConstant(_) => {
                BindError::Argument(text)
            }
            InterpError::LoopLimit(..) | InterpError::Stopped { .. } => BindError::Limit(text),
            InterpError::Io(_) | InterpError::Collective(_) | InterpError::MemoryLimit(_) => {
                BindError::Other(text)
            }
            InterpError::Internal(_) => BindError::Internal(text),
        }
    }
}

impl From<tpusim_views::ViewsError> for BindError {
    fn from(e: tpusim_views::ViewsError) -> BindError {
        match e {
            tpusim_views::ViewsError::Cancelled(c) => c.into(),
            e => BindError::Other(e.to_string()),
        }
    }
}

impl From<tpusim_compile::CompileError> for BindError {
    fn from(e: tpusim_compile::CompileError) -> BindError {
        match e {
            tpusim_compile::CompileError::Cancelled(c) => c.into(),
            e => BindError::Internal(e.to_string()),
        }
    }
}

/// Work stopped by its cancel flag: the caller that set it (on Ctrl-C)
/// raises `KeyboardInterrupt` instead; this is what is left otherwise.
impl From<tpusim_hlo::Cancelled> for BindError {
    fn from(e: tpusim_hlo::Cancelled) -> BindError {
        BindError::Other(e.to_string())
    }
}

impl From<tpusim_trace::TraceError> for BindError {
    fn from(e: tpusim_trace::TraceError) -> BindError {
        BindError::Other(e.to_string())
    }
}

impl From<BindError> for PyErr {
    fn from(e: BindError) -> PyErr {
        let text = e.to_string();
        match e {
            BindError::Parse(_) => ParseError::new_err(text),
            BindError::Verify(_) => VerifyError::new_err(text),
            BindError::Chip(_) => ChipError::new_err(text),
            BindError::Argument(_) => ArgumentError::new_err(text),
            BindError::Topology(_) => TopologyError::new_err(text),
            BindError::Unsupported(_) => UnsupportedError::new_err(text),
            BindError::Limit(_) => LimitError::new_err(text),
            BindError::Internal(_) => InternalError::new_err(text),
            BindError::Python(e) => e,
            BindError::Other(_) => TpusimError::new_err(text),
        }
    }
}

/// Registers the exception classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TpusimError", py.get_type::<TpusimError>())?;
    m.add("ParseError", py.get_type::<ParseError>())?;
    m.add("VerifyError", py.get_type::<VerifyError>())?;
    m.add("ChipError", py.get_type::<ChipError>())?;
    m.add("ArgumentError", py.get_type::<ArgumentError>())?;
    m.add("TopologyError", py.get_type::<TopologyError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("LimitError", py.get_type::<LimitError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}
