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

use std::sync::OnceLock;

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Register how freed memory is returned (once per process; later calls
/// are ignored).
pub fn set_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// Return the memory freed so far to the system, if an allocator said how:
/// on this thread, and on each thread of the CPU pool (memory freed there,
/// or by others into blocks those threads allocated, stays with them until
/// they next allocate). The pool's threads do it when they next take work:
/// this call does not wait for them.
pub fn release_freed() {
    let Some(release) = RELEASE.get().copied() else {
        return;
    };
    release();
    if let Ok(pool) = crate::runtime::cpu_pool() {
        pool.spawn_broadcast(move |_| release());
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
