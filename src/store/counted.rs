//! The object_store every [`super::StoreHandle`] talks through: it counts
//! the requests and the bytes they move (see [`Counters`]), and logs each
//! request at DEBUG (target `pds::store`: method, object, bytes, outcome,
//! time). Nothing else changes: every call goes to the wrapped store.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
    UploadPart,
};

/// The log target of request lines (Python logger `pds.store`).
pub const TARGET: &str = "pds::store";

/// What one store handle's requests added up to since it was opened.
///
/// A request is one call pds makes on the object_store client: a GET (a
/// whole object or one range), HEAD, PUT, each part of a multipart upload
/// and its completion, a LIST (one per listing, however many pages it
/// takes), a DELETE (one per object), a COPY or a rename; and, on file://,
/// the compare-and-swap write pds makes itself. The client's own transparent
/// HTTP retries are not counted again. Counted when the request is sent,
/// whether it succeeds or not.
#[derive(Debug, Default)]
pub struct Counters {
    requests: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// A reading of [`Counters`] (see [`Counters::now`]): subtract two to get
/// what happened in between.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, earlier: Counts) -> Counts {
        Counts {
            requests: self.requests.saturating_sub(earlier.requests),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
        }
    }
}

impl Counters {
    /// The totals so far.
    pub fn now(&self) -> Counts {
        Counts {
            requests: self.requests.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
        }
    }

    /// One request sent, writing `written` bytes.
    pub fn sent(&self, written: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_written.fetch_add(written, Ordering::Relaxed);
    }

    fn read(&self, bytes: u64) {
        self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// When an operation started, and the store's counts then: what its INFO
/// line reports the operation cost (see [`Started::cost`]).
#[derive(Debug, Clone, Copy)]
pub struct Started {
    at: Instant,
    counts: Counts,
}

impl Started {
    /// Start timing an operation on `store`.
    pub fn now(store: &super::StoreHandle) -> Self {
        Self {
            at: Instant::now(),
            counts: store.counts(),
        }
    }

    /// The counts since the start (others' requests on the same handle
    /// meanwhile included; see [`super::StoreHandle::counts`]) and the
    /// milliseconds.
    pub fn cost(&self, store: &super::StoreHandle) -> (Counts, f64) {
        (
            store.counts() - self.counts,
            self.at.elapsed().as_secs_f64() * 1e3,
        )
    }
}

/// How a request ended, as its DEBUG line says it.
pub enum Ended<'a> {
    Ok,
    /// The object (or the version asked for) is not there.
    NotFound,
    Failed(&'a dyn std::fmt::Display),
}

/// Log one finished request at DEBUG: `method object: outcome, bytes, time`.
pub fn log_request(
    method: &str,
    what: &dyn std::fmt::Display,
    bytes: u64,
    started: Instant,
    ended: Ended<'_>,
) {
    if !log::log_enabled!(target: TARGET, log::Level::Debug) {
        return;
    }
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match ended {
        Ended::Ok => log::debug!(target: TARGET, "{method} {what}: ok, {bytes} bytes, {ms:.1} ms"),
        Ended::NotFound => log::debug!(target: TARGET, "{method} {what}: not found, {ms:.1} ms"),
        Ended::Failed(e) => {
            // An error's URL may carry a signature (an Azure SAS, a signed
            // URL): logs get what error messages get, without it.
            let e = super::failure::redact_urls(&e.to_string());
            log::debug!(target: TARGET, "{method} {what}: failed after {ms:.1} ms: {e}")
        }
    }
}

/// [`log_request`] for an object_store result.
fn logged<T>(
    method: &str,
    what: &dyn std::fmt::Display,
    bytes: u64,
    started: Instant,
    r: &Result<T>,
) {
    let ended = match r {
        Ok(_) => Ended::Ok,
        Err(object_store::Error::NotFound { .. }) => Ended::NotFound,
        Err(e) => Ended::Failed(e),
    };
    log_request(method, what, bytes, started, ended);
}

/// An object_store that counts and logs every request (see the module doc).
#[derive(Debug)]
pub struct Counted {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<Counters>,
    /// Whether the wrapped store reads many ranges in one call (memory,
    /// file://); a remote store's ranges are coalesced here into the GETs
    /// they cost, so that each is counted.
    native_ranges: bool,
}

impl Counted {
    pub fn new(inner: Arc<dyn ObjectStore>, counters: Arc<Counters>, native_ranges: bool) -> Self {
        Self {
            inner,
            counters,
            native_ranges,
        }
    }
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counted({})", self.inner)
    }
}

/// How a GET's options show in the log.
fn get_method(options: &GetOptions) -> &'static str {
    match (options.head, &options.range) {
        (true, _) => "HEAD",
        (false, Some(_)) => "GET range",
        (false, None) => "GET",
    }
}

#[async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let bytes = payload.content_length() as u64;
        let method = match opts.mode {
            object_store::PutMode::Overwrite => "PUT",
            object_store::PutMode::Create => "PUT create-only",
            object_store::PutMode::Update(_) => "PUT if-match",
        };
        self.counters.sent(bytes);
        let started = Instant::now();
        let r = self.inner.put_opts(location, payload, opts).await;
        logged(method, location, bytes, started, &r);
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.put_multipart_opts(location, opts).await;
        logged("multipart start", location, 0, started, &r);
        Ok(Box::new(CountedUpload {
            inner: r?,
            counters: self.counters.clone(),
            location: location.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let method = get_method(&options);
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.get_opts(location, options).await;
        let bytes = match &r {
            Ok(g) if method != "HEAD" => g.range.end - g.range.start,
            _ => 0,
        };
        self.counters.read(bytes);
        logged(method, location, bytes, started, &r);
        r
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if !self.native_ranges {
            return object_store::coalesce_ranges(
                ranges,
                |range| self.get_range(location, range),
                object_store::OBJECT_STORE_COALESCE_DEFAULT,
            )
            .await;
        }
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.get_ranges(location, ranges).await;
        let bytes = match &r {
            Ok(parts) => parts.iter().map(|b| b.len() as u64).sum(),
            Err(_) => 0,
        };
        self.counters.read(bytes);
        logged("GET ranges", location, bytes, started, &r);
        r
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counters = self.counters.clone();
        let started = Instant::now();
        self.inner
            .delete_stream(locations)
            .inspect(move |r| {
                counters.sent(0);
                match r {
                    Ok(p) => logged("DELETE", p, 0, started, r),
                    Err(_) => logged("DELETE", &"an object", 0, started, r),
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listed(prefix, self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listed(prefix, self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.list_with_delimiter(prefix).await;
        logged("LIST", &shown(prefix), 0, started, &r);
        r
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.copy_opts(from, to, options).await;
        logged("COPY", &format_args!("{from} to {to}"), 0, started, &r);
        r
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.rename_opts(from, to, options).await;
        logged("RENAME", &format_args!("{from} to {to}"), 0, started, &r);
        r
    }
}

/// A listing's prefix as the log shows it.
fn shown(prefix: Option<&Path>) -> String {
    match prefix {
        Some(p) => format!("{p}/"),
        None => "/".into(),
    }
}

impl Counted {
    /// Count a listing once and log it when it fails, or when it is
    /// dropped (ended, or left early by a caller that wanted its first
    /// object).
    fn listed(
        &self,
        prefix: Option<&Path>,
        stream: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counters.sent(0);
        let mut listing = Listing {
            what: shown(prefix),
            started: Instant::now(),
            seen: 0,
            failed: false,
        };
        stream
            .inspect(move |r| match r {
                Ok(_) => listing.seen += 1,
                Err(_) => {
                    listing.failed = true;
                    logged("LIST", &listing.what, 0, listing.started, r);
                }
            })
            .boxed()
    }
}

/// A listing in progress, logged (unless it failed) when dropped.
struct Listing {
    what: String,
    started: Instant,
    seen: u64,
    failed: bool,
}

impl Drop for Listing {
    fn drop(&mut self) {
        if !self.failed {
            let what = format_args!("{} ({} objects)", self.what, self.seen);
            log_request("LIST", &what, 0, self.started, Ended::Ok);
        }
    }
}

/// A multipart upload whose parts and completion are counted and logged.
#[derive(Debug)]
struct CountedUpload {
    inner: Box<dyn MultipartUpload>,
    counters: Arc<Counters>,
    location: Path,
}

#[async_trait]
impl MultipartUpload for CountedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let bytes = data.content_length() as u64;
        self.counters.sent(bytes);
        let started = Instant::now();
        let location = self.location.clone();
        let part = self.inner.put_part(data);
        Box::pin(async move {
            let r = part.await;
            logged("PUT part", &location, bytes, started, &r);
            r
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.complete().await;
        logged("multipart complete", &self.location, 0, started, &r);
        r
    }

    async fn abort(&mut self) -> Result<()> {
        self.counters.sent(0);
        let started = Instant::now();
        let r = self.inner.abort().await;
        logged("multipart abort", &self.location, 0, started, &r);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::block_on;
    use object_store::memory::InMemory;

    fn counted() -> (Counted, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let store = Counted::new(Arc::new(InMemory::new()), counters.clone(), true);
        (store, counters)
    }

    #[test]
    fn every_request_is_counted_with_its_bytes() {
        let (s, c) = counted();
        let p = Path::from("a/b");
        block_on(async {
            s.put(&p, PutPayload::from_static(b"hello")).await.unwrap();
            assert_eq!(s.get(&p).await.unwrap().bytes().await.unwrap(), "hello");
            s.get_range(&p, 1..3).await.unwrap();
            s.head(&p).await.unwrap();
            assert!(s.head(&Path::from("nope")).await.is_err());
            let listed: Vec<_> = s.list(None).collect().await;
            assert_eq!(listed.len(), 1);
            s.delete(&p).await.unwrap();
        })
        .unwrap();
        // PUT, GET, GET range, HEAD, failed HEAD, LIST, DELETE.
        assert_eq!(
            c.now(),
            Counts {
                requests: 7,
                bytes_read: 5 + 2,
                bytes_written: 5
            }
        );
    }

    #[test]
    fn ranges_of_a_remote_store_count_each_get() {
        let counters = Arc::new(Counters::default());
        let s = Counted::new(Arc::new(InMemory::new()), counters.clone(), false);
        let p = Path::from("x");
        let body = vec![7u8; 4 << 20];
        block_on(async {
            s.put(&p, PutPayload::from(body)).await.unwrap();
            let before = counters.now();
            // Two ranges far apart are two GETs; two adjacent ones coalesce.
            s.get_ranges(&p, &[0..10, (3 << 20)..(3 << 20) + 10])
                .await
                .unwrap();
            assert_eq!((counters.now() - before).requests, 2);
            let before = counters.now();
            s.get_ranges(&p, &[0..10, 10..20]).await.unwrap();
            assert_eq!((counters.now() - before).requests, 1);
        })
        .unwrap();
    }

    #[test]
    fn counts_subtract() {
        let a = Counts {
            requests: 5,
            bytes_read: 10,
            bytes_written: 3,
        };
        let b = Counts {
            requests: 2,
            bytes_read: 4,
            bytes_written: 3,
        };
        assert_eq!(
            a - b,
            Counts {
                requests: 3,
                bytes_read: 6,
                bytes_written: 0
            }
        );
    }
}
