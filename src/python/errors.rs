//! The one place where core errors become Python exceptions.
//!
//! Classes are remote_store's own where RFC-0008 names them, so that
//! `except remote_store.NotFound` works on every path; the rest come from
//! `pds.errors` and subclass `remote_store.RemoteStoreError`.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::{chain, Error};
use crate::store::failure::{is_denied, redact_urls};

fn raise(
    py: Python<'_>,
    module: &str,
    class: &str,
    message: String,
    kwargs: &[(&str, &str)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import(module)?.getattr(class)?;
        let kw = PyDict::new(py);
        for (k, v) in kwargs {
            kw.set_item(k, redact_urls(v))?;
        }
        let exc = cls.call((message.clone(),), Some(&kw))?;
        Ok(PyErr::from_value(exc))
    };
    // If the class cannot be built, say so rather than hide the original error.
    build().unwrap_or_else(|e| {
        PyRuntimeError::new_err(format!("{message} (and mapping the error failed: {e})"))
    })
}

/// Convert a core error into the documented Python exception.
///
/// Every URL in the message (and in the attributes) loses its query string
/// and user info: object_store shows the URL of a failed request unless the
/// request was marked sensitive, and a SAS, a signed URL's signature or an
/// endpoint's password would be shown with it (see [`redact_urls`]).
pub fn to_py(err: Error) -> PyErr {
    Python::attach(|py| {
        // A Python Store's own exception is raised as it was.
        if let Some(e) = super::py_store::raised(py, &err) {
            return e;
        }
        let msg = redact_urls(&chain(&err));
        match &err {
            Error::NotFound { path }
            | Error::VersionNotFound { path, .. }
            | Error::OtherKind { path, .. } => {
                raise(py, "remote_store", "NotFound", msg, &[("path", path)])
            }
            Error::AlreadyExists { path }
            | Error::WriteInProgress { key: path, .. }
            | Error::ClaimLost { key: path }
            | Error::KeyOccupied { key: path, .. } => {
                raise(py, "remote_store", "AlreadyExists", msg, &[("path", path)])
            }
            Error::InvalidPath { path, .. } => {
                raise(py, "remote_store", "InvalidPath", msg, &[("path", path)])
            }
            Error::Precondition { path } => raise(
                py,
                "pds.errors",
                "PreconditionFailed",
                msg,
                &[("path", path)],
            ),
            Error::InvalidArgument(_) => PyValueError::new_err(msg),
            Error::UnsupportedType { .. } => PyTypeError::new_err(msg),
            Error::DatasetIncomplete { key, .. } => {
                raise(py, "pds.errors", "DatasetIncomplete", msg, &[("path", key)])
            }
            Error::ManifestCorrupted { path, reason } => raise(
                py,
                "pds.errors",
                "ManifestCorrupted",
                msg.clone(),
                &[("path", path), ("reason", reason)],
            ),
            Error::PartCorrupted { path, .. } => {
                raise(py, "pds.errors", "PartCorrupted", msg, &[("path", path)])
            }
            Error::NoCredentials { .. } => raise(py, "remote_store", "PermissionDenied", msg, &[]),
            Error::CommitConflict { key, .. } => {
                raise(py, "pds.errors", "CommitConflict", msg, &[("path", key)])
            }
            Error::CommitUnknown { key, .. } => {
                raise(py, "pds.errors", "CommitUnknown", msg, &[("path", key)])
            }
            Error::UpgradeRequired { key, .. } => {
                raise(py, "pds.errors", "UpgradeRequired", msg, &[("path", key)])
            }
            Error::SchemaMismatch { key, .. } => {
                raise(py, "pds.errors", "SchemaMismatch", msg, &[("path", key)])
            }
            Error::RowsRefused { key, .. } => {
                raise(py, "pds.errors", "DataError", msg, &[("path", key)])
            }
            Error::BucketNotFound { name, .. } => {
                raise(py, "remote_store", "NotFound", msg, &[("path", name)])
            }
            Error::NotSupported(_) => raise(py, "remote_store", "CapabilityNotSupported", msg, &[]),
            Error::Store(os) => match os {
                object_store::Error::PermissionDenied { path, .. }
                | object_store::Error::Unauthenticated { path, .. } => raise(
                    py,
                    "remote_store",
                    "PermissionDenied",
                    msg,
                    &[("path", path)],
                ),
                // A request answered 401 or 403 that object_store reports
                // as a generic error (LISTs, Azure's batch delete).
                other if is_denied(other) => {
                    raise(py, "remote_store", "PermissionDenied", msg, &[])
                }
                _ => raise(py, "remote_store", "BackendUnavailable", msg, &[]),
            },
            Error::Io(_) => raise(py, "remote_store", "BackendUnavailable", msg, &[]),
            Error::Parquet(_) | Error::Arrow(_) => raise(py, "pds.errors", "DataError", msg, &[]),
            Error::Task(_) => raise(py, "remote_store", "RemoteStoreError", msg, &[]),
        }
    })
}

/// `?`-friendly conversion for binding code.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for crate::error::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
