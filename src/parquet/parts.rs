//! Encoding whole parts into memory, several at once, for stores that take
//! bytes (remote-store backends other than pds's own).
//!
//! Parts are cut by [`Splitter`] and encoded `parallelism` at a time on scoped
//! threads (no global pool, so a forked Spark worker is safe). At most one
//! window of encoded parts is held.

use std::collections::VecDeque;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::SchemaRef;
use bytes::Bytes;

use crate::error::{Error, Result};
use crate::parquet::encode::{encode_to_bytes, EncodeOptions, PartSummary};
use crate::parquet::split::{Piece, Splitter};

/// One encoded part. `last` is true for the final part of the dataset.
#[derive(Debug, Clone)]
pub struct EncodedPart {
    pub index: usize,
    pub data: Bytes,
    pub summary: PartSummary,
    pub last: bool,
}

type BoxedReader = Box<dyn RecordBatchReader + Send>;

/// An iterator of encoded parts, in order.
pub struct EncodedParts {
    schema: SchemaRef,
    splitter: Splitter<BoxedReader>,
    opts: EncodeOptions,
    parallelism: usize,
    ready: VecDeque<EncodedPart>,
    next_index: usize,
    finished: bool,
}

impl EncodedParts {
    pub fn new(reader: BoxedReader, opts: EncodeOptions, parallelism: usize) -> Self {
        let schema = reader.schema();
        let max = opts.max_rows_per_file;
        Self {
            schema,
            splitter: Splitter::new(reader, max),
            opts,
            parallelism: parallelism.max(1),
            ready: VecDeque::new(),
            next_index: 0,
            finished: false,
        }
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Cut up to `parallelism` parts from the input and encode them at once.
    fn fill(&mut self) -> Result<()> {
        let mut groups: Vec<(Vec<RecordBatch>, bool)> = Vec::new();
        let mut current = Vec::new();
        while groups.len() < self.parallelism {
            match self.splitter.next() {
                None => break,
                Some(Err(e)) => return Err(e),
                Some(Ok(Piece::Batch(b))) => current.push(b),
                Some(Ok(Piece::EndOfPart { last })) => {
                    groups.push((std::mem::take(&mut current), last));
                    if last {
                        break;
                    }
                }
            }
        }
        if groups.last().is_none_or(|(_, last)| *last) {
            self.finished = true;
        }
        let schema = &self.schema;
        let opts = &self.opts;
        let encoded: Vec<Result<(Bytes, PartSummary)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .iter()
                .map(|(batches, _)| {
                    scope.spawn(move || {
                        crate::error::contained(|| encode_to_bytes(batches, schema.clone(), opts))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|payload| {
                        Err(crate::parquet::encode::encoder_panic(
                            crate::error::panic_message(payload.as_ref()),
                        ))
                    })
                })
                .collect()
        });
        for ((_, last), result) in groups.iter().zip(encoded) {
            let (data, summary) = result?;
            self.ready.push_back(EncodedPart {
                index: self.next_index,
                data,
                summary,
                last: *last,
            });
            self.next_index += 1;
        }
        Ok(())
    }
}

impl Iterator for EncodedParts {
    type Item = Result<EncodedPart>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ready.is_empty() && !self.finished {
            if let Err(e) = self.fill() {
                self.finished = true;
                return Some(Err(e));
            }
        }
        self.ready.pop_front().map(Ok)
    }
}

/// Decode several in-memory parts at once; results keep the input order.
pub fn decode_parts(
    parts: Vec<(String, Bytes)>,
    opts: &crate::parquet::decode::ReadOptions,
) -> Result<Vec<crate::parquet::decode::Decoded>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|(name, data)| {
                let fallback = name.clone();
                (
                    fallback,
                    scope.spawn(move || {
                        crate::error::contained(|| {
                            crate::parquet::decode::decode_bytes(data, &name, opts)
                        })
                    }),
                )
            })
            .collect();
        // decode_bytes contains decoder panics itself; this is the last line.
        handles
            .into_iter()
            .map(|(name, h)| {
                h.join().unwrap_or_else(|payload| {
                    Err(Error::PartCorrupted {
                        path: name,
                        reason: format!(
                            "the Parquet decoder failed on its bytes ({})",
                            crate::error::panic_message(payload.as_ref())
                        ),
                    })
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, RecordBatchIterator};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn parts_come_out_in_order_with_last_flag() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..55))],
        )
        .unwrap();
        let reader = Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema));
        let opts = EncodeOptions::new("zstd", None, Some(10)).unwrap();
        let parts: Vec<EncodedPart> = EncodedParts::new(reader, opts, 2)
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(parts.len(), 6);
        assert!(parts
            .iter()
            .enumerate()
            .all(|(i, p)| p.index == i && p.last == (i == 5)));
        assert_eq!(parts.iter().map(|p| p.summary.row_count).sum::<u64>(), 55);
        let decoded = decode_parts(
            parts
                .iter()
                .map(|p| (format!("p{}", p.index), p.data.clone()))
                .collect(),
            &Default::default(),
        )
        .unwrap();
        let first = decoded[1].batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(first, 10);
    }
}
