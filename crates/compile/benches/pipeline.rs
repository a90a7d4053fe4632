//! The TPU compiler pipeline on the largest corpus module (Mixtral 8x7B train
//! step, 3.9 MB of HLO): parse, compile for v5p on its 8-chip pod seam
//! (local pricing), and the analysis of the compiled program — the work
//! `tpusim analyze` does per module.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tpusim_compile::{analyze, CompileOptions, Mode};
use tpusim_perf::LocalOnly;

const MIXTRAL: &str = include_str!(
    "../../../testdata/corpus/xla/zml__xla__xla__tools__benchmarks__hlo__hlo_mixtral_8x7b_bf16_1x8.hlo"
);

fn pipeline(c: &mut Criterion) {
    let chip = tpusim_arch::by_id("v5p").expect("builtin chip");
    let opts = CompileOptions::default();
    let mut g = c.benchmark_group("mixtral_8x7b");
    g.sample_size(10);
    g.bench_function("parse", |b| {
        b.iter(|| tpusim_hlo::parse_module(black_box(MIXTRAL)).expect("parses"))
    });
    let m = tpusim_hlo::parse_module(MIXTRAL).expect("parses");
    g.bench_function("compile_and_analyze", |b| {
        b.iter(|| {
            analyze(black_box(&m), &chip, &LocalOnly, Mode::Compile, &opts).expect("compiles")
        })
    });
    g.bench_function("analyze_as_given", |b| {
        b.iter(|| {
            analyze(black_box(&m), &chip, &LocalOnly, Mode::AsGiven, &opts).expect("analyzes")
        })
    });
    g.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
