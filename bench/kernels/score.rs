//! Measured TPU kernel times turned into HLO and scored against
//! tpusim-perf's model. Shared by the `kernels` example (the benchmark) and
//! the perf crate's accuracy test.
//!
//! Data: bench/kernels/data (SCALE-Sim TPU's TPU v4 measurements, MIT; see
//! its README). Every case is one HLO module generated from the measured
//! shape; the predicted time is the model's time of its one kernel.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tpusim_arch::Chip;
use tpusim_hlo::{parse_module, InstrId, Module};
use tpusim_perf::{op_time_in, TimingContext};

/// One measured kernel.
pub struct Case {
    /// Set name: `gemm`, `add`, `exponential`, `reduce`, `transpose`,
    /// `convert`, `batched_gemm`.
    pub set: &'static str,
    /// Region (GEMM shape_class r0..r7) or `all`.
    pub region: String,
    pub label: String,
    pub module: Module,
    pub kernel: InstrId,
    pub measured_s: f64,
}

/// The measured data folder (bench/kernels/data), from the perf crate.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/kernels/data")
}

fn read_csv(path: &Path) -> Result<Vec<Vec<(String, String)>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::to_string)
        .collect();
    Ok(lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect())
}

fn field<'a>(row: &'a [(String, String)], name: &str) -> &'a str {
    row.iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

fn num(row: &[(String, String)], name: &str) -> f64 {
    field(row, name).parse().unwrap_or(f64::NAN)
}

fn case(
    set: &'static str,
    region: String,
    label: String,
    hlo: &str,
    measured_s: f64,
) -> Result<Case, String> {
    let module = parse_module(hlo).map_err(|e| format!("{label}: {e}"))?;
    let kernel = module.comp(module.entry).root;
    Ok(Case {
        set,
        region,
        label,
        module,
        kernel,
        measured_s,
    })
}

/// `jax.jit(lambda x, y: x @ y)` on bf16[M,K] x bf16[K,N].
pub fn gemm_hlo(m: u64, n: u64, k: u64) -> String {
    format!(
        "HloModule gemm_{m}x{n}x{k}\n\nENTRY main {{\n  x = bf16[{m},{k}]{{1,0}} parameter(0)\n  \
         y = bf16[{k},{n}]{{1,0}} parameter(1)\n  ROOT d = bf16[{m},{n}]{{1,0}} dot(x, y), \
         lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n"
    )
}

/// A batched einsum `bmk,bkn->bmn` in bf16.
pub fn batched_gemm_hlo(b: u64, m: u64, n: u64, k: u64) -> String {
    format!(
        "HloModule bgemm_{b}x{m}x{n}x{k}\n\nENTRY main {{\n  x = bf16[{b},{m},{k}]{{2,1,0}} \
         parameter(0)\n  y = bf16[{b},{k},{n}]{{2,1,0}} parameter(1)\n  ROOT d = \
         bf16[{b},{m},{n}]{{2,1,0}} dot(x, y), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, \
         rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}\n}}\n"
    )
}

/// One single-op kernel on bf16[1,d1,d2], as the op datasets ran it.
pub fn op_hlo(op: &str, d1: u64, d2: u64) -> Option<String> {
    let x = format!("bf16[1,{d1},{d2}]{{2,1,0}}");
    let body = match op {
        "add" => {
            format!("  a = {x} parameter(0)\n  b = {x} parameter(1)\n  ROOT r = {x} add(a, b)\n")
        }
        "exponential" => format!("  a = {x} parameter(0)\n  ROOT r = {x} exponential(a)\n"),
        "reduce" => format!(
            "  a = {x} parameter(0)\n  z = bf16[] constant(0)\n  ROOT r = bf16[1,{d1}]{{1,0}} \
             reduce(a, z), dimensions={{2}}, to_apply=sum\n"
        ),
        "transpose" => format!(
            "  a = {x} parameter(0)\n  ROOT r = bf16[1,{d2},{d1}]{{2,1,0}} transpose(a), \
             dimensions={{0,2,1}}\n"
        ),
        "convert" => {
            format!("  a = {x} parameter(0)\n  ROOT r = f32[1,{d1},{d2}]{{2,1,0}} convert(a)\n")
        }
        _ => return None,
    };
    Some(format!(
        "HloModule {op}_{d1}x{d2}\n\nsum {{\n  p = bf16[] parameter(0)\n  q = bf16[] \
         parameter(1)\n  ROOT s = bf16[] add(p, q)\n}}\n\nENTRY main {{\n{body}}}\n"
    ))
}

pub const OPS: [&str; 5] = ["add", "exponential", "reduce", "transpose", "convert"];

/// Every measured GEMM (1260), single op (5 x ~207) and batched GEMM (70).
pub fn load_cases(dir: &Path) -> Result<Vec<Case>, String> {
    let mut out = Vec::new();
    // The stratified set, and the older broad shape set (grid, tall, deep-K,
    // ... shapes, many of them multiples of 128): never fitted, scored as a
    // validation set.
    for (set, file) in [
        ("gemm", "gemm_fusion_strat.csv"),
        ("gemm_master", "gemm_fusion_master.csv"),
    ] {
        for row in read_csv(&dir.join(file))? {
            if field(&row, "status") != "ok" {
                continue;
            }
            let (m, n, k) = (
                num(&row, "M") as u64,
                num(&row, "N") as u64,
                num(&row, "K") as u64,
            );
            out.push(case(
                set,
                field(&row, "shape_class").to_string(),
                format!("{m}x{n}x{k}"),
                &gemm_hlo(m, n, k),
                num(&row, "latency_us_device") * 1e-6,
            )?);
        }
    }
    for op in OPS {
        for row in read_csv(&dir.join(format!("ops/{op}_dataset.first16k.csv")))? {
            let (d1, d2) = (num(&row, "d1") as u64, num(&row, "d2") as u64);
            let Some(hlo) = op_hlo(op, d1, d2) else {
                continue;
            };
            out.push(case(
                op,
                "all".into(),
                format!("1x{d1}x{d2}"),
                &hlo,
                num(&row, "kernel_us") * 1e-6,
            )?);
        }
    }
    for row in read_csv(&dir.join("batch_reduction.csv"))? {
        let (b, m, n, k) = (
            num(&row, "b") as u64,
            num(&row, "M") as u64,
            num(&row, "N") as u64,
            num(&row, "K") as u64,
        );
        out.push(case(
            "batched_gemm",
            "all".into(),
            format!("{b}x{m}x{n}x{k}"),
            &batched_gemm_hlo(b, m, n, k),
            num(&row, "einsum_us") * 1e-6,
        )?);
    }
    Ok(out)
}

/// The measurement ran each kernel alone, back to back on the same inputs.
pub const MEASURED_CONTEXT: TimingContext = TimingContext {
    in_program: false,
    warm_operands: true,
};

/// Predicted time of a case on `chip`.
pub fn predict(c: &Case, chip: &Chip) -> f64 {
    op_time_in(&c.module, chip, c.kernel, MEASURED_CONTEXT).time_s
}

/// The model's account of a case's kernel (`None` without a TensorCore model).
pub fn explain(c: &Case, chip: &Chip) -> Option<tpusim_perf::KernelExplain> {
    tpusim_perf::explain_in(&c.module, chip, c.kernel, MEASURED_CONTEXT)
}

/// MAPE, median absolute percentage error and bias (mean signed error), in %.
#[derive(Clone, Copy, Debug, Default)]
pub struct Score {
    pub n: usize,
    pub mape: f64,
    pub median: f64,
    pub bias: f64,
}

pub fn score(pairs: &[(f64, f64)]) -> Score {
    let mut errs: Vec<f64> = pairs
        .iter()
        .filter(|(_, m)| *m > 0.0)
        .map(|(p, m)| (p - m) / m)
        .collect();
    if errs.is_empty() {
        return Score::default();
    }
    let n = errs.len();
    let mape = 100.0 * errs.iter().map(|e| e.abs()).sum::<f64>() / n as f64;
    let bias = 100.0 * errs.iter().sum::<f64>() / n as f64;
    errs.iter_mut().for_each(|e| *e = e.abs());
    errs.sort_by(f64::total_cmp);
    let median = 100.0 * errs[n / 2];
    Score {
        n,
        mape,
        median,
        bias,
    }
}

/// Scores of the cases selected by `keep`.
pub fn score_of(cases: &[Case], chip: &Chip, keep: impl Fn(&Case) -> bool) -> Score {
    let pairs: Vec<(f64, f64)> = cases
        .iter()
        .filter(|c| keep(c))
        .map(|c| (predict(c, chip), c.measured_s))
        .collect();
    score(&pairs)
}

/// One measured whole-model forward pass.
pub struct ModelCase {
    pub model: String,
    pub seq: u64,
    pub batch: u64,
    pub module: Module,
    pub measured_s: f64,
}

/// The whole-model HLO (bench/kernels/models, from tools/gen_model_hlo.py)
/// of every measured (model, seq, batch).
pub fn load_models(dir: &Path) -> Result<Vec<ModelCase>, String> {
    use std::io::Read;
    let mut out = Vec::new();
    for row in read_csv(&dir.join("e2e_device_truth_tpuv4.csv"))? {
        if field(&row, "status") != "ok" {
            continue;
        }
        let (model, seq, batch) = (
            field(&row, "model").to_string(),
            num(&row, "seq") as u64,
            num(&row, "batch") as u64,
        );
        let path = dir.join(format!("../models/{model}_s{seq}_b{batch}.hlo.gz"));
        let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let module = parse_module(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(ModelCase {
            model,
            seq,
            batch,
            module,
            measured_s: num(&row, "device_ms") * 1e-3,
        });
    }
    Ok(out)
}

/// Predicted device time of one forward pass: the program walk plus the
/// per-program overhead (the measurement includes one execute's launch).
pub fn predict_model(c: &ModelCase, chip: &Chip) -> f64 {
    let a = tpusim_perf::analyze(&c.module, chip);
    a.step_time_s
        + chip
            .tensorcore
            .as_ref()
            .map_or(0.0, |t| t.program_overhead_s)
}
