//! `pds._core.TableVersion`: one version of a table as a typed Python object
//! (what a `pds.Table` is pinned to), built from the manifest the core read
//! or committed. It holds the root's fields only, never the file list, so a
//! handle costs the same memory at 10 files as at 10 million.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use arrow_schema::SchemaRef;
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_arrow::PySchema;
use serde::{Deserialize, Serialize};

use super::errors::IntoPy;
use crate::error::{Error, Result};
use crate::table::snapshot::{check_time, TableManifest, TableProperties};

/// A table version's root: version, schema, commit, identity and settings.
#[pyclass(module = "pds._core", name = "TableVersion", frozen)]
pub struct PyTableVersion {
    root: Root,
    created_at: DateTime<Utc>,
    /// `root.schema_ipc`, decoded on first use (a history of many versions
    /// decodes none).
    schema: OnceLock<SchemaRef>,
}

/// What a [`PyTableVersion`] holds, as it pickles.
#[derive(Serialize, Deserialize)]
struct Root {
    version: u64,
    previous: Option<u64>,
    created_at: String,
    operation: String,
    parameters: BTreeMap<String, serde_json::Value>,
    /// The schema as the manifest stores it (Arrow IPC, base64).
    schema_ipc: String,
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
        Self::new(Root {
            version: m.version,
            previous: m.previous,
            created_at: m.created_at.clone(),
            operation: m.operation.clone(),
            parameters: m.operation_parameters.clone(),
            schema_ipc: m.schema.arrow_schema.clone(),
            path: crate::table::manifest_key(key, m.version),
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

    fn new(root: Root) -> Result<Self> {
        let created_at =
            check_time(&root.created_at).map_err(|reason| Error::ManifestCorrupted {
                path: root.path.clone(),
                reason,
            })?;
        Ok(Self {
            root,
            created_at,
            schema: OnceLock::new(),
        })
    }
}

#[pymethods]
impl PyTableVersion {
    /// The version number.
    #[getter]
    fn version(&self) -> u64 {
        self.root.version
    }

    /// The version this one was built on (`None` for the table's creation).
    #[getter]
    fn previous(&self) -> Option<u64> {
        self.root.previous
    }

    /// When the version was committed (UTC).
    #[getter]
    fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }

    /// The operation that wrote it (`"append"`, `"delete"`, ...).
    #[getter]
    fn operation(&self) -> &str {
        &self.root.operation
    }

    /// The operation's parameters (rows and files added or removed, ...).
    #[getter]
    fn parameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.root.parameters).map_err(PyErr::from)
    }

    /// The version's full Arrow schema, as a `pyarrow.Schema`.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let schema = match self.schema.get() {
            Some(s) => s.clone(),
            None => {
                let decoded =
                    crate::dataset::manifest::schema_from_ipc_base64(&self.root.schema_ipc)
                        .map_err(|e| Error::ManifestCorrupted {
                            path: self.root.path.clone(),
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
        self.root.commit_id.as_deref()
    }

    /// The id of the table (`None` for tables created before table ids).
    #[getter]
    fn table_id(&self) -> Option<&str> {
        self.root.table_id.as_deref()
    }

    /// The formats published beside pds's own, in name order.
    #[getter]
    fn formats(&self) -> Vec<String> {
        self.root.formats.clone()
    }

    /// The primary-key column, if the table declares one.
    #[getter]
    fn primary_key(&self) -> Option<&str> {
        self.root.properties.primary_key.as_deref()
    }

    /// The settings fixed at the table's creation, as the manifest records
    /// them (`compression`; `primary_key`, `row_group_size` and
    /// `target_file_size` where set).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.root.properties).map_err(PyErr::from)
    }

    /// Pickles as its root's fields (no I/O either way), so that a
    /// `pds.Table` pickles pinned to its version.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Py<PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let text = serde_json::to_string(&slf.get().root)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let restore = py.get_type::<Self>().getattr("_restore")?.unbind();
        Ok((restore, (text,).into_pyobject(py)?))
    }

    /// The version a pickle holds (see `__reduce__`).
    #[staticmethod]
    fn _restore(text: &str) -> PyResult<Self> {
        let root: Root = serde_json::from_str(text).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!("not a pickled TableVersion: {e}"))
        })?;
        Self::new(root).py_err()
    }

    fn __repr__(&self) -> String {
        format!(
            "TableVersion(version={}, operation={:?})",
            self.root.version, self.root.operation
        )
    }
}
