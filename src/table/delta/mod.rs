//! The Delta Lake view of a table: a `_delta_log` published beside pds's own
//! versions so that other engines read the table (pds's format stays the
//! source of truth; the view is derived from it).
//!
//! - [`actions`]: the actions of a log entry and an `add`'s statistics.
//! - [`entry`]: one version's log entry against the version before, and the
//!   deletion-vector files it names.
//! - [`deletion_vector`]: the deletion vectors that carry pds's tombstones
//!   (the `deletionVectors` table feature): the bitmap, the `.bin` file that
//!   holds them, and the descriptor a log entry names them by.
//! - [`checkpoint`]: a version's whole state as a Parquet checkpoint, and
//!   the `_last_checkpoint` hint.
//! - [`publish`]: writing the entries the log lacks, in order, create-only,
//!   and a checkpoint every [`publish::CHECKPOINT_INTERVAL`] versions.
//! - [`log_objects`]: a log object written create-only, accepted if it holds
//!   exactly pds's bytes already.
//! - [`positions`]: a data file's deleted rows as row positions, whichever
//!   tombstone kinds removed them (what its deletion vector carries).
//! - [`vacuum`]: what vacuum keeps of the view.
//! - [`schema`]: the table's Arrow schema as a Delta schema, or the column
//!   that has no exact Delta type.

pub mod actions;
pub mod checkpoint;
pub mod deletion_vector;
pub mod entry;
pub mod log_objects;
pub mod positions;
pub mod publish;
pub mod schema;
pub mod vacuum;

/// What the Delta tests build on.
#[cfg(test)]
pub(crate) mod test_tables {
    use std::sync::Arc;

    use crate::parquet::filter::predicate;
    use crate::store::StoreHandle;
    use crate::table::delete::delete;
    use crate::table::tests::{cond, int, text};

    /// Create table `t` in `store` with rows `ids`, keyed by `id`,
    /// publishing the Delta view from version 0.
    pub(crate) fn create_with_view(store: &Arc<StoreHandle>, ids: std::ops::Range<i64>) {
        crate::table::tests::create_keyed_publishing(store, ids, &["delta".to_string()]);
    }

    /// Delete from table `t` (ids 0..2000 in two files, row groups of 100
    /// rows) with one tombstone of every kind: a key range, row positions
    /// and whole row groups.
    pub(crate) fn delete_every_kind(store: &Arc<StoreHandle>) {
        for conditions in [
            vec![cond("id", ">=", int(950)), cond("id", "<", int(1010))], // a key range
            vec![cond("customer", "==", text("c0"))],                     // positions
            vec![
                cond("id", ">=", int(1200)),
                cond("customer", "!=", text("none")),
            ], // row groups
        ] {
            delete(store.clone(), "t", predicate(conditions).unwrap(), 2).unwrap();
        }
    }
}
