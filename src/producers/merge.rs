//! A streaming k-way merge of streams sorted by the same key.
//!
//! Each input holds one batch (and its key rows) at a time; a binary heap of
//! inputs ordered by their current row picks the next row. Output batches
//! are gathered with arrow's `interleave`, so values are copied once. Ties
//! are taken in input order, so merging stable runs in order stays stable.

use std::cmp::Ordering;

use arrow_array::RecordBatch;
use arrow_row::Rows;
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
use super::BatchIter;
use crate::error::{Error, Result};

/// Batches with their key rows.
type KeyedIter = Box<dyn Iterator<Item = Result<(RecordBatch, Rows)>> + Send>;

struct Input {
    stream: KeyedIter,
    batch: RecordBatch,
    rows: Rows,
    pos: usize,
    /// Index of `batch` in the output chunk's batch list.
    slot: usize,
}

/// Merges sorted inputs into one sorted stream.
struct Merge {
    schema: SchemaRef,
    inputs: Vec<Input>,
    /// Input indices, a min-heap by (current row, input index).
    heap: Vec<usize>,
    batch_rows: usize,
    /// Rows of the next output chunk (the first may be shorter: see
    /// [`merge_sorted_from`]).
    want: usize,
    /// Batches referenced by the chunk being gathered.
    slots: Vec<RecordBatch>,
    failed: bool,
}

impl Merge {
    fn less(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.inputs[a], &self.inputs[b]);
        match x.rows.row(x.pos).cmp(&y.rows.row(y.pos)) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => a < b,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.less(self.heap[l], self.heap[m]) {
                m = l;
            }
            if r < n && self.less(self.heap[r], self.heap[m]) {
                m = r;
            }
            if m == i {
                return;
            }
            self.heap.swap(i, m);
            i = m;
        }
    }

    /// The next batch of `stream` (never empty), with its key rows.
    fn pull(stream: &mut KeyedIter) -> Result<Option<(RecordBatch, Rows)>> {
        stream.next().transpose()
    }

    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let want = std::mem::replace(&mut self.want, self.batch_rows);
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(want);
        while picks.len() < want && !self.heap.is_empty() {
            let top = self.heap[0];
            let input = &mut self.inputs[top];
            picks.push((input.slot, input.pos));
            input.pos += 1;
            if input.pos == input.batch.num_rows() {
                match Self::pull(&mut input.stream)? {
                    Some((batch, rows)) => {
                        input.batch = batch.clone();
                        input.rows = rows;
                        input.pos = 0;
                        input.slot = self.slots.len();
                        self.slots.push(batch);
                    }
                    None => {
                        let last = self.heap.len() - 1;
                        self.heap.swap(0, last);
                        self.heap.pop();
                    }
                }
            }
            if !self.heap.is_empty() {
                self.sift_down(0);
            }
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&RecordBatch> = self.slots.iter().collect();
        let out = arrow_select::interleave::interleave_record_batch(&refs, &picks)?;
        // The next chunk references only the inputs' current batches.
        self.slots.clear();
        for input in &mut self.inputs {
            input.slot = self.slots.len();
            self.slots.push(input.batch.clone());
        }
        if out.schema() != self.schema {
            return Ok(Some(out.with_schema(self.schema.clone())?));
        }
        Ok(Some(out))
    }
}

impl Iterator for Merge {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_chunk() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Merge `inputs`, each sorted by `key`, into one stream sorted by `key`, in
/// batches of at most `batch_rows` rows.
pub fn merge_sorted(
    schema: SchemaRef,
    key: &[String],
    inputs: Vec<BatchIter>,
    batch_rows: usize,
) -> Result<BatchIter> {
    merge_sorted_on(schema, key, inputs, batch_rows, 1)
}

/// Batches read ahead per input when inputs are read on threads.
const READ_AHEAD: usize = 2;

/// [`merge_sorted`], with each input read and its key rows computed ahead
/// on a thread of its own when `threads` > 1 (at most [`READ_AHEAD`] + 1
/// batches per input in memory besides the merge's). The output does not
/// depend on `threads`.
pub fn merge_sorted_on(
    schema: SchemaRef,
    key: &[String],
    inputs: Vec<BatchIter>,
    batch_rows: usize,
    threads: usize,
) -> Result<BatchIter> {
    merge_sorted_from(schema, key, inputs, batch_rows, batch_rows, threads)
}

/// [`merge_sorted_on`] whose first output chunk holds at most `first_rows`
/// rows (1 to `batch_rows`): the merge of a stretch that starts
/// `batch_rows - first_rows` rows past a multiple of `batch_rows` in a
/// longer output cuts its chunks where that output's chunks are cut.
pub fn merge_sorted_from(
    schema: SchemaRef,
    key: &[String],
    inputs: Vec<BatchIter>,
    batch_rows: usize,
    first_rows: usize,
    threads: usize,
) -> Result<BatchIter> {
    if batch_rows == 0 || first_rows == 0 || first_rows > batch_rows {
        return Err(Error::InvalidArgument(format!(
            "batch_rows must be >= 1 and first_rows from 1 to batch_rows, not {batch_rows} and {first_rows}"
        )));
    }
    let encoder = std::sync::Arc::new(KeyEncoder::new(&schema, key)?);
    let mut merge = Merge {
        schema,
        inputs: Vec::with_capacity(inputs.len()),
        heap: Vec::new(),
        batch_rows,
        want: first_rows,
        slots: Vec::new(),
        failed: false,
    };
    for stream in inputs {
        let mut stream = keyed(encoder.clone(), stream, threads > 1);
        if let Some((batch, rows)) = Merge::pull(&mut stream)? {
            let slot = merge.slots.len();
            merge.slots.push(batch.clone());
            merge.inputs.push(Input {
                stream,
                batch,
                rows,
                pos: 0,
                slot,
            });
        }
    }
    merge.heap = (0..merge.inputs.len()).collect();
    for i in (0..merge.heap.len() / 2).rev() {
        merge.sift_down(i);
    }
    Ok(Box::new(merge))
}

/// The non-empty batches of `stream` with their key rows; read on a thread
/// of its own (a few batches ahead) if `ahead`. The thread stops when the
/// stream ends, fails, or the returned iterator is dropped; a panic in it
/// arrives as the typed internal error.
fn keyed(encoder: std::sync::Arc<KeyEncoder>, stream: BatchIter, ahead: bool) -> KeyedIter {
    let step = {
        let encoder = encoder.clone();
        move |b: Result<RecordBatch>| -> Option<Result<(RecordBatch, Rows)>> {
            match b {
                Ok(b) if b.num_rows() == 0 => None,
                Ok(b) => Some(encoder.rows(&b).map(|r| (b, r))),
                Err(e) => Some(Err(e)),
            }
        }
    };
    if !ahead {
        return Box::new(stream.filter_map(step));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(RecordBatch, Rows)>>(READ_AHEAD);
    let spawned = std::thread::Builder::new()
        .name("pds-merge-read".into())
        .spawn(move || {
            let mut stream = stream;
            loop {
                let got = crate::error::catch(|| stream.by_ref().find_map(&step))
                    .unwrap_or_else(|msg| Some(Err(crate::error::internal_panic(msg))));
                let Some(got) = got else { return };
                let stop = got.is_err();
                if tx.send(got).is_err() || stop {
                    return;
                }
            }
        });
    match spawned {
        Ok(_) => Box::new(rx.into_iter()),
        Err(e) => Box::new(std::iter::once(Err(Error::Task(format!(
            "a merge thread could not start: {e}"
        ))))),
    }
}

/// `stream` (sorted by `key`) with each run of rows of equal `key` cut to
/// its first row: the distinct keys of a sorted stream, say. Streaming.
pub fn dedup_sorted(schema: SchemaRef, key: &[String], stream: BatchIter) -> Result<BatchIter> {
    let encoder = KeyEncoder::new(&schema, key)?;
    let mut last: Option<arrow_row::OwnedRow> = None;
    Ok(Box::new(stream.filter_map(move |b| {
        let step = (|| {
            let b = b?;
            if b.num_rows() == 0 {
                return Ok(None);
            }
            let rows = encoder.rows(&b)?;
            let mask: arrow_array::BooleanArray = (0..b.num_rows())
                .map(|i| {
                    let r = rows.row(i);
                    let new = last.as_ref().is_none_or(|l| l.row() != r);
                    if new {
                        last = Some(r.owned());
                    }
                    Some(new)
                })
                .collect();
            let kept = arrow_select::filter::filter_record_batch(&b, &mask)?;
            Ok((kept.num_rows() > 0).then_some(kept))
        })();
        step.transpose()
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producers::sort::tests::{batch, collect, schema};
    use crate::producers::sort::ExternalSorter;

    #[test]
    fn merges_sorted_streams_stably() {
        let key = vec!["k".to_string()];
        let mut all = Vec::new();
        let mut inputs: Vec<BatchIter> = Vec::new();
        for i in 0..6 {
            let mut s = ExternalSorter::new(schema(), &key, 1 << 30, None).unwrap();
            for j in 0..(i + 1) {
                let b = batch((i * 100 + j) * 1000, 300, (i * 31 + j + 1) as u64);
                all.extend(collect(Box::new(std::iter::once(Ok(b.clone())))));
                s.push(b).unwrap();
            }
            inputs.push(s.finish().unwrap());
        }
        inputs.push(Box::new(std::iter::empty()));
        let got = collect(merge_sorted(schema(), &key, inputs, 77).unwrap());
        all.sort_by_key(|r| r.0); // stable: ties keep input order (inputs are in v order)
        assert_eq!(got.len(), all.len());
        assert_eq!(got, all);
    }
}
