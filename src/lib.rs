//! pds: Parquet datasets on any object store.
//!
//! The core is plain Rust (no PyO3): `cargo test` and `cargo bench` need no
//! Python. One folder per layer, each using only the layers below it:
//!
//! - [`spec`]: the on-disk records (manifests, pointers, segments, parts)
//!   as plain serde types, which each layer below re-exports.
//! - [`store`]: object_store from a URL and options; keys confined to the
//!   root; create-only and compare-and-swap puts.
//! - [`parquet`]: the Parquet machinery every layer shares: encode, decode,
//!   range reads, filters, part splitting, checksums, schema checks.
//! - [`dataset`]: RFC-0008's datasets: parts, `manifest.json`, `_SUCCESS`;
//!   the checked read and the streaming scan.
//! - [`table`]: tables: appends, deletes by tombstone, snapshot scans, time
//!   travel, compaction and vacuum, committed by compare-and-swap.
//! - [`producers`]: the engine of incremental map/reduce pipelines (external
//!   sort, k-way merge, group cursor, merge-join, key-range part sets, stage
//!   updates), committed by the table layer's compare-and-swap loop.
//! - [`owned`]: copies of Arrow data in buffers of their own, for data
//!   kept past a batch imported from Python (which pins the whole batch).
//! - [`memory`]: freed memory returned to the system where a phase of
//!   work ends (the extension's allocator says how).
//! - [`progress`]: the counters a long operation updates as it goes, for a
//!   caller to poll (the Python side draws them as a progress bar).
//!
//! The `python` feature adds the `pds._core` extension module, whose bindings
//! live in `python/` and only convert types, release the GIL and map errors.

pub mod dataset;
pub mod error;
pub mod memory;
pub mod owned;
pub mod parquet;
pub mod producers;
pub mod progress;
pub mod runtime;
pub mod spec;
pub mod store;
pub mod table;
#[cfg(test)]
pub(crate) mod test_rng;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, Result};

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _core(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    python::register(m)
}
