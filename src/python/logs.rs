//! The bridge from the core's `log` events to Python's `logging`
//! (pyo3-log): an event of target `pds::table` goes to the Python logger
//! `pds.table`, and so on (all under `pds`). Other crates' events reach
//! Python only at WARNING and above.
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
    let _ = RESET.set(logger.install().ok());
    Ok(())
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
