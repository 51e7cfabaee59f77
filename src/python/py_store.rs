//! A Python `remote_store.Store` as an object_store [`ObjectStore`], so
//! that the dataset protocol of [`crate::dataset`] (claim, parts, commit,
//! the check after it) runs, as it is, on any of remote-store's backends.
//!
//! Each call runs the Store's method on a thread of tokio's blocking pool,
//! which takes the GIL for it. The caller of the core must have released
//! the GIL (every `_core` function does, through `super::run` or
//! `super::detach`): a core call blocking with the GIL held would wait
//! forever on these threads.
//!
//! What it maps, with remote-store's names:
//! - a create-only put (`PutMode::Create`) is `write_atomic(overwrite=False)`,
//!   an overwrite `write_atomic(overwrite=True)`; a writer's claim
//!   ([`crate::dataset::WRITING`]) goes through `write` instead, as a plain
//!   small object. There is no compare-and-swap: remote-store has none, so
//!   `PutMode::Update` is not implemented and no ETag is reported (the
//!   dataset commit then never takes the swap route).
//! - a multipart upload is held in memory and written whole at the end.
//! - GET is `read_bytes` (a range sliced from it), HEAD `get_file_info`
//!   (the folder's `list_files` where the Store lacks `METADATA`), DELETE
//!   `delete(missing_ok=True)`, LIST `list_files` (recursive listings
//!   pulled a page at a time) / `list_folders`, COPY `copy`, rename `move`.
//! - `NotFound` and `AlreadyExists` become object_store's (the protocol
//!   reads them as answers: an object missing, or there), `PermissionDenied`
//!   object_store's (a refusal, never tried again); `InvalidPath` from a
//!   read or a HEAD is a key that is a folder or lies below an object: not
//!   found. Any other exception is kept as it was raised
//!   ([`PyStoreFailure`]); like a transport failure it may have been
//!   applied, so a create-only put is tried again (up to 3 times in all,
//!   recognising its own object). [`raised`] gives it back to the binding,
//!   which raises it unchanged.
//!
//! A Store method runs on a thread of the core's runtime, so it cannot
//! call pds itself (pds refuses to block inside its runtime).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RenameOptions, RenameTargetMode, UploadPart,
};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

/// The `store` an error of this adapter names (object_store's `Generic`).
const STORE_NAME: &str = "remote_store";

/// A Python exception a Store method raised, kept to be raised again.
#[derive(Debug)]
pub struct PyStoreFailure {
    err: PyErr,
    /// Whether it is `remote_store.InvalidPath` (told while the GIL was held).
    invalid_path: bool,
}

impl fmt::Display for PyStoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.err)
    }
}

impl std::error::Error for PyStoreFailure {}

/// The exception a Store method raised somewhere in `err`'s chain, if any.
pub fn raised(py: Python<'_>, err: &crate::error::Error) -> Option<PyErr> {
    let crate::error::Error::Store(os) = err else {
        return None;
    };
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(os);
    while let Some(e) = cur {
        if let Some(failure) = e.downcast_ref::<PyStoreFailure>() {
            return Some(failure.err.clone_ref(py));
        }
        cur = e.source();
    }
    None
}

/// A `remote_store.Store` seen as an object store (see the module docs).
pub struct PyStore {
    store: Arc<Py<PyAny>>,
    /// `repr(store)`, taken once: `Display` must not need the GIL.
    label: String,
    /// Whether the Store has `Capability.METADATA` (`get_file_info`).
    metadata: bool,
}

impl PyStore {
    /// Adapt `store` (a `remote_store.Store`; `TypeError` otherwise).
    pub fn new(store: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = store.py();
        let rs = py.import("remote_store")?;
        if !store.is_instance(&rs.getattr("Store")?)? {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "expected a remote_store.Store, got {}",
                store.get_type().name()?
            )));
        }
        let metadata_cap = rs.getattr("Capability")?.getattr("METADATA")?;
        let metadata = store
            .call_method1("supports", (metadata_cap,))?
            .extract::<bool>()?;
        Ok(Self {
            store: Arc::new(store.clone().unbind()),
            label: store.repr()?.to_string(),
            metadata,
        })
    }

    /// Run `f` on the Store on a blocking thread, with the GIL; its
    /// exceptions name `path` (see [`failure`]).
    async fn call<T, F>(&self, path: &str, f: F) -> object_store::Result<T>
    where
        T: Send + 'static,
        F: for<'py> FnOnce(&Bound<'py, PyAny>) -> PyResult<T> + Send + 'static,
    {
        self.call_on(path, path, f).await
    }

    /// [`Self::call`], naming `missing` if what is asked for is not there
    /// and `existing` if what it would create is.
    async fn call_on<T, F>(&self, missing: &str, existing: &str, f: F) -> object_store::Result<T>
    where
        T: Send + 'static,
        F: for<'py> FnOnce(&Bound<'py, PyAny>) -> PyResult<T> + Send + 'static,
    {
        let store = self.store.clone();
        let (missing, existing) = (missing.to_string(), existing.to_string());
        let joined = tokio::task::spawn_blocking(move || {
            Python::attach(|py| f(store.bind(py)).map_err(|e| failure(py, &missing, &existing, e)))
        })
        .await;
        match joined {
            Ok(r) => r,
            Err(e) => Err(object_store::Error::Generic {
                store: STORE_NAME,
                source: Box::new(e),
            }),
        }
    }

    async fn read(&self, location: &Path) -> object_store::Result<Bytes> {
        let key = location.as_ref().to_string();
        self.call(location.as_ref(), move |s| {
            let got = s.call_method1("read_bytes", (key,))?;
            let bytes = got.extract::<PyBackedBytes>()?;
            Ok(Bytes::from_owner(bytes))
        })
        .await
    }

    async fn head(&self, location: &Path) -> object_store::Result<ObjectMeta> {
        let key = location.as_ref().to_string();
        let metadata = self.metadata;
        let at = location.clone();
        self.call(location.as_ref(), move |s| {
            if metadata {
                let info = s.call_method1("get_file_info", (key,))?;
                return meta_of(at, &info);
            }
            // Without METADATA, the size and time come from the folder's
            // listing (an object's size is what the commit's check compares).
            let parent = key.rsplit_once('/').map_or("", |(p, _)| p);
            let listed = files_of(s, parent, None)?;
            match listed.into_iter().find(|(k, ..)| *k == key) {
                Some((_, size, last_modified)) => Ok(ObjectMeta {
                    location: at,
                    last_modified,
                    size,
                    e_tag: None,
                    version: None,
                }),
                None => Err(not_found_err(s.py(), &key)),
            }
        })
        .await
    }

    async fn write(
        &self,
        location: &Path,
        payload: Vec<Bytes>,
        overwrite: bool,
    ) -> object_store::Result<PutResult> {
        let key = location.as_ref().to_string();
        // A claim is a small object of its own, written plainly (see the
        // module docs); everything else atomically.
        let method = match location.filename() == Some(crate::dataset::WRITING) {
            true => "write",
            false => "write_atomic",
        };
        self.call(location.as_ref(), move |s| {
            let py = s.py();
            let len = payload.iter().map(Bytes::len).sum();
            let body = PyBytes::new_with(py, len, |buf| {
                let mut at = 0;
                for b in &payload {
                    buf[at..at + b.len()].copy_from_slice(b);
                    at += b.len();
                }
                Ok(())
            })?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("overwrite", overwrite)?;
            s.call_method(method, (key, body), Some(&kwargs))?;
            Ok(PutResult {
                e_tag: None,
                version: None,
            })
        })
        .await
    }
}

impl PyStore {
    /// The Store's `copy` or `move` (`method`) of `from` to `to`.
    async fn transfer(
        &self,
        method: &'static str,
        from: &Path,
        to: &Path,
        overwrite: bool,
    ) -> object_store::Result<()> {
        let (src, dst) = (from.as_ref().to_string(), to.as_ref().to_string());
        self.call_on(from.as_ref(), to.as_ref(), move |s| {
            let kwargs = PyDict::new(s.py());
            kwargs.set_item("overwrite", overwrite)?;
            s.call_method(method, (src, dst), Some(&kwargs))?;
            Ok(())
        })
        .await
    }
}

/// What [`files_of`] listed, as object metadata.
fn metas(files: Vec<Listed>) -> object_store::Result<Vec<ObjectMeta>> {
    files
        .into_iter()
        .map(|(key, size, last_modified)| {
            Ok(ObjectMeta {
                location: listed_path(&key)?,
                last_modified,
                size,
                e_tag: None,
                version: None,
            })
        })
        .collect()
}

/// A Python exception as object_store's error: `NotFound` naming
/// `missing`, `AlreadyExists` naming `existing`, `PermissionDenied` (a
/// refusal, not tried again), or the exception kept as it was.
fn failure(py: Python<'_>, missing: &str, existing: &str, err: PyErr) -> object_store::Error {
    let is = |name: &str| {
        py.import("remote_store")
            .and_then(|m| m.getattr(name))
            .is_ok_and(|cls| err.is_instance(py, &cls))
    };
    let (not_found, exists, denied, invalid_path) = (
        is("NotFound"),
        is("AlreadyExists"),
        is("PermissionDenied"),
        is("InvalidPath"),
    );
    let source = Box::new(PyStoreFailure { err, invalid_path });
    match (not_found, exists, denied) {
        (true, ..) => object_store::Error::NotFound {
            path: missing.to_string(),
            source,
        },
        (_, true, _) => object_store::Error::AlreadyExists {
            path: existing.to_string(),
            source,
        },
        (.., true) => object_store::Error::PermissionDenied {
            path: missing.to_string(),
            source,
        },
        _ => object_store::Error::Generic {
            store: STORE_NAME,
            source,
        },
    }
}

/// `remote_store.NotFound` for `key`, as the Store would raise it.
fn not_found_err(py: Python<'_>, key: &str) -> PyErr {
    match py
        .import("remote_store")
        .and_then(|m| m.getattr("NotFound"))
        .and_then(|cls| cls.call1((format!("not a file: {key:?}"),)))
    {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// A `FileInfo` as object metadata at `location`.
fn meta_of(location: Path, info: &Bound<'_, PyAny>) -> PyResult<ObjectMeta> {
    let size = info.getattr("size")?.extract::<u64>()?;
    let last_modified = modified_at(info)?;
    Ok(ObjectMeta {
        location,
        last_modified,
        size,
        e_tag: None,
        version: None,
    })
}

/// A `FileInfo`'s `modified_at` in UTC, whatever its time zone object; the
/// epoch where it is unknown (naive, or remote-store's "unknown" minimum).
fn modified_at(info: &Bound<'_, PyAny>) -> PyResult<DateTime<Utc>> {
    let at = info.getattr("modified_at")?;
    Ok(at
        .extract::<DateTime<chrono::FixedOffset>>()
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .filter(|t| t.timestamp() > 0)
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH))
}

/// The object path of a key a listing returned (segments as they are).
fn listed_path(key: &str) -> object_store::Result<Path> {
    let segments: Vec<String> = key
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    crate::store::keys::join(&[], &segments).map_err(|e| object_store::Error::Generic {
        store: STORE_NAME,
        source: Box::new(e),
    })
}

/// `NotFound` and `InvalidPath` (a folder, or below an object) from a
/// read or a HEAD: no object there.
fn no_object(err: object_store::Error, path: &str) -> object_store::Error {
    let object_store::Error::Generic { source, .. } = &err else {
        return err;
    };
    let invalid = source
        .downcast_ref::<PyStoreFailure>()
        .is_some_and(|f| f.invalid_path);
    if invalid {
        return object_store::Error::NotFound {
            path: path.to_string(),
            source: Box::new(err),
        };
    }
    err
}

/// The byte range `range` asks for in an object of `len` bytes, checked
/// as object_store's own stores check it.
fn range_in(range: &GetRange, len: u64) -> object_store::Result<std::ops::Range<u64>> {
    range
        .as_range(len)
        .map_err(|e| object_store::Error::Generic {
            store: STORE_NAME,
            source: Box::new(e),
        })
}

impl fmt::Display for PyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PyStore({})", self.label)
    }
}

impl fmt::Debug for PyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PyStore")
            .field("store", &self.label)
            .finish()
    }
}

/// Unsupported here: what remote-store cannot do.
fn not_implemented(operation: &str) -> object_store::Error {
    object_store::Error::NotImplemented {
        operation: operation.to_string(),
        implementer: "remote_store.Store".to_string(),
    }
}

#[async_trait]
impl ObjectStore for PyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let overwrite = match opts.mode {
            PutMode::Overwrite => true,
            PutMode::Create => false,
            PutMode::Update(_) => return Err(not_implemented("a compare-and-swap put")),
        };
        let chunks: Vec<Bytes> = payload.into_iter().collect();
        self.write(location, chunks, overwrite).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Ok(Box::new(HeldUpload {
            store: Arc::new(self.clone()),
            location: location.clone(),
            chunks: Vec::new(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if options.if_match.is_some()
            || options.if_none_match.is_some()
            || options.if_modified_since.is_some()
            || options.if_unmodified_since.is_some()
            || options.version.is_some()
        {
            return Err(not_implemented("a conditional or versioned get"));
        }
        let key = location.as_ref();
        if options.head {
            let meta = self.head(location).await.map_err(|e| no_object(e, key))?;
            return Ok(GetResult {
                payload: GetResultPayload::Stream(stream::empty().boxed()),
                range: 0..meta.size,
                meta,
                attributes: Default::default(),
            });
        }
        let body = self.read(location).await.map_err(|e| no_object(e, key))?;
        let len = body.len() as u64;
        let range = match &options.range {
            Some(r) => range_in(r, len)?,
            None => 0..len,
        };
        let slice = body.slice(range.start as usize..range.end as usize);
        Ok(GetResult {
            payload: GetResultPayload::Stream(stream::once(async move { Ok(slice) }).boxed()),
            meta: ObjectMeta {
                location: location.clone(),
                last_modified: DateTime::<Utc>::UNIX_EPOCH,
                size: len,
                e_tag: None,
                version: None,
            },
            range,
            attributes: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let me = Arc::new(self.clone());
        locations
            .then(move |location| {
                let me = me.clone();
                async move {
                    let location = location?;
                    let key = location.as_ref().to_string();
                    me.call(location.as_ref(), move |s| {
                        let kwargs = PyDict::new(s.py());
                        kwargs.set_item("missing_ok", true)?;
                        s.call_method("delete", (key,), Some(&kwargs))?;
                        Ok(())
                    })
                    .await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    /// `list_files(prefix, recursive=True)`, pulled [`LIST_PAGE`] files
    /// per call: a reader that stops early (the key-free check stops at
    /// 1,000) does not list the rest.
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let me = self.clone();
        let key = prefix.map(|p| p.as_ref().to_string()).unwrap_or_default();
        stream::try_unfold(Some(Listing::Start), move |state| {
            let (me, key) = (me.clone(), key.clone());
            async move {
                let Some(state) = state else {
                    return Ok::<_, object_store::Error>(None);
                };
                let (page, next) = me
                    .call(&key.clone(), move |s| {
                        let it = match state {
                            Listing::Start => {
                                let kwargs = PyDict::new(s.py());
                                kwargs.set_item("recursive", true)?;
                                match s.call_method("list_files", (key.as_str(),), Some(&kwargs)) {
                                    Ok(it) => it.try_iter()?,
                                    Err(e) if is_missing(s.py(), &e) => {
                                        return Ok((Vec::new(), None))
                                    }
                                    Err(e) => return Err(e),
                                }
                            }
                            Listing::Next(it) => it.bind(s.py()).clone(),
                        };
                        let (page, more) = files_page(&it, LIST_PAGE)?;
                        Ok((page, more.then(|| Listing::Next(it.unbind()))))
                    })
                    .await?;
                let metas = metas(page)?.into_iter().map(Ok::<_, object_store::Error>);
                Ok(Some((stream::iter(metas), next)))
            }
        })
        .try_flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let key = prefix.map(|p| p.as_ref().to_string()).unwrap_or_default();
        let (files, folders) = self
            .call(&key.clone(), move |s| {
                let files = files_of(s, &key, None)?;
                let folders = match s.call_method1("list_folders", (key.as_str(),)) {
                    Ok(it) => {
                        let mut out = Vec::new();
                        for f in it.try_iter()? {
                            out.push(f?.getattr("path")?.str()?.to_string());
                        }
                        out
                    }
                    Err(e) if is_missing(s.py(), &e) => Vec::new(),
                    Err(e) => return Err(e),
                };
                Ok((files, folders))
            })
            .await?;
        Ok(ListResult {
            common_prefixes: folders
                .iter()
                .map(|f| listed_path(f))
                .collect::<object_store::Result<_>>()?,
            objects: metas(files)?,
        })
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let overwrite = matches!(options.mode, CopyMode::Overwrite);
        self.transfer("copy", from, to, overwrite).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let overwrite = matches!(options.target_mode, RenameTargetMode::Overwrite);
        self.transfer("move", from, to, overwrite).await
    }
}

/// Another handle on the same Store (no GIL needed).
impl Clone for PyStore {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            label: self.label.clone(),
            metadata: self.metadata,
        }
    }
}

/// Whether `err` is `remote_store.NotFound` (a folder that is not there,
/// which a listing takes as empty).
fn is_missing(py: Python<'_>, err: &PyErr) -> bool {
    py.import("remote_store")
        .and_then(|m| m.getattr("NotFound"))
        .is_ok_and(|cls| err.is_instance(py, &cls))
}

/// A listed file: its key, size and time.
type Listed = (String, u64, DateTime<Utc>);

/// Files a paged listing takes from the Store per call.
const LIST_PAGE: usize = 1000;

/// Where a paged listing is: not started, or its Python iterator.
enum Listing {
    Start,
    Next(Py<pyo3::types::PyIterator>),
}

/// Up to `limit` `(key, size, modified)` from the iterator of a
/// `list_files` call, and whether it may hold more.
fn files_page(
    it: &Bound<'_, pyo3::types::PyIterator>,
    limit: usize,
) -> PyResult<(Vec<Listed>, bool)> {
    let mut out = Vec::new();
    while out.len() < limit {
        // A folder removed while it is listed ends its listing there.
        let info = match it.clone().next() {
            None => return Ok((out, false)),
            Some(Ok(i)) => i,
            Some(Err(e)) if is_missing(it.py(), &e) => return Ok((out, false)),
            Some(Err(e)) => return Err(e),
        };
        let path = info.getattr("path")?.str()?.to_string();
        let size = info.getattr("size")?.extract::<u64>()?;
        out.push((path, size, modified_at(&info)?));
    }
    Ok((out, true))
}

/// `(key, size, modified)` of the files `list_files(key, **kwargs)` yields;
/// none if the folder is not there.
fn files_of(
    s: &Bound<'_, PyAny>,
    key: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<Listed>> {
    let it = match s.call_method("list_files", (key,), kwargs) {
        Ok(it) => it,
        Err(e) if is_missing(s.py(), &e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(files_page(&it.try_iter()?, usize::MAX)?.0)
}

/// A multipart upload held in memory, written whole (overwriting, as the
/// protocol completes an upload only once it made room for it) when it
/// completes: remote-store writes an object in one call.
struct HeldUpload {
    store: Arc<PyStore>,
    location: Path,
    chunks: Vec<Bytes>,
}

impl fmt::Debug for HeldUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldUpload")
            .field("location", &self.location)
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

#[async_trait]
impl MultipartUpload for HeldUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.chunks.extend(data);
        Box::pin(async { Ok(()) })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let chunks = std::mem::take(&mut self.chunks);
        self.store.write(&self.location, chunks, true).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.chunks.clear();
        Ok(())
    }
}
