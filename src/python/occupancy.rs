//! Whether a key is free for a new dataset, table or pipeline
//! (`crate::store::occupancy`), on a `RustStore` or on any Python Store.

use std::sync::Mutex;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use super::errors::IntoPy;
use super::store::PyRustStore;
use crate::error::{Error, Result};
use crate::store::occupancy::{self, Kind, Probe};

/// `KeyOccupied` (`remote_store.AlreadyExists`) unless a `creating`
/// (`"dataset"`, `"table"`, `"pipeline"`) may be created at `key`; returns
/// the kind of what is at the key (one the creator may meet), or `None`.
/// The GIL is released.
#[pyfunction]
pub fn check_key_free(
    py: Python<'_>,
    store: &PyRustStore,
    key: &str,
    creating: &str,
) -> PyResult<Option<&'static str>> {
    let kind = Kind::parse(creating).py_err()?;
    let handle = store.inner.clone();
    let at = super::run(py, async move {
        occupancy::check_free(handle.as_ref(), key, kind).await
    })?;
    Ok(at.map(|o| o.kind.name()))
}

/// [`check_key_free`] over a Python object with the methods
/// `exists(key) -> bool`, `list_below(key, limit) -> list[str]` and
/// `read(key) -> bytes | None` (a `remote_store.Store` adapter). Its
/// exceptions propagate unchanged.
#[pyfunction]
pub fn check_key_free_with(
    probe: Py<PyAny>,
    key: &str,
    creating: &str,
) -> PyResult<Option<&'static str>> {
    let kind = Kind::parse(creating).py_err()?;
    let probe = PyProbe {
        obj: probe,
        failure: Mutex::new(None),
    };
    // Runs on this thread with the GIL held: every step calls into Python.
    let result = crate::runtime::block_on(occupancy::check_free(&probe, key, kind)).and_then(|r| r);
    if let Some(e) = probe.failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    Ok(result.py_err()?.map(|o| o.kind.name()))
}

/// What a reader looking for a `wanted` finds at, around or below `key`
/// of `store` instead, in words, or `None` (see [`describe_key_with`]).
/// The GIL is released.
#[pyfunction]
pub fn describe_key(
    py: Python<'_>,
    store: &PyRustStore,
    key: &str,
    wanted: &str,
) -> PyResult<Option<String>> {
    let kind = Kind::parse(wanted).py_err()?;
    let handle = store.inner.clone();
    let found = super::run(py, async move {
        occupancy::occupancy(handle.as_ref(), key).await
    })?;
    Ok(found.describe_for(key, kind))
}

/// What a reader looking for a `wanted` (`"dataset"`, `"table"`,
/// `"pipeline"`) finds at, around or below `key` instead, in words, or
/// `None`; through `probe` as [`check_key_free_with`]. For error messages.
#[pyfunction]
pub fn describe_key_with(probe: Py<PyAny>, key: &str, wanted: &str) -> PyResult<Option<String>> {
    let kind = Kind::parse(wanted).py_err()?;
    let probe = PyProbe {
        obj: probe,
        failure: Mutex::new(None),
    };
    let result = crate::runtime::block_on(occupancy::occupancy(&probe, key)).and_then(|r| r);
    if let Some(e) = probe.failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    Ok(result.py_err()?.describe_for(key, kind))
}

/// A Python object as a [`Probe`]; the first exception it raised is kept
/// to be re-raised as it was.
struct PyProbe {
    obj: Py<PyAny>,
    failure: Mutex<Option<PyErr>>,
}

impl PyProbe {
    fn call<T>(&self, f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>) -> Result<T> {
        Python::attach(|py| f(self.obj.bind(py))).map_err(|e| {
            let message = e.to_string();
            if let Ok(mut slot) = self.failure.lock() {
                slot.get_or_insert(e);
            }
            Error::Task(message)
        })
    }
}

impl Probe for PyProbe {
    async fn exists(&self, key: &str) -> Result<bool> {
        self.call(|o| o.call_method1("exists", (key,))?.extract::<bool>())
    }

    async fn list_below(&self, key: &str, limit: usize) -> Result<Vec<String>> {
        self.call(|o| {
            o.call_method1("list_below", (key, limit))?
                .extract::<Vec<String>>()
        })
    }

    async fn read(&self, key: &str) -> Result<Option<Bytes>> {
        self.call(|o| {
            let raw = o
                .call_method1("read", (key,))?
                .extract::<Option<PyBackedBytes>>()?;
            Ok(raw.map(|b| Bytes::copy_from_slice(&b)))
        })
    }
}
