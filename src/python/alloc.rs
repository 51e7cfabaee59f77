//! The allocator of the extension's Rust code: mimalloc (polars' wheel
//! likewise ships an allocator of its own) instead of the C library's.
//!
//! With glibc's malloc, each thread that allocates may get an arena of its
//! own (up to 8 per core), and what is freed in an arena mostly stays with
//! it. pds allocates on many threads (sorting, merging by key range,
//! reading runs ahead, encoding parts, the object store's runtime), so a
//! build's peak RSS depended on which arenas its threads met. Measured on
//! the 2-core machine, peak RSS of a 6M-row constant-key group at
//! `sort_budget=64 MiB` (`benches/constant_key_rss.py`, batched / row
//! form) and of the 10M-row sort at 256 MiB (`benches/sort_compare.py`):
//! - glibc: 745-983 / 840-938 MiB; 535-564 MiB;
//! - mimalloc (v3, whose purge delay is 1,000 ms by default; pyarrow's
//!   wheels bundle mimalloc v3 too): 718-737 / 695-743 MiB;
//!   608-638 MiB. Updates were as fast or faster (`producers_compare`).
//! - mimalloc, purge delay 1 ms (`MIMALLOC_PURGE_DELAY=1`): 516 / 518
//!   MiB; 532-536 MiB, but the pipeline build took 15.5 s instead of 11.0
//!   and a scattered update 4.8 s instead of 2.5: not the default.
//! - Again on 2026-11-28, after the CPU pool: the constant-key group
//!   (batched) 637-726 MiB by default; `MIMALLOC_PURGE_DELAY=0` 511 MiB,
//!   `MIMALLOC_ARENA_PURGE_MULT=0` 492 MiB, but the 4M-event pipeline build
//!   (`benches/pipeline_build.py`) 18-29 % and its scattered update 67-81 %
//!   slower: still not the default. Its live heap peaks at 286 MB
//!   (heaptrack); the rest is memory kept for reuse.
//!
//! - Since 2026-11-29 pds returns freed memory where a large phase of
//!   work ends (see [`crate::memory`]: a sort's spill, a part of 8 MiB or
//!   more uploaded) with `mi_collect(true)` on that thread and on each of
//!   the CPU pool's, which also purges what the delay still held: the
//!   constant-key group peaked at 407-463 MiB batched (536-566 before),
//!   the 10M-row sort at 544-583 MiB (615-658); see the benchmarks page.
//!   The merge's threads (after each key range) and the part encoder's
//!   (after each part of 8 MiB or more) now return theirs too, and a sort
//!   buffers half its budget: the sort peaked at 473-493 MiB.
//!
//! mimalloc reads its settings from the environment (`MIMALLOC_*`). Only
//! Rust's allocations use it: the Arrow buffers pds hands to Python are
//! freed by their release callbacks, in Rust, by the allocator that made
//! them; Python and pyarrow keep theirs.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Register [`collect`] as the core's way to return freed memory (see
/// [`crate::memory`]), unless `MIMALLOC_PURGE_DELAY` is set: then the
/// user chose when memory goes back (`-1`: never), and that holds.
pub fn install() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        crate::memory::set_release(collect);
    }
}

/// Return the memory freed so far: this thread's empty pages, and every
/// arena's freed memory whose delay has not run out yet.
fn collect() {
    // SAFETY: `mi_collect` takes no pointer and may be called from any
    // thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
