//! The allocator of the extension's Rust code: mimalloc (polars' wheel
//! likewise ships an allocator of its own) instead of the C library's.
//!
//! With glibc's malloc, each thread that allocates may get an arena of its
//! own (up to 8 per core), and what is freed in an arena mostly stays with
//! it. pds allocates on many threads (sorting, merging by key range,
//! reading runs ahead, encoding parts, the object store's runtime), so a
//! build's peak RSS depended on which arenas its threads met: a 6M-row
//! constant-key group at `sort_budget=64 MiB` (`benches/constant_key_rss.py`)
//! peaked at 745-983 MiB (batched) and 840-938 MiB (row form) in runs on
//! the same build, 718-723 and 695-743 MiB with mimalloc.
//!
//! Only Rust's allocations use it: the Arrow buffers pds hands to Python
//! are freed by their release callbacks, in Rust, by the allocator that
//! made them; Python and pyarrow keep their own allocators.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
