//! Dropping a table: removing every object of its layout under its key, in
//! an order that readers and live handles can detect.
//!
//! 1. `manifest/v00000000.json`, then the pointer. From then on a reader
//!    finds neither marker of a table: `NotFound`, never an older version
//!    mistaken for the latest (a reader that finds no pointer looks for
//!    versions from 0 up). A commit through a handle that opened the table
//!    builds on nothing, and fails with `NotFound` saying the table was
//!    dropped (see [`super::identity`]); it does not bring the pointer back.
//! 2. The other manifests, then the segments, data files and tombstones
//!    (and, on `file://`, the staging files of killed uploads).
//!
//! Only objects of the table's own layout ([`Collectable::LAYOUT`]) are
//! removed; nothing outside the key, nor in a dataset, table or pipeline
//! nested below it. A drop that was interrupted leaves a key without
//! markers but with some of the table's objects: dropping it again removes
//! them. A commit that races the drop either lands before it (and is
//! dropped with the table) or fails; one that wrote between the drop's LIST
//! and its end may leave objects behind, which a second drop removes.

use super::snapshot::TableManifest;
use super::vacuum::{Collectable, Ownership};
use super::{manifest_key, pointer_key, POINTER};
use crate::error::{Error, Result};
use crate::store::occupancy::{occupancy, Kind};
use crate::store::StoreHandle;

/// What [`drop_table`] removed: keys relative to the table key, sorted.
#[derive(Debug, Clone, Default)]
pub struct Dropped {
    pub removed: Vec<String>,
}

/// Remove the table at `table` (see the module docs).
///
/// `NotFound` if no table (and no remains of a dropped one) is there; if a
/// dataset or pipeline is there, or the key lies inside one, the message
/// says what, and nothing is removed.
///
/// Cost: the occupancy check (5 HEADs per level of the key, 1 LIST, 1 GET),
/// 1 LIST of the table key (a request per 1,000 objects), 2 DELETEs, then
/// the other DELETEs batched where the store can, and 1 LIST more to catch
/// objects written meanwhile.
pub async fn drop_table(store: &StoreHandle, table: &str) -> Result<Dropped> {
    crate::store::keys::object_segments(table)?;
    let table = table.trim_end_matches('/');
    let found = occupancy(store, table).await?;
    let is_table = matches!(&found.at, Some(o) if o.kind == Kind::Table);
    if !is_table {
        if let Some(reason) = found.describe_for(table, Kind::Table) {
            return Err(Error::OtherKind {
                path: table.to_string(),
                reason,
            });
        }
    }
    let root = format!("{table}/");
    let mut removed = Vec::new();
    let first = owned(store, table, &root).await?;
    if !is_table && !first.iter().any(|rel| rel.starts_with("manifest/")) {
        // Not even the remains of an interrupted drop.
        return Err(Error::NotFound {
            path: table.to_string(),
        });
    }
    // The markers first: readers then find no table.
    for (key, rel) in [
        (manifest_key(table, 0), super::manifest_name(0)),
        (pointer_key(table), POINTER.to_string()),
    ] {
        match store.delete(&key).await {
            Ok(()) | Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        if first.contains(&rel) {
            removed.push(rel);
        }
    }
    // Manifests before what they reference, so that no version is left
    // naming files that are gone; then once more, for what a commit racing
    // the drop wrote meanwhile.
    for round in 0..2 {
        let names = if round == 0 {
            first.clone()
        } else {
            owned(store, table, &root).await?
        };
        let (manifests, rest): (Vec<String>, Vec<String>) = names
            .into_iter()
            .filter(|rel| !removed.contains(rel))
            .partition(|rel| rel.starts_with("manifest/"));
        for batch in [manifests, rest] {
            if batch.is_empty() {
                continue;
            }
            let keys: Vec<String> = batch.iter().map(|r| format!("{root}{r}")).collect();
            store.delete_many(&keys).await?;
            removed.extend(batch);
        }
    }
    // file:// only: staging files of killed uploads, and the emptied folder.
    let listing = store.list(table, true).await?;
    let owner = Ownership::new(
        TableManifest::LAYOUT,
        listing
            .objects
            .iter()
            .filter_map(|o| o.key.strip_prefix(&root)),
    );
    let owns = move |rel: &str, folder: bool| owner.owns(rel, folder);
    for key in store.remove_staging(table, None, owns, true).await? {
        if let Some(rel) = key.strip_prefix(&root) {
            removed.push(rel.to_string());
        }
    }
    removed.sort();
    removed.dedup();
    Ok(Dropped { removed })
}

/// The objects under `table` of a table's layout, relative to it (1 LIST
/// request per 1,000 objects).
async fn owned(store: &StoreHandle, table: &str, root: &str) -> Result<Vec<String>> {
    let listing = store.list(table, true).await?;
    let rels: Vec<&str> = listing
        .objects
        .iter()
        .filter_map(|o| o.key.strip_prefix(root))
        .collect();
    let owner = Ownership::new(TableManifest::LAYOUT, rels.iter().copied());
    Ok(rels
        .into_iter()
        .filter(|rel| owner.owns(rel, false))
        .map(str::to_string)
        .collect())
}
