//! The allocator of the extension's Rust code: mimalloc (polars' wheel
//! likewise ships an allocator of its own) instead of the C library's,
//! returning freed memory to the system after 1 ms instead of 10.
//!
//! With glibc's malloc, each thread that allocates may get an arena of its
//! own (up to 8 per core), and what is freed in an arena mostly stays with
//! it. pds allocates on many threads (sorting, merging by key range,
//! reading runs ahead, encoding parts, the object store's runtime), so a
//! build's peak RSS depended on which arenas its threads met. Measured on
//! a 6M-row constant-key group at `sort_budget=64 MiB`
//! (`benches/constant_key_rss.py`, batched) and the 10M-row sort at 256
//! MiB (`benches/sort_compare.py`), peak RSS:
//! - glibc: 745-983 MiB; 535-564 MiB;
//! - mimalloc, purge delay 10 ms (its default): 718-737 MiB; 608-638 MiB;
//! - mimalloc, purge delay 1 ms: 513 MiB; 523-525 MiB;
//! - mimalloc, purge delay 0 (immediate): 474 MiB, 507-511 MiB, but 1.8x
//!   and 1.3x slower.
//!
//! `MIMALLOC_PURGE_DELAY` (and mimalloc's other variables) in the
//! environment still win. Only Rust's allocations use mimalloc: the Arrow
//! buffers pds hands to Python are freed by their release callbacks, in
//! Rust, by the allocator that made them; Python and pyarrow keep theirs.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (mimalloc.h):
/// the milliseconds before freed memory is returned to the system.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The purge delay pds sets, unless the environment sets one.
const PURGE_DELAY_MS: std::os::raw::c_long = 1;

/// Set pds's defaults for mimalloc's options (once, when the module loads).
pub(super) fn configure() {
    // SAFETY: sets one option's default value (a plain store, skipped if
    // the environment set the option); called while the module loads,
    // before pds starts any thread.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}
