//! Streaming scans: a dataset as a `RecordBatchReader`, with bounded memory.
//!
//! The dataset is opened (and `_SUCCESS`, the manifest and every part checked)
//! before the reader is returned. A background task then opens up to
//! `parallelism` parts ahead (footers, pruning) and streams their batches, in
//! part order, through a small channel: memory stays at a few row groups.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::dataset::{child_key, open_dataset};
use crate::decode::{self, ReadOptions};
use crate::error::{Error, Result};
use crate::store::StoreHandle;

/// Batches buffered between the scan task and the consumer.
const CHANNEL: usize = 4;

/// A dataset scan in progress; dropping it stops the background task.
pub struct DatasetStream {
    schema: SchemaRef,
    rx: mpsc::Receiver<Result<RecordBatch>>,
}

impl Iterator for DatasetStream {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.rx
            .blocking_recv()
            .map(|r| r.map_err(|e| ArrowError::ExternalError(Box::new(e))))
    }
}

impl RecordBatchReader for DatasetStream {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Open a streaming scan of the dataset at `key`.
pub fn scan(
    store: Arc<StoreHandle>,
    key: &str,
    opts: ReadOptions,
    parallelism: usize,
) -> Result<DatasetStream> {
    let parallelism = parallelism.max(1);
    let runtime = crate::runtime::get()?;
    let key = key.to_string();
    let (manifest, sizes, schema) = runtime.block_on({
        let store = store.clone();
        let key = key.clone();
        let opts = opts.clone();
        async move {
            let (manifest, sizes) = open_dataset(&store, &key, parallelism).await?;
            let first = manifest
                .parts
                .first()
                .ok_or_else(|| Error::ManifestCorrupted {
                    path: child_key(&key, crate::dataset::MANIFEST),
                    reason: "the manifest lists no parts".into(),
                })?;
            // The first part's footer gives the exact output schema (and checks
            // the columns and filter) before the caller gets a reader.
            let part = decode::open_part(&store, &child_key(&key, first), sizes[0], &opts).await?;
            Ok::<_, Error>((manifest, sizes, part.schema()))
        }
    })?;
    let (tx, rx) = mpsc::channel(CHANNEL);
    let opts = Arc::new(opts);
    runtime.spawn(async move {
        let opened =
            futures::stream::iter(manifest.parts.into_iter().zip(sizes)).map(|(part, size)| {
                let store = store.clone();
                let opts = opts.clone();
                let key = child_key(&key, &part);
                async move { decode::open_part(&store, &key, size, &opts).await }
            });
        let mut opened = opened.buffered(parallelism);
        while let Some(part) = opened.next().await {
            let mut part = match part {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            while let Some(batch) = part.next_batch().await {
                let failed = batch.is_err();
                if tx.send(batch).await.is_err() || failed {
                    return; // The consumer went away, or the error was delivered.
                }
            }
        }
    });
    Ok(DatasetStream { schema, rx })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{write_dataset, WriteRequest};
    use crate::encode::EncodeOptions;
    use crate::filter::predicate;
    use arrow_array::{Array, Int64Array, RecordBatchIterator};
    use arrow_schema::{DataType, Field, Schema};
    use std::collections::BTreeMap;

    #[test]
    fn streams_in_order_with_filter() {
        let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..1000))],
        )
        .unwrap();
        let reader = Box::new(RecordBatchIterator::new(vec![Ok(b)], schema));
        let req = WriteRequest {
            location: "d".into(),
            dataset_key: "d".into(),
            parallelism: 2,
            ..Default::default()
        };
        write_dataset(
            store.clone(),
            reader,
            EncodeOptions::new("zstd", Some(50), Some(200)).unwrap(),
            req,
        )
        .unwrap();
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
        let stream = scan(store.clone(), "d", opts, 2).unwrap();
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
        let all: usize = scan(store, "d", ReadOptions::default(), 2)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert_eq!(all, 1000);
    }
}
