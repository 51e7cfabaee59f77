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
use super::partset::KeySplitter;
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
/// whole groups, except that a chunk holds at most `max_rows` rows of each
/// source. Where a source's rows would pass that, the chunk ends at the
/// key where they do, and that key is *open*: the rest of its rows, on the
/// sources that have more, are pulled a piece at a time
/// ([`Self::pull_open`]), each source on its own. The next chunk skips
/// what was not pulled.
pub struct JoinChunker {
    keys: KeySplitter,
    key_schema: SchemaRef,
    key_encoder: KeyEncoder,
    sources: Vec<(SchemaRef, KeyEncoder, KeySplitter)>,
    /// The open key, and which sources may have more of its rows.
    open: Option<Box<(OwnedRow, Vec<bool>)>>,
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
            let split = KeySplitter::new(rows, KeyEncoder::new(&schema, &key)?);
            out.push((schema.clone(), KeyEncoder::new(&schema, &key)?, split));
        }
        Ok(Self {
            keys: KeySplitter::new(keys, KeyEncoder::new(&key_schema, &names)?),
            key_encoder: KeyEncoder::new(&key_schema, &names)?,
            key_schema,
            sources: out,
            open: None,
        })
    }

    /// The sources that may have more rows of the last chunk's last key
    /// (empty if it was whole on every source).
    pub fn open_sources(&self) -> Vec<usize> {
        self.open
            .as_deref()
            .map(|(_, more)| (0..more.len()).filter(|&i| more[i]).collect())
            .unwrap_or_default()
    }

    /// Up to `max_rows` more rows of the open key from source `source`;
    /// `None` once it has no more (or no key is open).
    pub fn pull_open(&mut self, source: usize, max_rows: usize) -> Result<Option<RecordBatch>> {
        let Some((key, more)) = self.open.as_deref_mut() else {
            return Ok(None);
        };
        if !more.get(source).copied().unwrap_or(false) {
            return Ok(None);
        }
        let Some((schema, _, split)) = self.sources.get_mut(source) else {
            return Ok(None);
        };
        let (got, whole) = split.take_until_limit(Some(key.row()), max_rows.max(1))?;
        if whole {
            more[source] = false;
        }
        if got.is_empty() {
            return Ok(None);
        }
        Ok(Some(concat(schema, &got)?))
    }

    /// Skip what was not pulled of the open key.
    fn close(&mut self) -> Result<()> {
        if let Some((key, more)) = self.open.take().map(|o| *o) {
            for (i, (_, _, split)) in self.sources.iter_mut().enumerate() {
                if more[i] {
                    split.take_until(Some(key.row()))?;
                }
            }
        }
        Ok(())
    }

    /// The next chunk of at most `max_keys` keys and `max_rows` rows of
    /// each source (see the type's docs). A key with no row in any source
    /// (deleted on every side) is left out: it produces nothing.
    pub fn next(&mut self, max_keys: usize, max_rows: usize) -> Result<Option<Chunk>> {
        self.close()?;
        loop {
            let keys = self.keys.take_rows(max_keys.max(1))?;
            if keys.is_empty() {
                return Ok(None);
            }
            let mut keys = concat(&self.key_schema, &keys)?;
            let mut krows = self.key_encoder.rows(&keys)?;
            let bound = krows.row(keys.num_rows() - 1).owned();
            let mut taken = Vec::with_capacity(self.sources.len());
            for (_, _, split) in &mut self.sources {
                taken.push(split.take_until_limit(Some(bound.row()), max_rows.max(1))?);
            }
            if taken.iter().any(|(_, whole)| !whole) {
                // Cut at the smallest key a limited source stopped in: the
                // rows past it go back, and so do the keys.
                let mut cut: Option<OwnedRow> = None;
                for ((_, enc, _), (got, whole)) in self.sources.iter().zip(&taken) {
                    if *whole {
                        continue;
                    }
                    let Some(last) = got.last().filter(|b| b.num_rows() > 0) else {
                        continue;
                    };
                    let k = enc.key_of(last, last.num_rows() - 1)?;
                    if cut.as_ref().is_none_or(|c| k < *c) {
                        cut = Some(k);
                    }
                }
                let Some(cut) = cut else {
                    return Err(Error::Task("a limited join source took no rows".into()));
                };
                let mut more = Vec::with_capacity(taken.len());
                for ((schema, enc, split), (got, whole)) in
                    self.sources.iter_mut().zip(std::mem::take(&mut taken))
                {
                    let batch = concat(schema, &got)?;
                    let rows = enc.rows(&batch)?;
                    let at = super::keys::lower_bound(batch.num_rows(), |i| {
                        Ok(rows.row(i) <= cut.row())
                    })?;
                    // More rows of the cut key may follow only where the
                    // source stopped inside it.
                    let stopped_in = !whole && at == batch.num_rows();
                    more.push(stopped_in);
                    split.unread(vec![batch.slice(at, batch.num_rows() - at)]);
                    taken.push((vec![batch.slice(0, at)], true));
                }
                let kat =
                    super::keys::lower_bound(keys.num_rows(), |i| Ok(krows.row(i) <= cut.row()))?;
                self.keys
                    .unread(vec![keys.slice(kat, keys.num_rows() - kat)]);
                keys = keys.slice(0, kat);
                krows = self.key_encoder.rows(&keys)?;
                self.open = Some(Box::new((cut, more)));
            }
            let mut sources = Vec::with_capacity(self.sources.len());
            for ((schema, enc, _), (got, _)) in self.sources.iter().zip(taken) {
                let batch = concat(schema, &got)?;
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

    /// Source rows `(k, v)`, `v` the row's position.
    fn kv(keys: &[i64], from: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(Int64Array::from_iter_values(from..from + keys.len() as i64)),
            ],
        )
        .unwrap()
    }

    /// At most `side` rows of each source a chunk: a key with more is open,
    /// its rest pulled a piece at a time from each source on its own, in
    /// any order; what is not pulled is skipped. Every (key, source, row)
    /// is seen once, for any limit, and the rows pulled are the key's.
    #[test]
    fn a_join_chunk_holds_at_most_the_limit_and_opens_a_large_group() {
        // Source 0: key 2 holds 9 rows, key 5 one; source 1: key 2 holds 4
        // rows, key 3 holds 6, key 5 one. Each side in batches of 3 rows.
        let a: Vec<i64> = [1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 5].to_vec();
        let b: Vec<i64> = [2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 5].to_vec();
        let batches = |k: &[i64]| {
            it(k.chunks(3)
                .enumerate()
                .map(|(i, c)| kv(c, 3 * i as i64))
                .collect())
        };
        let schema = ks(&[]).schema();
        let key = vec!["k".to_string()];
        for side in [1, 2, 3, 4, 5, 100] {
            for skip_source in [None, Some(0), Some(1)] {
                let mut join = JoinChunker::new(
                    schema.clone(),
                    it(vec![ks(&[1, 2, 3, 4, 5])]),
                    vec![
                        (kv(&[], 0).schema(), key.clone(), batches(&a)),
                        (kv(&[], 0).schema(), key.clone(), batches(&b)),
                    ],
                )
                .unwrap();
                // (key, source, v) seen, in the order handed out.
                let mut seen: Vec<(i64, usize, i64)> = Vec::new();
                while let Some(c) = join.next(2, side).unwrap() {
                    let keys = ints(&c.keys);
                    for (s, (rows, offs)) in c.sources.iter().enumerate() {
                        assert!(
                            rows.num_rows() <= side,
                            "side {side}: {} rows",
                            rows.num_rows()
                        );
                        let v = rows.column(1).as_primitive::<Int64Type>().values().to_vec();
                        let k = ints(rows);
                        for (i, key) in keys.iter().enumerate() {
                            for r in offs[i] as usize..offs[i + 1] as usize {
                                assert_eq!(k[r], *key);
                                seen.push((*key, s, v[r]));
                            }
                        }
                    }
                    let open = join.open_sources();
                    let last = *keys.last().unwrap();
                    for s in open.iter().rev() {
                        if Some(*s) == skip_source {
                            continue; // Not pulled: skipped by the next chunk.
                        }
                        while let Some(more) = join.pull_open(*s, side).unwrap() {
                            assert!(more.num_rows() <= side);
                            let v = more.column(1).as_primitive::<Int64Type>().values().to_vec();
                            for (k, v) in ints(&more).into_iter().zip(v) {
                                assert_eq!(k, last, "a pulled row of another key");
                                seen.push((k, *s, v));
                            }
                        }
                    }
                }
                let mut want: Vec<(i64, usize, i64)> = Vec::new();
                for (s, src) in [&a, &b].iter().enumerate() {
                    for (p, k) in src.iter().enumerate() {
                        want.push((*k, s, p as i64));
                    }
                }
                seen.sort();
                want.sort();
                if skip_source.is_none() {
                    assert_eq!(seen, want, "side {side}");
                } else {
                    // Nothing twice, nothing invented, and every key's
                    // first rows on each side are there.
                    let mut dedup = seen.clone();
                    dedup.dedup();
                    assert_eq!(dedup, seen, "side {side}");
                    assert!(seen.iter().all(|x| want.contains(x)));
                    for k in [1, 3, 5] {
                        assert!(seen.iter().any(|x| x.0 == k), "key {k}, side {side}");
                    }
                }
            }
        }
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
        let first = join.next(3, usize::MAX).unwrap().unwrap();
        assert_eq!(ints(&first.keys), [3]);
        assert_eq!(first.sources[0].1, [0, 2]);
        assert_eq!(first.sources[1].1, [0, 0]);
        let second = join.next(3, usize::MAX).unwrap().unwrap();
        assert_eq!(ints(&second.keys), [5, 6]);
        assert_eq!(ints(&second.sources[0].0), [5]);
        assert_eq!(second.sources[0].1, [0, 1, 1]);
        assert_eq!(second.sources[1].1, [0, 1, 2]);
        assert!(join.next(3, usize::MAX).unwrap().is_none());
        // Nothing on any side: no chunk at all.
        let mut none = JoinChunker::new(
            schema.clone(),
            it(vec![ks(&[1, 2])]),
            vec![(schema, key, it(vec![]))],
        )
        .unwrap();
        assert!(none.next(1, usize::MAX).unwrap().is_none());
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
