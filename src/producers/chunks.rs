//! What a stage's `Produce` is handed: chunks of groups.
//!
//! A [`Chunk`] holds, for a run of consecutive keys, each source's rows and
//! where each key's rows start (`offsets`). The row form may get a group
//! cut over several chunks (a group larger than memory), the later ones
//! marked `continued`, so memory stays one chunk whatever a group's size.
//! The batched form hands whole groups, except a group too large for one
//! chunk ([`WHOLE_FACTOR`] × the chunk's rows): it comes in several chunks
//! likewise, so memory is bounded there too.

use arrow_array::{RecordBatch, UInt32Array};
use arrow_row::{OwnedRow, Rows};
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
use super::partset::Splitter;
use super::BatchIter;
use crate::error::{Error, Result};

/// Consecutive keys and each source's rows for them.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The keys, distinct, in order (key columns).
    pub keys: RecordBatch,
    /// Per source: its rows (public columns) and `keys.num_rows() + 1`
    /// offsets: key `i`'s rows are `offsets[i]..offsets[i + 1]`.
    pub sources: Vec<(RecordBatch, Vec<u32>)>,
    /// The first key goes on from the previous chunk (row form only).
    pub continued: bool,
}

/// Where each run of equal rows starts, and the end.
fn run_starts(rows: &Rows, n: usize) -> Vec<u32> {
    let mut starts = Vec::new();
    for i in 0..n {
        if i == 0 || rows.row(i) != rows.row(i - 1) {
            starts.push(i as u32);
        }
    }
    starts.push(n as u32);
    starts
}

/// A chunk asked for whole groups ends inside a group only past this many
/// times the rows asked for (see the module docs).
pub const WHOLE_FACTOR: usize = 8;

fn concat(schema: &SchemaRef, parts: &[RecordBatch]) -> Result<RecordBatch> {
    Ok(arrow_select::concat::concat_batches(schema, parts)?)
}

/// Chunks of one sorted source.
pub struct SingleChunker {
    stream: BatchIter,
    schema: SchemaRef,
    encoder: KeyEncoder,
    key_idx: Vec<usize>,
    carry: Option<RecordBatch>,
    last: Option<OwnedRow>,
}

impl SingleChunker {
    /// Over `stream` (batches of `schema`, sorted by `key`).
    pub fn new(schema: SchemaRef, key: &[String], stream: BatchIter) -> Result<Self> {
        let encoder = KeyEncoder::new(&schema, key)?;
        Ok(Self {
            key_idx: encoder.indices().to_vec(),
            encoder,
            stream,
            schema,
            carry: None,
            last: None,
        })
    }

    fn pull(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(c) = self.carry.take() {
            return Ok(Some(c));
        }
        for b in self.stream.by_ref() {
            let b = b?;
            if b.num_rows() > 0 {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    /// The next chunk of about `max_rows` rows; with `whole`, it ends at a
    /// group's end (so it may hold more), unless it would hold more than
    /// [`WHOLE_FACTOR`] × `max_rows` rows: then it ends there, inside the
    /// group, and the next chunk goes on with it (`continued`). `None` at
    /// the end.
    pub fn next(&mut self, whole: bool, max_rows: usize) -> Result<Option<Chunk>> {
        let mut parts = Vec::new();
        let mut n = 0;
        while n < max_rows.max(1) {
            match self.pull()? {
                Some(b) => {
                    n += b.num_rows();
                    parts.push(b);
                }
                None => break,
            }
        }
        if parts.is_empty() {
            return Ok(None);
        }
        if whole {
            let cap = max_rows.max(1).saturating_mul(WHOLE_FACTOR);
            // Take the rest of the last group from the batches that follow.
            while let Some(tail) = parts.last() {
                if n >= cap {
                    break;
                }
                let tail_rows = self.encoder.rows(tail)?;
                let last = tail_rows.row(tail.num_rows() - 1).owned();
                let Some(b) = self.pull()? else { break };
                let rows = self.encoder.rows(&b)?;
                let same = (0..b.num_rows())
                    .take_while(|&i| rows.row(i) == last.row())
                    .count()
                    .min(cap - n);
                if same == b.num_rows() {
                    n += same;
                    parts.push(b);
                    continue;
                }
                if same > 0 {
                    parts.push(b.slice(0, same));
                }
                self.carry = Some(b.slice(same, b.num_rows() - same));
                break;
            }
        }
        let batch = concat(&self.schema, &parts)?;
        let rows = self.encoder.rows(&batch)?;
        let n = batch.num_rows();
        let offsets = run_starts(&rows, n);
        let starts = UInt32Array::from(offsets[..offsets.len() - 1].to_vec());
        let keys = arrow_select::take::take_record_batch(&batch.project(&self.key_idx)?, &starts)?;
        let continued = self.last.as_ref().is_some_and(|l| l.row() == rows.row(0));
        self.last = Some(rows.row(n - 1).owned());
        Ok(Some(Chunk {
            keys,
            sources: vec![(batch, offsets)],
            continued,
        }))
    }
}

/// Chunks of several sources over a known key list (a join's changed keys):
/// whole groups only.
pub struct JoinChunker {
    keys: Splitter,
    key_schema: SchemaRef,
    key_encoder: KeyEncoder,
    sources: Vec<(SchemaRef, KeyEncoder, Splitter)>,
}

impl JoinChunker {
    /// `keys`: sorted distinct keys (key columns); `sources`: each one's
    /// public schema, key columns and rows (sorted by key, no key outside `keys`).
    pub fn new(
        key_schema: SchemaRef,
        keys: BatchIter,
        sources: Vec<(SchemaRef, Vec<String>, BatchIter)>,
    ) -> Result<Self> {
        let names: Vec<String> = key_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let mut out = Vec::new();
        for (schema, key, rows) in sources {
            let split = Splitter::new(rows, KeyEncoder::new(&schema, &key)?);
            out.push((schema.clone(), KeyEncoder::new(&schema, &key)?, split));
        }
        Ok(Self {
            keys: Splitter::new(keys, KeyEncoder::new(&key_schema, &names)?),
            key_encoder: KeyEncoder::new(&key_schema, &names)?,
            key_schema,
            sources: out,
        })
    }

    /// The next chunk of at most `max_keys` keys. A key with no row in any
    /// source (deleted on every side) is left out: it produces nothing.
    pub fn next(&mut self, max_keys: usize) -> Result<Option<Chunk>> {
        loop {
            let keys = self.keys.take_rows(max_keys.max(1))?;
            if keys.is_empty() {
                return Ok(None);
            }
            let keys = concat(&self.key_schema, &keys)?;
            let krows = self.key_encoder.rows(&keys)?;
            let bound = krows.row(keys.num_rows() - 1);
            let mut sources = Vec::with_capacity(self.sources.len());
            for (schema, enc, split) in &mut self.sources {
                let batch = concat(schema, &split.take_until(Some(bound))?)?;
                let rows = enc.rows(&batch)?;
                let mut offsets = Vec::with_capacity(keys.num_rows() + 1);
                let mut p = 0;
                for i in 0..keys.num_rows() {
                    offsets.push(p as u32);
                    while p < batch.num_rows() && rows.row(p) == krows.row(i) {
                        p += 1;
                    }
                }
                if p != batch.num_rows() {
                    return Err(Error::Task(
                        "a join source holds a key outside the changed keys".into(),
                    ));
                }
                offsets.push(p as u32);
                sources.push((batch, offsets));
            }
            let kept: Vec<u32> = (0..keys.num_rows())
                .filter(|&i| sources.iter().any(|(_, o)| o[i + 1] > o[i]))
                .map(|i| i as u32)
                .collect();
            if kept.is_empty() {
                continue;
            }
            if kept.len() == keys.num_rows() {
                return Ok(Some(Chunk {
                    keys,
                    sources,
                    continued: false,
                }));
            }
            // Left-out keys hold no rows: the rows stay, the offsets skip them.
            let keys =
                arrow_select::take::take_record_batch(&keys, &UInt32Array::from(kept.clone()))?;
            let sources = sources
                .into_iter()
                .map(|(batch, o)| {
                    let mut offsets: Vec<u32> = kept.iter().map(|&i| o[i as usize]).collect();
                    offsets.push(*o.last().unwrap_or(&0));
                    (batch, offsets)
                })
                .collect();
            return Ok(Some(Chunk {
                keys,
                sources,
                continued: false,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn ks(keys: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys.to_vec()))]).unwrap()
    }

    fn it(batches: Vec<RecordBatch>) -> BatchIter {
        Box::new(batches.into_iter().map(Ok))
    }

    fn ints(b: &RecordBatch) -> Vec<i64> {
        b.column(0).as_primitive::<Int64Type>().values().to_vec()
    }

    /// Keys deleted on every side (no row in any source) are left out of
    /// the chunks, wherever they fall, and the offsets stay right.
    #[test]
    fn a_join_leaves_out_keys_with_no_row_on_any_side() {
        let schema = ks(&[]).schema();
        let key = vec!["k".to_string()];
        let mut join = JoinChunker::new(
            schema.clone(),
            it(vec![ks(&[1, 2, 3, 4, 5, 6])]),
            vec![
                (schema.clone(), key.clone(), it(vec![ks(&[3, 3, 5])])),
                (schema.clone(), key.clone(), it(vec![ks(&[5, 6])])),
            ],
        )
        .unwrap();
        let first = join.next(3).unwrap().unwrap();
        assert_eq!(ints(&first.keys), [3]);
        assert_eq!(first.sources[0].1, [0, 2]);
        assert_eq!(first.sources[1].1, [0, 0]);
        let second = join.next(3).unwrap().unwrap();
        assert_eq!(ints(&second.keys), [5, 6]);
        assert_eq!(ints(&second.sources[0].0), [5]);
        assert_eq!(second.sources[0].1, [0, 1, 1]);
        assert_eq!(second.sources[1].1, [0, 1, 2]);
        assert!(join.next(3).unwrap().is_none());
        // Nothing on any side: no chunk at all.
        let mut none = JoinChunker::new(
            schema.clone(),
            it(vec![ks(&[1, 2])]),
            vec![(schema, key, it(vec![]))],
        )
        .unwrap();
        assert!(none.next(1).unwrap().is_none());
    }

    /// The batched form's chunks end at group ends, except inside a group
    /// larger than `WHOLE_FACTOR` times the rows asked for: it goes on in
    /// the next chunk, marked `continued`, memory bounded.
    #[test]
    fn whole_chunks_cut_only_a_huge_group() {
        let schema = ks(&[]).schema();
        let key = vec!["k".to_string()];
        let mut rows: Vec<i64> = vec![0; 3];
        rows.extend(vec![1; 100]);
        rows.extend([2, 2, 3]);
        let batches: Vec<RecordBatch> = rows.chunks(4).map(ks).collect();
        let mut c = SingleChunker::new(schema, &key, it(batches)).unwrap();
        let max = 2;
        let cap = max * WHOLE_FACTOR;
        let mut got = Vec::new();
        while let Some(chunk) = c.next(true, max).unwrap() {
            let n = chunk.sources[0].0.num_rows();
            assert!(n <= cap + 4, "{n} rows");
            got.push((ints(&chunk.keys), chunk.continued, n));
        }
        let total: usize = got.iter().map(|g| g.2).sum();
        assert_eq!(total, rows.len());
        // Group 1 comes over several chunks, the later ones continued.
        let ones: Vec<&(Vec<i64>, bool, usize)> = got.iter().filter(|g| g.0.contains(&1)).collect();
        assert!(ones.len() >= 3, "{got:?}");
        assert!(ones[1..].iter().all(|g| g.1 && g.0[0] == 1), "{got:?}");
        // Smaller groups stay whole: 2 is in one chunk.
        assert_eq!(got.iter().filter(|g| g.0.contains(&2)).count(), 1);
    }
}
