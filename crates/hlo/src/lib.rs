//! tpusim-hlo: the HLO intermediate representation, its text parser, canonical
//! printer and verifier.
//!
//! This crate is the front end of tpusim: it reads HLO text exactly as JAX and
//! XLA print it and hands the rest of the simulator a typed, arena-allocated IR.
//! It must never print to stdout/stderr, never panic on any input, and never
//! depend on the simulator crates, the CLI or Python bindings.

pub mod analysis;
pub mod attr;
pub mod cancel;
pub mod error;
pub mod infer;
pub mod ir;
pub mod lexer;
pub mod literal;
pub mod names;
pub mod opcode;
pub mod parser;
pub mod passes;
pub mod printer;
pub mod sdy;
pub mod shape;
pub mod summary;
pub mod types;
pub mod verifier;

pub use attr::{Attr, AttrValue};
pub use cancel::{Cancel, Cancelled};
pub use error::ParseError;
pub use ir::{CompId, Computation, InstrId, Instruction, Module, MAX_DEVICES};
pub use names::NameTable;
pub use opcode::{OpCategory, Opcode};
pub use parser::{parse_module, parse_modules, parse_modules_with_spans, SourceMap};
pub use printer::print_module;
pub use shape::{ArrayShape, Layout, LayoutAttrs, Shape};
pub use types::PrimitiveType;
pub use verifier::{verify, VerifyError, MAX_CALL_DEPTH};
