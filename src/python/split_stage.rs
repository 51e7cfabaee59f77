//! A stage update split by key range (`crate::producers::split_stage`), for
//! Spark: ranges to run, which target range a row goes to, the reduce
//! task, and the driver's stitching. Key ranges, task results and node
//! states cross as JSON text; rows as Arrow.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3_arrow::{PyRecordBatch, PyRecordBatchReader};
use serde::Deserialize;

use super::env::env;
use super::errors::IntoPy;
use super::store::PyRustStore;
use crate::error::{Error, Result};
use crate::producers::key_range::{
    assign, key_bounds_hex, plan, plan_from_samples, prefix_spans, range_lows_hex, KeyRange,
    KeyValues, RangeFilter,
};
use crate::producers::keys::key_values;
use crate::producers::node::{Kind, NodeView};
use crate::producers::parts::RangePart;
use crate::producers::run::StageRun;
use crate::producers::split_stage::{reduce_range, stitch_stage, RangeParts, ReduceOutput};

/// A key range from its JSON (`{"lo": [...], "hi": [...]}`).
pub(crate) fn key_range(text: &str) -> PyResult<KeyRange> {
    serde_json::from_str(text)
        .map_err(|e| PyValueError::new_err(format!("not a key range: {e}: {text:?}")))
}

/// A job id to name objects by: letters and digits only (it starts object
/// names), at most 32.
pub(crate) fn job_prefix(job: Option<String>) -> PyResult<Option<String>> {
    match job {
        Some(j)
            if j.is_empty() || j.len() > 32 || !j.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            Err(PyValueError::new_err(format!(
                "a job id is 1-32 ASCII letters and digits, got {j:?}"
            )))
        }
        other => Ok(other),
    }
}

/// The engine's environment for a range task of job `job` (its objects
/// named after it).
pub(crate) fn job_env(
    store: &PyRustStore,
    root: &str,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
    job: Option<String>,
) -> PyResult<crate::producers::node::Env> {
    let mut env = env(store, root, compression, target_rows, sort_budget)?;
    env.job = job_prefix(job)?;
    Ok(env)
}

/// Record batches handed in from Python, as Arrow's.
pub(crate) fn record_batches(batches: Vec<PyRecordBatch>) -> Vec<arrow_array::RecordBatch> {
    batches.into_iter().map(|b| b.into_inner()).collect()
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Task(format!("not serialisable: {e}")))
}

/// What a map task returns, as JSON (see `PyStageRun.finish_map`).
#[derive(serde::Serialize, Deserialize)]
struct MapResult {
    mappings: RangeParts,
    rows_in: u64,
    rows_out: u64,
    changed_keys: u64,
    created: Vec<String>,
}

/// A map task's hand-on: the result's JSON, the emitted rows, the removed
/// pairs and the changed keys of a derived stage (see `MapOutput`).
pub(crate) type Mapped<E> = (
    String,
    E,
    Vec<arrow_array::RecordBatch>,
    Vec<arrow_array::RecordBatch>,
);

/// Finish a map task: the result's JSON, the emitted rows (streamed from
/// the sort: the task's share of the change, within the sort budget; the
/// sort's spill files go when the stream is dropped), the removed pairs
/// and a derived stage's changed keys (see `MapOutput::derived`). On an error here, what the task wrote is removed; an error
/// while the stream is read leaves that to the caller (the objects are
/// named after the job).
pub(crate) fn finish_map_stream(run: StageRun) -> PyResult<Mapped<crate::producers::BatchIter>> {
    let store = run.store();
    let out = run.finish_map().py_err()?;
    let meta = to_json(&MapResult {
        mappings: out.mappings.clone(),
        rows_in: out.rows_in,
        rows_out: out.rows_out,
        changed_keys: out.changed_keys,
        created: out.created.clone(),
    });
    match meta {
        Ok(meta) => Ok((meta, out.emitted, out.removed, out.derived)),
        Err(e) => {
            let _ = crate::runtime::block_on(store.delete_many(&out.created));
            Err(e).py_err()
        }
    }
}

/// [`finish_map_stream`] with the emitted rows collected (in memory: the
/// task's whole share of the change). On an error, what the task wrote is
/// removed.
pub(crate) fn finish_map(run: StageRun) -> PyResult<Mapped<Vec<arrow_array::RecordBatch>>> {
    let store = run.store();
    let (meta, emitted, removed, derived) = finish_map_stream(run)?;
    match emitted.collect::<Result<Vec<_>>>() {
        Ok(emitted) => Ok((meta, emitted, removed, derived)),
        Err(e) => {
            if let Ok(m) = serde_json::from_str::<MapResult>(&meta) {
                let _ = crate::runtime::block_on(store.delete_many(&m.created));
            }
            Err(e).py_err()
        }
    }
}

/// The parts a view's rows live in: a merge's first feeder's.
fn content_parts(view: &NodeView) -> &[RangePart] {
    match view.kind {
        Kind::Merge => view.feeders.first().map(content_parts).unwrap_or_default(),
        _ => &view.state.content,
    }
}

/// Whether `view`'s update (its changed keys' rows and deleted keys; a
/// merge's: its feeders') may hold a key of `filter`'s range.
fn update_touches(filter: &RangeFilter, view: &NodeView) -> Result<bool> {
    if view.kind == Kind::Merge {
        for f in &view.feeders {
            if update_touches(filter, f)? {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    let u = &view.state.update;
    Ok(!filter.overlapping(&u.rows)?.is_empty() || !filter.overlapping(&u.deleted)?.is_empty())
}

/// Whether some source's update may hold a key of `range` (the stage's
/// source key types): else the range's map task has nothing to do.
fn touched(stage: &NodeView, sources: &[NodeView], range: &KeyRange) -> Result<bool> {
    let idx = crate::parquet::decode::column_indices(&stage.schema, &stage.source_key)?;
    let filter = RangeFilter::new(range, std::sync::Arc::new(stage.schema.project(&idx)?))?;
    for s in sources {
        if update_touches(&filter, s)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The key ranges a stage's split update runs in, as JSON: `"source"`
/// ranges for the map tasks (aligned with the stage's key-mappings parts;
/// with none stored yet, with its first source's content parts), or
/// `"target"` ranges for the reduce tasks (aligned with its content
/// parts). At most `max_ranges`, of about equal rows. With
/// `touched_only`, only the source ranges that some source's update may
/// hold keys of (the others' map tasks would do nothing). No I/O.
#[pyfunction]
#[pyo3(signature = (stage, sources, which, max_ranges, *, touched_only=false))]
pub fn pipeline_stage_ranges(
    stage: &str,
    sources: Vec<String>,
    which: &str,
    max_ranges: usize,
    touched_only: bool,
) -> PyResult<Vec<String>> {
    let stage = NodeView::from_json(stage).py_err()?;
    let views = sources
        .iter()
        .map(|s| NodeView::from_json(s))
        .collect::<Result<Vec<_>>>()
        .py_err()?;
    let mut ranges = match which {
        "source" if !stage.state.mappings.is_empty() => plan(&stage.state.mappings, max_ranges),
        "source" => match views.first() {
            Some(s) => plan(content_parts(s), max_ranges),
            None => plan(&[], 1),
        },
        "target" => plan(&stage.state.content, max_ranges),
        other => {
            return Err(PyValueError::new_err(format!(
                "which is 'source' or 'target', got {other:?}"
            )))
        }
    };
    if touched_only && which == "source" {
        let mut kept = Vec::with_capacity(ranges.len());
        for r in ranges {
            if touched(&stage, &views, &r).py_err()? {
                kept.push(r);
            }
        }
        ranges = kept;
    }
    ranges.iter().map(|r| to_json(r).py_err()).collect()
}

/// The least and greatest target key of `batch` (holding the stage's key
/// columns) as hex texts that order as the keys do; `None` for no row.
#[pyfunction]
pub fn pipeline_key_bounds(
    py: Python<'_>,
    stage: &str,
    batch: PyRecordBatch,
) -> PyResult<Option<(String, String)>> {
    let stage = NodeView::from_json(stage).py_err()?;
    let batch = batch.into_inner();
    super::detach(py, || {
        key_bounds_hex(stage.key_schema()?.as_ref(), &batch, &stage.key)
    })
}

/// The lower bounds of `ranges` (JSON, covering every key in order) after
/// the first, spelled as `pipeline_key_bounds` spells keys: a key lies in
/// range `i` where `i` of them are at or below it.
#[pyfunction]
pub fn pipeline_range_lows(stage: &str, ranges: Vec<String>) -> PyResult<Vec<String>> {
    let stage = NodeView::from_json(stage).py_err()?;
    let ranges = ranges
        .iter()
        .map(|r| key_range(r))
        .collect::<PyResult<Vec<_>>>()?;
    range_lows_hex(&ranges, stage.key_schema().py_err()?).py_err()
}

/// For each row of `batch` (holding the stage's key columns), the index of
/// the range of `ranges` (JSON, sorted, disjoint) holding its target key.
#[pyfunction]
pub fn pipeline_assign(
    py: Python<'_>,
    stage: &str,
    ranges: Vec<String>,
    batch: PyRecordBatch,
) -> PyResult<Vec<u32>> {
    let stage = NodeView::from_json(stage).py_err()?;
    let ranges = ranges
        .iter()
        .map(|r| key_range(r))
        .collect::<PyResult<Vec<_>>>()?;
    let batch = batch.into_inner();
    super::detach(py, || {
        assign(&ranges, stage.key_schema()?, &batch, &stage.key)
    })
}

/// For each row of `batch` (a derived stage's changed source keys, as a
/// map task hands them on), the first and last index of the ranges of
/// `ranges` (JSON, sorted, covering every key) that may hold the stage's
/// rows of that key: those its leading values span.
#[pyfunction]
pub fn pipeline_prefix_spans(
    py: Python<'_>,
    stage: &str,
    ranges: Vec<String>,
    batch: PyRecordBatch,
) -> PyResult<Vec<(u32, u32)>> {
    let stage = NodeView::from_json(stage).py_err()?;
    let ranges = ranges
        .iter()
        .map(|r| key_range(r))
        .collect::<PyResult<Vec<_>>>()?;
    let mode = stage.state.derived_prefix;
    let lead = stage
        .source_key
        .get(..mode)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| {
            PyValueError::new_err(format!("stage {:?} derives no key-mappings", stage.name))
        })?;
    let batch = batch.into_inner();
    super::detach(py, || {
        prefix_spans(&ranges, stage.key_schema()?.as_ref(), &batch, lead)
    })
}

/// Rows handed to a reduce task: a list of record batches (in memory), or
/// any Arrow stream (`__arrow_c_stream__`, e.g. a
/// `pyarrow.RecordBatchReader`), read batch by batch.
#[derive(FromPyObject)]
pub enum RowsArg {
    /// Batches already in memory.
    List(Vec<PyRecordBatch>),
    /// A stream, read as the reduce goes.
    Stream(PyRecordBatchReader),
}

impl RowsArg {
    pub(crate) fn into_iter(self) -> PyResult<crate::producers::BatchIter> {
        Ok(match self {
            RowsArg::List(b) => Box::new(record_batches(b).into_iter().map(Ok)),
            RowsArg::Stream(r) => Box::new(r.into_reader()?.map(|b| b.map_err(Error::from))),
        })
    }
}

/// A reduce task over the target keys in `range`: merges the `emitted`
/// rows (a list of batches or an Arrow stream, pushed into the range's
/// external sort as they are read: memory stays within `sort_budget`) and
/// `removed` pairs (in memory) of the range into the range's content
/// parts and writes its update; returns the result's JSON
/// (`ReduceOutput`). Nothing is committed; on an error, what it wrote is
/// removed. `clip`: `emitted` and `removed` may hold rows of other ranges
/// (whole batches shuffled to every range they span), which are dropped;
/// otherwise such a row is `ValueError`. `derived`: the changed keys of a
/// derived stage routed to this range (`pipeline_prefix_spans`), whose
/// rows the reduce finds in its range's parts.
#[pyfunction]
#[pyo3(signature = (store, root, stage, range, emitted, removed, *, compression, target_rows, sort_budget, job=None, clip=false, derived=Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub fn pipeline_reduce_range(
    py: Python<'_>,
    store: &PyRustStore,
    root: &str,
    stage: &str,
    range: &str,
    emitted: RowsArg,
    removed: Vec<PyRecordBatch>,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
    job: Option<String>,
    clip: bool,
    derived: Vec<PyRecordBatch>,
) -> PyResult<String> {
    let env = job_env(store, root, compression, target_rows, sort_budget, job)?;
    let stage = NodeView::from_json(stage).py_err()?;
    let range = key_range(range)?;
    let (emitted, removed) = (emitted.into_iter()?, record_batches(removed));
    let derived = record_batches(derived);
    super::detach(py, || {
        let out = reduce_range(&env, &stage, &range, emitted, removed, derived, clip)?;
        to_json(&out)
    })
}

/// The stage's new state (JSON) from its map results (`finish_map`'s
/// JSON) and reduce results (`pipeline_reduce_range`'s JSON): the stored
/// parts outside every processed range kept, each range's new parts in
/// its place. No I/O.
#[pyfunction]
#[pyo3(signature = (store, root, stage, maps, reduces, *, compression, target_rows, sort_budget))]
#[allow(clippy::too_many_arguments)]
pub fn pipeline_stitch_stage(
    store: &PyRustStore,
    root: &str,
    stage: &str,
    maps: Vec<String>,
    reduces: Vec<String>,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
) -> PyResult<String> {
    let env = env(store, root, compression, target_rows, sort_budget)?;
    let stage = NodeView::from_json(stage).py_err()?;
    let parse =
        |what: &str, text: &str| PyValueError::new_err(format!("not a {what} result: {text:?}"));
    let maps = maps
        .iter()
        .map(|m| {
            serde_json::from_str::<MapResult>(m)
                .map(|r| r.mappings)
                .map_err(|_| parse("map", m))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let reduces = reduces
        .iter()
        .map(|r| serde_json::from_str::<ReduceOutput>(r).map_err(|_| parse("reduce", r)))
        .collect::<PyResult<Vec<_>>>()?;
    let state = stitch_stage(&env, &stage, &maps, &reduces).py_err()?;
    to_json(&state).py_err()
}

/// Sampled target keys of `batch` (rows holding the stage's key columns):
/// the key of every `every`-th row, from the first, as JSON. For planning
/// the target ranges of a stage built for the first time.
#[pyfunction]
pub fn pipeline_key_samples(stage: &str, batch: PyRecordBatch, every: usize) -> PyResult<String> {
    let stage = NodeView::from_json(stage).py_err()?;
    let batch = batch.into_inner();
    let samples: Vec<KeyValues> = (0..batch.num_rows())
        .step_by(every.max(1))
        .map(|i| key_values(&batch, &stage.key, i))
        .collect();
    to_json(&samples).py_err()
}

/// At most `max_ranges` target ranges (JSON) from sampled keys (each
/// sample text a JSON list of keys, from `pipeline_key_samples`). No I/O.
#[pyfunction]
pub fn pipeline_ranges_from_samples(
    stage: &str,
    samples: Vec<String>,
    max_ranges: usize,
) -> PyResult<Vec<String>> {
    let stage = NodeView::from_json(stage).py_err()?;
    let mut keys: Vec<KeyValues> = Vec::new();
    for s in &samples {
        let some: Vec<KeyValues> = serde_json::from_str(s)
            .map_err(|e| PyValueError::new_err(format!("not key samples: {e}")))?;
        keys.extend(some);
    }
    let key_schema = stage.key_schema().py_err()?;
    let ranges = plan_from_samples(&key_schema, keys, max_ranges).py_err()?;
    ranges.iter().map(|r| to_json(r).py_err()).collect()
}
