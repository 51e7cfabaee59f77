//! Producers (the incremental map/reduce seed): the Rust engine that sorts,
//! merges and scans by key, so that only the user's `Produce` runs in Python.
//!
//! - [`keys`]: compound keys as arrow's row format (byte-comparable rows).
//! - [`sort`]: an external sort within a memory budget (sorted runs spilled
//!   to local Arrow IPC files), read back as one sorted stream.
//! - [`sorted_buffer`]: one buffer of the sort, sorted in memory on several
//!   threads and read back in key order without a copy.
//! - [`spill`]: the sort's spilled runs: their folder and each run's index.
//! - [`range_merge`]: the sort's final merge, in parallel by key range.
//! - [`merge`]: a streaming k-way merge of sorted streams; distinct keys.
//! - [`group`]: a group cursor handing out each key's values lazily,
//!   forward-only, for groups of any size.
//! - [`join`]: a merge-join scan over several sorted sources by key.
//! - [`parts`]: a sorted stream written as key-range Parquet parts, cut at
//!   key boundaries, with each part's key range recorded; which parts an
//!   update's keys touch.
//! - [`partset`]: a set of key-range parts read whole or by key, and
//!   rewritten only where a change lands (the rest kept by reference).
//! - [`patch`]: an update's change layered over a part as a patch, and
//!   when a part is rewritten instead (compaction).
//! - [`splice`]: sorted rows located and replaced by key by slicing.
//! - [`compact`]: a node's parts compacted (patches merged in, small parts
//!   merged), for `Pipeline.compact`.
//! - [`create`]: a pipeline's first version, on a key nothing else occupies.
//! - [`manifest`]: a pipeline version (graph + every node's parts),
//!   committed by the table layer's compare-and-swap loop.
//! - [`node`]: a source, stage or merge at one version, and the reads an
//!   update needs from it (its update, content by key, augmented updates).
//! - [`chunks`]: the groups handed to `Produce`, in chunks.
//! - [`run`]: one stage's incremental update over its stored parts.
//! - [`source`]: a source's update from the user's changes; a merge's update.
//! - [`steps`]: the steps of a stage update, shared by [`run`] and [`split_stage`].
//! - [`key_range`]: key ranges (the unit of work of a split update): planning
//!   from parts, filters, the parts inside a range.
//! - [`split_stage`]: a stage update split by key range into map and reduce
//!   tasks (Spark), and the driver's stitching of their results.
//! - [`split_source`]: a source's update split by key range likewise.

pub mod chunks;
pub mod compact;
pub mod create;
pub mod group;
pub mod join;
pub mod key_range;
pub mod keys;
pub mod manifest;
pub mod merge;
pub mod node;
pub mod part_stream;
pub mod parts;
pub mod partset;
pub mod patch;
pub mod range_merge;
pub mod run;
pub mod sort;
pub mod sorted_buffer;
pub mod source;
pub mod spill;
pub mod splice;
pub mod split_source;
pub mod split_stage;
pub mod steps;

use arrow_array::RecordBatch;

/// A stream of batches, each `Result`.
pub type BatchIter = Box<dyn Iterator<Item = crate::error::Result<RecordBatch>> + Send>;
