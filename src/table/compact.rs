//! Compaction: rewrite the files that deletes have thinned out, and small
//! files, into new files; coalesce the tombstones into one.
//!
//! A file is rewritten when its deleted fraction reaches the threshold, or
//! when it is small (below half the target size) and there are other small
//! files to merge it with. A file whose rows are all deleted is dropped
//! without being read. The new files hold the remaining rows, in the
//! table's current schema; the tombstone entries of the other files are
//! merged into one new tombstone object. Then a normal commit. A table
//! with more than one tombstone is compacted even when no file qualifies:
//! its tombstones become one, and no data file is rewritten.
//!
//! **Window by window.** The work goes in windows of the version's
//! manifest segments. A tombstone that deletes rows of files in several
//! segments binds them into one window (it is coalesced whole, so its
//! files are planned together); otherwise each segment of at least
//! [`SMALL_SEGMENT`] files is a window alone, and the small ones share
//! windows of up to [`SEGMENT_FILES`] files (their files are merged, and
//! the small segments become full ones). Each window is loaded alone,
//! planned, rewritten and committed as its own version, so memory holds
//! one window's file list: one segment's, unless deletes spanning many
//! segments bound them together. A table of one segment is compacted in
//! one version. Small files are merged within a window, not with the files
//! earlier windows wrote (the next compaction merges those); the window of
//! the small last segment, which every window's load includes, goes
//! first. Finding the windows reads each segment once, parsing one at a
//! time; windows with nothing to do are skipped.
//!
//! Concurrency: appends that land meanwhile are rebased on. A delete that
//! lands meanwhile and touches a file being rewritten would be lost by the
//! rewrite, so that window starts over from the new version (up to
//! [`MAX_REPLANS`] times, then `CommitConflict`, having removed its new
//! files; the windows committed before stay): no concurrent change is
//! ever lost. A file named by a tombstone that also names files the
//! window did not load (segments a concurrent commit cut anew) is left as
//! it is, with that tombstone, for a later compaction.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::RecordBatchReader;
use serde_json::Value;

use super::commit::{self, CommitOptions, Outcome};
use super::scan::{deleted_positions, scan, ScanOptions};
use super::segment::{SegmentChoice, SegmentRef, SEGMENT_FILES, SMALL_SEGMENT};
use super::snapshot::{DataFile, TableManifest, TombstoneRef};
use super::tombstone::{self, Entry, Tombstone};
use super::versions;
use super::versions::Depth;
use super::write::{discard, may_discard, upload, DEFAULT_TARGET_FILE_SIZE};
use crate::dataset::manifest::now_iso8601;
use crate::error::{Error, Result};
use crate::progress::{Phase, Progress};
use crate::store::StoreHandle;

/// Attempts before a compaction that keeps racing deletes gives up.
pub const MAX_REPLANS: u32 = 4;

/// How to compact.
#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Bytes per new file at most (default: the table's, else 512 MiB).
    pub target_file_size: Option<u64>,
    /// Rewrite a file once this fraction of its rows is deleted.
    pub min_deleted_fraction: f64,
    pub parallelism: usize,
    /// Counts the rows rewritten of the live rows of the files planned
    /// (phase [`Phase::Compacting`]), for a caller to show; `None`: not
    /// counted.
    pub progress: Option<Arc<Progress>>,
}

impl CompactOptions {
    /// The bytes per new file: the option, else the table's setting
    /// (`props`), else [`DEFAULT_TARGET_FILE_SIZE`].
    fn target_for(&self, props: &super::snapshot::TableProperties) -> u64 {
        self.target_file_size
            .or(props.target_file_size)
            .unwrap_or(DEFAULT_TARGET_FILE_SIZE)
    }
}

#[cfg(test)]
impl CompactOptions {
    /// Rewrite the files with at least `min_deleted_fraction` of their
    /// rows deleted (and merge small ones) at the table's file size, two
    /// files at a time, uncounted.
    pub fn deleted(min_deleted_fraction: f64) -> Self {
        CompactOptions {
            target_file_size: None,
            min_deleted_fraction,
            parallelism: 2,
            progress: None,
        }
    }
}

/// What a compaction did.
#[derive(Debug, Clone)]
pub struct Compacted {
    /// The version after it (the latest if nothing was committed), as the
    /// last window's commit left it: its root, with at most the segments
    /// that window loaded (not a whole file list).
    pub manifest: TableManifest,
    /// Whether any window committed.
    pub committed: bool,
    /// Summed over the windows.
    pub files_removed: usize,
    pub files_added: usize,
}

/// The files to rewrite or drop, and the rows left in those rewritten.
struct Plan {
    rewrite: Vec<DataFile>,
    drop: Vec<DataFile>,
    live_rows: u64,
}

/// A window's tombstones (those of the files it loaded), in the order of
/// the manifest's references, and which of them are shared: they also
/// delete rows of files the window did not load.
struct Tombstones {
    objects: Vec<Arc<Tombstone>>,
    shared: Vec<bool>,
}

impl Tombstones {
    async fn load(store: &StoreHandle, table: &str, base: &TableManifest) -> Result<Self> {
        let objects = tombstone::load_version(store, table, base).await?;
        let window: HashSet<&str> = base.data_files.iter().map(|f| f.path.as_str()).collect();
        let shared = objects
            .iter()
            .map(|t| t.entries.iter().any(|e| !window.contains(e.file())))
            .collect();
        Ok(Tombstones { objects, shared })
    }

    /// The window's own tombstones, with their references in `base`.
    fn local<'a>(
        &'a self,
        base: &'a TableManifest,
    ) -> impl Iterator<Item = (&'a TombstoneRef, &'a Arc<Tombstone>)> + 'a {
        base.tombstones
            .iter()
            .zip(&self.objects)
            .zip(&self.shared)
            .filter(|(_, shared)| !**shared)
            .map(|(pair, _)| pair)
    }

    /// The files a shared tombstone names: kept as they are.
    fn pinned<'a>(&self, base: &'a TableManifest) -> HashSet<&'a str> {
        base.tombstones
            .iter()
            .zip(&self.shared)
            .filter(|(_, shared)| **shared)
            .flat_map(|(r, _)| r.files.iter().map(String::as_str))
            .collect()
    }
}

/// The files of `base` (a window as loaded) that are the window's own: of
/// the segments it chose, and of segments written since by others. The
/// rest (a small last segment that an earlier window of this compaction
/// wrote, or that another window names) are loaded only for the files
/// the commit adds to join them.
fn own_files<'a>(base: &'a TableManifest, choice: &SegmentChoice) -> HashSet<&'a str> {
    base.segments
        .iter()
        .zip(&base.layout.bodies)
        .filter(|(r, _)| choice.named.contains(&r.path) || !choice.known.contains(&r.path))
        .filter_map(|(_, b)| b.as_ref())
        .flat_map(|b| b.files.iter().map(|f| f.path.as_str()))
        .collect()
}

async fn plan(
    store: &StoreHandle,
    table: &str,
    base: &TableManifest,
    opts: &CompactOptions,
    target: u64,
    tombstones: &Tombstones,
    own: &HashSet<&str>,
) -> Result<Plan> {
    let deletes = tombstone::fold(&tombstones.objects)?;
    let pinned = tombstones.pinned(base);
    let mut rewrite = Vec::new();
    let mut drop = Vec::new();
    let mut small = Vec::new();
    let mut live_rows = 0u64;
    for f in base
        .data_files
        .iter()
        .filter(|f| own.contains(f.path.as_str()) && !pinned.contains(f.path.as_str()))
    {
        let dead = match deletes.get(&f.path) {
            Some(d) => deleted_positions(store, table, base, f, d).await?.len(),
            None => 0,
        };
        if f.total_rows == 0 || dead >= f.total_rows {
            drop.push(f.clone());
        } else if dead > 0 && dead as f64 / f.total_rows as f64 >= opts.min_deleted_fraction {
            rewrite.push(f.clone());
            live_rows += f.total_rows - dead;
        } else if f.size_bytes < target / 2 {
            small.push((f.clone(), dead));
        }
    }
    // Small files are merged with each other, or with the files rewritten.
    if small.len() >= 2 || (!small.is_empty() && !rewrite.is_empty()) {
        live_rows += small
            .iter()
            .map(|(f, dead)| f.total_rows - dead)
            .sum::<u64>();
        rewrite.extend(small.into_iter().map(|(f, _)| f));
    }
    Ok(Plan {
        rewrite,
        drop,
        live_rows,
    })
}

/// Compact `table` (see the module docs).
///
/// Cost, per window: its segments (a GET each not cached), the tombstones
/// of its files, a footer per file with whole-row-group deletes, the key
/// column of files with key-range deletes; then the rewritten files are
/// read and written, one tombstone PUT, and the commit (2 PUTs and the
/// segments it writes).
pub fn compact(store: Arc<StoreHandle>, table: &str, opts: CompactOptions) -> Result<Compacted> {
    crate::store::keys::object_segments(table)?;
    let mut started = crate::store::counted::Started::now(&store);
    if !(0.0..=1.0).contains(&opts.min_deleted_fraction) {
        return Err(Error::InvalidArgument(format!(
            "min_deleted_fraction must be between 0 and 1, got {}",
            opts.min_deleted_fraction
        )));
    }
    if opts.target_file_size == Some(0) {
        return Err(Error::InvalidArgument(
            "target_file_size must be >= 1".into(),
        ));
    }
    let first = versions::latest_existing_root(&store, table)?;
    let mut out = Compacted {
        manifest: first.manifest.clone(),
        committed: false,
        files_removed: 0,
        files_added: 0,
    };
    let target = opts.target_for(&first.manifest.properties);
    let windows = crate::runtime::block_on(find_windows(&store, table, &first.manifest, target))??;
    // Segments the windows after this one need not load: those of the
    // version they were chosen from, and those of versions committed since.
    let mut known: HashSet<String> = first
        .manifest
        .segments
        .iter()
        .map(|s| s.path.clone())
        .collect();
    let one_window = windows.len() <= 1;
    if windows.is_empty() {
        crate::progress::start(opts.progress.as_deref(), Phase::Compacting, Some(0));
    }
    let mut given = Some(first);
    let mut counting = Counting::Start { known: one_window };
    for window in windows {
        let latest = match given.take() {
            Some(l) => l,
            None => versions::latest_existing_root(&store, table)?,
        };
        let choice = Arc::new(SegmentChoice {
            named: window,
            known: known.clone(),
        });
        let fallback = latest.manifest.clone();
        match compact_window(&store, table, &opts, latest, choice, counting)? {
            Some(w) => {
                // Each window's version is logged with what it did.
                super::commit::log_committed(&store, table, &w.manifest, &started);
                started = crate::store::counted::Started::now(&store);
                known.extend(w.manifest.segments.iter().map(|s| s.path.clone()));
                out.committed = true;
                out.files_removed += w.files_removed;
                out.files_added += w.files_added;
                out.manifest = w.manifest;
            }
            None if !out.committed => out.manifest = fallback,
            None => {}
        }
        // With several windows, the rows are counted throughout against an
        // unknown total; one window's count is the operation's.
        counting = Counting::Continue;
    }
    Ok(out)
}

/// How a window counts its progress.
#[derive(Clone, Copy)]
enum Counting {
    /// Enter the phase (again on a replan), with the window's live rows as
    /// the total if `known`.
    Start { known: bool },
    /// Keep counting on from the windows before (a replan's rows are
    /// counted again).
    Continue,
}

/// The windows of `root`'s segments that have work to do, each as the
/// paths of its segments (see the module docs): a tombstone, an empty
/// file, two files smaller than half of `target` bytes, or two small
/// segments to merge. Reads every segment (a GET each not cached, a few at
/// a time, not kept), keeping only the names of its tombstones and its
/// counts of such files.
async fn find_windows(
    store: &StoreHandle,
    table: &str,
    root: &TableManifest,
    target: u64,
) -> Result<Vec<HashSet<String>>> {
    let n = root.segments.len();
    let mut tombstones: Vec<Vec<String>> = vec![Vec::new(); n];
    // Per segment: files with no rows, and small files.
    let mut files: Vec<(u64, u64)> = vec![(0, 0); n];
    let all: Vec<usize> = (0..n).collect();
    super::segment::visit(store, table, root, &all, false, |i, s| {
        tombstones[i] = s.tombstones.iter().map(|t| t.path.clone()).collect();
        let empty = s.files.iter().filter(|f| f.total_rows == 0).count() as u64;
        let small = s.files.iter().filter(|f| f.size_bytes < target / 2).count() as u64;
        files[i] = (empty, small);
    })
    .await?;
    Ok(windows(&root.segments, &tombstones)
        .into_iter()
        .filter(|w| {
            let small_segments = w
                .iter()
                .filter(|&&i| root.segments[i].file_count < SMALL_SEGMENT)
                .count();
            w.iter()
                .any(|&i| !tombstones[i].is_empty() || files[i].0 > 0)
                || w.iter().map(|&i| files[i].1).sum::<u64>() >= 2
                || small_segments >= 2
        })
        .map(|w| {
            w.into_iter()
                .map(|i| root.segments[i].path.clone())
                .collect()
        })
        .collect())
}

/// The windows of `segments` (indices), whose tombstones' names are
/// `tombstones`: segments sharing a tombstone together, each group with a
/// segment of at least [`SMALL_SEGMENT`] files (or as many files as a
/// segment holds) alone, the other groups packed into windows of at most
/// [`SEGMENT_FILES`] files, after the rest.
fn windows(segments: &[SegmentRef], tombstones: &[Vec<String>]) -> Vec<Vec<usize>> {
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut parent: Vec<usize> = (0..segments.len()).collect();
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (i, names) in tombstones.iter().enumerate() {
        for t in names {
            let j = *first.entry(t.as_str()).or_insert(i);
            let (a, b) = (root(&mut parent, i), root(&mut parent, j));
            // The lower index leads its group, so groups keep their order.
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut at: HashMap<usize, usize> = HashMap::new();
    for i in 0..segments.len() {
        let r = root(&mut parent, i);
        let g = *at.entry(r).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    let mut out = Vec::new();
    let mut small: Vec<usize> = Vec::new();
    let mut small_files = 0u64;
    for g in groups {
        let files: u64 = g.iter().map(|&i| segments[i].file_count).sum();
        let big = g.iter().any(|&i| segments[i].file_count >= SMALL_SEGMENT);
        if big || files >= SEGMENT_FILES as u64 {
            out.push(g);
            continue;
        }
        if !small.is_empty() && small_files + files > SEGMENT_FILES as u64 {
            out.push(std::mem::take(&mut small));
            small_files = 0;
        }
        small.extend(g);
        small_files += files;
    }
    if !small.is_empty() {
        out.push(small);
    }
    // The window of the last segment first: every window's load includes
    // that segment when it is small (the files a commit adds join it), and
    // it is then a later window's output, not its own files to merge.
    if let Some(last) = segments.len().checked_sub(1) {
        if let Some(k) = out.iter().position(|w| w.contains(&last)) {
            let w = out.remove(k);
            out.insert(0, w);
        }
    }
    out
}

/// Compact the files of the segments `choice` names: plan on them, rewrite
/// and commit, replanning when a concurrent change makes the plan stale.
/// `None` if there was nothing to do.
fn compact_window(
    store: &Arc<StoreHandle>,
    table: &str,
    opts: &CompactOptions,
    root: versions::Latest,
    choice: Arc<SegmentChoice>,
    counting: Counting,
) -> Result<Option<Compacted>> {
    let mut given = Some(root);
    for _ in 0..MAX_REPLANS {
        let mut latest = match given.take() {
            Some(l) => l,
            None => versions::latest_existing_root(store, table)?,
        };
        // The window, with what was written since it was chosen.
        let depth = Depth::Segments(choice.clone());
        crate::runtime::block_on({
            use versions::Versioned;
            latest.manifest.load(store, table, depth)
        })??;
        let base = latest.manifest.clone();
        let mut props = base.properties.clone();
        let target = opts.target_for(&props);
        props.target_file_size = Some(target);
        let tombstones = crate::runtime::block_on(Tombstones::load(store, table, &base))??;
        let own = own_files(&base, &choice);
        let plan =
            crate::runtime::block_on(plan(store, table, &base, opts, target, &tombstones, &own))??;
        if let Counting::Start { known } = counting {
            crate::progress::start(
                opts.progress.as_deref(),
                Phase::Compacting,
                known.then_some(plan.live_rows),
            );
        }
        // Coalescing several tombstones into one is reason enough to commit.
        // So is merging small manifest segments.
        let loaded: Vec<SegmentRef> = base
            .segments
            .iter()
            .zip(&base.layout.bodies)
            .filter(|(_, b)| b.is_some())
            .map(|(r, _)| r.clone())
            .collect();
        if plan.rewrite.is_empty()
            && plan.drop.is_empty()
            && tombstones.local(&base).count() <= 1
            && !super::segment::needs_repack(&loaded)
        {
            return Ok(None);
        }
        // The rows left in the files to rewrite, as the table's schema.
        let mut subset = base.clone();
        subset.data_files = plan.rewrite.clone();
        let schema = base.arrow_schema(&super::manifest_key(table, base.version))?;
        let added = if plan.rewrite.is_empty() {
            Vec::new()
        } else {
            let rows = scan(
                store.clone(),
                table,
                &subset,
                ScanOptions {
                    parallelism: opts.parallelism,
                    ..Default::default()
                },
            )?;
            let rows: super::write::BoxedReader = match &opts.progress {
                Some(p) => Box::new(CountRows {
                    inner: rows,
                    progress: p.clone(),
                }),
                None => Box::new(rows),
            };
            upload(store, table, rows, schema, &props, opts.parallelism, None)?
        };
        match commit_compaction(store, table, latest, &plan, &added, &choice, &tombstones)? {
            Some(manifest) => {
                return Ok(Some(Compacted {
                    manifest,
                    committed: true,
                    files_removed: plan.rewrite.len() + plan.drop.len(),
                    files_added: added.len(),
                }));
            }
            None => discard(store, table, &added),
        }
    }
    Err(Error::CommitConflict {
        key: table.to_string(),
        attempts: MAX_REPLANS,
    })
}

/// The rows of `inner`, counted into `progress` as they pass.
struct CountRows<R> {
    inner: R,
    progress: Arc<Progress>,
}

impl<R: RecordBatchReader> Iterator for CountRows<R> {
    type Item = R::Item;
    fn next(&mut self) -> Option<Self::Item> {
        let next = self.inner.next();
        if let Some(Ok(b)) = &next {
            self.progress
                .add(b.num_rows() as u64, 0, b.num_rows() as u64, 0);
        }
        next
    }
}

impl<R: RecordBatchReader> RecordBatchReader for CountRows<R> {
    fn schema(&self) -> arrow_schema::SchemaRef {
        self.inner.schema()
    }
}

/// Coalesce the window's own tombstones into one object, PUT it and
/// commit; `None` if a concurrent change touched the files rewritten or
/// the tombstones coalesced.
///
/// `latest` holds the window (see [`SegmentChoice`]): its file list and
/// tombstones are those of the segments loaded. Its own tombstones delete
/// rows of its files alone; their entries for the files kept go into the
/// new one, and they are no longer referenced. Shared ones stay as they
/// are (the plan kept their files).
fn commit_compaction(
    store: &Arc<StoreHandle>,
    table: &str,
    latest: versions::Latest,
    plan: &Plan,
    added: &[DataFile],
    choice: &Arc<SegmentChoice>,
    loaded: &Tombstones,
) -> Result<Option<TableManifest>> {
    let base = latest.manifest.clone();
    let gone: BTreeSet<String> = plan
        .rewrite
        .iter()
        .chain(&plan.drop)
        .map(|f| f.path.clone())
        .collect();
    // The entries of the files kept; each file's position bitmaps merged.
    let mut kept: BTreeMap<String, (Vec<Entry>, roaring::RoaringBitmap)> = BTreeMap::new();
    for (_, t) in loaded.local(&base) {
        for (i, e) in t.entries.iter().enumerate() {
            if gone.contains(e.file()) {
                continue;
            }
            let (others, rows) = kept.entry(e.file().to_string()).or_default();
            match t.rows_of(i) {
                Some(b) => *rows |= b,
                None => others.push(e.clone()),
            }
        }
    }
    let files: Vec<String> = kept.keys().cloned().collect();
    let mut entries = Vec::new();
    for (file, (others, rows)) in kept {
        entries.extend(others);
        if !rows.is_empty() {
            entries.push(Entry::rows(&file, &rows)?);
        }
    }
    let coalesced = if entries.is_empty() {
        None
    } else {
        let mut r = crate::runtime::block_on(Tombstone::put(store, table, base.version, entries))??;
        // Every kept file, also those whose entries merged into nothing.
        r.files = files;
        let key = format!("{}/{}", table.trim_end_matches('/'), r.path);
        Some((r, key))
    };
    // The tombstones coalesced, and what they said: each pair must still
    // hold when the commit replaces them.
    let replaced: BTreeSet<String> = loaded.local(&base).map(|(r, _)| r.path.clone()).collect();
    let base_tombstones: BTreeSet<String> =
        base.tombstones.iter().map(|t| t.path.clone()).collect();
    let named: BTreeSet<(&str, &str)> = loaded
        .local(&base)
        .flat_map(|(t, _)| t.files.iter().map(move |f| (t.path.as_str(), f.as_str())))
        .collect();
    let mut stale = false;
    let opts = CommitOptions {
        depth: Depth::Segments(choice.clone()),
        ..Default::default()
    };
    let out = crate::runtime::block_on(commit::commit(store, table, &opts, Some(latest), |now| {
        let now = now.ok_or_else(|| Error::NotFound {
            path: table.to_string(),
        })?;
        let present: BTreeSet<&str> = now.data_files.iter().map(|f| f.path.as_str()).collect();
        let touched = now
            .tombstones
            .iter()
            .filter(|t| !base_tombstones.contains(&t.path))
            .any(|t| t.files.iter().any(|f| gone.contains(f)));
        // The coalesced tombstone replaces what the base's said of the
        // window's files and marks the files kept: an overwrite or
        // another compaction that removed any of them makes this plan
        // stale.
        let now_named: BTreeSet<(&str, &str)> = now
            .tombstones
            .iter()
            .flat_map(|t| t.files.iter().map(move |f| (t.path.as_str(), f.as_str())))
            .collect();
        let lost_tombstone = named
            .iter()
            .any(|pair| !gone.contains(pair.1) && !now_named.contains(pair));
        let lost_file = coalesced
            .iter()
            .any(|(r, _)| r.files.iter().any(|f| !present.contains(f.as_str())));
        if touched
            || lost_tombstone
            || lost_file
            || gone.iter().any(|g| !present.contains(g.as_str()))
            || now.schema != base.schema
        {
            stale = true;
            return Ok(None);
        }
        let mut next = now.clone();
        next.created_at = now_iso8601();
        next.operation = "compact".into();
        next.layout.repack = true;
        next.data_files.retain(|f| !gone.contains(&f.path));
        next.data_files.extend(added.iter().cloned());
        // The window's own tombstones are replaced by the coalesced one;
        // shared ones, and those since, stay.
        next.tombstones.retain(|t| !replaced.contains(&t.path));
        next.tombstones
            .extend(coalesced.iter().map(|(r, _)| r.clone()));
        let mut params = BTreeMap::new();
        params.insert("files_removed".into(), Value::from(gone.len()));
        params.insert("files_added".into(), Value::from(added.len()));
        params.insert(
            "rows_rewritten".into(),
            Value::from(added.iter().map(|f| f.total_rows).sum::<u64>()),
        );
        params.insert("tombstones_coalesced".into(), Value::from(replaced.len()));
        next.operation_parameters = params;
        Ok(Some(next))
    }))
    .and_then(|r| r);
    let forget = || {
        if let Some((_, key)) = &coalesced {
            let _ = crate::runtime::block_on(store.delete(key));
        }
    };
    match out {
        Ok(Outcome::Committed { manifest, .. }) => Ok(Some(*manifest)),
        Ok(Outcome::Unchanged { .. }) if stale => {
            forget();
            Ok(None)
        }
        Ok(Outcome::Unchanged { .. }) => Err(Error::Task("compaction committed nothing".into())),
        Err(e) => {
            if may_discard(&e) {
                forget();
                discard(store, table, added);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests;
