//! `RustStore`: the object_store handle behind `pds.ObjectStoreBackend`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyTuple};

use super::errors::IntoPy;
use super::run;
use crate::store::aws_credentials::{CachingCredentials, Fetched, Refresh};
use crate::store::{config, Meta, PutMode, PutOutcome, StoreHandle};

/// An object store opened from a URL; keys are relative to the URL's prefix.
#[pyclass(module = "pds._core", name = "RustStore", frozen)]
pub struct PyRustStore {
    pub(crate) inner: Arc<StoreHandle>,
    options: BTreeMap<String, String>,
    credentials: Option<Py<PyAny>>,
    pickle_secrets: bool,
    /// The `remote_store.Store` this handle adapts ([`PyRustStore::over_store`]).
    origin: Option<Py<PyAny>>,
}

/// A [`Refresh`] calling `callable()`, which returns `(access_key_id,
/// secret_access_key, session_token or None, seconds valid or None)`.
///
/// It runs on a tokio blocking thread and takes the GIL only for the call.
/// That cannot deadlock: every `block_on` in pds releases the GIL first
/// (`super::run`, `super::detach`, `detach_py`), so the thread waiting on
/// the request never holds the GIL this call waits for. Keep it that way:
/// a store request made with the GIL held would hang here.
fn python_refresh(callable: Py<PyAny>) -> Refresh {
    Arc::new(move || {
        Python::attach(|py| {
            let got = callable
                .bind(py)
                .call0()
                .map_err(|e| format!("resolving the AWS credentials failed: {e}"))?;
            let (key_id, secret_key, token, ttl): (String, String, Option<String>, Option<f64>) =
                got.extract().map_err(|_| {
                    "the AWS credentials callable must return (access_key_id, \
                     secret_access_key, session_token or None, seconds valid or None)"
                        .to_string()
                })?;
            Ok(Fetched {
                credential: object_store::aws::AwsCredential {
                    key_id,
                    secret_key,
                    token,
                },
                // Negative or not a number: expired, fetched again next time.
                ttl: ttl.map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)),
            })
        })
    })
}

/// Metadata of one object.
#[pyclass(module = "pds._core", name = "ObjectMeta", frozen, get_all)]
pub struct PyObjectMeta {
    key: String,
    size: u64,
    last_modified: DateTime<Utc>,
    e_tag: Option<String>,
    version: Option<String>,
}

impl From<Meta> for PyObjectMeta {
    fn from(m: Meta) -> Self {
        Self {
            key: m.key,
            size: m.size,
            last_modified: m.last_modified,
            e_tag: m.e_tag,
            version: m.version,
        }
    }
}

/// What a put reports.
#[pyclass(module = "pds._core", name = "PutResult", frozen, get_all)]
pub struct PyPutResult {
    e_tag: Option<String>,
    version: Option<String>,
    size: u64,
}

impl From<PutOutcome> for PyPutResult {
    fn from(p: PutOutcome) -> Self {
        Self {
            e_tag: p.e_tag,
            version: p.version,
            size: p.size,
        }
    }
}

fn put_mode(mode: &str, e_tag: Option<String>, version: Option<String>) -> PyResult<PutMode> {
    match mode {
        "overwrite" => Ok(PutMode::Overwrite),
        "create" => Ok(PutMode::Create),
        "update" if e_tag.is_some() || version.is_some() => Ok(PutMode::Update { e_tag, version }),
        "update" => Err(pyo3::exceptions::PyValueError::new_err(
            "mode='update' needs e_tag or version",
        )),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "mode must be 'overwrite', 'create' or 'update', got {other:?}"
        ))),
    }
}

/// Whether a credentials callable says that its pickle holds no secret
/// (its `pickles_without_secrets` attribute is true).
fn pickles_without_secrets(callable: &Bound<'_, PyAny>) -> bool {
    callable
        .getattr("pickles_without_secrets")
        .and_then(|v| v.is_truthy())
        .unwrap_or(false)
}

#[pymethods]
impl PyRustStore {
    /// `credentials`: for `s3://`, a callable returning `(access_key_id,
    /// secret_access_key, session_token or None, seconds valid or None)`,
    /// called on first use and again before the credentials expire; it
    /// replaces the options' and the environment's keys.
    /// `pickle_secrets`: whether the pickle carries the credential options
    /// (`config::is_credential`) and the `credentials` callable; without
    /// them, the unpickled copy takes its credentials from its own
    /// environment. A callable whose `pickles_without_secrets` attribute is
    /// true (a profile's, which pickles as its name) travels either way.
    /// This store uses them all.
    #[new]
    #[pyo3(signature = (url, options = None, credentials = None, pickle_secrets = true))]
    fn new(
        py: Python<'_>,
        url: &str,
        options: Option<BTreeMap<String, String>>,
        credentials: Option<Py<PyAny>>,
        pickle_secrets: bool,
    ) -> PyResult<Self> {
        let options = options.unwrap_or_default();
        let provider = credentials.as_ref().map(|c| {
            let refresh = python_refresh(c.clone_ref(py));
            Arc::new(CachingCredentials::new(refresh)) as object_store::aws::AwsCredentialProvider
        });
        let inner = StoreHandle::open_with_credentials(url, &options, provider).py_err()?;
        Ok(Self {
            inner: Arc::new(inner),
            options,
            credentials,
            pickle_secrets,
            origin: None,
        })
    }

    /// A handle on `store`, any `remote_store.Store`, through which pds's
    /// own write protocol runs on the Store's backend: each object
    /// operation calls the Store's method (see `py_store`). `TypeError` if
    /// `store` is not a Store. It pickles as the Store does.
    #[staticmethod]
    fn over_store(store: &Bound<'_, PyAny>) -> PyResult<Self> {
        let adapted = super::py_store::PyStore::new(store)?;
        let label = store.repr()?.to_string();
        Ok(Self {
            inner: Arc::new(StoreHandle::foreign(Arc::new(adapted), &label)),
            options: BTreeMap::new(),
            credentials: None,
            pickle_secrets: true,
            origin: Some(store.clone().unbind()),
        })
    }

    #[getter]
    fn url(&self) -> &str {
        self.inner.url()
    }

    #[getter]
    fn scheme(&self) -> &'static str {
        self.inner.scheme().as_str()
    }

    /// `(requests, bytes_read, bytes_written)` this store has made and moved
    /// since it was opened: every GET (whole or one range), HEAD, PUT,
    /// multipart part and completion, LIST (once per listing), DELETE (once
    /// per object), COPY and rename. Shared by everything that uses this
    /// store, threads included; the client's own HTTP retries are not
    /// counted again. No I/O.
    fn counts(&self) -> (u64, u64, u64) {
        let c = self.inner.counts();
        (c.requests, c.bytes_read, c.bytes_written)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Py<PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let me = slf.get();
        if let Some(origin) = &me.origin {
            let over = py.get_type::<Self>().getattr("over_store")?.unbind();
            return Ok((over, (origin.clone_ref(py),).into_pyobject(py)?));
        }
        let options: BTreeMap<String, String> = me
            .options
            .iter()
            .filter(|(k, _)| me.pickle_secrets || !config::is_credential(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let credentials = me
            .credentials
            .as_ref()
            .filter(|c| me.pickle_secrets || pickles_without_secrets(c.bind(py)))
            .map(|c| c.clone_ref(py));
        let url = me.inner.url().to_string();
        // The default pickles as before (three arguments), so that an older
        // pds can unpickle it; `pickle_secrets=False` adds the fourth.
        let args = if me.pickle_secrets {
            (url, options, credentials).into_pyobject(py)?
        } else {
            (url, options, credentials, false).into_pyobject(py)?
        };
        Ok((py.get_type::<Self>().into_any().unbind(), args))
    }

    fn __repr__(&self) -> String {
        if self.origin.is_some() {
            return format!("RustStore({:?})", self.inner.url());
        }
        let shown: Vec<String> = self
            .options
            .iter()
            .map(|(k, v)| {
                if config::is_secret(k) {
                    format!("{k}=***")
                } else {
                    format!("{k}={v}")
                }
            })
            .collect();
        let pickling = if self.pickle_secrets {
            ""
        } else {
            ", pickle_secrets=False"
        };
        format!(
            "RustStore({:?}, {{{}}}{pickling})",
            self.inner.url(),
            shown.join(", ")
        )
    }

    /// HEAD `key`; `None` if absent.
    fn head(&self, py: Python<'_>, key: &str) -> PyResult<Option<PyObjectMeta>> {
        let s = self.inner.clone();
        Ok(run(py, s.try_head(key))?.map(Into::into))
    }

    /// GET the whole object.
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        let s = self.inner.clone();
        let data = run(py, s.get(key))?;
        Ok(PyBytes::new(py, &data))
    }

    /// GET bytes `[start, end)`.
    fn get_range<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let s = self.inner.clone();
        let data = run(py, s.get_range(key, start, end))?;
        Ok(PyBytes::new(py, &data))
    }

    /// PUT atomically. `mode`: "overwrite", "create" (If-None-Match) or
    /// "update" (If-Match on `e_tag` / `version`).
    #[pyo3(signature = (key, data, mode = "overwrite", e_tag = None, version = None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &str,
        data: PyBackedBytes,
        mode: &str,
        e_tag: Option<String>,
        version: Option<String>,
    ) -> PyResult<PyPutResult> {
        let mode = put_mode(mode, e_tag, version)?;
        let s = self.inner.clone();
        let data = Bytes::from_owner(data);
        Ok(run(py, s.put(key, data, mode))?.into())
    }

    /// Delete `key`; absent keys are not an error.
    fn delete(&self, py: Python<'_>, key: &str) -> PyResult<()> {
        let s = self.inner.clone();
        run(py, s.delete(key))
    }

    /// List below the folder `key`: `(objects, sub-folder keys)`. Recursive
    /// listings return no folders.
    #[pyo3(signature = (key, recursive = false))]
    fn list(
        &self,
        py: Python<'_>,
        key: &str,
        recursive: bool,
    ) -> PyResult<(Vec<PyObjectMeta>, Vec<String>)> {
        let s = self.inner.clone();
        let listing = run(py, s.list(key, recursive))?;
        Ok((
            listing.objects.into_iter().map(Into::into).collect(),
            listing.folders,
        ))
    }

    /// Whether any object lives below the folder `key`.
    fn folder_exists(&self, py: Python<'_>, key: &str) -> PyResult<bool> {
        let s = self.inner.clone();
        run(py, s.folder_exists(key))
    }

    /// Delete everything below the folder `key`; returns the count.
    fn delete_prefix(&self, py: Python<'_>, key: &str) -> PyResult<usize> {
        let s = self.inner.clone();
        run(py, s.delete_prefix(key))
    }

    #[pyo3(signature = (src, dst, overwrite = false))]
    fn copy(&self, py: Python<'_>, src: &str, dst: &str, overwrite: bool) -> PyResult<()> {
        let s = self.inner.clone();
        run(py, s.copy(src, dst, overwrite))
    }

    #[pyo3(signature = (src, dst, overwrite = false))]
    fn rename(&self, py: Python<'_>, src: &str, dst: &str, overwrite: bool) -> PyResult<()> {
        let s = self.inner.clone();
        run(py, s.rename(src, dst, overwrite))
    }

    /// Entries and bytes held by this handle's object cache (`"objects"`)
    /// and by the process-wide caches of table segments (`"segments"`,
    /// bytes estimated) and tombstones (`"tombstones"`, estimated).
    fn cache_usage(&self) -> BTreeMap<&'static str, (usize, usize)> {
        BTreeMap::from([
            ("objects", self.inner.cache().usage()),
            ("segments", crate::table::segment::cache_usage()),
            ("tombstones", crate::table::tombstone::cache_usage()),
        ])
    }
}

/// Whether a store option's value is a secret (hidden from `repr` and logs).
#[pyfunction]
pub fn is_secret_option(key: &str) -> bool {
    config::is_secret(key)
}

/// Whether a store option gives credentials (a secret, or S3's access key
/// id): what a store opened with `pickle_secrets=False` does not pickle.
#[pyfunction]
pub fn is_credential_option(key: &str) -> bool {
    config::is_credential(key)
}
