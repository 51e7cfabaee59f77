//! Streaming scans: a dataset, or one part, as a `RecordBatchReader` with
//! bounded memory.
//!
//! Everything that can fail cheaply (`_SUCCESS`, the manifest, every part's
//! HEAD, the first footer, the columns and the filter) is checked before the
//! reader is returned. A background task then opens up to `parallelism` parts
//! ahead (footers, pruning) and streams their batches, in part order, through
//! a small channel: memory stays at a few batches, and decoding overlaps with
//! whatever the consumer does with the previous batch.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use crate::dataset::{child_key, expected_schema, open_dataset, part_missing, vanished};
use crate::error::{Error, Result};
use crate::parquet::decode::{self, PartStream, ReadOptions};
use crate::parquet::part_ref::{self, PartRef};
use crate::parquet::scan::{ScanHooks, Source};
use crate::store::StoreHandle;

/// A dataset scan in progress (the shared streaming reader).
pub use crate::parquet::scan::BatchStream as DatasetStream;

/// Open a streaming scan of the dataset at `key`: `parallelism` parts
/// decoded at once, `io` requests in flight while it opens.
pub fn scan(
    store: Arc<StoreHandle>,
    key: &str,
    opts: ReadOptions,
    parallelism: usize,
    io: usize,
    read: Option<&[u8]>,
) -> Result<DatasetStream> {
    let (first, rest, opts, rows) = crate::runtime::block_on({
        let store = store.clone();
        async move {
            let io = io.max(1);
            let (manifest, parts) = open_dataset(&store, key, io, read).await?;
            let expected = expected_schema(&store, key, &manifest, &parts, io).await?;
            let opts = ReadOptions {
                expected: Some(expected),
                ..opts
            };
            // Every part's footer, at once: the existence check before the
            // caller gets a reader. They stay in the handle's cache, where the
            // scan finds them (parts without a recorded SHA-256 were HEADed).
            // A footer already cached is followed by a HEAD.
            if parts.iter().all(|p| p.sha256.is_some()) {
                // Each footer is dropped once checked: the cache keeps what fits.
                let fetched: Result<()> = futures::stream::iter(&parts)
                    .map(|p| async { part_ref::checked_footer(&store, p).await.map(drop) })
                    .buffered(io)
                    .try_collect()
                    .await;
                if let Err(e) = fetched {
                    return Err(part_missing(&store, key, &manifest, io, e).await);
                }
            }
            let mut parts = parts.into_iter();
            let first = parts.next().ok_or_else(|| Error::ManifestCorrupted {
                path: child_key(key, crate::dataset::MANIFEST),
                reason: "the manifest lists no parts".into(),
            })?;
            // The first part's footer checks its schema, the columns and the
            // filter before the caller gets a reader.
            let first = part_ref::open(&store, &first, &opts)
                .await
                .map_err(vanished(key))?;
            let rows = RowCheck {
                dataset_key: key.to_string(),
                manifest,
            };
            Ok::<_, Error>((first, parts.collect::<Vec<_>>(), opts, rows))
        }
    })??;
    spawn(
        store,
        first,
        rest,
        opts,
        (parallelism, Some(io)),
        Some(rows),
    )
}

/// What the end of a dataset scan checks: that the parts' footers held the
/// manifest's `row_count` rows.
struct RowCheck {
    dataset_key: String,
    manifest: crate::dataset::manifest::Manifest,
}

/// Open a streaming read of the single part file at `key` (HEAD, footer,
/// then only the projected column chunks of the row groups the filter keeps).
pub fn scan_part(store: Arc<StoreHandle>, key: &str, opts: ReadOptions) -> Result<DatasetStream> {
    let first = crate::runtime::block_on({
        let store = store.clone();
        let opts = opts.clone();
        async move {
            let size = store.head(key).await?.size;
            decode::open_part(&store, key, size, &opts).await
        }
    })??;
    spawn(store, first, Vec::new(), opts, (1, None), None)
}

/// Stream `first`, then `rest` in order, opening up to
/// `parallelism` parts ahead.
fn spawn(
    store: Arc<StoreHandle>,
    first: PartStream,
    rest: Vec<PartRef>,
    opts: ReadOptions,
    (parallelism, io): (usize, Option<usize>),
    rows: Option<RowCheck>,
) -> Result<DatasetStream> {
    let schema = first.schema();
    let opts = Arc::new(opts);
    let sources = std::iter::once(Source::Open(Box::new(first)))
        .chain(
            rest.into_iter()
                .map(|part| Source::pending(part, opts.clone(), None)),
        )
        .collect();
    let hooks = match rows {
        None => ScanHooks {
            io,
            ..ScanHooks::default()
        },
        Some(check) => {
            let key = check.dataset_key.clone();
            ScanHooks {
                map_err: Arc::new(move |e| vanished(&key)(e)),
                at_end: Some(Box::new(move |file_rows| {
                    let path = child_key(&check.dataset_key, crate::dataset::MANIFEST);
                    check.manifest.check_rows(file_rows, &path)
                })),
                io,
                ..ScanHooks::default()
            }
        }
    };
    crate::parquet::scan::spawn(store, schema, sources, parallelism, hooks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{write_dataset, WriteRequest};
    use crate::parquet::encode::EncodeOptions;
    use crate::parquet::filter::predicate;
    use arrow_array::{Array, Int64Array, RecordBatch, RecordBatchIterator, RecordBatchReader};
    use arrow_schema::{DataType, Field, Schema};
    use std::collections::BTreeMap;

    /// A memory store holding dataset "d": `v` = 0..1000, `w` = 10 * v.
    fn sample_dataset(
        row_group_size: usize,
        max_rows_per_file: Option<usize>,
    ) -> (Arc<StoreHandle>, crate::dataset::manifest::Manifest) {
        let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int64, false),
            Field::new("w", DataType::Int64, false),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..1000)),
                Arc::new(Int64Array::from_iter_values((0..1000).map(|v| v * 10))),
            ],
        )
        .unwrap();
        let reader = Box::new(RecordBatchIterator::new(vec![Ok(b)], schema));
        let req = WriteRequest {
            location: "d".into(),
            dataset_key: "d".into(),
            parallelism: 2,
            ..Default::default()
        };
        let opts = EncodeOptions::new("zstd", Some(row_group_size), max_rows_per_file).unwrap();
        let manifest = write_dataset(store.clone(), reader, opts, req).unwrap();
        (store, manifest)
    }

    #[test]
    fn streams_in_order_with_filter() {
        let (store, _) = sample_dataset(50, Some(200));
        let pred = predicate(vec![(
            "v".into(),
            ">=".into(),
            Some(Arc::new(Int64Array::from(vec![990])) as arrow_array::ArrayRef),
        )])
        .unwrap();
        let opts = ReadOptions {
            predicate: Some(Arc::new(pred)),
            batch_size: Some(7),
            ..Default::default()
        };
        let stream = scan(store.clone(), "d", opts, 2, 4, None).unwrap();
        let got: Vec<i64> = stream
            .flat_map(|b| {
                let b = b.unwrap();
                let a = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone();
                (0..a.len()).map(move |i| a.value(i)).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(got, (990..1000).collect::<Vec<_>>());
        let all: usize = scan(store, "d", ReadOptions::default(), 2, 4, None)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert_eq!(all, 1000);
    }

    #[test]
    fn scan_part_streams_one_part_and_checks_first() {
        let (store, manifest) = sample_dataset(100, None);
        let part = format!("d/{}", manifest.parts[0]);
        let opts = ReadOptions {
            columns: Some(vec!["w".into()]),
            batch_size: Some(64),
            ..Default::default()
        };
        let stream = scan_part(store.clone(), &part, opts).unwrap();
        assert_eq!(stream.schema().fields().len(), 1);
        let mut sizes = Vec::new();
        let mut sum = 0i64;
        for b in stream {
            let b = b.unwrap();
            sizes.push(b.num_rows());
            let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            sum += a.values().iter().sum::<i64>();
        }
        assert!(sizes.iter().all(|&n| n <= 64), "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 1000);
        assert_eq!(sum, (0..1000i64).map(|v| v * 10).sum::<i64>());
        // Missing part and unknown column fail before a reader exists.
        assert!(matches!(
            scan_part(store.clone(), "d/missing.parquet", ReadOptions::default()),
            Err(Error::NotFound { .. })
        ));
        let bad = ReadOptions {
            columns: Some(vec!["nope".into()]),
            ..Default::default()
        };
        assert!(matches!(
            scan_part(store, &part, bad),
            Err(Error::InvalidArgument(_))
        ));
    }
}
