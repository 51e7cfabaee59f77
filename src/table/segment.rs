//! Manifest segments: the immutable pieces a version's file list is cut into.
//!
//! A version's root manifest (`manifest/vNNNNNNNN.json`) lists its data
//! files and tombstones through [`SegmentRef`]s. Each names an immutable
//! object `segment/<token>.json` holding up to [`SEGMENT_FILES`] data files
//! and the tombstone references of those files (a tombstone that deletes
//! rows of files in several segments is listed in each, naming only that
//! segment's files). The reference carries the SHA-256 of the object, its
//! counts, and the column statistics merged over its files (the primary
//! key's range among them), so that:
//! - a commit writes the root plus the segments it changes and reuses the
//!   references of the others (an append of one file writes the root and
//!   one small segment, whatever the table's size);
//! - planning a selective scan GETs only the segments whose statistics can
//!   match;
//! - a process keeps the segments it read (they never change), so the next
//!   operation on the table reads only its root.
//!
//! This is the shape of Iceberg's manifest lists and Delta's v2 checkpoint
//! sidecars. Segments are written once under unique names; vacuum removes
//! those no retained version references.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::snapshot::{
    check_file_list, is_sha256, name_schema, resolved, ColumnStats, DataFile, TableManifest,
    TombstoneRef, View,
};
use crate::error::{Error, Result};
use crate::parquet::stats;
pub use crate::spec::table::{Segment, SegmentRef};
use crate::store::cache::ObjectCache;
use crate::store::StoreHandle;

/// The `format` of a segment object.
pub const FORMAT: &str = "pds-table-segment/1";

/// The folder of segment objects, under the table key.
pub const FOLDER: &str = "segment";

/// Data files per segment at most when files are packed into segments.
pub const SEGMENT_FILES: usize = 1000;

/// An append adds its files to the last segment while that holds fewer
/// than this many files (so that it rewrites at most this many entries);
/// otherwise it starts a new segment. Compaction merges such small
/// segments into full ones.
pub const TAIL_FILES: u64 = 32;

/// A segment holding fewer files than this is merged with its neighbours
/// by compaction.
pub const SMALL_SEGMENT: u64 = (SEGMENT_FILES / 4) as u64;

/// Concurrent segment GETs or PUTs.
const IO_CONCURRENCY: usize = 16;

/// The segments a compaction works on: those it chose (by path), and every
/// one written since it chose them (not among those the table had then),
/// which may hold its files anew (a concurrent delete rewrote their
/// segment) or files of concurrent commits.
#[derive(Debug, Clone, Default)]
pub struct SegmentChoice {
    /// The segments chosen.
    pub named: HashSet<String>,
    /// Every segment of the version they were chosen from.
    pub known: HashSet<String>,
}

impl SegmentChoice {
    /// Whether the segment `r` of some later version is to be loaded.
    pub fn wants(&self, r: &SegmentRef) -> bool {
        self.named.contains(&r.path) || !self.known.contains(&r.path)
    }
}

/// The statistics a segment reference records for `files`, all written with
/// `schema` (the version's own for `None`).
fn merged_columns(
    files: &[DataFile],
    schema: &arrow_schema::Schema,
) -> BTreeMap<String, ColumnStats> {
    let mut out = BTreeMap::new();
    if files.is_empty() {
        return out;
    }
    for field in schema.fields() {
        let per_file: Vec<Option<&ColumnStats>> =
            files.iter().map(|f| f.columns.get(field.name())).collect();
        let merged = stats::merge(&per_file, field.data_type());
        if merged != ColumnStats::default() {
            out.insert(field.name().clone(), merged);
        }
    }
    out
}

/// The schema id shared by every file of `files`: `Some(id)` (the
/// version's own schema is `None`), or `None` if they differ.
fn shared_schema(files: &[DataFile]) -> Option<Option<String>> {
    let first = files.first().map(|f| f.schema.clone())?;
    files.iter().all(|f| f.schema == first).then_some(first)
}

impl Segment {
    /// Serialise `files` and `tombstones` as a segment object, with the
    /// reference the root records for it (`path` relative to the table).
    pub fn build(
        files: Vec<DataFile>,
        tombstones: Vec<TombstoneRef>,
        path: String,
        manifest: &TableManifest,
        manifest_path: &str,
    ) -> Result<(SegmentRef, Arc<Segment>, Bytes)> {
        let (schema, columns) = match shared_schema(&files) {
            Some(id) => {
                let s = manifest.schema_named(id.as_deref(), manifest_path)?;
                let columns = merged_columns(&files, &s);
                (id, columns)
            }
            None => (None, BTreeMap::new()),
        };
        let segment = Segment {
            format: FORMAT.into(),
            files,
            tombstones,
        };
        let body = serde_json::to_vec(&segment)
            .map_err(|e| Error::InvalidArgument(format!("segment is not serialisable: {e}")))?;
        let too_many = || Error::Task("a segment would hold more than 2^64 rows or bytes".into());
        let r = SegmentRef {
            path,
            sha256: crate::parquet::encode::sha256_hex(&body),
            file_count: segment.files.len() as u64,
            total_rows: segment
                .files
                .iter()
                .try_fold(0u64, |a, f| a.checked_add(f.total_rows))
                .ok_or_else(too_many)?,
            size_bytes: segment
                .files
                .iter()
                .try_fold(0u64, |a, f| a.checked_add(f.size_bytes))
                .ok_or_else(too_many)?,
            tombstone_count: segment.tombstones.len() as u64,
            schema: if columns.is_empty() { None } else { schema },
            columns,
            files_schema: None,
        };
        // What readers will accept, checked before anything is written: a
        // segment this writer would build wrong is a refused commit, not a
        // table every other process finds corrupted.
        segment.validate(&r, manifest, manifest_path).map_err(|e| {
            Error::Task(format!(
                "pds refused to write a manifest segment that readers would reject (a \
                     bug; nothing was committed): {}",
                crate::error::chain(&e)
            ))
        })?;
        Ok((r, Arc::new(segment), Bytes::from(body)))
    }

    /// Parse and check segment bytes read from `key` against the reference
    /// `r` of `manifest`, its files resolved as `r` says ([`resolved`]).
    /// Every failure is `ManifestCorrupted`.
    pub fn open(
        raw: &[u8],
        key: &str,
        r: &SegmentRef,
        manifest: &TableManifest,
        manifest_path: &str,
    ) -> Result<Segment> {
        let corrupted = |reason: String| Error::ManifestCorrupted {
            path: key.to_string(),
            reason,
        };
        let sum = crate::parquet::encode::sha256_hex(raw);
        if sum != r.sha256 {
            return Err(corrupted(format!(
                "its SHA-256 is {sum}, the manifest records {} (damaged or replaced)",
                r.sha256
            )));
        }
        let mut s: Segment = serde_json::from_slice(raw).map_err(|e| corrupted(e.to_string()))?;
        if let Some(id) = &r.files_schema {
            name_schema(&mut s.files, id);
        }
        s.validate(r, manifest, manifest_path)
            .map_err(|e| match e {
                Error::ManifestCorrupted { reason, .. } => corrupted(reason),
                other => other,
            })?;
        Ok(s)
    }

    /// Check a segment against the reference `r` of `manifest`: its format,
    /// counts, file list and the statistics `r` records. Every failure is
    /// `ManifestCorrupted`.
    pub fn validate(
        &self,
        r: &SegmentRef,
        manifest: &TableManifest,
        manifest_path: &str,
    ) -> Result<()> {
        let s = self;
        let corrupted = |reason: String| Error::ManifestCorrupted {
            path: r.path.clone(),
            reason,
        };
        if s.format != FORMAT {
            return Err(corrupted(format!(
                "format is {:?}, not {FORMAT:?}",
                s.format
            )));
        }
        let rows = s
            .files
            .iter()
            .try_fold(0u64, |acc, f| acc.checked_add(f.total_rows));
        let bytes = s
            .files
            .iter()
            .try_fold(0u64, |acc, f| acc.checked_add(f.size_bytes));
        if s.files.len() as u64 != r.file_count
            || rows != Some(r.total_rows)
            || bytes != Some(r.size_bytes)
            || s.tombstones.len() as u64 != r.tombstone_count
        {
            return Err(corrupted(
                "its files, rows, bytes or tombstones differ from the manifest's counts".into(),
            ));
        }
        let names: HashSet<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
        for t in &s.tombstones {
            if let Some(f) = t.files.iter().find(|f| !names.contains(f.as_str())) {
                return Err(corrupted(format!(
                    "tombstone {:?} names {f:?}, which is not a file of this segment",
                    t.path
                )));
            }
        }
        check_file_list(&s.files, &s.tombstones, &manifest.file_schemas, true)
            .map_err(corrupted)?;
        // The statistics planning pruned other segments by must be the
        // files' own: checked wherever a segment is read.
        let expected = match shared_schema(&s.files) {
            Some(id) if !s.files.is_empty() => {
                let schema = manifest.schema_named(id.as_deref(), manifest_path)?;
                let columns = merged_columns(&s.files, &schema);
                (if columns.is_empty() { None } else { id }, columns)
            }
            _ => (None, BTreeMap::new()),
        };
        if expected != (r.schema.clone(), r.columns.clone()) {
            return Err(corrupted(
                "the statistics the manifest records for it are not its files'".into(),
            ));
        }
        Ok(())
    }
}

impl SegmentRef {
    /// Check what a root manifest says of a segment (its path and checksum).
    pub fn check(&self) -> std::result::Result<(), String> {
        let parts = crate::store::keys::segments(&self.path).map_err(|e| e.to_string())?;
        if parts.len() != 2 || parts[0] != FOLDER {
            return Err(format!("segment {:?} is not under {FOLDER}/", self.path));
        }
        if !is_sha256(&self.sha256) {
            return Err(format!("segment {:?} has no valid sha256", self.path));
        }
        Ok(())
    }
}

/// Segments are immutable: once read and checked they are kept, by
/// SHA-256 and the `files_schema` they were resolved with ([`cache_key`]),
/// for later operations of this process, up to
/// [`CACHE_BYTES`] (as [`weight`] estimates them) and [`CACHE_SEGMENTS`];
/// the oldest go first. Each entry is the body and the reference it was
/// checked against.
type Cached = (Arc<Segment>, SegmentRef);

/// Estimated bytes of segments the cache holds at most: the file lists of
/// about 100,000 files with a few columns' statistics.
pub const CACHE_BYTES: usize = 128 * 1024 * 1024;

/// Segments the cache holds at most.
pub const CACHE_SEGMENTS: usize = 10_000;

fn cache() -> &'static ObjectCache {
    static CACHE: OnceLock<ObjectCache> = OnceLock::new();
    CACHE.get_or_init(|| ObjectCache::with_limits(CACHE_BYTES, CACHE_SEGMENTS))
}

/// The bytes a parsed segment takes in memory, estimated from its strings
/// and statistics.
fn weight(s: &Segment) -> usize {
    use std::mem::size_of;
    fn value(v: &Option<serde_json::Value>) -> usize {
        match v {
            Some(serde_json::Value::String(t)) => t.len(),
            Some(other) => other.to_string().len(),
            None => 0,
        }
    }
    let files: usize = s
        .files
        .iter()
        .map(|f| {
            // A BTreeMap allocates nodes of 11 entries, however few it holds.
            let nodes = f.columns.len().div_ceil(11);
            let columns: usize = nodes * 11 * size_of::<(String, ColumnStats)>()
                + f.columns
                    .iter()
                    .map(|(name, c)| name.len() + value(&c.min) + value(&c.max))
                    .sum::<usize>();
            size_of::<DataFile>()
                + f.path.len()
                + f.sha256.len()
                + f.schema.as_ref().map_or(0, String::len)
                + columns
        })
        .sum();
    let tombstones: usize = s
        .tombstones
        .iter()
        .map(|t| {
            size_of::<TombstoneRef>()
                + t.path.len()
                + t.sha256.len()
                + t.files
                    .iter()
                    .map(|f| size_of::<String>() + f.len())
                    .sum::<usize>()
        })
        .sum();
    size_of::<Segment>() + size_of::<SegmentRef>() + files + tombstones
}

/// The cache key of the body `r` names, as `r` resolves it: the same
/// bytes read through a reference with another `files_schema` (a version
/// before a schema change) are other files.
fn cache_key(r: &SegmentRef) -> String {
    match &r.files_schema {
        None => r.sha256.clone(),
        Some(id) => format!("{}/{id}", r.sha256),
    }
}

fn remember(r: &SegmentRef, s: &Arc<Segment>) {
    let w = weight(s);
    cache().insert(cache_key(r), Arc::new((s.clone(), r.clone())), w);
}

/// Forget the segment `r` names (one this process replaced: an append's
/// rewritten tail), so that the cache holds the segments in use.
fn forget(r: &SegmentRef) {
    cache().remove(&cache_key(r));
}

/// Entries and estimated bytes the segment cache holds (for diagnostics).
pub fn cache_usage() -> (usize, usize) {
    cache().usage()
}

/// The cached body with `r`'s SHA-256, checked against `r` unless it was
/// checked against the same reference (a root of another version or table
/// may say other things of the same bytes: it is held to them as a GET
/// would be).
fn cached(
    r: &SegmentRef,
    manifest: &TableManifest,
    manifest_path: &str,
) -> Result<Option<Arc<Segment>>> {
    if let Some(entry) = cache().get::<Cached>(&cache_key(r)) {
        let (body, checked) = &*entry;
        if checked != r {
            body.validate(r, manifest, manifest_path)?;
        }
        return Ok(Some(body.clone()));
    }
    if r.files_schema.is_none() {
        return Ok(None);
    }
    // The same bytes read before a schema change (a reference without
    // `files_schema`): resolved for this one, checked, and kept for it.
    let Some(entry) = cache().get::<Cached>(&r.sha256) else {
        return Ok(None);
    };
    let body = resolved(entry.0.clone(), r);
    body.validate(r, manifest, manifest_path)?;
    remember(r, &body);
    Ok(Some(body))
}

/// The key of a segment path relative to `table`.
fn key_of(table: &str, path: &str) -> String {
    format!("{}/{}", table.trim_end_matches('/'), path)
}

/// Segment `i` of a manifest: its body from the cache, or its bytes as
/// read (not parsed yet), with its reference.
enum Fetched<'a> {
    Cached(Arc<Segment>),
    Read(&'a SegmentRef, Bytes),
}

/// Take segment `i` of `manifest` (whose key is `path`) from the cache, or
/// GET its bytes.
async fn fetch_raw<'a>(
    store: &StoreHandle,
    table: &str,
    manifest: &'a TableManifest,
    path: &str,
    i: usize,
) -> Result<Fetched<'a>> {
    let r = manifest.segments.get(i).ok_or_else(|| {
        Error::Task(format!(
            "segment {i} of a manifest of {} asked",
            manifest.segments.len()
        ))
    })?;
    if let Some(s) = cached(r, manifest, path)? {
        return Ok(Fetched::Cached(s));
    }
    match store.get(&key_of(table, &r.path)).await {
        Ok(raw) => Ok(Fetched::Read(r, raw)),
        Err(Error::NotFound { .. }) => {
            let what = format!("segment {:?}", r.path);
            Err(super::missing_object(store, table, manifest.version, &what).await)
        }
        Err(e) => Err(e),
    }
}

/// Parse and check what [`fetch_raw`] got against its reference; a body
/// parsed is cached if `keep`.
fn open_fetched(
    got: Fetched<'_>,
    table: &str,
    manifest: &TableManifest,
    path: &str,
    keep: bool,
) -> Result<Arc<Segment>> {
    match got {
        Fetched::Cached(s) => Ok(s),
        Fetched::Read(r, raw) => {
            let s = Arc::new(Segment::open(
                &raw,
                &key_of(table, &r.path),
                r,
                manifest,
                path,
            )?);
            if keep {
                remember(r, &s);
            }
            Ok(s)
        }
    }
}

/// GET (or take from the cache) the segments `wanted` (indices into
/// `manifest.segments`) at once, and record them in the manifest's layout.
pub async fn load(
    store: &StoreHandle,
    table: &str,
    manifest: &mut TableManifest,
    wanted: &[usize],
) -> Result<()> {
    use futures::stream::{StreamExt, TryStreamExt};
    let path = super::manifest_key(table, manifest.version);
    let m: &TableManifest = manifest;
    let got: Vec<(usize, Arc<Segment>)> = futures::stream::iter(wanted.iter().copied())
        .map(|i| {
            let path = path.as_str();
            async move {
                let got = fetch_raw(store, table, m, path, i).await?;
                Ok::<_, Error>((i, open_fetched(got, table, m, path, true)?))
            }
        })
        .buffer_unordered(IO_CONCURRENCY)
        .try_collect()
        .await?;
    manifest.layout.bodies.resize(manifest.segments.len(), None);
    for (i, s) in got {
        manifest.layout.bodies[i] = Some(s);
    }
    Ok(())
}

/// Hand each of the segments `wanted` of `manifest` to `visit` with its
/// index, in the order of `wanted`: [`IO_CONCURRENCY`] GETs at once, each
/// body parsed and visited in turn, so that one parsed segment is held at
/// a time however many there are. Those read are added to the process's
/// segment cache if `keep` (a read the next operations may build on), else
/// not (a whole-table pass: vacuum, compaction's planning); those it holds
/// are taken from it.
pub async fn visit<F>(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    wanted: &[usize],
    keep: bool,
    mut visit: F,
) -> Result<()>
where
    F: FnMut(usize, &Segment),
{
    use futures::stream::{StreamExt, TryStreamExt};
    let path = super::manifest_key(table, manifest.version);
    let path = path.as_str();
    futures::stream::iter(wanted.iter().copied())
        .map(|i| async move { Ok::<_, Error>((i, fetch_raw(store, table, manifest, path, i).await?)) })
        .buffered(IO_CONCURRENCY)
        .try_for_each(|(i, got)| {
            let opened = open_fetched(got, table, manifest, path, keep).map(|s| visit(i, &s));
            futures::future::ready(opened)
        })
        .await
}

/// The data files and tombstones of the loaded segments, in segment order;
/// a tombstone listed by several segments becomes one reference naming the
/// files of all of them.
/// Segments that list one tombstone with different SHA-256s are refused.
pub fn materialize(
    bodies: &[Option<Arc<Segment>>],
) -> std::result::Result<(Vec<DataFile>, Vec<TombstoneRef>), String> {
    let mut files = Vec::with_capacity(
        bodies
            .iter()
            .flatten()
            .map(|s| s.files.len())
            .sum::<usize>(),
    );
    let mut tombstones: Vec<TombstoneRef> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for s in bodies.iter().flatten() {
        files.extend(s.files.iter().cloned());
        for t in &s.tombstones {
            match at.get(&t.path) {
                Some(&i) if tombstones[i].sha256 != t.sha256 => {
                    return Err(format!(
                        "segments list tombstone {:?} with different SHA-256s",
                        t.path
                    ))
                }
                Some(&i) => tombstones[i].files.extend(t.files.iter().cloned()),
                None => {
                    at.insert(t.path.clone(), tombstones.len());
                    tombstones.push(t.clone());
                }
            }
        }
    }
    Ok((files, tombstones))
}

/// A group of files to write as new segments, or a segment kept as is.
enum Piece {
    /// A base segment kept as it is (its body `None` if it was not loaded:
    /// a partial view keeps every segment it did not load).
    Keep(SegmentRef, Option<Arc<Segment>>),
    Write(Vec<DataFile>),
}

/// Whether compaction has small segments to merge: two or more.
pub fn needs_repack(segments: &[SegmentRef]) -> bool {
    segments
        .iter()
        .filter(|s| s.file_count < SMALL_SEGMENT)
        .count()
        >= 2
}

/// Cut `files` into segments of at most [`SEGMENT_FILES`], evenly.
fn chunks(files: Vec<DataFile>) -> Vec<Vec<DataFile>> {
    if files.is_empty() {
        return Vec::new();
    }
    let n = files.len().div_ceil(SEGMENT_FILES);
    let per = files.len().div_ceil(n);
    let mut out = Vec::with_capacity(n);
    let mut rest = files.into_iter().peekable();
    while rest.peek().is_some() {
        out.push(rest.by_ref().take(per).collect());
    }
    out
}

/// The segment layout of a version built on `base` (the segments and
/// bodies of the version it was built from), whose whole file list and
/// tombstones are `files` and `tombstones`: segments whose files and
/// tombstones are unchanged are kept, the others rewritten with what
/// remains of them, and files new to the version packed after them (into
/// the last segment while it is small). With `repack`, small segments are
/// merged with their neighbours too.
///
/// Returns the pieces in order; [`write`] turns them into segments.
fn plan(
    base: Vec<(SegmentRef, Option<Arc<Segment>>)>,
    files: &[DataFile],
    tombstones: &[TombstoneRef],
    by_file: &HashMap<&str, Vec<usize>>,
    repack: bool,
) -> Vec<Piece> {
    let index: HashMap<&str, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.as_str(), i))
        .collect();
    let mut covered = vec![false; files.len()];
    let mut pieces = Vec::new();
    for (r, body) in base {
        let Some(body) = body else {
            pieces.push(Piece::Keep(r, None));
            continue;
        };
        if repack && r.file_count < SMALL_SEGMENT {
            // Its files join the new ones at the end, merged with the
            // other small segments' there.
            continue;
        }
        let unchanged = body
            .files
            .iter()
            .all(|f| index.get(f.path.as_str()).is_some_and(|&i| files[i] == *f))
            && same_tombstones(&body, tombstones, by_file);
        for f in &body.files {
            if let Some(&i) = index.get(f.path.as_str()) {
                covered[i] = true;
            }
        }
        if unchanged {
            pieces.push(Piece::Keep(r, Some(body)));
        } else {
            let kept: Vec<DataFile> = body
                .files
                .iter()
                .filter_map(|f| index.get(f.path.as_str()).map(|&i| files[i].clone()))
                .collect();
            pieces.push(Piece::Write(kept));
        }
    }
    let new: Vec<DataFile> = files
        .iter()
        .zip(&covered)
        .filter(|(_, c)| !**c)
        .map(|(f, _)| f.clone())
        .collect();
    if !new.is_empty() {
        // Into a small last segment (rewritten), or a new one.
        match pieces.pop() {
            Some(Piece::Keep(r, Some(body)))
                if r.file_count < TAIL_FILES
                    && shared_schema(&body.files) == shared_schema(&new) =>
            {
                let mut all = body.files.clone();
                all.extend(new);
                pieces.push(Piece::Write(all));
            }
            Some(other) => {
                pieces.push(other);
                pieces.push(Piece::Write(new));
            }
            None => pieces.push(Piece::Write(new)),
        }
    }
    // Consecutive groups to write become one, cut evenly again.
    let mut merged: Vec<Piece> = Vec::new();
    for p in pieces {
        match (merged.last_mut(), p) {
            (Some(Piece::Write(acc)), Piece::Write(more)) => acc.extend(more),
            (_, p) => merged.push(p),
        }
    }
    merged
        .into_iter()
        .flat_map(|p| match p {
            Piece::Keep(r, b) => vec![Piece::Keep(r, b)],
            Piece::Write(files) => chunks(files).into_iter().map(Piece::Write).collect(),
        })
        .collect()
}

/// Per data file, the indices of the tombstones of `tombstones` naming it.
fn tombstones_by_file(tombstones: &[TombstoneRef]) -> HashMap<&str, Vec<usize>> {
    let mut by_file: HashMap<&str, Vec<usize>> = HashMap::new();
    for (ti, t) in tombstones.iter().enumerate() {
        for f in &t.files {
            by_file.entry(f.as_str()).or_default().push(ti);
        }
    }
    by_file
}

/// The tombstones of `tombstones` that name files of `files`, each naming
/// only those, in `tombstones`' order.
fn tombstones_of(
    files: &[DataFile],
    tombstones: &[TombstoneRef],
    by_file: &HashMap<&str, Vec<usize>>,
) -> Vec<TombstoneRef> {
    let names: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut which: Vec<usize> = files
        .iter()
        .flat_map(|f| by_file.get(f.path.as_str()).into_iter().flatten().copied())
        .collect();
    which.sort_unstable();
    which.dedup();
    which
        .into_iter()
        .map(|ti| {
            let t = &tombstones[ti];
            TombstoneRef {
                path: t.path.clone(),
                files: t
                    .files
                    .iter()
                    .filter(|f| names.contains(f.as_str()))
                    .cloned()
                    .collect(),
                sha256: t.sha256.clone(),
            }
        })
        .collect()
}

fn same_tombstones(
    body: &Segment,
    tombstones: &[TombstoneRef],
    by_file: &HashMap<&str, Vec<usize>>,
) -> bool {
    let mut now = tombstones_of(&body.files, tombstones, by_file);
    let mut then = body.tombstones.clone();
    now.sort_by(|a, b| a.path.cmp(&b.path));
    then.sort_by(|a, b| a.path.cmp(&b.path));
    now == then
}

/// A new, unique segment path.
fn new_path() -> String {
    format!("{FOLDER}/{}.json", crate::dataset::unique_token())
}

/// Lay `manifest` (a whole version, built on the version whose segments it
/// still carries) out in segments: plan them (see [`plan`]), PUT the new
/// ones (create-only, at once), and set its segment list and bodies.
/// Its file and tombstone lists are put in segment order.
///
/// Cost: a PUT per segment written. Returns their keys.
pub async fn lay_out(
    store: &StoreHandle,
    table: &str,
    manifest: &mut TableManifest,
    repack: bool,
) -> Result<Vec<String>> {
    let path = super::manifest_key(table, manifest.version);
    // A file listed twice, or a tombstone naming a file the version lacks
    // (a plan gone stale in a way its prepare missed), would be written
    // into segments readers refuse, or dropped: refuse the commit instead.
    manifest.check_segmented_files().map_err(|reason| {
        Error::Task(format!(
            "pds refused to commit a manifest that readers would reject (a bug; nothing was \
             committed): {reason}"
        ))
    })?;
    let partial = manifest.layout.view == View::Partial;
    let refs = std::mem::take(&mut manifest.segments);
    let bodies = std::mem::take(&mut manifest.layout.bodies);
    let mut base = Vec::with_capacity(refs.len());
    for (i, r) in refs.into_iter().enumerate() {
        let body = bodies.get(i).cloned().flatten();
        if body.is_none() && !partial {
            return Err(Error::Task(
                "a version was laid out without its base's segments (a bug)".into(),
            ));
        }
        base.push((r, body));
    }
    let by_file = tombstones_by_file(&manifest.tombstones);
    let pieces = plan(
        base,
        &manifest.data_files,
        &manifest.tombstones,
        &by_file,
        repack,
    );
    let mut out = Vec::with_capacity(pieces.len());
    let mut puts = Vec::new();
    for p in pieces {
        match p {
            Piece::Keep(r, b) => out.push((r, b)),
            Piece::Write(files) => {
                let tombs = tombstones_of(&files, &manifest.tombstones, &by_file);
                let (r, b, body) = Segment::build(files, tombs, new_path(), manifest, &path)?;
                puts.push((key_of(table, &r.path), body));
                out.push((r, Some(b)));
            }
        }
    }
    drop(by_file);
    let keys = put_all(store, puts).await?;
    for (r, b) in &out {
        if let Some(b) = b {
            remember(r, b);
        }
    }
    let (refs, bodies): (Vec<_>, Vec<_>) = out.into_iter().unzip();
    let (files, tombstones) = materialize(&bodies).map_err(Error::Task)?;
    manifest.segments = refs;
    manifest.layout.bodies = bodies;
    manifest.data_files = files;
    manifest.tombstones = tombstones;
    Ok(keys)
}

/// Lay out an append: `manifest` carries its base's segments (none of them
/// needs to be loaded) and, as its file list, only the files it adds. They
/// go into the last segment if that holds fewer than [`TAIL_FILES`] files
/// of the same schema (1 GET if it is not cached, and that segment
/// rewritten), else into new segments.
///
/// Cost: at most 1 GET and the PUTs of the segments written. Returns
/// their keys.
pub async fn lay_out_append(
    store: &StoreHandle,
    table: &str,
    manifest: &mut TableManifest,
) -> Result<Vec<String>> {
    let path = super::manifest_key(table, manifest.version);
    let new = std::mem::take(&mut manifest.data_files);
    if !manifest.tombstones.is_empty() {
        return Err(Error::Task(
            "an append carried tombstones (a bug; nothing was committed)".into(),
        ));
    }
    manifest.layout.bodies.resize(manifest.segments.len(), None);
    let shared_new = shared_schema(&new);
    let tail = match manifest.segments.last() {
        Some(r)
            if r.file_count < TAIL_FILES
                && r.schema.is_none()
                && r.files_schema.is_none()
                && shared_new == Some(None) =>
        {
            let last = manifest.segments.len() - 1;
            if manifest.layout.bodies[last].is_none() {
                load(store, table, manifest, &[last]).await?;
            }
            manifest.layout.bodies[last].clone()
        }
        _ => None,
    };
    let (mut files, tombstones) = match &tail {
        Some(body) if shared_schema(&body.files) == shared_new => {
            if let Some(old) = manifest.segments.pop() {
                // Replaced by the segment written below: a later version
                // never lists it again.
                forget(&old);
            }
            manifest.layout.bodies.pop();
            (body.files.clone(), body.tombstones.clone())
        }
        _ => (Vec::new(), Vec::new()),
    };
    files.extend(new);
    let mut puts = Vec::new();
    let mut first = true;
    for group in chunks(files) {
        // Tombstones stay with the files they name (all in the first group
        // when the tail was rewritten: it held fewer than TAIL_FILES).
        let tombs = if first {
            tombstones.clone()
        } else {
            Vec::new()
        };
        first = false;
        let (r, b, body) = Segment::build(group, tombs, new_path(), manifest, &path)?;
        puts.push((key_of(table, &r.path), body));
        remember(&r, &b);
        manifest.segments.push(r);
        manifest.layout.bodies.push(Some(b));
    }
    put_all(store, puts).await
}

/// PUT each body at its key (create-only, [`IO_CONCURRENCY`] at once);
/// the keys written.
async fn put_all(store: &StoreHandle, puts: Vec<(String, Bytes)>) -> Result<Vec<String>> {
    use futures::stream::{StreamExt, TryStreamExt};
    futures::stream::iter(puts)
        .map(|(key, body)| async move { store.put_create_own(&key, body).await.map(|_| key) })
        .buffer_unordered(IO_CONCURRENCY)
        .try_collect::<Vec<String>>()
        .await
}

impl TableManifest {
    fn corrupted(&self, table: &str, reason: String) -> Error {
        Error::ManifestCorrupted {
            path: super::manifest_key(table, self.version),
            reason,
        }
    }

    /// Load every segment not loaded yet (a GET each, at once; none for
    /// those cached) and make this a [`View::Full`] manifest, checked.
    pub async fn load_all(&mut self, store: &StoreHandle, table: &str) -> Result<()> {
        match self.layout.view {
            View::Full => return Ok(()),
            View::Appended => {
                return Err(Error::Task(
                    "an append's manifest was asked for its whole file list (a bug)".into(),
                ))
            }
            View::Root | View::Pruned | View::Partial => {}
        }
        self.layout.bodies.resize(self.segments.len(), None);
        let wanted: Vec<usize> = (0..self.segments.len())
            .filter(|&i| self.layout.bodies[i].is_none())
            .collect();
        load(store, table, self, &wanted).await?;
        let (files, tombstones) =
            materialize(&self.layout.bodies).map_err(|r| self.corrupted(table, r))?;
        self.data_files = files;
        self.tombstones = tombstones;
        self.layout.view = View::Full;
        self.check_segmented_files()
            .map_err(|r| self.corrupted(table, r))
    }

    /// Load only the segments `keep` accepts (by index and reference), make
    /// this a [`View::Pruned`] manifest of their files, for a read that
    /// needs no other (a scan whose filter the others' statistics rule
    /// out). A [`View::Full`] manifest stays as it is.
    pub async fn load_where<F>(&mut self, store: &StoreHandle, table: &str, keep: F) -> Result<()>
    where
        F: Fn(usize, &SegmentRef) -> Result<bool>,
    {
        self.narrow(store, table, keep, View::Pruned).await
    }

    /// Load the segments `keep` accepts, and the last one if it is small
    /// (the files a commit adds may join it), and make this a
    /// [`View::Partial`] manifest of their files, for a rewrite to plan
    /// and commit on: segments not loaded are kept as they are. All of
    /// them accepted: [`View::Full`]. A [`View::Full`] manifest stays as
    /// it is. Cost: a GET per segment loaded that is not cached.
    pub async fn load_partial<F>(&mut self, store: &StoreHandle, table: &str, keep: F) -> Result<()>
    where
        F: Fn(usize, &SegmentRef) -> Result<bool>,
    {
        self.narrow(store, table, keep, View::Partial).await
    }

    /// [`Self::load_where`] (`view` [`View::Pruned`]) or
    /// [`Self::load_partial`] ([`View::Partial`]).
    async fn narrow<F>(
        &mut self,
        store: &StoreHandle,
        table: &str,
        keep: F,
        view: View,
    ) -> Result<()>
    where
        F: Fn(usize, &SegmentRef) -> Result<bool>,
    {
        if self.layout.view == View::Full {
            return Ok(());
        }
        if self.layout.view != View::Root {
            return Err(Error::Task(
                "a manifest was narrowed twice, or after an append (a bug)".into(),
            ));
        }
        let last = self.segments.len().checked_sub(1);
        let mut wanted = Vec::new();
        for (i, r) in self.segments.iter().enumerate() {
            let tail = view == View::Partial && Some(i) == last && r.file_count < TAIL_FILES;
            if tail || keep(i, r)? {
                wanted.push(i);
            }
        }
        if wanted.len() == self.segments.len() {
            return self.load_all(store, table).await;
        }
        load(store, table, self, &wanted).await?;
        let mut chosen: Vec<Option<Arc<Segment>>> = vec![None; self.segments.len()];
        for &i in &wanted {
            chosen[i] = self.layout.bodies.get(i).cloned().flatten();
        }
        let (files, tombstones) = materialize(&chosen).map_err(|r| self.corrupted(table, r))?;
        // Only what the view holds: a partial one is laid out from these.
        self.layout.bodies = chosen;
        self.data_files = files;
        self.tombstones = tombstones;
        self.layout.view = view;
        self.check_segmented_files()
            .map_err(|r| self.corrupted(table, r))
    }

    /// Write the segments this version needs (see [`lay_out`] and
    /// [`lay_out_append`]); called by the commit loop before the manifest.
    /// Returns the keys of the segments written.
    pub async fn lay_out_segments(
        &mut self,
        store: &StoreHandle,
        table: &str,
    ) -> Result<Vec<String>> {
        let written =
            match self.layout.view {
                View::Full | View::Partial => {
                    let repack = self.layout.repack;
                    lay_out(store, table, self, repack).await?
                }
                View::Appended => {
                    let written = lay_out_append(store, table, self).await?;
                    self.layout.view = View::Root;
                    written
                }
                View::Root => Vec::new(),
                View::Pruned => return Err(Error::Task(
                    "a pruned manifest was about to be committed (a bug; nothing was committed)"
                        .into(),
                )),
            };
        self.layout.laid_out = true;
        Ok(written)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod schema_tests;
