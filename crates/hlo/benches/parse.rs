//! Parse, verify and print the largest real modules in the corpus.
//! `cargo bench -p tpusim-hlo --bench parse`; bench/xla_parse_time.py compares with XLA.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::path::Path;

const FILES: &[&str] = &[
    "zml__xla__xla__tools__benchmarks__hlo__hlo_mixtral_8x7b_bf16_1x8.hlo",
    "zml__xla__xla__tools__benchmarks__hlo__hlo_llama31_8b_bf16_1x8.hlo",
    "zml__xla__xla__tools__data__benchmarking__mobilenet_v2.hlo",
];

fn load(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/corpus/xla")
        .join(name);
    std::fs::read_to_string(p).expect("corpus file")
}

fn short(name: &str) -> &str {
    name.trim_start_matches("zml__xla__xla__tools__")
        .trim_end_matches(".hlo")
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.sample_size(20);
    for name in FILES {
        let text = load(name);
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(short(name), |b| {
            b.iter(|| tpusim_hlo::parse_module(&text).unwrap())
        });
    }
    g.finish();
}

fn bench_print(c: &mut Criterion) {
    let mut g = c.benchmark_group("print");
    g.sample_size(20);
    let text = load(FILES[0]);
    let m = tpusim_hlo::parse_module(&text).unwrap();
    g.bench_function(short(FILES[0]), |b| b.iter(|| tpusim_hlo::print_module(&m)));
    g.finish();
}

criterion_group!(benches, bench_parse, bench_print);
criterion_main!(benches);
