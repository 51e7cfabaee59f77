//! `pds._core.Progress`: a long call's counters (`crate::progress`), which
//! Python passes to the call and polls from its own thread while the call
//! runs without the GIL.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::progress::{Phase, Progress};

#[pyclass(module = "pds._core", name = "Progress", frozen)]
pub struct PyProgress {
    pub(crate) inner: Arc<Progress>,
}

/// The counters of `p`, if given, for a core operation's options.
pub(crate) fn inner(p: Option<&Bound<'_, PyProgress>>) -> Option<Arc<Progress>> {
    p.map(|p| p.get().inner.clone())
}

#[pymethods]
impl PyProgress {
    #[new]
    fn new() -> Self {
        Self {
            inner: Arc::new(Progress::default()),
        }
    }

    /// `(phase, done, total or None, parts, rows, bytes)`, now. Reads
    /// atomics only: cheap, and never waits on the call it watches.
    fn now(&self) -> (&'static str, u64, Option<u64>, u64, u64, u64) {
        let r = self.inner.now();
        (r.phase.name(), r.done, r.total, r.parts, r.rows, r.bytes)
    }

    /// Enter `phase` (a name `now` gives) with `total` units to do (`None`:
    /// not known), the counts at 0. `ValueError` for an unknown phase.
    #[pyo3(signature = (phase, total = None))]
    fn start(&self, phase: &str, total: Option<u64>) -> PyResult<()> {
        let Some(phase) = Phase::from_name(phase) else {
            return Err(PyValueError::new_err(format!(
                "unknown progress phase {phase:?}"
            )));
        };
        self.inner.start(phase, total);
        Ok(())
    }

    /// Add `done` units, and the parts, rows and bytes they took.
    #[pyo3(signature = (done = 1, *, parts = 0, rows = 0, bytes = 0))]
    fn add(&self, done: u64, parts: u64, rows: u64, bytes: u64) {
        self.inner.add(done, parts, rows, bytes);
    }
}
