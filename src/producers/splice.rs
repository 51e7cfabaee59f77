//! Sorted rows located and replaced by key, without merging: the primitive
//! behind patches (see [`super::patch`]) and part rewrites.
//!
//! A [`Sorted`] holds a part's rows (sorted by a key whose leading columns
//! are the *cut key*) with the cut key's row-format encoding of every row.
//! The rows of a cut-key value are one contiguous run, found by binary
//! search. [`Sorted::splice`] replaces the runs of some values with other
//! rows (each value's new rows, in sort order) by slicing: the output is
//! the kept stretches of the input (zero-copy slices) with the new rows
//! between them, so its cost is a binary search per value plus the
//! encoding of the cut key, not a k-way merge of every row.

use std::ops::Range;

use arrow_array::RecordBatch;
use arrow_row::Rows;
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
use super::sort::BATCH_ROWS;
use crate::error::{Error, Result};

/// Rows sorted by a key led by the cut key, with the cut key's rows.
pub struct Sorted {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// The cut key of every row, in order across the batches.
    keys: Rows,
    /// Where each batch starts, then the total.
    starts: Vec<usize>,
}

impl Sorted {
    /// `batches` (of `schema`, sorted) with their cut keys encoded by `cut`.
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>, cut: &KeyEncoder) -> Result<Self> {
        let batches: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
        let keys = cut.rows_of_all(&batches)?;
        let mut starts = Vec::with_capacity(batches.len() + 1);
        let mut at = 0;
        for b in &batches {
            starts.push(at);
            at += b.num_rows();
        }
        starts.push(at);
        Ok(Self {
            schema,
            batches,
            keys,
            starts,
        })
    }

    pub fn len(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cut key of row `i` (row-format bytes).
    pub fn key(&self, i: usize) -> &[u8] {
        self.keys.row(i).data()
    }

    /// The first row whose cut key is `>= key` (`strict`: `> key`).
    fn bound(&self, key: &[u8], strict: bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let k = self.key(mid);
            if k < key || (strict && k == key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The rows of cut-key value `key`: a range, empty where the value
    /// would go if it has no row.
    pub fn run(&self, key: &[u8]) -> Range<usize> {
        self.bound(key, false)..self.bound(key, true)
    }

    /// The runs of the values `keys` (sorted, distinct), in order: one
    /// pass, each search starting where the previous value's run ended
    /// (galloping), so sorted keys cost about their count, not a full
    /// binary search each.
    pub fn runs(&self, keys: &[Box<[u8]>]) -> Vec<Range<usize>> {
        let mut out = Vec::with_capacity(keys.len());
        let mut at = 0;
        for k in keys {
            let start = self.gallop(at, k, false);
            let end = self.gallop(start, k, true);
            out.push(start..end);
            at = end;
        }
        out
    }

    /// The distinct cut-key values that begin with one of `prefixes`
    /// (row-format bytes of the cut key's leading columns, sorted,
    /// distinct), in order: a galloping search per prefix and per value,
    /// not a pass over every row.
    pub fn keys_with_prefix(&self, prefixes: &[Box<[u8]>]) -> Vec<Box<[u8]>> {
        let mut out: Vec<Box<[u8]>> = Vec::new();
        let mut at = 0;
        for p in prefixes {
            let mut i = self.gallop(at, p, false);
            while i < self.len() && self.key(i).starts_with(p) {
                let k = self.key(i);
                out.push(Box::from(k));
                // Past this value's run (at least a row on: rows from a
                // store may be out of order).
                i = self.gallop(i, k, true).max(i + 1);
            }
            at = i;
        }
        out
    }

    /// The first row at or after `from` whose key is `>= key` (`strict`:
    /// `> key`), rows before `from` being below it.
    fn gallop(&self, from: usize, key: &[u8], strict: bool) -> usize {
        let below = |i: usize| {
            let k = self.key(i);
            k < key || (strict && k == key)
        };
        let n = self.len();
        if from >= n || !below(from) {
            return from;
        }
        // below(lo) holds; widen until hi is past the bound (or the end).
        let (mut lo, mut step) = (from, 1);
        let mut hi = loop {
            let probe = lo + step;
            if probe >= n || !below(probe) {
                break probe.min(n);
            }
            lo = probe;
            step *= 2;
        };
        // below(lo), and hi is the end or not below: bisect (lo, hi].
        lo += 1;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if below(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Rows `range` as zero-copy slices of the batches.
    pub fn slices(&self, range: Range<usize>) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        if range.is_empty() {
            return out;
        }
        // The batch holding the range's first row.
        let mut b = self.starts.partition_point(|&s| s <= range.start) - 1;
        let mut at = range.start;
        while at < range.end && b < self.batches.len() {
            let (start, end) = (self.starts[b], self.starts[b + 1]);
            let stop = end.min(range.end);
            if stop > at {
                out.push(self.batches[b].slice(at - start, stop - at));
            }
            at = stop;
            b += 1;
        }
        out
    }

    /// The rows of `runs` (from [`Self::runs`]), coalesced (see
    /// [`coalesce`]), and how many.
    pub fn take(&self, runs: &[Range<usize>]) -> Result<(Vec<RecordBatch>, usize)> {
        let mut out = Vec::new();
        let mut n = 0;
        for r in runs {
            n += r.len();
            out.extend(self.slices(r.clone()));
        }
        Ok((coalesce(&self.schema, out)?, n))
    }

    /// The rows with each range of `with` (in order, disjoint) replaced by
    /// the rows given for it; every other row is kept, in order. Returned
    /// as slices (see the module docs) coalesced into batches of about
    /// [`BATCH_ROWS`] rows where they are small.
    pub fn splice_runs(
        &self,
        with: Vec<(Range<usize>, Vec<RecordBatch>)>,
    ) -> Result<Vec<RecordBatch>> {
        let mut pieces: Vec<RecordBatch> = Vec::with_capacity(2 * with.len() + 1);
        let mut at = 0;
        for (r, rows) in with {
            if r.start < at || r.end > self.len() {
                return Err(Error::Task("splice: ranges out of order".into()));
            }
            pieces.extend(self.slices(at..r.start));
            pieces.extend(rows.into_iter().filter(|b| b.num_rows() > 0));
            at = r.end;
        }
        pieces.extend(self.slices(at..self.len()));
        coalesce(&self.schema, pieces)
    }

    /// Row `i` as a one-row batch.
    pub fn row_batch(&self, i: usize) -> Option<RecordBatch> {
        self.slices(i..i + 1).pop()
    }
}

/// Runs of small batches concatenated into batches of about
/// [`BATCH_ROWS`] rows; large ones are passed on as they are.
pub fn coalesce(schema: &SchemaRef, pieces: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut rows = 0;
    let flush = |pending: &mut Vec<RecordBatch>, out: &mut Vec<RecordBatch>| -> Result<()> {
        match pending.len() {
            0 => {}
            1 => out.append(pending),
            _ => {
                out.push(arrow_select::concat::concat_batches(
                    schema,
                    pending.iter(),
                )?);
                pending.clear();
            }
        }
        Ok(())
    };
    for p in pieces {
        if p.num_rows() >= BATCH_ROWS / 2 {
            flush(&mut pending, &mut out)?;
            rows = 0;
            out.push(p);
            continue;
        }
        rows += p.num_rows();
        pending.push(p);
        if rows >= BATCH_ROWS {
            flush(&mut pending, &mut out)?;
            rows = 0;
        }
    }
    flush(&mut pending, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ]))
    }

    fn batch(rows: &[(i64, i64)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    }

    fn pairs(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
        batches
            .iter()
            .flat_map(|b| {
                let (k, v) = (
                    b.column(0).as_primitive::<Int64Type>(),
                    b.column(1).as_primitive::<Int64Type>(),
                );
                (0..b.num_rows())
                    .map(|i| (k.value(i), v.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Splicing agrees with a model for random sorted inputs cut into
    /// random batches (runs crossing batch boundaries) and random
    /// replacements (new values, removed ones, replaced ones).
    #[test]
    fn splice_agrees_with_a_model() {
        let cut = KeyEncoder::new(&schema(), &["k".to_string()]).unwrap();
        let mut rng = crate::test_rng::TestRng::new(0x1234_5678_9abc_def1);
        let mut below = |n: u64| rng.below(n);
        for _ in 0..200 {
            let mut rows: Vec<(i64, i64)> = (0..below(60))
                .map(|_| (below(20) as i64 * 2, below(5) as i64))
                .collect();
            rows.sort();
            let mut batches = Vec::new();
            let mut at = 0;
            while at < rows.len() {
                let n = 1 + below(7) as usize;
                batches.push(batch(&rows[at..(at + n).min(rows.len())]));
                at += n;
            }
            let s = Sorted::new(schema(), batches, &cut).unwrap();
            let mut model: std::collections::BTreeMap<i64, Vec<(i64, i64)>> = Default::default();
            for r in &rows {
                model.entry(r.0).or_default().push(*r);
            }
            let mut with: Vec<(Box<[u8]>, Vec<RecordBatch>)> = Vec::new();
            let mut keys: Vec<i64> = (0..below(8)).map(|_| below(42) as i64).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let new: Vec<(i64, i64)> = (0..below(3)).map(|v| (k, v as i64)).collect();
                let kb = cut.rows(&batch(&[(k, 0)])).unwrap();
                let key: Box<[u8]> = Box::from(kb.row(0).data());
                assert_eq!(s.runs(std::slice::from_ref(&key))[0], s.run(&key));
                let (taken, n) = s.take(&s.runs(&[key])).unwrap();
                assert_eq!(pairs(&taken), model.get(&k).cloned().unwrap_or_default());
                assert_eq!(n, model.get(&k).map_or(0, |v| v.len()));
                if new.is_empty() {
                    model.remove(&k);
                } else {
                    model.insert(k, new.clone());
                }
                with.push((Box::from(kb.row(0).data()), vec![batch(&new)]));
            }
            let keys: Vec<Box<[u8]>> = with.iter().map(|(k, _)| k.clone()).collect();
            let runs = s.runs(&keys);
            let got = pairs(
                &s.splice_runs(
                    runs.into_iter()
                        .zip(with.into_iter().map(|(_, rows)| rows))
                        .collect(),
                )
                .unwrap(),
            );
            let want: Vec<(i64, i64)> = model.into_values().flatten().collect();
            assert_eq!(got, want);
        }
    }
}
