//! Pipeline functions of `pds._core`. Manifests cross as Python objects
//! (dicts, built and read by pythonize); node descriptions and states as
//! JSON text, the form they travel in to worker processes and Spark tasks;
//! data as Arrow (C Data Interface, zero copy). The GIL is released around
//! all I/O, sorting and encoding.

use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_arrow::{PyRecordBatch, PyRecordBatchReader, PySchema, PyTable};

use super::env::env;
use super::errors::IntoPy;
use super::store::PyRustStore;
use crate::error::Error;
use crate::producers::compact;
use crate::producers::manifest::{NodeState, PipelineManifest};
use crate::producers::node::{Env, NodeView};
use crate::producers::run::StageRun;
use crate::producers::source;
use crate::table::commit::{self, CommitOptions, Outcome};
use crate::table::versions;
use crate::table::versions::Versioned;

/// Default rows per key-range part.
const TARGET_ROWS: usize = 256 * 1024;

fn reader_env(store: &PyRustStore, root: &str) -> PyResult<Env> {
    env(store, root, "zstd", TARGET_ROWS, 64 << 20)
}

fn state_json(state: &NodeState) -> PyResult<String> {
    serde_json::to_string(state)
        .map_err(|e| PyRuntimeError::new_err(format!("state is not serialisable: {e}")))
}

/// A manifest as Python objects (a `dict`). One of an earlier format says
/// why the pipeline is read-only in `upgrade_required` (the Python facade
/// refuses writes before any I/O).
fn manifest_py<'py>(py: Python<'py>, m: &PipelineManifest) -> PyResult<Bound<'py, PyAny>> {
    let mut value = serde_json::to_value(m).map_err(|e| {
        PyRuntimeError::new_err(format!("pipeline manifest is not serialisable: {e}"))
    })?;
    if let Some(format) = m.earlier_format() {
        value["upgrade_required"] = format.into();
    }
    pythonize::pythonize(py, &value).map_err(PyErr::from)
}

/// A manifest to commit, from the Python objects the facade built: its
/// format and time are set here.
fn manifest_arg(manifest: &Bound<'_, PyAny>) -> PyResult<PipelineManifest> {
    let mut m: PipelineManifest = pythonize::depythonize(manifest)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("manifest: {e}")))?;
    m.format = crate::producers::manifest::FORMAT.into();
    m.timestamp_ms = chrono::Utc::now().timestamp_millis();
    Ok(m)
}

fn table(t: Option<PyTable>) -> Vec<arrow_array::RecordBatch> {
    t.map(|t| t.into_inner().0).unwrap_or_default()
}

/// `ValueError` if a key is both upserted and deleted. No I/O.
#[pyfunction]
#[pyo3(signature = (key, upserts, deletes))]
pub fn pipeline_check_changes(
    py: Python<'_>,
    key: Vec<String>,
    upserts: Option<PyTable>,
    deletes: Option<PyTable>,
) -> PyResult<()> {
    let (u, d) = (table(upserts), table(deletes));
    super::detach(py, || source::check_changes(&key, &u, &d))
}

/// Apply changes to a source; returns `(state JSON, objects written)`.
#[pyfunction]
#[pyo3(signature = (store, root, node, upserts, deletes, *, compression, target_rows, sort_budget))]
#[allow(clippy::too_many_arguments)]
pub fn pipeline_apply_source(
    py: Python<'_>,
    store: &PyRustStore,
    root: &str,
    node: &str,
    upserts: Option<PyRecordBatchReader>,
    deletes: Option<PyTable>,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
) -> PyResult<(String, Vec<String>)> {
    let env = env(store, root, compression, target_rows, sort_budget)?;
    let view = NodeView::from_json(node).py_err()?;
    let u: crate::producers::BatchIter = match upserts {
        Some(r) => Box::new(r.into_reader()?.map(|b| b.map_err(Error::from))),
        None => Box::new(std::iter::empty()),
    };
    let d = table(deletes);
    let (state, created) = super::detach(py, || source::apply(&env, &view, u, d))?;
    Ok((state_json(&state)?, created))
}

/// A merge's update from its feeders'; returns `(state JSON, objects written)`.
#[pyfunction]
#[pyo3(signature = (store, root, node, *, compression, target_rows, sort_budget))]
pub fn pipeline_merge_update(
    py: Python<'_>,
    store: &PyRustStore,
    root: &str,
    node: &str,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
) -> PyResult<(String, Vec<String>)> {
    let env = env(store, root, compression, target_rows, sort_budget)?;
    let view = NodeView::from_json(node).py_err()?;
    let (state, created) = super::detach(py, || source::merge_update(&env, &view))?;
    Ok((state_json(&state)?, created))
}

/// A source's or stage's parts compacted (patches merged in, small parts
/// merged; see `producers::compact`); returns `(state JSON, parts
/// rewritten, parts written, objects written)`.
#[pyfunction]
#[pyo3(signature = (store, root, node, *, compression, target_rows, sort_budget))]
pub fn pipeline_compact_node(
    py: Python<'_>,
    store: &PyRustStore,
    root: &str,
    node: &str,
    compression: &str,
    target_rows: usize,
    sort_budget: usize,
) -> PyResult<(String, usize, usize, Vec<String>)> {
    let env = env(store, root, compression, target_rows, sort_budget)?;
    let view = NodeView::from_json(node).py_err()?;
    let (state, done, created) = super::detach(py, || compact::compact(&env, &view))?;
    let rewritten = done.iter().map(|d| d.rewritten).sum();
    let written = done.iter().map(|d| d.written).sum();
    Ok((state_json(&state)?, rewritten, written, created))
}

/// A node's content (key and value columns, sorted by key), as a stream
/// read a few parts at a time, and its schema.
fn scan_node(
    py: Python<'_>,
    store: &PyRustStore,
    root: &str,
    node: &str,
) -> PyResult<(arrow_schema::SchemaRef, crate::producers::BatchIter)> {
    let env = reader_env(store, root)?;
    let view = NodeView::from_json(node).py_err()?;
    super::detach(py, || {
        Ok::<_, Error>((view.public_schema()?, view.full_scan(&env)?))
    })
}

/// A node's whole content (key and value columns, sorted by key).
#[pyfunction]
pub fn pipeline_read<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    root: &str,
    node: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let (schema, batches) = scan_node(py, store, root, node)?;
    let batches = super::detach(py, || batches.collect::<crate::error::Result<Vec<_>>>())?;
    PyTable::try_new(batches, schema)?.into_pyarrow(py)
}

/// A node's whole content as a `pyarrow.RecordBatchReader`: the rows of
/// [`pipeline_read`], streamed a few parts at a time.
#[pyfunction]
pub fn pipeline_read_batches<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    root: &str,
    node: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let (schema, batches) = scan_node(py, store, root, node)?;
    super::stream::batches_reader(py, schema, batches)
}

/// What a node's version changed: `(rows of every changed key, deleted keys)`.
#[pyfunction]
pub fn pipeline_update<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    root: &str,
    node: &str,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let env = reader_env(store, root)?;
    let view = NodeView::from_json(node).py_err()?;
    let (rows, deleted, schema, key_schema) = super::detach(py, || {
        let rows = view
            .update_rows(&env)
            .collect::<crate::error::Result<Vec<_>>>()?;
        let deleted = view.update_deleted(&env)?;
        Ok::<_, Error>((rows, deleted, view.public_schema()?, view.key_schema()?))
    })?;
    Ok((
        PyTable::try_new(rows, schema)?.into_pyarrow(py)?,
        PyTable::try_new(deleted, key_schema)?.into_pyarrow(py)?,
    ))
}

/// The latest manifest (pointer + manifest: 2 GETs), or `None`; a
/// dataset at `root` is `NotFound` saying so (1 HEAD more).
#[pyfunction]
pub fn pipeline_latest<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    root: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let handle = store.inner.clone();
    let root = root.to_string();
    let latest = super::run(py, async move {
        match versions::latest_of::<PipelineManifest>(&handle, &root, false).await? {
            Some(l) => Ok(Some(l)),
            // A dataset there is an error that says so; nothing at all is `None`.
            None => match crate::table::not_found(&handle, &root, "pipeline").await {
                e @ crate::error::Error::OtherKind { .. } => Err(e),
                _ => Ok(None),
            },
        }
    })?;
    latest.map(|l| manifest_py(py, &l.manifest)).transpose()
}

/// The manifest of `version` (1 GET); `NotFound` if vacuumed or never made.
#[pyfunction]
pub fn pipeline_version<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    root: &str,
    version: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = store.inner.clone();
    let root = root.to_string();
    let m = super::run(py, async move {
        versions::read_version_of::<PipelineManifest>(&handle, &root, version).await
    })?;
    manifest_py(py, &m)
}

/// Create the pipeline at `root` with `manifest` as its version 0, on a
/// key nothing else occupies (`KeyOccupied` otherwise, a
/// `remote_store.AlreadyExists`); with `exist_ok`, a pipeline already there
/// is returned. Returns the manifest.
#[pyfunction]
#[pyo3(signature = (store, root, manifest, *, exist_ok))]
pub fn pipeline_create<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    root: &str,
    manifest: &Bound<'py, PyAny>,
    exist_ok: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let first = manifest_arg(manifest)?;
    let handle = store.inner.clone();
    let m = super::run(py, async move {
        crate::producers::create::create(&handle, root, first, exist_ok).await
    })?;
    manifest_py(py, &m)
}

/// Commit `manifest` (its version is set here) as the version after
/// `expected` (`None`: the first). If another writer got there first:
/// `CommitConflict` (an update built on `expected` cannot be rebased), or
/// `AlreadyExists` for a second first version. Returns the committed manifest.
#[pyfunction]
#[pyo3(signature = (store, root, expected, manifest))]
pub fn pipeline_commit<'py>(
    py: Python<'py>,
    store: &PyRustStore,
    root: &str,
    expected: Option<u64>,
    manifest: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let next = manifest_arg(manifest)?;
    let handle = store.inner.clone();
    let root = root.to_string();
    let opts = CommitOptions::default();
    let out = super::run(py, async move {
        let key = root.clone();
        commit::commit_versioned::<PipelineManifest, _>(&handle, &root, &opts, None, move |base| {
            match (base.map(|b| b.version()), expected) {
                (None, None) => Ok(Some(next.clone())),
                (Some(_), None) => Err(Error::AlreadyExists { path: key.clone() }),
                (Some(v), Some(e)) if v == e => Ok(Some(next.clone())),
                _ => Err(Error::CommitConflict {
                    key: key.clone(),
                    attempts: 1,
                }),
            }
        })
        .await
    })?;
    match out {
        Outcome::Committed { manifest, .. } => manifest_py(py, &manifest),
        Outcome::Unchanged { .. } => Err(PyRuntimeError::new_err("nothing was committed")),
    }
}

/// Remove what no retained version references (see `table_vacuum`).
#[pyfunction]
#[pyo3(signature = (
    store, root, *, retain_seconds, min_age_seconds, keep_versions, dry_run, progress = None
))]
#[allow(clippy::too_many_arguments)]
pub fn pipeline_vacuum(
    py: Python<'_>,
    store: &PyRustStore,
    root: &str,
    retain_seconds: f64,
    min_age_seconds: f64,
    keep_versions: bool,
    dry_run: bool,
    progress: Option<&Bound<'_, super::progress::PyProgress>>,
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
    let root = root.to_string();
    let v = super::run(py, async move {
        crate::table::vacuum::vacuum_of::<PipelineManifest>(
            &handle,
            &root,
            &opts,
            chrono::Utc::now(),
        )
        .await
    })?;
    Ok(v.removed)
}

/// One stage's update in progress (see `crate::producers::run`).
#[pyclass(module = "pds._core", name = "StageRun")]
pub struct PyStageRun {
    inner: Mutex<Option<StageRun>>,
    schema: arrow_schema::SchemaRef,
}

impl PyStageRun {
    /// The run, taken out to be finished (only once).
    fn take(&self) -> PyResult<StageRun> {
        self.inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the stage run failed earlier"))?
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("the stage run is finished"))
    }

    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut StageRun) -> crate::error::Result<T> + Send,
    ) -> PyResult<T> {
        super::detach_py(py, || {
            let mut guard = self
                .inner
                .lock()
                .map_err(|_| PyRuntimeError::new_err("the stage run failed earlier"))?;
            let run = guard
                .as_mut()
                .ok_or_else(|| PyRuntimeError::new_err("the stage run is finished"))?;
            f(run).py_err()
        })
    }
}

type PyChunk<'py> = (Bound<'py, PyAny>, Vec<(Bound<'py, PyAny>, Vec<u32>)>, bool);

/// A map task's result: `(JSON, emitted rows, removed pairs, derived keys)`.
type PyMapped<'py> = (
    String,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
);

#[pymethods]
impl PyStageRun {
    /// With `range` (a key range's JSON), a map task of a split update
    /// (see `crate::producers::split_stage`): only the source keys in the range,
    /// finished with `finish_map`. With `job`, every object written is
    /// named starting with it.
    #[new]
    #[pyo3(signature = (store, root, stage, sources, *, rebuild, compression, target_rows, sort_budget, range=None, job=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store: &PyRustStore,
        root: &str,
        stage: &str,
        sources: Vec<String>,
        rebuild: bool,
        compression: &str,
        target_rows: usize,
        sort_budget: usize,
        range: Option<String>,
        job: Option<String>,
    ) -> PyResult<Self> {
        let mut env = env(store, root, compression, target_rows, sort_budget)?;
        env.job = super::split_stage::job_prefix(job)?;
        let stage = NodeView::from_json(stage).py_err()?;
        let sources = sources
            .iter()
            .map(|s| NodeView::from_json(s))
            .collect::<crate::error::Result<Vec<_>>>()
            .py_err()?;
        let range = range
            .map(|r| super::split_stage::key_range(&r))
            .transpose()?;
        let run = super::detach(py, || match &range {
            Some(r) => StageRun::for_range(env, stage, sources, rebuild, r),
            None => StageRun::new(env, stage, sources, rebuild),
        })?;
        Ok(Self {
            schema: run.schema(),
            inner: Mutex::new(Some(run)),
        })
    }

    /// The physical schema `push` takes.
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PySchema::new(self.schema.clone()).into_pyarrow(py)
    }

    /// `(keys, [(rows, offsets) per source], continued)` or `None` at the
    /// end. A join's chunk holds at most `side_rows` rows of each source
    /// and may end with an open key (`open_sources`, `pull_open`).
    #[pyo3(signature = (whole, max_rows, side_rows=None))]
    fn next_chunk<'py>(
        &self,
        py: Python<'py>,
        whole: bool,
        max_rows: usize,
        side_rows: Option<usize>,
    ) -> PyResult<Option<PyChunk<'py>>> {
        let side_rows = side_rows.unwrap_or(usize::MAX);
        let Some(chunk) = self.with(py, |r| r.next_chunk_limited(whole, max_rows, side_rows))?
        else {
            return Ok(None);
        };
        let keys = PyRecordBatch::new(chunk.keys).into_pyarrow(py)?;
        let mut sources = Vec::with_capacity(chunk.sources.len());
        for (rows, offsets) in chunk.sources {
            sources.push((PyRecordBatch::new(rows).into_pyarrow(py)?, offsets));
        }
        Ok(Some((keys, sources, chunk.continued)))
    }

    /// A join: the sources that may have more rows of the last chunk's
    /// last key.
    fn open_sources(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        self.with(py, |r| Ok(r.open_sources()))
    }

    /// A join: up to `max_rows` more rows of the open key from source
    /// `source` (a `pyarrow.RecordBatch`), or `None` once it has no more.
    fn pull_open<'py>(
        &self,
        py: Python<'py>,
        source: usize,
        max_rows: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.with(py, |r| r.pull_open(source, max_rows))? {
            Some(b) => Ok(Some(PyRecordBatch::new(b).into_pyarrow(py)?)),
            None => Ok(None),
        }
    }

    /// Emitted rows, in the stage's physical schema.
    fn push(&self, py: Python<'_>, batch: PyRecordBatch) -> PyResult<()> {
        let batch = batch.into_inner();
        self.with(py, move |r| r.push(batch))
    }

    /// `(rows handed out, rows taken back)`.
    fn counts(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        self.with(py, |r| Ok((r.rows_in, r.rows_out)))
    }

    /// Write the stage's new state; returns `(state JSON, objects written)`.
    fn finish(&self, py: Python<'_>) -> PyResult<(String, Vec<String>)> {
        let (state, created) = super::detach_py(py, || self.take()?.finish().py_err())?;
        Ok((state_json(&state)?, created))
    }

    /// Finish a map task (a run made with `range`): `(result JSON, emitted
    /// rows, removed key-mappings pairs)`; the JSON holds `mappings` (the
    /// range's new key-mappings parts), `rows_in`, `rows_out`,
    /// `changed_keys` and `created`. The emitted rows are a list of batches
    /// (in memory), or with `stream` a `pyarrow.RecordBatchReader` over the
    /// sort (within the sort budget). Nothing is committed; on an error,
    /// what it wrote is removed (for a stream, an error while it is read
    /// leaves that to the caller).
    #[pyo3(signature = (*, stream=false))]
    fn finish_map<'py>(&self, py: Python<'py>, stream: bool) -> PyResult<PyMapped<'py>> {
        let to_py = |batches: Vec<arrow_array::RecordBatch>| -> PyResult<Vec<Bound<'py, PyAny>>> {
            batches
                .into_iter()
                .map(|b| PyRecordBatch::new(b).into_pyarrow(py))
                .collect()
        };
        if stream {
            let schema = self.schema.clone();
            let (meta, emitted, removed, derived) =
                super::detach_py(py, || super::split_stage::finish_map_stream(self.take()?))?;
            let reader = super::stream::batches_reader(py, schema, emitted)?;
            return Ok((
                meta,
                reader,
                to_py(removed)?.into_pyobject(py)?.into_any(),
                to_py(derived)?.into_pyobject(py)?.into_any(),
            ));
        }
        let (meta, emitted, removed, derived) =
            super::detach_py(py, || super::split_stage::finish_map(self.take()?))?;
        Ok((
            meta,
            to_py(emitted)?.into_pyobject(py)?.into_any(),
            to_py(removed)?.into_pyobject(py)?.into_any(),
            to_py(derived)?.into_pyobject(py)?.into_any(),
        ))
    }

    /// Drop the run (its spill files go with it).
    fn close(&self) -> PyResult<()> {
        if let Ok(mut g) = self.inner.lock() {
            g.take();
        }
        Ok(())
    }
}
