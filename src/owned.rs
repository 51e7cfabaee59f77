//! Copies of Arrow data in buffers of their own.
//!
//! A batch imported through the Arrow C Data Interface (from Python) is
//! owned by one release callback: every column, slice or zero-copy cast
//! taken from it keeps the whole batch alive, and its memory size counts
//! whole buffers, not the slice. Data kept past the batch (keys kept until
//! a commit, rows queued for a sort) is copied here first.

use arrow_array::{make_array, Array, ArrayRef, RecordBatch};
use arrow_data::transform::MutableArrayData;

use crate::error::{Error, Result};

/// Rows `start..start + len` of `array`, copied; `Task` if they are not
/// all in it.
pub fn array_slice(array: &dyn Array, start: usize, len: usize) -> Result<ArrayRef> {
    if start.checked_add(len).is_none_or(|end| end > array.len()) {
        return Err(Error::Task(format!(
            "rows {start}..+{len} of an array of {} rows",
            array.len()
        )));
    }
    let data = array.to_data();
    let mut copy = MutableArrayData::new(vec![&data], false, len);
    copy.try_extend(0, start, start + len)?;
    Ok(make_array(copy.freeze()))
}

/// A copy of `array`.
pub fn array(array: &dyn Array) -> Result<ArrayRef> {
    array_slice(array, 0, array.len())
}

/// Rows `start..start + len` of `batch`, every column copied.
pub fn batch_slice(batch: &RecordBatch, start: usize, len: usize) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| array_slice(c.as_ref(), start, len))
        .collect::<Result<Vec<_>>>()?;
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(len));
    Ok(RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &options,
    )?)
}

/// A copy of `batch`.
pub fn batch(batch: &RecordBatch) -> Result<RecordBatch> {
    batch_slice(batch, 0, batch.num_rows())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn sample() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let k = Int64Array::from_iter_values(0..1000);
        let v = StringArray::from_iter((0..1000).map(|i| (i % 3 != 0).then(|| format!("v{i}"))));
        RecordBatch::try_new(schema, vec![Arc::new(k), Arc::new(v)]).expect("a valid batch")
    }

    #[test]
    fn a_slice_is_copied_into_buffers_of_its_size() {
        let b = sample();
        let s = batch_slice(&b, 100, 10).expect("copied");
        assert_eq!(s, b.slice(100, 10));
        // The copy's buffers hold its rows only, not the source's.
        assert!(s.get_array_memory_size() < b.slice(100, 10).get_array_memory_size() / 10);
        assert_eq!(batch(&b).expect("copied"), b);
        let empty = batch_slice(&b, 1000, 0).expect("copied");
        assert_eq!(empty.num_rows(), 0);
    }

    #[test]
    fn a_slice_past_the_end_is_an_error_not_a_panic() {
        let b = sample();
        assert!(matches!(batch_slice(&b, 990, 20), Err(Error::Task(_))));
        assert!(matches!(
            batch_slice(&b, usize::MAX, 2),
            Err(Error::Task(_))
        ));
    }
}
