//! Filters applied to decoded batches: a predicate, key-range excludes
//! and scattered deletes.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::DataType;

use super::corrupt;
use super::selection::KeptRows;
use crate::error::Result;
use crate::parquet::filter::{Predicate, UnitStats};

/// Deletes applied to the decoded batches: scattered positions, and rows
/// matching a key range (null never matches).
#[derive(Debug)]
pub(super) struct PostFilter {
    pub(super) kept: Option<KeptRows>,
    pub(super) exclude: Vec<Predicate>,
}

impl PostFilter {
    /// `batch`, the reader's next rows (file columns, before projection),
    /// without those deleted. A reader that yields more rows than its row
    /// groups declared is a corrupt file.
    pub(super) fn apply(&mut self, batch: RecordBatch, path: &str) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let mut keep = None;
        if let Some(k) = &mut self.kept {
            if k.at + n > k.mask.len() {
                return Err(corrupt(
                    path,
                    format!(
                        "the decoder yielded more than the {} rows its row groups declare",
                        k.mask.len()
                    ),
                ));
            }
            keep = Some(k.mask.slice(k.at, n));
            k.at += n;
        }
        let mut bounds: Vec<(String, Option<(ArrayRef, ArrayRef)>)> = Vec::new();
        for e in &self.exclude {
            // A key range the batch's own bounds rule out costs no comparison.
            let may = e.may_match(&[n as u64], |column| {
                let known = match bounds.iter().find(|(c, _)| c == column) {
                    Some((_, b)) => b.clone(),
                    None => {
                        let b = batch.column_by_name(column).and_then(batch_bounds);
                        bounds.push((column.to_string(), b.clone()));
                        b
                    }
                };
                Ok(match known {
                    Some((lo, hi)) => UnitStats {
                        mins: Some(lo),
                        maxs: Some(hi),
                        null_counts: None,
                    },
                    None => UnitStats::default(),
                })
            })?;
            if may.first() == Some(&false) {
                continue;
            }
            let spared = !e.evaluate(&batch)?.values();
            keep = Some(match keep {
                Some(k) => &k & &spared,
                None => spared,
            });
        }
        match keep {
            Some(k) if k.count_set_bits() < n => Ok(arrow_select::filter::filter_record_batch(
                &batch,
                &BooleanArray::new(k, None),
            )?),
            _ => Ok(batch),
        }
    }
}

/// The least and greatest value of an integer, date or timestamp column,
/// as one-row arrays of its type (statistics for
/// [`Predicate::may_match`]); `None` for other types or no value.
pub(super) fn batch_bounds(col: &ArrayRef) -> Option<(ArrayRef, ArrayRef)> {
    fn of<T: arrow_array::ArrowPrimitiveType>(
        a: &arrow_array::PrimitiveArray<T>,
    ) -> Option<(ArrayRef, ArrayRef)> {
        let one = |v: T::Native| -> ArrayRef {
            Arc::new(
                arrow_array::PrimitiveArray::<T>::new(vec![v].into(), None)
                    .with_data_type(arrow_array::Array::data_type(a).clone()),
            )
        };
        Some((
            one(arrow_arith::aggregate::min(a)?),
            one(arrow_arith::aggregate::max(a)?),
        ))
    }
    let t = col.data_type();
    if !(t.is_integer()
        || matches!(
            t,
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _)
        ))
    {
        return None;
    }
    arrow_array::downcast_primitive_array!(
        col => of(col),
        _ => None
    )
}
