//! Enabling a published format (see [`super::formats`]) on an existing
//! table.
//!
//! A table created with a format publishes it from version 0. Enabling one
//! later commits a version that names it (the same data files and deletes,
//! operation `enable_format`), and the format starts at that version: for
//! `delta`, with a checkpoint of it, so no earlier version is needed.

use crate::error::{Error, Result};
use crate::store::StoreHandle;
use crate::table::commit::{self, CommitOptions, Outcome};
use crate::table::formats::{check, known};
use crate::table::snapshot::{PublishedFormat, TableManifest};
use crate::table::versions;
use crate::table::versions::Depth;

/// What [`enable_format`] did.
#[derive(Debug, Clone)]
pub struct Enabled {
    /// The version the format starts at (that of an earlier enable if the
    /// table already published it).
    pub since: u64,
    /// The table's latest version afterwards.
    pub version: u64,
    /// Whether this call committed the version that enables it.
    pub committed: bool,
}

/// Publish `format` for the existing table at `table` from its next
/// version (see the module docs), then write what the format lacks up to
/// the table's latest version. A table that publishes it already is left
/// as it is (nothing committed) and only synced.
///
/// `InvalidArgument` for an unknown format and `UnsupportedType` for a
/// column the format cannot hold, before anything is written; `NotFound`
/// if there is no table; `UpgradeRequired` for a table of an earlier
/// format; `CommitConflict` if writers keep winning. If publishing fails
/// after the commit, its error is returned and the format stays enabled:
/// the next commit or [`super::delta::publish::sync`] writes what is
/// missing.
///
/// Cost: the latest root (2 GETs), a commit (2 PUTs), then the format's
/// first checkpoint (for `delta`: the tombstones and key columns of every
/// file with deleted rows, a PUT per deletion vector and the checkpoint).
pub async fn enable_format(store: &StoreHandle, table: &str, format: &str) -> Result<Enabled> {
    known(format)?;
    let wanted = [format.to_string()];
    crate::store::keys::object_segments(table)?;
    let latest = versions::latest_at::<TableManifest>(store, table, false, Depth::Root).await?;
    let Some(latest) = latest else {
        return Err(super::not_found(store, table, "table").await);
    };
    check(&wanted, &*latest.manifest.arrow_schema(table)?)?;
    let opts = CommitOptions {
        depth: Depth::Root,
        ..Default::default()
    };
    let out = commit::commit_versioned(store, table, &opts, Some(latest), |base| {
        let Some(base) = base else {
            return Err(Error::NotFound {
                path: table.to_string(),
            });
        };
        if base.formats.contains_key(format) {
            return Ok(None);
        }
        check(&wanted, &*base.arrow_schema(table)?)?;
        let mut next = base.clone();
        next.created_at = crate::dataset::manifest::now_iso8601();
        next.operation = "enable_format".into();
        next.operation_parameters =
            [("format".to_string(), serde_json::Value::from(format))].into();
        next.formats.insert(
            format.to_string(),
            PublishedFormat {
                since: base.version + 1,
            },
        );
        Ok(Some(next))
    })
    .await?;
    let (committed, at) = match out {
        Outcome::Committed { manifest, .. } => (true, *manifest),
        Outcome::Unchanged { .. } => (
            false,
            crate::table::scan::resolve_at(
                store,
                table,
                crate::table::scan::At::Latest,
                Depth::Root,
            )
            .await?,
        ),
    };
    let since =
        at.formats.get(format).map(|f| f.since).ok_or_else(|| {
            Error::Task(format!("format {format:?} vanished from {table} (a bug)"))
        })?;
    super::delta::publish::publish(store, table, since, at.version).await?;
    Ok(Enabled {
        since,
        version: at.version,
        committed,
    })
}
