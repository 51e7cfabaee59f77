//! `pds._core.TableVersion`: one version of a table as a typed Python object
//! (what a `pds.Table` is pinned to), built from the manifest the core read
//! or committed. It holds the root's fields only, never the file list, so a
//! handle costs the same memory at 10 files as at 10 million.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use arrow_schema::SchemaRef;
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3_arrow::PySchema;

use super::errors::IntoPy;
use crate::error::{Error, Result};
use crate::table::snapshot::{check_time, TableManifest, TableProperties};

/// A table version's root: version, schema, commit, identity and settings.
#[pyclass(module = "pds._core", name = "TableVersion", frozen)]
pub struct PyTableVersion {
    version: u64,
    previous: Option<u64>,
    created_at: DateTime<Utc>,
    operation: String,
    parameters: BTreeMap<String, serde_json::Value>,
    /// The schema as the manifest stores it, decoded on first use (a
    /// history of many versions decodes none).
    schema_ipc: String,
    schema: OnceLock<SchemaRef>,
    /// The manifest's key, for errors.
    path: String,
    commit_id: Option<String>,
    table_id: Option<String>,
    formats: Vec<String>,
    properties: TableProperties,
}

impl PyTableVersion {
    /// The root of `m`, a manifest of the table at `key`. Its schema and
    /// time were checked when it was read; should either still not decode,
    /// that is the manifest's corruption.
    pub fn of(m: &TableManifest, key: &str) -> Result<Self> {
        let path = crate::table::manifest_key(key, m.version);
        let created_at = check_time(&m.created_at).map_err(|reason| Error::ManifestCorrupted {
            path: path.clone(),
            reason,
        })?;
        Ok(Self {
            version: m.version,
            previous: m.previous,
            created_at,
            operation: m.operation.clone(),
            parameters: m.operation_parameters.clone(),
            schema_ipc: m.schema.arrow_schema.clone(),
            schema: OnceLock::new(),
            path,
            commit_id: m.commit_id.clone(),
            table_id: m.table_id.clone(),
            formats: m.formats.keys().cloned().collect(),
            properties: m.properties.clone(),
        })
    }

    /// [`PyTableVersion::of`] as a Python result.
    pub fn py(m: &TableManifest, key: &str) -> PyResult<Self> {
        Self::of(m, key).py_err()
    }
}

#[pymethods]
impl PyTableVersion {
    /// The version number.
    #[getter]
    fn version(&self) -> u64 {
        self.version
    }

    /// The version this one was built on (`None` for the table's creation).
    #[getter]
    fn previous(&self) -> Option<u64> {
        self.previous
    }

    /// When the version was committed (UTC).
    #[getter]
    fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }

    /// The operation that wrote it (`"append"`, `"delete"`, ...).
    #[getter]
    fn operation(&self) -> &str {
        &self.operation
    }

    /// The operation's parameters (rows and files added or removed, ...).
    #[getter]
    fn parameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.parameters).map_err(PyErr::from)
    }

    /// The version's full Arrow schema, as a `pyarrow.Schema`.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let schema = match self.schema.get() {
            Some(s) => s.clone(),
            None => {
                let decoded = crate::dataset::manifest::schema_from_ipc_base64(&self.schema_ipc)
                    .map_err(|e| Error::ManifestCorrupted {
                        path: self.path.clone(),
                        reason: format!("its arrow_schema cannot be read: {e}"),
                    })
                    .py_err()?;
                self.schema.get_or_init(|| decoded).clone()
            }
        };
        PySchema::new(schema).into_pyarrow(py)
    }

    /// The id of the commit that wrote it (`None` before commit ids).
    #[getter]
    fn commit_id(&self) -> Option<&str> {
        self.commit_id.as_deref()
    }

    /// The id of the table (`None` for tables created before table ids).
    #[getter]
    fn table_id(&self) -> Option<&str> {
        self.table_id.as_deref()
    }

    /// The formats published beside pds's own, in name order.
    #[getter]
    fn formats(&self) -> Vec<String> {
        self.formats.clone()
    }

    /// The primary-key column, if the table declares one.
    #[getter]
    fn primary_key(&self) -> Option<&str> {
        self.properties.primary_key.as_deref()
    }

    /// The settings fixed at the table's creation, as the manifest records
    /// them (`compression`; `primary_key`, `row_group_size` and
    /// `target_file_size` where set).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.properties).map_err(PyErr::from)
    }

    fn __repr__(&self) -> String {
        format!(
            "TableVersion(version={}, operation={:?})",
            self.version, self.operation
        )
    }
}
