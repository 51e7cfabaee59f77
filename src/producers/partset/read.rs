//! Reading a part set: whole parts (their patches layered over them), a
//! streamed scan, and lookups by key that seek to the pages holding the keys.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::shared_files::Decoded;
use super::{rows_in, PartSet};
use crate::error::{Error, Result};
use crate::parquet::decode::{decode_bytes_lazy, ReadOptions};
use crate::producers::keys::KeyEncoder;
use crate::producers::parts::RangePart;
use crate::producers::patch::Layered;
use crate::producers::BatchIter;
use crate::spec::pipeline::Patch;

/// Parts fetched at once by lookups and scans.
const FETCH_AHEAD: usize = 4;

/// A part's file as a seek read it: the pages holding the wanted values
/// (decoded), or the whole file (fetched, checked, not decoded).
enum Base {
    Pages(Vec<RecordBatch>),
    Whole(Bytes),
}

/// A scan fetches ahead at most about this many bytes of parts (and at
/// least one part): parts of a key spanning many are large, and a scan's
/// memory must stay bounded whatever the group's size.
const SCAN_AHEAD_BYTES: u64 = 32 << 20;

/// A scan decodes ahead of its reader about this many bytes of batches
/// (see [`scan_batches_ahead`]): enough to keep decoding while the reader
/// works through a chunk, far less than a large part.
const SCAN_DECODED_AHEAD: u64 = 16 << 20;

/// Batches a scan of `parts` decodes ahead: [`SCAN_DECODED_AHEAD`] over
/// a batch's size at the parts' largest stored bytes per row (the decoder
/// makes batches of 1,024 rows), from 2 to 512.
fn scan_batches_ahead(parts: &[RangePart]) -> usize {
    let per_row = parts
        .iter()
        .map(|p| p.size_bytes / p.rows.max(1))
        .max()
        .unwrap_or(0)
        .max(1);
    (SCAN_DECODED_AHEAD / per_row.saturating_mul(1024)).clamp(2, 512) as usize
}

/// A part whose file holds other than the rows its record states.
fn rows_differ(path: String, file_rows: u64, rows: u64) -> Error {
    Error::PartCorrupted {
        path,
        reason: format!("{file_rows} rows, the manifest records {rows}"),
    }
}

/// Parts a scan of `parts` fetches ahead (see [`SCAN_AHEAD_BYTES`]).
fn scan_ahead(parts: &[RangePart]) -> usize {
    let largest = parts.iter().map(|p| p.size_bytes).max().unwrap_or(0).max(1);
    ((SCAN_AHEAD_BYTES / largest) as usize).clamp(1, FETCH_AHEAD)
}

/// A part's fetched bytes: its file's, and its patches'.
struct Fetched {
    base: Bytes,
    patches: Vec<FetchedPatch>,
}

/// A patch's fetched files (see [`crate::spec::pipeline::Patch`]).
struct FetchedPatch {
    rows: Option<Bytes>,
    deleted: Option<DeletedKeys>,
}

/// A patch's deleted keys, as fetched.
enum DeletedKeys {
    /// Its own file's bytes (checked, not yet decoded).
    Own(Bytes),
    /// The file the patches of its update share, decoded once per part set
    /// (see [`super::shared_files`]): the patch's keys are its run of it.
    Shared(Decoded),
}

impl PartSet {
    /// GET a part and check its size and SHA-256 against the manifest's
    /// record: bytes from a store are untrusted.
    async fn fetch(&self, part: &RangePart) -> Result<Bytes> {
        let path = self.object(part);
        let data = self.store.get(&path).await?;
        if data.len() as u64 != part.size_bytes {
            return Err(Error::PartCorrupted {
                path,
                reason: format!(
                    "{} bytes, the manifest records {}",
                    data.len(),
                    part.size_bytes
                ),
            });
        }
        let sum = crate::parquet::encode::sha256_hex(&data);
        if sum != part.sha256 {
            return Err(Error::PartCorrupted {
                path,
                reason: "its SHA-256 is not the one the manifest records".into(),
            });
        }
        Ok(data)
    }

    /// GET a part's file and its patches' files (see [`crate::producers::patch`]),
    /// concurrently, each checked as [`Self::fetch`] checks.
    async fn fetch_part(&self, part: &RangePart) -> Result<Fetched> {
        let (base, patches) =
            futures::future::try_join(self.fetch(part), self.fetch_patches(part)).await?;
        Ok(Fetched { base, patches })
    }

    /// GET a part's patches' files, concurrently, each checked as
    /// [`Self::fetch`] checks; a file of deleted keys that patches share
    /// comes decoded, once per part set.
    async fn fetch_patches(&self, part: &RangePart) -> Result<Vec<FetchedPatch>> {
        futures::future::try_join_all(part.patches.iter().map(|p| self.fetch_patch(p))).await
    }

    /// One patch's files (see [`Self::fetch_patches`]).
    async fn fetch_patch(&self, p: &Patch) -> Result<FetchedPatch> {
        let rows = async {
            match &p.rows {
                Some(f) => self.fetch(f).await.map(Some),
                None => Ok(None),
            }
        };
        let deleted = async {
            match (&p.deleted, p.deleted_rows) {
                (None, _) => Ok(None),
                (Some(f), None) => Ok(Some(DeletedKeys::Own(self.fetch(f).await?))),
                (Some(f), Some(_)) => Ok(Some(DeletedKeys::Shared(self.shared_deleted(f).await?))),
            }
        };
        let (rows, deleted) = futures::future::try_join(rows, deleted).await?;
        Ok(FetchedPatch { rows, deleted })
    }

    /// A shared file of deleted keys, fetched, checked and decoded once per
    /// part set (see [`super::shared_files`]). It is decoded where it is
    /// fetched (a scan's fetch task, on the runtime): at most
    /// [`super::SHARED_DELETED_MAX_ROWS`] keys, a few milliseconds.
    async fn shared_deleted(&self, file: &RangePart) -> Result<Decoded> {
        let load = || async {
            let data = self.fetch(file).await?;
            self.decode_file(file, data, None, &self.cut_schema()?, file.rows)?
                .collect()
        };
        self.shared_files.get(file, load).await
    }

    /// Decode one fetched file, batch by batch as they are taken: its
    /// footer, its schema (against `expected`), its chunks' checksums and its
    /// row count (against `rows`) are checked first.
    fn decode_file(
        &self,
        part: &RangePart,
        data: Bytes,
        columns: Option<&[String]>,
        expected: &SchemaRef,
        rows: u64,
    ) -> Result<BatchIter> {
        let path = self.object(part);
        let opts = ReadOptions {
            columns: columns.map(|c| c.to_vec()),
            expected: Some(expected.clone()),
            ..Default::default()
        };
        let d = decode_bytes_lazy(data, &path, &opts)?;
        if d.file_rows != rows {
            return Err(rows_differ(path, d.file_rows, rows));
        }
        Ok(d.batches)
    }

    /// Decode a fetched part's file and patches, not merged (see
    /// [`Layered`]); the rows after the patches are checked against the
    /// part's record.
    fn decode_layered(&self, part: &RangePart, fetched: Fetched) -> Result<Layered> {
        self.decode_layered_columns(part, fetched, None)
    }

    /// [`Self::decode_layered`], only `columns` (which hold the cut key)
    /// decoded, in that order.
    fn decode_layered_columns(
        &self,
        part: &RangePart,
        fetched: Fetched,
        columns: Option<&[String]>,
    ) -> Result<Layered> {
        let Fetched { base, patches } = fetched;
        let base = self
            .decode_file(part, base, columns, &self.schema, part.file_rows())?
            .collect::<Result<_>>()?;
        self.layer(part, base, patches, columns, true)
    }

    /// A part's decoded file rows (`columns` projected; all of them if
    /// `whole`, else the runs of some values: no row count to check) under
    /// its fetched patch files.
    fn layer(
        &self,
        part: &RangePart,
        base: Vec<RecordBatch>,
        fetched: Vec<FetchedPatch>,
        columns: Option<&[String]>,
        whole: bool,
    ) -> Result<Layered> {
        let cut_schema = self.cut_schema()?;
        let schema = match columns {
            None => self.schema.clone(),
            Some(cols) => {
                let idx = crate::parquet::decode::column_indices(&self.schema, cols)?;
                Arc::new(self.schema.project(&idx)?)
            }
        };
        if fetched.len() != part.patches.len() {
            return Err(Error::Task("a patch's files were not fetched".into()));
        }
        let mut patches = Vec::with_capacity(part.patches.len());
        let not_fetched = || Error::Task("a patch's file was not fetched".into());
        for (p, got) in part.patches.iter().zip(fetched) {
            let rows = match (&p.rows, got.rows) {
                (Some(f), Some(data)) => self
                    .decode_file(f, data, columns, &self.schema, f.rows)?
                    .collect::<Result<_>>()?,
                (None, None) => Vec::new(),
                _ => return Err(not_fetched()),
            };
            let deleted = match (&p.deleted, got.deleted) {
                (Some(f), Some(DeletedKeys::Own(data))) => self
                    .decode_file(f, data, None, &cut_schema, f.rows)?
                    .collect::<Result<_>>()?,
                // The run lies within the file: the manifest's check, and
                // the decode's of the file's rows against its record.
                (Some(f), Some(DeletedKeys::Shared(all))) => {
                    let [start, end] = p.deleted_rows.unwrap_or([0, f.rows]);
                    rows_in(&all, start, end)
                }
                (None, None) => Vec::new(),
                _ => return Err(not_fetched()),
            };
            patches.push((rows, deleted));
        }
        let cut = KeyEncoder::new(&schema, &self.cut_key)?;
        let deleted_enc = KeyEncoder::new(&cut_schema, &self.cut_key)?;
        let layered = Layered::new(&schema, &cut, &deleted_enc, base, patches)?;
        if whole && layered.len() as u64 != part.rows {
            return Err(Error::PartCorrupted {
                path: self.object(part),
                reason: format!(
                    "{} rows after its patches, the manifest records {}",
                    layered.len(),
                    part.rows
                ),
            });
        }
        Ok(layered)
    }

    /// Decode a fetched part (`columns` projected, in that order), its
    /// patches applied (see [`crate::producers::patch`]).
    fn decode(
        &self,
        part: &RangePart,
        fetched: Fetched,
        columns: Option<&[String]>,
    ) -> Result<Vec<RecordBatch>> {
        if part.patches.is_empty() {
            return self
                .decode_file(part, fetched.base, columns, &self.schema, part.rows)?
                .collect();
        }
        let out = self.decode_layered(part, fetched)?.rows()?;
        self.project(out, columns)
    }

    /// `batches` (of the layout's schema) projected to `columns`.
    fn project(
        &self,
        batches: Vec<RecordBatch>,
        columns: Option<&[String]>,
    ) -> Result<Vec<RecordBatch>> {
        match columns {
            None => Ok(batches),
            Some(cols) => {
                let idx = crate::parquet::decode::column_indices(&self.schema, cols)?;
                batches.iter().map(|b| Ok(b.project(&idx)?)).collect()
            }
        }
    }

    /// Fetch and decode one part whole, not merged with its patches.
    pub(super) fn read_whole(&self, part: &RangePart) -> Result<Layered> {
        let fetched = crate::runtime::block_on(self.fetch_part(part))??;
        self.decode_layered(part, fetched)
    }

    /// Fetch several parts (with their patches), the GETs concurrently.
    fn fetch_all(&self, parts: &[RangePart]) -> Result<Vec<Fetched>> {
        crate::runtime::block_on(
            futures::stream::iter(parts.iter().map(|p| self.fetch_part(p)))
                .buffered(FETCH_AHEAD)
                .try_collect(),
        )?
    }

    /// Every row of `parts`, in order, as a stream (`columns` projected);
    /// a few parts are fetched ahead (about [`SCAN_AHEAD_BYTES`] at most),
    /// and decoded a batch at a time, up to [`SCAN_DECODED_AHEAD`] ahead of
    /// the reader (a part with patches, a part at a time). Memory: a few
    /// parts' bytes and that many batches, whatever the parts' number and
    /// size.
    pub fn scan(
        self: &Arc<Self>,
        parts: Vec<RangePart>,
        columns: Option<Vec<String>>,
    ) -> BatchIter {
        let this = self.clone();
        let (tx, rx) =
            std::sync::mpsc::sync_channel::<Result<RecordBatch>>(scan_batches_ahead(&parts));
        let ahead = scan_ahead(&parts);
        let rt = match crate::runtime::get() {
            Ok(rt) => rt,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        rt.spawn(async move {
            let this2 = this.clone();
            // Each fetch is a task of its own, so the parts ahead download
            // while the one before is decoded and read.
            let mut fetches = futures::stream::iter(parts.into_iter().map(move |p| {
                let this = this2.clone();
                tokio::spawn(async move { this.fetch_part(&p).await.map(|d| (p, d)) })
            }))
            .buffered(ahead);
            while let Some(joined) = fetches.next().await {
                let got = joined
                    .unwrap_or_else(|e| Err(Error::Task(format!("a part fetch failed: {e}"))));
                let cols = columns.clone();
                let this = this.clone();
                let sent = tx.clone();
                // Decode and hand over on a blocking thread: `send` waits
                // while the reader is behind. `false`: stop.
                let go_on = tokio::task::spawn_blocking(move || {
                    let batches = match got {
                        Ok((p, data)) => this.decode_lazy(&p, data, cols.as_deref()),
                        Err(e) => Err(e),
                    };
                    let batches = match batches {
                        Ok(b) => b,
                        Err(e) => {
                            let _ = sent.send(Err(e));
                            return false;
                        }
                    };
                    for b in batches {
                        let failed = b.is_err();
                        if sent.send(b).is_err() || failed {
                            return false;
                        }
                    }
                    true
                })
                .await;
                match go_on {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => {
                        // `send` may wait: not on a runtime worker.
                        let failed = Err(Error::Task(format!("a part decode failed: {e}")));
                        let _ = tokio::task::spawn_blocking(move || tx.send(failed)).await;
                        return;
                    }
                }
            }
        });
        Box::new(rx.into_iter())
    }

    /// [`Self::decode`], the batches decoded as they are taken where the
    /// part has no patches (its rows and their checks are those of
    /// [`Self::decode`]).
    fn decode_lazy(
        &self,
        part: &RangePart,
        fetched: Fetched,
        columns: Option<&[String]>,
    ) -> Result<BatchIter> {
        if !part.patches.is_empty() {
            let batches = self.decode(part, fetched, columns)?;
            return Ok(Box::new(batches.into_iter().map(Ok)));
        }
        self.decode_file(part, fetched.base, columns, &self.schema, part.rows)
    }

    /// Fetch and decode several parts at once (the GETs concurrently).
    pub(super) fn read_many(
        &self,
        parts: &[RangePart],
        columns: Option<&[String]>,
    ) -> Result<Vec<Vec<RecordBatch>>> {
        parts
            .iter()
            .zip(self.fetch_all(parts)?)
            .map(|(p, d)| self.decode(p, d, columns))
            .collect()
    }

    /// The rows (projected to `columns`) whose cut key is one of `keys`
    /// (batches holding the cut key's columns), in sort order. Reads only
    /// the parts whose ranges hold those keys.
    pub fn lookup(
        &self,
        parts: &[RangePart],
        keys: &[RecordBatch],
        columns: &[String],
    ) -> Result<Vec<RecordBatch>> {
        if parts.is_empty() || keys.iter().all(|k| k.num_rows() == 0) {
            return Ok(Vec::new());
        }
        let hit = crate::producers::parts::touched_parts(parts, &self.schema, &self.cut_key, keys)?;
        let wanted: Vec<RangePart> = parts
            .iter()
            .zip(&hit)
            .filter(|(_, h)| **h)
            .map(|(p, _)| p.clone())
            .collect();
        let key_enc = KeyEncoder::new(&keys[0].schema(), &self.cut_key)?;
        let mut sorted: Vec<Box<[u8]>> = Vec::new();
        for b in keys {
            let rows = key_enc.rows(b)?;
            sorted.extend((0..b.num_rows()).map(|i| Box::from(rows.row(i).data())));
        }
        sorted.sort_unstable();
        sorted.dedup();
        let names = self.schema_names();
        // The keys' first column, for the seek.
        let lead: Vec<RecordBatch> = keys
            .iter()
            .map(|b| {
                let i = b.schema().index_of(&self.cut_key[0])?;
                Ok(b.project(&[i])?)
            })
            .collect::<Result<_>>()?;
        let mut out = Vec::new();
        for group in wanted.chunks(FETCH_AHEAD) {
            for part in self.seek_parts(group.to_vec(), &lead, &names)? {
                out.extend(self.project(part.take(&sorted)?.0, Some(columns))?);
            }
        }
        Ok(out)
    }

    /// `parts` read for a lookup of the values in `lead` (batches whose
    /// first column holds values of the cut key's first column): of each
    /// part's file only the pages whose range of that column holds one
    /// (see [`crate::parquet::seek`]), `columns` decoded, under its
    /// patches, fetched concurrently. Each view holds every row of the
    /// wanted values (and others of the same pages).
    pub(super) fn seek_parts(
        &self,
        parts: Vec<RangePart>,
        lead: &[RecordBatch],
        columns: &[String],
    ) -> Result<Vec<Layered>> {
        let firsts: Vec<&dyn arrow_array::Array> = lead
            .iter()
            .filter(|b| b.num_columns() > 0)
            .map(|b| b.column(0).as_ref())
            .collect();
        let values = arrow_select::concat::concat(&firsts)?;
        let column = self
            .cut_key
            .first()
            .ok_or_else(|| Error::InvalidArgument("a layout without a cut key".into()))?;
        let opts = ReadOptions {
            columns: Some(columns.to_vec()),
            expected: Some(self.schema.clone()),
            ..Default::default()
        };
        let seek = |part: RangePart| {
            let (opts, values) = (&opts, &values);
            async move {
                let path = self.object(&part);
                let (base, patches) = futures::future::try_join(
                    crate::parquet::seek::read_pages_holding(
                        &self.store,
                        &path,
                        part.size_bytes,
                        part.footer_check(),
                        opts,
                        column,
                        values,
                    ),
                    self.fetch_patches(&part),
                )
                .await?;
                let base = match base {
                    Some(base) if base.file_rows != part.file_rows() => {
                        return Err(Error::PartCorrupted {
                            path,
                            reason: format!(
                                "{} rows, the manifest records {}",
                                base.file_rows,
                                part.file_rows()
                            ),
                        })
                    }
                    Some(base) => Base::Pages(base.batches),
                    // Most of it is wanted: read it whole (one request,
                    // among the concurrent ones).
                    None => Base::Whole(self.fetch(&part).await?),
                };
                Ok((part, base, patches))
            }
        };
        let read: Vec<_> = crate::runtime::block_on(
            futures::stream::iter(parts.into_iter().map(seek))
                .buffered(FETCH_AHEAD)
                .try_collect::<Vec<_>>(),
        )??;
        read.into_iter()
            .map(|(part, base, patches)| match base {
                Base::Pages(pages) => self.layer(&part, pages, patches, Some(columns), false),
                Base::Whole(whole) => {
                    let rows = part.file_rows();
                    let base = self
                        .decode_file(&part, whole, Some(columns), &self.schema, rows)?
                        .collect::<Result<_>>()?;
                    self.layer(&part, base, patches, Some(columns), true)
                }
            })
            .collect()
    }
}
