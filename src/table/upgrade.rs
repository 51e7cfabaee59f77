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
//! - [`upgrade_table`]: the same files and tombstones, laid out in segments
//!   (`pds-table/2`), sealed, with each tombstone's SHA-256 (an unsealed
//!   `pds-table/1` recorded none: each tombstone is read once, checked as a
//!   tombstone, and hashed). No data file is rewritten.
//! - [`upgrade_pipeline`]: the same graph and parts in a sealed manifest.
//!
//! The new version is committed by the compare-and-swap loop like any
//! commit ([`super::commit`]): a racing writer either commits first (the
//! upgrade then builds on its version, losing nothing) or loses the race
//! and, reading the upgraded version, commits on it. A table or pipeline
//! already in the current format is left alone (no request beyond the
//! read). Earlier versions stay as they were, readable by time travel.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::commit::{self, CommitOptions, Depth, Outcome, Versioned};
use super::snapshot::{TableManifest, View, Written, FORMAT};
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
/// its entries name (a bare tombstone path in the first tables named none):
/// one GET per such tombstone, each checked as a tombstone.
async fn tombstone_sums(
    store: &StoreHandle,
    table: &str,
    m: &TableManifest,
) -> Result<HashMap<String, (String, Vec<String>)>> {
    let listed: HashSet<&str> = m.data_files.iter().map(|f| f.path.as_str()).collect();
    let mut sums = HashMap::new();
    for t in m.tombstones.iter().filter(|t| t.sha256.is_empty()) {
        let key = format!("{}/{}", table.trim_end_matches('/'), t.path);
        let raw = store.get(&key).await.map_err(|e| match e {
            Error::NotFound { path } => Error::ManifestCorrupted {
                path,
                reason: "a tombstone the manifest lists is missing".into(),
            },
            other => other,
        })?;
        let parsed = super::tombstone::Tombstone::from_json(&raw, &key)?;
        let files: std::collections::BTreeSet<String> = parsed
            .entries
            .iter()
            .map(|e| e.file().to_string())
            .collect();
        if let Some(f) = files.iter().find(|f| !listed.contains(f.as_str())) {
            return Err(Error::ManifestCorrupted {
                path: key,
                reason: format!("it deletes rows of {f:?}, which is not a data file of the table"),
            });
        }
        let sum = crate::parquet::encode::sha256_hex(&raw);
        sums.insert(t.path.clone(), (sum, files.into_iter().collect()));
    }
    Ok(sums)
}

/// `base` (in an earlier format) as the next version in [`FORMAT`]; `None`
/// if a tombstone it lists is not in `sums` (added since they were read).
fn upgraded_table(
    base: &TableManifest,
    from: &str,
    sums: &HashMap<String, (String, Vec<String>)>,
) -> Option<TableManifest> {
    let mut next = base.clone();
    for t in &mut next.tombstones {
        if t.sha256.is_empty() {
            let (sum, files) = sums.get(&t.path)?;
            t.sha256 = sum.clone();
            t.files = files.clone();
        }
    }
    next.format = FORMAT.into();
    next.created_at = crate::dataset::manifest::now_iso8601();
    next.operation = "upgrade".into();
    next.operation_parameters = BTreeMap::from([("from_format".to_string(), from.into())]);
    next.segments.clear();
    next.layout.bodies.clear();
    next.layout.view = View::Full;
    next.layout.laid_out = false;
    next.layout.written = Written::Current;
    Some(next)
}

/// Upgrade the table at `table` to [`FORMAT`] (see the module docs).
///
/// Cost: the latest version (2 GETs and a HEAD); if it is in an earlier
/// format, a GET per tombstone recorded without a SHA-256, a PUT per
/// segment of its file list (1,000 files each), and a commit (2 PUTs).
/// `NotFound` if there is no table; `ManifestCorrupted` if a version or a
/// tombstone is damaged; `CommitConflict` if writers keep winning.
pub async fn upgrade_table(store: &StoreHandle, table: &str) -> Result<Upgraded> {
    for _ in 0..MAX_REREADS {
        let Some(latest) =
            commit::latest_at::<TableManifest>(store, table, false, Depth::Full).await?
        else {
            return Err(super::not_found(store, table, "table").await);
        };
        let Some(from) = latest.manifest.earlier_format() else {
            return Ok(Upgraded {
                from: None,
                version: latest.manifest.version,
            });
        };
        let sums = tombstone_sums(store, table, &latest.manifest).await?;
        let mut stale = false;
        let opts = CommitOptions {
            upgrade: true,
            ..Default::default()
        };
        let out = commit::commit(store, table, &opts, Some(latest), |base| {
            let Some(base) = base else {
                return Err(Error::NotFound {
                    path: table.to_string(),
                });
            };
            let Some(from) = base.earlier_format() else {
                return Ok(None);
            };
            match upgraded_table(base, from, &sums) {
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
        return Ok(upgraded(out, from));
    }
    Err(Error::CommitConflict {
        key: table.to_string(),
        attempts: MAX_REREADS,
    })
}

/// Upgrade the pipeline at `root` to a sealed manifest (see the module
/// docs): the same graph and parts, as a version whose operation is
/// `upgrade` and whose nodes changed nothing.
///
/// Cost: the latest version (2 GETs); if it is unsealed, a commit (2 PUTs).
/// `NotFound` if there is no pipeline; `CommitConflict` if writers keep
/// winning.
pub async fn upgrade_pipeline(store: &StoreHandle, root: &str) -> Result<Upgraded> {
    let Some(latest) = commit::latest_of::<PipelineManifest>(store, root, false).await? else {
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
