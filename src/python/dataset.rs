//! Dataset functions of `pds._core`: the fast path, where all I/O is Rust's.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

use pyo3_arrow::{PyArray, PyRecordBatchReader, PySchema, PyTable};

use super::errors::IntoPy;
use super::progress::PyProgress;
use super::store::PyRustStore;
use crate::dataset::scan::DatasetStream;
use crate::dataset::{self, WriteRequest};
use crate::parquet::decode::ReadOptions;
use crate::parquet::encode::EncodeOptions;
use crate::parquet::filter;

/// A filter as it crosses the boundary: `(column, op, values)`, where values
/// is a pyarrow array (one value, several for `in`, or `None`).
pub type FilterArg = Vec<(String, String, Option<PyArray>)>;

/// Build the read options from Python arguments.
pub fn read_options(
    columns: Option<Vec<String>>,
    filter: Option<FilterArg>,
    batch_size: Option<usize>,
) -> PyResult<ReadOptions> {
    if batch_size == Some(0) {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "batch_size must be >= 1",
        ));
    }
    let predicate = match filter {
        None => None,
        Some(conds) => {
            let conds = conds
                .into_iter()
                .map(|(c, op, v)| (c, op, v.map(|a| a.into_inner().0)))
                .collect();
            Some(Arc::new(filter::predicate(conds).py_err()?))
        }
    };
    Ok(ReadOptions {
        columns,
        batch_size: Some(batch_size.unwrap_or(crate::parquet::decode::SCAN_BATCH_ROWS)),
        predicate,
        ..Default::default()
    })
}

/// Write `data` (anything with `__arrow_c_stream__`) as a dataset under `key`
/// and return the manifest JSON. The GIL is released throughout.
#[pyfunction]
#[pyo3(signature = (
    store, key, data, *, dataset_key, compression, row_group_size, max_rows_per_file,
    schema_hash, run_id, metadata, total_rows, parallelism, io_concurrency=None, overwrite=false,
    progress=None
))]
#[allow(clippy::too_many_arguments)]
pub fn write_dataset(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    data: PyRecordBatchReader,
    dataset_key: String,
    compression: &str,
    row_group_size: Option<usize>,
    max_rows_per_file: Option<usize>,
    schema_hash: String,
    run_id: Option<String>,
    metadata: Option<BTreeMap<String, String>>,
    total_rows: Option<u64>,
    parallelism: usize,
    io_concurrency: Option<usize>,
    overwrite: bool,
    progress: Option<&Bound<'_, PyProgress>>,
) -> PyResult<String> {
    let opts = EncodeOptions::new(compression, row_group_size, max_rows_per_file).py_err()?;
    let reader = data.into_reader()?;
    let req = WriteRequest {
        overwrite,
        location: key,
        dataset_key,
        schema_hash,
        run_id,
        metadata,
        total_rows,
        parallelism,
        io: io_concurrency,
        part_prefix: None,
        progress: super::progress::inner(progress),
    };
    let handle = store.inner.clone();
    let manifest = super::detach(py, || dataset::write_dataset(handle, reader, opts, req))?;
    manifest.to_json().py_err()
}

/// What `write_parts` reports of one part: name, rows, bytes, SHA-256, footer bytes.
type WrittenPart = (String, u64, u64, String, u64);

/// Encode and upload `data` as parts `part-<prefix>-NNNNN.parquet` under
/// `key` without committing (for Spark tasks). Returns
/// `(name, row_count, size_bytes, sha256, footer_bytes)` per part.
#[pyfunction]
#[pyo3(signature = (store, key, data, *, part_prefix, compression, row_group_size, max_rows_per_file, parallelism))]
#[allow(clippy::too_many_arguments)]
pub fn write_parts(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    data: PyRecordBatchReader,
    part_prefix: String,
    compression: &str,
    row_group_size: Option<usize>,
    max_rows_per_file: Option<usize>,
    parallelism: usize,
) -> PyResult<Vec<WrittenPart>> {
    let opts = EncodeOptions::new(compression, row_group_size, max_rows_per_file).py_err()?;
    let reader = data.into_reader()?;
    let req = WriteRequest {
        location: key.clone(),
        dataset_key: key,
        parallelism,
        part_prefix: Some(part_prefix),
        ..Default::default()
    };
    let handle = store.inner.clone();
    let parts = super::detach(py, || dataset::write_parts(handle, reader, &opts, &req))?;
    Ok(parts
        .names
        .into_iter()
        .zip(parts.summaries)
        .map(|(n, s)| (n, s.row_count, s.size_bytes, s.sha256, s.footer_bytes))
        .collect())
}

/// The text of a committed dataset's manifest, as it was while `_SUCCESS`
/// was there (`DatasetIncomplete` without `_SUCCESS`): 3 requests in
/// sequence. Passed back as `manifest=` to a read, it saves that read those.
#[pyfunction]
pub fn committed_manifest(py: Python<'_>, store: &PyRustStore, key: &str) -> PyResult<String> {
    let handle = store.inner.clone();
    let raw = super::detach(py, || {
        crate::runtime::block_on(dataset::read_committed_manifest(&handle, key))?
            .map(|(_, raw)| raw)
    })?;
    // Parsed above, so it is UTF-8 JSON.
    String::from_utf8(raw.to_vec()).map_err(|e| {
        super::errors::to_py(crate::error::Error::ManifestCorrupted {
            path: format!("{key}/{}", dataset::MANIFEST),
            reason: format!("it is not UTF-8: {e}"),
        })
    })
}

/// Read the dataset under `key` as a `pyarrow.Table` (zero-copy over the C
/// stream). `manifest`: its text from [`committed_manifest`].
#[pyfunction]
#[pyo3(signature = (
    store, key, *, columns, verify, filter = None, io_concurrency = None, manifest = None,
    progress = None
))]
#[allow(clippy::too_many_arguments)]
pub fn read_dataset<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: &str,
    columns: Option<Vec<String>>,
    verify: bool,
    filter: Option<FilterArg>,
    io_concurrency: Option<usize>,
    manifest: Option<String>,
    progress: Option<&Bound<'_, PyProgress>>,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let mut opts = read_options(columns, filter, None)?;
    opts.progress = super::progress::inner(progress);
    let io = io_concurrency.unwrap_or_else(|| handle.default_io_concurrency());
    let read = manifest.as_deref().map(str::as_bytes);
    let decoded = super::detach(py, || {
        dataset::read_dataset(handle, key, opts, verify, io, read)
    })?;
    PyTable::try_new(decoded.batches, decoded.schema)?.into_pyarrow(py)
}

/// Read one part file (footer, then only the projected column chunks).
#[pyfunction]
#[pyo3(signature = (store, key, *, columns = None, filter = None, schema = None))]
pub fn read_part<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: &str,
    columns: Option<Vec<String>>,
    filter: Option<FilterArg>,
    schema: Option<PySchema>,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let mut opts = read_options(columns, filter, None)?;
    opts.expected = schema.map(|s| s.into_inner());
    let decoded = super::run(py, async move {
        let size = handle.head(key).await?.size;
        crate::parquet::decode::read_part(&handle, key, size, &opts).await
    })?;
    PyTable::try_new(decoded.batches, decoded.schema)?.into_pyarrow(py)
}

/// Stream the dataset under `key` as a `pyarrow.RecordBatchReader`.
/// `_SUCCESS`, the manifest and every part are checked before it returns.
#[pyfunction]
#[pyo3(signature = (store, key, *, columns, filter, batch_size, parallelism, io_concurrency = None, manifest = None))]
#[allow(clippy::too_many_arguments)]
pub fn scan_dataset<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: &str,
    columns: Option<Vec<String>>,
    filter: Option<FilterArg>,
    batch_size: Option<usize>,
    parallelism: usize,
    io_concurrency: Option<usize>,
    manifest: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let opts = read_options(columns, filter, batch_size)?;
    let io = io_concurrency.unwrap_or_else(|| handle.default_io_concurrency());
    let read = manifest.as_deref().map(str::as_bytes);
    stream_to_py(py, || {
        crate::dataset::scan::scan(handle, key, opts, parallelism, io, read)
    })
}

/// Stream one part file as a `pyarrow.RecordBatchReader`: the HEAD, footer,
/// columns and filter are checked before it returns; batches are decoded in
/// the background, a few ahead of the consumer. `row_groups` restricts the
/// read to those row groups (file order), within the filter's pruning.
#[pyfunction]
#[pyo3(signature = (store, key, *, columns = None, filter = None, batch_size = None, row_groups = None, schema = None))]
#[allow(clippy::too_many_arguments)]
pub fn scan_part<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: &str,
    columns: Option<Vec<String>>,
    filter: Option<FilterArg>,
    batch_size: Option<usize>,
    row_groups: Option<Vec<usize>>,
    schema: Option<PySchema>,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let mut opts = read_options(columns, filter, batch_size)?;
    opts.row_groups = row_groups;
    opts.expected = schema.map(|s| s.into_inner());
    stream_to_py(py, || crate::dataset::scan::scan_part(handle, key, opts))
}

/// The row count of each row group of the part at `key` (HEAD + footer).
#[pyfunction]
pub fn part_row_groups(py: Python<'_>, store: &PyRustStore, key: &str) -> PyResult<Vec<u64>> {
    let handle = store.inner.clone();
    super::run(py, async move {
        crate::parquet::decode::part_row_groups(&handle, key).await
    })
}

/// Delete the dataset at `key`: its own objects only, never a key nested
/// below it (see `crate::dataset::delete_own`).
#[pyfunction]
pub fn delete_dataset(py: Python<'_>, store: &PyRustStore, key: &str) -> PyResult<()> {
    let handle = store.inner.clone();
    super::run(
        py,
        async move { crate::dataset::delete_own(&handle, key).await },
    )
}

/// Open a scan with the GIL released; hand it to Python as a
/// `pyarrow.RecordBatchReader` over a [`super::stream::PyBatchStream`], so
/// that an error mid-stream arrives as its documented exception class
/// (`PartCorrupted`, `DatasetIncomplete`, ...), not as a generic Arrow error.
pub(crate) fn stream_to_py<'py>(
    py: Python<'py>,
    open: impl FnOnce() -> crate::error::Result<DatasetStream> + Send,
) -> PyResult<Bound<'py, PyAny>> {
    let stream = super::detach(py, open)?;
    super::stream::into_reader(py, stream)
}

/// The dataset's Arrow schema, from the manifest alone when it records one.
#[pyfunction]
pub fn read_schema<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    key: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let schema = super::detach(py, || dataset::read_schema(handle, key))?;
    PySchema::new(schema).into_pyarrow(py)
}

/// Fail with `TypeError`, naming the column, if pds cannot store `schema`
/// (unions, run-end encoding, list views, ...). No I/O.
#[pyfunction]
pub fn check_schema(schema: PySchema) -> PyResult<()> {
    crate::parquet::storage_types::check_writable(&schema.into_inner()).py_err()
}

/// Parse a base64 Arrow IPC schema (as manifests store it), safely: a
/// malformed or hostile one raises `ValueError` with the reason.
#[pyfunction]
pub fn schema_from_ipc<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let schema = crate::dataset::manifest::schema_from_ipc_base64(text).py_err()?;
    PySchema::new(schema).into_pyarrow(py)
}

/// Claim the dataset key `location` for a writer whose parts are written
/// elsewhere (a Spark job): create `_WRITING` create-only (`AlreadyExists`
/// if another writer holds the key), or, with `take_over`, replace whoever
/// holds it. Returns the claim's token for [`dataset_claim_check`] and
/// [`dataset_claim_release`]. 1 PUT (+1 HEAD when refused).
#[pyfunction]
#[pyo3(signature = (store, location, *, take_over))]
pub fn dataset_claim<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    location: &str,
    take_over: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let handle = store.inner.clone();
    let claim = super::run(py, async move {
        if take_over {
            dataset::Claim::take_over(&handle, location).await
        } else {
            dataset::Claim::take(&handle, location).await
        }
    })?;
    Ok(PyBytes::new(py, claim.token()))
}

/// `AlreadyExists` unless the claim on `location` still holds `token`
/// (another writer's overwrite took the key). 1 GET.
#[pyfunction]
pub fn dataset_claim_check(
    py: Python<'_>,
    store: &PyRustStore,
    location: &str,
    token: &[u8],
) -> PyResult<()> {
    let handle = store.inner.clone();
    let claim = dataset::Claim::resume(location, bytes::Bytes::copy_from_slice(token));
    super::run(py, async move { claim.check(&handle).await })
}

/// One part a writer elsewhere uploaded: name, rows, bytes, SHA-256, and
/// the bytes after its last row group (see [`write_parts`]).
pub type UploadedPart = (String, u64, u64, String, Option<u64>);

/// Commit `parts` (uploaded under names of their own, by a Spark job's
/// tasks) as the dataset at `location` for the holder of the claim `token`,
/// and release the claim ([`dataset::commit_parts`]); returns the manifest
/// JSON. The GIL is released throughout.
#[pyfunction]
#[pyo3(signature = (
    store, location, token, parts, *, schema, dataset_key, compression, schema_hash, run_id,
    metadata, overwrite
))]
#[allow(clippy::too_many_arguments)]
pub fn dataset_commit_parts(
    py: Python<'_>,
    store: &PyRustStore,
    location: String,
    token: &[u8],
    parts: Vec<UploadedPart>,
    schema: PySchema,
    dataset_key: String,
    compression: &str,
    schema_hash: String,
    run_id: Option<String>,
    metadata: Option<BTreeMap<String, String>>,
    overwrite: bool,
) -> PyResult<String> {
    let compression = EncodeOptions::new(compression, None, None)
        .py_err()?
        .compression_name;
    let parts = parts
        .into_iter()
        .map(
            |(name, row_count, size_bytes, sha256, footer_bytes)| dataset::manifest::PartInfo {
                name,
                row_count,
                size_bytes,
                sha256,
                footer_bytes,
            },
        )
        .collect();
    let claim = dataset::Claim::resume(&location, bytes::Bytes::copy_from_slice(token));
    let req = WriteRequest {
        overwrite,
        location,
        dataset_key,
        schema_hash,
        run_id,
        metadata,
        ..Default::default()
    };
    let schema = schema.into_inner();
    let handle = store.inner.clone();
    let manifest = super::detach(py, || {
        dataset::commit_parts(&handle, &claim, &schema, parts, &compression, &req)
    })?;
    manifest.to_json().py_err()
}

/// Remove the claim on `location` if it still holds `token` (best effort:
/// never raises for a lost claim). 1 GET + 1 DELETE.
#[pyfunction]
pub fn dataset_claim_release(
    py: Python<'_>,
    store: &PyRustStore,
    location: &str,
    token: &[u8],
) -> PyResult<()> {
    let handle = store.inner.clone();
    let claim = dataset::Claim::resume(location, bytes::Bytes::copy_from_slice(token));
    super::run(py, async move {
        claim.release(&handle).await;
        Ok(())
    })
}
