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
//! - [`publish`]: writing the entries the log lacks, in order, create-only.
//! - [`positions`]: a data file's deleted rows as row positions, whichever
//!   tombstone kinds removed them (what its deletion vector carries).
//! - [`schema`]: the table's Arrow schema as a Delta schema, or the column
//!   that has no exact Delta type.

pub mod actions;
pub mod deletion_vector;
pub mod entry;
pub mod positions;
pub mod publish;
pub mod schema;
