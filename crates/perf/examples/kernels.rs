//! Kernel-time benchmark: tpusim's TensorCore model against measured TPU v4
//! kernels (bench/kernels/data). Prints MAPE, median and bias per set and
//! GEMM region next to SCALE-Sim TPU's published error, the old roofline's
//! error, and a 5-fold held-out error for every constant the v4 chip file
//! measured from this data.
//!
//! Run: `cargo run --release -p tpusim-perf --example kernels`

#[path = "../../../bench/kernels/score.rs"]
mod score;

use score::{load_cases, predict, score, score_of, Case, Score};
use tpusim_arch::{Chip, TensorCoreTiming};

/// SCALE-Sim TPU's own published error on its data (RESULTS.md).
fn published(set: &str) -> &'static str {
    match set {
        "gemm" => "13.5% (held-out)",
        "add" => "8.6%",
        "exponential" => "11.7%",
        "reduce" => "12.5%",
        "transpose" => "8.1%",
        "convert" => "12.0%",
        "batched_gemm" => "6.3% (R fit)",
        "gemm_master" => "- (validation: never fitted)",
        _ => "-",
    }
}

fn row(name: &str, before: Score, after: Score, published: &str) {
    println!(
        "| {name} | {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:+.1}% | {published} |",
        after.n, before.mape, after.mape, after.median, before.bias, after.bias
    );
}

type Setter = fn(&mut TensorCoreTiming, f64);
type Getter = fn(&TensorCoreTiming) -> f64;

/// A constant measured from the data: how to set it, the values tried, and
/// the sets it is fitted on.
struct Fitted {
    name: &'static str,
    get: Getter,
    set: Setter,
    grid: Vec<f64>,
    sets: &'static [&'static str],
}

fn fitted() -> Vec<Fitted> {
    let lin = |a: f64, b: f64, n: usize| -> Vec<f64> {
        (0..=n).map(|i| a + (b - a) * i as f64 / n as f64).collect()
    };
    vec![
        Fitted {
            name: "hbm_efficiency",
            get: |t| t.hbm_efficiency,
            set: |t, v| t.hbm_efficiency = v,
            grid: lin(0.6, 1.0, 40),
            sets: &["add", "exponential", "transpose"],
        },
        Fitted {
            name: "kernel_launch_s",
            get: |t| t.kernel_launch_s,
            set: |t, v| t.kernel_launch_s = v,
            grid: lin(0.5e-6, 1.3e-6, 40),
            sets: &[
                "gemm",
                "add",
                "exponential",
                "reduce",
                "transpose",
                "convert",
            ],
        },
        Fitted {
            name: "mxu_weight_load_cycles",
            get: |t| t.mxu_weight_load_cycles,
            set: |t, v| t.mxu_weight_load_cycles = v,
            grid: lin(0.0, 160.0, 40),
            sets: &["gemm"],
        },
        Fitted {
            name: "mxu_pass_overhead_cycles",
            get: |t| t.mxu_pass_overhead_cycles,
            set: |t, v| t.mxu_pass_overhead_cycles = v,
            grid: lin(0.0, 64.0, 32),
            sets: &["gemm"],
        },
        Fitted {
            name: "matmul_block_edge",
            get: |t| t.matmul_block_edge as f64,
            set: |t, v| t.matmul_block_edge = v as u64,
            grid: lin(256.0, 2048.0, 14),
            sets: &["gemm"],
        },
        Fitted {
            name: "matmul_block_depth",
            get: |t| t.matmul_block_depth as f64,
            set: |t, v| t.matmul_block_depth = v as u64,
            grid: lin(256.0, 2048.0, 14),
            sets: &["gemm"],
        },
        Fitted {
            name: "vreg_moves_per_cycle",
            get: |t| t.vreg_moves_per_cycle,
            set: |t, v| t.vreg_moves_per_cycle = v,
            grid: lin(0.5, 2.0, 30),
            sets: &["add", "exponential", "reduce", "transpose", "convert"],
        },
        Fitted {
            name: "cmem_bandwidth_bytes_per_s",
            get: |t| t.cmem_bandwidth_bytes_per_s,
            set: |t, v| t.cmem_bandwidth_bytes_per_s = v,
            grid: lin(1.0e12, 6.0e12, 40),
            sets: &["gemm"],
        },
    ]
}

fn with(chip: &Chip, f: &Fitted, v: f64) -> Chip {
    with_set(chip, f.set, v)
}

/// `chip` with one `[tensorcore]` constant set to `v`.
fn with_set(chip: &Chip, set: Setter, v: f64) -> Chip {
    let mut c = chip.clone();
    if let Some(t) = c.tensorcore.as_mut() {
        set(t, v);
    }
    c
}

/// 5-fold held-out error of one constant: fit it on 4/5 of its sets' cases
/// (the others at their chip-file values), score the fifth.
fn best_value(cases: &[&Case], chip: &Chip, f: &Fitted) -> f64 {
    f.grid
        .iter()
        .map(|&v| {
            let c = with(chip, f, v);
            let s = score(
                &cases
                    .iter()
                    .map(|x| (predict(x, &c), x.measured_s))
                    .collect::<Vec<_>>(),
            );
            (s.mape, v)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(f.grid[0], |x| x.1)
}

fn held_out(cases: &[&Case], chip: &Chip, f: &Fitted) -> (Score, f64, f64) {
    let mut pairs = Vec::new();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for fold in 0..5 {
        let train: Vec<&&Case> = cases
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 5 != fold)
            .map(|(_, c)| c)
            .collect();
        let best = f
            .grid
            .iter()
            .map(|&v| {
                let c = with(chip, f, v);
                let s = score(
                    &train
                        .iter()
                        .map(|x| (predict(x, &c), x.measured_s))
                        .collect::<Vec<_>>(),
                );
                (s.mape, v)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map_or(f.grid[0], |x| x.1);
        lo = lo.min(best);
        hi = hi.max(best);
        let c = with(chip, f, best);
        for (i, x) in cases.iter().enumerate() {
            if i % 5 == fold {
                pairs.push((predict(x, &c), x.measured_s));
            }
        }
    }
    (score(&pairs), lo, hi)
}

fn main() -> Result<(), String> {
    let chip = tpusim_arch::by_id("v4").map_err(|e| e.to_string())?;
    let mut roofline = chip.clone();
    roofline.tensorcore = None;
    let cases = load_cases(&score::data_dir())?;
    println!(
        "TPU v4, {} measured kernels (bench/kernels/data)\n",
        cases.len()
    );
    println!("| set | n | roofline MAPE | model MAPE | model median | roofline bias | model bias | SCALE-Sim TPU |");
    println!("|---|---|---|---|---|---|---|---|");
    let sets = [
        "gemm",
        "add",
        "exponential",
        "reduce",
        "transpose",
        "convert",
        "batched_gemm",
        "gemm_master",
    ];
    for set in sets {
        let keep = |c: &Case| c.set == set;
        row(
            set,
            score_of(&cases, &roofline, keep),
            score_of(&cases, &chip, keep),
            published(set),
        );
    }
    println!("\nGEMM by region (shape_class):\n");
    println!("| region | n | roofline MAPE | model MAPE | model median | roofline bias | model bias | SCALE-Sim TPU |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in 0..8 {
        let region = format!("r{r}");
        let keep = |c: &Case| c.set == "gemm" && c.region == region;
        row(
            &region,
            score_of(&cases, &roofline, keep),
            score_of(&cases, &chip, keep),
            "6.6-22%",
        );
    }
    println!("\nConstants measured from this data (chip file value; 5-fold held-out error when refit):\n");
    println!(
        "| constant | chip file | fit on all data | refit range over 5 folds | sets | held-out MAPE | in-sample MAPE |"
    );
    println!("|---|---|---|---|---|---|---|");
    let tc = chip
        .tensorcore
        .clone()
        .ok_or("v4 has no [tensorcore] table")?;
    for f in fitted() {
        let subset: Vec<&Case> = cases.iter().filter(|c| f.sets.contains(&c.set)).collect();
        let (s, lo, hi) = held_out(&subset, &chip, &f);
        let insample = score(
            &subset
                .iter()
                .map(|x| (predict(x, &chip), x.measured_s))
                .collect::<Vec<_>>(),
        );
        let all = best_value(&subset, &chip, &f);
        println!(
            "| {} | {:.4e} | {:.4e} | {:.4e} .. {:.4e} | {} | {:.1}% | {:.1}% |",
            f.name,
            (f.get)(&tc),
            all,
            lo,
            hi,
            f.sets.join(", "),
            s.mape,
            insample.mape
        );
    }
    if !std::env::args().any(|a| a == "--no-models") {
        models(&chip, &roofline)?;
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(k) = args.iter().position(|a| a == "--csv") {
        let path = args.get(k + 1).ok_or("--csv needs a path")?;
        // The model's parts, for analysis: MXU, VPU, register moves, DMA
        // (with its unhidden prologue and epilogue), fixed cost, DMA tiles.
        let mut text = String::from(
            "set,region,label,measured_us,model_us,mxu_us,vpu_us,vreg_us,dma_us,prologue_us,\
             epilogue_us,fixed_us,dma_tiles\n",
        );
        for c in &cases {
            let e = score::explain(c, &chip).unwrap_or_default();
            text += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                c.set,
                c.region,
                c.label,
                c.measured_s * 1e6,
                predict(c, &chip) * 1e6,
                e.mxu_s * 1e6,
                e.vpu_s * 1e6,
                e.vreg_s * 1e6,
                e.dma_s * 1e6,
                e.prologue_s * 1e6,
                e.epilogue_s * 1e6,
                e.fixed_s * 1e6,
                e.dma_tiles
            );
        }
        std::fs::write(path, text).map_err(|e| e.to_string())?;
    }
    // `--worst` lists the 40 worst cases; `--worst SET` those of one set.
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--worst") {
        let only = args.get(at + 1);
        let mut errs: Vec<(f64, &Case, f64)> = cases
            .iter()
            .filter(|c| only.is_none_or(|set| c.set == *set))
            .map(|c| {
                let p = predict(c, &chip);
                ((p - c.measured_s) / c.measured_s, c, p)
            })
            .collect();
        errs.sort_by(|a, b| b.0.abs().total_cmp(&a.0.abs()));
        println!("\nWorst cases:");
        for (e, c, p) in errs.iter().take(40) {
            println!(
                "  {:>12} {:>4} {:>20}  measured {:8.2} us  model {:8.2} us  {:+.0}%",
                c.set,
                c.region,
                c.label,
                c.measured_s * 1e6,
                p * 1e6,
                100.0 * e
            );
        }
    }
    Ok(())
}

fn models(chip: &Chip, roofline: &Chip) -> Result<(), String> {
    let cases = score::load_models(&score::data_dir())?;
    println!("\nWhole-model forward passes (device_ms, torch_xla on v4; our JAX HLO):\n");
    println!("| model | seq | batch | measured ms | roofline ms | model ms | error |");
    println!("|---|---|---|---|---|---|---|");
    let mut pairs = Vec::new();
    let mut roof = Vec::new();
    for c in &cases {
        let p = score::predict_model(c, chip);
        let r = tpusim_perf::analyze(&c.module, roofline).step_time_s;
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:+.1}% |",
            c.model,
            c.seq,
            c.batch,
            c.measured_s * 1e3,
            r * 1e3,
            p * 1e3,
            100.0 * (p - c.measured_s) / c.measured_s
        );
        pairs.push((p, c.measured_s));
        roof.push((r, c.measured_s));
    }
    let (s, r) = (score(&pairs), score(&roof));
    println!(
        "\nwhole models: n={} MAPE {:.1}% (roofline {:.1}%), median {:.1}%, bias {:+.1}% (roofline {:+.1}%); SCALE-Sim TPU ~16% leave-one-model-out",
        s.n, s.mape, r.mape, s.median, s.bias, r.bias
    );
    in_program_fit(&cases, chip)
}

/// A model's predicted time as a line in `in_program_kernel_s`: a program of
/// one device runs its kernels one after another, so each kernel adds the
/// constant once (checked at a third point).
struct ModelLine {
    model: String,
    at_zero: f64,
    per_second: f64,
    measured_s: f64,
}

impl ModelLine {
    fn predict(&self, v: f64) -> f64 {
        self.at_zero + v * self.per_second
    }
}

fn with_in_program(chip: &Chip, v: f64) -> Chip {
    with_set(chip, |t, v| t.in_program_kernel_s = v, v)
}

fn best_in_program(lines: &[&ModelLine]) -> f64 {
    (0..=150)
        .map(|i| i as f64 * 2e-8)
        .map(|v| {
            let pairs: Vec<(f64, f64)> =
                lines.iter().map(|l| (l.predict(v), l.measured_s)).collect();
            (score(&pairs).mape, v)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(0.0, |x| x.1)
}

/// `in_program_kernel_s` measured from the whole-model data, with its
/// leave-one-model-out error (fit on two models, score the third).
fn in_program_fit(cases: &[score::ModelCase], chip: &Chip) -> Result<(), String> {
    let (lo, hi) = (0.0, 1e-6);
    let mut worst_bend = 0.0f64;
    let lines: Vec<ModelLine> = cases
        .iter()
        .map(|c| {
            let t0 = score::predict_model(c, &with_in_program(chip, lo));
            let t1 = score::predict_model(c, &with_in_program(chip, hi));
            let t2 = score::predict_model(c, &with_in_program(chip, 2.0 * hi));
            worst_bend = worst_bend.max(((t2 - t1) - (t1 - t0)).abs() / t2);
            ModelLine {
                model: c.model.clone(),
                at_zero: t0,
                per_second: (t1 - t0) / (hi - lo),
                measured_s: c.measured_s,
            }
        })
        .collect();
    let models: std::collections::BTreeSet<&str> = lines.iter().map(|l| l.model.as_str()).collect();
    let mut held = Vec::new();
    let mut fits = Vec::new();
    for &out in &models {
        let train: Vec<&ModelLine> = lines.iter().filter(|l| l.model != out).collect();
        let v = best_in_program(&train);
        fits.push(format!("{out}: {:.2} us", v * 1e6));
        held.extend(
            lines
                .iter()
                .filter(|l| l.model == out)
                .map(|l| (l.predict(v), l.measured_s)),
        );
    }
    let all: Vec<&ModelLine> = lines.iter().collect();
    let best = best_in_program(&all);
    let current = chip
        .tensorcore
        .as_ref()
        .map_or(0.0, |t| t.in_program_kernel_s);
    let insample: Vec<(f64, f64)> = lines
        .iter()
        .map(|l| (l.predict(current), l.measured_s))
        .collect();
    println!(
        "\nin_program_kernel_s from the whole models: chip file {:.2} us, fit on all {:.2} us, \
         leave-one-model-out fits [{}], held-out MAPE {:.1}%, in-sample MAPE {:.1}% \
         (time is linear in it to {:.1e} relative)",
        current * 1e6,
        best * 1e6,
        fits.join(", "),
        score(&held).mape,
        score(&insample).mape,
        worst_bend
    );
    Ok(())
}
