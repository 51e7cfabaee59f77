//! Producers (the incremental map/reduce seed): the Rust engine that sorts,
//! merges and scans by key, so that only the user's `Produce` runs in Python.
//!
//! - [`keys`]: compound keys as arrow's row format (byte-comparable rows).
//! - [`sort`]: an external sort within a memory budget (sorted runs spilled
//!   to local Arrow IPC files), read back as one sorted stream.
//! - [`merge`]: a streaming k-way merge of sorted streams.
//! - [`group`]: a group cursor handing out each key's values lazily,
//!   forward-only, for groups of any size.
//! - [`join`]: a merge-join scan over several sorted sources by key.
//! - [`parts`]: a sorted stream written as key-range Parquet parts, cut at
//!   key boundaries, with each part's key range recorded; which parts an
//!   update's keys touch (the others are kept by reference).
//! - [`stage`]: one stage's incremental update (content, key-mappings and
//!   the update for downstream stages), as forward scans plus a sort of the
//!   changes only.
//!
//! Key-range parts, multi-stage pipelines, merges, the pipeline commit and
//! the Python API build on these (not built yet).

pub mod group;
pub mod join;
pub mod keys;
pub mod merge;
pub mod parts;
pub mod sort;
pub mod stage;

use arrow_array::RecordBatch;

/// A stream of batches, each `Result`.
pub type BatchIter = Box<dyn Iterator<Item = crate::error::Result<RecordBatch>> + Send>;
