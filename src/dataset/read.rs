//! Reading a committed dataset whole: its parts fetched, checked against
//! the manifest and decoded, started over once if it was replaced meanwhile.

use std::sync::Arc;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::open::{
    expected_schema, open_dataset, part_missing, read_committed_manifest, read_manifest, vanished,
};
use super::{child_key, MANIFEST};
use crate::error::{Error, Result};
use crate::parquet::decode::{self, Decoded, ReadOptions};
use crate::parquet::encode::sha256_hex;
use crate::parquet::part_ref::{self, PartRef};
use crate::store::StoreHandle;

/// Read a dataset (fast path): the committed manifest
/// ([`read_committed_manifest`]: 3 requests in sequence), then
/// every part's footer (one GET each, or the handle's cache) and its
/// projected column chunks, `io` parts at once. Decoding runs on the
/// runtime's threads, one per core, however many requests are in flight.
///
/// With `verify`, every part is fetched whole and its SHA-256 checked against
/// the manifest before it is decoded.
///
/// A dataset overwritten while it is read shows as a part missing, of
/// another size or failing its checksums. Then the manifest is read again:
/// if it changed, the read starts over once from the new one; if that
/// fails the same way too, or the dataset was withdrawn, the error is
/// `DatasetIncomplete` saying the dataset was replaced while it was read.
/// If the manifest did not change, the first error stands (the part is
/// damaged, not replaced).
pub fn read_dataset(
    store: Arc<StoreHandle>,
    dataset_key: &str,
    opts: ReadOptions,
    verify: bool,
    io: usize,
    read: Option<&[u8]>,
) -> Result<Decoded> {
    crate::store::keys::object_segments(dataset_key)?;
    let used = match read {
        Some(raw) => Bytes::copy_from_slice(raw),
        None => crate::runtime::block_on(read_committed_manifest(&store, dataset_key))??.1,
    };
    let first = read_once(store.clone(), dataset_key, opts.clone(), verify, io, &used);
    let Err(found) = first else { return first };
    if !may_be_replaced(&found) {
        return Err(found);
    }
    let replaced = |e: &Error| Error::DatasetIncomplete {
        key: dataset_key.to_string(),
        reason: format!(
            "the dataset was replaced or deleted while it was read ({e}); read it again"
        ),
    };
    let now = match crate::runtime::block_on(read_committed_manifest(&store, dataset_key))? {
        Ok((_, now)) => now,
        Err(Error::DatasetIncomplete { .. } | Error::NotFound { .. }) => {
            return Err(replaced(&found))
        }
        Err(e) => return Err(e),
    };
    if now == used {
        return Err(found);
    }
    read_once(store, dataset_key, opts, verify, io, &now).map_err(|e| {
        if may_be_replaced(&e) {
            replaced(&e)
        } else {
            e
        }
    })
}

/// Whether a read's error is what a dataset overwritten under the reader
/// looks like: a part gone, of another size or content, or fewer rows.
fn may_be_replaced(e: &Error) -> bool {
    matches!(
        e,
        Error::NotFound { .. }
            | Error::DatasetIncomplete { .. }
            | Error::PartCorrupted { .. }
            | Error::ManifestCorrupted { .. }
    )
}

/// [`read_dataset`] once, from the manifest text `raw`.
fn read_once(
    store: Arc<StoreHandle>,
    dataset_key: &str,
    opts: ReadOptions,
    verify: bool,
    io: usize,
    raw: &[u8],
) -> Result<Decoded> {
    let read = Some(raw);
    let io = io.max(1);
    let dataset_key = dataset_key.to_string();
    crate::runtime::block_on(async move {
        let (manifest, parts) = open_dataset(&store, &dataset_key, io, read).await?;
        let progress = opts.progress.clone();
        crate::progress::start(
            progress.as_deref(),
            crate::progress::Phase::Reading,
            Some(parts.len() as u64),
        );
        let mpath = child_key(&dataset_key, MANIFEST);
        let expected = expected_schema(&store, &dataset_key, &manifest, &parts, io).await?;
        if let Some(cols) = &opts.columns {
            decode::column_indices(&expected, cols)?; // Unknown columns fail before any part is read.
        }
        if let Some(pred) = &opts.predicate {
            pred.as_ref().clone().bind(&expected)?; // So do bad filters.
        }
        if verify && manifest.part_info.is_none() {
            return Err(Error::ManifestCorrupted {
                path: mpath.clone(),
                reason:
                    "verify=True needs per-part checksums (part_info), which this manifest lacks"
                        .into(),
            });
        }
        let target = crate::parquet::part_schema::project(
            &expected,
            match &opts.columns {
                None => None,
                Some(cols) => Some(decode::column_indices(&expected, cols)?),
            }
            .as_deref(),
        )?;
        let opts = Arc::new(ReadOptions {
            expected: Some(expected),
            // Every batch is kept: fetch each part's chunks at once, with at
            // most `io` read-aheads in flight over all the parts read.
            read_ahead: Some(opts.read_ahead.unwrap_or(WHOLE_PART_READ_AHEAD)),
            io_permits: Some(Arc::new(tokio::sync::Semaphore::new(io))),
            ..opts
        });
        let jobs = parts.into_iter().map(|part| {
            let store = store.clone();
            let opts = opts.clone();
            // Aborted if the read fails first: no part task outlives it.
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
                match part.sha256.clone().filter(|_| verify) {
                    None => part_ref::read(&store, &part, &opts).await,
                    Some(expected) => {
                        let data = store.get(&part.key).await?;
                        tokio::task::spawn_blocking(move || {
                            verify_bytes(&data, &part.key, &expected)?;
                            decode::decode_bytes(data, &part.key, &opts)
                        })
                        .await?
                    }
                }
            }))
        });
        let read: Result<Vec<decode::Decoded>> = futures::stream::iter(jobs)
            .buffered(io)
            .map(|joined| joined.map_err(Error::from).and_then(|r| r))
            .inspect_ok(|d: &decode::Decoded| {
                crate::progress::add(progress.as_deref(), 1, 1, d.file_rows, 0);
            })
            .try_collect()
            .await;
        let read = match read {
            Ok(r) => r,
            Err(e) => return Err(part_missing(&store, &dataset_key, &manifest, io, e).await),
        };
        let mut batches = Vec::new();
        let mut file_rows = 0u64;
        for d in read {
            file_rows = file_rows.saturating_add(d.file_rows);
            batches.extend(d.batches);
        }
        manifest.check_rows(file_rows, &mpath)?;
        Ok(Decoded {
            schema: target,
            batches,
            file_rows,
        })
    })?
}

/// Row groups `read_dataset` fetches ahead of its decoder: all of a part's
/// in practice (it keeps every batch, decoded, anyway).
const WHOLE_PART_READ_AHEAD: usize = 4096;

/// Fail with `PartCorrupted` unless `data` hashes to `expected`.
pub fn verify_bytes(data: &[u8], key: &str, expected: &str) -> Result<()> {
    let actual = sha256_hex(data);
    if actual != expected {
        return Err(Error::PartCorrupted {
            path: key.to_string(),
            reason: format!("checksum mismatch: manifest has sha256 {expected}, part has {actual}"),
        });
    }
    Ok(())
}

/// The dataset's Arrow schema: from the manifest if it records one (no data
/// file is touched), else from the first part's footer.
pub fn read_schema(store: Arc<StoreHandle>, dataset_key: &str) -> Result<SchemaRef> {
    crate::store::keys::object_segments(dataset_key)?;
    let dataset_key = dataset_key.to_string();
    crate::runtime::block_on(async move {
        let manifest = read_manifest(&store, &dataset_key).await?;
        if let Some(schema) = manifest.schema(&child_key(&dataset_key, MANIFEST))? {
            return Ok(schema);
        }
        let first = child_key(&dataset_key, &manifest.parts[0]);
        let size = store
            .head(&first)
            .await
            .map_err(vanished(&dataset_key))?
            .size;
        expected_schema(
            &store,
            &dataset_key,
            &manifest,
            &[PartRef::sized(first, size)],
            store.default_io_concurrency(),
        )
        .await
    })?
}
