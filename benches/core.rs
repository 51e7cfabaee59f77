//! Criterion benches of the Rust hot paths: encode, decode, hashing, the
//! dataset write/read protocol on the in-memory store, opening a read (footers
//! fetched or cached), and tables: the
//! commit, deletes, the tombstone filter in a scan, and upserts (the key
//! set's membership test and a whole upsert).
//!
//!     cargo bench --bench core

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{
    Float64Array, Int64Array, RecordBatch, RecordBatchIterator, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use pds::dataset::{read_dataset, write_dataset, WriteRequest};
use pds::parquet::decode::{decode_bytes, ReadOptions};
use pds::parquet::encode::{encode_to_bytes, sha256_hex, EncodeOptions};
use pds::parquet::filter::predicate;
use pds::store::StoreHandle;
use pds::table::commit::{commit, CommitOptions};
use pds::table::delete::delete;
use pds::table::scan::{for_scan, resolve, scan, At, ScanOptions};
use pds::table::snapshot::{DataFile, TableProperties};
use pds::table::versions::Depth;
use pds::table::write::create;

const ROWS: usize = 250_000;

/// Deterministic mixed-type data (int, timestamp, low-cardinality string, float,
/// high-cardinality string), in batches of 64Ki rows.
fn table(rows: usize) -> (Arc<Schema>, Vec<RecordBatch>) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("country", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
        Field::new("key", DataType::Utf8, false),
    ]));
    let countries = ["DE", "FR", "NL", "US", "JP", "BR"];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut batches = Vec::new();
    let mut start = 0;
    while start < rows {
        let n = (rows - start).min(65_536);
        let ids: Vec<i64> = (start as i64..(start + n) as i64).collect();
        let ts: Vec<i64> = ids
            .iter()
            .map(|i| 1_700_000_000_000_000 + i * 1_000)
            .collect();
        let c: Vec<&str> = (0..n).map(|_| countries[(next() % 6) as usize]).collect();
        let amount: Vec<f64> = (0..n).map(|_| (next() % 100_000) as f64 / 100.0).collect();
        let keys: Vec<String> = (0..n).map(|_| format!("{:016x}", next())).collect();
        batches.push(
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(TimestampMicrosecondArray::from(ts)),
                    Arc::new(StringArray::from(c)),
                    Arc::new(Float64Array::from(amount)),
                    Arc::new(StringArray::from(keys)),
                ],
            )
            .expect("bench data is well-formed"),
        );
        start += n;
    }
    (schema, batches)
}

fn bytes_of(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .map(|b| b.get_array_memory_size() as u64)
        .sum()
}

fn bench_encode_decode(c: &mut Criterion) {
    let (schema, batches) = table(ROWS);
    let opts = EncodeOptions::new("zstd", None, None).expect("valid options");
    let mut g = c.benchmark_group("parquet");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes_of(&batches)));
    g.bench_function("encode_zstd_250k_rows", |b| {
        b.iter(|| encode_to_bytes(black_box(&batches), schema.clone(), &opts).expect("encode"))
    });
    let (encoded, _) = encode_to_bytes(&batches, schema.clone(), &opts).expect("encode");
    g.bench_function("decode_all_columns", |b| {
        b.iter(|| {
            decode_bytes(black_box(encoded.clone()), "bench", &ReadOptions::default())
                .expect("decode")
        })
    });
    let one = ReadOptions {
        columns: Some(vec!["id".into()]),
        ..Default::default()
    };
    g.bench_function("decode_one_column", |b| {
        b.iter(|| decode_bytes(black_box(encoded.clone()), "bench", &one).expect("decode"))
    });
    g.finish();

    let mut h = c.benchmark_group("hashing");
    h.throughput(Throughput::Bytes(encoded.len() as u64));
    h.bench_function("sha256_part", |b| {
        b.iter(|| sha256_hex(black_box(&encoded)))
    });
    h.finish();
}

fn bench_protocol(c: &mut Criterion) {
    let (schema, batches) = table(ROWS * 4);
    let mut g = c.benchmark_group("dataset_memory_store");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes_of(&batches)));
    let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).expect("memory store"));
    let mut n = 0u64;
    g.bench_function("write_1M_rows_4_parts", |b| {
        b.iter(|| {
            n += 1;
            let reader = Box::new(RecordBatchIterator::new(
                batches.clone().into_iter().map(Ok),
                schema.clone(),
            ));
            let req = WriteRequest {
                location: format!("w/{n}"),
                dataset_key: format!("w/{n}"),
                schema_hash: "bench".into(),
                parallelism: 2,
                ..Default::default()
            };
            let opts = EncodeOptions::new("zstd", None, Some(ROWS)).expect("valid options");
            write_dataset(store.clone(), reader, opts, req).expect("write")
        })
    });
    g.bench_function("read_1M_rows_4_parts", |b| {
        b.iter(|| {
            read_dataset(store.clone(), "w/1", ReadOptions::default(), false, 2, None)
                .expect("read")
        })
    });
    g.finish();
}

/// Opening a read (issue G): a 64-part dataset, one column of it read through
/// a new store handle (every footer fetched, one GET each, sized by the
/// manifest) and through one that read it before (footers from its cache).
fn bench_open(c: &mut Criterion) {
    let (schema, batches) = table(ROWS / 4);
    let memory: Arc<dyn object_store::ObjectStore> =
        Arc::new(object_store::memory::InMemory::new());
    let handle = || Arc::new(StoreHandle::from_object_store(memory.clone(), "").expect("store"));
    let reader = Box::new(RecordBatchIterator::new(
        batches.into_iter().map(Ok),
        schema,
    ));
    let req = WriteRequest {
        location: "d".into(),
        dataset_key: "d".into(),
        schema_hash: "bench".into(),
        parallelism: 2,
        ..Default::default()
    };
    let opts =
        EncodeOptions::new("zstd", None, Some((ROWS / 4).div_ceil(64))).expect("valid options");
    let written = write_dataset(handle(), reader, opts, req).expect("write");
    assert_eq!(written.parts.len(), 64);
    let one_column = || ReadOptions {
        columns: Some(vec!["amount".into()]),
        ..Default::default()
    };
    let mut g = c.benchmark_group("dataset_open");
    g.sample_size(20);
    g.bench_function("read_1_column_64_parts_new_handle", |b| {
        b.iter(|| read_dataset(handle(), "d", one_column(), false, 32, None).expect("read"))
    });
    let warm = handle();
    read_dataset(warm.clone(), "d", one_column(), false, 32, None).expect("read");
    g.bench_function("read_1_column_64_parts_cached_footers", |b| {
        b.iter(|| read_dataset(warm.clone(), "d", one_column(), false, 32, None).expect("read"))
    });
    g.finish();
}

/// A memory store holding the 1M-row bench table at `key` (primary key
/// `id`, row groups of 64Ki rows), with the table's schema and batches.
fn keyed_table(key: &str) -> (Arc<StoreHandle>, Arc<Schema>, Vec<RecordBatch>) {
    let (schema, batches) = table(ROWS * 4);
    let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).expect("memory store"));
    let reader = Box::new(RecordBatchIterator::new(
        batches.clone().into_iter().map(Ok),
        schema.clone(),
    ));
    let props = TableProperties {
        primary_key: Some("id".into()),
        compression: "zstd".into(),
        row_group_size: Some(65_536),
        target_file_size: None,
    };
    create(
        store.clone(),
        key,
        schema.clone(),
        Some(reader),
        props,
        false,
        2,
    )
    .expect("create");
    (store, schema, batches)
}

fn bench_table(c: &mut Criterion) {
    let (store, _, _) = keyed_table("t");
    let rows = |at: At| {
        let m = pds::runtime::block_on(resolve(&store, "t", at))
            .expect("runtime")
            .expect("version");
        let opts = ScanOptions {
            parallelism: 2,
            ..Default::default()
        };
        let n: usize = scan(store.clone(), "t", &m, opts)
            .expect("scan")
            .map(|b| b.expect("batch").num_rows())
            .sum();
        n
    };
    let value =
        |v: f64| -> Option<arrow_array::ArrayRef> { Some(Arc::new(Float64Array::from(vec![v]))) };
    // 10 % of the rows, scattered over every row group.
    let tenth = predicate(vec![("amount".into(), "<".into(), value(100.0))]).expect("predicate");
    delete(store.clone(), "t", tenth, 2).expect("delete");

    let mut g = c.benchmark_group("table_memory_store");
    g.sample_size(10);
    g.throughput(Throughput::Elements((ROWS * 4) as u64));
    g.bench_function("scan_1M_rows", |b| b.iter(|| rows(At::Version(0))));
    g.bench_function("scan_1M_rows_10pct_deleted", |b| {
        b.iter(|| rows(At::Latest))
    });
    g.throughput(Throughput::Elements(1));
    let ids =
        |lo: i64| -> Option<arrow_array::ArrayRef> { Some(Arc::new(Int64Array::from(vec![lo]))) };
    let mut lo = 0i64;
    g.bench_function("delete_pk_range", |b| {
        b.iter(|| {
            lo += 100;
            let p = predicate(vec![
                ("id".into(), ">=".into(), ids(lo)),
                ("id".into(), "<".into(), ids(lo + 100)),
            ])
            .expect("predicate");
            delete(store.clone(), "t", p, 2).expect("delete")
        })
    });
    // The commit alone: a manifest of 100 files, create-only PUT + pointer CAS.
    let files: Vec<DataFile> = (0..100)
        .map(|i| DataFile {
            path: format!("data/f{i}.parquet"),
            size_bytes: 1 << 28,
            row_group_count: 64,
            total_rows: 1 << 20,
            columns: BTreeMap::new(),
            sha256: "0".repeat(64),
            schema: None,
            footer_bytes: None,
        })
        .collect();
    g.bench_function("commit_100_file_manifest", |b| {
        b.iter(|| {
            pds::runtime::block_on(commit(
                &store,
                "t",
                &CommitOptions::default(),
                None,
                |base| {
                    let mut next = base.cloned().expect("table exists");
                    next.data_files = files.clone();
                    next.tombstones.clear();
                    Ok(Some(next))
                },
            ))
            .expect("runtime")
            .expect("commit")
        })
    });
    g.finish();
}

/// The `in` set an upsert probes with its keys (80,000 of them) over a key
/// column of 1M rows: in key order (walked) and shuffled (hashed); then an
/// upsert of 1 % of a 1M-row table on the memory store (its plan reads the
/// key column only).
fn bench_upsert(c: &mut Criterion) {
    use pds::parquet::value_set::ValueSet;
    let keys: Arc<dyn arrow_array::Array> = Arc::new(Int64Array::from(
        (0..80_000i64)
            .map(|i| i * 97 % 8_000_000)
            .collect::<Vec<_>>(),
    ));
    let set = ValueSet::new(&keys).expect("set");
    let sorted: Arc<dyn arrow_array::Array> =
        Arc::new(Int64Array::from((0..1_000_000i64).collect::<Vec<_>>()));
    let shuffled: Arc<dyn arrow_array::Array> = Arc::new(Int64Array::from(
        (0..1_000_000i64)
            .map(|i| i * 7_919 % 1_000_000)
            .collect::<Vec<_>>(),
    ));
    let mut g = c.benchmark_group("upsert");
    g.throughput(Throughput::Elements(1_000_000));
    g.bench_function("in_set_80k_keys_1M_sorted_probes", |b| {
        b.iter(|| black_box(set.contains(&sorted).expect("contains")))
    });
    g.bench_function("in_set_80k_keys_1M_shuffled_probes", |b| {
        b.iter(|| black_box(set.contains(&shuffled).expect("contains")))
    });
    let (store, schema, batches) = keyed_table("u");
    // 1 % of the rows: every 100th row, again (scattered keys).
    let picked: Vec<u32> = (0..(ROWS * 4) as u32).step_by(100).collect();
    let idx = arrow_array::UInt32Array::from(picked);
    let one_pct: Vec<RecordBatch> = vec![arrow_select::concat::concat_batches(&schema, &batches)
        .and_then(|all| arrow_select::take::take_record_batch(&all, &idx))
        .expect("take")];
    g.sample_size(10);
    g.throughput(Throughput::Elements(((ROWS * 4) / 100) as u64));
    g.bench_function("upsert_1pct_of_1M_rows", |b| {
        b.iter(|| {
            let reader = Box::new(RecordBatchIterator::new(
                one_pct.clone().into_iter().map(Ok),
                schema.clone(),
            ));
            pds::table::upsert::upsert(
                store.clone(),
                "u",
                reader,
                pds::table::schema::SchemaMode::Strict,
                2,
            )
            .expect("upsert")
        })
    });
    g.finish();
}

/// Tables of 10 and of 100,000 (generated) files on the memory store: an
/// append's commit built on the root (the segments it keeps are not read),
/// and planning a primary-key point read (the root, then the one segment
/// whose key range holds the key; segments cached as a process keeps them).
fn bench_segments(c: &mut Criterion) {
    let mut g = c.benchmark_group("table_segments");
    g.sample_size(20);
    let file = |i: i64| DataFile {
        path: format!("data/f{i:06}.parquet"),
        size_bytes: 900,
        row_group_count: 1,
        total_rows: 1,
        columns: BTreeMap::from([(
            "id".to_string(),
            pds::table::snapshot::ColumnStats {
                min: Some(i.into()),
                max: Some(i.into()),
                null_count: Some(0),
            },
        )]),
        sha256: "0".repeat(64),
        schema: None,
        footer_bytes: None,
    };
    for n in [10i64, 100_000] {
        let key = format!("t{n}");
        let store =
            Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).expect("memory store"));
        let (schema, _) = table(1);
        let props = TableProperties {
            primary_key: Some("id".into()),
            compression: "zstd".into(),
            row_group_size: None,
            target_file_size: None,
        };
        create(store.clone(), &key, schema, None, props, false, 1).expect("create");
        let files: Vec<DataFile> = (0..n).map(file).collect();
        pds::runtime::block_on(commit(
            &store,
            &key,
            &CommitOptions::default(),
            None,
            |base| {
                let mut next = base.cloned().expect("table exists");
                next.replace_files(files.clone());
                Ok(Some(next))
            },
        ))
        .expect("runtime")
        .expect("commit");
        let mut k = 0i64;
        g.bench_function(format!("plan_point_read_{n}_files"), |b| {
            b.iter(|| {
                k = (k + 7919) % n;
                let p = predicate(vec![(
                    "id".into(),
                    "==".into(),
                    Some(Arc::new(Int64Array::from(vec![k])) as arrow_array::ArrayRef),
                )])
                .expect("predicate");
                let m = pds::runtime::block_on(async {
                    let latest = pds::table::versions::latest_at::<
                        pds::table::snapshot::TableManifest,
                    >(&store, &key, false, Depth::Root)
                    .await?
                    .expect("table exists");
                    for_scan(&store, &key, latest.manifest.version, Some(&p), false).await
                })
                .expect("runtime")
                .expect("plan");
                assert!(m.data_files.iter().any(|f| f.path == file(k).path));
                m
            })
        });
        // Last: each append grows the table.
        let mut added = n;
        let root = CommitOptions {
            depth: Depth::Root,
            ..Default::default()
        };
        g.bench_function(format!("append_commit_{n}_files"), |b| {
            b.iter(|| {
                added += 1;
                pds::runtime::block_on(commit(&store, &key, &root, None, |base| {
                    let mut next = base.cloned().expect("table exists");
                    next.add_files([file(added)])?;
                    Ok(Some(next))
                }))
                .expect("runtime")
                .expect("commit")
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_encode_decode,
    bench_protocol,
    bench_open,
    bench_table,
    bench_upsert,
    bench_segments
);
criterion_main!(benches);
