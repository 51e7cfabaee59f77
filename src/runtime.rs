//! One tokio runtime and one CPU thread pool per process, each re-created
//! after `fork()`.
//!
//! Spark forks its Python workers. Neither a tokio runtime's worker threads
//! nor a rayon pool's survive a fork, so a child that reused the parent's
//! would hang. We remember the pid that built each and build a fresh one
//! when the current pid differs. The parent's is leaked in the child on
//! purpose: dropping it would try to reach threads that do not exist there.

use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// A value built once per process: built again in a forked child.
struct PerProcess<T> {
    slot: Mutex<Option<(u32, Arc<T>)>>,
}

impl<T> PerProcess<T> {
    const fn new() -> Self {
        PerProcess {
            slot: Mutex::new(None),
        }
    }

    fn get(&self, what: &str, build: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let pid = std::process::id();
        let mut slot = self
            .slot
            .lock()
            .map_err(|_| Error::Task(format!("{what} lock poisoned")))?;
        if let Some((owner, value)) = slot.as_ref() {
            if *owner == pid {
                return Ok(value.clone());
            }
        }
        let value = Arc::new(build()?);
        if let Some(stale) = slot.take() {
            // Built by the parent before fork(): its threads are gone in this process.
            std::mem::forget(stale);
        }
        *slot = Some((pid, value.clone()));
        Ok(value)
    }

    /// The value if this process has built it, without building it.
    fn built(&self) -> Option<Arc<T>> {
        let slot = self.slot.lock().ok()?;
        let (owner, value) = slot.as_ref()?;
        (*owner == std::process::id()).then(|| value.clone())
    }
}

static RUNTIME: PerProcess<tokio::runtime::Runtime> = PerProcess::new();
static CPU_POOL: PerProcess<rayon::ThreadPool> = PerProcess::new();

/// The process's runtime, built on first use (and again in a forked child).
pub fn get() -> Result<Arc<tokio::runtime::Runtime>> {
    RUNTIME.get("runtime", || {
        Ok(tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("pds-io")
            .build()?)
    })
}

/// The process's pool of CPU threads (one per core) for parallel encoding,
/// sorting and gathering, built on first use (and again in a forked child).
/// Its threads live as long as the process: a thread started per task
/// would give the allocator a new heap each time, whose pages that task's
/// results then pin after it exits.
pub fn cpu_pool() -> Result<Arc<rayon::ThreadPool>> {
    CPU_POOL.get("CPU pool", || {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("pds-cpu-{i}"))
            .build()
            .map_err(|e| Error::Task(format!("the CPU thread pool could not start: {e}")))
    })
}

/// [`cpu_pool`] if this process has started it, without starting it.
pub fn cpu_pool_if_started() -> Option<Arc<rayon::ThreadPool>> {
    CPU_POOL.built()
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
