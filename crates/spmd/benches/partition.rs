//! Partitioning speed: the largest sharded train step in testdata.
use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let _ = c;
}

criterion_group!(benches, bench);
criterion_main!(benches);
