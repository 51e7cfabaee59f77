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

    /// The table (or pipeline) at `path` exists, but the version a call
    /// needs does not: it was never made, was vacuumed, or (`as_of`) none
    /// existed at that time. Raised in Python as `NotFound` with `path`.
    #[error("{reason}")]
    VersionNotFound { path: String, reason: String },

    /// Nothing of the kind asked for is at `path`, but something else is (a
    /// dataset where a table was expected): `reason` says what and how to
    /// read it. Python: `NotFound`.
    #[error("not found: {path}: {reason}")]
    OtherKind { path: String, reason: String },

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

    /// A dataset, table or pipeline would be created at, inside or around
    /// the key of another (keys are exclusive; see `store::occupancy`).
    #[error(
        "cannot create {creating} at {key:?}: {reason} (keys are exclusive: datasets, tables \
         and pipelines never nest)"
    )]
    KeyOccupied {
        key: String,
        creating: String,
        reason: String,
    },

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
    /// A write on a table or pipeline whose latest version is in an earlier
    /// on-disk format: it is read-only until upgraded (`Table.upgrade()`,
    /// `Pipeline.upgrade()`, `pds upgrade`). `kind` is "table" or
    /// "pipeline"; `format` names the earlier format.
    #[error(
        "{kind} {key:?} was written by an earlier pds in format {format}: it can be read, \
         but not written, until it is upgraded to this pds's format with {how}() or \
         `pds upgrade URL {key}` (pds that read only the earlier format cannot read it \
         after that); nothing was written"
    )]
    UpgradeRequired {
        kind: &'static str,
        key: String,
        format: &'static str,
        how: &'static str,
    },

    #[error("schema mismatch on table {key:?}: {reason}")]
    SchemaMismatch { key: String, reason: String },

    /// Rows a write refuses for their values (a replace's rows outside its
    /// filter); `reason` names the first. Nothing was committed. Python:
    /// `DataError`.
    #[error("rows refused by table {key:?}: {reason}")]
    RowsRefused { key: String, reason: String },

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

    /// The bucket (or Azure container) the store URL names does not exist:
    /// a LIST there was answered 404. `what` is "S3 bucket", "GCS bucket"
    /// or "Azure container". Python: `NotFound`, with the name as `path`.
    #[error("the {what} {name:?} does not exist (check the store URL, or create it first)")]
    BucketNotFound { what: &'static str, name: String },

    /// The store does not offer the operation (e.g. a URL scheme pds lacks).
    #[error("not supported: {0}")]
    NotSupported(String),

    /// Any other store failure (network, permissions, throttling after retries).
    #[error("object store error: {0}")]
    Store(#[source] object_store::Error),

    /// Parquet encoding or decoding failed. (Converted with `From`, which
    /// unwraps a pds error that travelled inside it.)
    #[error("parquet error: {0}")]
    Parquet(#[source] parquet::errors::ParquetError),

    /// Arrow failed (schema mismatch in the input stream, IPC, casts).
    /// (Converted with `From`, which unwraps a pds error that travelled
    /// inside it.)
    #[error("arrow error: {0}")]
    Arrow(#[source] arrow_schema::ArrowError),

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

/// Whether `err` is a local file system's "not a directory": a key that
/// passes through an object, as if it were a folder.
pub fn is_below_a_file(err: &object_store::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::NotADirectory;
        }
        cur = e.source();
    }
    false
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
        if err.is_panic() {
            let payload = err.into_panic();
            return internal_panic(panic_message(payload.as_ref()));
        }
        Error::Task(err.to_string())
    }
}

/// A boxed error inside a foreign one.
type Boxed = Box<dyn std::error::Error + Send + Sync>;

/// A pds error (or an object store's) boxed into a foreign error, taken
/// back out so that it reaches the caller as itself: a stream of batches
/// reports errors as `ArrowError::ExternalError`, a Parquet reader or writer
/// as `ParquetError::External`, and a `PartCorrupted` met while compacting
/// must stay a `PartCorrupted`. Looks through nested boxes; `Err` gives the
/// box back when it holds something else.
fn unbox(inner: Boxed) -> std::result::Result<Error, Boxed> {
    use arrow_schema::ArrowError;
    use parquet::errors::ParquetError;
    let inner = match inner.downcast::<Error>() {
        Ok(e) => return Ok(*e),
        Err(other) => other,
    };
    let inner = match inner.downcast::<object_store::Error>() {
        Ok(e) => return Ok(Error::from(*e)),
        Err(other) => other,
    };
    let inner = match inner.downcast::<ArrowError>() {
        Ok(e) => {
            return match *e {
                ArrowError::ExternalError(b) => {
                    unbox(b).map_err(|b| Box::new(ArrowError::ExternalError(b)) as Boxed)
                }
                other => Err(Box::new(other)),
            }
        }
        Err(other) => other,
    };
    match inner.downcast::<ParquetError>() {
        Ok(e) => match *e {
            ParquetError::External(b) => {
                unbox(b).map_err(|b| Box::new(ParquetError::External(b)) as Boxed)
            }
            other => Err(Box::new(other)),
        },
        Err(other) => Err(other),
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(err: arrow_schema::ArrowError) -> Self {
        match err {
            arrow_schema::ArrowError::ExternalError(inner) => match unbox(inner) {
                Ok(e) => e,
                Err(inner) => Error::Arrow(arrow_schema::ArrowError::ExternalError(inner)),
            },
            other => Error::Arrow(other),
        }
    }
}

impl From<parquet::errors::ParquetError> for Error {
    fn from(err: parquet::errors::ParquetError) -> Self {
        match err {
            parquet::errors::ParquetError::External(inner) => match unbox(inner) {
                Ok(e) => e,
                Err(inner) => Error::Parquet(parquet::errors::ParquetError::External(inner)),
            },
            other => Error::Parquet(other),
        }
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
            | Error::NotFound { .. }
            | Error::RowsRefused { .. }
            | Error::BucketNotFound { .. } => false,
            Error::Store(os) => !crate::store::failure::is_denied(os),
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

/// The error of a read (GET, HEAD, range) of `key`: as `From` maps it, and
/// on file:// a key that passes through a file (`a/_SUCCESS/x`) is
/// `NotFound` naming `key`, as on every object store. (A write there stays
/// the store's error: nothing can be created below a file.)
pub fn read_error(err: object_store::Error, key: &str) -> Error {
    if is_below_a_file(&err) {
        return Error::NotFound {
            path: key.to_string(),
        };
    }
    Error::from(err).at_path(key)
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

/// The error for a panic in pds's own code, caught at the Python boundary
/// or in a task join: a bug, reported as an error, never as a crash.
pub fn internal_panic(msg: String) -> Error {
    Error::Task(format!(
        "pds failed unexpectedly (a bug in pds; please report it): {msg}"
    ))
}

thread_local! {
    /// How many containment scopes enclose this thread's current code.
    static CONTAINED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Threads pds starts (its runtime's workers and blocking threads, named
/// `pds-io`, and helper threads named `pds-...`) are joined, or run tokio
/// tasks whose panics tokio catches: every panic on them is contained.
const THREAD_PREFIX: &str = "pds-";

/// Marks this thread as inside a containment scope until dropped.
struct Scope;

impl Scope {
    fn enter() -> Self {
        CONTAINED.with(|c| c.set(c.get().saturating_add(1)));
        Scope
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        CONTAINED.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Whether a panic raised here now would be caught by pds and turned into
/// a typed error (so the panic hook stays silent).
pub fn is_contained() -> bool {
    CONTAINED.with(|c| c.get() > 0)
        || std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with(THREAD_PREFIX))
}

/// Run `f` marked as contained: its caller catches any panic in it (a
/// scoped thread that is joined, say), so the panic hook prints nothing.
pub fn contained<T>(f: impl FnOnce() -> T) -> T {
    let _scope = Scope::enter();
    f()
}

/// Install, once per process, the panic hook that keeps contained panics
/// quiet: a panic that pds catches and reports as a typed error (see
/// [`contain`], [`contain_future`], task joins) must not also print its
/// message to stderr. Any other panic goes to the hook that was installed
/// before (the default one prints it).
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_contained() {
                previous(info);
            }
        }));
    });
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
    catch(f).unwrap_or_else(|msg| Err(on_panic(msg)))
}

/// Run `f` contained: its value, or the message of the panic it raised
/// (which the panic hook does not print).
pub fn catch<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    let _scope = Scope::enter();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|payload| panic_message(payload.as_ref()))
}

/// `fut`, with a panic in any of its polls caught and returned as its
/// payload (as `FutureExt::catch_unwind`), each poll marked as contained.
pub fn catch_unwind_future<F: std::future::Future>(
    fut: F,
) -> impl std::future::Future<Output = std::result::Result<F::Output, Box<dyn std::any::Any + Send>>>
{
    use futures::FutureExt;
    ContainedPolls {
        inner: Box::pin(fut),
    }
    .catch_unwind()
}

/// [`contain`] for a future: a panic in any poll becomes `on_panic`'s error.
pub async fn contain_future<T>(
    on_panic: impl FnOnce(String) -> Error,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match catch_unwind_future(fut).await {
        Ok(r) => r,
        Err(payload) => Err(on_panic(panic_message(payload.as_ref()))),
    }
}

/// A future whose every poll runs inside a containment scope. Unwind
/// safety is the caller's: the future is dropped after a panic.
struct ContainedPolls<F> {
    inner: std::pin::Pin<Box<F>>,
}

impl<F> std::panic::UnwindSafe for ContainedPolls<F> {}

impl<F: std::future::Future> std::future::Future for ContainedPolls<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let _scope = Scope::enter();
        self.inner.as_mut().poll(cx)
    }
}

/// A display helper used in messages: `a, b, c`.
pub struct Joined<'a>(pub &'a [String]);

impl fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corrupted() -> Error {
        Error::PartCorrupted {
            path: "t/data/p.parquet".into(),
            reason: "bad".into(),
        }
    }

    /// A typed error that travelled through a batch stream (Arrow's
    /// external error) or a Parquet writer comes back out as itself.
    #[test]
    fn a_pds_error_boxed_in_arrow_or_parquet_errors_comes_back_as_itself() {
        use arrow_schema::ArrowError;
        use parquet::errors::ParquetError;
        let through_arrow = Error::from(ArrowError::ExternalError(Box::new(corrupted())));
        assert!(
            matches!(&through_arrow, Error::PartCorrupted { path, .. } if path == "t/data/p.parquet"),
            "{through_arrow:?}"
        );
        let nested =
            ParquetError::External(Box::new(ArrowError::ExternalError(Box::new(corrupted()))));
        assert!(matches!(Error::from(nested), Error::PartCorrupted { .. }));
        let store = ArrowError::ExternalError(Box::new(object_store::Error::NotFound {
            path: "x".into(),
            source: "gone".into(),
        }));
        assert!(matches!(Error::from(store), Error::NotFound { path } if path == "x"));
        // Anything else stays an Arrow or Parquet error, its message intact.
        let other = Error::from(ArrowError::ExternalError(Box::new(std::io::Error::other(
            "disk",
        ))));
        assert!(matches!(&other, Error::Arrow(_)) && other.to_string().contains("disk"));
        let plain = Error::from(ParquetError::General("eof".into()));
        assert!(matches!(plain, Error::Parquet(_)));
    }

    #[test]
    fn contained_code_knows_it_is_contained_and_its_panics_become_errors() {
        assert!(!is_contained());
        install_panic_hook();
        install_panic_hook(); // Once only: a second call changes nothing.
        let got: Result<()> = contain(internal_panic, || {
            assert!(is_contained());
            panic!("boom {}", 7)
        });
        let err = got.unwrap_err();
        assert!(
            matches!(&err, Error::Task(m) if m.contains("boom 7")),
            "{err}"
        );
        assert!(
            !is_contained(),
            "the scope ends with the call, even after a panic"
        );
        assert_eq!(catch(|| contained(is_contained)), Ok(true));
        let named = std::thread::Builder::new()
            .name("pds-test".into())
            .spawn(is_contained)
            .unwrap();
        assert!(named.join().unwrap());
    }

    #[test]
    fn a_panicking_future_is_contained_on_every_poll() {
        let rt = crate::runtime::get().unwrap();
        let got = rt.block_on(contain_future(internal_panic, async {
            tokio::task::yield_now().await;
            assert!(is_contained());
            if std::hint::black_box(true) {
                panic!("late");
            }
            Ok(1u8)
        }));
        assert!(matches!(got, Err(Error::Task(m)) if m.contains("late")));
        // A task's panic, joined, is the internal error too.
        let joined = rt.block_on(async {
            tokio::spawn(async {
                if std::hint::black_box(true) {
                    panic!("in a task");
                }
            })
            .await
        });
        let err: Error = joined.unwrap_err().into();
        assert!(
            matches!(&err, Error::Task(m) if m.contains("in a task")),
            "{err}"
        );
    }
}
