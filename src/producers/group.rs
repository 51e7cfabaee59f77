//! A group cursor over a stream sorted by key: each key's rows are handed
//! out lazily, as slices of the batches they sit in. Single-use and
//! forward-only: moving to the next group skips what is left of the
//! current one. Memory is one batch, whatever a group's size, so a group
//! larger than memory is fine.

use arrow_array::RecordBatch;
use arrow_row::{OwnedRow, Rows};
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
use super::BatchIter;
use crate::error::{Error, Result};

/// Walks the groups of a sorted stream.
pub struct GroupCursor {
    stream: BatchIter,
    encoder: KeyEncoder,
    current: Option<(RecordBatch, Rows)>,
    pos: usize,
    group: Option<OwnedRow>,
    done: bool,
}

impl GroupCursor {
    /// A cursor over `stream` (batches of `schema`, sorted by `key`).
    pub fn new(schema: &SchemaRef, key: &[String], stream: BatchIter) -> Result<Self> {
        Ok(Self {
            stream,
            encoder: KeyEncoder::new(schema, key)?,
            current: None,
            pos: 0,
            group: None,
            done: false,
        })
    }

    /// Make sure a batch with unread rows is current; `false` at the end.
    fn fill(&mut self) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        if let Some((b, _)) = &self.current {
            if self.pos < b.num_rows() {
                return Ok(true);
            }
        }
        for b in self.stream.by_ref() {
            let b = b?;
            if b.num_rows() > 0 {
                let rows = self.encoder.rows(&b)?;
                self.current = Some((b, rows));
                self.pos = 0;
                return Ok(true);
            }
        }
        self.current = None;
        self.done = true;
        Ok(false)
    }

    /// Move to the next group, skipping the rest of the current one. Returns
    /// its key as a one-row batch of the key columns; `None` at the end.
    pub fn next_group(&mut self) -> Option<Result<RecordBatch>> {
        while let Some(r) = self.next_values() {
            if let Err(e) = r {
                return Some(Err(e));
            }
        }
        match self.fill() {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        let (batch, rows) = self.current.as_ref()?;
        self.group = Some(rows.row(self.pos).owned());
        let key = batch
            .project(self.encoder.indices())
            .map(|k| k.slice(self.pos, 1))
            .map_err(Error::from);
        Some(key)
    }

    /// The current group's key as row-format bytes (see [`super::keys`]).
    pub fn group_row(&self) -> Option<arrow_row::Row<'_>> {
        self.group.as_ref().map(|g| g.row())
    }

    /// The next slice of the current group's rows (all columns); `None`
    /// once the group ends (or before the first `next_group`).
    pub fn next_values(&mut self) -> Option<Result<RecordBatch>> {
        self.group.as_ref()?;
        match self.fill() {
            Ok(true) => {}
            Ok(false) => {
                self.group = None;
                return None;
            }
            Err(e) => return Some(Err(e)),
        }
        let (batch, rows) = self.current.as_ref()?;
        let group = self.group.as_ref()?.row();
        if rows.row(self.pos) != group {
            self.group = None;
            return None;
        }
        // Rows of the group are contiguous: find where they stop.
        let len = batch.num_rows();
        let (mut lo, mut hi) = (self.pos + 1, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if rows.row(mid) == group {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let slice = batch.slice(self.pos, lo - self.pos);
        self.pos = lo;
        Some(Ok(slice))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producers::sort::tests::{batch, schema};
    use crate::producers::sort::ExternalSorter;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Array;

    #[test]
    fn groups_span_batches_and_can_be_skipped() {
        let key = vec!["k".to_string()];
        let mut s = ExternalSorter::new(schema(), &key, 32 * 1024, None).unwrap();
        let mut expected: std::collections::BTreeMap<Option<i64>, usize> = Default::default();
        for i in 0..20 {
            let b = batch(i * 1000, 1000, 11 + i as u64);
            for r in b.column(0).as_primitive::<Int64Type>().iter() {
                *expected.entry(r).or_default() += 1;
            }
            s.push(b).unwrap();
        }
        let sorted = s.finish().unwrap();
        // Small batches, so that groups span several of them.
        let rebatched: BatchIter = Box::new(sorted.flat_map(|b| {
            let b = b.unwrap();
            (0..b.num_rows())
                .step_by(7)
                .map(|i| Ok(b.slice(i, 7.min(b.num_rows() - i))))
                .collect::<Vec<_>>()
        }));
        let mut cursor = GroupCursor::new(&schema(), &key, rebatched).unwrap();
        let mut got: std::collections::BTreeMap<Option<i64>, usize> = Default::default();
        let mut n = 0;
        while let Some(k) = cursor.next_group() {
            let k = k.unwrap();
            let col = k.column(0).as_primitive::<Int64Type>();
            let key = col.is_valid(0).then(|| col.value(0));
            n += 1;
            if n % 5 == 0 {
                // Skip this group after one slice, or entirely.
                if n % 10 == 0 {
                    let _ = cursor.next_values();
                }
                got.insert(key, expected[&key]);
                continue;
            }
            let mut rows = 0;
            while let Some(v) = cursor.next_values() {
                let v = v.unwrap();
                let vk = v.column(0).as_primitive::<Int64Type>();
                assert!(vk.iter().all(|x| x == key), "a slice holds one key");
                rows += v.num_rows();
            }
            assert!(got.insert(key, rows).is_none(), "each key is one group");
        }
        assert_eq!(got, expected);
        assert!(cursor.next_values().is_none());
        assert!(cursor.next_group().is_none());
    }
}
