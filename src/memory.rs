//! Freed memory handed back to the system where a phase of work ends.
//!
//! An allocator keeps memory that was freed for a while before it returns
//! it (mimalloc, the extension's allocator, for up to a second by default),
//! so that it can be reused without new page faults. Work that frees a
//! large part of its memory at once, then allocates as much again (a sort
//! that spills its buffer and fills the next, a part encoded and uploaded
//! before the next), would then hold both at its peak. Such work calls
//! [`release_freed`] where a phase ends, and the allocator returns what is
//! free then. The core has no allocator of its own: the extension
//! registers how with [`set_release`]; without one, the call does nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Register how freed memory is returned (once per process; later calls
/// are ignored).
pub fn set_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// The CPU pool's threads yet to run the release queued last (0: none is
/// pending). A child forked while one was pending inherits the count and
/// its new pool's threads then never release: only the calling thread does.
static POOL_LEFT: AtomicUsize = AtomicUsize::new(0);

/// Return the memory freed so far to the system, if an allocator said how:
/// on this thread, and on each thread of the CPU pool if it runs (memory
/// freed there, or by others into blocks those threads allocated, stays
/// with them until they next allocate). The pool's threads do it as soon as
/// each is free; this call does not wait for them, and queues no second
/// round while one is pending.
pub fn release_freed() {
    let Some(release) = RELEASE.get().copied() else {
        return;
    };
    release();
    let Some(pool) = crate::runtime::cpu_pool_if_started() else {
        return;
    };
    let threads = pool.current_num_threads();
    if threads == 0
        || POOL_LEFT
            .compare_exchange(0, threads, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    pool.spawn_broadcast(move |_| {
        release();
        POOL_LEFT.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Return the memory freed so far on this thread only: for threads of
/// their own (the merge's, the part encoder's) whose blocks other threads
/// free into, where a unit of their work ends.
pub fn release_freed_here() {
    if let Some(release) = RELEASE.get().copied() {
        release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn the_first_registered_release_runs_at_each_phase_end() {
        set_release(count);
        set_release(|| panic!("only the first registration counts"));
        // Other tests in this process may end phases too: at least one more.
        let before = CALLS.load(Ordering::SeqCst);
        release_freed();
        assert!(CALLS.load(Ordering::SeqCst) > before);
    }
}
