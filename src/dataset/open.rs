//! The committed manifest as a reader takes it, and a dataset opened
//! from it: its parts found, its schema checked.

use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::manifest::Manifest;
use super::{child_key, normal_e_tag, MANIFEST, SUCCESS};
use crate::error::{Error, Result};
use crate::parquet::part_ref::{self, PartRef};
use crate::store::StoreHandle;

/// Missing parts named in a `DatasetIncomplete` message; the rest are counted.
const NAMED_MISSING: usize = 5;

/// Read and validate `manifest.json`. `NotFound` if it is absent.
pub async fn read_manifest(store: &StoreHandle, dataset_key: &str) -> Result<Manifest> {
    Ok(read_manifest_text(store, dataset_key).await?.0)
}

/// [`read_manifest`], with the bytes it parsed.
async fn read_manifest_text(
    store: &StoreHandle,
    dataset_key: &str,
) -> Result<(Manifest, bytes::Bytes)> {
    let key = child_key(dataset_key, MANIFEST);
    let raw = store.get(&key).await?;
    Ok((Manifest::from_json(&raw, &key)?, raw))
}

/// Attempts of [`read_committed_manifest`] at a dataset that keeps
/// changing under it, and the pause before the second (doubled before each
/// later one: 20 + 40 + 80 ms in all).
const COMMITTED_READ_ATTEMPTS: u32 = 4;
const COMMITTED_READ_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// The manifest of a committed dataset, and its text: `manifest.json` as
/// it was at a moment when `_SUCCESS` was there (see "Reading" in the
/// module docs). `DatasetIncomplete` without `_SUCCESS`.
///
/// Each attempt GETs `manifest.json`, then HEADs `_SUCCESS`, then HEADs
/// `manifest.json` again: the manifest is committed if `_SUCCESS` is there
/// and the manifest is still the object that was read (its ETag; its bytes
/// where the store gives none). A manifest replaced or removed meanwhile,
/// or missing under `_SUCCESS` (an overwrite committed between the two
/// requests), is asked again, after 20, 40 and 80 ms; a dataset still
/// changing after 4 attempts is `DatasetIncomplete` saying so. A manifest
/// missing under `_SUCCESS` at every attempt is `NotFound` (removed by
/// hand).
///
/// Cost: 3 requests in sequence (GET, HEAD, HEAD), 1 more GET on a store
/// that reports no ETag; on the error path, the occupancy probe.
pub async fn read_committed_manifest(
    store: &StoreHandle,
    dataset_key: &str,
) -> Result<(Manifest, bytes::Bytes)> {
    crate::store::keys::object_segments(dataset_key)?;
    match read_committed(store, dataset_key).await? {
        Some(Committed { manifest, raw, .. }) => Ok((manifest, raw)),
        None => {
            store.check_bucket().await?;
            Err(Error::DatasetIncomplete {
                key: dataset_key.to_string(),
                reason: absent_reason(store, dataset_key).await,
            })
        }
    }
}

/// A committed dataset's manifest as [`read_committed`] found it.
pub(super) struct Committed {
    pub(super) manifest: Manifest,
    /// Its bytes.
    pub(super) raw: Bytes,
    /// The object read (its ETag and version: what a compare-and-swap of
    /// the manifest expects).
    pub(super) meta: crate::store::Meta,
}

/// [`read_committed_manifest`]'s attempts; `None`: no `_SUCCESS` at the
/// moment it was asked (no dataset is committed), without asking why.
pub(super) async fn read_committed(
    store: &StoreHandle,
    dataset_key: &str,
) -> Result<Option<Committed>> {
    let success = child_key(dataset_key, SUCCESS);
    let key = child_key(dataset_key, MANIFEST);
    let mut changed = false;
    let mut pause = COMMITTED_READ_PAUSE;
    for attempt in 0..COMMITTED_READ_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        let read = match store.get_with_meta(&key).await {
            Ok(got) => Some(got),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        if store.try_head(&success).await?.is_none() {
            return Ok(None);
        }
        // No manifest under the marker: a commit landed between the two
        // requests (or the manifest was removed): ask again.
        let Some((raw, meta)) = read else { continue };
        if still_there(store, &key, &raw, &meta).await? {
            let manifest = Manifest::from_json(&raw, &key)?;
            return Ok(Some(Committed {
                manifest,
                raw,
                meta,
            }));
        }
        changed = true;
    }
    if !changed {
        return Err(Error::NotFound { path: key });
    }
    Err(Error::DatasetIncomplete {
        key: dataset_key.to_string(),
        reason: format!(
            "the dataset kept changing while it was read ({COMMITTED_READ_ATTEMPTS} attempts \
             met a replaced manifest: overwrites back to back); read it again"
        ),
    })
}

/// Whether the object at `key` is still the one read as `raw` with `meta`:
/// 1 HEAD, comparing ETags; where either has none, 1 GET comparing bytes.
async fn still_there(
    store: &StoreHandle,
    key: &str,
    raw: &Bytes,
    meta: &crate::store::Meta,
) -> Result<bool> {
    let Some(now) = store.try_head(key).await? else {
        return Ok(false);
    };
    match (&meta.e_tag, &now.e_tag) {
        (Some(a), Some(b)) => Ok(normal_e_tag(a) == normal_e_tag(b)),
        _ => match store.get(key).await {
            Ok(again) => Ok(again == *raw),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        },
    }
}

/// Open a committed dataset: its manifest as [`read_committed_manifest`]
/// reads it (3 requests in sequence), then where each part is.
///
/// A manifest with `part_info` (every pds manifest) states each part's size,
/// footer size and SHA-256: no part is touched here, and the footer GET of
/// each part is its existence check ([`part_missing`] names the missing ones
/// if one fails). A manifest without it (remote-store's) costs one more round
/// trip: a HEAD of every part at once, `io` at a time, which fails with
/// `DatasetIncomplete` naming the missing ones.
///
/// `read`: the manifest's text as [`read_committed_manifest`] returned it
/// (the caller read it to prepare the read), which saves those requests.
pub async fn open_dataset(
    store: &StoreHandle,
    dataset_key: &str,
    io: usize,
    read: Option<&[u8]>,
) -> Result<(Manifest, Vec<PartRef>)> {
    let manifest = match read {
        None => read_committed_manifest(store, dataset_key).await?.0,
        Some(raw) => {
            crate::store::keys::object_segments(dataset_key)?;
            Manifest::from_json(raw, &child_key(dataset_key, MANIFEST))?
        }
    };
    if let Some(info) = &manifest.part_info {
        let parts = info
            .iter()
            .map(|p| PartRef {
                key: child_key(dataset_key, &p.name),
                size: p.size_bytes,
                footer_hint: p.footer_bytes,
                sha256: Some(p.sha256.clone()),
            })
            .collect();
        return Ok((manifest, parts));
    }
    let sizes = head_parts(store, dataset_key, &manifest.parts, io).await?;
    let mut parts = Vec::with_capacity(sizes.len());
    let mut missing = Vec::new();
    for (name, size) in manifest.parts.iter().zip(sizes) {
        match size {
            Some(size) => parts.push(PartRef::sized(child_key(dataset_key, name), size)),
            None => missing.push(name.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(Error::DatasetIncomplete {
            key: dataset_key.to_string(),
            reason: missing_parts(&missing, manifest.parts.len()),
        });
    }
    Ok((manifest, parts))
}

/// The size of each part, `None` where it is missing: a HEAD each, `io` at once.
async fn head_parts(
    store: &StoreHandle,
    dataset_key: &str,
    names: &[String],
    io: usize,
) -> Result<Vec<Option<u64>>> {
    futures::stream::iter(names)
        .map(|p| async move {
            Ok(store
                .try_head(&child_key(dataset_key, p))
                .await?
                .map(|m| m.size))
        })
        .buffered(io.max(1))
        .try_collect()
        .await
}

/// A part of the dataset was not found while it was read: name every part
/// that is missing now (a HEAD each; error path only), as `DatasetIncomplete`.
pub async fn part_missing(
    store: &StoreHandle,
    dataset_key: &str,
    manifest: &Manifest,
    io: usize,
    found: Error,
) -> Error {
    if !matches!(found, Error::NotFound { .. }) {
        return found;
    }
    let missing: Vec<String> = match head_parts(store, dataset_key, &manifest.parts, io).await {
        Ok(sizes) => manifest
            .parts
            .iter()
            .zip(sizes)
            .filter(|(_, s)| s.is_none())
            .map(|(n, _)| n.clone())
            .collect(),
        Err(_) => Vec::new(),
    };
    if missing.is_empty() {
        return vanished(dataset_key)(found);
    }
    Error::DatasetIncomplete {
        key: dataset_key.to_string(),
        reason: missing_parts(&missing, manifest.parts.len()),
    }
}

/// Why a key without `_SUCCESS` has no dataset: a table or pipeline is
/// there (or around it), nothing at all is stored there, or a write is
/// unfinished (the occupancy probe, then one LIST of at most one object;
/// error path only).
async fn absent_reason(store: &StoreHandle, dataset_key: &str) -> String {
    use crate::store::occupancy::{occupancy, Kind};
    if let Ok(found) = occupancy(store, dataset_key).await {
        if let Some(reason) = found.describe_for(dataset_key, Kind::Dataset) {
            return reason;
        }
    }
    match store.folder_exists(dataset_key).await {
        Ok(false) => "no dataset: nothing is stored under this key".into(),
        _ => "_SUCCESS marker missing: the dataset was never committed (a write is \
              in progress, failed, or was killed)"
            .into(),
    }
}

/// `missing N of M parts: a, b, c, d, e and N-5 more`: short, however many.
pub fn missing_parts(missing: &[String], total: usize) -> String {
    let named: Vec<String> = missing
        .iter()
        .take(NAMED_MISSING)
        .map(|p| format!("{p:?}"))
        .collect();
    let more = missing.len().saturating_sub(NAMED_MISSING);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "missing {} of {total} parts: {}{tail}",
        missing.len(),
        named.join(", ")
    )
}

/// A part listed in the manifest vanished after the existence check: the
/// dataset is incomplete (RFC-0008), not a plain `NotFound`.
pub fn vanished(dataset_key: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::NotFound { path } => Error::DatasetIncomplete {
            key: dataset_key.to_string(),
            reason: format!("part {path:?} disappeared while it was being read"),
        },
        other => other,
    }
}

/// The schema every part of the dataset must have: the manifest's, or, for
/// manifests that record none (remote-store's), the first part's footer's.
pub async fn expected_schema(
    store: &StoreHandle,
    dataset_key: &str,
    manifest: &Manifest,
    parts: &[PartRef],
    io: usize,
) -> Result<SchemaRef> {
    if let Some(schema) = manifest.schema(&child_key(dataset_key, MANIFEST))? {
        return Ok(schema);
    }
    let first = parts.first().ok_or_else(|| Error::ManifestCorrupted {
        path: child_key(dataset_key, MANIFEST),
        reason: "the manifest lists no parts".into(),
    })?;
    match part_ref::footer(store, first).await {
        Ok(footer) => Ok(crate::parquet::chunk_crc::strip(footer.metadata().schema())),
        // Sizes from the manifest: no part was HEADed yet. Name every missing one.
        Err(e) => Err(part_missing(store, dataset_key, manifest, io, e).await),
    }
}
