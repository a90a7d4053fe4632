//! XLA's `HloProto` messages as prost types, generated from the vendored
//! `proto/xla/service/hlo.proto` and `proto/xla/xla_data.proto` (a subset of
//! openxla/xla's files with the same field names and numbers) by the pure-Rust
//! generator in `gen/` (protox + prost-build; no protoc). The generated code is
//! checked in as `src/xla.rs`, so building tpusim never runs a protobuf compiler.
//!
//! This crate only holds messages: it must never convert, print or depend on
//! other tpusim crates (the IR → HloProto conversion lives in `tpusim-trace`).

/// The `xla` protobuf package.
#[allow(clippy::all, missing_docs)]
pub mod xla {
    // Generated code keeps prost-build's formatting.
    include!("xla.rs");
}

pub use xla::*;
