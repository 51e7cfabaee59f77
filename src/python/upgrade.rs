//! `pds._core` functions of the format upgrade (see `crate::table::upgrade`).

use pyo3::prelude::*;

use super::store::PyRustStore;
use crate::table::identity::expecting;
use crate::table::upgrade::{upgrade_pipeline, upgrade_table, Upgraded};

/// What an upgrade did, for Python: `(from_format, version)`, with
/// `from_format` `None` when the object was already current.
fn outcome(u: Upgraded) -> (Option<String>, u64) {
    (u.from.map(str::to_string), u.version)
}

/// Upgrade the table at `key` to the current format (no-op if it is);
/// with `table_id`, only the table of that id (a handle's: `NotFound` if
/// it was dropped, also when another table was created at its key).
#[pyfunction]
#[pyo3(signature = (store, key, *, table_id = None))]
pub fn table_upgrade(
    py: Python<'_>,
    store: &PyRustStore,
    key: String,
    table_id: Option<String>,
) -> PyResult<(Option<String>, u64)> {
    let handle = store.inner.clone();
    super::detach(py, || {
        expecting(table_id.as_deref(), || {
            crate::runtime::block_on(upgrade_table(&handle, &key)).and_then(|r| r)
        })
    })
    .map(outcome)
}

/// Upgrade the pipeline at `root` to the current format (no-op if it is).
#[pyfunction]
pub fn pipeline_upgrade(
    py: Python<'_>,
    store: &PyRustStore,
    root: String,
) -> PyResult<(Option<String>, u64)> {
    let handle = store.inner.clone();
    super::run(py, async move { upgrade_pipeline(&handle, &root).await }).map(outcome)
}

/// Register the upgrade functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(table_upgrade, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline_upgrade, m)?)?;
    Ok(())
}
