//! A sorted data set stored as key-range parts (see [`super::parts`]): read
//! back whole or by key, and rewritten where an update touches it.
//!
//! A [`PartSet`] says what the parts hold: their schema, the sort key and
//! the *cut key* (a leading part of the sort key that parts are cut at; a
//! value with many rows may span parts, see [`super::parts`]).
//! [`PartSet::rewrite`] applies a change (rows to remove by some key, rows
//! to add in sort order) by rewriting only the parts whose key ranges the
//! change touches (a key spanning parts: all of them); the other parts are
//! kept by reference. So a change costs reads and writes of the parts it
//! lands in, not of the set.

use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_row::{Row, Rows};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::keys::{key_set_new, KeyEncoder, KeySet};
use super::merge::merge_sorted;
use super::parts::{last_key_rows, write_range_parts, PartSpec, RangePart};
use super::patch::{extremes, may_patch, merge_newest, Layered, Patch};
use super::sort::BATCH_ROWS;
use super::splice::Sorted;
use super::BatchIter;
use crate::error::{Error, Result};
use crate::parquet::decode::{decode_bytes, ReadOptions};
use crate::parquet::encode::EncodeOptions;
use crate::store::StoreHandle;
use reader::Reader;

mod reader;
mod streamed;
#[cfg(test)]
pub(crate) mod tests;

/// Parts fetched at once by lookups and scans.
const FETCH_AHEAD: usize = 4;

/// A part's file as a seek read it: the pages holding the wanted values
/// (decoded), or the whole file (fetched, checked, not decoded).
enum Base {
    Pages(Vec<RecordBatch>),
    Whole(Bytes),
}

/// Rows a part's file holds at least for a change to it to read only the
/// pages holding the change's values first (see [`PartSet::rewrite`]).
pub const SEEK_MIN_ROWS: u64 = 65_536;

/// Rows per Parquet data page at most (the writer's default), to tell
/// which changes leave most pages unread.
const PAGE_ROWS: u64 = 20_000;
/// A scan fetches ahead at most about this many bytes of parts (and at
/// least one part): parts of a key spanning many are large, and a scan's
/// memory must stay bounded whatever the group's size.
const SCAN_AHEAD_BYTES: u64 = 32 << 20;

/// Parts a scan of `parts` fetches ahead (see [`SCAN_AHEAD_BYTES`]).
fn scan_ahead(parts: &[RangePart]) -> usize {
    let largest = parts.iter().map(|p| p.size_bytes).max().unwrap_or(0).max(1);
    ((SCAN_AHEAD_BYTES / largest) as usize).clamp(1, FETCH_AHEAD)
}

/// A part's fetched bytes: its file's, then its patches' files' in order.
struct Fetched {
    base: Bytes,
    files: Vec<Bytes>,
}

/// What a set of key-range parts holds and where it lives.
#[derive(Debug, Clone)]
pub struct PartSet {
    pub store: Arc<StoreHandle>,
    /// The key part names are relative to (a pipeline's key).
    pub root: String,
    pub schema: SchemaRef,
    pub sort_key: Vec<String>,
    /// A leading part of `sort_key` that parts are cut at; a value spans
    /// parts only through shared boundary keys (see [`super::parts::units`]).
    pub cut_key: Vec<String>,
    pub opts: EncodeOptions,
    /// Rows per part before the cut at the next key boundary.
    pub target_rows: usize,
}

/// Which rows a rewrite removes from the parts it rewrites.
#[derive(Debug)]
pub enum Remove {
    Nothing,
    /// Rows whose `key` columns (as row-format bytes) are in `set`, among
    /// the rows of the cut-key values [`Change::touch`] lists (and, with
    /// [`Change::derived`], those it finds): a listed key elsewhere stays.
    Keys {
        key: Vec<String>,
        set: KeySet,
    },
}

/// A change to apply with [`PartSet::rewrite`].
pub struct Change {
    pub remove: Remove,
    /// Cut-key values (batches of the cut key's columns, sorted, repeats
    /// allowed) whose parts must be rewritten even if nothing is added
    /// there: where the removed rows live.
    pub touch: BatchIter,
    /// Rows to add (the layout's schema), sorted by the sort key.
    pub adds: BatchIter,
    /// Return the removed rows.
    pub collect_removed: bool,
    /// Select, for an update, every row (after the change) of each cut-key
    /// value that was touched or added, and the touched values left with
    /// no row.
    pub select: bool,
    /// New parts are named `<prefix>-sNNNNN-NNNNN.parquet`.
    pub prefix: String,
    /// Removed rows the rewrite finds itself, in the parts that may hold
    /// them, rather than by `touch`: see [`Derived`].
    pub derived: Option<Derived>,
}

/// Rows to remove whose cut-key values are not listed in
/// [`Change::touch`] but begin with known leading values (a stage's rows
/// whose target key begins with their changed source key's values: see
/// [`super::manifest::NodeState::derived_prefix`]). Each part whose range
/// of the leading columns holds one is rewritten; of its values beginning
/// with one, those holding a row that [`Change::remove`] removes count as
/// touched.
pub struct Derived {
    /// The leading values (row-format bytes of the cut key's first `m`
    /// columns), sorted, distinct.
    pub prefixes: Vec<Box<[u8]>>,
    pub m: usize,
    /// The values of the cut key's first column among them (to seek with).
    pub first: arrow_array::ArrayRef,
}

/// What [`PartSet::rewrite`] did.
#[derive(Debug, Default)]
pub struct PartsRewritten {
    /// The new part list, in key order.
    pub parts: Vec<RangePart>,
    /// Every object this rewrite created (for cleanup if the caller fails).
    pub created: Vec<String>,
    pub removed: Vec<RecordBatch>,
    /// With `select`: the selected rows, as parts (references to new parts
    /// that are selected whole, or new parts of the selected rows), in key order.
    pub selected: Vec<RangePart>,
    /// With `select`: touched cut-key values left with no row (cut-key columns).
    pub deleted: Vec<RecordBatch>,
}

/// Splits a sorted stream at key bounds.
pub struct KeySplitter {
    stream: BatchIter,
    encoder: KeyEncoder,
    head: Option<(RecordBatch, Rows, usize)>,
    /// Rows given back ([`Self::unread`]), read before the stream: the
    /// last is read first.
    front: Vec<RecordBatch>,
}

impl KeySplitter {
    pub fn new(stream: BatchIter, encoder: KeyEncoder) -> Self {
        Self {
            stream,
            encoder,
            head: None,
            front: Vec::new(),
        }
    }

    /// Give back `batches` (the rows just taken, in order): they are read
    /// again next.
    pub fn unread(&mut self, batches: Vec<RecordBatch>) {
        if let Some((b, _, pos)) = self.head.take() {
            if pos < b.num_rows() {
                self.front.push(b.slice(pos, b.num_rows() - pos));
            }
        }
        self.front
            .extend(batches.into_iter().rev().filter(|b| b.num_rows() > 0));
    }

    /// Make sure a batch with unread rows is at the head; `false` at the end.
    fn fill(&mut self) -> Result<bool> {
        while self.head.is_none() {
            let next = match self.front.pop() {
                Some(b) => Some(Ok(b)),
                None => self.stream.next(),
            };
            let Some(b) = next else {
                return Ok(false);
            };
            let b = b?;
            if b.num_rows() > 0 {
                let rows = self.encoder.rows(&b)?;
                self.head = Some((b, rows, 0));
            }
        }
        Ok(true)
    }

    /// The next `n` rows at most.
    pub fn take_rows(&mut self, n: usize) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let mut left = n;
        while left > 0 && self.fill()? {
            let Some((batch, _, pos)) = self.head.as_mut() else {
                break;
            };
            let take = left.min(batch.num_rows() - *pos);
            out.push(batch.slice(*pos, take));
            *pos += take;
            left -= take;
            if *pos == batch.num_rows() {
                self.head = None;
            }
        }
        Ok(out)
    }

    /// The next rows whose key is `<= bound` (all the rest if `None`).
    pub fn take_until(&mut self, bound: Option<Row<'_>>) -> Result<Vec<RecordBatch>> {
        Ok(self.take_until_limit(bound, usize::MAX)?.0)
    }

    /// [`Self::take_until`], but at most `limit` rows, and whether that
    /// was all of them (`false`: rows `<= bound` may remain).
    pub fn take_until_limit(
        &mut self,
        bound: Option<Row<'_>>,
        limit: usize,
    ) -> Result<(Vec<RecordBatch>, bool)> {
        let mut out = Vec::new();
        let mut left = limit;
        loop {
            if left == 0 {
                let more = self.fill()?
                    && match (bound, self.head.as_ref()) {
                        (None, _) => true,
                        (Some(bound), Some((_, rows, pos))) => rows.row(*pos) <= bound,
                        (Some(_), None) => false,
                    };
                return Ok((out, !more));
            }
            if !self.fill()? {
                return Ok((out, true));
            }
            let Some((batch, rows, pos)) = self.head.as_ref() else {
                return Ok((out, true));
            };
            let len = batch.num_rows();
            // The first row past the bound (rows are sorted by the cut key).
            let past = match bound {
                None => len,
                Some(bound) => {
                    let (mut lo, mut hi) = (*pos, len);
                    while lo < hi {
                        let mid = lo + (hi - lo) / 2;
                        if rows.row(mid) <= bound {
                            lo = mid + 1;
                        } else {
                            hi = mid;
                        }
                    }
                    lo
                }
            };
            let end = past.min(pos.saturating_add(left));
            if end > *pos {
                out.push(batch.slice(*pos, end - *pos));
                left -= end - *pos;
            }
            if end < len {
                if let Some(h) = self.head.as_mut() {
                    h.2 = end;
                }
                if end == past {
                    return Ok((out, true));
                }
                continue;
            }
            self.head = None;
        }
    }
}

/// A poisoned lock on a rewrite's shared state, as the typed error.
fn poisoned<T>(_: T) -> Error {
    Error::Task("a rewrite's shared state was poisoned".into())
}

/// Whether each row's cut-key value satisfies `test`, asked once per run
/// of equal values (rows are sorted by the cut key).
fn per_value(rows: &Rows, mut test: impl FnMut(&[u8]) -> bool) -> Vec<bool> {
    let mut out = Vec::with_capacity(rows.num_rows());
    let mut prev: Option<bool> = None;
    for i in 0..rows.num_rows() {
        let same = i > 0 && rows.row(i - 1) == rows.row(i);
        let v = match (same, prev) {
            (true, Some(v)) => v,
            _ => test(rows.row(i).as_ref()),
        };
        prev = Some(v);
        out.push(v);
    }
    out
}

/// Limits a key filter to the rows whose value of another key (sorted
/// rows' cut key, read by the encoder) is in the set.
pub type Within<'a> = Option<(&'a KeyEncoder, &'a KeySet)>;

/// Which rows of `b` have their `encoder` key in `set`, and (if `within` is
/// given) their cut-key value in its set.
fn key_mask(
    b: &RecordBatch,
    encoder: &KeyEncoder,
    set: &KeySet,
    within: Within,
) -> Result<BooleanArray> {
    let inside = match within {
        Some((cut, values)) => Some(per_value(&cut.rows(b)?, |v| values.contains(v))),
        None => None,
    };
    let rows = encoder.rows(b)?;
    Ok((0..b.num_rows())
        .map(|i| {
            let within = inside.as_ref().is_none_or(|v| v[i]);
            Some(within && set.contains(rows.row(i).as_ref()))
        })
        .collect())
}

/// `b` split by `mask`: the rows it marks, then the others.
fn split_by_mask(b: &RecordBatch, mask: &BooleanArray) -> Result<(RecordBatch, RecordBatch)> {
    let inverse = arrow_arith::boolean::not(mask)?;
    Ok((
        arrow_select::filter::filter_record_batch(b, mask)?,
        arrow_select::filter::filter_record_batch(b, &inverse)?,
    ))
}

/// Rows of `batches` whose `key` columns are (`keep == true`) or are not in
/// `set`, then the others; with `within`, only rows in its values count as
/// in `set`.
pub fn filter_by_keys(
    batches: &[RecordBatch],
    encoder: &KeyEncoder,
    set: &KeySet,
    keep: bool,
    within: Within,
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    let (mut hit, mut miss) = (Vec::new(), Vec::new());
    for b in batches {
        let mask = key_mask(b, encoder, set, within)?;
        let (yes, no) = match mask.true_count() {
            0 => (b.slice(0, 0), b.clone()),
            n if n == b.num_rows() => (b.clone(), b.slice(0, 0)),
            _ => split_by_mask(b, &mask)?,
        };
        let (a, c) = if keep { (yes, no) } else { (no, yes) };
        if a.num_rows() > 0 {
            hit.push(a);
        }
        if c.num_rows() > 0 {
            miss.push(c);
        }
    }
    Ok((hit, miss))
}

/// The distinct key rows of `batches`.
pub fn key_set(batches: &[RecordBatch], encoder: &KeyEncoder) -> Result<KeySet> {
    let mut set = key_set_new();
    for b in batches {
        let rows = encoder.rows(b)?;
        for i in 0..b.num_rows() {
            set.insert(Box::from(rows.row(i).as_ref()));
        }
    }
    Ok(set)
}

impl PartSet {
    /// `root/<name>`.
    pub fn object(&self, part: &RangePart) -> String {
        format!("{}/{}", self.root.trim_end_matches('/'), part.name)
    }

    fn encoder(&self, key: &[String]) -> Result<KeyEncoder> {
        KeyEncoder::new(&self.schema, key)
    }

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

    /// GET a part's file and its patches' files (see [`super::patch`]),
    /// concurrently, each checked as [`Self::fetch`] checks.
    async fn fetch_part(&self, part: &RangePart) -> Result<Fetched> {
        let files: Vec<&RangePart> = part.patches.iter().flat_map(|p| p.files()).collect();
        let (base, files) = futures::future::try_join(
            self.fetch(part),
            futures::future::try_join_all(files.into_iter().map(|f| self.fetch(f))),
        )
        .await?;
        Ok(Fetched { base, files })
    }

    /// Decode one fetched file: its schema is checked against `expected`
    /// before any data is decoded, and its row count against `rows`.
    fn decode_file(
        &self,
        part: &RangePart,
        data: Bytes,
        columns: Option<&[String]>,
        expected: &SchemaRef,
        rows: u64,
    ) -> Result<Vec<RecordBatch>> {
        let path = self.object(part);
        let opts = ReadOptions {
            columns: columns.map(|c| c.to_vec()),
            expected: Some(expected.clone()),
            ..Default::default()
        };
        let d = decode_bytes(data, &path, &opts)?;
        if d.file_rows != rows {
            return Err(Error::PartCorrupted {
                path,
                reason: format!("{} rows, the manifest records {rows}", d.file_rows),
            });
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
        let Fetched { base, files } = fetched;
        let base = self.decode_file(part, base, columns, &self.schema, part.file_rows())?;
        self.layer(part, base, files, columns, true)
    }

    /// A part's decoded file rows (`columns` projected; all of them if
    /// `whole`, else the runs of some values: no row count to check) under
    /// its fetched patch files.
    fn layer(
        &self,
        part: &RangePart,
        base: Vec<RecordBatch>,
        files: Vec<Bytes>,
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
        let mut files = files.into_iter();
        let mut next = |f: &RangePart, rows: bool| -> Result<Vec<RecordBatch>> {
            let data = files
                .next()
                .ok_or_else(|| Error::Task("a patch file was not fetched".into()))?;
            match rows {
                true => self.decode_file(f, data, columns, &self.schema, f.rows),
                false => self.decode_file(f, data, None, &cut_schema, f.rows),
            }
        };
        let mut patches = Vec::with_capacity(part.patches.len());
        for p in &part.patches {
            let rows = match &p.rows {
                Some(f) => next(f, true)?,
                None => Vec::new(),
            };
            let deleted = match &p.deleted {
                Some(f) => next(f, false)?,
                None => Vec::new(),
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
    /// patches applied (see [`super::patch`]).
    fn decode(
        &self,
        part: &RangePart,
        fetched: Fetched,
        columns: Option<&[String]>,
    ) -> Result<Vec<RecordBatch>> {
        if part.patches.is_empty() {
            return self.decode_file(part, fetched.base, columns, &self.schema, part.rows);
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
    fn read_whole(&self, part: &RangePart) -> Result<Layered> {
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
    /// one decoded ahead. Memory: a few parts, whatever their number.
    pub fn scan(
        self: &Arc<Self>,
        parts: Vec<RangePart>,
        columns: Option<Vec<String>>,
    ) -> BatchIter {
        let this = self.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<RecordBatch>>>(1);
        let ahead = scan_ahead(&parts);
        let rt = match crate::runtime::get() {
            Ok(rt) => rt,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        rt.spawn(async move {
            let this2 = this.clone();
            let mut fetches = futures::stream::iter(parts.into_iter().map(move |p| {
                let this = this2.clone();
                async move { this.fetch_part(&p).await.map(|d| (p, d)) }
            }))
            .buffered(ahead);
            while let Some(got) = fetches.next().await {
                let cols = columns.clone();
                let this = this.clone();
                let decoded =
                    match got {
                        Ok((p, data)) => tokio::task::spawn_blocking(move || {
                            this.decode(&p, data, cols.as_deref())
                        })
                        .await
                        .unwrap_or_else(|e| Err(Error::Task(format!("a part decode failed: {e}")))),
                        Err(e) => Err(e),
                    };
                let failed = decoded.is_err();
                let sent = tx.clone();
                let gone = tokio::task::spawn_blocking(move || sent.send(decoded).is_err())
                    .await
                    .unwrap_or(true);
                if gone || failed {
                    return;
                }
            }
        });
        Box::new(rx.into_iter().flat_map(|r| match r {
            Ok(batches) => batches.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        }))
    }

    /// Fetch and decode several parts at once (the GETs concurrently).
    fn read_many(
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
        let hit = super::parts::touched_parts(parts, &self.schema, &self.cut_key, keys)?;
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
    fn seek_parts(
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
                let files: Vec<&RangePart> = part.patches.iter().flat_map(|p| p.files()).collect();
                let (base, files) = futures::future::try_join(
                    crate::parquet::seek::read_pages_holding(
                        &self.store,
                        &path,
                        part.size_bytes,
                        opts,
                        column,
                        values,
                    ),
                    futures::future::try_join_all(files.into_iter().map(|f| self.fetch(f))),
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
                Ok((part, base, files))
            }
        };
        let read: Vec<_> = crate::runtime::block_on(
            futures::stream::iter(parts.into_iter().map(seek))
                .buffered(FETCH_AHEAD)
                .try_collect::<Vec<_>>(),
        )??;
        read.into_iter()
            .map(|(part, base, files)| match base {
                Base::Pages(pages) => self.layer(&part, pages, files, Some(columns), false),
                Base::Whole(whole) => {
                    let rows = part.file_rows();
                    let base = self.decode_file(&part, whole, Some(columns), &self.schema, rows)?;
                    self.layer(&part, base, files, Some(columns), true)
                }
            })
            .collect()
    }

    /// Write a sorted stream as new parts named `<prefix>-NNNNN.parquet`.
    pub(super) fn write(
        &self,
        prefix: &str,
        stream: BatchIter,
        created: &mut Vec<String>,
    ) -> Result<Vec<RangePart>> {
        let spec = PartSpec {
            location: &self.root,
            prefix,
            target_rows: self.target_rows,
            opts: &self.opts,
        };
        let parts = write_range_parts(
            self.store.clone(),
            &spec,
            self.schema.clone(),
            &self.cut_key,
            stream,
        )?;
        created.extend(parts.iter().map(|p| self.object(p)));
        Ok(parts)
    }

    /// Apply `change` to `parts` (see [`Change`]); only the parts whose key
    /// ranges the touched or added keys fall in are read and rewritten. A
    /// failure removes what this call wrote.
    pub fn rewrite(&self, parts: &[RangePart], change: Change) -> Result<PartsRewritten> {
        let mut out = PartsRewritten::default();
        match self.rewrite_into(parts, change, &mut out) {
            Ok(()) => Ok(out),
            Err(e) => {
                let _ = crate::runtime::block_on(self.store.delete_many(&out.created));
                Err(e)
            }
        }
    }

    fn rewrite_into(
        &self,
        parts: &[RangePart],
        change: Change,
        out: &mut PartsRewritten,
    ) -> Result<()> {
        let cut = self.encoder(&self.cut_key)?;
        let Change {
            remove,
            touch,
            adds,
            collect_removed,
            select,
            prefix,
            derived,
        } = change;
        // Touch keys come as batches of the cut key's columns only.
        let mut touch_split =
            KeySplitter::new(touch, KeyEncoder::new(&*self.cut_schema()?, &self.cut_key)?);
        if parts.is_empty() {
            // Nothing stored: the adds are the new set, every row selected;
            // touched keys that no added row holds are deleted. Memory: the
            // touched keys only.
            let touched = touch_split.take_until(None)?;
            let tenc = KeyEncoder::new(&*self.cut_schema()?, &self.cut_key)?;
            let wanted = key_set(&touched, &tenc)?;
            let seen = Arc::new(std::sync::Mutex::new(key_set_new()));
            let stream: BatchIter = if select && !wanted.is_empty() {
                let tap_enc = self.encoder(&self.cut_key)?;
                let seen = seen.clone();
                Box::new(adds.map(move |b| {
                    let b = b?;
                    let rows = tap_enc.rows(&b)?;
                    let mut s = seen.lock().map_err(poisoned)?;
                    for i in 0..b.num_rows() {
                        let r = rows.row(i);
                        if wanted.contains(r.as_ref()) {
                            s.insert(Box::from(r.as_ref()));
                        }
                    }
                    Ok(b)
                }))
            } else {
                adds
            };
            out.parts = self.write(&format!("{prefix}-s00000"), stream, &mut out.created)?;
            if select {
                out.selected = out.parts.clone();
                let seen = seen.lock().map_err(poisoned)?;
                out.deleted = missing(&touched, &tenc, &seen)?;
            }
            return Ok(());
        }
        let add_split = Arc::new(std::sync::Mutex::new(KeySplitter::new(
            adds,
            self.encoder(&self.cut_key)?,
        )));
        let bounds = last_key_rows(parts, &self.schema, &self.cut_key)?;
        let remove = Arc::new(remove);
        let remove_enc = match &*remove {
            Remove::Keys { key, .. } => Some(self.encoder(key)?),
            Remove::Nothing => None,
        };
        let tenc = KeyEncoder::new(&*self.cut_schema()?, &self.cut_key)?;
        // Each part's range of the derived leading columns.
        let lead_bounds = match &derived {
            Some(d) => {
                let lead = self
                    .cut_key
                    .get(..d.m)
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!("a prefix of {} cut-key columns", d.m))
                    })?;
                Some(super::parts::key_bounds(parts, &self.schema, lead)?)
            }
            None => None,
        };
        // Selected rows not yet written (flushed before a reference).
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut written_selections = 0usize;
        let mut flush = |pending: &mut Vec<RecordBatch>, out: &mut PartsRewritten| -> Result<()> {
            if pending.is_empty() {
                return Ok(());
            }
            let stream: BatchIter = Box::new(std::mem::take(pending).into_iter().map(Ok));
            let name = format!("{prefix}-u{written_selections:05}");
            written_selections += 1;
            let made = self.write(&name, stream, &mut out.created)?;
            out.selected.extend(made);
            Ok(())
        };
        // A key spanning parts: its parts form one unit, rewritten together.
        let units = super::parts::units(parts, &self.schema, &self.cut_key)?;
        let last = units.len() - 1;
        let has = |v: &[RecordBatch]| v.iter().any(|b| b.num_rows() > 0);
        let lock = || add_split.lock().map_err(poisoned);
        // The derived leading values within the range of parts `j..j + n`.
        let leads_in = |j: usize, n: usize| -> std::ops::Range<usize> {
            match (&derived, &lead_bounds) {
                (Some(d), Some((lo, hi))) => {
                    let (lo, hi) = (lo.row(j).data(), hi.row(j + n - 1).data());
                    let a = d.prefixes.partition_point(|p| **p < *lo);
                    let b = d.prefixes.partition_point(|p| **p <= *hi);
                    a..b.max(a)
                }
                _ => 0..0,
            }
        };
        let no_leads: &[Box<[u8]>] = &[];
        let leads = |r: std::ops::Range<usize>| match &derived {
            Some(d) => &d.prefixes[r],
            None => no_leads,
        };
        let mut reader = Reader::new(self);
        // The next unit's touched and added rows, taken early to read it ahead.
        let mut taken: Option<(Vec<RecordBatch>, Vec<RecordBatch>)> = None;
        for (u, range) in units.iter().enumerate() {
            let j = range.start;
            let unit = &parts[range.clone()];
            let bound = (u < last).then(|| bounds.row(j + unit.len() - 1));
            let (touch_j, adds_early) = match taken.take() {
                Some((touch, adds)) => (touch, Some(adds)),
                None => (touch_split.take_until(bound)?, None),
            };
            let lead = leads(leads_in(j, unit.len()));
            if unit.len() > 1 && lead.is_empty() {
                // A key spanning parts: rewritten as a stream, whatever its size.
                let (first, _) = lock()?.take_until_limit(bound, 1)?;
                let any_add = has(&first);
                lock()?.unread(first);
                if !any_add && !has(&touch_j) {
                    out.parts.extend(unit.iter().cloned());
                    continue;
                }
                let change = streamed::UnitChange {
                    unit,
                    touch: &touch_j,
                    adds: add_split.clone(),
                    bound: bound.map(|r| r.owned()),
                    remove: remove.clone(),
                    collect_removed,
                    select,
                    name: format!("{prefix}-s{j:05}"),
                };
                self.rewrite_unit_streamed(change, &mut pending, &mut flush, out)?;
                continue;
            }
            let adds_j = match adds_early {
                Some(adds) => adds,
                None => lock()?.take_until(bound)?,
            };
            if !has(&adds_j) && !has(&touch_j) && lead.is_empty() {
                out.parts.extend(unit.iter().cloned());
                continue;
            }
            // The unit's rows (a key spanning parts: all of its parts, in
            // memory for now), patches applied; the cut-key values this
            // change is about, sorted, and their rows.
            // A small change to a large part reads only the pages holding
            // its values first (see [`Self::seekable`]); if it must then be
            // rewritten in place, the part is read whole.
            let mut seek = match unit {
                [one] => self.seekable(one, &adds_j, &touch_j, lead.len()),
                _ => false,
            };
            // If the next unit is one part this change reads whole, it is
            // read on the reader's thread while this one is worked on.
            if let Some(next) = units.get(u + 1).filter(|r| r.len() == 1) {
                let k = next.start;
                let next_bound = (u + 1 < last).then(|| bounds.row(k));
                let touch = touch_split.take_until(next_bound)?;
                let adds = lock()?.take_until(next_bound)?;
                let n_leads = leads_in(k, 1).len();
                if (has(&adds) || has(&touch) || n_leads > 0)
                    && !self.seekable(&parts[k], &adds, &touch, n_leads)
                {
                    reader.ask(k, &parts[k])?;
                }
                taken = Some((touch, adds));
            }
            let touch_given = touch_j;
            loop {
                let old = match (unit, seek) {
                    ([one], true) => {
                        let values = self.seek_values(&touch_given, &adds_j, derived.as_ref())?;
                        self.seek_parts(vec![one.clone()], &values, &self.schema_names())?
                            .remove(0)
                    }
                    ([one], false) => reader.read(j, one)?,
                    _ => {
                        let rows = self.read_many(unit, None)?.into_iter().flatten().collect();
                        Layered::new(&self.schema, &cut, &tenc, rows, Vec::new())?
                    }
                };
                // Values beginning with a derived leading value that hold a
                // removed row are touched too.
                let mut touch_j = touch_given.clone();
                if !lead.is_empty() {
                    let extra = self.derived_touches(&old, lead, &remove, remove_enc.as_ref())?;
                    if !extra.is_empty() {
                        let lists: Vec<BatchIter> = vec![
                            Box::new(std::mem::take(&mut touch_j).into_iter().map(Ok)),
                            Box::new(extra.into_iter().map(Ok)),
                        ];
                        touch_j =
                            merge_sorted(self.cut_schema()?, &self.cut_key, lists, BATCH_ROWS)?
                                .collect::<Result<_>>()?;
                    }
                    if !has(&adds_j) && !has(&touch_j) {
                        out.parts.extend(unit.iter().cloned());
                        break;
                    }
                }
                let wanted = sorted_keys(&[(&touch_j, &tenc), (&adds_j, &cut)])?;
                let (old_w, n_w) = old.take(&wanted)?;
                // Rows are removed in touched values only (see
                // [`Change::touch`]), as in a streamed unit.
                let (kept, removed) = match (&*remove, &remove_enc) {
                    (Remove::Keys { set, .. }, Some(enc)) => {
                        let touched = key_set(&touch_j, &tenc)?;
                        filter_by_keys(&old_w, enc, set, false, Some((&cut, &touched)))?
                    }
                    _ => (old_w, Vec::new()),
                };
                // Every row, after the change, of each value it is about.
                let picked: Vec<RecordBatch> = merge_sorted(
                    self.schema.clone(),
                    &self.sort_key,
                    vec![
                        Box::new(kept.into_iter().map(Ok)),
                        Box::new(adds_j.clone().into_iter().map(Ok)),
                    ],
                    BATCH_ROWS,
                )?
                .collect::<Result<_>>()?;
                // The touched values left with no row.
                let gone = missing(&touch_j, &tenc, &key_set(&picked, &cut)?)?;
                let count = |v: &[RecordBatch]| v.iter().map(|b| b.num_rows() as u64).sum::<u64>();
                // Rows the unit keeps untouched (a seek read only some).
                let stored = match seek {
                    true => unit[0].rows as usize,
                    false => old.len(),
                };
                let rest = stored
                    .checked_sub(n_w)
                    .ok_or_else(|| Error::PartCorrupted {
                        path: self.object(&unit[0]),
                        reason: "its rows are not in key order".into(),
                    })? as u64;
                let live = rest + count(&picked);
                if may_patch(unit, live, count(&picked) + count(&gone)) {
                    // The part's new range: its rows' extremes (after a
                    // seek, its recorded range, which may then be wider than
                    // its rows), and the picked rows'.
                    let mut ends = match seek {
                        true => self.recorded_ends(&unit[0])?,
                        false => old.ends_without(&wanted),
                    };
                    ends.extend(
                        picked
                            .iter()
                            .find(|b| b.num_rows() > 0)
                            .map(|b| b.slice(0, 1)),
                    );
                    ends.extend(
                        picked
                            .iter()
                            .rev()
                            .find(|b| b.num_rows() > 0)
                            .map(|b| b.slice(b.num_rows() - 1, 1)),
                    );
                    let (first, last) = extremes(&cut, &ends)?
                        .ok_or_else(|| Error::Task("a patched part has no row".into()))?;
                    let name = format!("{prefix}-p{j:05}");
                    let part =
                        self.patched(&unit[0], live, (first, last), picked, &gone, &name, out)?;
                    if collect_removed {
                        out.removed.extend(removed);
                    }
                    if select {
                        flush(&mut pending, out)?;
                        if let Some(rows) = part.patches.last().and_then(|p| p.rows.clone()) {
                            out.selected.push(rows);
                        }
                        out.deleted.extend(gone);
                    }
                    out.parts.push(part);
                    break;
                }
                if seek {
                    // Rewritten in place: read it whole.
                    seek = false;
                    continue;
                }
                if collect_removed {
                    out.removed.extend(removed);
                }
                // Rewritten in place: each value's rows replaced by its new ones.
                let only_picked = rest == 0;
                let new = Sorted::new(self.schema.clone(), picked.clone(), &cut)?;
                let merged: BatchIter = Box::new(old.replaced(&wanted, &new)?.into_iter().map(Ok));
                drop(old);
                let new_parts =
                    self.write(&format!("{prefix}-s{j:05}"), merged, &mut out.created)?;
                out.parts.extend(new_parts.iter().cloned());
                if select {
                    if only_picked && !picked.is_empty() {
                        flush(&mut pending, out)?;
                        out.selected.extend(new_parts);
                    } else {
                        pending.extend(picked);
                    }
                    out.deleted.extend(gone);
                }
                break;
            }
        }
        flush(&mut pending, out)?;
        Ok(())
    }

    /// The layout's column names, in order.
    fn schema_names(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// Whether a change to `part` (`adds` rows, `touch` values, `lead`
    /// derived leading values) reads only the pages holding its values
    /// first: a part large enough for a seek to pay ([`SEEK_MIN_ROWS`]),
    /// with room for a patch, and a change small enough to be one (else
    /// the part is rewritten, and read whole) and to leave most pages
    /// unread (each value's page holds up to [`PAGE_ROWS`] rows).
    fn seekable(
        &self,
        part: &RangePart,
        adds: &[RecordBatch],
        touch: &[RecordBatch],
        lead: usize,
    ) -> bool {
        let rows = |v: &[RecordBatch]| v.iter().map(|b| b.num_rows() as u64).sum::<u64>();
        let values = rows(adds) + rows(touch) + lead as u64;
        part.file_rows() >= SEEK_MIN_ROWS
            && part.patches.len() + 1 < super::patch::patch_limit(part)
            && rows(adds).saturating_mul(super::patch::PATCH_SHARE) <= part.rows
            && values.saturating_mul(2 * PAGE_ROWS) <= part.file_rows()
    }

    /// The values of the cut key's first column a unit's change is about
    /// (touched, added, derived leading values), as a one-column batch.
    fn seek_values(
        &self,
        touch: &[RecordBatch],
        adds: &[RecordBatch],
        derived: Option<&Derived>,
    ) -> Result<Vec<RecordBatch>> {
        let first = &self.cut_key[0];
        let mut columns: Vec<arrow_array::ArrayRef> = Vec::new();
        for b in touch.iter().chain(adds) {
            let i = b.schema().index_of(first)?;
            columns.push(b.column(i).clone());
        }
        columns.extend(derived.map(|d| d.first.clone()));
        let field = self.schema.field_with_name(first)?.clone();
        columns
            .into_iter()
            .filter(|c| !c.is_empty())
            .map(|c| {
                let schema = Arc::new(arrow_schema::Schema::new(vec![field
                    .clone()
                    .with_data_type(c.data_type().clone())]));
                Ok(RecordBatch::try_new(schema, vec![c])?)
            })
            .collect()
    }

    /// A part's recorded first and last keys, as one-row batches of the
    /// cut key's columns.
    fn recorded_ends(&self, part: &RangePart) -> Result<Vec<RecordBatch>> {
        let schema = self.cut_schema()?;
        let fields: Vec<&arrow_schema::Field> =
            schema.fields().iter().map(|f| f.as_ref()).collect();
        let keys = [part.first_key.as_slice(), part.last_key.as_slice()];
        let columns = super::parts::json_key_columns(&keys, &fields)?;
        let both = RecordBatch::try_new(schema, columns)?;
        Ok(vec![both.slice(0, 1), both.slice(1, 1)])
    }

    /// The cut-key values of `old` beginning with one of `lead` (see
    /// [`Derived`]) that hold a row `remove` removes: the cut key's
    /// columns, sorted (repeats allowed).
    fn derived_touches(
        &self,
        old: &Layered,
        lead: &[Box<[u8]>],
        remove: &Remove,
        enc: Option<&KeyEncoder>,
    ) -> Result<Vec<RecordBatch>> {
        let (Remove::Keys { set, .. }, Some(enc)) = (remove, enc) else {
            return Ok(Vec::new());
        };
        let (rows, _) = old.take(&old.keys_with_prefix(lead))?;
        let (gone, _) = filter_by_keys(&rows, enc, set, true, None)?;
        let schema = self.cut_schema()?;
        let idx = crate::parquet::decode::column_indices(&self.schema, &self.cut_key)?;
        gone.iter()
            .map(|b| {
                Ok(RecordBatch::try_new(
                    schema.clone(),
                    b.project(&idx)?.columns().to_vec(),
                )?)
            })
            .collect()
    }

    /// Write one file of `batches` (sorted by `key`), however many rows.
    fn write_one(
        &self,
        prefix: &str,
        schema: SchemaRef,
        key: &[String],
        batches: Vec<RecordBatch>,
        created: &mut Vec<String>,
    ) -> Result<RangePart> {
        let spec = PartSpec {
            location: &self.root,
            prefix,
            target_rows: usize::MAX,
            opts: &self.opts,
        };
        let stream: BatchIter = Box::new(batches.into_iter().map(Ok));
        let mut parts = write_range_parts(self.store.clone(), &spec, schema, key, stream)?;
        created.extend(parts.iter().map(|p| self.object(p)));
        match (parts.pop(), parts.is_empty()) {
            (Some(p), true) => Ok(p),
            _ => Err(Error::Task(format!("{prefix}: expected one file"))),
        }
    }

    /// `part` with a new patch (see [`super::patch`]): `picked`, every row
    /// after the change of each value it is about, and `gone`, the values
    /// it leaves with no row; `live` rows after it, `first` and `last` its
    /// lowest and highest row (its new key range). The patch's files are
    /// named `prefix`-*.
    #[allow(clippy::too_many_arguments)]
    fn patched(
        &self,
        part: &RangePart,
        live: u64,
        (first, last): (RecordBatch, RecordBatch),
        picked: Vec<RecordBatch>,
        gone: &[RecordBatch],
        prefix: &str,
        out: &mut PartsRewritten,
    ) -> Result<RangePart> {
        let rows = if picked.iter().any(|b| b.num_rows() > 0) {
            let key = self.cut_key.clone();
            Some(self.write_one(prefix, self.schema.clone(), &key, picked, &mut out.created)?)
        } else {
            None
        };
        let deleted = if gone.iter().any(|b| b.num_rows() > 0) {
            let name = format!("{prefix}d");
            Some(self.write_one(
                &name,
                self.cut_schema()?,
                &self.cut_key,
                gone.to_vec(),
                &mut out.created,
            )?)
        } else {
            None
        };
        let mut p = part.clone();
        p.base_rows = Some(part.file_rows());
        p.rows = live;
        p.first_key = super::parts::key_values(&first, &self.cut_key, 0);
        p.last_key = super::parts::key_values(&last, &self.cut_key, 0);
        p.patches.push(Patch { rows, deleted });
        Ok(p)
    }

    /// The schema of the cut key's columns.
    pub fn cut_schema(&self) -> Result<SchemaRef> {
        let idx = crate::parquet::decode::column_indices(&self.schema, &self.cut_key)?;
        Ok(Arc::new(self.schema.project(&idx)?))
    }
}

/// The values of `lead` (batches of a key's leading columns, any names)
/// as row-format bytes, sorted, distinct: what a key beginning with one of
/// them begins with.
pub fn lead_prefixes(lead: &[RecordBatch]) -> Result<Vec<Box<[u8]>>> {
    let mut prefixes: Vec<Box<[u8]>> = Vec::new();
    for b in lead {
        let names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let rows = KeyEncoder::new(&b.schema(), &names)?.rows(b)?;
        prefixes.extend((0..b.num_rows()).map(|i| Box::from(rows.row(i).data())));
    }
    prefixes.sort_unstable();
    prefixes.dedup();
    Ok(prefixes)
}

/// The distinct keys of several batch lists (each sorted by its key,
/// with the encoder of its key columns: same key types), as row-format
/// bytes, sorted: one linear merge. `Task` if a list is out of order.
fn sorted_keys(lists: &[(&[RecordBatch], &KeyEncoder)]) -> Result<Vec<Box<[u8]>>> {
    let mut out: Vec<Box<[u8]>> = Vec::new();
    for (batches, enc) in lists {
        let mut mine: Vec<Box<[u8]>> = Vec::new();
        for b in batches.iter() {
            let rows = enc.rows(b)?;
            for i in 0..b.num_rows() {
                let r = rows.row(i).data();
                match mine.last() {
                    Some(l) if **l == *r => {}
                    Some(l) if **l > *r => return Err(Error::Task("keys out of order".into())),
                    _ => mine.push(Box::from(r)),
                }
            }
        }
        out = merge_newest(std::mem::take(&mut out), mine, |k| k);
    }
    Ok(out)
}

/// The distinct rows of `keys` whose key is not in `present`, in order.
pub(super) fn missing(
    keys: &[RecordBatch],
    encoder: &KeyEncoder,
    present: &KeySet,
) -> Result<Vec<RecordBatch>> {
    let mut seen = key_set_new();
    let mut out = Vec::new();
    for b in keys {
        let rows = encoder.rows(b)?;
        let mask: BooleanArray = (0..b.num_rows())
            .map(|i| {
                let r = rows.row(i);
                Some(!present.contains(r.as_ref()) && seen.insert(Box::from(r.as_ref())))
            })
            .collect();
        let kept = arrow_select::filter::filter_record_batch(b, &mask)?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}
