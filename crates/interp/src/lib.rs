//! tpusim-interp: a reference interpreter for HLO modules, on one or many simulated devices.
//!
//! Values are dense typed arrays in row-major logical order ([`Array`]) or tuples.
//! Every op runs as a whole-array kernel; called computations (fusion bodies, call,
//! while, conditional, reducers) are evaluated recursively. Anything not supported is
//! an [`InterpError::Unsupported`] naming the opcode or feature, never a wrong answer.
//! Multi-device modules run as one thread per device meeting at collectives
//! (`spmd`, `collectives`); `sharding` splits global arrays into per-device shards
//! and assembles results; `memory` estimates peak memory before anything runs.
//! The one value XLA itself leaves open, `rng` (uniform/normal), comes from this
//! crate's own reproducible Philox stream; `rng-bit-generator` is bit-exact.
//!
//! It must never print, never panic on a verified module, and never depend on the
//! CLI or the Python bindings.

mod batchnorm;
mod collectives;
mod complex;
mod complex_math;
mod conv;
mod decomp;
mod dots;
mod elementwise;
mod eval;
pub mod f8;
mod fastmath;
mod fft;
mod fused;
mod gather;
mod gemm;
mod index_ops;
mod lapack;
mod lift;
pub mod limits;
mod linalg;
pub mod manual;
pub mod memory;
mod more_ops;
pub mod npz;
mod numeric;
mod ops;
pub mod rng;
mod scatter;
pub mod sharding;
mod sort;
pub mod spmd;
mod strided;
mod tree_fold;
pub mod value;
mod window;

pub use eval::{check_single_device, execute, execute_limited};
pub use limits::{RunLimits, StopReason};
pub use spmd::{execute_devices, execute_devices_limited, run_global, GlobalRun};
pub use value::{Array, Data, Value};

/// Why a module could not be executed.
#[derive(Debug, thiserror::Error)]
pub enum InterpError {
    /// An opcode, element type or feature this interpreter does not implement.
    #[error("unsupported {0} in tpusim run")]
    Unsupported(String),
    /// The module needs more than one device.
    #[error("multi-device execution is not supported yet (module needs {0} devices)")]
    MultiDevice(i64),
    /// Wrong arguments for the entry computation.
    #[error("{0}")]
    BadArgument(String),
    /// A constant whose data was elided (`{...}`) in the text.
    #[error("constant '{0}' has elided data ({{...}}); use the pre-optimisation HLO")]
    ElidedConstant(String),
    /// A while loop ran past the iteration cap.
    #[error("while loop '{0}' exceeded {1} iterations")]
    LoopLimit(String, u64),
    /// A step limit, deadline or interrupt stopped the run ([`limits`]); names the
    /// innermost `while` loop being executed and the computation holding it.
    #[error(
        "{reason}{}{}",
        crate::limits::place(.loop_name, .computation),
        crate::limits::hint(.reason)
    )]
    Stopped {
        reason: StopReason,
        loop_name: Option<String>,
        computation: String,
    },
    /// An npz file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// Devices disagreed at a collective (different ops, or one finished early).
    #[error("collective mismatch: {0}")]
    Collective(String),
    /// Running the module would need more memory than allowed.
    #[error("{0}")]
    MemoryLimit(String),
    /// The module is malformed in a way the verifier did not catch.
    #[error("internal interpreter error: {0}")]
    Internal(String),
}

impl InterpError {
    /// Wraps a message with the instruction it came from.
    pub(crate) fn at(self, instr: &str) -> InterpError {
        match self {
            InterpError::Internal(m) => InterpError::Internal(format!("{instr}: {m}")),
            other => other,
        }
    }
}
