//! Compound keys as arrow's row format: each row's key columns encoded into
//! bytes that compare like the values (nulls first), so that sorting,
//! merging and grouping compare one byte string per row.

use arrow_array::RecordBatch;
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::Schema;

use crate::error::{Error, Result};

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
        let columns = self
            .names
            .iter()
            .map(|n| {
                batch.column_by_name(n).cloned().ok_or_else(|| {
                    Error::InvalidArgument(format!("key column {n:?} is missing from a batch"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.converter.convert_columns(&columns)?)
    }

    /// Positions of the key columns in the schema.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}
