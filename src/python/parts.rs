//! Part decoding for the portable read path, where the bytes travel
//! through a remote_store `Store`'s own methods (writes go through
//! `RustStore.over_store`).

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3_arrow::{PySchema, PyTable};

use crate::parquet::encode::CODECS;

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
