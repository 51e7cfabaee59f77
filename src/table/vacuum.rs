//! GC: removing what no retained version needs.
//!
//! A version is retained if it is the latest, if it was created within the
//! retention window, or if it is the newest version created before the
//! window (so that `as_of` any time within the window still reads). Every
//! object under the table key that a retained version references is kept,
//! and so is the pointer. Any other object is removed once it is older than
//! the window: data files of writers that crashed before committing, the
//! manifests of versions past the window, and tombstones a compaction
//! coalesced. Objects younger than the window are kept whatever they are,
//! so a writer still uploading is never robbed of its files.
//!
//! A version past the window can no longer be read (`NotFound`); versions
//! within it read as before.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};

use super::commit::{latest_of, read_version_of, Versioned};
use super::snapshot::TableManifest;
use super::{manifest_name, POINTER};
use crate::error::{Error, Result};
use crate::store::StoreHandle;

/// What vacuum found.
#[derive(Debug, Clone, Default)]
pub struct Vacuumed {
    /// Keys relative to the table key, sorted: removed, or (dry run) to remove.
    pub removed: Vec<String>,
    /// Versions whose objects were kept.
    pub retained: Vec<u64>,
}

/// A versioned manifest vacuum can collect around: when it was created and
/// which objects (relative to its key) it references.
pub trait Collectable: Versioned {
    fn created(&self) -> Option<DateTime<Utc>>;
    /// Add the objects this version needs, its own manifest included.
    fn references(&self, keep: &mut BTreeSet<String>);
}

impl Collectable for TableManifest {
    fn created(&self) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(&self.created_at)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    fn references(&self, keep: &mut BTreeSet<String>) {
        keep.insert(manifest_name(self.version));
        keep.extend(self.data_files.iter().map(|f| f.path.clone()));
        keep.extend(self.tombstones.iter().map(|t| t.path.clone()));
    }
}

/// The version a manifest object name stands for (`manifest/v00000012.json`).
fn version_of(name: &str) -> Option<u64> {
    name.strip_prefix("manifest/v")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// Remove (or, with `dry_run`, list) what no retained version of `table`
/// references and is older than `retain`.
///
/// Cost: 1 LIST of the table key, a GET per manifest within the window (and
/// the pointer's), then a DELETE per object removed.
pub async fn vacuum(
    store: &StoreHandle,
    table: &str,
    retain: Duration,
    dry_run: bool,
    now: DateTime<Utc>,
) -> Result<Vacuumed> {
    vacuum_of::<TableManifest>(store, table, retain, dry_run, now).await
}

/// [`vacuum`] for any [`Collectable`] manifest (a pipeline's, say).
pub async fn vacuum_of<M: Collectable>(
    store: &StoreHandle,
    table: &str,
    retain: Duration,
    dry_run: bool,
    now: DateTime<Utc>,
) -> Result<Vacuumed> {
    if retain < Duration::zero() {
        return Err(Error::InvalidArgument("retain must not be negative".into()));
    }
    let Some(latest) = latest_of::<M>(store, table, true).await? else {
        return Err(Error::NotFound {
            path: table.to_string(),
        });
    };
    let cutoff = now - retain;
    let root = format!("{}/", table.trim_end_matches('/'));
    let listing = store.list(table, true).await?;
    let mut keep = BTreeSet::new();
    keep.insert(POINTER.to_string());
    latest.manifest.references(&mut keep);
    let mut retained = vec![latest.manifest.version()];
    // Manifests by version, newest first: keep those created within the
    // window and the newest one before it.
    let mut versions: Vec<u64> = listing
        .objects
        .iter()
        .filter_map(|o| version_of(o.key.strip_prefix(&root)?))
        .filter(|v| *v < latest.manifest.version())
        .collect();
    versions.sort_unstable_by(|a, b| b.cmp(a));
    if latest.manifest.created().is_none_or(|t| t < cutoff) {
        versions.clear(); // The latest is what `as_of` the cutoff reads.
    }
    for v in versions {
        let m = match read_version_of::<M>(store, table, v).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        m.references(&mut keep);
        retained.push(v);
        if m.created().is_none_or(|t| t < cutoff) {
            break; // The newest version before the window: older ones go.
        }
    }
    let mut removed: Vec<String> = listing
        .objects
        .iter()
        .filter(|o| o.last_modified < cutoff)
        .filter_map(|o| o.key.strip_prefix(&root).map(str::to_string))
        .filter(|rel| !keep.contains(rel))
        .collect();
    removed.sort();
    if !dry_run && !removed.is_empty() {
        let keys: Vec<String> = removed.iter().map(|r| format!("{root}{r}")).collect();
        store.delete_many(&keys).await?;
    }
    if !dry_run {
        // file:// only: staging files of killed uploads, which no LIST shows.
        let older: std::time::SystemTime = cutoff.into();
        for key in store.remove_staging(table, older).await? {
            if let Some(rel) = key.strip_prefix(&root) {
                removed.push(rel.to_string());
            }
        }
        removed.sort();
    }
    retained.sort_unstable();
    Ok(Vacuumed { removed, retained })
}
