//! Part encoding and decoding for the portable path, where the bytes travel
//! through a remote_store `Store`'s own methods.

use std::sync::Mutex;

use bytes::Bytes;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use pyo3_arrow::{PyRecordBatchReader, PySchema, PyTable};

use super::errors::IntoPy;
use crate::parquet::encode::{EncodeOptions, CODECS};
use crate::parquet::parts::EncodedParts;

/// Iterator of `(data, row_count, size_bytes, sha256, last)` per part.
/// Parts are encoded several at once, with the GIL released.
#[pyclass(module = "pds._core", name = "EncodedParts")]
pub struct PyEncodedParts {
    inner: Mutex<EncodedParts>,
}

#[pymethods]
impl PyEncodedParts {
    #[new]
    #[pyo3(signature = (data, *, compression, row_group_size, max_rows_per_file, parallelism))]
    fn new(
        data: PyRecordBatchReader,
        compression: &str,
        row_group_size: Option<usize>,
        max_rows_per_file: Option<usize>,
        parallelism: usize,
    ) -> PyResult<Self> {
        let opts = EncodeOptions::new(compression, row_group_size, max_rows_per_file).py_err()?;
        Ok(Self {
            inner: Mutex::new(EncodedParts::new(data.into_reader()?, opts, parallelism)),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[allow(clippy::type_complexity)]
    fn __next__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, u64, u64, String, bool)>> {
        let next = super::detach_py(py, || {
            let mut guard = self
                .inner
                .lock()
                .map_err(|_| PyRuntimeError::new_err("EncodedParts used after a failure"))?;
            Ok::<_, PyErr>(guard.next())
        })?;
        match next {
            None => Ok(None),
            Some(r) => {
                let p = r.py_err()?;
                Ok(Some((
                    PyBytes::new(py, &p.data),
                    p.summary.row_count,
                    p.summary.size_bytes,
                    p.summary.sha256,
                    p.last,
                )))
            }
        }
    }
}

/// Decode `(name, bytes)` parts in parallel into one `pyarrow.Table`.
/// `checksums`, if given, are verified first (SHA-256 hex per part).
///
/// Every part's footer schema is checked against `schema` (the dataset's,
/// from its manifest), or against the first part's when `schema` is `None`,
/// before any data is decoded. Returns the table and the rows the parts'
/// footers hold in all (before any filter).
#[pyfunction]
#[pyo3(signature = (parts, *, columns, checksums = None, filter = None, schema = None))]
pub fn decode_parts<'py>(
    py: Python<'py>,
    parts: Vec<(String, PyBackedBytes)>,
    columns: Option<Vec<String>>,
    checksums: Option<Vec<String>>,
    filter: Option<super::dataset::FilterArg>,
    schema: Option<PySchema>,
) -> PyResult<(Bound<'py, PyAny>, u64)> {
    let parts: Vec<(String, Bytes)> = parts
        .into_iter()
        .map(|(n, b)| (n, Bytes::from_owner(b)))
        .collect();
    if parts.is_empty() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "decode_parts needs at least one part",
        ));
    }
    let mut opts = super::dataset::read_options(columns, filter, None)?;
    let expected = schema.map(|s| s.into_inner());
    let decoded = super::detach(py, || {
        if let Some(sums) = &checksums {
            for ((name, data), sum) in parts.iter().zip(sums) {
                crate::dataset::verify_bytes(data, name, sum)?;
            }
        }
        opts.expected = Some(match expected {
            Some(s) => s,
            None => match parts.first() {
                Some((name, data)) => crate::parquet::decode::bytes_schema(data, name)?,
                None => {
                    return Err(crate::error::Error::InvalidArgument(
                        "decode_parts needs at least one part".into(),
                    ))
                }
            },
        });
        crate::parquet::parts::decode_parts(parts, &opts)
    })?;
    let schema = decoded
        .first()
        .map(|d| d.schema.clone())
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("decode_parts decoded no part"))?;
    let rows = decoded.iter().map(|d| d.file_rows).sum();
    let batches = decoded.into_iter().flat_map(|d| d.batches).collect();
    Ok((PyTable::try_new(batches, schema)?.into_pyarrow(py)?, rows))
}

/// The Arrow schema of the Parquet file `data` (its footer), without
/// decoding any data. `PartCorrupted` naming `name` if it is unreadable.
#[pyfunction]
pub fn part_schema<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    name: String,
) -> PyResult<Bound<'py, PyAny>> {
    let data = Bytes::from_owner(data);
    let schema = super::detach(py, || crate::parquet::decode::bytes_schema(&data, &name))?;
    PySchema::new(schema).into_pyarrow(py)
}

/// The compression codec names pds accepts.
#[pyfunction]
pub fn codecs() -> Vec<&'static str> {
    CODECS.to_vec()
}
