//! Cutting a stream of record batches into parts of at most N rows.
//!
//! Batches are sliced, never copied. The splitter looks one batch ahead, so
//! that when a part closes it already knows whether another part follows:
//! remote-store names a lone part `data.parquet` and several `part-NNNNN`.

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;

use crate::error::Result;

/// What the splitter yields, in order.
#[derive(Debug)]
pub enum Piece {
    /// A batch (or slice) that belongs to the current part.
    Batch(RecordBatch),
    /// The current part is complete. `last` is true if no part follows.
    EndOfPart { last: bool },
}

/// Splits batches from `input` into parts of at most `max_rows` rows.
///
/// Always yields at least one part, so an empty input makes one empty part.
pub struct Splitter<I> {
    input: I,
    max_rows: Option<usize>,
    pending: Option<RecordBatch>,
    rows_in_part: usize,
    done: bool,
}

impl<I> Splitter<I>
where
    I: Iterator<Item = std::result::Result<RecordBatch, ArrowError>>,
{
    pub fn new(input: I, max_rows: Option<usize>) -> Self {
        Self {
            input,
            max_rows,
            pending: None,
            rows_in_part: 0,
            done: false,
        }
    }

    fn pull(&mut self) -> Result<Option<RecordBatch>> {
        for batch in self.input.by_ref() {
            let batch = batch?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
        Ok(None)
    }
}

impl<I> Iterator for Splitter<I>
where
    I: Iterator<Item = std::result::Result<RecordBatch, ArrowError>>,
{
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let batch = match self.pending.take() {
            Some(b) => b,
            None => match self.pull() {
                Ok(Some(b)) => b,
                Ok(None) => {
                    self.done = true;
                    return Some(Ok(Piece::EndOfPart { last: true }));
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            },
        };
        let Some(max) = self.max_rows else {
            return Some(Ok(Piece::Batch(batch)));
        };
        if self.rows_in_part == max {
            // The part is full and `batch` proves another one follows.
            self.pending = Some(batch);
            self.rows_in_part = 0;
            return Some(Ok(Piece::EndOfPart { last: false }));
        }
        let take = (max - self.rows_in_part).min(batch.num_rows());
        self.rows_in_part += take;
        if take < batch.num_rows() {
            self.pending = Some(batch.slice(take, batch.num_rows() - take));
            Some(Ok(Piece::Batch(batch.slice(0, take))))
        } else {
            Some(Ok(Piece::Batch(batch)))
        }
    }
}

/// The file name of part `index`, given whether the dataset has only one part.
pub fn part_name(index: usize, single: bool) -> String {
    if single {
        "data.parquet".to_string()
    } else {
        format!("part-{index:05}.parquet")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(n: i32) -> RecordBatch {
        let s = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
        RecordBatch::try_new(s, vec![Arc::new(Int32Array::from_iter_values(0..n))]).unwrap()
    }

    /// Rows per part, and whether each end was flagged last.
    fn shape(sizes: &[i32], max: Option<usize>) -> Vec<(usize, bool)> {
        let input = sizes.iter().map(|&n| Ok(batch(n)));
        let mut out = Vec::new();
        let mut rows = 0;
        for p in Splitter::new(input, max) {
            match p.unwrap() {
                Piece::Batch(b) => rows += b.num_rows(),
                Piece::EndOfPart { last } => {
                    out.push((rows, last));
                    rows = 0;
                }
            }
        }
        out
    }

    #[test]
    fn splits_at_max_rows() {
        assert_eq!(
            shape(&[10, 10, 5], Some(10)),
            vec![(10, false), (10, false), (5, true)]
        );
        assert_eq!(
            shape(&[25], Some(10)),
            vec![(10, false), (10, false), (5, true)]
        );
        assert_eq!(shape(&[20], Some(10)), vec![(10, false), (10, true)]);
        assert_eq!(shape(&[3, 4], None), vec![(7, true)]);
    }

    #[test]
    fn empty_input_makes_one_empty_part() {
        assert_eq!(shape(&[], Some(10)), vec![(0, true)]);
        assert_eq!(shape(&[0, 0], None), vec![(0, true)]);
    }

    #[test]
    fn names_follow_remote_store() {
        assert_eq!(part_name(0, true), "data.parquet");
        assert_eq!(part_name(12, false), "part-00012.parquet");
    }
}
