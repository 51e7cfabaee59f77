//! The producers' environment for one call from Python: the store, the
//! pipeline's root, the encoding and the budgets, checked.

use pyo3::prelude::*;

use super::errors::IntoPy;
use super::store::PyRustStore;
use crate::parquet::encode::EncodeOptions;
use crate::producers::node::Env;

/// The environment of a pipeline at `root` in `store`. Fails if
/// `target_rows` or `sort_budget` is 0 (`ValueError`) or if the compression
/// is unknown.
pub(crate) fn env(
    store: &PyRustStore,
    root: &str,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
) -> PyResult<Env> {
    if target_rows == 0 || sort_budget == 0 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "target_rows and sort_budget must be >= 1",
        ));
    }
    Ok(Env {
        store: store.inner.clone(),
        root: root.trim_end_matches('/').to_string(),
        opts: EncodeOptions::new(compression, None, None).py_err()?,
        target_rows,
        sort_budget,
        spill: None,
        job: None,
        derive_mappings: true,
    })
}
