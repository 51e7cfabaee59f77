//! The dataset protocol of RFC-0008 on an object store:
//! parts, then `manifest.json`, then `_SUCCESS`; and the checked read.
//!
//! Writing streams: each part is encoded on a blocking thread while it fills,
//! and its bytes are uploaded as they are produced (a single PUT for small
//! parts, a multipart upload for large ones; both complete atomically). At
//! most `parallelism` parts are in flight, so memory is bounded by row group
//! size x parallelism, not by dataset size. If anything fails, no manifest and
//! no `_SUCCESS` are written, and the parts that did land are removed.
//!
//! **One writer per key.** RFC-0008's part names are fixed (`data.parquet`,
//! `part-NNNNN.parquet`), so two writers of one key would write the same
//! objects. The protocol below keeps them for a first write and still
//! guarantees: a writer told ok keeps exactly its rows until a later write
//! replaces them whole; of writers racing on one key (with or without
//! `overwrite`), one commits its rows or none does; a reader never gets a
//! mix; and an overwrite of a committed dataset is atomic: readers see the
//! old dataset until the new one is committed, never none, and an
//! overwrite that fails or is killed leaves the old one as it was.
//!
//! 1. **Claim.** A writer creates `_WRITING` under the key holding a token
//!    of its own: create-only (If-None-Match) without `overwrite`, so a
//!    second writer gets `AlreadyExists` before it writes anything; an
//!    overwrite replaces it, so the writer it took the key from fails at
//!    its next check. A create whose reply was lost reads the claim back
//!    and recognises its own token.
//! 2. **Clear**, where no dataset is committed (no `_SUCCESS`; an overwrite
//!    reads the committed manifest first, and skips this step if there is
//!    one: see **Replace** below). Holding the claim, the writer removes
//!    every object of the dataset layout under the key but the claim: what
//!    a failed or killed writer left (parts, a manifest).
//! 3. **Parts** are created create-only: a late part of a writer that lost
//!    the key can never replace a part of the holder. A part larger than
//!    one chunk goes up as a multipart upload, which object stores cannot
//!    make create-only: it is completed only after the claim is checked and
//!    its name found free.
//! 4. **Commit.** With the claim checked once more, `manifest.json` and then
//!    the empty `_SUCCESS` are created create-only. A create refused after a
//!    lost reply is recognised as the writer's own: the manifest by its
//!    bytes, `_SUCCESS` by the manifest under it being the writer's.
//! 5. **Check.** One LIST then confirms that every part and the manifest
//!    are still the objects this writer created (size and ETag as their
//!    PUTs reported them). If another writer's request landed in between,
//!    the writer withdraws its `_SUCCESS` and fails with `ClaimLost`:
//!    it is told ok only for a dataset that is exactly its own.
//!
//! **Replace.** An overwrite that finds a committed dataset (its manifest
//! read as a reader reads it, below, with the manifest's ETag / version)
//! removes nothing before it commits ([`write_replacing`]):
//!
//! - its parts are named for this write alone,
//!   `part-<12 random hex>-NNNNN.parquet` (as Spark writes name theirs), so
//!   they never collide with the committed dataset's or another writer's;
//! - the commit is one compare-and-swap of `manifest.json` (If-Match the
//!   ETag read; every store pds supports decides it, `file://` through
//!   `store::local_cas`), after a claim check; `_SUCCESS` is there before and
//!   after. A swap refused after a lost reply is recognised as the writer's
//!   own by the manifest's bytes; refused otherwise, another writer committed
//!   first: this write removes its parts and fails with `AlreadyExists`;
//! - one LIST then confirms that the parts are still this writer's objects
//!   (if the manifest there is no longer this writer's, a later write
//!   replaced it whole, and this one committed); if one was replaced, the
//!   manifest is swapped back and the write fails with `ClaimLost`;
//! - then the claim is checked and the objects of the dataset layout that
//!   LIST found, but the new parts, the manifest, `_SUCCESS` and the claim,
//!   are deleted: the replaced dataset's parts and debris of killed
//!   writers. A writer that took the key after that check wrote its parts
//!   after the LIST, so none of them is deleted. Without the claim the
//!   cleanup is skipped (a later overwrite removes what is left).
//!
//! A killed overwrite leaves its parts and its claim beside the committed
//! dataset, which is unchanged. Old pds versions and remote-store read a
//! dataset written this way: the manifest's format is the same, and parts
//! are read by the names it lists.
//!
//! **Reading.** A dataset is committed while `_SUCCESS` is there: the
//! manifest under it then is the committed one. A reader needs a moment at
//! which both held, and two requests sent together cannot give one: a HEAD
//! of `_SUCCESS` answered before a delete withdrew it and a GET of
//! `manifest.json` answered after a new write created its own (but not
//! yet its `_SUCCESS`, which may never come: the writer fails or is killed)
//! would pair the old marker with a manifest never committed. So
//! [`read_committed_manifest`] asks in sequence: GET `manifest.json` (at
//! t1), HEAD `_SUCCESS` (t2), HEAD `manifest.json` (t3), and takes the
//! manifest if `_SUCCESS` was there at t2 and the manifest at t3 is the
//! object read at t1. Then the manifest was there throughout [t1, t3]: it
//! changes only by being created anew (after a delete) or swapped in place
//! by an overwrite, and either way the new one is another object (another
//! ETag; where a store gives no ETag, other bytes: every manifest records
//! its write's time to the microsecond). So at t2 both were there, and a
//! manifest swapped in place is committed the moment it lands, `_SUCCESS`
//! being there already. (A swap back to the old bytes, after a failed
//! check, may give the old ETag again: the manifest read is then the old
//! committed one, whose parts are untouched until a cleanup.) Comparing
//! `_SUCCESS` instead cannot work: it is empty, so its ETag is the same for
//! every commit, and its Last-Modified has a resolution of one second on
//! S3, where several commits fit. Anything else is asked again, a few
//! times with a pause: no `_SUCCESS` at t2 is `DatasetIncomplete` (no
//! dataset is committed at t2: a first write in progress, or one deleted);
//! `_SUCCESS` without a manifest at t1, or a manifest replaced by t3, is a
//! commit meanwhile.
//!
//! A reader that took the replaced manifest may find its parts deleted by
//! the overwrite's cleanup: [`read_dataset`] then reads the manifest again
//! and starts over once from the new one; a streamed read ([`scan`]) that
//! already handed out batches fails with `DatasetIncomplete` instead of
//! repeating rows.
//!
//! A writer killed mid-write leaves its claim: later `overwrite=False`
//! writes refuse the key until `delete_dataset` or an `overwrite=True`
//! write clears it. A writer that lost the key never deletes anything
//! there but the parts it named for itself (the other names may now be
//! the new holder's).

mod chunks;
pub mod manifest;
pub mod scan;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::{Error, Result};
use crate::parquet::decode::{self, Decoded, ReadOptions};
use crate::parquet::encode::{sha256_hex, EncodeOptions, PartEncoder, PartSummary};
use crate::parquet::part_ref::{self, PartRef};
use crate::parquet::split::{part_name, Piece, Splitter};
use crate::store::occupancy::{self, Kind};
use crate::store::{PutMode, PutOutcome, StoreHandle};
use chunks::{ChunkPool, ChunkSink};
use manifest::{Manifest, PartInfo};

/// The commit marker, written last.
pub const SUCCESS: &str = occupancy::SUCCESS;
/// The manifest, written after every part.
pub const MANIFEST: &str = occupancy::DATASET_MANIFEST;
/// The writer's claim on a key, present while a write runs (see the module docs).
pub const WRITING: &str = occupancy::WRITING;
/// Missing parts named in a `DatasetIncomplete` message; the rest are counted.
const NAMED_MISSING: usize = 5;

/// Bytes handed from an encoder to its uploader at a time, and the size
/// above which a part becomes a multipart upload.
const CHUNK: usize = 8 * 1024 * 1024;
/// Bytes of a part held while its name is unknown (the first part of a
/// stream without a row count, which is `data.parquet` only if no second
/// part follows). Beyond them it is uploaded as `part-00000.parquet` and
/// renamed if it turns out to be the only part.
const HOLD_UNNAMED: usize = 2 * CHUNK;
/// Bounds on one part's chunk uploads in flight (each holds a chunk).
const MIN_UPLOADS_PER_PART: usize = 2;
const MAX_UPLOADS_PER_PART: usize = 8;

/// Chunk uploads in flight for each of `parallelism` parts written at once,
/// out of `io` requests for the whole write: at least 2 (the encoder never
/// waits on one upload), at most 8 (64 MiB of chunks per part).
pub fn uploads_per_part(io: usize, parallelism: usize) -> usize {
    (io / parallelism.max(1)).clamp(MIN_UPLOADS_PER_PART, MAX_UPLOADS_PER_PART)
}

/// Join a dataset key and a file name.
pub fn child_key(dataset_key: &str, name: &str) -> String {
    format!("{}/{}", dataset_key.trim_end_matches('/'), name)
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
    /// writer that holds it ([`write_dataset`]); without it either is
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

/// A writer's hold on a dataset key: the `_WRITING` object it created.
#[derive(Clone)]
pub struct Claim {
    key: String,
    token: Bytes,
}

impl Claim {
    /// Create `location/_WRITING` create-only. `AlreadyExists` (as
    /// [`Error::WriteInProgress`]) if another writer holds the key, or a
    /// killed one left its claim.
    pub async fn take(store: &StoreHandle, location: &str) -> Result<Self> {
        let key = child_key(location, WRITING);
        let token = new_token();
        // A create whose reply was lost and that was tried again finds the
        // claim it made itself: that is this writer's claim, not another's.
        let mut created = store.put_create_own(&key, token.clone()).await;
        for _ in 0..2 {
            // Released between the refused create and its read-back: try again.
            if !matches!(created, Err(Error::NotFound { .. })) {
                break;
            }
            created = store.put_create_own(&key, token.clone()).await;
        }
        match created {
            Ok(_) => Ok(Self { key, token }),
            Err(Error::AlreadyExists { .. }) => {
                let since = store.try_head(&key).await.ok().flatten().map(|m| {
                    m.last_modified
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                });
                Err(Error::WriteInProgress {
                    key: location.to_string(),
                    since,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Take the key from whoever holds it (an overwrite that keeps the old
    /// dataset until it commits): `_WRITING` is replaced unconditionally, so
    /// a writer that held it fails at its next check.
    pub async fn take_over(store: &StoreHandle, location: &str) -> Result<Self> {
        let key = child_key(location, WRITING);
        let token = new_token();
        store.put(&key, token.clone(), PutMode::Overwrite).await?;
        Ok(Self { key, token })
    }

    /// The claim on `location` that holds `token` (taken earlier, possibly
    /// by another process of the same writer: a Spark driver).
    pub fn resume(location: &str, token: Bytes) -> Self {
        Self {
            key: child_key(location, WRITING),
            token,
        }
    }

    /// What `_WRITING` holds while the claim is this writer's.
    pub fn token(&self) -> &Bytes {
        &self.token
    }

    /// `Ok` while the claim is still this writer's.
    pub async fn check(&self, store: &StoreHandle) -> Result<()> {
        match store.get(&self.key).await {
            Ok(b) if b == self.token => Ok(()),
            Ok(_) | Err(Error::NotFound { .. }) => Err(self.lost()),
            Err(e) => Err(e),
        }
    }

    /// The error of a writer whose claim another writer took.
    fn lost(&self) -> Error {
        Error::ClaimLost {
            key: self
                .key
                .trim_end_matches(WRITING)
                .trim_end_matches('/')
                .to_string(),
        }
    }

    /// Remove the claim if it is still this writer's (best effort).
    pub async fn release(&self, store: &StoreHandle) {
        if self.check(store).await.is_ok() {
            let _ = store.delete(&self.key).await;
        }
    }
}

/// The content of a new claim: a token no other writer holds, the process
/// and the time.
fn new_token() -> Bytes {
    Bytes::from(format!(
        "{{\"writer\": \"{}\", \"pid\": {}, \"started_at\": \"{}\"}}\n",
        unique_token(),
        std::process::id(),
        manifest::now_iso8601()
    ))
}

/// A token no other writer holds: time, process, a counter and a hash of them.
pub fn unique_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seed = format!(
        "{nanos}-{}-{}-{:?}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        std::thread::current().id()
    );
    sha256_hex(seed.as_bytes())[..32].to_string()
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
    } = name;
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
async fn put_claimed(
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

/// Write a dataset from `reader` (fast path). Returns the manifest written.
///
/// Capabilities are the caller's: this claims the key and writes parts,
/// then commits and checks the result (see the module docs), or, on
/// failure, commits nothing.
///
/// Without `req.overwrite`: `AlreadyExists` if a dataset is committed at
/// the key or another writer holds it, before any part is written; the
/// key is cleared of what failed writers left, and the parts get
/// RFC-0008's names. With it, a writer holding the key loses it, and a
/// committed dataset is replaced atomically: it stays readable while the
/// parts (named for this write alone) are written, and one compare-and-swap
/// of `manifest.json` commits ([`write_replacing`]); an overwrite that
/// fails or is killed leaves it as it was. Where no dataset is committed,
/// an overwrite clears the key and writes as without `overwrite`. Either
/// way the key must be free of tables and pipelines, and of anything
/// inside or around it ([`occupancy::check_free`]: 5 HEADs per level of the
/// key and 1 LIST): `KeyOccupied` otherwise. Types pds cannot store fail
/// with `UnsupportedType` before any I/O.
///
/// Cost besides the parts: the claim (1 PUT, 1 GET per check: before the
/// clear or the read of the committed manifest, before each part after
/// the first, before the commit; 1 GET and 1 DELETE to release it). A
/// write where no dataset is committed: the clear (1 LIST, and a DELETE
/// per object found; +1 DELETE for `_SUCCESS` with `overwrite`, after the
/// 3 requests that find no committed dataset), the commit (2 PUTs) and
/// its check (1 LIST). An overwrite of a committed dataset: its manifest
/// read (GET, HEAD, HEAD), the swap (1 PUT), 1 LIST, 1 GET (the claim)
/// and a DELETE per object of the replaced dataset.
pub fn write_dataset(
    store: Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: EncodeOptions,
    req: WriteRequest,
) -> Result<Manifest> {
    crate::store::keys::object_segments(&req.location)?;
    crate::parquet::storage_types::check_writable(&reader.schema())?;
    let started = crate::store::counted::Started::now(&store);
    let location = req.location.clone();
    let overwrite = req.overwrite;
    let (claim, replacing) = crate::runtime::block_on({
        let store = store.clone();
        async move {
            let claim = if overwrite {
                Claim::take_over(&store, &location).await?
            } else {
                Claim::take(&store, &location).await?
            };
            // Checked once the key is claimed, so that a table or pipeline
            // creator checking after this sees the claim.
            let free = async {
                occupancy::check_free(store.as_ref(), &location, Kind::Dataset).await?;
                if !overwrite
                    && store
                        .try_head(&child_key(&location, SUCCESS))
                        .await?
                        .is_some()
                {
                    return Err(Error::AlreadyExists {
                        path: location.clone(),
                    });
                }
                // Another writer may have taken the key during the checks:
                // nothing is removed unless the claim still holds.
                claim.check(&store).await?;
                // A committed dataset stays until its manifest is swapped.
                let replacing = match overwrite {
                    true => committed_to_replace(&store, &location).await?,
                    false => None,
                };
                if replacing.is_none() {
                    clear_for_write(&store, &location, overwrite).await?;
                    claim.check(&store).await?;
                }
                Ok(replacing)
            };
            match free.await {
                Ok(replacing) => Ok((claim, replacing)),
                Err(e) => {
                    claim.release(&store).await;
                    Err(e)
                }
            }
        }
    })??;
    let result = match &replacing {
        Some(old) => write_replacing(&store, reader, &opts, &req, &claim, old),
        None => write_fresh(&store, reader, &opts, &req, &claim),
    };
    let _ = crate::runtime::block_on(claim.release(&store));
    if let Ok(m) = &result {
        log_written(&store, m, &started);
    }
    result
}

/// A write at a key where no dataset is committed (cleared, holding the
/// claim): RFC-0008's part names, then `manifest.json` and `_SUCCESS`
/// created create-only ([`commit_claimed`]). On failure nothing of it stays
/// while the key is still this writer's.
fn write_fresh(
    store: &Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: &EncodeOptions,
    req: &WriteRequest,
    claim: &Claim,
) -> Result<Manifest> {
    let parts = write_parts_claimed(store.clone(), reader, opts, req, Some(claim), false)?;
    let manifest = build_manifest(&parts.schema, opts, req, &parts.names, &parts.summaries)?;
    crate::runtime::block_on(async {
        let mut committed = commit_claimed(store, &req.location, &manifest, &parts, claim).await;
        // Failing because another writer took the key is the lost claim:
        // the key and its part names are the other writer's now.
        if matches!(&committed, Err(e) if !matches!(e, Error::ClaimLost { .. })) {
            if let Err(lost @ Error::ClaimLost { .. }) = claim.check(store).await {
                committed = Err(lost);
            }
        }
        if let Err(e) = &committed {
            if !matches!(e, Error::ClaimLost { .. }) {
                // The key is still ours: nothing of this write may stay.
                let mut keys = part_keys(&req.location, &parts.names);
                keys.push(child_key(&req.location, MANIFEST));
                let _ = store.delete_many(&keys).await;
            }
        }
        committed
    })??;
    Ok(manifest)
}

/// The keys of parts `names` under `location`.
fn part_keys(location: &str, names: &[String]) -> Vec<String> {
    names.iter().map(|n| child_key(location, n)).collect()
}

/// The committed dataset an overwrite replaces in place: its manifest's
/// bytes and the object read (ETag, version).
struct Replaced {
    raw: Bytes,
    meta: crate::store::Meta,
}

/// The dataset committed at `location`, for an overwrite to swap its
/// manifest ([`read_committed`]: 3 requests in sequence). `None` where
/// there is none to keep: no `_SUCCESS`, no manifest or a damaged one
/// under it (nothing readable to keep), or a store that reports neither
/// ETag nor version (no compare-and-swap); the overwrite then clears the
/// key. A dataset that keeps changing while it is read (overwrites back to
/// back) is `DatasetIncomplete`: the overwrite fails before writing
/// anything rather than clear a committed dataset, and may be tried again.
async fn committed_to_replace(store: &StoreHandle, location: &str) -> Result<Option<Replaced>> {
    match read_committed(store, location).await {
        Ok(Some(Committed { raw, meta, .. })) if meta.e_tag.is_some() || meta.version.is_some() => {
            Ok(Some(Replaced { raw, meta }))
        }
        Ok(_) | Err(Error::NotFound { .. } | Error::ManifestCorrupted { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// An overwrite of the committed dataset `old` (holding the claim, the key
/// not cleared): parts under names of this write alone
/// (`part-<random>-NNNNN.parquet`), then the manifest swapped in place
/// ([`swap_claimed`]). Until the swap, readers read `old`; a failure
/// before it leaves `old` as it was and removes this write's parts.
fn write_replacing(
    store: &Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: &EncodeOptions,
    req: &WriteRequest,
    claim: &Claim,
    old: &Replaced,
) -> Result<Manifest> {
    let fresh = &unique_token()[..12];
    let req = WriteRequest {
        part_prefix: Some(match &req.part_prefix {
            Some(p) => format!("{p}-{fresh}"),
            None => fresh.to_string(),
        }),
        ..req.clone()
    };
    let parts = write_parts_claimed(store.clone(), reader, opts, &req, Some(claim), true)?;
    let built = build_manifest(&parts.schema, opts, &req, &parts.names, &parts.summaries);
    let manifest = match built {
        Ok(m) => m,
        Err(e) => {
            let keys = part_keys(&req.location, &parts.names);
            let _ = crate::runtime::block_on(store.delete_many(&keys));
            return Err(e);
        }
    };
    crate::runtime::block_on(swap_claimed(
        store,
        &req.location,
        &manifest,
        &parts,
        claim,
        old,
    ))??;
    Ok(manifest)
}

/// The claim checked, then `manifest.json` under `key` replaced with `json`
/// by compare-and-swap against `old` ([`StoreHandle::put_update_own`]: a
/// swap of its own whose reply was lost is recognised). `AlreadyExists` if
/// refused: another writer committed since `old` was read, or the dataset
/// was deleted. 1 GET, 1 PUT (+1 GET if refused).
async fn swap_manifest(
    store: &StoreHandle,
    key: &str,
    json: Bytes,
    claim: &Claim,
    old: &Replaced,
) -> Result<PutOutcome> {
    claim.check(store).await?;
    let mkey = child_key(key, MANIFEST);
    let (e_tag, version) = (old.meta.e_tag.clone(), old.meta.version.clone());
    match store.put_update_own(&mkey, json, e_tag, version).await {
        Err(Error::Precondition { .. } | Error::NotFound { .. }) => Err(Error::AlreadyExists {
            path: key.to_string(),
        }),
        other => other,
    }
}

/// Commit `json` as the manifest of the dataset at `location` for the
/// holder of `claim` whose parts are written under names of its own (a
/// Spark job), if a dataset is committed there: its manifest is swapped in
/// place ([`swap_manifest`]), `_SUCCESS` staying, and `Ok(true)`. `Ok(false)`
/// where none is committed (nothing written: the caller commits as on a
/// fresh key). The caller then deletes the replaced dataset's objects
/// (listed before, claim checked after the LIST).
///
/// Cost: the committed manifest's read (GET, HEAD, HEAD), 1 GET (claim),
/// 1 PUT (+1 GET if refused).
pub async fn swap_committed_manifest(
    store: &StoreHandle,
    location: &str,
    claim: &Claim,
    json: Bytes,
) -> Result<bool> {
    crate::store::keys::object_segments(location)?;
    let Some(old) = committed_to_replace(store, location).await? else {
        return Ok(false);
    };
    swap_manifest(store, location, json, claim, &old).await?;
    Ok(true)
}

/// Commit `manifest` over the committed dataset `old` for the holder of
/// `claim` whose parts (named for this write alone) are `parts`:
///
/// 1. the claim checked, then `manifest.json` replaced by compare-and-swap
///    against the manifest `old` read ([`StoreHandle::put_update_own`],
///    which recognises its own swap after a lost reply). Refused (another
///    writer committed since `old` was read, or the dataset was deleted):
///    this write's parts are removed and the result is `AlreadyExists`.
///    Any failure of the swap is settled by reading the manifest back: this
///    write's bytes there are its commit; another's, no commit (the parts
///    are removed); unreadable, the error stands and the parts stay (the
///    outcome is unknown; a later overwrite removes them if unused).
///    `_SUCCESS` stays throughout: readers see `old`, then this dataset.
/// 2. One LIST confirms that the parts are still the objects this writer
///    created. If the manifest there is no longer this writer's, a later
///    write replaced it whole: this write committed. If a part was removed
///    or replaced (a delete-then-write writer of an older pds, or
///    `delete_dataset`, ran meanwhile), the manifest is swapped back to
///    `old` and the result is `ClaimLost`. A LIST that fails leaves the
///    commit as it is (readers may have read it) and skips step 3.
/// 3. The objects of the dataset layout that LIST found, but this write's
///    parts, the manifest, `_SUCCESS` and the claim, are deleted (`old`'s
///    parts, debris of killed overwrites), if the claim still holds after
///    the LIST: a writer that took the key later wrote its parts after the
///    LIST, so none of them is deleted (its parts have names of their own;
///    only a `delete_dataset` racing this cleanup, then a first write
///    reusing an RFC-0008 name, could lose that part: a delete racing a
///    write). Without the claim the objects stay, for a later overwrite to
///    remove; the write is committed all the same.
///
/// Cost: 1 GET (claim), 1 PUT (+1 GET if it fails), 1 LIST, 1 GET (claim)
/// and a DELETE per object removed (batched where the store can).
async fn swap_claimed(
    store: &StoreHandle,
    key: &str,
    manifest: &Manifest,
    parts: &WrittenParts,
    claim: &Claim,
    old: &Replaced,
) -> Result<()> {
    let own_parts = part_keys(key, &parts.names);
    let json = Bytes::from(manifest.to_json()?);
    let mkey = child_key(key, MANIFEST);
    let put = match swap_manifest(store, key, json.clone(), claim, old).await {
        Ok(put) => put,
        // Whatever the error, the manifest there decides (1 GET): this
        // write's own (a swap applied whose outcome was lost) is a commit;
        // another's means not swapped, and the parts go; if that cannot be
        // told, they stay (maybe committed) and the error stands.
        Err(e) => match manifest_is(store, key, &json).await {
            Ok(true) => PutOutcome {
                e_tag: None,
                version: None,
                size: json.len() as u64,
            },
            Ok(false) => {
                let _ = store.delete_many(&own_parts).await;
                return Err(e);
            }
            Err(_) => return Err(e),
        },
    };
    let checked = match store.list(key, false).await {
        Ok(listing) => {
            let root = format!("{}/", key.trim_end_matches('/'));
            let expected_manifest = [(MANIFEST, json.len() as u64, put.e_tag.as_deref())];
            if all_landed(key, &listing.objects, &expected_manifest).is_err() {
                // A later write replaced the manifest (or deleted the
                // dataset): it replaced this one whole, and cleans up.
                return Ok(());
            }
            let expected: Vec<(&str, u64, Option<&str>)> = parts
                .names
                .iter()
                .zip(&parts.summaries)
                .zip(&parts.e_tags)
                .map(|((n, s), e)| (n.as_str(), s.size_bytes, e.as_deref()))
                .collect();
            all_landed(key, &listing.objects, &expected).map(|()| {
                listing
                    .objects
                    .into_iter()
                    .filter(|o| {
                        o.key.strip_prefix(&root).is_some_and(|name| {
                            is_own_object(name)
                                && ![MANIFEST, SUCCESS, WRITING].contains(&name)
                                && !parts.names.iter().any(|n| n == name)
                        })
                    })
                    .map(|o| o.key)
                    .collect::<Vec<_>>()
            })
        }
        // The swap is committed and readers may have read it: a LIST that
        // fails is no reason to take it back. The cleanup is skipped (a
        // later overwrite removes what it would have).
        Err(_) => return Ok(()),
    };
    let replaced = match checked {
        Ok(replaced) => replaced,
        Err(e) => {
            // Not exactly this writer's dataset: put `old` back.
            let back = store
                .put_update_own(
                    &mkey,
                    old.raw.clone(),
                    put.e_tag.clone(),
                    put.version.clone(),
                )
                .await;
            if back.is_ok() {
                let _ = store.delete_many(&own_parts).await;
            }
            return Err(match e {
                Error::ClaimLost { .. } => claim.lost(),
                other => other,
            });
        }
    };
    if claim.check(store).await.is_ok() {
        if let Err(e) = store.delete_many(&replaced).await {
            log::warn!(
                target: "pds::dataset",
                "dataset {key}: committed, but removing the replaced dataset's files failed                  (a later overwrite removes them): {e}"
            );
        }
    }
    Ok(())
}

/// Log at INFO (target `pds::dataset`) that the dataset `m` was written by
/// the write that started at `started`: key, parts, rows, bytes written
/// and read, store requests, time.
fn log_written(store: &StoreHandle, m: &Manifest, started: &crate::store::counted::Started) {
    if !log::log_enabled!(target: "pds::dataset", log::Level::Info) {
        return;
    }
    let (c, ms) = started.cost(store);
    log::info!(
        target: "pds::dataset",
        "dataset {}: wrote {} parts, {} rows: {} bytes written, {} bytes read, {} requests, {ms:.1} ms",
        m.dataset_key,
        m.parts.len(),
        m.row_count,
        c.bytes_written,
        c.bytes_read,
        c.requests
    );
}

/// Make the key ready for the holder of a claim: with `overwrite`, withdraw
/// the committed dataset (`_SUCCESS` first); then remove every other object
/// of the dataset layout but the claim (parts and a manifest of an earlier
/// dataset, or left by a failed or killed writer). 1 LIST, a DELETE per
/// object found (batched where the store can), +1 DELETE with `overwrite`.
async fn clear_for_write(store: &StoreHandle, location: &str, overwrite: bool) -> Result<()> {
    if overwrite {
        store.delete(&child_key(location, SUCCESS)).await?;
    }
    let stale = own_objects(store, location, &[SUCCESS, WRITING]).await?;
    store.delete_many(&stale).await
}

/// The keys of the dataset layout's objects directly under `dataset_key`
/// (see [`is_own_object`]), but those named in `except`. 1 LIST.
async fn own_objects(
    store: &StoreHandle,
    dataset_key: &str,
    except: &[&str],
) -> Result<Vec<String>> {
    let listing = store.list(dataset_key, false).await?;
    let root = format!("{}/", dataset_key.trim_end_matches('/'));
    Ok(listing
        .objects
        .into_iter()
        .filter(|o| {
            o.key
                .strip_prefix(&root)
                .is_some_and(|name| is_own_object(name) && !except.contains(&name))
        })
        .map(|o| o.key)
        .collect())
}

/// Commit `manifest` for the holder of `claim` whose parts are `parts`:
/// the claim checked, `manifest.json` and `_SUCCESS` created create-only
/// ([`put_marker`]), then one LIST to confirm that the parts and
/// the manifest are still the objects this writer created. If another
/// writer's request replaced or removed one meanwhile, `_SUCCESS` is
/// withdrawn and the result is `ClaimLost`; if another writer committed
/// first, `AlreadyExists`.
async fn commit_claimed(
    store: &StoreHandle,
    key: &str,
    manifest: &Manifest,
    parts: &WrittenParts,
    claim: &Claim,
) -> Result<()> {
    claim.check(store).await?;
    let json = Bytes::from(manifest.to_json()?);
    let size = json.len() as u64;
    let put = put_claimed(store, &child_key(key, MANIFEST), json.clone(), claim).await?;
    let marker = child_key(key, SUCCESS);
    put_marker(store, key, &json).await?;
    let mut expected: Vec<(&str, u64, Option<&str>)> = parts
        .names
        .iter()
        .zip(&parts.summaries)
        .zip(&parts.e_tags)
        .map(|((n, s), e)| (n.as_str(), s.size_bytes, e.as_deref()))
        .collect();
    expected.push((MANIFEST, size, put.e_tag.as_deref()));
    let landed = match store.list(key, false).await {
        Ok(listing) => all_landed(key, &listing.objects, &expected),
        Err(e) => Err(e),
    };
    if landed.is_err() {
        // A marker over this writer's manifest commits this writer's write:
        // withdraw it. Over another's manifest, it is that writer's commit.
        if manifest_is(store, key, &json).await.unwrap_or(false) {
            let _ = store.delete(&marker).await;
        }
    }
    landed.map_err(|e| match e {
        Error::ClaimLost { .. } => claim.lost(),
        other => other,
    })
}

/// Create the empty `_SUCCESS` of RFC-0008 over the manifest `json` this
/// writer created, create-only. A create refused because the marker exists
/// is the writer's own commit if the manifest there is still its own (its
/// create whose reply was lost, retried); otherwise another writer
/// committed first (`AlreadyExists`). A create that fails so that it may
/// have been applied is tried again, up to 3 times in all.
///
/// Cost: 1 PUT; 1 GET more only when the marker exists.
async fn put_marker(store: &StoreHandle, key: &str, json: &Bytes) -> Result<()> {
    let marker = child_key(key, SUCCESS);
    let own = || async {
        Ok(manifest_is(store, key, json).await?.then_some(PutOutcome {
            e_tag: None,
            version: None,
            size: 0,
        }))
    };
    match store.put_create_checked(&marker, Bytes::new(), own).await {
        Ok(_) => Ok(()),
        Err(Error::AlreadyExists { .. }) => Err(Error::AlreadyExists {
            path: key.to_string(),
        }),
        Err(e) => Err(e),
    }
}

/// Whether `manifest.json` under `key` holds exactly `json`. 1 GET.
async fn manifest_is(store: &StoreHandle, key: &str, json: &Bytes) -> Result<bool> {
    match store.get(&child_key(key, MANIFEST)).await {
        Ok(there) => Ok(there == *json),
        Err(Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `Ok` if each of `expected` (name, size, ETag as its PUT reported it) is
/// among `objects` with that size and ETag (the ETag compared where both
/// sides know it); `ClaimLost` if one was removed or replaced.
fn all_landed(
    key: &str,
    objects: &[crate::store::Meta],
    expected: &[(&str, u64, Option<&str>)],
) -> Result<()> {
    let root = format!("{}/", key.trim_end_matches('/'));
    let found: BTreeMap<&str, &crate::store::Meta> = objects
        .iter()
        .filter_map(|o| Some((o.key.strip_prefix(&root)?, o)))
        .collect();
    let same_tag = |a: Option<&str>, b: Option<&str>| match (a, b) {
        (Some(a), Some(b)) => normal_e_tag(a) == normal_e_tag(b),
        _ => true,
    };
    for (name, size, e_tag) in expected {
        match found.get(name) {
            Some(o) if o.size == *size && same_tag(o.e_tag.as_deref(), *e_tag) => {}
            _ => {
                return Err(Error::ClaimLost {
                    key: key.to_string(),
                })
            }
        }
    }
    Ok(())
}

/// An ETag without its weak prefix and quotes (stores differ in both).
fn normal_e_tag(tag: &str) -> &str {
    tag.trim_start_matches("W/").trim_matches('"')
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
fn write_parts_claimed(
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
    Ok(Manifest {
        dataset_key: req.dataset_key.clone(),
        parts: names.to_vec(),
        row_count: summaries.iter().map(|s| s.row_count).sum(),
        schema_hash: req.schema_hash.clone(),
        compression: opts.compression_name.clone(),
        created_at_utc: manifest::now_iso8601(),
        run_id: req.run_id.clone(),
        metadata: req.metadata.clone(),
        arrow_schema: Some(manifest::schema_to_ipc_base64(schema)?),
        part_info: Some(
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
                .collect(),
        ),
    })
}

/// Whether `name`, directly under a dataset key, is one of the dataset's
/// own objects: the commit marker, the manifest, the writer's claim, and
/// the parts (`data.parquet`, `part-*.parquet`). Anything else, and
/// anything in a sub-folder (another dataset, table or pipeline), is not.
pub fn is_own_object(name: &str) -> bool {
    matches!(name, SUCCESS | MANIFEST | WRITING | "data.parquet")
        || (name.starts_with("part-") && name.ends_with(".parquet") && !name.contains('/'))
}

/// Delete the dataset at `dataset_key`: its own objects only (see
/// [`is_own_object`]), never a key nested below it. `_SUCCESS` goes first,
/// so that a reader racing the delete sees `DatasetIncomplete`, never a
/// dataset with parts missing, and again last, in case a writer committed
/// meanwhile. On `file://`, the staging files of its killed uploads go too,
/// and the folder if it is left empty.
///
/// Cost: 1 LIST (one level), 1 DELETE per object (batched where the store
/// can), 2 more for `_SUCCESS`.
pub async fn delete_own(store: &StoreHandle, dataset_key: &str) -> Result<()> {
    crate::store::keys::object_segments(dataset_key)?;
    let marker = child_key(dataset_key, SUCCESS);
    store.delete(&marker).await?;
    let own = own_objects(store, dataset_key, &[SUCCESS]).await?;
    store.delete_many(&own).await?;
    store.delete(&marker).await?;
    let owns = |rel: &str, folder: bool| !folder && is_own_object(rel);
    store.remove_staging(dataset_key, None, owns, true).await?;
    Ok(())
}

/// Read and validate `manifest.json`. `NotFound` if it is absent.
pub async fn read_manifest(store: &StoreHandle, dataset_key: &str) -> Result<Manifest> {
    Ok(read_manifest_text(store, dataset_key).await?.0)
}

/// [`read_manifest`], with the bytes it parsed.
async fn read_manifest_text(
    store: &StoreHandle,
    dataset_key: &str,
) -> Result<(Manifest, bytes::Bytes)> {
    let key = child_key(dataset_key, MANIFEST);
    let raw = store.get(&key).await?;
    Ok((Manifest::from_json(&raw, &key)?, raw))
}

/// Attempts of [`read_committed_manifest`] at a dataset that keeps
/// changing under it, and the pause before the second (doubled before each
/// later one: 20 + 40 + 80 ms in all).
const COMMITTED_READ_ATTEMPTS: u32 = 4;
const COMMITTED_READ_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// The manifest of a committed dataset, and its text: `manifest.json` as
/// it was at a moment when `_SUCCESS` was there (see "Reading" in the
/// module docs). `DatasetIncomplete` without `_SUCCESS`.
///
/// Each attempt GETs `manifest.json`, then HEADs `_SUCCESS`, then HEADs
/// `manifest.json` again: the manifest is committed if `_SUCCESS` is there
/// and the manifest is still the object that was read (its ETag; its bytes
/// where the store gives none). A manifest replaced or removed meanwhile,
/// or missing under `_SUCCESS` (an overwrite committed between the two
/// requests), is asked again, after 20, 40 and 80 ms; a dataset still
/// changing after 4 attempts is `DatasetIncomplete` saying so. A manifest
/// missing under `_SUCCESS` at every attempt is `NotFound` (removed by
/// hand).
///
/// Cost: 3 requests in sequence (GET, HEAD, HEAD), 1 more GET on a store
/// that reports no ETag; on the error path, the occupancy probe.
pub async fn read_committed_manifest(
    store: &StoreHandle,
    dataset_key: &str,
) -> Result<(Manifest, bytes::Bytes)> {
    crate::store::keys::object_segments(dataset_key)?;
    match read_committed(store, dataset_key).await? {
        Some(Committed { manifest, raw, .. }) => Ok((manifest, raw)),
        None => {
            store.check_bucket().await?;
            Err(Error::DatasetIncomplete {
                key: dataset_key.to_string(),
                reason: absent_reason(store, dataset_key).await,
            })
        }
    }
}

/// A committed dataset's manifest as [`read_committed`] found it.
struct Committed {
    manifest: Manifest,
    /// Its bytes.
    raw: Bytes,
    /// The object read (its ETag and version: what a compare-and-swap of
    /// the manifest expects).
    meta: crate::store::Meta,
}

/// [`read_committed_manifest`]'s attempts; `None`: no `_SUCCESS` at the
/// moment it was asked (no dataset is committed), without asking why.
async fn read_committed(store: &StoreHandle, dataset_key: &str) -> Result<Option<Committed>> {
    let success = child_key(dataset_key, SUCCESS);
    let key = child_key(dataset_key, MANIFEST);
    let mut changed = false;
    let mut pause = COMMITTED_READ_PAUSE;
    for attempt in 0..COMMITTED_READ_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        let read = match store.get_with_meta(&key).await {
            Ok(got) => Some(got),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        if store.try_head(&success).await?.is_none() {
            return Ok(None);
        }
        // No manifest under the marker: a commit landed between the two
        // requests (or the manifest was removed): ask again.
        let Some((raw, meta)) = read else { continue };
        if still_there(store, &key, &raw, &meta).await? {
            let manifest = Manifest::from_json(&raw, &key)?;
            return Ok(Some(Committed {
                manifest,
                raw,
                meta,
            }));
        }
        changed = true;
    }
    if !changed {
        return Err(Error::NotFound { path: key });
    }
    Err(Error::DatasetIncomplete {
        key: dataset_key.to_string(),
        reason: format!(
            "the dataset kept changing while it was read ({COMMITTED_READ_ATTEMPTS} attempts \
             met a replaced manifest: overwrites back to back); read it again"
        ),
    })
}

/// Whether the object at `key` is still the one read as `raw` with `meta`:
/// 1 HEAD, comparing ETags; where either has none, 1 GET comparing bytes.
async fn still_there(
    store: &StoreHandle,
    key: &str,
    raw: &Bytes,
    meta: &crate::store::Meta,
) -> Result<bool> {
    let Some(now) = store.try_head(key).await? else {
        return Ok(false);
    };
    match (&meta.e_tag, &now.e_tag) {
        (Some(a), Some(b)) => Ok(normal_e_tag(a) == normal_e_tag(b)),
        _ => match store.get(key).await {
            Ok(again) => Ok(again == *raw),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        },
    }
}

/// Open a committed dataset: its manifest as [`read_committed_manifest`]
/// reads it (3 requests in sequence), then where each part is.
///
/// A manifest with `part_info` (every pds manifest) states each part's size,
/// footer size and SHA-256: no part is touched here, and the footer GET of
/// each part is its existence check ([`part_missing`] names the missing ones
/// if one fails). A manifest without it (remote-store's) costs one more round
/// trip: a HEAD of every part at once, `io` at a time, which fails with
/// `DatasetIncomplete` naming the missing ones.
///
/// `read`: the manifest's text as [`read_committed_manifest`] returned it
/// (the caller read it to prepare the read), which saves those requests.
pub async fn open_dataset(
    store: &StoreHandle,
    dataset_key: &str,
    io: usize,
    read: Option<&[u8]>,
) -> Result<(Manifest, Vec<PartRef>)> {
    let manifest = match read {
        None => read_committed_manifest(store, dataset_key).await?.0,
        Some(raw) => {
            crate::store::keys::object_segments(dataset_key)?;
            Manifest::from_json(raw, &child_key(dataset_key, MANIFEST))?
        }
    };
    if let Some(info) = &manifest.part_info {
        let parts = info
            .iter()
            .map(|p| PartRef {
                key: child_key(dataset_key, &p.name),
                size: p.size_bytes,
                footer_hint: p.footer_bytes,
                sha256: Some(p.sha256.clone()),
            })
            .collect();
        return Ok((manifest, parts));
    }
    let sizes = head_parts(store, dataset_key, &manifest.parts, io).await?;
    let mut parts = Vec::with_capacity(sizes.len());
    let mut missing = Vec::new();
    for (name, size) in manifest.parts.iter().zip(sizes) {
        match size {
            Some(size) => parts.push(PartRef::sized(child_key(dataset_key, name), size)),
            None => missing.push(name.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(Error::DatasetIncomplete {
            key: dataset_key.to_string(),
            reason: missing_parts(&missing, manifest.parts.len()),
        });
    }
    Ok((manifest, parts))
}

/// The size of each part, `None` where it is missing: a HEAD each, `io` at once.
async fn head_parts(
    store: &StoreHandle,
    dataset_key: &str,
    names: &[String],
    io: usize,
) -> Result<Vec<Option<u64>>> {
    futures::stream::iter(names)
        .map(|p| async move {
            Ok(store
                .try_head(&child_key(dataset_key, p))
                .await?
                .map(|m| m.size))
        })
        .buffered(io.max(1))
        .try_collect()
        .await
}

/// A part of the dataset was not found while it was read: name every part
/// that is missing now (a HEAD each; error path only), as `DatasetIncomplete`.
pub async fn part_missing(
    store: &StoreHandle,
    dataset_key: &str,
    manifest: &Manifest,
    io: usize,
    found: Error,
) -> Error {
    if !matches!(found, Error::NotFound { .. }) {
        return found;
    }
    let missing: Vec<String> = match head_parts(store, dataset_key, &manifest.parts, io).await {
        Ok(sizes) => manifest
            .parts
            .iter()
            .zip(sizes)
            .filter(|(_, s)| s.is_none())
            .map(|(n, _)| n.clone())
            .collect(),
        Err(_) => Vec::new(),
    };
    if missing.is_empty() {
        return vanished(dataset_key)(found);
    }
    Error::DatasetIncomplete {
        key: dataset_key.to_string(),
        reason: missing_parts(&missing, manifest.parts.len()),
    }
}

/// Why a key without `_SUCCESS` has no dataset: a table or pipeline is
/// there (or around it), nothing at all is stored there, or a write is
/// unfinished (the occupancy probe, then one LIST of at most one object;
/// error path only).
async fn absent_reason(store: &StoreHandle, dataset_key: &str) -> String {
    use crate::store::occupancy::{occupancy, Kind};
    if let Ok(found) = occupancy(store, dataset_key).await {
        if let Some(reason) = found.describe_for(dataset_key, Kind::Dataset) {
            return reason;
        }
    }
    match store.folder_exists(dataset_key).await {
        Ok(false) => "no dataset: nothing is stored under this key".into(),
        _ => "_SUCCESS marker missing: the dataset was never committed (a write is \
              in progress, failed, or was killed)"
            .into(),
    }
}

/// `missing N of M parts: a, b, c, d, e and N-5 more`: short, however many.
pub fn missing_parts(missing: &[String], total: usize) -> String {
    let named: Vec<String> = missing
        .iter()
        .take(NAMED_MISSING)
        .map(|p| format!("{p:?}"))
        .collect();
    let more = missing.len().saturating_sub(NAMED_MISSING);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "missing {} of {total} parts: {}{tail}",
        missing.len(),
        named.join(", ")
    )
}

/// A part listed in the manifest vanished after the existence check: the
/// dataset is incomplete (RFC-0008), not a plain `NotFound`.
pub fn vanished(dataset_key: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::NotFound { path } => Error::DatasetIncomplete {
            key: dataset_key.to_string(),
            reason: format!("part {path:?} disappeared while it was being read"),
        },
        other => other,
    }
}

/// The schema every part of the dataset must have: the manifest's, or, for
/// manifests that record none (remote-store's), the first part's footer's.
pub async fn expected_schema(
    store: &StoreHandle,
    dataset_key: &str,
    manifest: &Manifest,
    parts: &[PartRef],
    io: usize,
) -> Result<SchemaRef> {
    if let Some(schema) = manifest.schema(&child_key(dataset_key, MANIFEST))? {
        return Ok(schema);
    }
    let first = parts.first().ok_or_else(|| Error::ManifestCorrupted {
        path: child_key(dataset_key, MANIFEST),
        reason: "the manifest lists no parts".into(),
    })?;
    match part_ref::footer(store, first).await {
        Ok(footer) => Ok(crate::parquet::chunk_crc::strip(footer.metadata().schema())),
        // Sizes from the manifest: no part was HEADed yet. Name every missing one.
        Err(e) => Err(part_missing(store, dataset_key, manifest, io, e).await),
    }
}

/// Read a dataset (fast path): the committed manifest
/// ([`read_committed_manifest`]: 3 requests in sequence), then
/// every part's footer (one GET each, or the handle's cache) and its
/// projected column chunks, `io` parts at once. Decoding runs on the
/// runtime's threads, one per core, however many requests are in flight.
///
/// With `verify`, every part is fetched whole and its SHA-256 checked against
/// the manifest before it is decoded.
///
/// A dataset overwritten while it is read shows as a part missing, of
/// another size or failing its checksums. Then the manifest is read again:
/// if it changed, the read starts over once from the new one; if that
/// fails the same way too, or the dataset was withdrawn, the error is
/// `DatasetIncomplete` saying the dataset was replaced while it was read.
/// If the manifest did not change, the first error stands (the part is
/// damaged, not replaced).
pub fn read_dataset(
    store: Arc<StoreHandle>,
    dataset_key: &str,
    opts: ReadOptions,
    verify: bool,
    io: usize,
    read: Option<&[u8]>,
) -> Result<Decoded> {
    crate::store::keys::object_segments(dataset_key)?;
    let used = match read {
        Some(raw) => Bytes::copy_from_slice(raw),
        None => crate::runtime::block_on(read_committed_manifest(&store, dataset_key))??.1,
    };
    let first = read_once(store.clone(), dataset_key, opts.clone(), verify, io, &used);
    let Err(found) = first else { return first };
    if !may_be_replaced(&found) {
        return Err(found);
    }
    let replaced = |e: &Error| Error::DatasetIncomplete {
        key: dataset_key.to_string(),
        reason: format!(
            "the dataset was replaced or deleted while it was read ({e}); read it again"
        ),
    };
    let now = match crate::runtime::block_on(read_committed_manifest(&store, dataset_key))? {
        Ok((_, now)) => now,
        Err(Error::DatasetIncomplete { .. } | Error::NotFound { .. }) => {
            return Err(replaced(&found))
        }
        Err(e) => return Err(e),
    };
    if now == used {
        return Err(found);
    }
    read_once(store, dataset_key, opts, verify, io, &now).map_err(|e| {
        if may_be_replaced(&e) {
            replaced(&e)
        } else {
            e
        }
    })
}

/// Whether a read's error is what a dataset overwritten under the reader
/// looks like: a part gone, of another size or content, or fewer rows.
fn may_be_replaced(e: &Error) -> bool {
    matches!(
        e,
        Error::NotFound { .. }
            | Error::DatasetIncomplete { .. }
            | Error::PartCorrupted { .. }
            | Error::ManifestCorrupted { .. }
    )
}

/// [`read_dataset`] once, from the manifest text `raw`.
fn read_once(
    store: Arc<StoreHandle>,
    dataset_key: &str,
    opts: ReadOptions,
    verify: bool,
    io: usize,
    raw: &[u8],
) -> Result<Decoded> {
    let read = Some(raw);
    let io = io.max(1);
    let dataset_key = dataset_key.to_string();
    crate::runtime::block_on(async move {
        let (manifest, parts) = open_dataset(&store, &dataset_key, io, read).await?;
        let progress = opts.progress.clone();
        crate::progress::start(
            progress.as_deref(),
            crate::progress::Phase::Reading,
            Some(parts.len() as u64),
        );
        let mpath = child_key(&dataset_key, MANIFEST);
        let expected = expected_schema(&store, &dataset_key, &manifest, &parts, io).await?;
        if let Some(cols) = &opts.columns {
            decode::column_indices(&expected, cols)?; // Unknown columns fail before any part is read.
        }
        if let Some(pred) = &opts.predicate {
            pred.as_ref().clone().bind(&expected)?; // So do bad filters.
        }
        if verify && manifest.part_info.is_none() {
            return Err(Error::ManifestCorrupted {
                path: mpath.clone(),
                reason:
                    "verify=True needs per-part checksums (part_info), which this manifest lacks"
                        .into(),
            });
        }
        let target = crate::parquet::part_schema::project(
            &expected,
            match &opts.columns {
                None => None,
                Some(cols) => Some(decode::column_indices(&expected, cols)?),
            }
            .as_deref(),
        )?;
        let opts = Arc::new(ReadOptions {
            expected: Some(expected),
            // Every batch is kept: fetch each part's chunks at once, with at
            // most `io` read-aheads in flight over all the parts read.
            read_ahead: Some(opts.read_ahead.unwrap_or(WHOLE_PART_READ_AHEAD)),
            io_permits: Some(Arc::new(tokio::sync::Semaphore::new(io))),
            ..opts
        });
        let jobs = parts.into_iter().map(|part| {
            let store = store.clone();
            let opts = opts.clone();
            // Aborted if the read fails first: no part task outlives it.
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
                match part.sha256.clone().filter(|_| verify) {
                    None => part_ref::read(&store, &part, &opts).await,
                    Some(expected) => {
                        let data = store.get(&part.key).await?;
                        tokio::task::spawn_blocking(move || {
                            verify_bytes(&data, &part.key, &expected)?;
                            decode::decode_bytes(data, &part.key, &opts)
                        })
                        .await?
                    }
                }
            }))
        });
        let read: Result<Vec<decode::Decoded>> = futures::stream::iter(jobs)
            .buffered(io)
            .map(|joined| joined.map_err(Error::from).and_then(|r| r))
            .inspect_ok(|d: &decode::Decoded| {
                crate::progress::add(progress.as_deref(), 1, 1, d.file_rows, 0);
            })
            .try_collect()
            .await;
        let read = match read {
            Ok(r) => r,
            Err(e) => return Err(part_missing(&store, &dataset_key, &manifest, io, e).await),
        };
        let mut batches = Vec::new();
        let mut file_rows = 0u64;
        for d in read {
            file_rows = file_rows.saturating_add(d.file_rows);
            batches.extend(d.batches);
        }
        manifest.check_rows(file_rows, &mpath)?;
        Ok(Decoded {
            schema: target,
            batches,
            file_rows,
        })
    })?
}

/// Row groups `read_dataset` fetches ahead of its decoder: all of a part's
/// in practice (it keeps every batch, decoded, anyway).
const WHOLE_PART_READ_AHEAD: usize = 4096;

/// Fail with `PartCorrupted` unless `data` hashes to `expected`.
pub fn verify_bytes(data: &[u8], key: &str, expected: &str) -> Result<()> {
    let actual = sha256_hex(data);
    if actual != expected {
        return Err(Error::PartCorrupted {
            path: key.to_string(),
            reason: format!("checksum mismatch: manifest has sha256 {expected}, part has {actual}"),
        });
    }
    Ok(())
}

/// The dataset's Arrow schema: from the manifest if it records one (no data
/// file is touched), else from the first part's footer.
pub fn read_schema(store: Arc<StoreHandle>, dataset_key: &str) -> Result<SchemaRef> {
    crate::store::keys::object_segments(dataset_key)?;
    let dataset_key = dataset_key.to_string();
    crate::runtime::block_on(async move {
        let manifest = read_manifest(&store, &dataset_key).await?;
        if let Some(schema) = manifest.schema(&child_key(&dataset_key, MANIFEST))? {
            return Ok(schema);
        }
        let first = child_key(&dataset_key, &manifest.parts[0]);
        let size = store
            .head(&first)
            .await
            .map_err(vanished(&dataset_key))?
            .size;
        expected_schema(
            &store,
            &dataset_key,
            &manifest,
            &[PartRef::sized(first, size)],
            store.default_io_concurrency(),
        )
        .await
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, RecordBatchIterator};
    use arrow_schema::{DataType, Field, Schema};

    fn batches(n: i64, per: i64) -> (SchemaRef, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let mut out = Vec::new();
        let mut start = 0;
        while start < n {
            let end = (start + per).min(n);
            out.push(
                RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(Int64Array::from_iter_values(start..end))],
                )
                .unwrap(),
            );
            start = end;
        }
        (schema, out)
    }

    fn write(
        store: &Arc<StoreHandle>,
        key: &str,
        n: i64,
        max: Option<usize>,
        total: Option<u64>,
    ) -> Result<Manifest> {
        let (schema, b) = batches(n, 7);
        let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
        let opts = EncodeOptions::new("zstd", Some(10), max).unwrap();
        let req = WriteRequest {
            location: key.into(),
            dataset_key: key.into(),
            schema_hash: "h".into(),
            total_rows: total,
            parallelism: 2,
            ..Default::default()
        };
        write_dataset(store.clone(), reader, opts, req)
    }

    fn memory() -> Arc<StoreHandle> {
        Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap())
    }

    /// A store on a new temporary folder, removed when the `TempDir` drops.
    fn file_store() -> (Arc<StoreHandle>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path())
            .unwrap()
            .to_string();
        (
            Arc::new(StoreHandle::open(&url, &BTreeMap::new()).unwrap()),
            dir,
        )
    }

    #[test]
    fn delete_own_removes_the_dataset_and_no_nested_key() {
        let (file, _dir) = file_store();
        for store in [memory(), file] {
            let rt = crate::runtime::get().unwrap();
            write(&store, "ds", 50, Some(20), None).unwrap();
            // A dataset nested below it, as pds let users make them before.
            write(&store, "src", 5, None, None).unwrap();
            for o in rt.block_on(store.list("src", true)).unwrap().objects {
                let to = o.key.replacen("src/", "ds/inner/", 1);
                rt.block_on(store.copy(&o.key, &to, false)).unwrap();
            }
            let others = ["ds/t/_latest_manifest", "ds/notes.txt", "ds/WRITING"];
            for k in others {
                rt.block_on(store.put(k, Bytes::from_static(b"x"), PutMode::Create))
                    .unwrap();
            }
            rt.block_on(delete_own(&store, "ds")).unwrap();
            let left: Vec<String> = rt
                .block_on(store.list("ds", true))
                .unwrap()
                .objects
                .into_iter()
                .map(|o| o.key)
                .collect();
            let mut expected = vec![
                "ds/WRITING",
                "ds/inner/_SUCCESS",
                "ds/inner/data.parquet",
                "ds/inner/manifest.json",
                "ds/notes.txt",
                "ds/t/_latest_manifest",
            ];
            expected.sort_unstable();
            assert_eq!(left, expected, "{:?}", store.scheme());
            assert!(read_dataset(
                store.clone(),
                "ds/inner",
                ReadOptions::default(),
                true,
                2,
                None
            )
            .is_ok());
        }
        for (name, own) in [
            ("_SUCCESS", true),
            ("part-00003.parquet", true),
            ("part-abc-00003.parquet", true),
            ("data.parquet", true),
            ("inner/data.parquet", false),
            ("part-1/x.parquet", false),
            ("notes.txt", false),
        ] {
            assert_eq!(is_own_object(name), own, "{name}");
        }
    }

    #[test]
    fn write_then_read_multi_part() {
        let store = memory();
        let m = write(&store, "ds", 95, Some(20), None).unwrap();
        assert_eq!(m.parts.len(), 5);
        assert_eq!(m.parts[0], "part-00000.parquet");
        assert_eq!(m.row_count, 95);
        let d = read_dataset(store.clone(), "ds", ReadOptions::default(), true, 2, None).unwrap();
        let all = arrow_select::concat::concat_batches(&d.schema, &d.batches).unwrap();
        let col = all.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(col.values().to_vec(), (0..95).collect::<Vec<_>>());
    }

    /// A first part larger than [`HOLD_UNNAMED`], of a stream without a row
    /// count: uploaded before its name is known, then renamed if it is the
    /// only part. Nothing else is left, and every row reads back.
    #[test]
    fn a_large_first_part_is_uploaded_before_it_is_named() {
        let (file, _dir) = file_store();
        // Incompressible: 3M rows are 24 MB, more than HOLD_UNNAMED (16 MiB).
        let rows = 4_000_000i64;
        let values = || {
            (0..rows).map(|i| {
                // splitmix64: no run, delta or dictionary to compress.
                let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as i64
            })
        };
        for store in [memory(), file] {
            let rt = crate::runtime::get().unwrap();
            for (key, max, parts) in [
                ("one", 5_000_000usize, vec!["data.parquet"]),
                (
                    "two",
                    3_000_000,
                    vec!["part-00000.parquet", "part-00001.parquet"],
                ),
            ] {
                let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
                let batches: Vec<RecordBatch> = values()
                    .collect::<Vec<_>>()
                    .chunks(100_000)
                    .map(|c| {
                        RecordBatch::try_new(
                            schema.clone(),
                            vec![Arc::new(Int64Array::from(c.to_vec()))],
                        )
                        .unwrap()
                    })
                    .collect();
                let reader = Box::new(RecordBatchIterator::new(
                    batches.into_iter().map(Ok),
                    schema,
                ));
                let opts = EncodeOptions::new("none", None, Some(max)).unwrap();
                let req = WriteRequest {
                    location: key.into(),
                    dataset_key: key.into(),
                    schema_hash: "h".into(),
                    parallelism: 2,
                    ..Default::default()
                };
                let m = write_dataset(store.clone(), reader, opts, req).unwrap();
                assert_eq!(m.parts, parts, "{:?}", store.scheme());
                let first = m.part_info.as_ref().unwrap()[0].size_bytes;
                assert!(first > HOLD_UNNAMED as u64, "{first} {:?}", m.part_info);
                let mut left: Vec<String> = rt
                    .block_on(store.list(key, true))
                    .unwrap()
                    .objects
                    .into_iter()
                    .map(|o| o.key.rsplit('/').next().unwrap().to_string())
                    .collect();
                left.sort_unstable();
                let mut expected: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
                expected.extend(["_SUCCESS".into(), "manifest.json".into()]);
                expected.sort_unstable();
                assert_eq!(left, expected);
                let read = read_dataset(store.clone(), key, ReadOptions::default(), true, 2, None)
                    .unwrap();
                let got: Vec<i64> = read
                    .batches
                    .iter()
                    .flat_map(|b| {
                        b.column(0)
                            .as_any()
                            .downcast_ref::<Int64Array>()
                            .unwrap()
                            .values()
                            .to_vec()
                    })
                    .collect();
                assert_eq!(got, values().collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn uploads_per_part_stay_within_bounds() {
        assert_eq!(uploads_per_part(32, 2), 8);
        assert_eq!(uploads_per_part(2, 2), 2);
        assert_eq!(uploads_per_part(12, 2), 6);
        assert_eq!(uploads_per_part(1, 0), 2);
        assert_eq!(uploads_per_part(usize::MAX, 1), 8);
    }

    #[test]
    fn single_part_is_data_parquet_with_or_without_row_hint() {
        let store = memory();
        assert_eq!(
            write(&store, "a", 15, Some(20), None).unwrap().parts,
            ["data.parquet"]
        );
        assert_eq!(
            write(&store, "b", 15, Some(20), Some(15)).unwrap().parts,
            ["data.parquet"]
        );
        assert_eq!(
            write(&store, "c", 40, Some(20), Some(40))
                .unwrap()
                .parts
                .len(),
            2
        );
        assert_eq!(
            write(&store, "d", 0, None, None).unwrap().parts,
            ["data.parquet"]
        );
        let d = read_dataset(store, "d", ReadOptions::default(), false, 2, None).unwrap();
        assert_eq!(d.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    }

    #[test]
    fn read_checks_success_and_parts() {
        let store = memory();
        write(&store, "ds", 50, Some(20), None).unwrap();
        let rt = crate::runtime::get().unwrap();
        rt.block_on(store.delete("ds/part-00001.parquet")).unwrap();
        let r = read_dataset(store.clone(), "ds", ReadOptions::default(), false, 2, None);
        assert!(matches!(r, Err(Error::DatasetIncomplete { .. })), "{r:?}");
        rt.block_on(store.delete("ds/_SUCCESS")).unwrap();
        let r = read_dataset(store, "ds", ReadOptions::default(), false, 2, None);
        assert!(matches!(r, Err(Error::DatasetIncomplete { .. })));
    }

    #[test]
    fn a_write_clears_what_a_failed_writer_left() {
        let store = memory();
        let rt = crate::runtime::get().unwrap();
        for junk in [
            "ds/part-00000.parquet",
            "ds/data.parquet",
            "ds/manifest.json",
        ] {
            rt.block_on(store.put(junk, Bytes::from_static(b"junk"), PutMode::Overwrite))
                .unwrap();
        }
        write(&store, "ds", 50, Some(20), None).unwrap();
        let read =
            read_dataset(store.clone(), "ds", ReadOptions::default(), true, 2, None).unwrap();
        assert_eq!(read.file_rows, 50);
        let names: Vec<String> = rt
            .block_on(store.list("ds", false))
            .unwrap()
            .objects
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert!(!names.contains(&"ds/data.parquet".to_string()), "{names:?}");
    }

    #[test]
    fn the_commit_check_finds_a_replaced_or_missing_object() {
        let meta = |key: &str, size: u64, e_tag: Option<&str>| crate::store::Meta {
            key: key.into(),
            size,
            last_modified: chrono::Utc::now(),
            e_tag: e_tag.map(String::from),
            version: None,
        };
        let objects = vec![
            meta("k/part-00000.parquet", 10, Some("\"a\"")),
            meta("k/part-00001.parquet", 20, Some("b")),
        ];
        let ok = [
            ("part-00000.parquet", 10, Some("a")),
            ("part-00001.parquet", 20, None),
        ];
        assert!(all_landed("k", &objects, &ok).is_ok());
        for bad in [
            ("part-00000.parquet", 10, Some("c")),
            ("part-00001.parquet", 21, None),
            ("part-00002.parquet", 10, None),
        ] {
            assert!(matches!(
                all_landed("k", &objects, &[bad]),
                Err(Error::ClaimLost { .. })
            ));
        }
    }

    #[test]
    fn a_read_of_a_replaced_dataset_starts_over_from_the_new_manifest() {
        let store = memory();
        write(&store, "ds", 50, Some(20), None).unwrap();
        let rt = crate::runtime::get().unwrap();
        let old = rt.block_on(store.get("ds/manifest.json")).unwrap();
        let (schema, b) = batches(30, 7);
        let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
        let req = WriteRequest {
            location: "ds".into(),
            dataset_key: "ds".into(),
            schema_hash: "h".into(),
            parallelism: 2,
            overwrite: true,
            ..Default::default()
        };
        let opts = EncodeOptions::new("zstd", Some(10), Some(20)).unwrap();
        write_dataset(store.clone(), reader, opts, req).unwrap();
        // A reader that took the old manifest finds the parts replaced.
        let read = read_dataset(
            store.clone(),
            "ds",
            ReadOptions::default(),
            false,
            2,
            Some(&old),
        );
        assert_eq!(read.unwrap().file_rows, 30);
        // With the dataset gone, it says the dataset was replaced.
        rt.block_on(delete_own(&store, "ds")).unwrap();
        let read = read_dataset(store, "ds", ReadOptions::default(), false, 2, Some(&old));
        match read {
            Err(Error::DatasetIncomplete { reason, .. }) => assert!(reason.contains("replaced")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn verify_detects_a_swapped_part() {
        let store = memory();
        write(&store, "ds", 50, Some(20), None).unwrap();
        let rt = crate::runtime::get().unwrap();
        let other = rt.block_on(store.get("ds/part-00000.parquet")).unwrap();
        rt.block_on(store.put("ds/part-00001.parquet", other, PutMode::Overwrite))
            .unwrap();
        let r = read_dataset(store, "ds", ReadOptions::default(), true, 2, None);
        assert!(matches!(r, Err(Error::PartCorrupted { .. })), "{r:?}");
    }

    #[test]
    fn input_error_writes_no_manifest_and_removes_parts() {
        let store = memory();
        let (schema, mut b) = batches(60, 10);
        let tail: Vec<std::result::Result<RecordBatch, arrow_schema::ArrowError>> = vec![Err(
            arrow_schema::ArrowError::ComputeError("source died".into()),
        )];
        let first: Vec<_> = b.drain(..).map(Ok).collect();
        let reader = Box::new(RecordBatchIterator::new(
            first.into_iter().chain(tail),
            schema,
        ));
        let opts = EncodeOptions::new("zstd", None, Some(20)).unwrap();
        let req = WriteRequest {
            location: "bad".into(),
            dataset_key: "bad".into(),
            parallelism: 2,
            ..Default::default()
        };
        assert!(write_dataset(store.clone(), reader, opts, req).is_err());
        let rt = crate::runtime::get().unwrap();
        assert!(rt
            .block_on(store.list("bad", true))
            .unwrap()
            .objects
            .is_empty());
    }

    /// The names of the objects directly under `key`, sorted.
    fn names_under(store: &StoreHandle, key: &str) -> Vec<String> {
        let rt = crate::runtime::get().unwrap();
        let mut names: Vec<String> = rt
            .block_on(store.list(key, false))
            .unwrap()
            .objects
            .into_iter()
            .map(|o| o.key.trim_start_matches(&format!("{key}/")).to_string())
            .collect();
        names.sort_unstable();
        names
    }

    /// An overwrite of `key` with the rows of `b`, `max` rows per part.
    fn overwrite(
        store: &Arc<StoreHandle>,
        key: &str,
        schema: SchemaRef,
        b: impl Iterator<Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>>
            + Send
            + 'static,
        max: usize,
    ) -> Result<Manifest> {
        let reader = Box::new(RecordBatchIterator::new(b, schema));
        let opts = EncodeOptions::new("zstd", Some(10), Some(max)).unwrap();
        let req = WriteRequest {
            location: key.into(),
            dataset_key: key.into(),
            schema_hash: "h".into(),
            parallelism: 2,
            overwrite: true,
            ..Default::default()
        };
        write_dataset(store.clone(), reader, opts, req)
    }

    fn rows(store: &Arc<StoreHandle>, key: &str) -> Result<u64> {
        read_dataset(store.clone(), key, ReadOptions::default(), true, 2, None).map(|d| d.file_rows)
    }

    /// The objects of a committed dataset of `parts`, sorted.
    fn layout_of(parts: &[String]) -> Vec<String> {
        let mut names = parts.to_vec();
        names.extend(["_SUCCESS".into(), "manifest.json".into()]);
        names.sort_unstable();
        names
    }

    /// A part name of an overwrite of a committed dataset.
    fn is_swapped_part(name: &str) -> bool {
        let Some(rest) = name.strip_prefix("part-") else {
            return false;
        };
        rest.len() == "0123456789ab-00000.parquet".len()
            && rest.ends_with(".parquet")
            && rest[..12].chars().all(|c| c.is_ascii_hexdigit())
    }

    #[test]
    fn an_overwrite_keeps_the_old_dataset_readable_until_it_commits() {
        let (file, _dir) = file_store();
        for store in [memory(), file] {
            // Nothing committed yet: an overwrite writes RFC-0008's names.
            write(&store, "ds", 50, Some(20), None).unwrap();
            let (schema, b) = batches(3, 10);
            overwrite(&store, "one", schema, b.into_iter().map(Ok), 20).unwrap();
            assert_eq!(
                names_under(&store, "one"),
                ["_SUCCESS", "data.parquet", "manifest.json"]
            );
            // Debris of a killed overwrite.
            let rt = crate::runtime::get().unwrap();
            rt.block_on(store.put(
                "ds/part-0123456789ab-00000.parquet",
                Bytes::from_static(b"junk"),
                PutMode::Create,
            ))
            .unwrap();
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (schema, b) = batches(60, 10);
            let (st, log) = (store.clone(), seen.clone());
            let input = b.into_iter().enumerate().map(move |(i, batch)| {
                // Once a part of the overwrite landed, read the dataset.
                // Up to 30 s: a loaded machine may take long for a part to land.
                for _ in 0..3000 {
                    let landed = names_under(&st, "ds")
                        .iter()
                        .any(|n| is_swapped_part(n) && !n.starts_with("part-0123456789ab"));
                    if i < 4 || landed {
                        let read = rows(&st, "ds").map_err(|e| e.to_string());
                        log.lock().unwrap().push((i, landed, read));
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Ok(batch)
            });
            let m = overwrite(&store, "ds", schema, input, 20).unwrap();
            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.len(), 6, "{seen:?}");
            assert!(seen.iter().any(|(_, landed, _)| *landed), "{seen:?}");
            for (_, _, read) in &seen {
                assert_eq!(read, &Ok(50), "{:?}: {seen:?}", store.scheme());
            }
            assert_eq!(rows(&store, "ds").unwrap(), 60);
            // The old parts and the debris are gone; the claim is released.
            assert!(m.parts.iter().all(|n| is_swapped_part(n)), "{:?}", m.parts);
            assert_eq!(names_under(&store, "ds"), layout_of(&m.parts));
            // And again: the next overwrite replaces those.
            let (schema, b) = batches(5, 5);
            let next = overwrite(&store, "ds", schema, b.into_iter().map(Ok), 20).unwrap();
            assert_eq!(rows(&store, "ds").unwrap(), 5);
            assert!(next.parts.iter().all(|n| !m.parts.contains(n)));
            assert_eq!(names_under(&store, "ds"), layout_of(&next.parts));
        }
    }

    #[test]
    fn a_failed_overwrite_leaves_the_old_dataset_and_removes_its_parts() {
        let (file, _dir) = file_store();
        for store in [memory(), file] {
            write(&store, "ds", 50, Some(20), None).unwrap();
            let before = names_under(&store, "ds");
            let rt = crate::runtime::get().unwrap();
            let manifest = rt.block_on(store.get("ds/manifest.json")).unwrap();
            let (schema, b) = batches(40, 10);
            let died = std::iter::once(Err(arrow_schema::ArrowError::ComputeError(
                "source died".into(),
            )));
            let input = b.into_iter().map(Ok).chain(died);
            let r = overwrite(&store, "ds", schema, input, 20);
            assert!(r.is_err(), "{r:?}");
            assert_eq!(rows(&store, "ds").unwrap(), 50);
            assert_eq!(
                rt.block_on(store.get("ds/manifest.json")).unwrap(),
                manifest
            );
            assert_eq!(names_under(&store, "ds"), before, "{:?}", store.scheme());
        }
    }

    #[test]
    fn racing_overwrites_commit_one_and_the_loser_leaves_no_parts() {
        let (file, _dir) = file_store();
        for store in [memory(), file] {
            write(&store, "ds", 50, Some(20), None).unwrap();
            // A second overwrite runs whole while the first writes its parts.
            let (schema, b) = batches(60, 10);
            let st = store.clone();
            let second = Arc::new(std::sync::Mutex::new(None));
            let result = second.clone();
            let input = b.into_iter().enumerate().map(move |(i, batch)| {
                if i == 3 {
                    let (schema, b) = batches(7, 7);
                    let r = overwrite(&st, "ds", schema, b.into_iter().map(Ok), 20);
                    *result.lock().unwrap() = Some(r.map(|m| m.parts));
                }
                Ok(batch)
            });
            let first = overwrite(&store, "ds", schema, input, 20);
            assert!(matches!(first, Err(Error::ClaimLost { .. })), "{first:?}");
            let won = second.lock().unwrap().take().unwrap().unwrap();
            assert_eq!(rows(&store, "ds").unwrap(), 7);
            assert_eq!(
                names_under(&store, "ds"),
                layout_of(&won),
                "{:?}",
                store.scheme()
            );
        }
    }

    #[test]
    fn a_swap_refused_because_another_writer_committed_removes_its_parts() {
        let (file, _dir) = file_store();
        for store in [memory(), file] {
            write(&store, "ds", 50, Some(20), None).unwrap();
            let rt = crate::runtime::get().unwrap();
            let claim = rt.block_on(Claim::take_over(&store, "ds")).unwrap();
            let old = rt
                .block_on(committed_to_replace(&store, "ds"))
                .unwrap()
                .unwrap();
            // Another writer's commit lands after this one read the manifest.
            let other = Bytes::from(
                rt.block_on(store.get("ds/manifest.json"))
                    .unwrap()
                    .to_vec()
                    .into_iter()
                    .chain(*b" ")
                    .collect::<Vec<u8>>(),
            );
            rt.block_on(store.put("ds/manifest.json", other.clone(), PutMode::Overwrite))
                .unwrap();
            let before = names_under(&store, "ds");
            let (schema, b) = batches(30, 10);
            let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
            let opts = EncodeOptions::new("zstd", None, Some(20)).unwrap();
            let req = WriteRequest {
                location: "ds".into(),
                dataset_key: "ds".into(),
                parallelism: 2,
                overwrite: true,
                ..Default::default()
            };
            let r = write_replacing(&store, reader, &opts, &req, &claim, &old);
            assert!(matches!(r, Err(Error::AlreadyExists { .. })), "{r:?}");
            assert_eq!(rt.block_on(store.get("ds/manifest.json")).unwrap(), other);
            assert_eq!(names_under(&store, "ds"), before, "{:?}", store.scheme());
        }
    }

    #[test]
    fn prefixed_parts_are_written_but_not_committed() {
        let store = memory();
        let (schema, b) = batches(45, 10);
        let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
        let opts = EncodeOptions::new("zstd", None, Some(20)).unwrap();
        let req = WriteRequest {
            location: "ds".into(),
            dataset_key: "ds".into(),
            parallelism: 2,
            part_prefix: Some("t3-a1".into()),
            ..Default::default()
        };
        let parts = write_parts(store.clone(), reader, &opts, &req).unwrap();
        assert_eq!(
            parts.names,
            [
                "part-t3-a1-00000.parquet",
                "part-t3-a1-00001.parquet",
                "part-t3-a1-00002.parquet"
            ]
        );
        let rt = crate::runtime::get().unwrap();
        assert!(rt
            .block_on(store.try_head("ds/_SUCCESS"))
            .unwrap()
            .is_none());
        let bad = WriteRequest {
            part_prefix: Some("../x".into()),
            ..req
        };
        let (schema, b) = batches(1, 1);
        let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
        assert!(matches!(
            write_parts(store, reader, &opts, &bad),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_dataset_never_nests_with_a_table() {
        let store = memory();
        let rt = crate::runtime::get().unwrap();
        rt.block_on(store.put(
            "t/manifest/v00000000.json",
            Bytes::from_static(br#"{"format": "pds-table/1"}"#),
            PutMode::Create,
        ))
        .unwrap();
        for key in ["t", "t/inner"] {
            let r = write(&store, key, 5, None, None);
            assert!(matches!(r, Err(Error::KeyOccupied { .. })), "{key}: {r:?}");
        }
        write(&store, "d/x", 5, None, None).unwrap();
        let r = write(&store, "d", 5, None, None);
        assert!(
            matches!(&r, Err(Error::KeyOccupied { reason, .. }) if reason.contains("\"d/x\"")),
            "{r:?}"
        );
        // Nothing was left behind, the claims included.
        let left: Vec<String> = rt
            .block_on(store.list("", true))
            .unwrap()
            .objects
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(
            left,
            [
                "d/x/_SUCCESS",
                "d/x/data.parquet",
                "d/x/manifest.json",
                "t/manifest/v00000000.json"
            ]
        );
    }

    #[test]
    fn schema_from_manifest() {
        let store = memory();
        write(&store, "ds", 5, None, None).unwrap();
        let s = read_schema(store, "ds").unwrap();
        assert_eq!(s.field(0).name(), "v");
    }
}
