//! Compound keys as arrow's row format: each row's key columns encoded into
//! bytes that compare like the values (nulls first), so that sorting,
//! merging and grouping compare one byte string per row.

use arrow_array::RecordBatch;
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::Schema;

use crate::error::{Error, Result};

/// A set of keys as their row-format bytes (looked up by a row's bytes,
/// with no allocation per lookup).
pub type KeySet = std::collections::HashSet<Box<[u8]>, ahash::RandomState>;

/// An empty [`KeySet`].
pub fn key_set_new() -> KeySet {
    KeySet::with_hasher(ahash::RandomState::new())
}

/// The first 16 bytes of a row (zero-padded, as two big-endian words) and
/// its length: see [`cmp_prefixed`].
pub fn prefix(row: arrow_row::Row<'_>) -> (u64, u64, u32) {
    let data = row.as_ref();
    let mut b = [0u8; 16];
    let n = data.len().min(16);
    b[..n].copy_from_slice(&data[..n]);
    let (hi, lo) = b.split_at(8);
    let word = |w: &[u8]| u64::from_be_bytes(w.try_into().unwrap_or([0; 8]));
    (
        word(hi),
        word(lo),
        u32::try_from(data.len()).unwrap_or(u32::MAX),
    )
}

/// Compare two rows by their [`prefix`]es, looking at their bytes only when
/// the prefixes tie and a row is longer than 16 bytes: the same order as
/// comparing the bytes (a zero-padded prefix orders like the bytes, and a
/// shorter row that ties is a prefix of the longer one).
pub fn cmp_prefixed(
    a: (u64, u64, u32),
    b: (u64, u64, u32),
    bytes: impl FnOnce() -> std::cmp::Ordering,
) -> std::cmp::Ordering {
    (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| {
        if a.2 <= 16 && b.2 <= 16 {
            a.2.cmp(&b.2)
        } else {
            bytes()
        }
    })
}

/// The columns `names` of `batch`, found by name, in that order.
/// `InvalidArgument` if one is missing.
pub fn key_columns(batch: &RecordBatch, names: &[String]) -> Result<Vec<arrow_array::ArrayRef>> {
    names
        .iter()
        .map(|n| {
            batch.column_by_name(n).cloned().ok_or_else(|| {
                Error::InvalidArgument(format!("key column {n:?} is missing from a batch"))
            })
        })
        .collect()
}

/// Encodes the key columns of batches of one schema.
#[derive(Debug)]
pub struct KeyEncoder {
    names: Vec<String>,
    indices: Vec<usize>,
    converter: RowConverter,
}

impl KeyEncoder {
    /// For the columns `key` of `schema`, in that order. `InvalidArgument`
    /// for an unknown column, no key, or a type the row format cannot order.
    pub fn new(schema: &Schema, key: &[String]) -> Result<Self> {
        if key.is_empty() {
            return Err(Error::InvalidArgument(
                "a key needs at least one column".into(),
            ));
        }
        let indices = crate::parquet::decode::column_indices(schema, key)?;
        let fields = indices
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)
            .map_err(|e| Error::InvalidArgument(format!("key {key:?} cannot be ordered: {e}")))?;
        Ok(Self {
            names: key.to_vec(),
            indices,
            converter,
        })
    }

    /// The key rows of `batch`, whose key columns are found by name (the
    /// batch may hold other columns too). `InvalidArgument` if one is
    /// missing; an Arrow error if its type is not the key's.
    pub fn rows(&self, batch: &RecordBatch) -> Result<Rows> {
        Ok(self
            .converter
            .convert_columns(&key_columns(batch, &self.names)?)?)
    }

    /// The key rows of several batches, appended into one [`Rows`]: row `i`
    /// of batch `b` is at the sum of the earlier batches' lengths plus `i`.
    pub fn rows_of_all(&self, batches: &[RecordBatch]) -> Result<Rows> {
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        let mut rows = self.converter.empty_rows(n, n * 16);
        self.append_rows(&mut rows, batches)?;
        Ok(rows)
    }

    /// Append the keys of `batches`' rows to `rows` (made by this encoder:
    /// [`Self::rows_of_all`]).
    pub fn append_rows(&self, rows: &mut Rows, batches: &[RecordBatch]) -> Result<()> {
        for b in batches {
            self.converter.append(rows, &key_columns(b, &self.names)?)?;
        }
        Ok(())
    }

    /// The key of row `i` of `batch` (owned).
    pub fn key_of(&self, batch: &RecordBatch, i: usize) -> Result<arrow_row::OwnedRow> {
        Ok(self.rows(&batch.slice(i, 1))?.row(0).owned())
    }

    /// Positions of the key columns in the schema.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

/// The first of `0..n` for which `below` is false (`below` is true, then
/// false, along `0..n`): a binary search whose probe may fail.
pub fn lower_bound(n: usize, mut below: impl FnMut(usize) -> Result<bool>) -> Result<usize> {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid)? {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The key of row `row` of `batch` as JSON values, one per key column (as
/// parts record their first and last keys).
pub fn key_values(
    batch: &RecordBatch,
    key: &[String],
    row: usize,
) -> Vec<Option<serde_json::Value>> {
    key.iter()
        .map(|k| {
            batch
                .column_by_name(k)
                .and_then(|c| crate::parquet::stats::to_json(c.as_ref(), row))
        })
        .collect()
}
