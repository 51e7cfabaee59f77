//! Whether a key is free for a new dataset, table or pipeline
//! (`crate::store::occupancy`), on a `RustStore` (any Python Store is
//! reached through `RustStore.over_store`).

use pyo3::prelude::*;

use super::errors::IntoPy;
use super::store::PyRustStore;
use crate::store::occupancy::{self, Kind};

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

/// What a reader looking for a `wanted` finds at, around or below `key`
/// of `store` instead, in words, or `None`. For error messages.
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

/// What lives at `key` itself (`"dataset"`, `"unfinished dataset"`,
/// `"table"`, `"pipeline"`, `"table or pipeline"` when its manifests cannot
/// tell), or `None`. The GIL is released.
#[pyfunction]
pub fn kind_at(py: Python<'_>, store: &PyRustStore, key: &str) -> PyResult<Option<&'static str>> {
    let handle = store.inner.clone();
    let kind = super::run(
        py,
        async move { occupancy::kind_at(handle.as_ref(), key).await },
    )?;
    Ok(kind.map(|k| k.name()))
}
