//! Criterion benches of the producers' sort and part encoding (issue P),
//! on 1 thread and on every core: an external sort of 1M rows whose budget
//! forces spills, and 1M sorted rows written as key-range Parquet parts to
//! the in-memory store.
//!
//!     cargo bench --bench producers

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use pds::parquet::encode::EncodeOptions;
use pds::producers::parts::{write_range_parts_on, PartSpec};
use pds::producers::sort::{default_threads, ExternalSorter};
use pds::producers::BatchIter;
use pds::store::StoreHandle;

const ROWS: usize = 1_000_000;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("user", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("amount", DataType::Int64, false),
    ]))
}

/// Events as the producers bench has them: 10 per user, unsorted, in
/// batches of 64Ki rows.
fn events() -> Vec<RecordBatch> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let users = (ROWS / 10) as u64;
    let mut out = Vec::new();
    let mut left = ROWS;
    while left > 0 {
        let n = left.min(65_536);
        let u: Vec<i64> = (0..n).map(|_| (next() % users) as i64).collect();
        let ts: Vec<i64> = (0..n).map(|_| (next() % 1_000_000_000) as i64).collect();
        let a: Vec<i64> = (0..n).map(|_| (next() % 100) as i64).collect();
        out.push(
            RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from(u)),
                    Arc::new(TimestampMicrosecondArray::from(ts)),
                    Arc::new(Int64Array::from(a)),
                ],
            )
            .expect("valid batch"),
        );
        left -= n;
    }
    out
}

fn sort(input: &[RecordBatch], budget: usize, threads: usize) -> Vec<RecordBatch> {
    let key = vec!["user".to_string()];
    let mut s = ExternalSorter::new(schema(), &key, budget, None)
        .expect("sorter")
        .with_threads(threads);
    for b in input {
        s.push(b.clone()).expect("push");
    }
    s.finish()
        .expect("finish")
        .collect::<Result<Vec<_>, _>>()
        .expect("sorted")
}

fn bench_sort(c: &mut Criterion) {
    let input = events();
    let mut g = c.benchmark_group("producers_sort");
    g.sample_size(10);
    g.throughput(Throughput::Elements(ROWS as u64));
    let n = default_threads();
    let mut counts = vec![1];
    if n > 1 {
        counts.push(n);
    }
    for &threads in &counts {
        // 16 MiB: about 5 spilled runs.
        g.bench_function(format!("sort_1M_rows_16MiB_{threads}_threads"), |b| {
            b.iter(|| black_box(sort(&input, 16 << 20, threads)))
        });
        g.bench_function(format!("sort_1M_rows_in_memory_{threads}_threads"), |b| {
            b.iter(|| black_box(sort(&input, 1 << 30, threads)))
        });
    }
    g.finish();

    let sorted = sort(&input, 1 << 30, n);
    let opts = EncodeOptions::new("zstd", None, None).expect("options");
    let spec = PartSpec {
        location: "bench/content",
        prefix: "p",
        target_rows: 128 * 1024,
        opts: &opts,
    };
    let key = vec!["user".to_string()];
    let mut g = c.benchmark_group("producers_parts");
    g.sample_size(10);
    g.throughput(Throughput::Elements(ROWS as u64));
    for &threads in &counts {
        g.bench_function(format!("write_1M_rows_8_parts_{threads}_threads"), |b| {
            b.iter(|| {
                let store =
                    Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).expect("store"));
                let stream: BatchIter = Box::new(sorted.clone().into_iter().map(Ok));
                black_box(
                    write_range_parts_on(store, &spec, schema(), &key, stream, threads)
                        .expect("parts"),
                )
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_sort);
criterion_main!(benches);
