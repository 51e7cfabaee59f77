//! A sorted data set stored as key-range parts (see [`super::parts`]): read
//! back whole or by key, and rewritten where an update touches it.
//!
//! A [`PartSet`] says what the parts hold: their schema, the sort key and
//! the *cut key* (a leading part of the sort key that parts are cut at; a
//! value with many rows may span parts, see [`super::parts`]).
//! [`PartSet::rewrite`] applies a change (rows to remove by some key, rows
//! to add in sort order) by rewriting only the parts whose key ranges the
//! change touches (a key spanning parts: all of them); the other parts are
//! kept by reference. So a change costs reads and writes of the parts it
//! lands in, not of the set.
//!
//! The files: `read` (whole parts, scans, lookups), `reader` (the next part
//! read on a thread of its own), `shared_files` (the deleted-key files
//! patches share, decoded once per part set), `rewrite` (a change applied
//! part by part: patched or rewritten), `streamed` (a key spanning parts,
//! rewritten as a stream), `key_split` (a sorted stream split at part
//! bounds) and `key_filter` (rows filtered by key sets).

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::keys::{KeyEncoder, KeySet};
use super::parts::RangePart;
use super::BatchIter;
use crate::error::Result;
use crate::parquet::encode::EncodeOptions;
use crate::store::StoreHandle;

mod key_filter;
mod key_split;
mod read;
mod reader;
mod rewrite;
mod shared_files;
mod streamed;

pub use key_filter::{filter_by_keys, key_set, lead_prefixes, Within};
pub use key_split::KeySplitter;
pub use rewrite::{SEEK_MIN_ROWS, SHARED_DELETED_MAX_ROWS};
pub use shared_files::SharedFiles;
#[cfg(test)]
pub(crate) mod tests;

/// What a set of key-range parts holds and where it lives.
#[derive(Debug, Clone)]
pub struct PartSet {
    pub store: Arc<StoreHandle>,
    /// The key part names are relative to (a pipeline's key).
    pub root: String,
    pub schema: SchemaRef,
    pub sort_key: Vec<String>,
    /// A leading part of `sort_key` that parts are cut at; a value spans
    /// parts only through shared boundary keys (see [`super::parts::units`]).
    pub cut_key: Vec<String>,
    pub opts: EncodeOptions,
    /// Rows per part before the cut at the next key boundary.
    pub target_rows: usize,
    /// The shared files of deleted keys its reads have decoded (clones
    /// share them): a new part set starts with none.
    pub shared_files: Arc<SharedFiles>,
}

/// Which rows a rewrite removes from the parts it rewrites.
#[derive(Debug)]
pub enum Remove {
    Nothing,
    /// Rows whose `key` columns (as row-format bytes) are in `set`, among
    /// the rows of the cut-key values [`Change::touch`] lists (and, with
    /// [`Change::derived`], those it finds): a listed key elsewhere stays.
    Keys {
        key: Vec<String>,
        set: KeySet,
    },
}

/// A change to apply with [`PartSet::rewrite`].
pub struct Change {
    pub remove: Remove,
    /// Cut-key values (batches of the cut key's columns, sorted, repeats
    /// allowed) whose parts must be rewritten even if nothing is added
    /// there: where the removed rows live.
    pub touch: BatchIter,
    /// Rows to add (the layout's schema), sorted by the sort key.
    pub adds: BatchIter,
    /// Return the removed rows.
    pub collect_removed: bool,
    /// Select, for an update, every row (after the change) of each cut-key
    /// value that was touched or added, and the touched values left with
    /// no row.
    pub select: bool,
    /// New parts are named `<prefix>-sNNNNN-NNNNN.parquet`.
    pub prefix: String,
    /// Removed rows the rewrite finds itself, in the parts that may hold
    /// them, rather than by `touch`: see [`Derived`].
    pub derived: Option<Derived>,
}

/// Rows to remove whose cut-key values are not listed in
/// [`Change::touch`] but begin with known leading values (a stage's rows
/// whose target key begins with their changed source key's values: see
/// [`super::manifest::NodeState::derived_prefix`]). Each part whose range
/// of the leading columns holds one is rewritten; of its values beginning
/// with one, those holding a row that [`Change::remove`] removes count as
/// touched.
pub struct Derived {
    /// The leading values (row-format bytes of the cut key's first `m`
    /// columns), sorted, distinct.
    pub prefixes: Vec<Box<[u8]>>,
    pub m: usize,
    /// The values of the cut key's first column among them (to seek with).
    pub first: arrow_array::ArrayRef,
}

/// What [`PartSet::rewrite`] did.
#[derive(Debug, Default)]
pub struct PartsRewritten {
    /// The new part list, in key order.
    pub parts: Vec<RangePart>,
    /// Every object this rewrite created (for cleanup if the caller fails).
    pub created: Vec<String>,
    pub removed: Vec<RecordBatch>,
    /// With `select`: the selected rows, as parts (references to new parts
    /// that are selected whole, or new parts of the selected rows), in key order.
    pub selected: Vec<RangePart>,
    /// With `select`: touched cut-key values left with no row (cut-key columns).
    pub deleted: Vec<RecordBatch>,
    /// With `select`: the file of `deleted`, if this rewrite wrote it (its
    /// patches share it, see [`crate::producers::patch`]); else the caller
    /// writes them.
    pub deleted_file: Option<RangePart>,
}

/// A poisoned lock on a rewrite's shared state, as the typed error.
fn poisoned<T>(_: T) -> crate::error::Error {
    crate::error::Error::Task("a rewrite's shared state was poisoned".into())
}

/// The rows `start..end` of `batches` (in order), as slices; fewer if
/// `batches` end before `end`.
pub(super) fn rows_in(batches: &[RecordBatch], start: u64, end: u64) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for b in batches {
        let n = b.num_rows() as u64;
        let (lo, hi) = (start.max(at), end.min(at + n));
        if lo < hi {
            out.push(b.slice((lo - at) as usize, (hi - lo) as usize));
        }
        at += n;
    }
    out
}

impl PartSet {
    /// `root/<name>`.
    pub fn object(&self, part: &RangePart) -> String {
        format!("{}/{}", self.root.trim_end_matches('/'), part.name)
    }

    fn encoder(&self, key: &[String]) -> Result<KeyEncoder> {
        KeyEncoder::new(&self.schema, key)
    }

    /// The layout's column names, in order.
    fn schema_names(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// The schema of the cut key's columns.
    pub fn cut_schema(&self) -> Result<SchemaRef> {
        let idx = crate::parquet::decode::column_indices(&self.schema, &self.cut_key)?;
        Ok(Arc::new(self.schema.project(&idx)?))
    }
}
