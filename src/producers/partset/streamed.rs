//! A unit of several parts (a key spanning them) rewritten as a stream.
//!
//! A value with many rows spans many parts, and a change to it rewrites
//! them all (see [`super::super::parts::units`]). Held in memory, its old
//! rows, its added rows and the merge of the two would each be the size of
//! the value. Here the unit's old rows are scanned a few parts at a time,
//! less the rows the change removes, merged with the added rows as they
//! come, and written as they are merged: memory is a few parts and batches,
//! whatever the value's size.
//!
//! Which rows the update selects (every row, after the change, of a value
//! touched or added) is known row by row as the merge goes: an added value
//! is seen by the merge before any row of it is written (the merge must
//! read the next added row before it writes a row past it). The positions
//! of the selected rows are recorded, not the rows: the written parts that
//! hold only selected rows are selected whole, and only the parts holding
//! both kinds are read back for their selected rows.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_row::OwnedRow;

use super::key_filter::{key_mask, key_set, missing, per_value, split_by_mask};
use super::poisoned;
use super::{KeySplitter, PartSet, PartsRewritten, Remove};
use crate::error::{Error, Result};
use crate::producers::keys::{key_set_new, KeyEncoder, KeySet};
use crate::producers::merge::merge_sorted;
use crate::producers::parts::RangePart;
use crate::producers::sort::BATCH_ROWS;
use crate::producers::BatchIter;

/// Writes the selected rows kept so far as new parts (see
/// [`PartSet::rewrite`]'s selection).
pub(super) type Flush<'a> =
    dyn FnMut(&mut Vec<RecordBatch>, &mut PartsRewritten) -> Result<()> + 'a;

/// One unit's change (see [`PartSet::rewrite_unit_streamed`]).
pub(super) struct UnitChange<'a> {
    pub unit: &'a [RangePart],
    /// The touched cut-key values within the unit (cut-key columns, sorted).
    pub touch: &'a [RecordBatch],
    /// The change's added rows: this unit's are those up to `bound`.
    pub adds: Arc<Mutex<KeySplitter>>,
    /// The unit's last cut-key value (`None`: the last unit, every add).
    pub bound: Option<OwnedRow>,
    pub remove: Arc<Remove>,
    pub collect_removed: bool,
    pub select: bool,
    /// The new parts' name prefix.
    pub name: String,
}

/// What the written stream held, recorded as it went.
#[derive(Default)]
struct Marks {
    /// Rows written.
    rows: u64,
    /// The selected rows' positions, in order, adjacent runs joined.
    runs: Vec<Range<u64>>,
    /// Touched values that kept or got a row.
    present: Option<KeySet>,
    /// The last row's cut key (to check the order across batches).
    last: Option<OwnedRow>,
}

/// The unit's added rows: the change's rows up to the unit's bound, read
/// from the shared splitter a batch at a time; each distinct value is
/// recorded in `added` as it is read.
struct UnitAdds {
    split: Arc<Mutex<KeySplitter>>,
    bound: Option<OwnedRow>,
    queue: VecDeque<RecordBatch>,
    done: bool,
    cut: KeyEncoder,
    added: Arc<Mutex<KeySet>>,
    last: Option<OwnedRow>,
}

impl UnitAdds {
    fn record(&mut self, b: &RecordBatch) -> Result<()> {
        let rows = self.cut.rows(b)?;
        let mut added = self.added.lock().map_err(poisoned)?;
        for i in 0..rows.num_rows() {
            let r = rows.row(i);
            if self.last.as_ref().is_none_or(|l| l.row() != r) {
                added.insert(Box::from(r.as_ref()));
                self.last = Some(r.owned());
            }
        }
        Ok(())
    }

    fn pull(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(b) = self.queue.pop_front() {
                self.record(&b)?;
                return Ok(Some(b));
            }
            if self.done {
                return Ok(None);
            }
            let (batches, all) = {
                let mut split = self.split.lock().map_err(poisoned)?;
                split.take_until_limit(self.bound.as_ref().map(|r| r.row()), BATCH_ROWS)?
            };
            self.done = all;
            self.queue
                .extend(batches.into_iter().filter(|b| b.num_rows() > 0));
        }
    }
}

impl Iterator for UnitAdds {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.pull() {
            Ok(b) => b.map(Ok),
            Err(e) => {
                self.done = true;
                self.queue.clear();
                Some(Err(e))
            }
        }
    }
}

impl PartSet {
    /// Rewrite a unit of several parts as a stream (see the module docs):
    /// its rows whose value is touched and whose `remove` key is listed
    /// are dropped, the added rows merged in; the new parts go to `out`,
    /// and with `select` the selected rows to `pending` or `out.selected`
    /// (through `flush`), the touched values left with no row to
    /// `out.deleted`.
    pub(super) fn rewrite_unit_streamed(
        &self,
        c: UnitChange<'_>,
        pending: &mut Vec<RecordBatch>,
        flush: &mut Flush<'_>,
        out: &mut PartsRewritten,
    ) -> Result<()> {
        let tenc = KeyEncoder::new(&*self.cut_schema()?, &self.cut_key)?;
        let touched = Arc::new(key_set(c.touch, &tenc)?);
        let added = Arc::new(Mutex::new(key_set_new()));
        let removed = Arc::new(Mutex::new(Vec::new()));
        let old = Arc::new(self.clone()).scan(c.unit.to_vec(), None);
        let old = self.less_removed(
            old,
            touched.clone(),
            c.remove.clone(),
            c.collect_removed.then(|| removed.clone()),
        )?;
        let adds = UnitAdds {
            split: c.adds,
            bound: c.bound,
            queue: VecDeque::new(),
            done: false,
            cut: self.encoder(&self.cut_key)?,
            added: added.clone(),
            last: None,
        };
        let merged = merge_sorted(
            self.schema.clone(),
            &self.sort_key,
            vec![old, Box::new(adds)],
            BATCH_ROWS,
        )?;
        let marks = Arc::new(Mutex::new(Marks {
            present: c.select.then(key_set_new),
            ..Default::default()
        }));
        let tapped = self.marked(merged, touched, added, marks.clone(), c.unit)?;
        let new_parts = self.write(&c.name, tapped, &mut out.created)?;
        if c.collect_removed {
            out.removed
                .extend(std::mem::take(&mut *removed.lock().map_err(poisoned)?));
        }
        out.parts.extend(new_parts.iter().cloned());
        if !c.select {
            return Ok(());
        }
        let marks = std::mem::take(&mut *marks.lock().map_err(poisoned)?);
        let written: u64 = new_parts.iter().map(|p| p.rows).sum();
        if written != marks.rows {
            return Err(Error::Task(format!(
                "{} rows streamed, {written} written",
                marks.rows
            )));
        }
        self.select_written(&new_parts, &marks.runs, pending, flush, out)?;
        let present = marks.present.unwrap_or_else(key_set_new);
        out.deleted.extend(missing(c.touch, &tenc, &present)?);
        Ok(())
    }

    /// `old` less the rows whose cut-key value is in `touched` and whose
    /// `remove` key is listed (sent to `removed` if given).
    fn less_removed(
        &self,
        old: BatchIter,
        touched: Arc<KeySet>,
        remove: Arc<Remove>,
        removed: Option<Arc<Mutex<Vec<RecordBatch>>>>,
    ) -> Result<BatchIter> {
        let Remove::Keys { key, .. } = &*remove else {
            return Ok(old);
        };
        let renc = self.encoder(key)?;
        let cut = self.encoder(&self.cut_key)?;
        Ok(Box::new(old.filter_map(move |b| {
            let step = || -> Result<Option<RecordBatch>> {
                let b = b?;
                let Remove::Keys { set, .. } = &*remove else {
                    return Ok(Some(b));
                };
                let gone = key_mask(&b, &renc, set, Some((&cut, &touched)))?;
                if gone.true_count() == 0 {
                    return Ok(Some(b));
                }
                let (r, kept) = split_by_mask(&b, &gone)?;
                if let Some(removed) = &removed {
                    removed.lock().map_err(poisoned)?.push(r);
                }
                Ok((kept.num_rows() > 0).then_some(kept))
            };
            step().transpose()
        })))
    }

    /// `merged` as it is written, recording in `marks` the selected rows'
    /// positions (a value touched or added) and the touched values seen;
    /// rows out of cut-key order (a corrupted part of `unit`) fail it.
    fn marked(
        &self,
        merged: BatchIter,
        touched: Arc<KeySet>,
        added: Arc<Mutex<KeySet>>,
        marks: Arc<Mutex<Marks>>,
        unit: &[RangePart],
    ) -> Result<BatchIter> {
        let cut = self.encoder(&self.cut_key)?;
        let path = unit.first().map(|p| self.object(p)).unwrap_or_default();
        Ok(Box::new(merged.map(move |b| {
            let b = b?;
            let rows = cut.rows(&b)?;
            let mut m = marks.lock().map_err(poisoned)?;
            let n = rows.num_rows();
            let ordered = (1..n).all(|i| rows.row(i - 1) <= rows.row(i))
                && match (&m.last, n) {
                    (Some(l), 1..) => l.row() <= rows.row(0),
                    _ => true,
                };
            if !ordered {
                return Err(Error::PartCorrupted {
                    path: path.clone(),
                    reason: "its rows are not in key order".into(),
                });
            }
            let added = added.lock().map_err(poisoned)?;
            let Marks { present, .. } = &mut *m;
            let selected = per_value(&rows, |v| {
                let t = touched.contains(v);
                if t {
                    if let Some(p) = present.as_mut() {
                        p.insert(Box::from(v));
                    }
                }
                t || added.contains(v)
            });
            let base = m.rows;
            for (i, s) in selected.into_iter().enumerate() {
                if !s {
                    continue;
                }
                let at = base + i as u64;
                match m.runs.last_mut() {
                    Some(r) if r.end == at => r.end = at + 1,
                    _ => m.runs.push(at..at + 1),
                }
            }
            m.rows += n as u64;
            if n > 0 {
                m.last = Some(rows.row(n - 1).owned());
            }
            Ok(b)
        })))
    }

    /// Select the rows at `runs` (positions in the written stream) of
    /// `parts`, the parts just written from it: a part of selected rows
    /// only is selected whole; a part holding some is read back and its
    /// selected rows kept in `pending` (written when they fill a part, or
    /// before the next whole part).
    fn select_written(
        &self,
        parts: &[RangePart],
        runs: &[Range<u64>],
        pending: &mut Vec<RecordBatch>,
        flush: &mut Flush<'_>,
        out: &mut PartsRewritten,
    ) -> Result<()> {
        let mut start = 0u64;
        let mut r = 0usize;
        for part in parts {
            let end = start + part.rows;
            while r < runs.len() && runs[r].end <= start {
                r += 1;
            }
            let pieces: Vec<Range<u64>> = runs[r..]
                .iter()
                .take_while(|run| run.start < end)
                .map(|run| run.start.max(start) - start..run.end.min(end) - start)
                .collect();
            match pieces.as_slice() {
                [] => {}
                [one] if *one == (0..part.rows) => {
                    flush(pending, out)?;
                    out.selected.push(part.clone());
                }
                _ => {
                    let batches = self
                        .read_many(std::slice::from_ref(part), None)?
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>();
                    let all = arrow_select::concat::concat_batches(&self.schema, &batches)?;
                    for p in pieces {
                        pending.push(all.slice(p.start as usize, (p.end - p.start) as usize));
                    }
                    let held: usize = pending.iter().map(|b| b.num_rows()).sum();
                    if held >= self.target_rows {
                        flush(pending, out)?;
                    }
                }
            }
            start = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    use crate::producers::partset::tests::{change, layout, read, rows, stream};

    /// A key spanning five parts, with a small key in its first part and
    /// two in its last: its unit is rewritten as a stream, each change's
    /// result, selection, removed rows and deleted values as the change
    /// says.
    #[test]
    fn a_unit_of_many_parts_is_rewritten_as_a_stream() {
        let l = layout();
        let mut all: Vec<(i64, i64)> = (0..30).map(|v| (-1, v)).collect();
        all.extend((0..850).map(|v| (0, v)));
        all.extend([(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]);
        let mut created = Vec::new();
        let parts = l
            .write("p", stream(vec![rows(&all)]), &mut created)
            .unwrap();
        let units = crate::producers::parts::units(&parts, &l.schema, &l.cut_key).unwrap();
        assert!(units.len() == 1 && parts.len() >= 5, "{units:?}");

        // A small key next to the large one: its rows replaced; only they
        // are selected (read back from the mixed part).
        let c = l
            .rewrite(&parts, change("c", &[1], &[(1, 7), (1, 8)]))
            .unwrap();
        let mut want = all.clone();
        want.retain(|r| r.0 != 1);
        want.extend([(1, 7), (1, 8)]);
        want.sort();
        assert_eq!(read(&l, &c.parts), want);
        assert_eq!(read(&l, &c.selected), vec![(1, 7), (1, 8)]);
        assert_eq!(c.removed.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
        assert!(c.deleted.is_empty());

        // The large key replaced whole: its new parts are selected as they are.
        let new: Vec<(i64, i64)> = (0..700).map(|v| (0, 5000 + v)).collect();
        let d = l.rewrite(&c.parts, change("d", &[0], &new)).unwrap();
        let mut want2: Vec<(i64, i64)> = want.iter().copied().filter(|r| r.0 != 0).collect();
        want2.extend(new.iter().copied());
        want2.sort();
        assert_eq!(read(&l, &d.parts), want2);
        assert_eq!(read(&l, &d.selected), new);
        assert!(d.selected.iter().any(|p| d.parts.contains(p)));
        assert!(d.selected.iter().any(|p| !d.parts.contains(p)));
        assert_eq!(d.removed.iter().map(|b| b.num_rows()).sum::<usize>(), 850);

        // A key deleted and one added that was never there.
        let e = l
            .rewrite(&d.parts, change("e", &[2, 3], &[(3, 1)]))
            .unwrap();
        let mut want3: Vec<(i64, i64)> = want2.iter().copied().filter(|r| r.0 != 2).collect();
        want3.push((3, 1));
        assert_eq!(read(&l, &e.parts), want3);
        assert_eq!(read(&l, &e.selected), vec![(3, 1)]);
        let gone: Vec<i64> = e
            .deleted
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        assert_eq!(gone, vec![2]);
    }
}
