//! The bridge from the core's `log` events to Python's `logging`
//! (pyo3-log): an event of target `pds::table` goes to the Python logger
//! `pds.table`, and so on (all under `pds`). Other crates' events reach
//! Python only at WARNING and above, but object_store's HTTP retries: its
//! retry module logs each (a `tracing` event, which tracing's `log` feature
//! turns into a `log` record while no tracing subscriber is set), and the
//! bridge moves them to `pds.store` at DEBUG, their URLs redacted
//! ([`crate::store::failure::redact_urls`]), beside the requests they retry.
//!
//! pyo3-log caches each Python logger and its effective level on first use:
//! a disabled event then costs a lookup in that cache, without the GIL.
//! [`reset_log_cache`] forgets the cache, so that levels set later in
//! Python take effect. An event logged from a runtime thread takes the GIL
//! to reach Python: every pds call waits for the runtime with the GIL
//! released (see `super::detach`), so that never waits on itself.

use std::sync::OnceLock;

use log::LevelFilter;
use pyo3::prelude::*;
use pyo3_log::{Caching, Logger, ResetHandle};

/// The installed logger's cache handle (`None`: another logger was
/// installed first, and pds's events go there).
static RESET: OnceLock<Option<ResetHandle>> = OnceLock::new();

/// Install the bridge (once per process; later calls do nothing).
pub fn install(py: Python<'_>) -> PyResult<()> {
    if RESET.get().is_some() {
        return Ok(());
    }
    let logger = Logger::new(py, Caching::LoggersAndLevels)?
        .filter(LevelFilter::Warn)
        .filter_target("pds".to_owned(), LevelFilter::Debug);
    let handle = logger.reset_handle();
    let installed = log::set_boxed_logger(Box::new(Bridge(logger))).is_ok();
    if installed {
        log::set_max_level(LevelFilter::Debug);
    }
    let _ = RESET.set(installed.then_some(handle));
    Ok(())
}

/// The target of object_store's retry events (its `client::retry` module).
const RETRY_TARGET: &str = "object_store::client::retry";
/// Where the bridge puts them: the store's requests' logger.
const STORE_TARGET: &str = "pds::store";

/// pyo3-log's logger, with object_store's retry events moved to
/// `pds.store` at DEBUG (object_store logs them at INFO, under its own
/// target, which reaches Python only at WARNING and above).
struct Bridge(Logger);

fn is_retry(target: &str) -> bool {
    target.starts_with(RETRY_TARGET)
}

impl log::Log for Bridge {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        if is_retry(metadata.target()) {
            let moved = log::Metadata::builder()
                .level(log::Level::Debug)
                .target(STORE_TARGET)
                .build();
            return self.0.enabled(&moved);
        }
        self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if !is_retry(record.target()) {
            return self.0.log(record);
        }
        // A transport error's text may hold a URL with a SAS query string.
        let text = crate::store::failure::redact_urls(&record.args().to_string());
        self.0.log(
            &log::Record::builder()
                .level(log::Level::Debug)
                .target(STORE_TARGET)
                .args(format_args!("HTTP retry: {text}"))
                .build(),
        );
    }

    fn flush(&self) {
        self.0.flush();
    }
}

/// Forget the Python loggers and levels cached on the Rust side, so that
/// the next event of each pds logger looks its level up again.
///
/// pds reads the levels of its loggers (`pds`, `pds.table`, `pds.dataset`,
/// `pds.store`, ...) the first time each logs, and keeps them: call this
/// after changing a level (`logging.getLogger("pds").setLevel(...)`, a
/// new `logging.basicConfig(...)`) once pds has run. Cost: none at the
/// call; each logger's next event takes the GIL once to read its level.
#[pyfunction]
pub fn reset_log_cache() {
    if let Some(Some(handle)) = RESET.get() {
        handle.reset();
    }
}
