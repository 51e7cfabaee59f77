//! A source's update split by key range
//! (`crate::producers::split_source`), for Spark: the ranges its changes
//! are shuffled to, the range task, and the driver's stitching. Key
//! ranges, task results and node states cross as JSON text; rows as Arrow.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3_arrow::PyRecordBatch;

use super::errors::IntoPy;
use super::split_stage::{job_env, key_range, record_batches, to_json, RowsArg};
use super::store::PyRustStore;
use crate::producers::key_range::plan;
use crate::producers::node::{Kind, NodeView};
use crate::producers::split_source::{apply_range, stitch_source, SourceRangeOutput};

/// A source's view from its JSON; `ValueError` if it is not a source's.
fn source_view(text: &str) -> PyResult<NodeView> {
    let view = NodeView::from_json(text).py_err()?;
    if view.kind != Kind::Source {
        return Err(PyValueError::new_err(format!(
            "{:?} is not a source",
            view.name
        )));
    }
    Ok(view)
}

/// The key ranges (JSON) a source's changes are split into: at most
/// `max_ranges`, of about equal rows, cut at the boundaries of its stored
/// content parts (each part in exactly one range). With no content stored,
/// one unbounded range (a caller splitting a first build plans from
/// sampled keys instead). No I/O.
#[pyfunction]
pub fn pipeline_source_ranges(source: &str, max_ranges: usize) -> PyResult<Vec<String>> {
    let view = source_view(source)?;
    plan(&view.state.content, max_ranges)
        .iter()
        .map(|r| to_json(r).py_err())
        .collect()
}

/// A source's range task: applies the `upserts` (the source's public
/// columns, in its order: a list of batches, or any Arrow stream, pushed
/// into the range's external sort as it is read, so memory stays within
/// `sort_budget`) and `deletes` (its key columns, in memory) whose keys
/// lie in `range`, rewriting only the content parts of the range; returns
/// the result's JSON (`SourceRangeOutput`). A range that cuts a stored
/// part is `ValueError` before anything is written, a key outside the
/// range `ValueError` when it is read. Nothing is committed; on an error,
/// what it wrote is removed.
#[pyfunction]
#[pyo3(signature = (store, root, source, range, upserts, deletes, *, compression, target_rows, sort_budget, job=None))]
#[allow(clippy::too_many_arguments)]
pub fn pipeline_apply_source_range(
    py: Python<'_>,
    store: &PyRustStore,
    root: &str,
    source: &str,
    range: &str,
    upserts: RowsArg,
    deletes: Vec<PyRecordBatch>,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
    job: Option<String>,
) -> PyResult<String> {
    let env = job_env(store, root, compression, target_rows, sort_budget, job)?;
    let view = source_view(source)?;
    let range = key_range(range)?;
    let (upserts, deletes) = (upserts.into_iter()?, record_batches(deletes));
    super::detach(py, || {
        let out = apply_range(&env, &view, &range, upserts, deletes)?;
        to_json(&out)
    })
}

/// The source's new state (JSON) from its range tasks' results
/// (`pipeline_apply_source_range`'s JSON): the stored parts outside every
/// processed range kept, each range's new parts in its place, the update
/// the ranges' updates in key order. No I/O.
#[pyfunction]
pub fn pipeline_stitch_source(source: &str, outputs: Vec<String>) -> PyResult<String> {
    let view = source_view(source)?;
    let done = outputs
        .iter()
        .map(|o| {
            serde_json::from_str::<SourceRangeOutput>(o)
                .map_err(|_| PyValueError::new_err(format!("not a source range result: {o:?}")))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let state = stitch_source(&view, &done).py_err()?;
    to_json(&state).py_err()
}
