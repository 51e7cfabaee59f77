//! A dataset's parts, encoded and uploaded but not committed: each part
//! streamed through its encoder into chunk uploads, and the manifest that
//! lists them.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::chunks::{ChunkPool, ChunkSink};
use super::claim::Claim;
use super::manifest::{self, Manifest, PartInfo};
use super::{child_key, part_keys};
use crate::error::{Error, Result};
use crate::parquet::encode::{EncodeOptions, PartEncoder, PartSummary};
use crate::parquet::split::{part_name, Piece, Splitter};
use crate::store::{PutMode, PutOutcome, Scheme, StoreHandle};

/// Bytes handed from an encoder to its uploader at a time, and the size
/// above which a part becomes a multipart upload.
const CHUNK: usize = 8 * 1024 * 1024;
/// Bytes of a part held while its name is unknown (the first part of a
/// stream without a row count, which is `data.parquet` only if no second
/// part follows). Beyond them it is uploaded as `part-00000.parquet` and
/// renamed if it turns out to be the only part.
pub(super) const HOLD_UNNAMED: usize = 2 * CHUNK;
/// Bounds on one part's chunk uploads in flight (each holds a chunk).
const MIN_UPLOADS_PER_PART: usize = 2;
const MAX_UPLOADS_PER_PART: usize = 8;

/// Chunk uploads in flight for each of `parallelism` parts written at once,
/// out of `io` requests for the whole write: at least 2 (the encoder never
/// waits on one upload), at most 8 (64 MiB of chunks per part).
pub fn uploads_per_part(io: usize, parallelism: usize) -> usize {
    (io / parallelism.max(1)).clamp(MIN_UPLOADS_PER_PART, MAX_UPLOADS_PER_PART)
}

/// What the caller knows about the dataset besides its data.
#[derive(Debug, Clone, Default)]
pub struct WriteRequest {
    /// Where the dataset goes: its key in the store (below the store's root).
    pub location: String,
    /// The key recorded in the manifest (the caller's, relative to its Store).
    pub dataset_key: String,
    /// RFC-0008's schema hash, computed by the caller from pyarrow's
    /// `schema.to_string()` so it is identical to remote-store's.
    pub schema_hash: String,
    pub run_id: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
    /// Total rows, when known up front (a Table). Lets part 0 be named at
    /// once; without it a multi-part write names part 0 when part 1 starts.
    pub total_rows: Option<u64>,
    /// Parts encoded and uploaded at once.
    pub parallelism: usize,
    /// Requests in flight for the whole write (see [`uploads_per_part`]);
    /// `None`: the store's default ([`StoreHandle::default_io_concurrency`]).
    pub io: Option<usize>,
    /// If set, parts are named `part-<prefix>-NNNNN.parquet` (unique per
    /// writer, e.g. per Spark task attempt) instead of RFC-0008's names.
    pub part_prefix: Option<String>,
    /// Replace a dataset committed at the key, and take the key from a
    /// writer that holds it ([`write_dataset`](super::write_dataset)); without it either is
    /// `AlreadyExists`.
    pub overwrite: bool,
    /// Counts the parts, rows and bytes as each part lands (phase
    /// [`Phase::Writing`](crate::progress::Phase::Writing), total:
    /// `total_rows`), for a caller to show; `None`: not counted.
    pub progress: Option<Arc<crate::progress::Progress>>,
}

/// The parts one writer produced: their names, summaries and schema.
#[derive(Debug, Clone)]
pub struct WrittenParts {
    pub schema: SchemaRef,
    pub names: Vec<String>,
    pub summaries: Vec<PartSummary>,
    /// Each part's ETag as its upload reported it (`None`: not reported,
    /// or the part was renamed after its upload).
    pub e_tags: Vec<Option<String>>,
}

impl WrittenParts {
    /// Each part as a check after the commit expects to find it: name,
    /// size, ETag (see `commit::all_landed`).
    pub(super) fn expected(&self) -> Vec<(&str, u64, Option<&str>)> {
        self.names
            .iter()
            .zip(&self.summaries)
            .zip(&self.e_tags)
            .map(|((n, s), e)| (n.as_str(), s.size_bytes, e.as_deref()))
            .collect()
    }
}

fn name_for(prefix: Option<&str>, index: usize, single: bool) -> String {
    match prefix {
        Some(p) => format!("part-{p}-{index:05}.parquet"),
        None => part_name(index, single),
    }
}

enum PartMsg {
    Batch(RecordBatch),
    /// The part is complete; anything else (a dropped sender) means abort.
    Finish,
}

/// Encode the batches of one part into chunks (runs on a blocking thread).
fn encode_part(
    schema: SchemaRef,
    opts: EncodeOptions,
    batches: std::sync::mpsc::Receiver<PartMsg>,
    chunks: mpsc::Sender<Bytes>,
    pool: ChunkPool,
) -> Result<PartSummary> {
    let sink = ChunkSink::new(chunks, pool);
    let mut enc = PartEncoder::new(sink, schema, &opts)?;
    loop {
        match batches.recv() {
            Ok(PartMsg::Batch(b)) => enc.write(&b)?,
            Ok(PartMsg::Finish) => break,
            Err(_) => return Err(Error::Task("part aborted".into())),
        }
    }
    let (summary, mut sink) = enc.finish()?;
    if !sink.is_empty() {
        sink.send(true)?;
    }
    Ok(summary)
}

/// How a part's uploader learns its name.
struct PartName {
    name: oneshot::Receiver<String>,
    /// The name to upload under if the part grows past [`HOLD_UNNAMED`]
    /// before its name is known.
    provisional: String,
    /// Chunk uploads in flight.
    uploads: usize,
    /// The writer's claim, checked before a provisional name is changed.
    claim: Option<Claim>,
    /// Where parts land in their order: resolved (or dropped) once the
    /// part before this one landed, or failed.
    turn: Option<oneshot::Receiver<()>>,
    /// Dropped once this part landed or failed: the next part's turn.
    landed: Option<oneshot::Sender<()>>,
}

fn unnamed() -> Error {
    Error::Task("part aborted before it was named".into())
}

/// Upload the chunks of one part to `dataset_key/<name>`. The name arrives
/// separately: chunks are held until it does, up to [`HOLD_UNNAMED`] bytes;
/// then the part goes up under its provisional name and is renamed once its
/// name is known, if that is another.
async fn upload_part(
    store: Arc<StoreHandle>,
    dataset_key: String,
    name: PartName,
    mut chunks: mpsc::Receiver<Bytes>,
) -> Result<(String, Option<String>)> {
    let PartName {
        name: mut named,
        provisional,
        uploads,
        claim,
        turn,
        landed,
    } = name;
    // Held to the end: the next part lands after this one's return.
    let _landed = landed;
    let mut held = Vec::new();
    let mut held_bytes = 0usize;
    // `Some(receiver)`: uploading under the provisional name, the real one to come.
    let (upload_as, pending) = loop {
        tokio::select! {
            biased; // a name already sent wins over a chunk
            n = &mut named => break (n.map_err(|_| unnamed())?, None),
            c = chunks.recv() => match c {
                Some(c) => {
                    held_bytes += c.len();
                    held.push(c);
                    if held_bytes >= HOLD_UNNAMED {
                        match named.try_recv() {
                            Ok(n) => break (n, None),
                            Err(oneshot::error::TryRecvError::Empty) => {
                                break (provisional.clone(), Some(named))
                            }
                            Err(oneshot::error::TryRecvError::Closed) => return Err(unnamed()),
                        }
                    }
                }
                None => break (named.await.map_err(|_| unnamed())?, None),
            },
        }
    };
    let key = child_key(&dataset_key, &upload_as);
    let mut body = Body {
        first: held,
        multipart: None,
        size: 0,
    };
    body.size = body.first.iter().map(|c| c.len() as u64).sum();
    let result: Result<Option<String>> = async {
        while let Some(c) = chunks.recv().await {
            body.push(&store, &key, c, uploads).await?;
        }
        // The encoder is done: the name was sent before its last batch, or
        // never (an aborted part, which must not land).
        match pending {
            Some(named) => Ok(Some(named.await.map_err(|_| unnamed())?)),
            None => Ok(None),
        }
    }
    .await;
    let named = match result {
        Ok(n) => n,
        Err(e) => {
            if let Some(upload) = body.multipart.take() {
                let _ = upload.abort().await;
            }
            return Err(e);
        }
    };
    let size = body.size;
    if let Some(turn) = turn {
        // Encoded while the part before it was written; lands after it.
        let _ = turn.await;
    }
    let e_tag = body.land(&store, &key, claim.as_ref()).await?;
    match named {
        Some(name) if name != upload_as => {
            let to = child_key(&dataset_key, &name);
            if rename_part(&store, claim.as_ref(), &key, &to, size).await? {
                Ok((name, None))
            } else {
                Ok((upload_as, e_tag))
            }
        }
        _ => Ok((upload_as, e_tag)),
    }
}

/// The bytes of one part on their way up: held while they fit in one chunk
/// (one create-only PUT), a multipart upload once they do not.
struct Body {
    first: Vec<Bytes>,
    multipart: Option<object_store::WriteMultipart>,
    size: u64,
}

impl Body {
    /// Take one more chunk: a second chunk starts the multipart upload.
    async fn push(
        &mut self,
        store: &StoreHandle,
        key: &str,
        c: Bytes,
        uploads: usize,
    ) -> Result<()> {
        self.size += c.len() as u64;
        self.first.push(c);
        if self.multipart.is_none() && self.first.len() < 2 {
            return Ok(());
        }
        let upload = match self.multipart.as_mut() {
            Some(upload) => upload,
            None => {
                let started = store
                    .object_store()
                    .put_multipart_opts(&store.path(key)?, Default::default())
                    .await
                    .map_err(|e| Error::from(e).at_path(key))?;
                self.multipart
                    .insert(object_store::WriteMultipart::new_with_chunk_size(
                        started, CHUNK,
                    ))
            }
        };
        for c in self.first.drain(..) {
            upload.wait_for_capacity(uploads).await?;
            upload.put(c);
        }
        Ok(())
    }

    /// Make the part appear whole at `key`, and return its ETag as the
    /// store reported it. Under a claim nothing is replaced: a single PUT is
    /// create-only, and a multipart upload completes only while the claim
    /// holds and `key` is free (see [`make_room`]).
    async fn land(
        self,
        store: &StoreHandle,
        key: &str,
        claim: Option<&Claim>,
    ) -> Result<Option<String>> {
        match (self.multipart, claim) {
            (Some(mut upload), claim) => {
                let checked = async {
                    upload.wait_for_capacity(0).await?;
                    if let Some(claim) = claim {
                        make_room(store, key, claim).await?;
                    }
                    Ok::<(), Error>(())
                }
                .await;
                if let Err(e) = checked {
                    let _ = upload.abort().await;
                    return Err(e);
                }
                let done = upload
                    .finish()
                    .await
                    .map_err(|e| Error::from(e).at_path(key))?;
                Ok(done.e_tag)
            }
            (None, Some(claim)) => {
                let data = Bytes::from(self.first.concat());
                Ok(put_claimed(store, key, data, claim).await?.e_tag)
            }
            (None, None) => {
                let data = Bytes::from(self.first.concat());
                Ok(store.put(key, data, PutMode::Overwrite).await?.e_tag)
            }
        }
    }
}

/// Create `key` with `data` for the holder of `claim`, never replacing
/// another writer's object: create-only, recognising its own after a lost
/// reply. An object already there is a leftover of a writer that lost the
/// key (its request landed late): while the claim holds it is removed and
/// the create tried once more; otherwise the claim was lost (`ClaimLost`).
///
/// Cost: 1 PUT; 1 GET, 1 DELETE and 1 PUT more only when `key` is taken.
pub(super) async fn put_claimed(
    store: &StoreHandle,
    key: &str,
    data: Bytes,
    claim: &Claim,
) -> Result<PutOutcome> {
    match store.put_create_own(key, data.clone()).await {
        Err(Error::AlreadyExists { .. }) => {
            make_room(store, key, claim).await?;
            store.put_create_own(key, data).await.map_err(|e| match e {
                Error::AlreadyExists { .. } => claim.lost(),
                other => other,
            })
        }
        other => other,
    }
}

/// Free `key` for the holder of `claim`: `ClaimLost` unless the claim
/// still holds; then an object found at `key` is removed (a leftover that
/// landed after the key was cleared). 1 GET, 1 HEAD (+1 DELETE).
async fn make_room(store: &StoreHandle, key: &str, claim: &Claim) -> Result<()> {
    claim.check(store).await?;
    if store.try_head(key).await?.is_some() {
        store.delete(key).await?;
    }
    Ok(())
}

/// Move a part uploaded under its provisional name `from` to its name `to`
/// (`size` bytes). Only while the writer's claim holds: after an overwrite
/// took the key, both names are the new writer's. Never replaces an object.
///
/// `Ok(true)`: moved. `Ok(false)`: the store refused the move (S3 copies at
/// most 5 GiB in one request; an object left at `to` by a killed writer),
/// and the part keeps its provisional name, which the manifest lists. A move
/// that completed but whose reply was lost is `Ok(true)`. Whatever fails,
/// exactly one of the two names holds the part, or the error says so and
/// neither does.
async fn rename_part(
    store: &StoreHandle,
    claim: Option<&Claim>,
    from: &str,
    to: &str,
    size: u64,
) -> Result<bool> {
    if let Some(claim) = claim {
        claim.check(store).await?;
    }
    let refused = match store.rename(from, to, false).await {
        Ok(()) => return Ok(true),
        Err(e) => e,
    };
    let (src, dst) = futures::join!(store.try_head(from), store.try_head(to));
    match (src, dst) {
        (Ok(None), Ok(Some(m))) if m.size == size => Ok(true),
        (Ok(Some(_)), Ok(dst)) => {
            // `to` is this writer's copy only if the copy itself succeeded.
            if dst.is_some() && !matches!(refused, Error::AlreadyExists { .. }) {
                if let Err(e) = store.delete(to).await {
                    let _ = store.delete(from).await;
                    return Err(e);
                }
            }
            Ok(false)
        }
        _ => {
            let _ = store.delete(from).await;
            if !matches!(refused, Error::AlreadyExists { .. }) {
                let _ = store.delete(to).await;
            }
            Err(refused)
        }
    }
}

/// Encode + upload of one part: `(name, summary)` once the object is in place.
async fn run_part(
    store: Arc<StoreHandle>,
    dataset_key: String,
    schema: SchemaRef,
    opts: EncodeOptions,
    batches: std::sync::mpsc::Receiver<PartMsg>,
    name: PartName,
    pool: ChunkPool,
) -> Result<(String, PartSummary, Option<String>)> {
    let (chunk_tx, chunk_rx) = mpsc::channel::<Bytes>(2);
    let encoder = tokio::task::spawn_blocking(move || {
        crate::error::contain(crate::parquet::encode::encoder_panic, || {
            encode_part(schema, opts, batches, chunk_tx, pool)
        })
    });
    let uploaded = upload_part(store.clone(), dataset_key.clone(), name, chunk_rx).await;
    let encoded = encoder.await.map_err(Error::from).and_then(|r| r);
    match (encoded, uploaded) {
        // The uploader completes the upload only when the encoder closed the
        // chunk channel, which it does on success and on failure alike. An
        // encoder failure after its last chunk would leave a complete-looking
        // object behind, so remove it.
        (Err(e), Ok((name, _))) => {
            let _ = store.delete(&child_key(&dataset_key, &name)).await;
            Err(e)
        }
        (Err(e), Err(_)) | (Ok(_), Err(e)) => Err(e),
        (Ok(summary), Ok((name, e_tag))) => Ok((name, summary, e_tag)),
    }
}

/// Handles of the part currently being filled.
struct OpenPart {
    index: usize,
    batches: std::sync::mpsc::SyncSender<PartMsg>,
    name: Option<oneshot::Sender<String>>,
}

/// Encode and upload the parts of `reader` under `req.location`, without
/// committing. On failure, the parts that landed are removed.
pub fn write_parts(
    store: Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: &EncodeOptions,
    req: &WriteRequest,
) -> Result<WrittenParts> {
    write_parts_claimed(store, reader, opts, req, None, false)
}

/// [`write_parts`], checking before each part after the first that `claim`
/// still holds. If it was lost, the parts are left alone (they may now be
/// the new holder's), unless `own_names`: named for this write alone, they
/// are removed whatever failed.
pub(super) fn write_parts_claimed(
    store: Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: &EncodeOptions,
    req: &WriteRequest,
    claim: Option<&Claim>,
    own_names: bool,
) -> Result<WrittenParts> {
    crate::store::keys::object_segments(&req.location)?;
    crate::parquet::storage_types::check_writable(&reader.schema())?;
    if let Some(p) = &req.part_prefix {
        if p.is_empty()
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::InvalidArgument(format!(
                "part_prefix must be non-empty ASCII letters, digits, '-' or '_', got {p:?}"
            )));
        }
    }
    let prefix = req.part_prefix.as_deref();
    let schema = reader.schema();
    let runtime = crate::runtime::get()?;
    let handle = runtime.handle().clone();
    let parallelism = req.parallelism.max(1);
    let uploads = uploads_per_part(
        req.io.unwrap_or_else(|| store.default_io_concurrency()),
        parallelism,
    );
    // Each part holds a chunk being filled, two on their way to its
    // uploader and `uploads` uploading.
    let pool = ChunkPool::new(CHUNK, parallelism * (uploads + 3));
    let max_rows = opts.max_rows_per_file;
    crate::progress::start(
        req.progress.as_deref(),
        crate::progress::Phase::Writing,
        req.total_rows,
    );
    let known_single = match (max_rows, req.total_rows) {
        _ if prefix.is_some() => Some(false),
        (None, _) => Some(true),
        (Some(max), Some(total)) => Some(total <= max as u64),
        (Some(_), None) => None,
    };

    // The splitter runs on this (GIL-free) thread; parts run on the runtime.
    let permits = Arc::new(Semaphore::new(parallelism));
    // A remote-store backend takes the parts in their order, as RFC-0008's
    // writer gives them (each written whole): parts are encoded at once and
    // each lands after the one before it.
    let ordered = store.scheme() == Scheme::Foreign;
    let mut last_landed: Option<oneshot::Receiver<()>> = None;
    type Landed = (String, PartSummary, Option<String>);
    let mut tasks: Vec<tokio::task::JoinHandle<Result<Landed>>> = Vec::new();
    let mut open: Option<OpenPart> = None;
    let mut failure: Option<Error> = None;

    for piece in Splitter::new(reader, max_rows) {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        if open.is_none() {
            let index = tasks.len();
            if let (Some(claim), true) = (claim, index > 0) {
                if let Err(e) = handle.block_on(claim.check(&store)) {
                    failure = Some(e);
                    break;
                }
            }
            let permit = match handle.block_on(permits.clone().acquire_owned()) {
                Ok(p) => p,
                Err(e) => {
                    failure = Some(Error::Task(e.to_string()));
                    break;
                }
            };
            let (btx, brx) = std::sync::mpsc::sync_channel::<PartMsg>(2);
            let (ntx, nrx) = oneshot::channel::<String>();
            let mut name = Some(ntx);
            if index > 0 || known_single.is_some() {
                let single = index == 0 && known_single == Some(true);
                if let Some(tx) = name.take() {
                    let _ = tx.send(name_for(prefix, index, single));
                }
            }
            let (turn, landed) = if ordered {
                let (tx, rx) = oneshot::channel();
                (last_landed.replace(rx), Some(tx))
            } else {
                (None, None)
            };
            let fut = run_part(
                store.clone(),
                req.location.clone(),
                schema.clone(),
                opts.clone(),
                brx,
                PartName {
                    name: nrx,
                    provisional: name_for(prefix, index, false),
                    uploads,
                    claim: claim.cloned(),
                    turn,
                    landed,
                },
                pool.clone(),
            );
            let progress = req.progress.clone();
            tasks.push(handle.spawn(async move {
                let r = fut.await;
                drop(permit);
                if let Ok((_, summary, _)) = &r {
                    let rows = summary.row_count;
                    crate::progress::add(progress.as_deref(), rows, 1, rows, summary.size_bytes);
                }
                r
            }));
            open = Some(OpenPart {
                index,
                batches: btx,
                name,
            });
        }
        let Some(part) = open.as_mut() else { continue };
        match piece {
            Piece::Batch(b) => {
                if part.batches.send(PartMsg::Batch(b)).is_err() {
                    // The part failed; its task holds the error.
                    open = None;
                    break;
                }
            }
            Piece::EndOfPart { last } => {
                if let Some(tx) = part.name.take() {
                    let _ = tx.send(name_for(prefix, part.index, part.index == 0 && last));
                }
                let _ = part.batches.send(PartMsg::Finish);
                open = None;
            }
        }
    }
    drop(open); // Aborts a part left open by an input error.

    let mut written = Vec::new();
    let mut summaries = Vec::new();
    let mut e_tags = Vec::new();
    for t in tasks {
        match handle.block_on(t) {
            Ok(Ok((name, summary, e_tag))) => {
                written.push(name);
                summaries.push(summary);
                e_tags.push(e_tag);
            }
            Ok(Err(e)) => {
                failure.get_or_insert(e);
            }
            Err(join) => {
                failure.get_or_insert(Error::from(join));
            }
        }
    }
    if let Some(mut e) = failure {
        // A part that failed because an overwrite took the key (and removed
        // this writer's staging files) is the lost claim, not a store error.
        if let (Some(claim), false) = (claim, matches!(e, Error::ClaimLost { .. })) {
            if let Err(lost @ Error::ClaimLost { .. }) = handle.block_on(claim.check(&store)) {
                e = lost;
            }
        }
        if own_names || !matches!(e, Error::ClaimLost { .. }) {
            let keys = part_keys(&req.location, &written);
            let _ = handle.block_on(store.delete_many(&keys));
        }
        return Err(e);
    }

    Ok(WrittenParts {
        schema,
        names: written,
        summaries,
        e_tags,
    })
}

/// The manifest for parts `names` with `summaries`.
pub fn build_manifest(
    schema: &SchemaRef,
    opts: &EncodeOptions,
    req: &WriteRequest,
    names: &[String],
    summaries: &[PartSummary],
) -> Result<Manifest> {
    manifest_of(
        schema,
        &opts.compression_name,
        req,
        part_infos(names, summaries),
    )
}

/// What a manifest records of parts `names` with `summaries`.
pub(super) fn part_infos(names: &[String], summaries: &[PartSummary]) -> Vec<PartInfo> {
    names
        .iter()
        .zip(summaries)
        .map(|(n, s)| PartInfo {
            name: n.clone(),
            row_count: s.row_count,
            size_bytes: s.size_bytes,
            sha256: s.sha256.clone(),
            footer_bytes: Some(s.footer_bytes),
        })
        .collect()
}

/// The manifest listing `parts` in their order, written now.
pub fn manifest_of(
    schema: &SchemaRef,
    compression: &str,
    req: &WriteRequest,
    parts: Vec<PartInfo>,
) -> Result<Manifest> {
    Ok(Manifest {
        dataset_key: req.dataset_key.clone(),
        parts: parts.iter().map(|p| p.name.clone()).collect(),
        row_count: parts.iter().map(|p| p.row_count).sum(),
        schema_hash: req.schema_hash.clone(),
        compression: compression.to_string(),
        created_at_utc: manifest::now_iso8601(),
        run_id: req.run_id.clone(),
        metadata: req.metadata.clone(),
        arrow_schema: Some(manifest::schema_to_ipc_base64(schema)?),
        part_info: Some(parts),
    })
}
