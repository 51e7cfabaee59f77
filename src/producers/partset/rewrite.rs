//! Rewriting a part set where a change lands: each touched part patched,
//! or rewritten in place with its patches merged in; the other parts kept
//! by reference.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::key_filter::{filter_by_keys, key_set, missing, sorted_keys};
use super::key_split::KeySplitter;
use super::reader::Reader;
use super::streamed;
use super::{poisoned, Change, Derived, PartSet, PartsRewritten, Remove};
use crate::error::{Error, Result};
use crate::producers::keys::{key_set_new, KeyEncoder};
use crate::producers::merge::merge_sorted;
use crate::producers::parts::{last_key_rows, write_range_parts, PartSpec, RangePart};
use crate::producers::patch::{extremes, may_patch, Layered, Patch};
use crate::producers::sort::BATCH_ROWS;
use crate::producers::splice::Sorted;
use crate::producers::BatchIter;

/// Rows a part's file holds at least for a change to it to read only the
/// pages holding the change's values first (see [`PartSet::rewrite`]).
pub const SEEK_MIN_ROWS: u64 = 65_536;

/// Rows per Parquet data page at most (the writer's default), to tell
/// which changes leave most pages unread.
const PAGE_ROWS: u64 = 20_000;

/// The patches of one rewrite share one file of deleted values (each
/// owning a run of it) while it holds at most this many rows; past it,
/// each patch writes its own (a reader of a patch fetches the whole
/// shared file, so it is kept small against a part).
pub const SHARED_DELETED_MAX_ROWS: u64 = 65_536;

/// A patch whose deleted values go to the rewrite's shared file (see
/// [`PartSet::share_deleted`]).
struct Deferred {
    /// Its part's index in [`PartsRewritten::parts`].
    part: usize,
    /// Its run of the shared values.
    run: [u64; 2],
    /// Its own file's name prefix, if the shared file is not written.
    name: String,
}

/// The patch `d` defers, in `out`.
fn deferred_patch<'a>(out: &'a mut PartsRewritten, d: &Deferred) -> Result<&'a mut Patch> {
    out.parts
        .get_mut(d.part)
        .and_then(|p| p.patches.last_mut())
        .ok_or_else(|| Error::Task("a deferred patch is not in the rewrite".into()))
}

/// Rows of `batches`.
fn count(batches: &[RecordBatch]) -> u64 {
    batches.iter().map(|b| b.num_rows() as u64).sum()
}

impl PartSet {
    /// Write a sorted stream as new parts named `<prefix>-NNNNN.parquet`.
    pub(in crate::producers) fn write(
        &self,
        prefix: &str,
        stream: BatchIter,
        created: &mut Vec<String>,
    ) -> Result<Vec<RangePart>> {
        let spec = PartSpec {
            location: &self.root,
            prefix,
            target_rows: self.target_rows,
            opts: &self.opts,
        };
        let parts = write_range_parts(
            self.store.clone(),
            &spec,
            self.schema.clone(),
            &self.cut_key,
            stream,
        )?;
        created.extend(parts.iter().map(|p| self.object(p)));
        Ok(parts)
    }

    /// Apply `change` to `parts` (see [`Change`]); only the parts whose key
    /// ranges the touched or added keys fall in are read and rewritten. A
    /// failure removes what this call wrote.
    pub fn rewrite(&self, parts: &[RangePart], change: Change) -> Result<PartsRewritten> {
        let mut out = PartsRewritten::default();
        match self.rewrite_into(parts, change, &mut out) {
            Ok(()) => Ok(out),
            Err(e) => {
                let _ = crate::runtime::block_on(self.store.delete_many(&out.created));
                Err(e)
            }
        }
    }

    fn rewrite_into(
        &self,
        parts: &[RangePart],
        change: Change,
        out: &mut PartsRewritten,
    ) -> Result<()> {
        let cut = self.encoder(&self.cut_key)?;
        let Change {
            remove,
            touch,
            adds,
            collect_removed,
            select,
            prefix,
            derived,
        } = change;
        // Touch keys come as batches of the cut key's columns only.
        let mut touch_split =
            KeySplitter::new(touch, KeyEncoder::new(&*self.cut_schema()?, &self.cut_key)?);
        if parts.is_empty() {
            // Nothing stored: the adds are the new set, every row selected;
            // touched keys that no added row holds are deleted. Memory: the
            // touched keys only.
            let touched = touch_split.take_until(None)?;
            let tenc = KeyEncoder::new(&*self.cut_schema()?, &self.cut_key)?;
            let wanted = key_set(&touched, &tenc)?;
            let seen = Arc::new(std::sync::Mutex::new(key_set_new()));
            let stream: BatchIter = if select && !wanted.is_empty() {
                let tap_enc = self.encoder(&self.cut_key)?;
                let seen = seen.clone();
                Box::new(adds.map(move |b| {
                    let b = b?;
                    let rows = tap_enc.rows(&b)?;
                    let mut s = seen.lock().map_err(poisoned)?;
                    for i in 0..b.num_rows() {
                        let r = rows.row(i);
                        if wanted.contains(r.as_ref()) {
                            s.insert(Box::from(r.as_ref()));
                        }
                    }
                    Ok(b)
                }))
            } else {
                adds
            };
            out.parts = self.write(&format!("{prefix}-s00000"), stream, &mut out.created)?;
            if select {
                out.selected = out.parts.clone();
                let seen = seen.lock().map_err(poisoned)?;
                out.deleted = missing(&touched, &tenc, &seen)?;
            }
            return Ok(());
        }
        let add_split = Arc::new(std::sync::Mutex::new(KeySplitter::new(
            adds,
            self.encoder(&self.cut_key)?,
        )));
        let bounds = last_key_rows(parts, &self.schema, &self.cut_key)?;
        let remove = Arc::new(remove);
        let remove_enc = match &*remove {
            Remove::Keys { key, .. } => Some(self.encoder(key)?),
            Remove::Nothing => None,
        };
        let tenc = KeyEncoder::new(&*self.cut_schema()?, &self.cut_key)?;
        // Each part's range of the derived leading columns.
        let lead_bounds = match &derived {
            Some(d) => {
                let lead = self
                    .cut_key
                    .get(..d.m)
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!("a prefix of {} cut-key columns", d.m))
                    })?;
                Some(crate::producers::parts::key_bounds(
                    parts,
                    &self.schema,
                    lead,
                )?)
            }
            None => None,
        };
        // Selected rows not yet written (flushed before a reference).
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut written_selections = 0usize;
        let mut flush = |pending: &mut Vec<RecordBatch>, out: &mut PartsRewritten| -> Result<()> {
            if pending.is_empty() {
                return Ok(());
            }
            let stream: BatchIter = Box::new(std::mem::take(pending).into_iter().map(Ok));
            let name = format!("{prefix}-u{written_selections:05}");
            written_selections += 1;
            let made = self.write(&name, stream, &mut out.created)?;
            out.selected.extend(made);
            Ok(())
        };
        // A key spanning parts: its parts form one unit, rewritten together.
        let units = crate::producers::parts::units(parts, &self.schema, &self.cut_key)?;
        let last = units.len() - 1;
        let has = |v: &[RecordBatch]| v.iter().any(|b| b.num_rows() > 0);
        let lock = || add_split.lock().map_err(poisoned);
        // The derived leading values within the range of parts `j..j + n`.
        let leads_in = |j: usize, n: usize| -> std::ops::Range<usize> {
            match (&derived, &lead_bounds) {
                (Some(d), Some((lo, hi))) => {
                    let (lo, hi) = (lo.row(j).data(), hi.row(j + n - 1).data());
                    let a = d.prefixes.partition_point(|p| **p < *lo);
                    let b = d.prefixes.partition_point(|p| **p <= *hi);
                    a..b.max(a)
                }
                _ => 0..0,
            }
        };
        let no_leads: &[Box<[u8]>] = &[];
        let leads = |r: std::ops::Range<usize>| match &derived {
            Some(d) => &d.prefixes[r],
            None => no_leads,
        };
        // Patches whose deleted values go to one shared file, and those
        // values when they are not the update's (`out.deleted`).
        let mut deferred: Vec<Deferred> = Vec::new();
        let mut shared_gone: Vec<RecordBatch> = Vec::new();
        // The rows of that file so far: the next patch's run starts here.
        let mut shared_rows = match select {
            true => count(&out.deleted),
            false => 0,
        };
        let mut reader = Reader::new(self);
        // The next unit's touched and added rows, taken early to read it ahead.
        let mut taken: Option<(Vec<RecordBatch>, Vec<RecordBatch>)> = None;
        for (u, range) in units.iter().enumerate() {
            let j = range.start;
            let unit = &parts[range.clone()];
            let bound = (u < last).then(|| bounds.row(j + unit.len() - 1));
            let (touch_j, adds_early) = match taken.take() {
                Some((touch, adds)) => (touch, Some(adds)),
                None => (touch_split.take_until(bound)?, None),
            };
            let lead = leads(leads_in(j, unit.len()));
            if unit.len() > 1 && lead.is_empty() {
                // A key spanning parts: rewritten as a stream, whatever its size.
                let (first, _) = lock()?.take_until_limit(bound, 1)?;
                let any_add = has(&first);
                lock()?.unread(first);
                if !any_add && !has(&touch_j) {
                    out.parts.extend(unit.iter().cloned());
                    continue;
                }
                let change = streamed::UnitChange {
                    unit,
                    touch: &touch_j,
                    adds: add_split.clone(),
                    bound: bound.map(|r| r.owned()),
                    remove: remove.clone(),
                    collect_removed,
                    select,
                    name: format!("{prefix}-s{j:05}"),
                };
                self.rewrite_unit_streamed(change, &mut pending, &mut flush, out)?;
                if select {
                    // It added its unit's deleted values to `out.deleted`.
                    shared_rows = count(&out.deleted);
                }
                continue;
            }
            let adds_j = match adds_early {
                Some(adds) => adds,
                None => lock()?.take_until(bound)?,
            };
            if !has(&adds_j) && !has(&touch_j) && lead.is_empty() {
                out.parts.extend(unit.iter().cloned());
                continue;
            }
            // The unit's rows (a key spanning parts: all of its parts, in
            // memory for now), patches applied; the cut-key values this
            // change is about, sorted, and their rows.
            // A small change to a large part reads only the pages holding
            // its values first (see [`Self::seekable`]); if it must then be
            // rewritten in place, the part is read whole.
            let mut seek = match unit {
                [one] => self.seekable(one, &adds_j, &touch_j, lead.len()),
                _ => false,
            };
            // If the next unit is one part this change reads whole, it is
            // read on the reader's thread while this one is worked on.
            if let Some(next) = units.get(u + 1).filter(|r| r.len() == 1) {
                let k = next.start;
                let next_bound = (u + 1 < last).then(|| bounds.row(k));
                let touch = touch_split.take_until(next_bound)?;
                let adds = lock()?.take_until(next_bound)?;
                let n_leads = leads_in(k, 1).len();
                if (has(&adds) || has(&touch) || n_leads > 0)
                    && !self.seekable(&parts[k], &adds, &touch, n_leads)
                {
                    reader.ask(k, &parts[k])?;
                }
                taken = Some((touch, adds));
            }
            let touch_given = touch_j;
            loop {
                let old = match (unit, seek) {
                    ([one], true) => {
                        let values = self.seek_values(&touch_given, &adds_j, derived.as_ref())?;
                        self.seek_parts(vec![one.clone()], &values, &self.schema_names())?
                            .remove(0)
                    }
                    ([one], false) => reader.read(j, one)?,
                    _ => {
                        let rows = self.read_many(unit, None)?.into_iter().flatten().collect();
                        Layered::new(&self.schema, &cut, &tenc, rows, Vec::new())?
                    }
                };
                // Values beginning with a derived leading value that hold a
                // removed row are touched too.
                let mut touch_j = touch_given.clone();
                if !lead.is_empty() {
                    let extra = self.derived_touches(&old, lead, &remove, remove_enc.as_ref())?;
                    if !extra.is_empty() {
                        let lists: Vec<BatchIter> = vec![
                            Box::new(std::mem::take(&mut touch_j).into_iter().map(Ok)),
                            Box::new(extra.into_iter().map(Ok)),
                        ];
                        touch_j =
                            merge_sorted(self.cut_schema()?, &self.cut_key, lists, BATCH_ROWS)?
                                .collect::<Result<_>>()?;
                    }
                    if !has(&adds_j) && !has(&touch_j) {
                        out.parts.extend(unit.iter().cloned());
                        break;
                    }
                }
                let wanted = sorted_keys(&[(&touch_j, &tenc), (&adds_j, &cut)])?;
                let (old_w, n_w) = old.take(&wanted)?;
                // Rows are removed in touched values only (see
                // [`Change::touch`]), as in a streamed unit.
                let (kept, removed) = match (&*remove, &remove_enc) {
                    (Remove::Keys { set, .. }, Some(enc)) => {
                        let touched = key_set(&touch_j, &tenc)?;
                        filter_by_keys(&old_w, enc, set, false, Some((&cut, &touched)))?
                    }
                    _ => (old_w, Vec::new()),
                };
                // Every row, after the change, of each value it is about.
                let picked: Vec<RecordBatch> = merge_sorted(
                    self.schema.clone(),
                    &self.sort_key,
                    vec![
                        Box::new(kept.into_iter().map(Ok)),
                        Box::new(adds_j.clone().into_iter().map(Ok)),
                    ],
                    BATCH_ROWS,
                )?
                .collect::<Result<_>>()?;
                // The touched values left with no row.
                let gone = missing(&touch_j, &tenc, &key_set(&picked, &cut)?)?;
                // Rows the unit keeps untouched (a seek read only some).
                let stored = match seek {
                    true => unit[0].rows as usize,
                    false => old.len(),
                };
                let rest = stored
                    .checked_sub(n_w)
                    .ok_or_else(|| Error::PartCorrupted {
                        path: self.object(&unit[0]),
                        reason: "its rows are not in key order".into(),
                    })? as u64;
                let live = rest + count(&picked);
                if may_patch(unit, live, count(&picked) + count(&gone)) {
                    // The part's new range: its rows' extremes (after a
                    // seek, its recorded range, which may then be wider than
                    // its rows), and the picked rows'.
                    let mut ends = match seek {
                        true => self.recorded_ends(&unit[0])?,
                        false => old.ends_without(&wanted),
                    };
                    ends.extend(
                        picked
                            .iter()
                            .find(|b| b.num_rows() > 0)
                            .map(|b| b.slice(0, 1)),
                    );
                    ends.extend(
                        picked
                            .iter()
                            .rev()
                            .find(|b| b.num_rows() > 0)
                            .map(|b| b.slice(b.num_rows() - 1, 1)),
                    );
                    let (first, last) = extremes(&cut, &ends)?
                        .ok_or_else(|| Error::Task("a patched part has no row".into()))?;
                    let name = format!("{prefix}-p{j:05}");
                    let part = self.patched(&unit[0], live, (first, last), picked, &name, out)?;
                    let n_gone = count(&gone);
                    if n_gone > 0 {
                        deferred.push(Deferred {
                            part: out.parts.len(),
                            run: [shared_rows, shared_rows + n_gone],
                            name: format!("{name}d"),
                        });
                        if !select {
                            shared_rows += n_gone;
                            shared_gone.extend(gone.iter().cloned());
                        }
                    }
                    if collect_removed {
                        out.removed.extend(removed);
                    }
                    if select {
                        flush(&mut pending, out)?;
                        if let Some(rows) = part.patches.last().and_then(|p| p.rows.clone()) {
                            out.selected.push(rows);
                        }
                        shared_rows += n_gone;
                        out.deleted.extend(gone);
                    }
                    out.parts.push(part);
                    break;
                }
                if seek {
                    // Rewritten in place: read it whole.
                    seek = false;
                    continue;
                }
                if collect_removed {
                    out.removed.extend(removed);
                }
                // Rewritten in place: each value's rows replaced by its new ones.
                let only_picked = rest == 0;
                let new = Sorted::new(self.schema.clone(), picked.clone(), &cut)?;
                let merged: BatchIter = Box::new(old.replaced(&wanted, &new)?.into_iter().map(Ok));
                drop(old);
                let new_parts =
                    self.write(&format!("{prefix}-s{j:05}"), merged, &mut out.created)?;
                out.parts.extend(new_parts.iter().cloned());
                if select {
                    if only_picked && !picked.is_empty() {
                        flush(&mut pending, out)?;
                        out.selected.extend(new_parts);
                    } else {
                        pending.extend(picked);
                    }
                    shared_rows += count(&gone);
                    out.deleted.extend(gone);
                }
                break;
            }
        }
        flush(&mut pending, out)?;
        let values = match select {
            true => out.deleted.clone(),
            false => shared_gone,
        };
        self.share_deleted(deferred, values, select, &prefix, out)
    }

    /// Write the deleted values of the patches in `deferred` (their runs of
    /// `values`): one file, `<prefix>-d`, shared by each patch whose part
    /// holds at least [`PATCH_SHARE`] times its rows (so that what a read of
    /// the part decodes beyond its own keys stays within a quarter of its
    /// rows per patch), if it holds at most [`SHARED_DELETED_MAX_ROWS`] rows;
    /// the other patches write a file each, their own. With `select`,
    /// `values` are the update's deleted values, and the shared file is the
    /// update's too.
    ///
    /// [`PATCH_SHARE`]: crate::producers::patch::PATCH_SHARE
    fn share_deleted(
        &self,
        deferred: Vec<Deferred>,
        values: Vec<RecordBatch>,
        select: bool,
        prefix: &str,
        out: &mut PartsRewritten,
    ) -> Result<()> {
        let total = count(&values);
        let share = |part: &RangePart| {
            total <= SHARED_DELETED_MAX_ROWS
                && total.saturating_mul(crate::producers::patch::PATCH_SHARE) <= part.rows
        };
        let sharing = deferred
            .iter()
            .any(|d| out.parts.get(d.part).is_some_and(share));
        if !sharing {
            return self.own_deleted(deferred, &values, out);
        }
        let schema = self.cut_schema()?;
        let file = self.write_one(
            &format!("{prefix}-d"),
            schema,
            &self.cut_key,
            values.clone(),
            &mut out.created,
        )?;
        let (shared, own): (Vec<Deferred>, Vec<Deferred>) = deferred
            .into_iter()
            .partition(|d| out.parts.get(d.part).is_some_and(share));
        for d in shared {
            let patch = deferred_patch(out, &d)?;
            patch.deleted = Some(file.clone());
            patch.deleted_rows = Some(d.run);
        }
        self.own_deleted(own, &values, out)?;
        if select {
            out.deleted_file = Some(file);
        }
        Ok(())
    }

    /// Each patch of `deferred` its own file of deleted values: its run of
    /// `values`.
    fn own_deleted(
        &self,
        deferred: Vec<Deferred>,
        values: &[RecordBatch],
        out: &mut PartsRewritten,
    ) -> Result<()> {
        let schema = self.cut_schema()?;
        for d in deferred {
            let [start, end] = d.run;
            let own = super::rows_in(values, start, end);
            let f = self.write_one(
                &d.name,
                schema.clone(),
                &self.cut_key,
                own,
                &mut out.created,
            )?;
            deferred_patch(out, &d)?.deleted = Some(f);
        }
        Ok(())
    }

    /// Whether a change to `part` (`adds` rows, `touch` values, `lead`
    /// derived leading values) reads only the pages holding its values
    /// first: a part large enough for a seek to pay ([`SEEK_MIN_ROWS`]),
    /// with room for a patch, and a change small enough to be one (else
    /// the part is rewritten, and read whole) and to leave most pages
    /// unread (each value's page holds up to [`PAGE_ROWS`] rows).
    fn seekable(
        &self,
        part: &RangePart,
        adds: &[RecordBatch],
        touch: &[RecordBatch],
        lead: usize,
    ) -> bool {
        let rows = |v: &[RecordBatch]| v.iter().map(|b| b.num_rows() as u64).sum::<u64>();
        let values = rows(adds) + rows(touch) + lead as u64;
        part.file_rows() >= SEEK_MIN_ROWS
            && part.patches.len() + 1 < crate::producers::patch::patch_limit(part)
            && rows(adds).saturating_mul(crate::producers::patch::PATCH_SHARE) <= part.rows
            && values.saturating_mul(2 * PAGE_ROWS) <= part.file_rows()
    }

    /// The values of the cut key's first column a unit's change is about
    /// (touched, added, derived leading values), as a one-column batch.
    fn seek_values(
        &self,
        touch: &[RecordBatch],
        adds: &[RecordBatch],
        derived: Option<&Derived>,
    ) -> Result<Vec<RecordBatch>> {
        let first = &self.cut_key[0];
        let mut columns: Vec<arrow_array::ArrayRef> = Vec::new();
        for b in touch.iter().chain(adds) {
            let i = b.schema().index_of(first)?;
            columns.push(b.column(i).clone());
        }
        columns.extend(derived.map(|d| d.first.clone()));
        let field = self.schema.field_with_name(first)?.clone();
        columns
            .into_iter()
            .filter(|c| !c.is_empty())
            .map(|c| {
                let schema = Arc::new(arrow_schema::Schema::new(vec![field
                    .clone()
                    .with_data_type(c.data_type().clone())]));
                Ok(RecordBatch::try_new(schema, vec![c])?)
            })
            .collect()
    }

    /// A part's recorded first and last keys, as one-row batches of the
    /// cut key's columns.
    fn recorded_ends(&self, part: &RangePart) -> Result<Vec<RecordBatch>> {
        let schema = self.cut_schema()?;
        let fields: Vec<&arrow_schema::Field> =
            schema.fields().iter().map(|f| f.as_ref()).collect();
        let keys = [part.first_key.as_slice(), part.last_key.as_slice()];
        let columns = crate::producers::parts::json_key_columns(&keys, &fields)?;
        let both = RecordBatch::try_new(schema, columns)?;
        Ok(vec![both.slice(0, 1), both.slice(1, 1)])
    }

    /// The cut-key values of `old` beginning with one of `lead` (see
    /// [`Derived`]) that hold a row `remove` removes: the cut key's
    /// columns, sorted (repeats allowed).
    fn derived_touches(
        &self,
        old: &Layered,
        lead: &[Box<[u8]>],
        remove: &Remove,
        enc: Option<&KeyEncoder>,
    ) -> Result<Vec<RecordBatch>> {
        let (Remove::Keys { set, .. }, Some(enc)) = (remove, enc) else {
            return Ok(Vec::new());
        };
        let (rows, _) = old.take(&old.keys_with_prefix(lead))?;
        let (gone, _) = filter_by_keys(&rows, enc, set, true, None)?;
        let schema = self.cut_schema()?;
        let idx = crate::parquet::decode::column_indices(&self.schema, &self.cut_key)?;
        gone.iter()
            .map(|b| {
                Ok(RecordBatch::try_new(
                    schema.clone(),
                    b.project(&idx)?.columns().to_vec(),
                )?)
            })
            .collect()
    }

    /// Write one file of `batches` (sorted by `key`), however many rows.
    fn write_one(
        &self,
        prefix: &str,
        schema: SchemaRef,
        key: &[String],
        batches: Vec<RecordBatch>,
        created: &mut Vec<String>,
    ) -> Result<RangePart> {
        let spec = PartSpec {
            location: &self.root,
            prefix,
            target_rows: usize::MAX,
            opts: &self.opts,
        };
        let stream: BatchIter = Box::new(batches.into_iter().map(Ok));
        let mut parts = write_range_parts(self.store.clone(), &spec, schema, key, stream)?;
        created.extend(parts.iter().map(|p| self.object(p)));
        match (parts.pop(), parts.is_empty()) {
            (Some(p), true) => Ok(p),
            _ => Err(Error::Task(format!("{prefix}: expected one file"))),
        }
    }

    /// `part` with a new patch (see [`crate::producers::patch`]): `picked`,
    /// every row after the change of each value it is about, written as
    /// `prefix`-*; `live` rows after it, `first` and `last` its lowest and
    /// highest row (its new key range). The values it leaves with no row
    /// are filled in once the rewrite has them all
    /// ([`Self::share_deleted`]).
    fn patched(
        &self,
        part: &RangePart,
        live: u64,
        (first, last): (RecordBatch, RecordBatch),
        picked: Vec<RecordBatch>,
        prefix: &str,
        out: &mut PartsRewritten,
    ) -> Result<RangePart> {
        let rows = if picked.iter().any(|b| b.num_rows() > 0) {
            let key = self.cut_key.clone();
            Some(self.write_one(prefix, self.schema.clone(), &key, picked, &mut out.created)?)
        } else {
            None
        };
        let mut p = part.clone();
        p.base_rows = Some(part.file_rows());
        p.rows = live;
        p.first_key = crate::producers::keys::key_values(&first, &self.cut_key, 0);
        p.last_key = crate::producers::keys::key_values(&last, &self.cut_key, 0);
        p.patches.push(Patch {
            rows,
            deleted: None,
            deleted_rows: None,
        });
        Ok(p)
    }
}
