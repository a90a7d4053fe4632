//! Shared helpers of the partitioner's data-driven tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use tpusim_interp::npz;
use tpusim_spmd::{partition, PartitionOptions};

pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

/// Case directories under `rel` that hold a `pre.hlo` (only sharded ones when asked).
pub fn case_dirs(rel: &str, sharded_only: bool) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(testdata(rel)) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("pre.hlo").exists())
        .filter(|p| {
            !sharded_only
                || std::fs::read_to_string(p.join("meta.json"))
                    .map(|m| m.contains("\"sharded\": true"))
                    .unwrap_or(false)
        })
        .collect();
    out.sort();
    out
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// One output of a case run: tpusim's global values and JAX's, as f64s.
pub struct Output {
    pub got: Vec<f64>,
    pub want: Vec<f64>,
    /// A bf16/f16 output, or any output of a program with bf16/f16 values.
    pub low_precision: bool,
}

/// Partitions `dir/pre.hlo`, runs it on global `inputs.npz` and pairs each
/// result with `outputs.npz`'s (dims checked equal).
pub fn run_outputs(dir: &Path) -> Result<Vec<Output>, String> {
    run_outputs_of(dir, "pre.hlo")
}

/// [`run_outputs`] for another module of the case (`xla_propagated.hlo`).
pub fn run_outputs_of(dir: &Path, file: &str) -> Result<Vec<Output>, String> {
    run_outputs_with(dir, file, &PartitionOptions::default())
}

/// [`run_outputs_of`] partitioned with `options`.
pub fn run_outputs_with(
    dir: &Path,
    file: &str,
    options: &PartitionOptions,
) -> Result<Vec<Output>, String> {
    let text = std::fs::read_to_string(dir.join(file)).map_err(err)?;
    let pre = tpusim_hlo::parse_module(&text).map_err(|e| e.message.clone())?;
    let post = partition(&pre, options).map_err(err)?;
    let shapes = pre.entry_parameter_shapes();
    let args = npz::read_named(&dir.join("inputs.npz"), "arg", &shapes).map_err(err)?;
    let out_shapes: Vec<tpusim_hlo::Shape> = pre
        .instr(pre.entry().root)
        .shape
        .leaves()
        .iter()
        .map(|a| tpusim_hlo::Shape::Array((*a).clone()))
        .collect();
    let want = npz::read_named(&dir.join("outputs.npz"), "out", &out_shapes).map_err(err)?;
    let opts = tpusim_interp::GlobalRun {
        output_dims: Some(
            out_shapes
                .iter()
                .map(|s| s.dims().iter().map(|&d| d as usize).collect())
                .collect(),
        ),
        ..Default::default()
    };
    let got = tpusim_interp::run_global(&post, args, &opts).map_err(err)?;
    let low_precision = text.contains("bf16[") || text.contains("f16[");
    if got.len() != want.len() {
        return Err(format!("{} outputs, JAX has {}", got.len(), want.len()));
    }
    let mut out = Vec::with_capacity(got.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let (g, w) = (g.as_array().map_err(err)?, w.as_array().map_err(err)?);
        if g.dims != w.dims {
            return Err(format!("output {k}: dims {:?}, JAX {:?}", g.dims, w.dims));
        }
        out.push(Output {
            got: g.to_f64s(),
            want: w.to_f64s(),
            low_precision: g.ty.bit_width() <= 16 || low_precision,
        });
    }
    Ok(out)
}

/// Partitions `dir/pre.hlo`, runs it on global `inputs.npz`, compares with `outputs.npz`.
pub fn run_case(dir: &Path) -> Result<(), String> {
    run_case_of(dir, "pre.hlo")
}

/// [`run_case`] for another module of the case (`xla_propagated.hlo`).
pub fn run_case_of(dir: &Path, file: &str) -> Result<(), String> {
    run_case_with(dir, file, &PartitionOptions::default())
}

/// [`run_case_of`] partitioned with `options`.
pub fn run_case_with(dir: &Path, file: &str, options: &PartitionOptions) -> Result<(), String> {
    for (k, o) in run_outputs_with(dir, file, options)?.iter().enumerate() {
        // bf16 programs round every intermediate: a different (but equally
        // valid) summation order of partial results moves f32 outputs too.
        let tol = if o.low_precision { 2e-2 } else { 1e-4 };
        for (i, (a, b)) in o.got.iter().zip(&o.want).enumerate() {
            let ok = (a - b).abs() <= tol * (1.0 + b.abs()) || (a.is_nan() && b.is_nan());
            if !ok {
                return Err(format!("output {k}[{i}]: {a} vs JAX {b}"));
            }
        }
    }
    Ok(())
}
