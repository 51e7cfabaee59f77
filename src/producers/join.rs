//! A merge-join scan over several sources sorted by the same key: each key
//! present in any source is visited once, in order, with each source's rows
//! for it available lazily (a join stage's `Produce` gets one value
//! sequence per source). Memory is one batch per source.

use arrow_array::RecordBatch;
use arrow_row::OwnedRow;
use arrow_schema::SchemaRef;

use super::group::GroupCursor;
use super::BatchIter;
use crate::error::{Error, Result};

/// Walks the union of the sources' keys.
pub struct MergeJoin {
    cursors: Vec<GroupCursor>,
    /// Each source's next key (row bytes and the one-row key batch).
    heads: Vec<Option<(OwnedRow, RecordBatch)>>,
    /// Sources whose head is the current key (their group is being read).
    current: Vec<bool>,
    started: bool,
}

impl MergeJoin {
    /// `sources`: each one's schema, key columns and stream. The key
    /// columns must have the same types in every source.
    pub fn new(sources: Vec<(SchemaRef, Vec<String>, BatchIter)>) -> Result<Self> {
        let mut types: Option<Vec<arrow_schema::DataType>> = None;
        let mut cursors = Vec::with_capacity(sources.len());
        for (schema, key, stream) in sources {
            let these = crate::parquet::decode::column_indices(&schema, &key)?
                .into_iter()
                .map(|i| schema.field(i).data_type().clone())
                .collect::<Vec<_>>();
            match &types {
                Some(t) if t != &these => {
                    return Err(Error::InvalidArgument(format!(
                        "join sources have keys of other types: {t:?} and {these:?}"
                    )))
                }
                _ => types = Some(these),
            }
            cursors.push(GroupCursor::new(&schema, &key, stream)?);
        }
        let n = cursors.len();
        Ok(Self {
            cursors,
            heads: vec![None; n],
            current: vec![false; n],
            started: false,
        })
    }

    fn advance(&mut self, i: usize) -> Result<()> {
        self.heads[i] = match self.cursors[i].next_group() {
            None => None,
            Some(key) => {
                let key = key?;
                let row = self.cursors[i]
                    .group_row()
                    .map(|r| r.owned())
                    .ok_or_else(|| Error::Task("group cursor lost its key".into()))?;
                Some((row, key))
            }
        };
        Ok(())
    }

    /// The next key in any source: its one-row key batch, and which
    /// sources hold it. `None` when every source is exhausted.
    pub fn next_key(&mut self) -> Option<Result<(RecordBatch, Vec<bool>)>> {
        let step = (|| {
            for i in 0..self.cursors.len() {
                if !self.started || self.current[i] {
                    self.advance(i)?;
                }
            }
            self.started = true;
            let min = self
                .heads
                .iter()
                .flatten()
                .map(|(row, _)| row)
                .min_by(|a, b| a.row().cmp(&b.row()))
                .cloned();
            let Some(min) = min else {
                self.current.iter_mut().for_each(|c| *c = false);
                return Ok(None);
            };
            let mut key = None;
            for (i, head) in self.heads.iter().enumerate() {
                self.current[i] = head.as_ref().is_some_and(|(r, _)| r.row() == min.row());
                if self.current[i] && key.is_none() {
                    key = head.as_ref().map(|(_, k)| k.clone());
                }
            }
            Ok(key.map(|k| (k, self.current.clone())))
        })();
        step.transpose()
    }

    /// The next slice of `source`'s rows for the current key; `None` once
    /// they are read, or if the source does not hold the key.
    pub fn next_values(&mut self, source: usize) -> Option<Result<RecordBatch>> {
        if !*self.current.get(source)? {
            return None;
        }
        self.cursors[source].next_values()
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
    use std::collections::BTreeMap;

    fn sorted(seed: u64, n: i64) -> (BatchIter, BTreeMap<Option<i64>, usize>) {
        let key = vec!["k".to_string()];
        let b = batch(0, n, seed);
        let mut counts = BTreeMap::new();
        for r in b.column(0).as_primitive::<Int64Type>().iter() {
            *counts.entry(r).or_default() += 1;
        }
        let mut s = ExternalSorter::new(schema(), &key, 1 << 30, None).unwrap();
        s.push(b).unwrap();
        (s.finish().unwrap(), counts)
    }

    #[test]
    fn visits_every_key_once_with_each_sources_rows() {
        let (a, ca) = sorted(5, 800);
        let (b, cb) = sorted(9, 300);
        let (c, cc) = sorted(13, 0);
        assert!(cc.is_empty());
        let key = vec!["k".to_string()];
        let mut join = MergeJoin::new(vec![
            (schema(), key.clone(), a),
            (schema(), key.clone(), b),
            (schema(), key, c),
        ])
        .unwrap();
        let mut keys = Vec::new();
        while let Some(next) = join.next_key() {
            let (k, present) = next.unwrap();
            let col = k.column(0).as_primitive::<Int64Type>();
            let key = col.is_valid(0).then(|| col.value(0));
            keys.push(key);
            let mut counts = [0usize; 3];
            for (s, count) in counts.iter_mut().enumerate() {
                while let Some(v) = join.next_values(s) {
                    *count += v.unwrap().num_rows();
                }
            }
            assert_eq!(counts[0], ca.get(&key).copied().unwrap_or(0));
            assert_eq!(counts[1], cb.get(&key).copied().unwrap_or(0));
            assert_eq!(counts[2], 0);
            assert_eq!(present, vec![counts[0] > 0, counts[1] > 0, false]);
        }
        let mut all: Vec<_> = ca.keys().chain(cb.keys()).copied().collect();
        all.sort();
        all.dedup();
        assert_eq!(keys, all, "every key once, in order (nulls first)");
        let other = std::sync::Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "k",
            arrow_schema::DataType::Utf8,
            false,
        )]));
        let empty = || -> BatchIter { Box::new(std::iter::empty()) };
        assert!(MergeJoin::new(vec![
            (schema(), vec!["k".into()], empty()),
            (other, vec!["k".into()], empty()),
        ])
        .is_err());
    }
}
