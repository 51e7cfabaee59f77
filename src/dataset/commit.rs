//! The dataset write and its commit: claim, clear or replace, parts,
//! manifest and `_SUCCESS`, and the check after (see the protocol in
//! [`super`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::RecordBatchReader;
use arrow_schema::SchemaRef;
use bytes::Bytes;

use super::claim::{unique_token, Claim};
use super::manifest::Manifest;
use super::manifest::PartInfo;
use super::open::{read_committed, Committed};
use super::parts::{build_manifest, manifest_of, put_claimed, write_parts_claimed, WriteRequest};
use super::{child_key, is_own_object, normal_e_tag, part_keys, MANIFEST, SUCCESS, WRITING};
use crate::error::{Error, Result};
use crate::parquet::encode::EncodeOptions;
use crate::store::occupancy::{self, Kind};
use crate::store::{PutOutcome, StoreHandle};

/// Write a dataset from `reader` (fast path). Returns the manifest written.
///
/// Capabilities are the caller's: this claims the key and writes parts,
/// then commits and checks the result (see the module docs), or, on
/// failure, commits nothing.
///
/// Without `req.overwrite`: `AlreadyExists` if a dataset is committed at
/// the key or another writer holds it, before any part is written; the
/// key is cleared of what failed writers left, and the parts get
/// RFC-0008's names. With it, a writer holding the key loses it, and a
/// committed dataset is replaced atomically: it stays readable while the
/// parts (named for this write alone) are written, and one compare-and-swap
/// of `manifest.json` commits ([`write_replacing`]); an overwrite that
/// fails or is killed leaves it as it was. Where no dataset is committed,
/// an overwrite clears the key and writes as without `overwrite`. Either
/// way the key must be free of tables and pipelines, and of anything
/// inside or around it ([`occupancy::check_free`]: 5 HEADs per level of the
/// key and 1 LIST): `KeyOccupied` otherwise. Types pds cannot store fail
/// with `UnsupportedType` before any I/O.
///
/// Cost besides the parts: the claim (1 PUT, 1 GET per check: before the
/// clear or the read of the committed manifest, before each part after
/// the first, before the commit; 1 GET and 1 DELETE to release it). A
/// write where no dataset is committed: the clear (1 LIST, and a DELETE
/// per object found; +1 DELETE for `_SUCCESS` with `overwrite`, after the
/// 3 requests that find no committed dataset), the commit (2 PUTs) and
/// its check (1 LIST). An overwrite of a committed dataset: its manifest
/// read (GET, HEAD, HEAD), the swap (1 PUT), 1 LIST, 1 GET (the claim)
/// and a DELETE per object of the replaced dataset.
pub fn write_dataset(
    store: Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: EncodeOptions,
    req: WriteRequest,
) -> Result<Manifest> {
    crate::store::keys::object_segments(&req.location)?;
    crate::parquet::storage_types::check_writable(&reader.schema())?;
    let started = crate::store::counted::Started::now(&store);
    let location = req.location.clone();
    let overwrite = req.overwrite;
    let (claim, replacing) = crate::runtime::block_on({
        let store = store.clone();
        async move {
            let claim = if overwrite {
                Claim::take_over(&store, &location).await?
            } else {
                Claim::take(&store, &location).await?
            };
            // Checked once the key is claimed, so that a table or pipeline
            // creator checking after this sees the claim.
            let free = async {
                occupancy::check_free(store.as_ref(), &location, Kind::Dataset).await?;
                if !overwrite
                    && store
                        .try_head(&child_key(&location, SUCCESS))
                        .await?
                        .is_some()
                {
                    return Err(Error::AlreadyExists {
                        path: location.clone(),
                    });
                }
                // Another writer may have taken the key during the checks:
                // nothing is removed unless the claim still holds.
                claim.check(&store).await?;
                // A committed dataset stays until its manifest is swapped.
                let replacing = match overwrite {
                    true => committed_to_replace(&store, &location).await?,
                    false => None,
                };
                if replacing.is_none() {
                    clear_for_write(&store, &location, overwrite, &[]).await?;
                    claim.check(&store).await?;
                }
                Ok(replacing)
            };
            match free.await {
                Ok(replacing) => Ok((claim, replacing)),
                Err(e) => {
                    claim.release(&store).await;
                    Err(e)
                }
            }
        }
    })??;
    let result = match &replacing {
        Some(old) => write_replacing(&store, reader, &opts, &req, &claim, old),
        None => write_fresh(&store, reader, &opts, &req, &claim),
    };
    let _ = crate::runtime::block_on(claim.release(&store));
    if let Ok(m) = &result {
        log_written(&store, m, &started);
    }
    result
}

/// A write at a key where no dataset is committed (cleared, holding the
/// claim): RFC-0008's part names, then `manifest.json` and `_SUCCESS`
/// created create-only ([`commit_claimed`]). On failure nothing of it stays
/// while the key is still this writer's.
fn write_fresh(
    store: &Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: &EncodeOptions,
    req: &WriteRequest,
    claim: &Claim,
) -> Result<Manifest> {
    let parts = write_parts_claimed(store.clone(), reader, opts, req, Some(claim), false)?;
    let manifest = build_manifest(&parts.schema, opts, req, &parts.names, &parts.summaries)?;
    crate::runtime::block_on(async {
        let expected = parts.expected();
        let mut committed = commit_claimed(store, &req.location, &manifest, &expected, claim).await;
        // Failing because another writer took the key is the lost claim:
        // the key and its part names are the other writer's now.
        if matches!(&committed, Err(e) if !matches!(e, Error::ClaimLost { .. })) {
            if let Err(lost @ Error::ClaimLost { .. }) = claim.check(store).await {
                committed = Err(lost);
            }
        }
        if let Err(e) = &committed {
            if !matches!(e, Error::ClaimLost { .. }) {
                // The key is still ours: nothing of this write may stay.
                let mut keys = part_keys(&req.location, &parts.names);
                keys.push(child_key(&req.location, MANIFEST));
                let _ = store.delete_many(&keys).await;
            }
        }
        committed
    })??;
    Ok(manifest)
}

/// Commit the parts a writer elsewhere uploaded under names of its own (a
/// Spark job's tasks) for the holder of `claim` taken on `req.location`,
/// as [`write_dataset`] commits its own, and release the claim. `parts`
/// are listed in the manifest in their order; `schema` is the dataset's.
/// `InvalidArgument` before any I/O for a name listed twice or that is not
/// a part's (`data.parquet`, `part-*.parquet`, directly under the key).
///
/// Checked first, nothing written: the claim holds; without
/// `req.overwrite`, no dataset is committed at the key (`AlreadyExists`);
/// every part is there (1 LIST; `DatasetIncomplete` naming one that is
/// not). Then, with `req.overwrite` over a committed dataset whose store
/// can compare-and-swap, its manifest is swapped in place (`_SUCCESS`
/// staying) and its files deleted one request each (a failure is logged,
/// not raised: the commit stands); otherwise the key is cleared of all but
/// these parts and the claim (`_SUCCESS` first), and the manifest and
/// `_SUCCESS` are created create-only. Either way one LIST after the
/// commit confirms that the parts are still those uploaded (by size).
/// A failed fresh commit removes its manifest if it is still this one;
/// the parts are left for the caller to remove.
pub fn commit_parts(
    store: &Arc<StoreHandle>,
    claim: &Claim,
    schema: &SchemaRef,
    parts: Vec<PartInfo>,
    compression: &str,
    req: &WriteRequest,
) -> Result<Manifest> {
    let location = req.location.as_str();
    crate::store::keys::object_segments(location)?;
    let mut names = std::collections::BTreeSet::new();
    for p in &parts {
        let part = p.name.as_str();
        if !is_own_object(part) || [SUCCESS, MANIFEST, WRITING].contains(&part) {
            return Err(Error::InvalidArgument(format!(
                "{part:?} is not a part's name (data.parquet or part-*.parquet, directly under the key)"
            )));
        }
        if !names.insert(part) {
            return Err(Error::InvalidArgument(format!(
                "part {part:?} is listed twice"
            )));
        }
    }
    let started = crate::store::counted::Started::now(store);
    let manifest = manifest_of(schema, compression, req, parts)?;
    let part_info = manifest.part_info.as_deref().unwrap_or_default();
    let expected: Vec<(&str, u64, Option<&str>)> = part_info
        .iter()
        .map(|p| (p.name.as_str(), p.size_bytes, None))
        .collect();
    let committed = crate::runtime::block_on(async {
        claim.check(store).await?;
        if !req.overwrite
            && store
                .try_head(&child_key(location, SUCCESS))
                .await?
                .is_some()
        {
            return Err(Error::AlreadyExists {
                path: location.to_string(),
            });
        }
        let listing = store.list(location, false).await?;
        let root = format!("{}/", location.trim_end_matches('/'));
        let missing: Vec<&str> = expected
            .iter()
            .map(|(n, ..)| *n)
            .filter(|n| {
                !listing
                    .objects
                    .iter()
                    .any(|o| o.key.strip_prefix(&root) == Some(*n))
            })
            .collect();
        if let Some(first) = missing.first() {
            return Err(Error::DatasetIncomplete {
                key: req.dataset_key.clone(),
                reason: format!(
                    "the write lost {} of its {} uploaded part(s) before its commit, e.g. \
                     {first:?} (another writer on the same key?); nothing was committed",
                    missing.len(),
                    expected.len()
                ),
            });
        }
        if req.overwrite {
            if let Some(old) = committed_to_replace(store, location).await? {
                return swap_claimed(
                    store,
                    location,
                    &manifest,
                    &expected,
                    claim,
                    &old,
                    Cleanup::EachObject,
                )
                .await;
            }
        }
        claim.check(store).await?;
        let keep: Vec<&str> = expected.iter().map(|(n, ..)| *n).collect();
        clear_for_write(store, location, req.overwrite, &keep).await?;
        let committed = commit_claimed(store, location, &manifest, &expected, claim).await;
        if matches!(&committed, Err(e) if !matches!(e, Error::ClaimLost { .. })) {
            let json = Bytes::from(manifest.to_json()?);
            if manifest_is(store, location, &json).await.unwrap_or(false)
                && claim.check(store).await.is_ok()
            {
                let _ = store.delete(&child_key(location, MANIFEST)).await;
            }
        }
        committed
    })?;
    let _ = crate::runtime::block_on(claim.release(store));
    committed?;
    log_written(store, &manifest, &started);
    Ok(manifest)
}

/// The committed dataset an overwrite replaces in place: its manifest's
/// bytes and the object read (ETag, version).
pub(super) struct Replaced {
    raw: Bytes,
    meta: crate::store::Meta,
}

/// The dataset committed at `location`, for an overwrite to swap its
/// manifest ([`read_committed`]: 3 requests in sequence). `None` where
/// there is none to keep: no `_SUCCESS`, no manifest or a damaged one
/// under it (nothing readable to keep), or a store that reports neither
/// ETag nor version (no compare-and-swap); the overwrite then clears the
/// key. A dataset that keeps changing while it is read (overwrites back to
/// back) is `DatasetIncomplete`: the overwrite fails before writing
/// anything rather than clear a committed dataset, and may be tried again.
pub(super) async fn committed_to_replace(
    store: &StoreHandle,
    location: &str,
) -> Result<Option<Replaced>> {
    match read_committed(store, location).await {
        Ok(Some(Committed { raw, meta, .. })) if meta.e_tag.is_some() || meta.version.is_some() => {
            Ok(Some(Replaced { raw, meta }))
        }
        Ok(_) | Err(Error::NotFound { .. } | Error::ManifestCorrupted { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// An overwrite of the committed dataset `old` (holding the claim, the key
/// not cleared): parts under names of this write alone
/// (`part-<random>-NNNNN.parquet`), then the manifest swapped in place
/// ([`swap_claimed`]). Until the swap, readers read `old`; a failure
/// before it leaves `old` as it was and removes this write's parts.
pub(super) fn write_replacing(
    store: &Arc<StoreHandle>,
    reader: Box<dyn RecordBatchReader + Send>,
    opts: &EncodeOptions,
    req: &WriteRequest,
    claim: &Claim,
    old: &Replaced,
) -> Result<Manifest> {
    let fresh = &unique_token()[..12];
    let req = WriteRequest {
        part_prefix: Some(match &req.part_prefix {
            Some(p) => format!("{p}-{fresh}"),
            None => fresh.to_string(),
        }),
        ..req.clone()
    };
    let parts = write_parts_claimed(store.clone(), reader, opts, &req, Some(claim), true)?;
    let built = build_manifest(&parts.schema, opts, &req, &parts.names, &parts.summaries);
    let manifest = match built {
        Ok(m) => m,
        Err(e) => {
            let keys = part_keys(&req.location, &parts.names);
            let _ = crate::runtime::block_on(store.delete_many(&keys));
            return Err(e);
        }
    };
    crate::runtime::block_on(swap_claimed(
        store,
        &req.location,
        &manifest,
        &parts.expected(),
        claim,
        old,
        Cleanup::Batched,
    ))??;
    Ok(manifest)
}

/// The claim checked, then `manifest.json` under `key` replaced with `json`
/// by compare-and-swap against `old` ([`StoreHandle::put_update_own`]: a
/// swap of its own whose reply was lost is recognised). `AlreadyExists` if
/// refused: another writer committed since `old` was read, or the dataset
/// was deleted. 1 GET, 1 PUT (+1 GET if refused).
async fn swap_manifest(
    store: &StoreHandle,
    key: &str,
    json: Bytes,
    claim: &Claim,
    old: &Replaced,
) -> Result<PutOutcome> {
    claim.check(store).await?;
    let mkey = child_key(key, MANIFEST);
    let (e_tag, version) = (old.meta.e_tag.clone(), old.meta.version.clone());
    match store.put_update_own(&mkey, json, e_tag, version).await {
        Err(Error::Precondition { .. } | Error::NotFound { .. }) => Err(Error::AlreadyExists {
            path: key.to_string(),
        }),
        other => other,
    }
}

/// Commit `manifest` over the committed dataset `old` for the holder of
/// `claim` whose parts (named for this write alone) are `parts`:
///
/// 1. the claim checked, then `manifest.json` replaced by compare-and-swap
///    against the manifest `old` read ([`StoreHandle::put_update_own`],
///    which recognises its own swap after a lost reply). Refused (another
///    writer committed since `old` was read, or the dataset was deleted):
///    this write's parts are removed and the result is `AlreadyExists`.
///    Any failure of the swap is settled by reading the manifest back: this
///    write's bytes there are its commit; another's, no commit (the parts
///    are removed); unreadable, the error stands and the parts stay (the
///    outcome is unknown; a later overwrite removes them if unused).
///    `_SUCCESS` stays throughout: readers see `old`, then this dataset.
/// 2. One LIST confirms that the parts are still the objects this writer
///    created. If the manifest there is no longer this writer's, a later
///    write replaced it whole: this write committed. If a part was removed
///    or replaced (a delete-then-write writer of an older pds, or
///    `delete_dataset`, ran meanwhile), the manifest is swapped back to
///    `old` and the result is `ClaimLost`. A LIST that fails leaves the
///    commit as it is (readers may have read it) and skips step 3.
/// 3. The objects of the dataset layout that LIST found, but this write's
///    parts, the manifest, `_SUCCESS` and the claim, are deleted (`old`'s
///    parts, debris of killed overwrites), if the claim still holds after
///    the LIST: a writer that took the key later wrote its parts after the
///    LIST, so none of them is deleted (its parts have names of their own;
///    only a `delete_dataset` racing this cleanup, then a first write
///    reusing an RFC-0008 name, could lose that part: a delete racing a
///    write). Without the claim the objects stay, for a later overwrite to
///    remove; the write is committed all the same.
///
/// Cost: 1 GET (claim), 1 PUT (+1 GET if it fails), 1 LIST, 1 GET (claim)
/// and a DELETE per object removed (batched where the store can).
async fn swap_claimed(
    store: &StoreHandle,
    key: &str,
    manifest: &Manifest,
    parts: &[(&str, u64, Option<&str>)],
    claim: &Claim,
    old: &Replaced,
    cleanup: Cleanup,
) -> Result<()> {
    let names: Vec<String> = parts.iter().map(|(n, ..)| n.to_string()).collect();
    let own_parts = part_keys(key, &names);
    let json = Bytes::from(manifest.to_json()?);
    let mkey = child_key(key, MANIFEST);
    let put = match swap_manifest(store, key, json.clone(), claim, old).await {
        Ok(put) => put,
        // Whatever the error, the manifest there decides (1 GET): this
        // write's own (a swap applied whose outcome was lost) is a commit;
        // another's means not swapped, and the parts go; if that cannot be
        // told, they stay (maybe committed) and the error stands.
        Err(e) => match manifest_is(store, key, &json).await {
            Ok(true) => PutOutcome {
                e_tag: None,
                version: None,
                size: json.len() as u64,
            },
            Ok(false) => {
                let _ = store.delete_many(&own_parts).await;
                return Err(e);
            }
            Err(_) => return Err(e),
        },
    };
    let checked = match store.list(key, false).await {
        Ok(listing) => {
            let root = format!("{}/", key.trim_end_matches('/'));
            let expected_manifest = [(MANIFEST, json.len() as u64, put.e_tag.as_deref())];
            if all_landed(key, &listing.objects, &expected_manifest).is_err() {
                // A later write replaced the manifest (or deleted the
                // dataset): it replaced this one whole, and cleans up.
                return Ok(());
            }
            all_landed(key, &listing.objects, parts).map(|()| {
                listing
                    .objects
                    .into_iter()
                    .filter(|o| {
                        o.key.strip_prefix(&root).is_some_and(|name| {
                            is_own_object(name)
                                && ![MANIFEST, SUCCESS, WRITING].contains(&name)
                                && !names.iter().any(|n| n == name)
                        })
                    })
                    .map(|o| o.key)
                    .collect::<Vec<_>>()
            })
        }
        // The swap is committed and readers may have read it: a LIST that
        // fails is no reason to take it back. The cleanup is skipped (a
        // later overwrite removes what it would have).
        Err(_) => return Ok(()),
    };
    let replaced = match checked {
        Ok(replaced) => replaced,
        Err(e) => {
            // Not exactly this writer's dataset: put `old` back.
            let back = store
                .put_update_own(
                    &mkey,
                    old.raw.clone(),
                    put.e_tag.clone(),
                    put.version.clone(),
                )
                .await;
            if back.is_ok() {
                let _ = store.delete_many(&own_parts).await;
            }
            return Err(match e {
                Error::ClaimLost { .. } => claim.lost(),
                other => other,
            });
        }
    };
    if claim.check(store).await.is_ok() {
        if let Err(e) = cleanup.delete(store, &replaced).await {
            log::warn!(
                target: "pds::dataset",
                "dataset {key}: committed, but removing the replaced dataset's files failed \
                 (a later overwrite removes them): {e}"
            );
        }
    }
    Ok(())
}

/// How the objects a swap replaced are deleted.
#[derive(Debug, Clone, Copy)]
enum Cleanup {
    /// As few requests as the store allows (S3: 1,000 keys a request); one
    /// failure leaves them all, for a later overwrite to remove.
    Batched,
    /// One request per object, 16 at a time: a failure leaves only its
    /// object (a Spark job's commit, whose replaced files are many parts).
    EachObject,
}

impl Cleanup {
    async fn delete(self, store: &StoreHandle, keys: &[String]) -> Result<()> {
        match self {
            Cleanup::Batched => store.delete_many(keys).await,
            Cleanup::EachObject => {
                use futures::StreamExt;
                let mut failed = None;
                let mut deletes = futures::stream::iter(keys)
                    .map(|k| store.delete(k))
                    .buffer_unordered(16);
                while let Some(r) = deletes.next().await {
                    if let Err(e) = r {
                        failed.get_or_insert(e);
                    }
                }
                failed.map_or(Ok(()), Err)
            }
        }
    }
}

/// Log at INFO (target `pds::dataset`) that the dataset `m` was written by
/// the write that started at `started`: key, parts, rows, bytes written
/// and read, store requests, time.
fn log_written(store: &StoreHandle, m: &Manifest, started: &crate::store::counted::Started) {
    if !log::log_enabled!(target: "pds::dataset", log::Level::Info) {
        return;
    }
    let (c, ms) = started.cost(store);
    log::info!(
        target: "pds::dataset",
        "dataset {}: wrote {} parts, {} rows: {} bytes written, {} bytes read, {} requests, {ms:.1} ms",
        m.dataset_key,
        m.parts.len(),
        m.row_count,
        c.bytes_written,
        c.bytes_read,
        c.requests
    );
}

/// Make the key ready for the holder of a claim: with `overwrite`, withdraw
/// the committed dataset (`_SUCCESS` first); then remove every other object
/// of the dataset layout but the claim (parts and a manifest of an earlier
/// dataset, or left by a failed or killed writer), but the parts named in
/// `keep` (a Spark job's, uploaded before its commit). 1 LIST, a DELETE
/// per object found (batched where the store can), +1 DELETE with
/// `overwrite`.
async fn clear_for_write(
    store: &StoreHandle,
    location: &str,
    overwrite: bool,
    keep: &[&str],
) -> Result<()> {
    if overwrite {
        store.delete(&child_key(location, SUCCESS)).await?;
    }
    let mut except = vec![SUCCESS, WRITING];
    except.extend_from_slice(keep);
    let stale = own_objects(store, location, &except).await?;
    store.delete_many(&stale).await
}

/// The keys of the dataset layout's objects directly under `dataset_key`
/// (see [`is_own_object`]), but those named in `except`. 1 LIST.
pub(super) async fn own_objects(
    store: &StoreHandle,
    dataset_key: &str,
    except: &[&str],
) -> Result<Vec<String>> {
    let listing = store.list(dataset_key, false).await?;
    let root = format!("{}/", dataset_key.trim_end_matches('/'));
    Ok(listing
        .objects
        .into_iter()
        .filter(|o| {
            o.key
                .strip_prefix(&root)
                .is_some_and(|name| is_own_object(name) && !except.contains(&name))
        })
        .map(|o| o.key)
        .collect())
}

/// Commit `manifest` for the holder of `claim` whose parts are `parts`
/// (name, size, ETag as its upload reported it): the claim checked, `manifest.json` and `_SUCCESS` created create-only
/// ([`put_marker`]), then one LIST to confirm that the parts and
/// the manifest are still the objects this writer created. If another
/// writer's request replaced or removed one meanwhile, `_SUCCESS` is
/// withdrawn and the result is `ClaimLost`; if another writer committed
/// first, `AlreadyExists`.
async fn commit_claimed(
    store: &StoreHandle,
    key: &str,
    manifest: &Manifest,
    parts: &[(&str, u64, Option<&str>)],
    claim: &Claim,
) -> Result<()> {
    claim.check(store).await?;
    let json = Bytes::from(manifest.to_json()?);
    let size = json.len() as u64;
    let put = put_claimed(store, &child_key(key, MANIFEST), json.clone(), claim).await?;
    let marker = child_key(key, SUCCESS);
    put_marker(store, key, &json).await?;
    let mut expected = parts.to_vec();
    expected.push((MANIFEST, size, put.e_tag.as_deref()));
    let landed = match store.list(key, false).await {
        Ok(listing) => all_landed(key, &listing.objects, &expected),
        Err(e) => Err(e),
    };
    if landed.is_err() {
        // A marker over this writer's manifest commits this writer's write:
        // withdraw it. Over another's manifest, it is that writer's commit.
        if manifest_is(store, key, &json).await.unwrap_or(false) {
            let _ = store.delete(&marker).await;
        }
    }
    landed.map_err(|e| match e {
        Error::ClaimLost { .. } => claim.lost(),
        other => other,
    })
}

/// Create the empty `_SUCCESS` of RFC-0008 over the manifest `json` this
/// writer created, create-only. A create refused because the marker exists
/// is the writer's own commit if the manifest there is still its own (its
/// create whose reply was lost, retried); otherwise another writer
/// committed first (`AlreadyExists`). A create that fails so that it may
/// have been applied is tried again, up to 3 times in all.
///
/// Cost: 1 PUT; 1 GET more only when the marker exists.
async fn put_marker(store: &StoreHandle, key: &str, json: &Bytes) -> Result<()> {
    let marker = child_key(key, SUCCESS);
    let own = || async {
        Ok(manifest_is(store, key, json).await?.then_some(PutOutcome {
            e_tag: None,
            version: None,
            size: 0,
        }))
    };
    match store.put_create_checked(&marker, Bytes::new(), own).await {
        Ok(_) => Ok(()),
        Err(Error::AlreadyExists { .. }) => Err(Error::AlreadyExists {
            path: key.to_string(),
        }),
        Err(e) => Err(e),
    }
}

/// Whether `manifest.json` under `key` holds exactly `json`. 1 GET.
async fn manifest_is(store: &StoreHandle, key: &str, json: &Bytes) -> Result<bool> {
    match store.get(&child_key(key, MANIFEST)).await {
        Ok(there) => Ok(there == *json),
        Err(Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `Ok` if each of `expected` (name, size, ETag as its PUT reported it) is
/// among `objects` with that size and ETag (the ETag compared where both
/// sides know it); `ClaimLost` if one was removed or replaced.
pub(super) fn all_landed(
    key: &str,
    objects: &[crate::store::Meta],
    expected: &[(&str, u64, Option<&str>)],
) -> Result<()> {
    let root = format!("{}/", key.trim_end_matches('/'));
    let found: BTreeMap<&str, &crate::store::Meta> = objects
        .iter()
        .filter_map(|o| Some((o.key.strip_prefix(&root)?, o)))
        .collect();
    let same_tag = |a: Option<&str>, b: Option<&str>| match (a, b) {
        (Some(a), Some(b)) => normal_e_tag(a) == normal_e_tag(b),
        _ => true,
    };
    for (name, size, e_tag) in expected {
        match found.get(name) {
            Some(o) if o.size == *size && same_tag(o.e_tag.as_deref(), *e_tag) => {}
            _ => {
                return Err(Error::ClaimLost {
                    key: key.to_string(),
                })
            }
        }
    }
    Ok(())
}
