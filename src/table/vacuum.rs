//! GC: removing what no retained version needs.
//!
//! **What is retained.** The latest version, the version the pointer names,
//! every version numbered above either (a commit in flight, or a writer that
//! died before moving the pointer), every version created within the
//! retention window, and the newest version created before the window (so
//! that `as_of` any time within the window still reads). With
//! `keep_versions`, every version. A retained version keeps its manifest
//! and every object it references.
//!
//! **What is removed.** Objects of the key's own layout ([`Collectable::LAYOUT`])
//! that no retained version references and that are older than the window:
//! data files of writers that crashed or lost their race, manifests of
//! versions past the window (not with `keep_versions`), and files and
//! tombstones a compaction replaced once no retained version needs them;
//! of a table's Delta view, what [`super::delta::vacuum`] lets go. On
//! `file://`, also the staging files of killed uploads in that layout.
//! Objects of another layout below the key, and everything below a nested
//! key (a folder holding `_SUCCESS`, `_WRITING`, `manifest.json`,
//! `_latest_manifest` or `manifest/vN.json`), are never touched.
//!
//! **Writers in flight.** A writer uploads its files before it commits the
//! manifest that references them, so for a while they look like garbage. No
//! object younger than `min_age` (1 hour by default) is ever removed, and the
//! window may not be shorter than it: a writer that commits within
//! `min_age` of its first upload never loses a file. The store is LISTed
//! before the latest version is read, so every manifest the listing shows is
//! one the read version knows or one numbered above it, which is kept.
//!
//! A version past the window can no longer be read (`NotFound`); versions
//! within it read as before.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};

use super::snapshot::{DataFile, TableManifest, TombstoneRef};
use super::versions::{latest_at, read_version_at, BoxFuture, Depth, Versioned};
use super::{manifest_name, POINTER};
use crate::error::{Error, Result};
use crate::store::StoreHandle;

/// What vacuum found.
#[derive(Debug, Clone, Default)]
pub struct Vacuumed {
    /// Keys relative to the table key, sorted: removed, or (dry run) to remove.
    pub removed: Vec<String>,
    /// Versions whose objects were kept (those it had to read: none if
    /// nothing was old enough to remove).
    pub retained: Vec<u64>,
}

/// The floor under which no object is removed, unless lowered explicitly.
pub const DEFAULT_MIN_AGE: Duration = Duration::hours(1);

/// Keys deleted per step when a vacuum counts its progress (S3's bulk
/// DELETE takes up to 1,000).
const DELETE_BATCH: usize = 1000;

/// What a vacuum keeps and whether it deletes.
#[derive(Debug, Clone)]
pub struct VacuumOptions {
    /// Versions created within this window stay readable; unreferenced
    /// objects younger than it stay. At least `min_age`.
    pub retain: Duration,
    /// No object younger than this is removed (writers in flight).
    pub min_age: Duration,
    /// Keep every version: remove only objects no version references.
    pub keep_versions: bool,
    /// Only list what would be removed.
    pub dry_run: bool,
    /// Counts the objects deleted of those to delete (phase
    /// [`Phase::Vacuuming`](crate::progress::Phase::Vacuuming)), for a
    /// caller to show; `None`: not counted.
    pub progress: Option<std::sync::Arc<crate::progress::Progress>>,
}

impl Default for VacuumOptions {
    fn default() -> Self {
        Self {
            retain: Duration::days(7),
            min_age: DEFAULT_MIN_AGE,
            keep_versions: false,
            dry_run: true,
            progress: None,
        }
    }
}

impl VacuumOptions {
    /// Options from durations in seconds (a binding's). Any finite,
    /// non-negative number of seconds is accepted: one beyond what a
    /// duration holds is clamped (a window longer than the store's history
    /// removes nothing). `InvalidArgument` for a negative or non-finite one,
    /// or a `retain` below `min_age`.
    pub fn from_seconds(
        retain: f64,
        min_age: f64,
        keep_versions: bool,
        dry_run: bool,
    ) -> Result<Self> {
        let opts = Self {
            retain: seconds("retain", retain)?,
            min_age: seconds("min_age", min_age)?,
            keep_versions,
            dry_run,
            progress: None,
        };
        opts.check()?;
        Ok(opts)
    }

    /// `InvalidArgument` unless `0 <= min_age <= retain`.
    pub fn check(&self) -> Result<()> {
        if self.min_age < Duration::zero() {
            return Err(Error::InvalidArgument(
                "min_age must not be negative".into(),
            ));
        }
        if self.retain < self.min_age {
            return Err(Error::InvalidArgument(format!(
                "retain ({}s) must not be shorter than min_age ({}s), the age below which \
                 no object is removed (writers in flight); lower min_age explicitly if no \
                 writer can be running",
                self.retain.num_seconds(),
                self.min_age.num_seconds()
            )));
        }
        Ok(())
    }
}

/// A duration of `secs` seconds, clamped to the longest one chrono holds.
fn seconds(name: &str, secs: f64) -> Result<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(Error::InvalidArgument(format!(
            "{name} must be a finite, non-negative duration, got {secs} s"
        )));
    }
    // `as` saturates: anything past i64::MAX milliseconds becomes the max.
    let ms = (secs * 1000.0).round() as i64;
    Ok(Duration::try_milliseconds(ms).unwrap_or(Duration::MAX))
}

/// A versioned manifest vacuum can collect around: when it was created,
/// which objects (relative to its key) it references, and which objects
/// under its key are its kind's at all.
pub trait Collectable: Versioned {
    /// The objects this kind writes under its key, as `/`-separated
    /// patterns in which `*` stands for any one segment (or, beside other
    /// characters, for the rest of a segment: `deletion_vector_*.bin`). Nothing else under
    /// the key is vacuum's to remove.
    const LAYOUT: &'static [&'static str];

    fn created(&self) -> Option<DateTime<Utc>>;
    /// Add the objects this version of `table` needs, its own manifest
    /// included, reading what it references beyond its own object (a
    /// table's segments, each once per vacuum: one already in `keep` was
    /// read), a few at a time: memory does not grow with the versions.
    fn references<'a>(
        &'a self,
        store: &'a StoreHandle,
        table: &'a str,
        keep: &'a mut BTreeSet<String>,
    ) -> BoxFuture<'a, Result<()>>;
    /// Add the objects of formats published beside the key's own to keep
    /// (`oldest`: the oldest version retained; `names`: every object under
    /// the key, relative). None by default.
    fn keep_published<'a>(
        &self,
        _oldest: u64,
        _names: impl Iterator<Item = &'a str>,
        _keep: &mut BTreeSet<String>,
    ) {
    }
}

impl Collectable for TableManifest {
    const LAYOUT: &'static [&'static str] = &[
        POINTER,
        "manifest/*",
        "segment/*",
        "data/*",
        "tombstone/*",
        // The Delta view (see `delta::vacuum`).
        "_delta_log/*",
        "deletion_vector_*.bin",
    ];

    fn created(&self) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(&self.created_at)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    fn references<'a>(
        &'a self,
        store: &'a StoreHandle,
        table: &'a str,
        keep: &'a mut BTreeSet<String>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            keep.insert(manifest_name(self.version));
            // The files the root itself lists (the first format's).
            keep_files(self, table, &self.data_files, &self.tombstones, keep);
            let unread: Vec<usize> = (0..self.segments.len())
                .filter(|&i| !keep.contains(&self.segments[i].path))
                .collect();
            super::segment::visit(store, table, self, &unread, false, |_, s| {
                keep_files(self, table, &s.files, &s.tombstones, keep)
            })
            .await?;
            // Marked read once read: a version whose segments could not
            // all be read leaves them to the next version naming them.
            keep.extend(unread.iter().map(|&i| self.segments[i].path.clone()));
            Ok(())
        })
    }

    fn keep_published<'a>(
        &self,
        oldest: u64,
        names: impl Iterator<Item = &'a str>,
        keep: &mut BTreeSet<String>,
    ) {
        super::delta::vacuum::keep_log(self, oldest, names, keep);
    }
}

/// Add `files` of version `m` of `table`, their tombstones (all of them:
/// `m`'s own list, or a segment's) and their deletion vectors to `keep`.
fn keep_files(
    m: &TableManifest,
    table: &str,
    files: &[DataFile],
    tombstones: &[TombstoneRef],
    keep: &mut BTreeSet<String>,
) {
    keep.extend(files.iter().map(|f| f.path.clone()));
    keep.extend(tombstones.iter().map(|t| t.path.clone()));
    super::delta::vacuum::keep_vectors(m, table, files, tombstones, keep);
}

/// The version a manifest object name stands for (`manifest/v00000012.json`).
fn version_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("manifest/v")?.strip_suffix(".json")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Names that mark the folder holding them as a dataset, table or pipeline.
const KEY_MARKERS: &[&str] = &["_SUCCESS", "_WRITING", "manifest.json", POINTER];

/// Which names under a key belong to its own layout (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Ownership {
    layout: &'static [&'static str],
    /// Folders (relative) that hold another dataset, table or pipeline.
    nested: BTreeSet<String>,
}

impl Ownership {
    /// The ownership of a key whose objects (relative names) are `names`.
    pub(crate) fn new<'a>(
        layout: &'static [&'static str],
        names: impl Iterator<Item = &'a str>,
    ) -> Self {
        let mut nested = BTreeSet::new();
        for name in names {
            let segs: Vec<&str> = name.split('/').collect();
            let n = segs.len();
            let root = if KEY_MARKERS.contains(&segs[n - 1]) {
                Some(&segs[..n - 1])
            } else if n >= 2 && version_of(&segs[n - 2..].join("/")).is_some() {
                Some(&segs[..n - 2])
            } else {
                None
            };
            if let Some(root) = root.filter(|r| !r.is_empty()) {
                nested.insert(root.join("/"));
            }
        }
        Self { layout, nested }
    }

    /// Whether the object (or, with `folder`, the folder) `rel` is this
    /// layout's: an object matching a pattern, or a folder on the way to
    /// one; never anything in a nested key.
    pub(crate) fn owns(&self, rel: &str, folder: bool) -> bool {
        let inside = |root: &String| {
            rel == root
                || rel
                    .strip_prefix(root.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        };
        if self.nested.iter().any(inside) {
            return false;
        }
        let segs: Vec<&str> = rel.split('/').collect();
        self.layout.iter().any(|pattern| {
            let pat: Vec<&str> = pattern.split('/').collect();
            let fits = if folder {
                segs.len() < pat.len()
            } else {
                segs.len() == pat.len()
            };
            fits && pat
                .iter()
                .zip(&segs)
                .all(|(p, s)| !s.is_empty() && segment_matches(p, s))
        })
    }
}

/// Whether the name segment `s` fits the pattern segment `p`: `*` alone
/// fits any, `a*b` any that starts with `a` and ends with `b`.
fn segment_matches(p: &str, s: &str) -> bool {
    match p.split_once('*') {
        None => p == s,
        Some((head, tail)) => {
            s.len() >= head.len() + tail.len() && s.starts_with(head) && s.ends_with(tail)
        }
    }
}

/// Remove (or, with `dry_run`, list) what no retained version of `table`
/// references and is older than the window (see the module docs).
///
/// Cost: 1 LIST of the table key, the latest version (a GET of the pointer,
/// a HEAD per version past it, a GET of its root), a GET per other
/// retained root and one per segment they name (each once, whatever the
/// versions naming it; none if nothing is old enough), then a DELETE per
/// object removed (batched where the store can). Memory: the names to
/// keep, and a few segments at a time.
pub async fn vacuum(
    store: &StoreHandle,
    table: &str,
    opts: &VacuumOptions,
    now: DateTime<Utc>,
) -> Result<Vacuumed> {
    vacuum_of::<TableManifest>(store, table, opts, now).await
}

/// [`vacuum`] for any [`Collectable`] manifest (a pipeline's, say).
pub async fn vacuum_of<M: Collectable>(
    store: &StoreHandle,
    table: &str,
    opts: &VacuumOptions,
    now: DateTime<Utc>,
) -> Result<Vacuumed> {
    opts.check()?;
    // A window longer than the store's history: nothing is that old.
    let cutoff = now
        .checked_sub_signed(opts.retain)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let root = format!("{}/", table.trim_end_matches('/'));
    // LIST before reading the latest version: any manifest listed is then
    // either one the read version knows of or numbered above it.
    let listing = store.list(table, true).await?;
    // Versions are read as their roots; what they reference beyond (a
    // table's segments) is read once each when the objects to keep are
    // gathered.
    let Some(latest) = latest_at::<M>(store, table, true, Depth::Root).await? else {
        return Err(Error::NotFound {
            path: table.to_string(),
        });
    };
    // Through a handle that opened a table: that table's, or nothing.
    if let Some(opened) = super::identity::expected() {
        if super::identity::differ(latest.manifest.table_id(), Some(opened.as_str())) {
            return Err(super::identity::gone(
                table,
                Some(&opened),
                Some(latest.manifest.table_id()),
            ));
        }
    }
    // An earlier format's objects are left as they are until upgraded.
    latest.manifest.check_writable(table)?;
    let objects: Vec<(&str, DateTime<Utc>)> = listing
        .objects
        .iter()
        .filter_map(|o| Some((o.key.strip_prefix(&root)?, o.last_modified)))
        .collect();
    let owner = Ownership::new(M::LAYOUT, objects.iter().map(|(rel, _)| *rel));
    let candidates: Vec<&str> = objects
        .iter()
        .filter(|(rel, modified)| *modified < cutoff && owner.owns(rel, false))
        .map(|(rel, _)| *rel)
        .collect();
    let mut removed = Vec::new();
    let mut retained = Vec::new();
    if !candidates.is_empty() {
        let mut keep =
            retain::<M>(store, table, &latest, &objects, cutoff, opts, &mut retained).await?;
        let oldest = retained.iter().copied().min().unwrap_or(0);
        latest
            .manifest
            .keep_published(oldest, objects.iter().map(|(rel, _)| *rel), &mut keep);
        removed = candidates
            .into_iter()
            .filter(|rel| !keep.contains(*rel))
            .map(str::to_string)
            .collect();
    }
    removed.sort();
    let deleting = if opts.dry_run {
        0
    } else {
        removed.len() as u64
    };
    crate::progress::start(
        opts.progress.as_deref(),
        crate::progress::Phase::Vacuuming,
        Some(deleting),
    );
    if !opts.dry_run && !removed.is_empty() {
        let keys: Vec<String> = removed.iter().map(|r| format!("{root}{r}")).collect();
        match opts.progress.as_deref() {
            None => store.delete_many(&keys).await?,
            Some(p) => {
                // In batches of a bulk DELETE (S3's largest), counted as each ends.
                for batch in keys.chunks(DELETE_BATCH) {
                    store.delete_many(batch).await?;
                    p.add(batch.len() as u64, 0, 0, 0);
                }
            }
        }
    }
    if let (false, Some(older)) = (opts.dry_run, system_time(cutoff)) {
        // file:// only: staging files of killed uploads, which no LIST shows.
        let sweep = owner.clone();
        let owns = move |rel: &str, folder: bool| sweep.owns(rel, folder);
        for key in store
            .remove_staging(table, Some(older), owns, false)
            .await?
        {
            if let Some(rel) = key.strip_prefix(&root) {
                removed.push(rel.to_string());
            }
        }
        removed.sort();
    }
    retained.sort_unstable();
    Ok(Vacuumed { removed, retained })
}

/// Everything the retained versions need (see the module docs), relative
/// to the key; the versions read go to `retained`.
async fn retain<M: Collectable>(
    store: &StoreHandle,
    table: &str,
    latest: &super::versions::Latest<M>,
    objects: &[(&str, DateTime<Utc>)],
    cutoff: DateTime<Utc>,
    opts: &VacuumOptions,
    retained: &mut Vec<u64>,
) -> Result<BTreeSet<String>> {
    let newest = latest.manifest.version();
    // The pointer may lag the latest version: what it names stays readable.
    let floor = latest.pointed().map_or(newest, |p| p.min(newest));
    let mut keep = BTreeSet::from([POINTER.to_string()]);
    latest.manifest.references(store, table, &mut keep).await?;
    retained.push(newest);
    let mut versions: Vec<u64> = objects
        .iter()
        .filter_map(|(rel, _)| version_of(rel))
        .filter(|v| *v != newest)
        .collect();
    versions.sort_unstable_by(|a, b| b.cmp(a));
    versions.dedup();
    // Whether the oldest version kept so far was created within the window.
    let mut within = latest.manifest.created().is_some_and(|t| t >= cutoff);
    for v in versions {
        let always = v >= floor;
        if always {
            keep.insert(manifest_name(v));
        } else if !opts.keep_versions && !within {
            break; // The newest version before the window is kept: older ones go.
        }
        let m = match read_version_at::<M>(store, table, v, Depth::Root).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        match m.references(store, table, &mut keep).await {
            // Removed meanwhile (by another vacuum): nothing of it to keep.
            Err(Error::VersionNotFound { .. }) => continue,
            other => other?,
        }
        retained.push(v);
        if v < newest {
            within = m.created().is_some_and(|t| t >= cutoff);
        }
    }
    Ok(keep)
}

/// `cutoff` as a file time; `None` if no file can be older.
fn system_time(cutoff: DateTime<Utc>) -> Option<std::time::SystemTime> {
    let epoch = std::time::SystemTime::UNIX_EPOCH;
    let since = cutoff.signed_duration_since(DateTime::<Utc>::UNIX_EPOCH);
    match since.to_std() {
        Ok(d) => epoch.checked_add(d),
        Err(_) => epoch.checked_sub((-since).to_std().ok()?),
    }
}

#[cfg(test)]
mod tests;
