//! Streaming reads for Python: batches cross one at a time (zero copy, over
//! the C Data Interface), and an error mid-stream is raised as its documented
//! class, so `except pds.PartCorrupted` works on a streamed read too.

use std::sync::Mutex;

use arrow_array::RecordBatchReader;
use arrow_schema::SchemaRef;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_arrow::{PyRecordBatch, PySchema};

use super::errors::to_py;
use crate::dataset::scan::DatasetStream;
use crate::producers::BatchIter;

/// An iterator of `pyarrow.RecordBatch`; waits for each with the GIL released.
#[pyclass(module = "pds._core", name = "BatchStream")]
pub struct PyBatchStream {
    inner: Mutex<Option<BatchIter>>,
}

#[pymethods]
impl PyBatchStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let next = super::detach_py(py, || {
            let mut guard = self
                .inner
                .lock()
                .map_err(|_| PyRuntimeError::new_err("the stream failed earlier"))?;
            let Some(stream) = guard.as_mut() else {
                return Ok(None);
            };
            let item = stream.next();
            if !matches!(item, Some(Ok(_))) {
                *guard = None; // Ended or failed: release the scan.
            }
            Ok::<_, PyErr>(item)
        })?;
        match next {
            None => Ok(None),
            Some(Ok(batch)) => PyRecordBatch::new(batch).into_pyarrow(py).map(Some),
            Some(Err(e)) => Err(to_py(e)),
        }
    }
}

impl Drop for PyBatchStream {
    /// A stream dropped before its end (a reader closed or let go early)
    /// stops its work, which may wait for threads to finish: done with the
    /// GIL released, so that other Python threads run meanwhile and a
    /// thread that needs the GIL to finish (a store adapted from Python)
    /// can take it. At interpreter shutdown it is dropped where it is.
    fn drop(&mut self) {
        let stream = match self.inner.get_mut() {
            Ok(slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(stream) = stream {
            let _ = Python::try_attach(|py| py.detach(move || drop(stream)));
        }
    }
}

/// `pyarrow.RecordBatchReader.from_batches(schema, stream)`.
pub fn into_reader(py: Python<'_>, mut stream: DatasetStream) -> PyResult<Bound<'_, PyAny>> {
    let schema = stream.schema();
    batches_reader(
        py,
        schema,
        Box::new(std::iter::from_fn(move || stream.next_result())),
    )
}

/// `pyarrow.RecordBatchReader.from_batches(schema, batches)`: each batch
/// waited for with the GIL released; the iterator (and what it holds, such
/// as a sort's spill files) dropped once it ends or fails.
pub fn batches_reader(
    py: Python<'_>,
    schema: SchemaRef,
    batches: BatchIter,
) -> PyResult<Bound<'_, PyAny>> {
    let schema = PySchema::new(schema).into_pyarrow(py)?;
    let batches = Bound::new(
        py,
        PyBatchStream {
            inner: Mutex::new(Some(batches)),
        },
    )?;
    py.import("pyarrow")?
        .getattr("RecordBatchReader")?
        .call_method1("from_batches", (schema, batches))
}
