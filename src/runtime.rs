//! One tokio runtime per process, re-created after `fork()`.
//!
//! Spark forks its Python workers. A tokio runtime's worker threads do not
//! survive a fork, so a child that reused the parent's runtime would hang.
//! We remember the pid that built the runtime and build a fresh one when the
//! current pid differs. The parent's runtime is leaked in the child on
//! purpose: dropping it would try to join threads that do not exist there.

use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

struct Owned {
    pid: u32,
    runtime: Arc<tokio::runtime::Runtime>,
}

static RUNTIME: Mutex<Option<Owned>> = Mutex::new(None);

/// The process's runtime, built on first use (and again in a forked child).
pub fn get() -> Result<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME
        .lock()
        .map_err(|_| Error::Task("runtime lock poisoned".into()))?;
    if let Some(owned) = slot.as_ref() {
        if owned.pid == pid {
            return Ok(owned.runtime.clone());
        }
    }
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("pds-io")
            .build()?,
    );
    if let Some(stale) = slot.take() {
        // Built by the parent before fork(): its threads are gone in this process.
        std::mem::forget(stale);
    }
    *slot = Some(Owned {
        pid,
        runtime: runtime.clone(),
    });
    Ok(runtime)
}

/// Run a future to completion on the process runtime.
///
/// Callers in the Python layer invoke this with the GIL released.
pub fn block_on<F: Future>(fut: F) -> Result<F::Output> {
    let rt = get()?;
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::Task(
            "pds called from inside a running tokio runtime".into(),
        ));
    }
    Ok(rt.block_on(fut))
}

/// Number of parts encoded or fetched at once: one per core, at least two so
/// that I/O overlaps with encoding on small machines.
pub fn default_parallelism() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2)
}
