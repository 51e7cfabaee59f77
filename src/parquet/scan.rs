//! Streaming reads of several Parquet files as one `RecordBatchReader` with
//! bounded memory.
//!
//! Up to `parallelism` files are opened and decoded at once, each on its own
//! task, and their batches are streamed in file order through a small
//! channel. Decoded batches wait for the consumer within a fixed memory
//! budget (256 MiB), so a scan uses every core and its memory stays bounded
//! whatever the table's size. Each file has its own read options (a table
//! scan drops other rows in each file).

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use crate::error::{Error, Result};
use crate::parquet::decode::{self, PartStream, ReadOptions};
use crate::parquet::part_ref::{self, PartRef};
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

/// One file to stream: already open, or where it is and its read options.
pub enum Source {
    Open(Box<PartStream>),
    /// A whole file; its footer is fetched into `footer` (ahead of its turn,
    /// see [`fetch_footer`]).
    Pending {
        part: PartRef,
        opts: Arc<ReadOptions>,
        map: Option<BatchMap>,
        footer: SharedFooter,
    },
    /// The rows `opts.rows` of a file, decoded on a task of their own while
    /// other pieces of the same file decode on others. Only the piece that
    /// starts at row 0 reports the file's rows (see [`EndCheck`]).
    Piece {
        part: PartRef,
        opts: Arc<ReadOptions>,
        footer: SharedFooter,
    },
}

impl Source {
    /// The whole file `part`, read as `opts`, each batch mapped by `map`.
    pub fn pending(part: PartRef, opts: Arc<ReadOptions>, map: Option<BatchMap>) -> Self {
        Source::Pending {
            part,
            opts,
            map,
            footer: SharedFooter::default(),
        }
    }

    /// The file, footer cell and footer kind (pieces or not) of a source
    /// not yet open.
    fn footer_cell(&self) -> Option<(PartRef, SharedFooter, bool)> {
        match self {
            Source::Open(_) => None,
            Source::Pending { part, footer, .. } => Some((part.clone(), footer.clone(), false)),
            Source::Piece { part, footer, .. } => Some((part.clone(), footer.clone(), true)),
        }
    }

    /// How many pieces [`Source::split`] makes of a file of `rows` rows.
    pub fn piece_count(rows: u64, pieces: usize, min_rows: u64) -> u64 {
        (pieces as u64).min(rows / min_rows.max(1)).max(1)
    }

    /// `part` (`rows` rows by the caller's record) read as
    /// `opts` in up to `pieces` pieces of at least `min_rows` rows each, in
    /// row order, all sharing `footer` (which the caller may be fetching
    /// already: see [`fetch_footer`], with `pieces` as `piece_count` says).
    /// The last piece runs to the file's end whatever `rows` says, so a
    /// wrong record can cost parallelism but never rows.
    pub fn split(
        part: PartRef,
        opts: ReadOptions,
        rows: u64,
        pieces: usize,
        min_rows: u64,
        footer: SharedFooter,
    ) -> Vec<Source> {
        let n = Self::piece_count(rows, pieces, min_rows);
        if n == 1 || opts.rows.is_some() {
            return vec![Source::Pending {
                part,
                opts: Arc::new(opts),
                map: None,
                footer,
            }];
        }
        (0..n)
            .map(|i| {
                let start = rows / n * i;
                let end = if i + 1 == n {
                    u64::MAX
                } else {
                    rows / n * (i + 1)
                };
                Source::Piece {
                    part: part.clone(),
                    opts: Arc::new(ReadOptions {
                        rows: Some(start..end),
                        ..opts.clone()
                    }),
                    footer: footer.clone(),
                }
            })
            .collect()
    }
}

/// The footer of a file: fetched ahead of the file's turn, or by the first
/// of its [`Source::Piece`]s to open, and shared by the others (see
/// [`decode::read_piece_footer`]).
pub type SharedFooter = Arc<tokio::sync::OnceCell<Arc<decode::Footer>>>;

/// Fetch `part`'s footer into `cell` unless it is there already (or being
/// fetched: then wait for that). `pieces`: the footer for reading in
/// row-range pieces, with its page index. A failure leaves `cell` empty, so
/// the file's own turn fetches it again and reports the error in order.
pub async fn fetch_footer(
    store: &StoreHandle,
    part: &PartRef,
    cell: &SharedFooter,
    pieces: bool,
) -> Result<Arc<decode::Footer>> {
    cell.get_or_try_init(|| async {
        match pieces {
            true => part_ref::piece_footer(store, part).await,
            false => part_ref::footer(store, part).await,
        }
    })
    .await
    .cloned()
}

/// Start fetching the footer of `part` into `cell` on its own task, aborted
/// when the handle is dropped (see [`fetch_footer`]).
pub fn prefetch_footer(
    store: &Arc<StoreHandle>,
    part: &PartRef,
    cell: &SharedFooter,
    pieces: bool,
) -> AbortOnDropHandle<()> {
    let (store, part, cell) = (store.clone(), part.clone(), cell.clone());
    AbortOnDropHandle::new(tokio::spawn(async move {
        let _ = fetch_footer(&store, &part, &cell, pieces).await;
    }))
}

/// Footers fetched ahead of their file's turn, beyond those open: the
/// store's request concurrency (see
/// [`StoreHandle::default_io_concurrency`]), so that on a remote store a
/// file's footer is in hand by the time its turn comes and opening it costs
/// only the chunk fetches.
fn footers_ahead(store: &StoreHandle) -> usize {
    store.default_io_concurrency().max(1)
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
    /// Tasks the caller started for the scan (footer fetches, see
    /// [`prefetch_footer`]): kept while it runs, aborted when it ends.
    pub ahead: Vec<AbortOnDropHandle<()>>,
    /// Requests in flight the caller allows: how many footers are fetched
    /// ahead (`None`: the store's default).
    pub io: Option<usize>,
}

impl Default for ScanHooks {
    fn default() -> Self {
        Self {
            map_err: Arc::new(|e| e),
            at_end: None,
            ahead: Vec::new(),
            io: None,
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
        if crate::error::catch_unwind_future(task).await.is_err() {
            let _ = tx
                .send(Err(Error::Task(
                    "the scan task failed unexpectedly (a pds bug; please report it)".into(),
                )))
                .await;
        }
    });
    Ok(BatchStream { schema, rx })
}

/// Decoded batches buffered ahead of the consumer, in all parts together.
const AHEAD_BYTES: usize = 256 * 1024 * 1024;

/// What a part's decode task sends: its footer's row count, then batches.
enum Decoded {
    Rows(u64),
    Batch(Result<RecordBatch>, tokio::sync::OwnedSemaphorePermit),
}

/// Decode one source into `out`, each batch holding its size in KiB of
/// `budget` (at most `cap`, the budget's size) until the consumer takes it.
async fn decode_source(
    store: Arc<StoreHandle>,
    source: Source,
    budget: Arc<tokio::sync::Semaphore>,
    cap: usize,
    out: mpsc::UnboundedSender<Decoded>,
) {
    let opened = match source {
        Source::Open(part) => Ok((*part, None, true)),
        Source::Pending {
            part,
            opts,
            map,
            footer,
        } => match fetch_footer(&store, &part, &footer, false).await {
            Ok(f) => decode::open_part_with(&store, &part.key, &f, &opts)
                .await
                .map(|p| (p, map, true)),
            Err(e) => Err(e),
        },
        Source::Piece { part, opts, footer } => {
            let first = opts.rows.as_ref().is_none_or(|r| r.start == 0);
            match fetch_footer(&store, &part, &footer, true).await {
                Ok(f) => decode::open_part_with(&store, &part.key, &f, &opts)
                    .await
                    .map(|p| (p, None, first)),
                Err(e) => Err(e),
            }
        }
    };
    let (mut part, map, counts) = match opened {
        Ok(p) => p,
        Err(e) => {
            if let Ok(permit) = budget.clone().acquire_many_owned(0).await {
                let _ = out.send(Decoded::Batch(Err(e), permit));
            }
            return;
        }
    };
    let rows = if counts { part.file_rows() } else { 0 };
    if out.send(Decoded::Rows(rows)).is_err() {
        return;
    }
    while let Some(batch) = part.next_batch().await {
        let batch = match (&map, batch) {
            (Some(f), Ok(b)) => f(b),
            (_, other) => other,
        };
        let kib = batch
            .as_ref()
            .map(|b| b.get_array_memory_size() / 1024)
            .unwrap_or(0)
            .min(cap) as u32;
        let Ok(permit) = budget.clone().acquire_many_owned(kib).await else {
            return;
        };
        let failed = batch.is_err();
        if out.send(Decoded::Batch(batch, permit)).is_err() || failed {
            return; // The scan stopped, or the error is on its way.
        }
    }
}

/// Decode up to `parallelism` sources at once, each on its own task (so a
/// scan uses every core), and deliver their batches in source order. Parts
/// decode ahead of the consumer within a shared memory budget.
async fn stream_sources(
    store: Arc<StoreHandle>,
    sources: Vec<Source>,
    parallelism: usize,
    hooks: ScanHooks,
    tx: mpsc::Sender<Result<RecordBatch>>,
) {
    // Each part has its own share of the memory budget, so a part decoding
    // ahead can never starve the one being consumed.
    let share = (AHEAD_BYTES / 1024 / parallelism.max(1)).max(1);
    let slots = Arc::new(tokio::sync::Semaphore::new(parallelism.max(1)));
    let (parts_tx, mut parts_rx) = mpsc::channel(parallelism.max(1));
    let budgets: Arc<std::sync::Mutex<Vec<Arc<tokio::sync::Semaphore>>>> = Arc::default();
    // Footer fetches ahead of the files' turns, aborted when the scan ends.
    let ahead = Arc::new(std::sync::Mutex::new(hooks.ahead));
    let window = hooks.io.unwrap_or_else(|| footers_ahead(&store)).max(1);
    let launcher = {
        let budgets = budgets.clone();
        let ahead = ahead.clone();
        tokio::spawn(async move {
            // Each entry is taken once its fetch is started: only the
            // window's footers (and the files open) are held at once.
            let mut footers: Vec<Option<(PartRef, SharedFooter, bool)>> =
                sources.iter().map(Source::footer_cell).collect();
            let mut last: Option<SharedFooter> = None;
            let mut next = 0;
            for (i, source) in sources.into_iter().enumerate() {
                while next < footers.len() && next <= i + window {
                    if let Some((part, cell, pieces)) = footers[next].take() {
                        // Several pieces share one cell: fetch it once.
                        let repeat = last.as_ref().is_some_and(|c| Arc::ptr_eq(c, &cell));
                        if cell.get().is_none() && !repeat {
                            if let Ok(mut all) = ahead.lock() {
                                all.retain(|h| !h.is_finished());
                                all.push(prefetch_footer(&store, &part, &cell, pieces));
                            }
                        }
                        last = Some(cell);
                    }
                    next += 1;
                }
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (btx, brx) = mpsc::unbounded_channel();
                if parts_tx.send(brx).await.is_err() {
                    return;
                }
                let budget = Arc::new(tokio::sync::Semaphore::new(share));
                if let Ok(mut all) = budgets.lock() {
                    all.retain(|b| !b.is_closed() && Arc::strong_count(b) > 1);
                    all.push(budget.clone());
                }
                let store = store.clone();
                tokio::spawn(async move {
                    decode_source(store, source, budget, share, btx).await;
                    drop(slot);
                });
            }
        })
    };
    let map_err = hooks.map_err;
    let mut file_rows = 0u64;
    let mut failed = false;
    'parts: while let Some(mut part) = parts_rx.recv().await {
        while let Some(item) = part.recv().await {
            match item {
                Decoded::Rows(n) => file_rows = file_rows.saturating_add(n),
                Decoded::Batch(batch, permit) => {
                    let error = batch.is_err();
                    let sent = tx.send(batch.map_err(|e| map_err(e))).await;
                    drop(permit);
                    if sent.is_err() || error {
                        failed = true; // The consumer went away, or the error was delivered.
                        break 'parts;
                    }
                }
            }
        }
    }
    if failed {
        launcher.abort();
        if let Ok(mut all) = ahead.lock() {
            all.clear();
        }
        // Wake decode tasks waiting for memory: they stop.
        if let Ok(all) = budgets.lock() {
            all.iter().for_each(|b| b.close());
        }
        return;
    }
    if let Some(check) = hooks.at_end {
        if let Err(e) = check(file_rows) {
            let _ = tx.send(Err(e)).await;
        }
    }
}
