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
//! Concurrency: appends that land meanwhile are rebased on. A delete that
//! lands meanwhile and touches a file being rewritten would be lost by the
//! rewrite, so the compaction then starts over from the new version (up to
//! [`MAX_REPLANS`] times, then `CommitConflict`, having removed its new
//! files): no concurrent change is ever lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::RecordBatchReader;
use serde_json::Value;

use super::commit::{self, CommitOptions, Outcome};
use super::scan::{deleted_positions, scan, ScanOptions};
use super::snapshot::{DataFile, TableManifest, TombstoneRef};
use super::tombstone::{self, Entry, Tombstone};
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
    pub manifest: TableManifest,
    pub committed: bool,
    pub files_removed: usize,
    pub files_added: usize,
}

/// The files to rewrite or drop, and the rows left in those rewritten.
struct Plan {
    rewrite: Vec<DataFile>,
    drop: Vec<DataFile>,
    live_rows: u64,
}

async fn plan(
    store: &StoreHandle,
    table: &str,
    base: &TableManifest,
    opts: &CompactOptions,
    target: u64,
) -> Result<Plan> {
    let tombstones = tombstone::load_version(store, table, base).await?;
    let deletes = tombstone::fold(&tombstones)?;
    let mut rewrite = Vec::new();
    let mut drop = Vec::new();
    let mut small = Vec::new();
    let mut live_rows = 0u64;
    for f in &base.data_files {
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
/// Cost: the tombstones, a footer per file with whole-row-group deletes, the
/// key column of files with key-range deletes; then the rewritten files are
/// read and written, one tombstone PUT, and the commit (2 PUTs).
pub fn compact(store: Arc<StoreHandle>, table: &str, opts: CompactOptions) -> Result<Compacted> {
    crate::store::keys::object_segments(table)?;
    let started = crate::store::counted::Started::now(&store);
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
    for _ in 0..MAX_REPLANS {
        let latest = commit::latest_existing(&store, table)?;
        let base = latest.manifest.clone();
        let mut props = base.properties.clone();
        let target = opts
            .target_file_size
            .or(props.target_file_size)
            .unwrap_or(DEFAULT_TARGET_FILE_SIZE);
        props.target_file_size = Some(target);
        let plan = crate::runtime::block_on(plan(&store, table, &base, &opts, target))??;
        crate::progress::start(
            opts.progress.as_deref(),
            Phase::Compacting,
            Some(plan.live_rows),
        );
        // Coalescing several tombstones into one is reason enough to commit.
        // So is merging small manifest segments.
        if plan.rewrite.is_empty()
            && plan.drop.is_empty()
            && base.tombstones.len() <= 1
            && !super::segment::needs_repack(&base.segments)
        {
            return Ok(Compacted {
                manifest: base,
                committed: false,
                files_removed: 0,
                files_added: 0,
            });
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
            upload(&store, table, rows, schema, &props, opts.parallelism, None)?
        };
        match commit_compaction(&store, table, latest, &plan, &added)? {
            Some(manifest) => {
                super::commit::log_committed(&store, table, &manifest, &started);
                return Ok(Compacted {
                    manifest,
                    committed: true,
                    files_removed: plan.rewrite.len() + plan.drop.len(),
                    files_added: added.len(),
                });
            }
            None => discard(&store, table, &added),
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

/// Coalesce the tombstones that still apply into one object, PUT it and
/// commit; `None` if a concurrent change touched the files rewritten.
fn commit_compaction(
    store: &Arc<StoreHandle>,
    table: &str,
    latest: commit::Latest,
    plan: &Plan,
    added: &[DataFile],
) -> Result<Option<TableManifest>> {
    let base = latest.manifest.clone();
    let gone: BTreeSet<String> = plan
        .rewrite
        .iter()
        .chain(&plan.drop)
        .map(|f| f.path.clone())
        .collect();
    let tombstones = crate::runtime::block_on(tombstone::load_version(store, table, &base))??;
    // The entries of the files kept; each file's position bitmaps merged.
    let mut kept: BTreeMap<String, (Vec<Entry>, roaring::RoaringBitmap)> = BTreeMap::new();
    for t in &tombstones {
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
    let base_tombstones: BTreeSet<String> =
        base.tombstones.iter().map(|t| t.path.clone()).collect();
    let mut stale = false;
    let out = crate::runtime::block_on(commit::commit(
        store,
        table,
        &CommitOptions::default(),
        Some(latest),
        |now| {
            let now = now.ok_or_else(|| Error::NotFound {
                path: table.to_string(),
            })?;
            let present: BTreeSet<&str> = now.data_files.iter().map(|f| f.path.as_str()).collect();
            let newer: Vec<TombstoneRef> = now
                .tombstones
                .iter()
                .filter(|t| !base_tombstones.contains(&t.path))
                .cloned()
                .collect();
            let touched = newer
                .iter()
                .any(|t| t.files.iter().any(|f| gone.contains(f)));
            // The coalesced tombstone replaces the base's tombstones and marks
            // the files kept: an overwrite or another compaction that removed
            // any of them makes this plan stale.
            let kept_now: BTreeSet<&str> = now.tombstones.iter().map(|t| t.path.as_str()).collect();
            let lost_tombstone = base_tombstones
                .iter()
                .any(|t| !kept_now.contains(t.as_str()));
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
            next.tombstones = coalesced.iter().map(|(r, _)| r.clone()).collect();
            next.tombstones.extend(newer.iter().cloned());
            let mut params = BTreeMap::new();
            params.insert("files_removed".into(), Value::from(gone.len()));
            params.insert("files_added".into(), Value::from(added.len()));
            params.insert(
                "rows_rewritten".into(),
                Value::from(added.iter().map(|f| f.total_rows).sum::<u64>()),
            );
            params.insert(
                "tombstones_coalesced".into(),
                Value::from(base.tombstones.len()),
            );
            next.operation_parameters = params;
            Ok(Some(next))
        },
    ))
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
