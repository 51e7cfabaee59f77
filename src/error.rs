//! One error type for the whole core.
//!
//! Every fallible core function returns [`Result`]. The Python layer maps each
//! variant once (see `python/errors.rs`) onto the classes RFC-0008 names, so
//! that `except remote_store.NotFound` works the same on every path.

use std::fmt;

/// The core's error. The `Display` text carries the source chain.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object does not exist.
    #[error("not found: {path}")]
    NotFound { path: String },

    /// A create-only write found the object already there.
    #[error("already exists: {path}")]
    AlreadyExists { path: String },

    /// A compare-and-swap write lost: the object changed since it was read.
    #[error("precondition failed (object changed concurrently): {path}")]
    Precondition { path: String },

    /// Another writer holds the dataset key (its `_WRITING` claim exists).
    #[error(
        "a write to {key:?} is in progress{}, or a writer was killed before it finished; \
         nothing was written. Pass overwrite=True to replace it, or delete_dataset({key:?}) \
         once no writer runs",
        since.as_deref().map(|s| format!(" (since {s})")).unwrap_or_default()
    )]
    WriteInProgress { key: String, since: Option<String> },

    /// An `overwrite=True` write took the key from this writer mid-write.
    #[error(
        "another writer took over {key:?} (an overwrite) while this write ran; \
         this write was not committed"
    )]
    ClaimLost { key: String },

    /// A commit lost the race for its version every time it tried.
    #[error(
        "commit to {key:?} lost to concurrent commits {attempts} times; nothing was committed"
    )]
    CommitConflict { key: String, attempts: u32 },

    /// A commit whose outcome could not be learned: its manifest PUT may or
    /// may not have landed, and reading it back failed. The table (or
    /// pipeline) is readable either way; the writer removed nothing.
    #[error(
        "the commit to {key:?} may or may not have landed: {reason}. The table is readable; \
         check its history (or changes) before retrying, so that nothing is committed twice"
    )]
    CommitUnknown { key: String, reason: String },

    /// Data whose schema is not the table's (and cannot be merged into it).
    #[error("schema mismatch on table {key:?}: {reason}")]
    SchemaMismatch { key: String, reason: String },

    /// A key that is empty, escapes the root, or holds forbidden characters.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },

    /// A caller-supplied argument is out of range or malformed.
    #[error("{0}")]
    InvalidArgument(String),

    /// The dataset has no `_SUCCESS`, or a part listed in the manifest is missing.
    #[error("dataset {key:?} is incomplete: {reason}")]
    DatasetIncomplete { key: String, reason: String },

    /// `manifest.json` exists but is not a valid manifest.
    #[error("manifest {path:?} is corrupted: {reason}")]
    ManifestCorrupted { path: String, reason: String },

    /// A part exists but is not a readable Parquet file, or fails its checksum.
    #[error("part {path:?} is corrupted: {reason}")]
    PartCorrupted { path: String, reason: String },

    /// The input's Arrow type cannot be stored (refused before any I/O).
    #[error("column {column:?} cannot be written: {reason}")]
    UnsupportedType { column: String, reason: String },

    /// S3 found no credentials anywhere and the instance metadata endpoint,
    /// its last resort, failed.
    #[error(
        "no S3 credentials were found. pds looked for the access_key_id and \
         secret_access_key options, the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY \
         environment variables, a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE) and \
         container credentials (AWS_CONTAINER_CREDENTIALS_*), then asked the EC2 \
         instance metadata endpoint, which failed ({detail}). Pass access_key_id= and \
         secret_access_key=, set the environment variables, or pass skip_signature=true \
         for a public bucket (~/.aws profiles are not read)"
    )]
    NoCredentials { detail: String },

    /// The store does not offer the operation (e.g. a URL scheme pds lacks).
    #[error("not supported: {0}")]
    NotSupported(String),

    /// Any other store failure (network, permissions, throttling after retries).
    #[error("object store error: {0}")]
    Store(#[source] object_store::Error),

    /// Parquet encoding or decoding failed.
    #[error("parquet error: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),

    /// Arrow failed (schema mismatch in the input stream, IPC, casts).
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),

    /// A local I/O failure (file:// locking, temp files).
    #[error("io error: {0}")]
    Io(#[from] std::io::Error),

    /// A background task panicked or was cancelled. Reported, never propagated as a panic.
    #[error("internal task failure: {0}")]
    Task(String),
}

/// Short for `std::result::Result<T, Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<object_store::Error> for Error {
    fn from(err: object_store::Error) -> Self {
        use object_store::Error as OS;
        match err {
            OS::NotFound { path, .. } => Error::NotFound { path },
            OS::AlreadyExists { path, .. } => Error::AlreadyExists { path },
            OS::Precondition { path, .. } => Error::Precondition { path },
            OS::InvalidPath { source } => Error::InvalidPath {
                path: String::new(),
                reason: source.to_string(),
            },
            OS::NotSupported { source } => Error::NotSupported(source.to_string()),
            OS::NotImplemented {
                operation,
                implementer,
            } => Error::NotSupported(format!("{operation} is not implemented by {implementer}")),
            other if is_metadata_endpoint_failure(&other) => Error::NoCredentials {
                detail: chain(&other),
            },
            other => Error::Store(other),
        }
    }
}

/// Whether `err` is the credential chain's last resort (the EC2 instance
/// metadata endpoint) failing: what S3 requests report when no credentials
/// were configured off EC2.
fn is_metadata_endpoint_failure(err: &object_store::Error) -> bool {
    let text = chain(err);
    text.contains("/latest/api/token") || text.contains("/latest/meta-data/iam")
}

impl From<tokio::task::JoinError> for Error {
    fn from(err: tokio::task::JoinError) -> Self {
        Error::Task(err.to_string())
    }
}

impl Error {
    /// Whether a failed write may have been applied all the same: a
    /// transport failure or a server error (the reply was lost, or the store
    /// failed after applying it), as opposed to a refusal the store answered
    /// (bad path, permissions, a failed precondition).
    pub fn may_have_applied(&self) -> bool {
        match self {
            Error::InvalidPath { .. }
            | Error::InvalidArgument(_)
            | Error::NoCredentials { .. }
            | Error::NotSupported(_)
            | Error::AlreadyExists { .. }
            | Error::Precondition { .. }
            | Error::NotFound { .. } => false,
            Error::Store(os) => !matches!(
                os,
                object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
            ),
            _ => true,
        }
    }

    /// Attach the path to an error that lacks one (object_store's InvalidPath has none).
    pub fn at_path(self, path: &str) -> Self {
        match self {
            Error::InvalidPath { path: p, reason } if p.is_empty() => Error::InvalidPath {
                path: path.to_string(),
                reason,
            },
            other => other,
        }
    }
}

/// Render an error with its whole `source()` chain, for messages that cross into Python.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(src) = cur {
        let s = src.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = src.source();
    }
    out
}

/// The message of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Run `f`, turning a panic into the error `on_panic` builds from its message.
///
/// Decoders and encoders run on bytes and types pds does not control; a
/// panic inside them must reach the caller as a typed error, never unwind
/// into Python or kill a runtime thread.
pub fn contain<T>(
    on_panic: impl FnOnce(String) -> Error,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(on_panic(panic_message(payload.as_ref()))),
    }
}

/// A display helper used in messages: `a, b, c`.
pub struct Joined<'a>(pub &'a [String]);

impl fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}
