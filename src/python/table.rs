//! Table functions of `pds._core`. A version crosses as a typed
//! [`PyTableVersion`] (its root); data as Arrow C streams. The GIL is released around all I/O and encoding.

use std::collections::BTreeMap;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3_arrow::{PyRecordBatchReader, PySchema};

use super::dataset::{read_options, stream_to_py, FilterArg};
use super::errors::IntoPy;
use super::progress::PyProgress;
use super::store::PyRustStore;
use super::table_version::PyTableVersion;
use crate::error::Error;
use crate::store::StoreHandle;
use crate::table::identity::expecting;
use crate::table::rewrite::Rewritten;
use crate::table::scan::{At, ScanOptions};
use crate::table::schema::SchemaMode;
use crate::table::snapshot::TableProperties;
use crate::table::versions::Depth;
use crate::table::write::BoxedReader;
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

/// Create a table (version 0); returns that version.
#[pyfunction]
#[pyo3(signature = (store, key, schema, data, *, primary_key, exist_ok, compression, row_group_size, target_file_size, parallelism, formats = Vec::new()))]
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
    formats: Vec<String>,
) -> PyResult<PyTableVersion> {
    let reader = data.map(|d| d.into_reader()).transpose()?;
    let props = TableProperties {
        primary_key,
        compression,
        row_group_size,
        target_file_size,
    };
    let handle = store.inner.clone();
    let schema = schema.into_inner();
    let m = super::detach(py, || {
        write::create_publishing(
            handle,
            &key,
            schema,
            reader,
            props,
            exist_ok,
            parallelism,
            &formats,
        )
    })?;
    PyTableVersion::py(&m, &key)
}

/// Publish what the table's formats lack up to its latest version; the
/// versions written, per format.
#[pyfunction]
pub fn table_sync_formats(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
) -> PyResult<BTreeMap<String, Vec<u64>>> {
    let handle = store.inner.clone();
    let synced = super::detach(py, || {
        crate::runtime::block_on(crate::table::delta::publish::sync(&handle, &key))?
    })?;
    Ok(synced
        .into_iter()
        .map(|(name, p)| (name, p.versions()))
        .collect())
}

/// Publish `format` for the existing table at `key` (see
/// [`crate::table::enable_format::enable_format`]): the version it starts at, the
/// table's latest version, and whether a version was committed.
#[pyfunction]
#[pyo3(signature = (store, key, format, *, table_id = None))]
pub fn table_enable_format(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    format: String,
    table_id: Option<String>,
) -> PyResult<(u64, u64, bool)> {
    let handle = store.inner.clone();
    let e = super::detach(py, || {
        crate::table::identity::expecting(table_id.as_deref(), || {
            crate::runtime::block_on(crate::table::enable_format::enable_format(
                &handle, &key, &format,
            ))?
        })
    })?;
    Ok((e.since, e.version, e.committed))
}

/// Append `data`; returns the version it leaves.
#[pyfunction]
#[pyo3(signature = (store, key, data, *, schema_mode, metadata, parallelism, table_id = None))]
#[allow(clippy::too_many_arguments)]
pub fn table_append(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    data: PyRecordBatchReader,
    schema_mode: &str,
    metadata: Option<BTreeMap<String, String>>,
    parallelism: usize,
    table_id: Option<String>,
) -> PyResult<PyTableVersion> {
    let append = |handle: Arc<StoreHandle>, reader: BoxedReader, mode: SchemaMode| {
        write::append(handle, &key, reader, mode, metadata, parallelism)
    };
    let m = write_stream(py, store, data, schema_mode, table_id, append)?;
    PyTableVersion::py(&m, &key)
}

/// Run a write of `data` (in `schema_mode`) on the store's handle with the
/// GIL released, checking that the table is still the one `table_id`
/// names ([`expecting`]).
fn write_stream<T: Send>(
    py: Python<'_>,
    store: &PyRustStore,
    data: PyRecordBatchReader,
    schema_mode: &str,
    table_id: Option<String>,
    write: impl FnOnce(Arc<StoreHandle>, BoxedReader, SchemaMode) -> crate::error::Result<T> + Send,
) -> PyResult<T> {
    let mode = SchemaMode::parse(schema_mode).py_err()?;
    let reader = data.into_reader()?;
    let handle = store.inner.clone();
    super::detach(py, || {
        expecting(table_id.as_deref(), || write(handle, reader, mode))
    })
}

/// `(version, rows removed or None, committed)` of a rewrite of the table
/// at `key`.
fn rewritten(done: &Rewritten, key: &str) -> PyResult<(PyTableVersion, Option<u64>, bool)> {
    Ok((
        PyTableVersion::py(&done.manifest, key)?,
        done.rows,
        done.committed,
    ))
}

/// Delete rows matching `filter`; returns `(version, rows deleted or
/// None, committed)`.
#[pyfunction]
#[pyo3(signature = (store, key, filter, *, parallelism, table_id = None))]
pub fn table_delete(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    filter: FilterArg,
    parallelism: usize,
    table_id: Option<String>,
) -> PyResult<(PyTableVersion, Option<u64>, bool)> {
    let opts = read_options(None, Some(filter), None)?;
    let predicate = opts
        .predicate
        .map(|p| p.as_ref().clone())
        .unwrap_or_default();
    let handle = store.inner.clone();
    let d = super::detach(py, || {
        expecting(table_id.as_deref(), || {
            delete::delete(handle, &key, predicate, parallelism)
        })
    })?;
    Ok((PyTableVersion::py(&d.manifest, &key)?, d.rows, d.committed))
}

/// A version (latest, `version`, or `as_of` an RFC 3339 time) of the table
/// at `key`: its root (2 GETs for the latest, 1 for a given version).
#[pyfunction]
#[pyo3(signature = (store, key, *, version = None, as_of = None))]
pub fn table_manifest(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    version: Option<u64>,
    as_of: Option<String>,
) -> PyResult<PyTableVersion> {
    let at = at(version, as_of.as_deref())?;
    let handle = store.inner.clone();
    let m = super::run(py, async {
        scan::resolve_at(&handle, &key, at, Depth::Root).await
    })?;
    PyTableVersion::py(&m, &key)
}

/// The whole manifest of `version` as Python objects (a `dict`): the root
/// plus `data_files` and `tombstones` (1 GET for the root, 1 per segment not
/// cached yet).
#[pyfunction]
pub fn table_manifest_dict<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: String,
    version: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let value = super::run(py, async move {
        scan::resolve_at(&handle, &key, At::Version(version), Depth::Full)
            .await?
            .expanded_value()
    })?;
    pythonize::pythonize(py, &value).map_err(PyErr::from)
}

/// The versions `from..=to`, newest first; versions already vacuumed are
/// skipped. One GET each, several at once.
#[pyfunction]
pub fn table_versions(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    from: u64,
    to: u64,
) -> PyResult<Vec<PyTableVersion>> {
    let handle = store.inner.clone();
    let manifests = super::run(py, async {
        use futures::StreamExt;
        let reads = (from..=to).rev().map(|v| {
            let handle = handle.clone();
            let key = key.clone();
            async move {
                match crate::table::versions::read_version_at(&handle, &key, v, Depth::Root).await {
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
        .map(|m| PyTableVersion::py(&m, &key))
        .collect()
}

/// The data files of a version as a `pyarrow.Table` (see
/// `crate::table::files`), built segment by segment.
#[pyfunction]
pub fn table_files<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: String,
    version: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let batch = super::run(py, async move {
        crate::table::files::files(&handle, &key, version).await
    })?;
    let schema = batch.schema();
    pyo3_arrow::PyTable::try_new(vec![batch], schema)?.into_pyarrow(py)
}

/// Stream a version's rows as a `pyarrow.RecordBatchReader`.
#[pyfunction]
#[pyo3(signature = (store, key, *, version, columns, filter, batch_size, parallelism, files = None))]
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
    files: Option<Vec<String>>,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = read_options(columns, filter, batch_size)?;
    let handle = store.inner.clone();
    stream_to_py(py, move || {
        let m = crate::runtime::block_on(scan::for_scan(
            &handle,
            &key,
            version,
            opts.predicate.as_deref(),
            files.is_some(),
        ))??;
        scan::scan(
            handle,
            &key,
            &m,
            ScanOptions {
                columns: opts.columns,
                predicate: opts.predicate,
                batch_size: opts.batch_size,
                parallelism,
                files,
            },
        )
    })
}

/// Stream the changes of versions `from_version..=to_version`.
#[pyfunction]
#[pyo3(signature = (store, key, from_version, to_version, *, parallelism))]
pub fn table_changes<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: String,
    from_version: u64,
    to_version: u64,
    parallelism: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    stream_to_py(py, move || {
        crate::table::changes::changes(handle, &key, from_version, to_version, parallelism)
    })
}

/// Compact; returns `(version, committed, files removed, files added)`.
#[pyfunction]
#[pyo3(signature = (
    store, key, *, target_file_size, min_deleted_fraction, parallelism, table_id = None,
    progress = None
))]
#[allow(clippy::too_many_arguments)]
pub fn table_compact(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    target_file_size: Option<u64>,
    min_deleted_fraction: f64,
    parallelism: usize,
    table_id: Option<String>,
    progress: Option<&Bound<'_, PyProgress>>,
) -> PyResult<(PyTableVersion, bool, usize, usize)> {
    let handle = store.inner.clone();
    let opts = crate::table::compact::CompactOptions {
        target_file_size,
        min_deleted_fraction,
        parallelism,
        progress: super::progress::inner(progress),
    };
    let c = super::detach(py, || {
        expecting(table_id.as_deref(), || {
            crate::table::compact::compact(handle, &key, opts)
        })
    })?;
    Ok((
        PyTableVersion::py(&c.manifest, &key)?,
        c.committed,
        c.files_removed,
        c.files_added,
    ))
}

/// Vacuum: the keys (relative to the table) removed, or to remove.
/// `ValueError` for a negative or non-finite duration, or `retain` below
/// `min_age`, before any I/O; a duration too long to hold is clamped.
#[pyfunction]
#[pyo3(signature = (
    store, key, *, retain_seconds, min_age_seconds, keep_versions, dry_run, table_id = None,
    progress = None
))]
#[allow(clippy::too_many_arguments)]
pub fn table_vacuum(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    retain_seconds: f64,
    min_age_seconds: f64,
    keep_versions: bool,
    dry_run: bool,
    table_id: Option<String>,
    progress: Option<&Bound<'_, PyProgress>>,
) -> PyResult<Vec<String>> {
    let mut opts = crate::table::vacuum::VacuumOptions::from_seconds(
        retain_seconds,
        min_age_seconds,
        keep_versions,
        dry_run,
    )
    .py_err()?;
    opts.progress = super::progress::inner(progress);
    let handle = store.inner.clone();
    let v = super::detach(py, || {
        expecting(table_id.as_deref(), || {
            crate::runtime::block_on(crate::table::vacuum::vacuum(
                &handle,
                &key,
                &opts,
                chrono::Utc::now(),
            ))?
        })
    })?;
    Ok(v.removed)
}

/// Drop the table at `key`: the keys (relative to it) removed. See
/// `crate::table::drop`.
#[pyfunction]
pub fn table_drop(py: Python<'_>, store: &PyRustStore, key: String) -> PyResult<Vec<String>> {
    let handle = store.inner.clone();
    let d = super::run(py, async move {
        crate::table::drop::drop_table(&handle, &key).await
    })?;
    Ok(d.removed)
}

/// Upload `data` as uncommitted data files of the table at `key` (a Spark
/// task's share), named `data/part-<prefix>-NNNNN.parquet`; returns their
/// manifest entries as JSON.
#[pyfunction]
#[pyo3(signature = (store, key, data, *, prefix, schema, compression, row_group_size, target_file_size, parallelism))]
#[allow(clippy::too_many_arguments)]
pub fn table_write_files(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    data: PyRecordBatchReader,
    prefix: String,
    schema: PySchema,
    compression: String,
    row_group_size: Option<usize>,
    target_file_size: Option<u64>,
    parallelism: usize,
) -> PyResult<String> {
    let reader = data.into_reader()?;
    let props = TableProperties {
        primary_key: None,
        compression,
        row_group_size,
        target_file_size,
    };
    let handle = store.inner.clone();
    let schema = schema.into_inner();
    let files = super::detach(py, || {
        write::upload(
            &handle,
            &key,
            reader,
            schema,
            &props,
            parallelism,
            Some(prefix),
        )
    })?;
    serde_json::to_string(&files)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// Commit files from [`table_write_files`] in one version (`append` or
/// `overwrite`), creating the table if needed; returns the version.
/// With `schema_mode="merge"`, an append whose files' schema is the merge
/// of theirs into the table's (see [`table_merge_schema`]) changes the
/// table's schema in the same version.
#[pyfunction]
#[pyo3(signature = (store, key, files, *, mode, schema, primary_key, compression, row_group_size, target_file_size, metadata, schema_mode = "strict"))]
#[allow(clippy::too_many_arguments)]
pub fn table_commit_files(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    files: &str,
    mode: &str,
    schema: PySchema,
    primary_key: Option<String>,
    compression: String,
    row_group_size: Option<usize>,
    target_file_size: Option<u64>,
    metadata: Option<BTreeMap<String, String>>,
    schema_mode: &str,
) -> PyResult<PyTableVersion> {
    let schema_mode = SchemaMode::parse(schema_mode).py_err()?;
    let files: Vec<crate::table::snapshot::DataFile> = serde_json::from_str(files)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("bad files JSON: {e}")))?;
    let mode = match mode {
        "append" => write::FilesMode::Append(schema_mode),
        "overwrite" => write::FilesMode::Overwrite,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "mode must be append or overwrite, got {other:?}"
            )))
        }
    };
    let props = TableProperties {
        primary_key,
        compression,
        row_group_size,
        target_file_size,
    };
    let handle = store.inner.clone();
    let schema = schema.into_inner();
    let m = super::detach(py, || {
        write::commit_files(handle, &key, files, mode, schema, props, metadata)
    })?;
    PyTableVersion::py(&m, &key)
}

/// Upsert `data` by primary key; returns `(version, rows replaced or
/// None, committed)`.
#[pyfunction]
#[pyo3(signature = (store, key, data, *, schema_mode, parallelism, table_id = None))]
pub fn table_upsert(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    data: PyRecordBatchReader,
    schema_mode: &str,
    parallelism: usize,
    table_id: Option<String>,
) -> PyResult<(PyTableVersion, Option<u64>, bool)> {
    let upsert = |handle: Arc<StoreHandle>, reader: BoxedReader, mode: SchemaMode| {
        crate::table::upsert::upsert(handle, &key, reader, mode, parallelism)
    };
    let done = write_stream(py, store, data, schema_mode, table_id, upsert)?;
    rewritten(&done, &key)
}

/// Replace the rows matching `filter` (conditions; none: every row) with
/// `data`, in one commit; returns `(version, rows removed or None,
/// committed)`.
#[pyfunction]
#[pyo3(signature = (store, key, filter, data, *, schema_mode, parallelism, table_id = None))]
#[allow(clippy::too_many_arguments)]
pub fn table_replace(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    filter: FilterArg,
    data: PyRecordBatchReader,
    schema_mode: &str,
    parallelism: usize,
    table_id: Option<String>,
) -> PyResult<(PyTableVersion, Option<u64>, bool)> {
    let predicate = read_options(None, Some(filter), None)?
        .predicate
        .map(|p| p.as_ref().clone())
        .unwrap_or_default();
    let replace = |handle: Arc<StoreHandle>, reader: BoxedReader, mode: SchemaMode| {
        crate::table::replace::replace(handle, &key, predicate, reader, mode, parallelism)
    };
    let done = write_stream(py, store, data, schema_mode, table_id, replace)?;
    rewritten(&done, &key)
}

/// Upsert the rows of data files uploaded by [`table_write_files`] (a Spark
/// job's); returns `(version, rows replaced or None, committed)`.
#[pyfunction]
#[pyo3(signature = (store, key, files, *, schema, parallelism))]
pub fn table_upsert_files(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    files: &str,
    schema: PySchema,
    parallelism: usize,
) -> PyResult<(PyTableVersion, Option<u64>, bool)> {
    let files: Vec<crate::table::snapshot::DataFile> = serde_json::from_str(files)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("bad files JSON: {e}")))?;
    let handle = store.inner.clone();
    let schema = schema.into_inner();
    let done = super::detach(py, || {
        crate::table::upsert::upsert_files(handle, &key, files, schema, parallelism)
    })?;
    rewritten(&done, &key)
}

/// Update rows: `filter` (conditions, pushed down) picks the candidates,
/// `apply(batch) -> (mask | None, new rows)` the matches and their values;
/// returns `(version, rows updated, committed)`. `apply` runs with
/// the GIL; everything else without. An exception it raises is re-raised
/// as it is, and nothing is committed.
#[pyfunction]
#[pyo3(signature = (store, key, filter, apply, *, columns, description, parallelism, table_id = None))]
#[allow(clippy::too_many_arguments)]
pub fn table_update(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    filter: Option<FilterArg>,
    apply: Py<PyAny>,
    columns: Vec<String>,
    description: &str,
    parallelism: usize,
    table_id: Option<String>,
) -> PyResult<(PyTableVersion, Option<u64>, bool)> {
    let predicate = match filter {
        Some(f) => read_options(None, Some(f), None)?
            .predicate
            .map(|p| p.as_ref().clone()),
        None => None,
    };
    let filter_json: serde_json::Value =
        serde_json::from_str(description).unwrap_or(serde_json::Value::Null);
    let opts = crate::table::update::UpdateOptions {
        predicate,
        columns,
        filter: filter_json,
        parallelism,
    };
    let raised: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
    let mut call = |batch: arrow_array::RecordBatch| {
        Python::attach(|py| -> PyResult<_> {
            let arg = pyo3_arrow::PyRecordBatch::new(batch).into_pyarrow(py)?;
            let out = apply.bind(py).call1((arg,))?;
            let (mask, rows): (Option<pyo3_arrow::PyArray>, pyo3_arrow::PyRecordBatch) =
                out.extract()?;
            let mask = match mask {
                None => None,
                Some(m) => Some(
                    m.array()
                        .as_any()
                        .downcast_ref::<arrow_array::BooleanArray>()
                        .cloned()
                        .ok_or_else(|| {
                            pyo3::exceptions::PyTypeError::new_err(
                                "an update's mask must be a boolean array",
                            )
                        })?,
                ),
            };
            Ok((mask, rows.into_inner()))
        })
        .map_err(|e| {
            let text = e.to_string();
            if let Ok(mut slot) = raised.lock() {
                *slot = Some(e);
            }
            Error::Task(format!("the update's values could not be computed: {text}"))
        })
    };
    let handle = store.inner.clone();
    let result = super::detach(py, || {
        expecting(table_id.as_deref(), || {
            crate::table::update::update(handle, &key, opts, &mut call)
        })
    });
    if let Some(e) = raised.lock().ok().and_then(|mut s| s.take()) {
        return Err(e);
    }
    let done = result?;
    rewritten(&done, &key)
}

/// The schema a table of schema `table` has after an append of data of
/// schema `input` in `schema_mode="merge"`: its columns (widened where
/// the data's type widens them), then the data's new columns as nullable.
/// `SchemaMismatch` (naming each field, for the table `key`) otherwise.
/// No I/O.
#[pyfunction]
pub fn table_merge_schema<'py>(
    py: Python<'py>,
    table: PySchema,
    input: PySchema,
    key: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let merged =
        crate::table::schema::reconcile(table.as_ref(), input.as_ref(), SchemaMode::Merge, key)
            .py_err()?;
    PySchema::new(merged).into_pyarrow(py)
}

/// Whether a column of type `input` may be appended to a column of type
/// `table` under the strict rule of `Table.append`: the same logical type
/// (string, large string and string view are one; so are the binary and
/// list variants), castable without loss of meaning. No I/O.
#[pyfunction]
pub fn same_logical_type(table: pyo3_arrow::PyDataType, input: pyo3_arrow::PyDataType) -> bool {
    crate::table::schema::same_logical_type(table.as_ref(), input.as_ref())
}
