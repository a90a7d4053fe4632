//! Partitioning speed (`cargo bench -p tpusim-spmd`): a MaxText-style train step
//! for 256 devices (scan over 32 layers, FSDP x tensor on a 16x16 mesh), as JAX
//! lowers it for TPU with an AbstractMesh. Goal: under 50 ms.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tpusim_spmd::{partition, PartitionOptions};

fn bench(c: &mut Criterion) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/spmd_bench/maxtext_256.pre.hlo"
    );
    let text = std::fs::read_to_string(path).expect("testdata/spmd_bench/maxtext_256.pre.hlo");
    let module = tpusim_hlo::parse_module(&text).expect("the benchmark module parses");
    let options = PartitionOptions::default();
    c.bench_function("partition maxtext_256 (16x16 mesh)", |b| {
        b.iter(|| partition(black_box(&module), &options).expect("partitions"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
