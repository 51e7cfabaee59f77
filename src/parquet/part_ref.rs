//! A part as its writer recorded it (key, size, footer size, SHA-256), and
//! its footer fetched with one GET or taken from the store handle's cache.
//!
//! With the size known, no HEAD is needed: the footer's ranged GET is the
//! existence check (`NotFound` if the part is gone) and the size check (the
//! reply states the object's size; another size is corruption). With the
//! SHA-256 known, the parsed footer is kept for the handle's life under the
//! part's key and digest: a rewritten part has another digest and misses.
//!
//! A footer from the cache says nothing of the part's presence now: where
//! the read depends on it, a HEAD checks the part is still there at its
//! recorded size ([`checked_footer`]), alongside the chunk fetches in
//! [`read`], so that a warm read stays one round trip shorter than a cold one.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::parquet::decode::{self, Footer, PartStream, ReadOptions};
use crate::store::StoreHandle;

/// One Parquet object to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRef {
    pub key: String,
    /// Its size in bytes (from a manifest or a HEAD).
    pub size: u64,
    /// The bytes after its last row group, if its writer recorded them.
    pub footer_hint: Option<u64>,
    /// Its SHA-256 (hex), if its writer recorded it: makes the footer cacheable.
    pub sha256: Option<String>,
}

impl PartRef {
    /// A part known only by key and size (one GET of 64 KiB for the footer,
    /// a second one if it is larger; never cached).
    pub fn sized(key: String, size: u64) -> Self {
        Self {
            key,
            size,
            footer_hint: None,
            sha256: None,
        }
    }

    fn cache_key(&self, page_index: bool) -> Option<String> {
        let sha = self.sha256.as_deref()?;
        Some(format!(
            "footer\0{}\0{}\0{sha}\0{page_index}",
            self.key, self.size
        ))
    }
}

/// The footer of `part` (without the page index): cached, or one GET. A
/// cached footer is not a check that the part is still there: see
/// [`checked_footer`].
pub async fn footer(store: &StoreHandle, part: &PartRef) -> Result<Arc<Footer>> {
    Ok(footer_or_hit(store, part).await?.0)
}

/// [`footer`], and whether it came from the cache (`true`: no request made).
async fn footer_or_hit(store: &StoreHandle, part: &PartRef) -> Result<(Arc<Footer>, bool)> {
    cached(store, part, false, || {
        decode::read_footer_hinted(store, &part.key, part.size, part.footer_hint)
    })
    .await
}

/// [`footer`], and the check that `part` is still there at its recorded
/// size: the footer's GET is that check, and a footer from the cache is
/// followed by one HEAD. A cached footer of another version of the object
/// than the one there now is dropped, and the footer read again.
pub async fn checked_footer(store: &StoreHandle, part: &PartRef) -> Result<Arc<Footer>> {
    let (footer, hit) = footer_or_hit(store, part).await?;
    if hit && !still_there(store, part, &footer).await? {
        return Ok(footer_or_hit(store, part).await?.0);
    }
    Ok(footer)
}

/// One HEAD: `part` is there, at its recorded size (`NotFound` if it is
/// gone, `PartCorrupted` if it is another size). `Ok(false)`: it is, but
/// it is not the object `footer` was read from (another ETag): the cached
/// footer is dropped, as a replaced part may differ whatever its size.
pub async fn still_there(store: &StoreHandle, part: &PartRef, footer: &Footer) -> Result<bool> {
    let meta = store.head(&part.key).await?;
    if meta.size != part.size {
        return Err(Error::PartCorrupted {
            path: part.key.clone(),
            reason: crate::parquet::range_reader::wrong_size(meta.size, part.size),
        });
    }
    let same = match (meta.e_tag.as_deref(), footer.e_tag()) {
        (Some(now), Some(then)) => now == then,
        _ => true,
    };
    if !same {
        for page_index in [false, true] {
            if let Some(key) = part.cache_key(page_index) {
                store.cache().remove(&key);
            }
        }
    }
    Ok(same)
}

fn cached_footer(store: &StoreHandle, part: &PartRef, page_index: bool) -> Option<Arc<Footer>> {
    let key = part.cache_key(page_index)?;
    store.cache().get::<Footer>(&key)
}

/// The footer for reading `part` in row-range pieces (see
/// [`decode::read_piece_footer`]): cached, or one or two GETs.
pub async fn piece_footer(store: &StoreHandle, part: &PartRef) -> Result<Arc<Footer>> {
    cached(store, part, true, || {
        decode::read_piece_footer(store, &part.key, part.size, part.footer_hint)
    })
    .await
    .map(|(footer, _)| footer)
}

async fn cached<F, Fut>(
    store: &StoreHandle,
    part: &PartRef,
    page_index: bool,
    read: F,
) -> Result<(Arc<Footer>, bool)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Footer>>,
{
    if let Some(hit) = cached_footer(store, part, page_index) {
        return Ok((hit, true));
    }
    let key = part.cache_key(page_index);
    let footer = crate::error::catch_unwind_future(read())
        .await
        .unwrap_or_else(|payload| Err(decode::footer_panic(&part.key, payload.as_ref())))?;
    let footer = Arc::new(footer);
    if let Some(key) = key {
        let bytes = footer.metadata().metadata().memory_size();
        store.cache().insert(key, footer.clone(), bytes);
    }
    Ok((footer, false))
}

/// Open `part` for reading as `opts` asks: its footer (cached, or one GET),
/// then only the projected column chunks of the row groups kept.
pub async fn open(store: &StoreHandle, part: &PartRef, opts: &ReadOptions) -> Result<PartStream> {
    let footer = footer(store, part).await?;
    decode::open_part_with(store, &part.key, &footer, opts).await
}

/// Read `part` whole (see [`open`]). With its footer cached, a HEAD checks
/// that the part is still there while its chunks are fetched: a part whose
/// row groups are all pruned, or a read of no column, fetches no chunk.
pub async fn read(
    store: &StoreHandle,
    part: &PartRef,
    opts: &ReadOptions,
) -> Result<decode::Decoded> {
    let (footer, hit) = footer_or_hit(store, part).await?;
    let decode = async {
        decode::open_part_with(store, &part.key, &footer, opts)
            .await?
            .read_all()
            .await
    };
    if !hit {
        return decode.await; // the footer's GET was the check
    }
    // A decode through another version's footer may fail as well: whether
    // the footer was the object's decides which result stands.
    let (same, decoded) = futures::join!(still_there(store, part, &footer), decode);
    if same? {
        return decoded;
    }
    // The cached footer was another version's (now dropped): read afresh.
    let (footer, _) = footer_or_hit(store, part).await?;
    decode::open_part_with(store, &part.key, &footer, opts)
        .await?
        .read_all()
        .await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use bytes::Bytes;

    use super::*;
    use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
    use crate::store::PutMode;

    /// A footer from the cache is not taken as proof that the part is still
    /// there: a read of no chunk, and the stream's check, find it gone or
    /// resized.
    #[test]
    fn a_cached_footer_still_checks_the_part() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..1_000))],
        )
        .unwrap();
        let opts = EncodeOptions::new("zstd", Some(100), None).unwrap();
        let (bytes, summary) = encode_to_bytes(&[batch], schema, &opts).unwrap();
        let store = StoreHandle::open("memory://", &BTreeMap::new()).unwrap();
        let rt = crate::runtime::get().unwrap();
        let put = |b: Bytes| {
            rt.block_on(store.put("p.parquet", b, PutMode::Overwrite))
                .unwrap()
        };
        put(bytes.clone());
        let part = PartRef {
            key: "p.parquet".into(),
            size: bytes.len() as u64,
            footer_hint: Some(summary.footer_bytes),
            sha256: Some("ab".repeat(32)),
        };
        // No row group kept: no chunk is fetched.
        let none = ReadOptions {
            row_groups: Some(vec![]),
            ..Default::default()
        };
        let read = |o: &ReadOptions| rt.block_on(read(&store, &part, o));
        assert_eq!(read(&none).unwrap().file_rows, 1_000); // cold: the footer's GET
        assert!(cached_footer(&store, &part, false).is_some());
        assert_eq!(read(&none).unwrap().file_rows, 1_000); // warm: a HEAD
        rt.block_on(store.delete("p.parquet")).unwrap();
        assert!(cached_footer(&store, &part, false).is_some());
        assert!(matches!(read(&none), Err(Error::NotFound { .. })));
        assert!(matches!(
            rt.block_on(checked_footer(&store, &part)),
            Err(Error::NotFound { .. })
        ));
        // The unchecked footer is the cache's: callers that check otherwise.
        assert!(rt.block_on(footer(&store, &part)).is_ok());
        let mut grown = bytes.to_vec();
        grown.extend_from_slice(b"more");
        put(Bytes::from(grown));
        assert!(matches!(read(&none), Err(Error::PartCorrupted { .. })));
        assert!(matches!(
            rt.block_on(checked_footer(&store, &part)),
            Err(Error::PartCorrupted { .. })
        ));
        put(bytes);
        assert_eq!(read(&ReadOptions::default()).unwrap().file_rows, 1_000);
    }
}
