//! Streaming reads of several Parquet files as one `RecordBatchReader` with
//! bounded memory.
//!
//! A background task opens up to `parallelism` files ahead (footers, pruning)
//! and streams their batches, in file order, through a small channel: memory
//! stays at a few batches, and decoding overlaps with whatever the consumer
//! does with the previous batch. Each file has its own read options (a table
//! scan drops other rows in each file).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::parquet::decode::{self, PartStream, ReadOptions};
use crate::store::StoreHandle;

/// Batches buffered between the scan task and the consumer.
const CHANNEL: usize = 4;

/// A scan in progress; dropping it stops the background task.
pub struct BatchStream {
    schema: SchemaRef,
    rx: mpsc::Receiver<Result<RecordBatch>>,
}

impl BatchStream {
    /// The next batch with its typed error (the `Iterator` impl wraps errors
    /// in `ArrowError` for Arrow consumers). Blocks; call without the GIL.
    pub fn next_result(&mut self) -> Option<Result<RecordBatch>> {
        self.rx.blocking_recv()
    }
}

impl Iterator for BatchStream {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.rx
            .blocking_recv()
            .map(|r| r.map_err(|e| ArrowError::ExternalError(Box::new(e))))
    }
}

impl RecordBatchReader for BatchStream {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Applied to every batch of one source (e.g. to add constant columns).
pub type BatchMap = Arc<dyn Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync>;

/// One file to stream: already open, or its key, size and read options.
pub enum Source {
    Open(Box<PartStream>),
    Pending {
        key: String,
        size: u64,
        opts: Arc<ReadOptions>,
        map: Option<BatchMap>,
    },
}

/// Maps an error of one file (e.g. a vanished part) to the caller's.
pub type ErrorMap = Arc<dyn Fn(Error) -> Error + Send + Sync>;

/// Runs once every file has been streamed, with the rows their footers
/// declared; an error it returns ends the stream.
pub type EndCheck = Box<dyn FnOnce(u64) -> Result<()> + Send>;

/// What a scan does besides reading its sources.
pub struct ScanHooks {
    pub map_err: ErrorMap,
    pub at_end: Option<EndCheck>,
}

impl Default for ScanHooks {
    fn default() -> Self {
        Self {
            map_err: Arc::new(|e| e),
            at_end: None,
        }
    }
}

/// Start the task that streams `sources` in order, opening up to
/// `parallelism` ahead. Every batch has `schema`.
pub fn spawn(
    store: Arc<StoreHandle>,
    schema: SchemaRef,
    sources: Vec<Source>,
    parallelism: usize,
    hooks: ScanHooks,
) -> Result<BatchStream> {
    let runtime = crate::runtime::get()?;
    let (tx, rx) = mpsc::channel(CHANNEL);
    let task = stream_sources(store, sources, parallelism, hooks, tx.clone());
    runtime.spawn(async move {
        // A panic in the decoder must reach the consumer as an error, never
        // as an early, silent end of the stream.
        if AssertUnwindSafe(task).catch_unwind().await.is_err() {
            let _ = tx
                .send(Err(Error::Task(
                    "the scan task failed unexpectedly (a pds bug; please report it)".into(),
                )))
                .await;
        }
    });
    Ok(BatchStream { schema, rx })
}

async fn stream_sources(
    store: Arc<StoreHandle>,
    sources: Vec<Source>,
    parallelism: usize,
    hooks: ScanHooks,
    tx: mpsc::Sender<Result<RecordBatch>>,
) {
    let mut opened = futures::stream::iter(sources)
        .map(|source| {
            let store = store.clone();
            async move {
                match source {
                    Source::Open(part) => Ok((*part, None)),
                    Source::Pending {
                        key,
                        size,
                        opts,
                        map,
                    } => decode::open_part(&store, &key, size, &opts)
                        .await
                        .map(|p| (p, map)),
                }
            }
        })
        .buffered(parallelism.max(1));
    let map_err = hooks.map_err;
    let mut file_rows = 0u64;
    while let Some(part) = opened.next().await {
        let (mut part, map) = match part {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(Err(map_err(e))).await;
                return;
            }
        };
        file_rows = file_rows.saturating_add(part.file_rows());
        while let Some(batch) = part.next_batch().await {
            let batch = match (&map, batch) {
                (Some(f), Ok(b)) => f(b),
                (_, other) => other,
            };
            let failed = batch.is_err();
            if tx.send(batch.map_err(|e| map_err(e))).await.is_err() || failed {
                return; // The consumer went away, or the error was delivered.
            }
        }
    }
    if let Some(check) = hooks.at_end {
        if let Err(e) = check(file_rows) {
            let _ = tx.send(Err(e)).await;
        }
    }
}
