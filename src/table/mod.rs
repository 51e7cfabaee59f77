//! Tables: versions committed by compare-and-swap on plain object storage,
//! with no lock service.
//!
//! Objects under a table key:
//!
//! - `_latest_manifest`: the pointer, the one mutable object. It names the
//!   latest version (`{"version": N, "manifest": "manifest/v0000000N.json"}`);
//!   created with If-None-Match, replaced with If-Match.
//! - `manifest/vNNNNNNNN.json`: one immutable manifest per version (see
//!   [`snapshot`]), created with If-None-Match.
//! - `data/...parquet`, `tombstone/....del`: immutable, uniquely named.
//!
//! **Who gets version N.** The writer whose create-only PUT of
//! `manifest/vN.json` succeeds: the object store arbitrates, once and for
//! all, and a version is committed the moment its manifest exists. The
//! pointer is then moved by compare-and-swap so that readers find the latest
//! version in one GET. A writer that dies between the two leaves a committed
//! version the pointer does not name yet: readers and writers look one name
//! past the pointer (a HEAD) and roll it forward, so such a writer never
//! blocks later writers, and no half-written commit can be seen (a create-only
//! PUT is atomic). A writer that dies before its manifest PUT leaves only
//! unreferenced data files: garbage for vacuum.
//!
//! This layer is the commit machinery (the model of a version and the commit
//! loop). Appends, deletes with tombstones, scans, time travel, compaction
//! and vacuum build on it.

pub mod changes;
pub mod commit;
pub mod compact;
pub mod delete;
pub mod delta;
pub mod drop;
pub mod enable_format;
#[cfg(test)]
mod fault_tests;
pub mod files;
pub mod formats;
pub mod identity;
pub mod prune;
pub mod replace;
pub mod rewrite;
pub mod scan;
pub mod schema;
pub mod sealed;
pub mod segment;
pub mod snapshot;
#[cfg(test)]
mod tests;
pub mod tombstone;
pub mod update;
pub mod upgrade;
pub mod upsert;
pub mod vacuum;
pub mod versions;
pub mod write;

use crate::error::{Error, Result};
pub use crate::spec::table::Pointer;

/// The highest version a pointer or manifest may name (versions count in i64
/// wherever they meet Arrow or Python's readers).
pub const MAX_VERSION: u64 = i64::MAX as u64;

/// The pointer's name under the table key.
pub const POINTER: &str = crate::store::occupancy::POINTER;

/// `table/_latest_manifest`.
pub fn pointer_key(table: &str) -> String {
    format!("{}/{POINTER}", table.trim_end_matches('/'))
}

/// `manifest/v00000123.json`, relative to the table key.
pub fn manifest_name(version: u64) -> String {
    format!("manifest/v{version:08}.json")
}

/// `table/manifest/v00000123.json`.
pub fn manifest_key(table: &str, version: u64) -> String {
    format!("{}/{}", table.trim_end_matches('/'), manifest_name(version))
}

/// The error for no `what` (`"table"`, `"pipeline"`) at `key`: `NotFound`,
/// or, if something else lives at, around or below the key (a dataset, a
/// pipeline, ...), an error that says what and how to read it (Python:
/// `NotFound` too). Costs what [`occupancy`] costs (error path only).
///
/// [`occupancy`]: crate::store::occupancy::occupancy
pub async fn not_found(store: &crate::store::StoreHandle, key: &str, what: &str) -> Error {
    use crate::store::occupancy::{occupancy, Kind};
    let key = key.trim_end_matches('/');
    let wanted = Kind::parse(what).unwrap_or(Kind::Table);
    match occupancy(store, key).await {
        Ok(found) => match found.describe_for(key, wanted) {
            Some(reason) => Error::OtherKind {
                path: key.to_string(),
                reason,
            },
            None => Error::NotFound {
                path: key.to_string(),
            },
        },
        Err(e @ Error::BucketNotFound { .. }) => e,
        Err(_) => Error::NotFound {
            path: key.to_string(),
        },
    }
}

/// The error for an object of `version` that is missing (`what`, e.g.
/// `data file "…"`, and the key the store named, `path`): if the version's
/// manifest is gone too, vacuum removed the version after it was read here
/// (`VersionNotFound` saying so); else the table is damaged
/// (`ManifestCorrupted` naming the manifest and the missing object).
///
/// Cost: 1 HEAD (error path only).
pub async fn missing_object(
    store: &crate::store::StoreHandle,
    table: &str,
    version: u64,
    what: &str,
) -> Error {
    let manifest = manifest_key(table, version);
    match store.try_head(&manifest).await {
        Ok(None) => Error::VersionNotFound {
            path: table.to_string(),
            reason: format!(
                "version {version} of table {table:?} is gone: vacuum removed it (its manifest \
                 and the objects only it needed) after it was read here. Read the latest \
                 version, or one within vacuum's retention window"
            ),
        },
        Ok(Some(_)) => Error::ManifestCorrupted {
            path: manifest,
            reason: format!("its {what} is missing (removed by hand, or by vacuum with min_age=0 while this version was being written)"),
        },
        // The check failed (a timeout, a refusal): that error, not a verdict.
        Err(e) => e,
    }
}

impl Pointer {
    pub fn new(version: u64, table_id: Option<&str>) -> Self {
        Self {
            version,
            manifest: manifest_name(version),
            table_id: table_id.map(str::to_string),
        }
    }

    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self)
            .map_err(|e| Error::InvalidArgument(format!("pointer is not serialisable: {e}")))
    }

    /// Parse a pointer read from `path`; `ManifestCorrupted` if it is not one.
    pub fn from_json(raw: &[u8], path: &str) -> Result<Self> {
        let p: Pointer = serde_json::from_slice(raw).map_err(|e| Error::ManifestCorrupted {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        if p.version > MAX_VERSION {
            return Err(Error::ManifestCorrupted {
                path: path.to_string(),
                reason: format!("version {} is beyond any table", p.version),
            });
        }
        if p.manifest != manifest_name(p.version) {
            return Err(Error::ManifestCorrupted {
                path: path.to_string(),
                reason: format!("it names {:?} for version {}", p.manifest, p.version),
            });
        }
        if let Some(id) = &p.table_id {
            identity::check(id).map_err(|reason| Error::ManifestCorrupted {
                path: path.to_string(),
                reason,
            })?;
        }
        Ok(p)
    }
}
