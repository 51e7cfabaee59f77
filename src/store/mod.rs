//! The store layer: one object_store per URL, keys confined to its root, and
//! the two conditional puts (create-only and compare-and-swap) that dataset
//! and table commits are built from.

pub mod aws_credentials;
pub mod azure;
pub mod built;
pub mod cache;
mod cloud;
pub mod config;
pub mod counted;
pub mod failure;
pub mod gcs;
#[cfg(test)]
pub(crate) mod hooked;
pub mod keys;
mod local_cas;
pub mod local_leftovers;
pub mod occupancy;
#[cfg(test)]
mod testing;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, ObjectMeta, ObjectStore, ObjectStoreExt, PutOptions, PutPayload,
    RenameOptions, RenameTargetMode, UpdateVersion,
};

pub use built::Scheme;

use crate::error::{Error, Result};

/// Metadata of one object, with its key relative to the store root.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    pub key: String,
    pub size: u64,
    pub last_modified: DateTime<Utc>,
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

/// How a put treats an existing object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Replace whatever is there.
    Overwrite,
    /// Create only: fail with `AlreadyExists` if the key exists (If-None-Match: *).
    Create,
    /// Compare-and-swap: replace only if the object still has this ETag/version
    /// (If-Match); otherwise fail with `Precondition`.
    Update {
        e_tag: Option<String>,
        version: Option<String>,
    },
}

/// What a successful put reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutcome {
    pub e_tag: Option<String>,
    pub version: Option<String>,
    pub size: u64,
}

/// A listing: objects, and (for non-recursive listings) the sub-folders.
#[derive(Debug, Default)]
pub struct Listing {
    pub objects: Vec<Meta>,
    pub folders: Vec<String>,
}

/// An object store opened from a URL, confined to the URL's prefix.
pub struct StoreHandle {
    url: String,
    built: built::Built,
    /// Parsed immutable objects (footers) kept for the handle's life.
    cache: cache::ObjectCache,
    /// Whether a LIST showed that the bucket exists (see [`Self::bucket_missing`]).
    bucket_seen: std::sync::atomic::AtomicBool,
    /// The requests made through `built.store` (see [`Self::counts`]).
    counters: Arc<counted::Counters>,
}

/// Requests in flight by default on a remote store (S3 and alike): a read
/// there waits on round trips, not on cores.
pub const REMOTE_IO_CONCURRENCY: usize = 32;

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Options may hold credentials: only the URL is shown.
        f.debug_struct("StoreHandle")
            .field("url", &self.url)
            .finish()
    }
}

impl StoreHandle {
    /// Open the store named by `url` (see [`config::build`]).
    pub fn open(url: &str, options: &BTreeMap<String, String>) -> Result<Self> {
        Self::open_with_credentials(url, options, None)
    }

    /// [`StoreHandle::open`], with `credentials` signing every S3 request
    /// (for example an [`aws_credentials::CachingCredentials`]).
    pub fn open_with_credentials(
        url: &str,
        options: &BTreeMap<String, String>,
        credentials: Option<object_store::aws::AwsCredentialProvider>,
    ) -> Result<Self> {
        Ok(Self::counting(
            url.to_string(),
            config::build_with_credentials(url, options, credentials)?,
        ))
    }

    /// A handle over `built` whose requests go through [`counted::Counted`].
    fn counting(url: String, mut built: built::Built) -> Self {
        let counters = Arc::new(counted::Counters::default());
        let native_ranges = !built.scheme.is_remote();
        built.store = Arc::new(counted::Counted::new(
            built.store,
            counters.clone(),
            native_ranges,
        ));
        Self {
            url,
            built,
            cache: cache::ObjectCache::default(),
            bucket_seen: Default::default(),
            counters,
        }
    }

    /// The requests this handle has made since it was opened, and the bytes
    /// they read and wrote (what counts as a request: [`counted::Counters`]).
    /// Operations that share the handle add to the same totals: the
    /// difference of two readings around an operation is that operation's
    /// cost only if nothing else used the handle meanwhile.
    pub fn counts(&self) -> counted::Counts {
        self.counters.now()
    }

    /// A store over `object_store`, for tests and benches.
    pub fn from_object_store(store: Arc<dyn ObjectStore>, prefix: &str) -> Result<Self> {
        let built = built::Built {
            scheme: Scheme::Memory,
            store,
            prefix: keys::segments(prefix)?,
            local: None,
        };
        Ok(Self::counting(format!("custom://{prefix}"), built))
    }

    /// A store another library implements (a Python `remote_store.Store`,
    /// adapted), named `label`: keys are the store's own, no prefix.
    pub fn foreign(store: Arc<dyn ObjectStore>, label: &str) -> Self {
        let built = built::Built {
            scheme: Scheme::Foreign,
            store,
            prefix: Vec::new(),
            local: None,
        };
        Self::counting(format!("remote-store:{label}"), built)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn scheme(&self) -> Scheme {
        self.built.scheme
    }

    /// The handle's cache of parsed immutable objects.
    pub fn cache(&self) -> &cache::ObjectCache {
        &self.cache
    }

    /// How many requests to keep in flight when the caller did not say:
    /// [`REMOTE_IO_CONCURRENCY`] on a remote store; on memory and local
    /// files, where a request costs CPU rather than waiting, the cores (at
    /// least 2).
    pub fn default_io_concurrency(&self) -> usize {
        if self.built.scheme.is_remote() {
            return REMOTE_IO_CONCURRENCY;
        }
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2)
    }

    /// The underlying object_store, for range readers and multipart writers.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.built.store
    }

    /// The object path of a key that names an object.
    pub fn path(&self, key: &str) -> Result<Path> {
        let segments = keys::object_segments(key)?;
        if self.built.scheme == Scheme::File {
            keys::check_local_name(key, &segments)?;
        }
        keys::join(&self.built.prefix, &segments)
    }

    /// The object path of a key that may be the root (for listings).
    fn prefix_path(&self, key: &str) -> Result<Option<Path>> {
        let segs = keys::segments(key)?;
        if segs.is_empty() && self.built.prefix.is_empty() {
            return Ok(None);
        }
        Ok(Some(keys::join(&self.built.prefix, &segs)?))
    }

    fn meta(&self, m: ObjectMeta) -> Option<Meta> {
        Some(Meta {
            key: keys::relative(&self.built.prefix, &m.location)?,
            size: m.size,
            last_modified: m.last_modified,
            e_tag: m.e_tag,
            version: m.version,
        })
    }

    /// The error for a failed LIST: [`Error::BucketNotFound`] if a remote
    /// store answered it 404 (a LIST of any prefix of a bucket that exists
    /// succeeds, empty or not), else the store's error.
    fn list_failed(&self, err: object_store::Error) -> Error {
        if self.built.scheme.is_remote() && failure::http_status(&err) == Some(404) {
            return self.bucket_not_found();
        }
        err.into()
    }

    /// [`Error::BucketNotFound`] for this store's bucket (the URL's host).
    fn bucket_not_found(&self) -> Error {
        let what = match self.built.scheme {
            Scheme::Gcs => "GCS bucket",
            Scheme::Azure => "Azure container",
            _ => "S3 bucket",
        };
        // `abfss://container@account...` names the container as the user.
        let name = url::Url::parse(&self.url)
            .ok()
            .map(|u| match u.username() {
                "" => u.host_str().unwrap_or_default().to_string(),
                container => container.to_string(),
            })
            .unwrap_or_default();
        Error::BucketNotFound { what, name }
    }

    /// Whether the bucket (or Azure container) the URL names is missing:
    /// `false` on local and memory stores. Meant for error paths, where an
    /// object that is absent may be absent because its bucket is.
    ///
    /// Cost: one LIST request (its first page) the first time; none once the
    /// bucket was seen to exist (that is kept for the handle's life; a
    /// missing bucket is asked again, as it may be created meanwhile).
    /// Errors: the LIST's error, if it fails otherwise (permissions, network).
    pub async fn bucket_missing(&self) -> Result<bool> {
        use std::sync::atomic::Ordering;
        if !self.built.scheme.is_remote() || self.bucket_seen.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let prefix = self.prefix_path("")?;
        match self.built.store.list(prefix.as_ref()).try_next().await {
            Ok(_) => {
                self.bucket_seen.store(true, Ordering::Relaxed);
                Ok(false)
            }
            Err(e) => match self.list_failed(e) {
                Error::BucketNotFound { .. } => Ok(true),
                other => Err(other),
            },
        }
    }

    /// `Err(BucketNotFound)` naming the bucket if it is missing (see
    /// [`Self::bucket_missing`], whose cost and errors this shares).
    pub async fn check_bucket(&self) -> Result<()> {
        match self.bucket_missing().await? {
            false => Ok(()),
            true => Err(self.bucket_not_found()),
        }
    }

    /// Run the read `op` (a GET, HEAD or range) on `key`'s path in the
    /// object store; its error as [`crate::error::read_error`] maps it
    /// (`NotFound` naming `key`).
    async fn read_op<'a, T, F>(
        &'a self,
        key: &str,
        op: impl FnOnce(&'a Arc<dyn ObjectStore>, Path) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = object_store::Result<T>> + 'a,
    {
        let path = self.path(key)?;
        op(&self.built.store, path)
            .await
            .map_err(|e| crate::error::read_error(e, key))
    }

    /// HEAD one object. `NotFound` if absent.
    pub async fn head(&self, key: &str) -> Result<Meta> {
        let m = self
            .read_op(key, |s, p| async move { s.head(&p).await })
            .await?;
        self.meta(m)
            .ok_or_else(|| Error::NotFound { path: key.into() })
    }

    /// HEAD one object, `None` if absent.
    pub async fn try_head(&self, key: &str) -> Result<Option<Meta>> {
        match self.head(key).await {
            Ok(m) => Ok(Some(m)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Run `op`, which writes or deletes `keys` (with `under`, everything
    /// under them), forgetting their cached bodies before and after it, so
    /// that no body read meanwhile is kept (see [`cache::ObjectCache::keep_object`]).
    async fn forgetting<T>(
        &self,
        keys: &[&str],
        under: bool,
        op: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        keys.iter().for_each(|k| self.cache.forget_object(k, under));
        let done = op.await;
        keys.iter().for_each(|k| self.cache.forget_object(k, under));
        done
    }

    /// PUT an object atomically, in the given mode.
    pub async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> Result<PutOutcome> {
        self.forgetting(&[key], false, self.put_now(key, data, mode))
            .await
    }

    /// Delete one object. Deleting an absent object is not an error here
    /// (S3 semantics); callers that need `NotFound` HEAD first.
    pub async fn delete(&self, key: &str) -> Result<()> {
        self.forgetting(&[key], false, self.delete_now(key)).await
    }

    /// Delete every object under the folder key `key`; the number deleted.
    pub async fn delete_prefix(&self, key: &str) -> Result<usize> {
        self.forgetting(&[key], true, self.delete_prefix_now(key))
            .await
    }

    /// Delete the given object keys concurrently, ignoring absent ones.
    pub async fn delete_many(&self, keys: &[String]) -> Result<()> {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.forgetting(&names, false, self.delete_many_now(keys))
            .await
    }

    /// Copy `src` to `dst`. With `overwrite=false`, fails with `AlreadyExists`
    /// if `dst` exists (natively where the store can, else by HEAD first).
    pub async fn copy(&self, src: &str, dst: &str, overwrite: bool) -> Result<()> {
        self.forgetting(&[dst], false, self.copy_now(src, dst, overwrite))
            .await
    }

    /// Move `src` to `dst` (a rename on file://, copy + delete elsewhere).
    pub async fn rename(&self, src: &str, dst: &str, overwrite: bool) -> Result<()> {
        self.forgetting(&[src, dst], false, self.rename_now(src, dst, overwrite))
            .await
    }

    /// GET a whole object.
    pub async fn get(&self, key: &str) -> Result<Bytes> {
        let got = self
            .read_op(key, |s, p| async move { s.get(&p).await })
            .await?;
        Ok(got.bytes().await?)
    }

    /// GET a whole object with its metadata (the ETag / version a
    /// compare-and-swap put needs). `NotFound` if it is absent.
    pub async fn get_with_meta(&self, key: &str) -> Result<(Bytes, Meta)> {
        let result = self
            .read_op(key, |s, p| async move { s.get(&p).await })
            .await?;
        let meta = self
            .meta(result.meta.clone())
            .ok_or_else(|| Error::InvalidPath {
                path: key.to_string(),
                reason: "the object lies outside the store root".into(),
            })?;
        Ok((result.bytes().await?, meta))
    }

    /// GET a byte range `[start, end)`.
    pub async fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes> {
        if end < start {
            return Err(Error::InvalidArgument(format!(
                "range end {end} is before start {start}"
            )));
        }
        self.read_op(key, |s, p| async move { s.get_range(&p, start..end).await })
            .await
    }

    /// PUT an object atomically, in the given mode.
    async fn put_now(&self, key: &str, data: Bytes, mode: PutMode) -> Result<PutOutcome> {
        let path = self.path(key)?;
        let size = data.len() as u64;
        if let (PutMode::Update { e_tag, .. }, Some(fs)) = (&mode, &self.built.local) {
            let expected = e_tag.clone().ok_or_else(|| {
                Error::InvalidArgument("compare-and-swap on file:// needs an ETag".into())
            })?;
            let target = fs.path_to_filesystem(&path)?;
            let key = key.to_string();
            self.counters.sent(size);
            let started = std::time::Instant::now();
            let e_tag = tokio::task::spawn_blocking(move || {
                local_cas::put_if_match(&target, &key, &expected, &data)
            })
            .await?;
            let ended = match &e_tag {
                Ok(_) => counted::Ended::Ok,
                Err(e) => counted::Ended::Failed(e),
            };
            counted::log_request("PUT if-match", &path, size, started, ended);
            let e_tag = e_tag?;
            return Ok(PutOutcome {
                e_tag: Some(e_tag),
                version: None,
                size,
            });
        }
        let os_mode = match mode {
            PutMode::Overwrite => object_store::PutMode::Overwrite,
            PutMode::Create => object_store::PutMode::Create,
            PutMode::Update { e_tag, version } => {
                object_store::PutMode::Update(UpdateVersion { e_tag, version })
            }
        };
        let opts = PutOptions {
            mode: os_mode,
            ..Default::default()
        };
        let r = self
            .built
            .store
            .put_opts(&path, PutPayload::from_bytes(data), opts)
            .await
            .map_err(|e| Error::from(e).at_path(key))?;
        Ok(PutOutcome {
            e_tag: r.e_tag,
            version: r.version,
            size,
        })
    }

    /// Create `key` with `data`, create-only, for a uniquely named object
    /// that only this writer creates (a data part, a tombstone).
    ///
    /// A PUT whose reply was lost may be retried (by pds or by the caller)
    /// after the store applied it; the retry then finds the object. If it
    /// holds exactly `data`, the object is this writer's own and the call
    /// succeeds; anything else there is `AlreadyExists`.
    ///
    /// A PUT that fails so that it may have been applied (a lost reply, a
    /// reset, a server error) is tried again, up to 3 times in all.
    ///
    /// Cost: 1 PUT; 1 GET more only when the object already exists.
    pub async fn put_create_own(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
        let expected = data.clone();
        self.put_create_checked(key, data, || async move {
            let (there, meta) = self.get_with_meta(key).await?;
            Ok((there == expected).then(|| PutOutcome {
                e_tag: meta.e_tag,
                version: meta.version,
                size: expected.len() as u64,
            }))
        })
        .await
    }

    /// Replace `key` with `data` if it is still the object with `e_tag` /
    /// `version` (compare-and-swap, If-Match), for a writer whose `data` no
    /// other writer puts (it records the writer's parts and time).
    ///
    /// A PUT whose reply was lost may have been applied, and a retry of it
    /// (by pds or inside object_store) is then refused: the object is no
    /// longer the one it expects. So every refusal (`Precondition`, or
    /// `NotFound`) reads the object back: if it holds exactly `data`, the
    /// swap is this writer's own and the call succeeds (with the ETag read
    /// back); anything else is `Precondition` (another writer swapped
    /// first, or the object was removed). A PUT that fails so that it may
    /// have been applied is tried again, up to 3 times in all; after the
    /// last, the object is read back the same way before the error stands.
    ///
    /// Cost: 1 PUT; 1 GET more only when refused or failed.
    pub async fn put_update_own(
        &self,
        key: &str,
        data: Bytes,
        e_tag: Option<String>,
        version: Option<String>,
    ) -> Result<PutOutcome> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mode = PutMode::Update {
                e_tag: e_tag.clone(),
                version: version.clone(),
            };
            let failed = match self.put(key, data.clone(), mode).await {
                Ok(done) => return Ok(done),
                Err(e) => e,
            };
            let refused = matches!(failed, Error::Precondition { .. } | Error::NotFound { .. });
            if !refused && failed.may_have_applied() && tries < 3 {
                log::debug!(target: counted::TARGET, "retrying compare-and-swap PUT {key} (attempt {} of 3) after: {}", tries + 1, failure::redact_urls(&failed.to_string()));
                tokio::time::sleep(std::time::Duration::from_millis(50 * tries)).await;
                continue;
            }
            if !refused && !failed.may_have_applied() {
                return Err(failed);
            }
            return match self.get_with_meta(key).await {
                Ok((there, meta)) if there == data => Ok(PutOutcome {
                    e_tag: meta.e_tag,
                    version: meta.version,
                    size: data.len() as u64,
                }),
                Ok(_) | Err(Error::NotFound { .. }) if refused => Err(Error::Precondition {
                    path: key.to_string(),
                }),
                // Refused, but unread: this writer's own swap (its reply
                // lost) cannot be told from another's, so the outcome is
                // unknown; the read's error says so (it may have applied).
                Err(read) if refused && read.may_have_applied() => Err(read),
                _ => Err(failed),
            };
        }
    }

    /// Create `key` with `data`, create-only. When the create is refused
    /// because the object exists, `is_own` decides whether it is this
    /// writer's (its own create, applied but its reply lost, then retried):
    /// `Some` outcome if so, `None` for `AlreadyExists` naming `key`.
    ///
    /// A PUT that fails so that it may have been applied (a lost reply, a
    /// reset, a server error) is tried again, up to 3 times in all.
    ///
    /// Cost: 1 PUT, plus what `is_own` costs when the object exists.
    pub async fn put_create_checked<F, Fut>(
        &self,
        key: &str,
        data: Bytes,
        is_own: F,
    ) -> Result<PutOutcome>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Option<PutOutcome>>>,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.put(key, data.clone(), PutMode::Create).await {
                Err(Error::AlreadyExists { .. }) | Err(Error::Precondition { .. }) => {
                    return is_own().await?.ok_or_else(|| Error::AlreadyExists {
                        path: key.to_string(),
                    });
                }
                Err(e) if e.may_have_applied() && tries < 3 => {
                    log::debug!(target: counted::TARGET, "retrying create-only PUT {key} (attempt {} of 3) after: {}", tries + 1, failure::redact_urls(&e.to_string()));
                    tokio::time::sleep(std::time::Duration::from_millis(50 * tries)).await;
                }
                other => return other,
            }
        }
    }

    /// Delete one object. Deleting an absent object is not an error here
    /// (S3 semantics); callers that need `NotFound` HEAD first.
    async fn delete_now(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match self.built.store.delete(&path).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// List objects under `key` (a folder key; `""` is the root).
    pub async fn list(&self, key: &str, recursive: bool) -> Result<Listing> {
        let prefix = self.prefix_path(key)?;
        let mut out = Listing::default();
        if recursive {
            let mut stream = self.built.store.list(prefix.as_ref());
            while let Some(m) = stream.try_next().await.map_err(|e| self.list_failed(e))? {
                out.objects.extend(self.meta(m));
            }
        } else {
            let r = self
                .built
                .store
                .list_with_delimiter(prefix.as_ref())
                .await
                .map_err(|e| self.list_failed(e))?;
            out.objects = r.objects.into_iter().filter_map(|m| self.meta(m)).collect();
            out.folders = r
                .common_prefixes
                .iter()
                .filter_map(|p| keys::relative(&self.built.prefix, p))
                .collect();
        }
        out.objects.sort_by(|a, b| a.key.cmp(&b.key));
        out.folders.sort();
        Ok(out)
    }

    /// Whether any object lives below the folder `key`.
    pub async fn folder_exists(&self, key: &str) -> Result<bool> {
        let prefix = self.prefix_path(key)?;
        let mut stream = self.built.store.list(prefix.as_ref());
        let first = stream.try_next().await.map_err(|e| self.list_failed(e))?;
        Ok(first.is_some())
    }

    /// Delete every object below the folder `key`; returns how many.
    ///
    /// An object that a concurrent delete removed first is not an error. On
    /// `file://`, what listings cannot show goes too: staging files of
    /// writes that were killed (`name#<digits>`), and the emptied folders.
    async fn delete_prefix_now(&self, key: &str) -> Result<usize> {
        let prefix = self.prefix_path(key)?;
        let store = self.built.store.clone();
        let locations = store.list(prefix.as_ref()).map_ok(|m| m.location).boxed();
        let mut results = store.delete_stream(locations);
        let mut deleted = 0;
        while let Some(r) = results.next().await {
            match r {
                Ok(_) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.list_failed(e)),
            }
        }
        if let (Some(fs), Some(prefix)) = (&self.built.local, prefix.as_ref()) {
            let dir = fs.path_to_filesystem(prefix)?;
            tokio::task::spawn_blocking(move || local_leftovers::remove_leftovers(&dir)).await??;
        }
        Ok(deleted)
    }

    /// On `file://`, remove the staging files of killed writes below the
    /// folder `key` older than `older_than` (all if `None`), of the objects
    /// and folders `owns` accepts (names relative to `key`; see
    /// [`local_leftovers`]), and the folder `key` itself if `remove_dir` and
    /// it is left empty. Returns their keys (with the `#<digits>` suffix).
    /// Nothing elsewhere, and nothing at all on other stores (their uploads
    /// leave no files).
    pub async fn remove_staging(
        &self,
        key: &str,
        older_than: Option<std::time::SystemTime>,
        owns: impl local_leftovers::Owns,
        remove_dir: bool,
    ) -> Result<Vec<String>> {
        let (Some(fs), Some(prefix)) = (&self.built.local, self.prefix_path(key)?) else {
            return Ok(Vec::new());
        };
        let dir = fs.path_to_filesystem(&prefix)?;
        let removed = tokio::task::spawn_blocking(move || {
            local_leftovers::remove_staging(&dir, older_than, owns, remove_dir)
        })
        .await??;
        let key = keys::segments(key)?.join("/");
        Ok(removed
            .into_iter()
            .map(|rel| match key.is_empty() {
                true => rel,
                false => format!("{key}/{rel}"),
            })
            .collect())
    }

    /// Delete the given object keys concurrently, ignoring absent ones.
    async fn delete_many_now(&self, keys: &[String]) -> Result<()> {
        let paths: Vec<Result<Path>> = keys.iter().map(|k| self.path(k)).collect();
        let paths: Vec<Path> = paths.into_iter().collect::<Result<_>>()?;
        let stream = futures::stream::iter(paths.into_iter().map(Ok)).boxed();
        let mut results = self.built.store.delete_stream(stream);
        while let Some(r) = results.next().await {
            match r {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Copy `src` to `dst`. With `overwrite=false`, fails with `AlreadyExists`
    /// if `dst` exists (natively where the store can, else by HEAD first).
    async fn copy_now(&self, src: &str, dst: &str, overwrite: bool) -> Result<()> {
        let (from, to) = (self.path(src)?, self.path(dst)?);
        let copy = |overwrite: bool| {
            let mode = gcs::copy_mode(self.built.scheme, overwrite);
            self.built
                .store
                .copy_opts(&from, &to, CopyOptions::new().with_mode(mode))
        };
        if overwrite {
            return Ok(copy(true).await?);
        }
        match copy(false).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotSupported { .. })
            | Err(object_store::Error::NotImplemented { .. }) => {
                if self.try_head(dst).await?.is_some() {
                    return Err(Error::AlreadyExists { path: dst.into() });
                }
                Ok(copy(true).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Move `src` to `dst` (a rename on file://, copy + delete elsewhere).
    async fn rename_now(&self, src: &str, dst: &str, overwrite: bool) -> Result<()> {
        let (from, to) = (self.path(src)?, self.path(dst)?);
        let target = match gcs::copy_mode(self.built.scheme, overwrite) {
            CopyMode::Overwrite => RenameTargetMode::Overwrite,
            CopyMode::Create => RenameTargetMode::Create,
        };
        let renamed = self
            .built
            .store
            .rename_opts(&from, &to, RenameOptions::new().with_target_mode(target))
            .await;
        if overwrite {
            renamed?;
            if self.built.local.is_some() && self.try_head(src).await?.is_some() {
                // LocalFileSystem copies by hard link, and POSIX rename() is a
                // no-op when both names link the same inode: finish the move.
                self.delete(src).await?;
            }
            return Ok(());
        }
        match renamed {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotSupported { .. })
            | Err(object_store::Error::NotImplemented { .. }) => {
                self.copy(src, dst, false).await?;
                self.delete(src).await
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::block_on;

    fn stores() -> Vec<(StoreHandle, tempfile::TempDir)> {
        let none = BTreeMap::new();
        let dir = tempfile::tempdir().unwrap();
        let file_url = format!("file://{}", dir.path().display());
        vec![
            (
                StoreHandle::open("memory://", &none).unwrap(),
                tempfile::tempdir().unwrap(),
            ),
            (StoreHandle::open(&file_url, &none).unwrap(), dir),
        ]
    }

    #[test]
    fn a_key_below_an_object_is_not_found_naming_the_key() {
        for (s, _dir) in stores() {
            block_on(s.put("a/f", Bytes::from_static(b"x"), PutMode::Overwrite))
                .unwrap()
                .unwrap();
            let below = "a/f/_latest_manifest";
            let gone = |r: Result<()>| match r {
                Err(Error::NotFound { path }) => assert_eq!(path, below),
                other => panic!("{other:?}"),
            };
            gone(block_on(s.get(below)).unwrap().map(drop));
            gone(block_on(s.head(below)).unwrap().map(drop));
            gone(block_on(s.get_with_meta(below)).unwrap().map(drop));
            gone(block_on(s.get_range(below, 0, 1)).unwrap().map(drop));
            assert!(block_on(s.try_head(below)).unwrap().unwrap().is_none());
        }
    }
    #[test]
    fn create_only_put_refuses_existing() {
        for (s, _dir) in stores() {
            block_on(async {
                s.put("a/b", Bytes::from_static(b"1"), PutMode::Create)
                    .await
                    .unwrap();
                let again = s
                    .put("a/b", Bytes::from_static(b"2"), PutMode::Create)
                    .await;
                assert!(
                    matches!(again, Err(Error::AlreadyExists { .. })),
                    "{:?}",
                    s.scheme()
                );
                assert_eq!(s.get("a/b").await.unwrap(), Bytes::from_static(b"1"));
            })
            .unwrap();
        }
    }

    #[test]
    fn compare_and_swap_put() {
        for (s, _dir) in stores() {
            block_on(async {
                s.put("t/v", Bytes::from_static(b"v1"), PutMode::Create)
                    .await
                    .unwrap();
                let m = s.head("t/v").await.unwrap();
                let cas = |e_tag: Option<String>, version: Option<String>| PutMode::Update {
                    e_tag,
                    version,
                };
                let won = s
                    .put(
                        "t/v",
                        Bytes::from_static(b"v2"),
                        cas(m.e_tag.clone(), m.version.clone()),
                    )
                    .await
                    .unwrap();
                // The loser still holds the first ETag.
                let lost = s
                    .put(
                        "t/v",
                        Bytes::from_static(b"v3"),
                        cas(m.e_tag.clone(), m.version.clone()),
                    )
                    .await;
                assert!(
                    matches!(lost, Err(Error::Precondition { .. })),
                    "{:?}: {lost:?}",
                    s.scheme()
                );
                assert_eq!(s.get("t/v").await.unwrap(), Bytes::from_static(b"v2"));
                // The ETag the winner got back is the one HEAD reports.
                assert_eq!(s.head("t/v").await.unwrap().e_tag, won.e_tag);
            })
            .unwrap();
        }
    }

    #[test]
    fn a_swap_retried_after_its_reply_was_lost_is_recognised() {
        for (s, _dir) in stores() {
            block_on(async {
                s.put("t/m", Bytes::from_static(b"old"), PutMode::Create)
                    .await
                    .unwrap();
                let m = s.head("t/m").await.unwrap();
                let mine = Bytes::from_static(b"mine");
                let first = s
                    .put_update_own("t/m", mine.clone(), m.e_tag.clone(), m.version.clone())
                    .await
                    .unwrap();
                // The same swap again, as a retry after a lost reply sends
                // it: refused by the store, recognised by its bytes.
                let again = s
                    .put_update_own("t/m", mine.clone(), m.e_tag.clone(), m.version.clone())
                    .await
                    .unwrap();
                assert_eq!(again.e_tag, first.e_tag, "{:?}", s.scheme());
                // Another writer's swap against the same object is refused.
                let other = s
                    .put_update_own(
                        "t/m",
                        Bytes::from_static(b"other"),
                        m.e_tag.clone(),
                        m.version.clone(),
                    )
                    .await;
                assert!(
                    matches!(other, Err(Error::Precondition { .. })),
                    "{:?}: {other:?}",
                    s.scheme()
                );
                assert_eq!(s.get("t/m").await.unwrap(), mine);
                s.delete("t/m").await.unwrap();
                let gone = s
                    .put_update_own("t/m", Bytes::from_static(b"x"), first.e_tag, None)
                    .await;
                assert!(matches!(gone, Err(Error::Precondition { .. })), "{gone:?}");
            })
            .unwrap();
        }
    }

    #[test]
    fn cas_on_missing_object_fails() {
        for (s, _dir) in stores() {
            let r = block_on(s.put(
                "nope",
                Bytes::new(),
                PutMode::Update {
                    e_tag: Some("x".into()),
                    version: None,
                },
            ))
            .unwrap();
            assert!(
                matches!(
                    r,
                    Err(Error::Precondition { .. }) | Err(Error::NotFound { .. })
                ),
                "{r:?}"
            );
        }
    }

    #[test]
    fn listing_and_prefix_delete() {
        for (s, _dir) in stores() {
            block_on(async {
                for k in ["d/x/1", "d/x/2", "d/y", "e"] {
                    s.put(k, Bytes::from_static(b"z"), PutMode::Overwrite)
                        .await
                        .unwrap();
                }
                let flat = s.list("d", false).await.unwrap();
                assert_eq!(
                    flat.objects
                        .iter()
                        .map(|m| m.key.as_str())
                        .collect::<Vec<_>>(),
                    ["d/y"]
                );
                assert_eq!(flat.folders, ["d/x"]);
                assert_eq!(s.list("d", true).await.unwrap().objects.len(), 3);
                assert_eq!(s.delete_prefix("d").await.unwrap(), 3);
                assert!(!s.folder_exists("d").await.unwrap());
                assert!(s.folder_exists("").await.unwrap());
            })
            .unwrap();
        }
    }

    #[test]
    fn keys_cannot_escape() {
        for (s, _dir) in stores() {
            let r = block_on(s.put("../evil", Bytes::new(), PutMode::Overwrite)).unwrap();
            assert!(matches!(r, Err(Error::InvalidPath { .. })));
        }
    }
}
