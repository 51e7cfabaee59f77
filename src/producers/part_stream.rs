//! Key-range parts encoded as their rows arrive, then uploaded.
//!
//! [`super::parts::write_range_parts`] cuts a sorted stream into parts; this
//! module turns the cut's output ([`Feed`]: a part's next rows, then the end
//! of the part) into uploaded parts. Rows go straight into the open part's
//! [`PartEncoder`] (which encodes each slice's columns in parallel on the
//! CPU pool), so a part never holds its Arrow rows whole: only its
//! compressed pages grow until the part is cut. The finished part is handed
//! to an uploader while the next one is encoded.
//!
//! On [`PartStages::start`] with more than one thread, the encoder and the
//! uploader each run on their own thread, the cut feeding the encoder
//! through a channel of [`FEED_DEPTH`] pieces of rows and the encoder handing
//! each part over only to an idle uploader. Memory is then at most those
//! pieces, the part being encoded (its pages) and the part being uploaded
//! (its bytes). With one thread, both run inline on the cutting thread.
//! Either way the encoder receives the same pieces, so the parts are the
//! same bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use serde_json::Value;

use super::keys::key_values;
use crate::error::{contain, internal_panic, Error, Result};
use crate::parquet::encode::{encoder_panic, EncodeOptions, PartEncoder, PartSummary};
use crate::spec::pipeline::RangePart;
use crate::store::StoreHandle;

/// The most rows the cut sends the encoder at once: longer slices are
/// sent in pieces of this many rows (a multiple of the column writers'
/// mini-batch, so the pages do not depend on how the input was cut).
pub const FEED_ROWS: usize = 8192;

/// Pieces the cut may run ahead of the encoder: two of the encoder's
/// slices ([`crate::parquet::encode::ENCODE_SLICE_ROWS`]), so the cut goes
/// on while the encoder encodes one.
pub const FEED_DEPTH: usize = 2 * crate::parquet::encode::ENCODE_SLICE_ROWS / FEED_ROWS;

/// The most a part's output buffer reserves up front (a larger part's
/// buffer grows past it).
const CAPACITY_MAX: usize = 64 << 20;

/// The error of a stage stopped because another stage failed (replaced by
/// that stage's error).
pub const STOPPED: &str = "a part failed to write";

/// What the cut sends the encoder.
pub enum Feed {
    /// The open part's next rows (a part opens with its first rows).
    Rows(RecordBatch),
    /// The open part ends here.
    Cut,
}

/// Where the parts go, and how they are encoded.
pub struct PartTarget<'a> {
    pub store: Arc<StoreHandle>,
    /// The folder's key, without a trailing `/`.
    pub folder: String,
    pub prefix: &'a str,
    pub schema: SchemaRef,
    pub key: &'a [String],
    pub opts: &'a EncodeOptions,
    /// The most rows a part holds (its output is reserved for that many).
    pub max_rows: usize,
}

impl PartTarget<'_> {
    /// The object key of part `name`.
    pub fn object(&self, name: &str) -> String {
        format!("{}/{name}", self.folder)
    }
}

/// A part encoded, not yet uploaded.
struct Encoded {
    index: usize,
    bytes: Bytes,
    summary: PartSummary,
    first_key: Vec<Option<Value>>,
    last_key: Vec<Option<Value>>,
}

/// The part being encoded.
struct OpenPart {
    encoder: PartEncoder<Vec<u8>>,
    first_key: Vec<Option<Value>>,
    /// The last rows written, for the part's last key.
    last: RecordBatch,
}

/// The encoder stage: parts numbered from 0 in the order they are cut.
struct Encoder<'t, 'a> {
    target: &'t PartTarget<'a>,
    index: usize,
    open: Option<OpenPart>,
}

impl<'t, 'a> Encoder<'t, 'a> {
    fn new(target: &'t PartTarget<'a>) -> Self {
        Self {
            target,
            index: 0,
            open: None,
        }
    }

    /// Take one feed; a cut returns the finished part. A panic in the
    /// encoder is the typed data error.
    fn take(&mut self, feed: Feed) -> Result<Option<Encoded>> {
        contain(encoder_panic, || match feed {
            Feed::Rows(batch) => self.rows(batch).map(|()| None),
            Feed::Cut => self.cut(),
        })
    }

    fn rows(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let t = self.target;
        let open = match &mut self.open {
            Some(open) => open,
            None => {
                let encoder = PartEncoder::new(
                    Vec::with_capacity(output_capacity(&batch, t.max_rows)),
                    t.schema.clone(),
                    t.opts,
                )?;
                self.open.insert(OpenPart {
                    encoder,
                    first_key: key_values(&batch, t.key, 0),
                    last: batch.slice(0, 0),
                })
            }
        };
        open.encoder.write(&batch)?;
        open.last = batch;
        Ok(())
    }

    fn cut(&mut self) -> Result<Option<Encoded>> {
        let Some(open) = self.open.take() else {
            return Ok(None);
        };
        let OpenPart {
            encoder,
            first_key,
            last,
        } = open;
        let last_key = key_values(&last, self.target.key, last.num_rows().saturating_sub(1));
        drop(last);
        let (summary, buf) = encoder.finish()?;
        let index = self.index;
        self.index += 1;
        Ok(Some(Encoded {
            index,
            bytes: Bytes::from(buf),
            summary,
            first_key,
            last_key,
        }))
    }
}

/// The output buffer a part starting with `batch` reserves: that batch's
/// bytes per row for `max_rows` rows, at most [`CAPACITY_MAX`]. Pages never
/// written cost no memory, and a part of that size is not regrown by
/// doubling as it fills.
fn output_capacity(batch: &RecordBatch, max_rows: usize) -> usize {
    let bytes: usize = batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum();
    let per_row = bytes / batch.num_rows().max(1);
    per_row.saturating_mul(max_rows).min(CAPACITY_MAX)
}

/// Parts of at least this many encoded bytes return their freed memory
/// once uploaded (see [`crate::memory`]): small parts (an update's patches)
/// free little, and returning it for each cost their updates a fifth more
/// time.
const RELEASE_AFTER_BYTES: usize = 8 << 20;

/// Upload one encoded part (create-only: a part never replaces an object).
fn upload(target: &PartTarget<'_>, part: Encoded) -> Result<RangePart> {
    let Encoded {
        index,
        bytes,
        summary,
        first_key,
        last_key,
    } = part;
    let name = format!("{}-{index:05}.parquet", target.prefix);
    let large = bytes.len() >= RELEASE_AFTER_BYTES;
    crate::runtime::block_on(target.store.put_create_own(&target.object(&name), bytes))??;
    if large {
        // The part's encoded bytes are free now (and its rows were, as
        // encoded): a large part's memory goes back before the next fills.
        crate::memory::release_freed();
    }
    Ok(RangePart {
        name,
        rows: summary.row_count,
        size_bytes: summary.size_bytes,
        sha256: summary.sha256,
        first_key,
        last_key,
        patches: Vec::new(),
        base_rows: None,
        footer: Some(crate::spec::pipeline::FooterCheck {
            bytes: summary.footer_bytes,
            crc32: format!("{:08x}", summary.footer_crc32),
        }),
    })
}

/// Each part's outcome, by index, and whether any failed.
#[derive(Default)]
pub struct Outcomes {
    done: Mutex<Vec<(usize, Result<RangePart>)>>,
    failed: AtomicBool,
}

impl Outcomes {
    fn record(&self, index: usize, result: Result<RangePart>) {
        if result.is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
        if let Ok(mut done) = self.done.lock() {
            done.push((index, result));
        }
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Stop the stages: the cut failed, so what they still hold is not
    /// encoded or uploaded.
    pub fn cancel(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    /// The parts written, in index order, or the first error (a stage's
    /// own error before [`STOPPED`]). `cut` is the cutting thread's result.
    pub fn finish(self, cut: Result<()>) -> (Vec<RangePart>, Option<Error>) {
        let mut done = match self.done.into_inner() {
            Ok(d) => d,
            Err(p) => p.into_inner(),
        };
        done.sort_by_key(|(i, _)| *i);
        let mut written = Vec::with_capacity(done.len());
        let mut first_err = cut.err();
        for (_, r) in done {
            match r {
                Ok(p) => written.push(p),
                Err(e) => {
                    if first_err.is_none() || first_err.as_ref().is_some_and(is_stopped) {
                        first_err = Some(e);
                    }
                }
            }
        }
        (written, first_err)
    }
}

fn is_stopped(e: &Error) -> bool {
    matches!(e, Error::Task(m) if m == STOPPED)
}

fn stopped() -> Error {
    Error::Task(STOPPED.into())
}

/// Where the cut's feeds go: the encoder thread, or the encoder inline.
pub struct PartStages<'t, 'a> {
    target: &'t PartTarget<'a>,
    outcomes: &'t Outcomes,
    /// The encoder thread's channel; `None`: encode (and upload) inline.
    to_encoder: Option<SyncSender<Feed>>,
    inline: Encoder<'t, 'a>,
}

impl<'t, 'a> PartStages<'t, 'a> {
    /// Start the stages in `scope`: on `threads` > 1, an encoder thread
    /// and an uploader thread; otherwise both inline. Fails if a thread
    /// cannot start.
    pub fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        target: &'t PartTarget<'a>,
        outcomes: &'t Outcomes,
        threads: usize,
    ) -> Result<Self>
    where
        't: 'scope,
    {
        let mut stages = Self {
            target,
            outcomes,
            to_encoder: None,
            inline: Encoder::new(target),
        };
        if threads <= 1 {
            return Ok(stages);
        }
        // A rendezvous: a part is handed over only to an idle uploader.
        let (to_uploader, parts) = sync_channel::<Encoded>(0);
        std::thread::Builder::new()
            .name("pds-upload".into())
            .spawn_scoped(scope, move || {
                for part in parts {
                    let index = part.index;
                    let r = contain(internal_panic, || upload(target, part));
                    let failed = r.is_err();
                    outcomes.record(index, r);
                    if failed {
                        return; // The encoder's next hand-over fails: it stops.
                    }
                }
            })?;
        let (to_encoder, feeds) = sync_channel::<Feed>(FEED_DEPTH);
        std::thread::Builder::new()
            .name("pds-encode".into())
            .spawn_scoped(scope, move || {
                let mut encoder = Encoder::new(target);
                for feed in feeds {
                    if outcomes.failed() {
                        return;
                    }
                    match encoder.take(feed) {
                        Ok(None) => {}
                        Ok(Some(part)) => {
                            let large = part.bytes.len() >= RELEASE_AFTER_BYTES;
                            if to_uploader.send(part).is_err() {
                                return; // The uploader failed.
                            }
                            if large {
                                // The rows this thread freed as it encoded
                                // them, and the last part's bytes the
                                // uploader freed into this thread's blocks.
                                crate::memory::release_freed_here();
                            }
                        }
                        Err(e) => {
                            outcomes.record(encoder.index, Err(e));
                            return; // The cut's next send fails: it stops.
                        }
                    }
                }
            })?;
        stages.to_encoder = Some(to_encoder);
        Ok(stages)
    }

    /// Hand the encoder a feed (rows in pieces of at most [`FEED_ROWS`]).
    /// Fails with [`STOPPED`] once any part failed (its own error is in
    /// the [`Outcomes`]).
    pub fn send(&mut self, feed: Feed) -> Result<()> {
        match feed {
            Feed::Rows(batch) if batch.num_rows() > FEED_ROWS => {
                for start in (0..batch.num_rows()).step_by(FEED_ROWS) {
                    let len = FEED_ROWS.min(batch.num_rows() - start);
                    self.send_one(Feed::Rows(batch.slice(start, len)))?;
                }
                Ok(())
            }
            feed => self.send_one(feed),
        }
    }

    fn send_one(&mut self, feed: Feed) -> Result<()> {
        if self.outcomes.failed() {
            return Err(stopped());
        }
        if let Some(tx) = &self.to_encoder {
            return tx.send(feed).map_err(|_| stopped());
        }
        match self.inline.take(feed) {
            Ok(None) => Ok(()),
            Ok(Some(part)) => {
                let index = part.index;
                let r = contain(internal_panic, || upload(self.target, part));
                let failed = r.is_err();
                self.outcomes.record(index, r);
                if failed {
                    Err(stopped())
                } else {
                    Ok(())
                }
            }
            Err(e) => {
                self.outcomes.record(self.inline.index, Err(e));
                Err(stopped())
            }
        }
    }
}
