//! Table functions of `pds._core`. Manifests cross as JSON text; data as
//! Arrow C streams. The GIL is released around all I/O and encoding.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3_arrow::{PyRecordBatchReader, PySchema};

use super::dataset::{read_options, stream_to_py, FilterArg};
use super::errors::IntoPy;
use super::store::PyRustStore;
use crate::error::Error;
use crate::table::scan::{At, ScanOptions};
use crate::table::schema::SchemaMode;
use crate::table::snapshot::TableProperties;
use crate::table::{delete, scan, write};

fn at(version: Option<u64>, as_of: Option<&str>) -> PyResult<At> {
    match (version, as_of) {
        (Some(_), Some(_)) => Err(pyo3::exceptions::PyValueError::new_err(
            "pass version or as_of, not both",
        )),
        (Some(v), None) => Ok(At::Version(v)),
        (None, Some(t)) => chrono::DateTime::parse_from_rfc3339(t)
            .map(|d| At::AsOf(d.with_timezone(&chrono::Utc)))
            .map_err(|e| {
                pyo3::exceptions::PyValueError::new_err(format!("as_of {t:?} is not a time: {e}"))
            }),
        (None, None) => Ok(At::Latest),
    }
}

/// Create a table (version 0); returns its manifest JSON.
#[pyfunction]
#[pyo3(signature = (store, key, schema, data, *, primary_key, exist_ok, compression, row_group_size, target_file_size, parallelism))]
#[allow(clippy::too_many_arguments)]
pub fn table_create(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    schema: PySchema,
    data: Option<PyRecordBatchReader>,
    primary_key: Option<String>,
    exist_ok: bool,
    compression: String,
    row_group_size: Option<usize>,
    target_file_size: Option<u64>,
    parallelism: usize,
) -> PyResult<String> {
    let reader = data.map(|d| d.into_reader()).transpose()?;
    let props = TableProperties {
        primary_key,
        compression,
        row_group_size,
        target_file_size,
    };
    let handle = store.inner.clone();
    let schema = schema.into_inner();
    let m = py
        .detach(|| write::create(handle, &key, schema, reader, props, exist_ok, parallelism))
        .py_err()?;
    m.to_json()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .py_err()
}

/// Append `data`; returns the new version's manifest JSON.
#[pyfunction]
#[pyo3(signature = (store, key, data, *, schema_mode, metadata, parallelism))]
pub fn table_append(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    data: PyRecordBatchReader,
    schema_mode: &str,
    metadata: Option<BTreeMap<String, String>>,
    parallelism: usize,
) -> PyResult<String> {
    let mode = SchemaMode::parse(schema_mode).py_err()?;
    let reader = data.into_reader()?;
    let handle = store.inner.clone();
    let m = py
        .detach(|| write::append(handle, &key, reader, mode, metadata, parallelism))
        .py_err()?;
    m.to_json()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .py_err()
}

/// Delete rows matching `filter`; returns `(manifest JSON, rows deleted or
/// None, committed)`.
#[pyfunction]
#[pyo3(signature = (store, key, filter, *, parallelism))]
pub fn table_delete(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    filter: FilterArg,
    parallelism: usize,
) -> PyResult<(String, Option<u64>, bool)> {
    let opts = read_options(None, Some(filter), None)?;
    let predicate = opts
        .predicate
        .map(|p| p.as_ref().clone())
        .unwrap_or_default();
    let handle = store.inner.clone();
    let d = py
        .detach(|| delete::delete(handle, &key, predicate, parallelism))
        .py_err()?;
    let json = d.manifest.to_json().py_err()?;
    Ok((
        String::from_utf8_lossy(&json).into_owned(),
        d.rows,
        d.committed,
    ))
}

/// The manifest JSON of a version (latest, `version`, or `as_of` an
/// RFC 3339 time).
#[pyfunction]
#[pyo3(signature = (store, key, *, version = None, as_of = None))]
pub fn table_manifest(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    version: Option<u64>,
    as_of: Option<String>,
) -> PyResult<String> {
    let at = at(version, as_of.as_deref())?;
    let handle = store.inner.clone();
    let m = super::run(py, async move { scan::resolve(&handle, &key, at).await })?;
    m.to_json()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .py_err()
}

/// Manifest JSON of versions `from..=to`, newest first; versions already
/// vacuumed are skipped. One GET each, several at once.
#[pyfunction]
pub fn table_versions(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    from: u64,
    to: u64,
) -> PyResult<Vec<String>> {
    let handle = store.inner.clone();
    let manifests = super::run(py, async move {
        use futures::StreamExt;
        let reads = (from..=to).rev().map(|v| {
            let handle = handle.clone();
            let key = key.clone();
            async move {
                match crate::table::commit::read_version(&handle, &key, v).await {
                    Ok(m) => Ok(Some(m)),
                    Err(Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        });
        let got: Vec<_> = futures::stream::iter(reads).buffered(16).collect().await;
        got.into_iter().collect::<crate::error::Result<Vec<_>>>()
    })?;
    manifests
        .into_iter()
        .flatten()
        .map(|m| {
            m.to_json()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .py_err()
        })
        .collect()
}

/// Rows known deleted per data file of a version (`None` where a key-range
/// tombstone applies).
#[pyfunction]
pub fn table_deleted_rows(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    version: u64,
) -> PyResult<BTreeMap<String, Option<u64>>> {
    let handle = store.inner.clone();
    super::run(py, async move {
        let m = crate::table::commit::read_version(&handle, &key, version).await?;
        scan::deleted_rows(&handle, &key, &m).await
    })
}

/// Stream a version's rows as a `pyarrow.RecordBatchReader`.
#[pyfunction]
#[pyo3(signature = (store, key, *, version, columns, filter, batch_size, parallelism))]
#[allow(clippy::too_many_arguments)]
pub fn table_scan<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: String,
    version: u64,
    columns: Option<Vec<String>>,
    filter: Option<FilterArg>,
    batch_size: Option<usize>,
    parallelism: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = read_options(columns, filter, batch_size)?;
    let handle = store.inner.clone();
    stream_to_py(py, move || {
        let m =
            crate::runtime::block_on(crate::table::commit::read_version(&handle, &key, version))??;
        scan::scan(
            handle,
            &key,
            &m,
            ScanOptions {
                columns: opts.columns,
                predicate: opts.predicate,
                batch_size: opts.batch_size,
                parallelism,
            },
        )
    })
}
