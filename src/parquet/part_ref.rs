//! A part as its writer recorded it (key, size, footer size, SHA-256), and
//! its footer fetched with one GET or taken from the store handle's cache.
//!
//! With the size known, no HEAD is needed: the footer's ranged GET is the
//! existence check (`NotFound` if the part is gone) and the size check (the
//! reply states the object's size; another size is corruption). With the
//! SHA-256 known, the parsed footer is kept for the handle's life under the
//! part's key and digest: a rewritten part has another digest and misses.

use std::sync::Arc;

use crate::error::Result;
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

/// The footer of `part` (without the page index): cached, or one GET.
pub async fn footer(store: &StoreHandle, part: &PartRef) -> Result<Arc<Footer>> {
    cached(store, part, false, || {
        decode::read_footer_hinted(store, &part.key, part.size, part.footer_hint)
    })
    .await
}

/// The footer for reading `part` in row-range pieces (see
/// [`decode::read_piece_footer`]): cached, or one or two GETs.
pub async fn piece_footer(store: &StoreHandle, part: &PartRef) -> Result<Arc<Footer>> {
    cached(store, part, true, || {
        decode::read_piece_footer(store, &part.key, part.size, part.footer_hint)
    })
    .await
}

async fn cached<F, Fut>(
    store: &StoreHandle,
    part: &PartRef,
    page_index: bool,
    read: F,
) -> Result<Arc<Footer>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Footer>>,
{
    let key = part.cache_key(page_index);
    if let Some(hit) = key.as_deref().and_then(|k| store.cache().get::<Footer>(k)) {
        return Ok(hit);
    }
    let footer = crate::error::catch_unwind_future(read())
        .await
        .unwrap_or_else(|payload| Err(decode::footer_panic(&part.key, payload.as_ref())))?;
    let footer = Arc::new(footer);
    if let Some(key) = key {
        let bytes = footer.metadata().metadata().memory_size();
        store.cache().insert(key, footer.clone(), bytes);
    }
    Ok(footer)
}

/// Open `part` for reading as `opts` asks: its footer (cached, or one GET),
/// then only the projected column chunks of the row groups kept.
pub async fn open(store: &StoreHandle, part: &PartRef, opts: &ReadOptions) -> Result<PartStream> {
    let footer = footer(store, part).await?;
    decode::open_part_with(store, &part.key, &footer, opts).await
}

/// Read `part` whole (see [`open`]).
pub async fn read(
    store: &StoreHandle,
    part: &PartRef,
    opts: &ReadOptions,
) -> Result<decode::Decoded> {
    open(store, part, opts).await?.read_all().await
}
