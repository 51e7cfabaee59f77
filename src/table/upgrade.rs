//! Explicit upgrades of tables and pipelines written in an earlier format.
//!
//! The policy: this pds reads every format an earlier pds wrote (see
//! [`super::snapshot`]'s and [`crate::producers::manifest`]'s "Format
//! versions"), and writes only the current one. It never upgrades silently:
//! a pds that reads only the earlier format could not read the table any
//! more. So a table or pipeline whose latest version is in an earlier format
//! is read-only (every commit is `UpgradeRequired`) until one of these calls
//! commits a new version in the current format:
//!
//! - [`upgrade_table`]: a `pds-table/1` table's files and tombstones, laid
//!   out in segments in the current format, sealed, with each tombstone's
//!   SHA-256 (an unsealed `pds-table/1` recorded none: each tombstone is
//!   read once, checked as a tombstone, and hashed) and a fresh `table_id`
//!   (that format had none; see [`super::identity`]). No data file is
//!   rewritten. A table in `pds-table/2` (writable, but whose schema
//!   changes rewrite every segment) is taken to the current format by a
//!   root-only commit: its segments are valid as they are, and it keeps
//!   its `table_id` (one created by pds before ids gets one).
//! - [`upgrade_pipeline`]: the same graph and parts in a manifest of the
//!   current format (sealed, `pds-pipeline/2`): no part is rewritten.
//!
//! The new version is committed by the compare-and-swap loop like any
//! commit ([`super::commit`]): a racing writer either commits first (the
//! upgrade then builds on its version, losing nothing) or loses the race
//! and, reading the upgraded version, commits on it. A table or pipeline
//! already in the current format is left alone (no request beyond the
//! read). Earlier versions stay as they were, readable by time travel.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::commit::{self, CommitOptions, Outcome};
use super::identity;
use super::snapshot::{TableManifest, View, Written, FORMAT};
use super::versions;
use super::versions::{Depth, Versioned};
use crate::error::{Error, Result};
use crate::producers::manifest::PipelineManifest;
use crate::store::StoreHandle;

/// What an upgrade did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgraded {
    /// The earlier format the latest version was in (`None`: it was
    /// already current, and nothing was written).
    pub from: Option<&'static str>,
    /// The latest version after the call: the upgrade's if it committed.
    pub version: u64,
}

/// Lost races an upgrade of a table retries when a writer of the earlier
/// format adds a tombstone between its read and its commit.
const MAX_REREADS: u32 = 8;

/// The SHA-256 of each tombstone `m` lists without one, and the data files
/// its entries name (a bare tombstone path in the first tables named every
/// data file of its version): one GET per such tombstone, each checked as
/// reads check it ([`Tombstone::check_files`]: entries only for files its
/// reference names), so that what reads refuse does not upgrade, and what
/// they accept does.
///
/// [`Tombstone::check_files`]: super::tombstone::Tombstone::check_files
async fn tombstone_sums(
    store: &StoreHandle,
    table: &str,
    m: &TableManifest,
) -> Result<HashMap<String, (String, Vec<String>)>> {
    let mut sums = HashMap::new();
    for t in m.tombstones.iter().filter(|t| t.sha256.is_empty()) {
        let (key, raw) = super::tombstone::fetch(store, table, m.version, &t.path).await?;
        let parsed = super::tombstone::Tombstone::from_json(&raw, &key)?;
        parsed.check_files(t, &key, None)?;
        let files: BTreeSet<String> = parsed
            .entries
            .iter()
            .map(|e| e.file().to_string())
            .collect();
        let sum = crate::parquet::encode::sha256_hex(&raw);
        sums.insert(t.path.clone(), (sum, files.into_iter().collect()));
    }
    Ok(sums)
}

/// `NotFound` (saying so) unless `m` (`None`: no table) is a version of
/// the table the caller opened, if it said which (see
/// [`identity::expecting`]): as every commit checks, and more: a table
/// with an id was created in the current format and never goes back, so
/// a version in an earlier format (which has no id) is another table's,
/// created at the key after the caller's was dropped.
fn check_opened(table: &str, m: Option<&TableManifest>) -> Result<()> {
    let Some(id) = identity::expected() else {
        return Ok(());
    };
    match m {
        None => Err(identity::gone(table, Some(&id), None)),
        Some(m)
            if m.earlier_format().is_some()
                || identity::differ(m.table_id.as_deref(), Some(&id)) =>
        {
            Err(identity::gone(
                table,
                Some(&id),
                Some(m.table_id.as_deref()),
            ))
        }
        Some(_) => Ok(()),
    }
}

/// `base` (in an earlier format) as the next version in [`FORMAT`], with
/// the id `table_id`; `None` if a tombstone it lists is not in `sums`
/// (added since they were read).
fn upgraded_table(
    base: &TableManifest,
    from: &str,
    sums: &HashMap<String, (String, Vec<String>)>,
    table_id: &str,
) -> Option<TableManifest> {
    let mut next = base.clone();
    // Earlier formats had no id: the table gets one now, as a created
    // table does (see `identity`), and handles that open it from now on
    // are bound to it.
    if next.table_id.is_none() {
        next.table_id = Some(table_id.to_string());
    }
    next.created_at = crate::dataset::manifest::now_iso8601();
    next.operation = "upgrade".into();
    next.operation_parameters = BTreeMap::from([("from_format".to_string(), from.into())]);
    if base.layout.written == Written::Segmented {
        // Its root and segments, as they are, are a valid version in
        // FORMAT: the root alone is written.
        next.layout.written = Written::Current;
        return Some(next);
    }
    for t in &mut next.tombstones {
        if t.sha256.is_empty() {
            let (sum, files) = sums.get(&t.path)?;
            t.sha256 = sum.clone();
            t.files = files.clone();
        }
    }
    next.format = FORMAT.into();
    next.segments.clear();
    next.layout.bodies.clear();
    next.layout.view = View::Full;
    next.layout.laid_out = false;
    next.layout.written = Written::Current;
    Some(next)
}

/// Upgrade the table at `table` to [`FORMAT`] (see the module docs).
///
/// Cost: the latest version (2 GETs and a HEAD); if it is in
/// `pds-table/1`, a GET per tombstone recorded without a SHA-256, a PUT per
/// segment of its file list (1,000 files each), and a commit (2 PUTs); if
/// it is in `pds-table/2`, a commit (2 PUTs).
/// An upgraded table without a `table_id` gets a fresh one: from then on a
/// handle that opened it commits only to it (see [`identity`]).
///
/// `NotFound` if there is no table, or (under [`identity::expecting`]) not
/// the one the caller opened; `ManifestCorrupted` if a version or a
/// tombstone is damaged (`VersionNotFound` if vacuum removed the version
/// being upgraded meanwhile); `CommitConflict` if writers keep winning.
pub async fn upgrade_table(store: &StoreHandle, table: &str) -> Result<Upgraded> {
    let table_id = identity::new_table_id();
    for _ in 0..MAX_REREADS {
        // A pds-table/1 root holds its whole file list; a later one's
        // segments are kept as they are.
        let latest = versions::latest_at::<TableManifest>(store, table, false, Depth::Root).await?;
        check_opened(table, latest.as_ref().map(|l| &l.manifest))?;
        let Some(latest) = latest else {
            return Err(super::not_found(store, table, "table").await);
        };
        let Some(from) = latest.manifest.layout.written.upgradable() else {
            return Ok(Upgraded {
                from: None,
                version: latest.manifest.version,
            });
        };
        let sums = tombstone_sums(store, table, &latest.manifest).await?;
        let mut stale = false;
        // The format of the version the commit built on (an older pds may
        // have upgraded the table from pds-table/1 to /2 meanwhile).
        let mut built_on = from;
        let opts = CommitOptions {
            upgrade: true,
            depth: Depth::Root,
            ..Default::default()
        };
        let out = commit::commit(store, table, &opts, Some(latest), |base| {
            check_opened(table, base)?;
            let Some(base) = base else {
                return Err(Error::NotFound {
                    path: table.to_string(),
                });
            };
            let Some(from) = base.layout.written.upgradable() else {
                return Ok(None);
            };
            built_on = from;
            match upgraded_table(base, from, &sums, &table_id) {
                Some(next) => Ok(Some(next)),
                None => {
                    stale = true;
                    Ok(None)
                }
            }
        })
        .await?;
        if stale {
            continue;
        }
        return Ok(upgraded(out, built_on));
    }
    Err(Error::CommitConflict {
        key: table.to_string(),
        attempts: MAX_REREADS,
    })
}

/// Upgrade the pipeline at `root` to the current format (see the module
/// docs): the same graph and parts, as a version whose operation is
/// `upgrade` and whose nodes changed nothing.
///
/// Cost: the latest version (2 GETs); if it is in an earlier format, a
/// commit (2 PUTs).
/// `NotFound` if there is no pipeline; `CommitConflict` if writers keep
/// winning.
pub async fn upgrade_pipeline(store: &StoreHandle, root: &str) -> Result<Upgraded> {
    let Some(latest) = versions::latest_of::<PipelineManifest>(store, root, false).await? else {
        return Err(super::not_found(store, root, "pipeline").await);
    };
    let Some(from) = latest.manifest.earlier_format() else {
        return Ok(Upgraded {
            from: None,
            version: latest.manifest.version,
        });
    };
    let opts = CommitOptions {
        upgrade: true,
        ..Default::default()
    };
    let out =
        commit::commit_versioned::<PipelineManifest, _>(store, root, &opts, Some(latest), |base| {
            let Some(base) = base else {
                return Err(Error::NotFound {
                    path: root.to_string(),
                });
            };
            let Some(from) = base.earlier_format() else {
                return Ok(None);
            };
            let nodes = base
                .nodes
                .iter()
                .map(|(name, state)| (name.clone(), state.carried()))
                .collect();
            Ok(Some(PipelineManifest::new(
                "upgrade",
                serde_json::json!({ "from_format": from }),
                base.graph.clone(),
                nodes,
            )))
        })
        .await?;
    Ok(upgraded(out, from))
}

/// What an upgrade's commit from `from` did: committed, or nothing to do
/// (another upgrade won the race).
fn upgraded<M: Versioned>(out: Outcome<M>, from: &'static str) -> Upgraded {
    match out {
        Outcome::Committed { manifest, .. } => Upgraded {
            from: Some(from),
            version: manifest.version(),
        },
        Outcome::Unchanged { version } => Upgraded {
            from: None,
            version: version.unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests;
