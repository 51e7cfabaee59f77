//! Patches: an update's change to a key-range part, layered over the part
//! instead of rewriting it.
//!
//! An update that lands in a part used to read, merge, re-encode and
//! re-upload the whole part, so a change scattered over every part cost a
//! rewrite of the whole set. Instead, when the change is small against the
//! part, the rewrite writes a *patch*: every row (after the change) of each
//! cut-key value the change touches, and the touched values left with no
//! row. The part's record keeps its file and lists its patches, oldest
//! first; a reader applies them in order, each one replacing the rows of
//! the values it covers. What an update writes is then proportional to the
//! rows it changes; what it reads is the parts its keys land in.
//!
//! Compaction is per part and size-tiered against the part: a rewrite
//! merges a part's patches into a new file (the rewrite that existed)
//! once the part has its limit of patches ([`patch_limit`]: 6 to
//! [`MAX_PATCHES`], by the part's name, so that parts patched by the same
//! updates are not all compacted by the same one) or its patched rows
//! reach 1 / [`PATCH_SHARE`] of its rows, and `Pipeline.compact` merges
//! every patched part. So a reader fetches at most 2 × [`MAX_PATCHES`] + 1
//! files per part, and a row is rewritten once per [`PATCH_SHARE`] rows of
//! change that land in its part: the cost of compaction is amortised over
//! the updates that made the patches, and bounded by one part per part
//! touched.
//!
//! A key spanning several parts (a *unit*, see [`super::parts::units`]) is
//! always rewritten in place: patches are for one part.

use std::ops::Range;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
pub use super::parts::Patch;
use super::parts::RangePart;
use super::splice::{coalesce, Sorted};
use crate::error::Result;

/// A part takes at most this many patches (see [`patch_limit`]); the next
/// change rewrites it.
pub const MAX_PATCHES: usize = 10;

/// The patches `part` takes before a change rewrites it: 6 to
/// [`MAX_PATCHES`], 8 on average, by a hash of its name (stable across
/// processes), so that compaction of parts patched together is spread
/// over several updates.
pub fn patch_limit(part: &RangePart) -> usize {
    let h = part.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    MAX_PATCHES - (h % 5) as usize
}
/// A part's patched rows (rows and deleted values over its patches) stay
/// below its rows over this; past it, the change rewrites the part.
pub const PATCH_SHARE: u64 = 4;

/// Rows and deleted values a part's patches hold (what compaction is
/// measured by).
pub fn patched_rows(part: &RangePart) -> u64 {
    part.patches.iter().map(Patch::held).sum()
}

/// Whether a change to `unit` that leaves `live` rows and writes a patch of
/// `patch_rows` rows and deleted values is written as a patch (else the
/// unit is rewritten, merging its patches in).
pub fn may_patch(unit: &[RangePart], live: u64, patch_rows: u64) -> bool {
    let [part] = unit else {
        return false;
    };
    live > 0
        && part.patches.len() < patch_limit(part)
        && (patched_rows(part) + patch_rows).saturating_mul(PATCH_SHARE) <= live
}

/// A part's file and its patches, read but not merged: a value's rows
/// are those of the newest patch that covers it, else the file's. Values
/// are found by binary search (see [`super::splice`]), so taking the rows
/// of some values costs their count plus the encoding of the file's cut
/// key, not a merge of every row.
pub struct Layered {
    base: Sorted,
    /// Each patched value (sorted by key), the newest patch covering it
    /// (an index in `patches`) and its run there (empty: deleted).
    owner: Vec<Owned>,
    patches: Vec<Sorted>,
    /// Rows after the patches.
    live: usize,
}

/// A patched value: its key, the newest patch covering it, its run there.
struct Owned {
    key: Box<[u8]>,
    patch: usize,
    run: Range<usize>,
}

/// `a` and `b` (each sorted by `key`, distinct) merged, `b` winning ties.
pub(super) fn merge_newest<T>(a: Vec<T>, b: Vec<T>, key: impl Fn(&T) -> &[u8]) -> Vec<T> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match key(x).cmp(key(y)) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    a.next();
                    b.next()
                }
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

impl Layered {
    /// `base` (the file's rows) under `patches` (each: rows of the layout's
    /// `schema`, and deleted values as the cut key's columns), oldest first.
    /// Costs the encoding of the cut keys and a linear merge of the
    /// patches' values: no search per value.
    pub fn new(
        schema: &SchemaRef,
        cut: &KeyEncoder,
        deleted_enc: &KeyEncoder,
        base: Vec<RecordBatch>,
        patches: Vec<(Vec<RecordBatch>, Vec<RecordBatch>)>,
    ) -> Result<Self> {
        let mut owner: Vec<Owned> = Vec::new();
        let mut sorted = Vec::with_capacity(patches.len());
        for (i, (rows, deleted)) in patches.into_iter().enumerate() {
            let s = Sorted::new(schema.clone(), rows, cut)?;
            // The patch's values with their runs (sequential), and its
            // deleted values (empty runs), merged by key.
            let mut mine: Vec<Owned> = Vec::new();
            for j in 0..s.len() {
                match mine.last_mut() {
                    Some(o) if *o.key == *s.key(j) => o.run.end = j + 1,
                    _ => mine.push(Owned {
                        key: Box::from(s.key(j)),
                        patch: i,
                        run: j..j + 1,
                    }),
                }
            }
            let d = deleted_enc.rows_of_all(&deleted)?;
            let mut gone: Vec<Owned> = (0..d.num_rows())
                .map(|j| Owned {
                    key: Box::from(d.row(j).data()),
                    patch: i,
                    run: 0..0,
                })
                .collect();
            gone.sort_unstable_by(|x, y| x.key.cmp(&y.key));
            gone.dedup_by(|x, y| x.key == y.key);
            let both = merge_newest(gone, mine, |o| &o.key);
            owner = merge_newest(owner, both, |o| &o.key);
            sorted.push(s);
        }
        let base = Sorted::new(schema.clone(), base, cut)?;
        let keys: Vec<Box<[u8]>> = owner.iter().map(|o| o.key.clone()).collect();
        let covered: usize = base.runs(&keys).iter().map(|r| r.len()).sum();
        let owned: usize = owner.iter().map(|o| o.run.len()).sum();
        let live = base.len() - covered + owned;
        Ok(Self {
            base,
            owner,
            patches: sorted,
            live,
        })
    }

    /// Rows after the patches.
    pub fn len(&self) -> usize {
        self.live
    }

    /// The values the patches cover (rows or deleted).
    #[cfg(test)]
    pub fn patched_values(&self) -> usize {
        self.owner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The patched value `key`, if it is one.
    fn owned(&self, key: &[u8]) -> Option<&Owned> {
        self.owner
            .binary_search_by(|o| (*o.key).cmp(key))
            .ok()
            .map(|i| &self.owner[i])
    }

    /// The rows of each value of `keys` (sorted, distinct), in order,
    /// coalesced, and how many.
    pub fn take(&self, keys: &[Box<[u8]>]) -> Result<(Vec<RecordBatch>, usize)> {
        let mut out = Vec::new();
        for (k, r) in keys.iter().zip(self.base.runs(keys)) {
            out.extend(match self.owned(k) {
                Some(o) => self.patches[o.patch].slices(o.run.clone()),
                None => self.base.slices(r),
            });
        }
        let n = out.iter().map(|b| b.num_rows()).sum();
        Ok((coalesce(&self.base.schema, out)?, n))
    }

    /// The distinct values with rows after the patches that begin with
    /// one of `prefixes` (row-format bytes of the cut key's leading
    /// columns, sorted, distinct), in order.
    pub fn keys_with_prefix(&self, prefixes: &[Box<[u8]>]) -> Vec<Box<[u8]>> {
        // A value begins with a prefix only if the greatest prefix not
        // above it is one it begins with (row-format values of the same
        // columns are prefix-free).
        let under = |k: &[u8]| {
            let i = prefixes.partition_point(|p| **p <= *k);
            i > 0 && k.starts_with(&prefixes[i - 1])
        };
        let patched: Vec<Box<[u8]>> = self
            .owner
            .iter()
            .filter(|o| !o.run.is_empty() && under(&o.key))
            .map(|o| o.key.clone())
            .collect();
        // The file's values, less those a patch deleted.
        let base: Vec<Box<[u8]>> = self
            .base
            .keys_with_prefix(prefixes)
            .into_iter()
            .filter(|k| self.owned(k).is_none_or(|o| !o.run.is_empty()))
            .collect();
        merge_newest(base, patched, |k| k)
    }

    /// The first and last of the rows whose value is not in `keys`
    /// (sorted, distinct), as one-row batches; none if there is none.
    pub fn ends_without(&self, keys: &[Box<[u8]>]) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        let listed = |k: &[u8]| keys.binary_search_by(|x| (**x).cmp(k)).is_ok();
        // The file's first and last rows of a value neither in `keys` nor
        // patched: from each end, skip the runs of such values.
        let skipped = |k: &[u8]| listed(k) || self.owned(k).is_some();
        let mut first = 0;
        while first < self.base.len() && skipped(self.base.key(first)) {
            // At least one row on: data from a store may be out of order.
            first = self.base.run(self.base.key(first)).end.max(first + 1);
        }
        let mut last = self.base.len();
        while last > first && skipped(self.base.key(last - 1)) {
            last = self.base.run(self.base.key(last - 1)).start.min(last - 1);
        }
        if first < last {
            out.extend(self.base.row_batch(first));
            out.extend(self.base.row_batch(last - 1));
        }
        // The patched values not in `keys` that have rows.
        let kept = |o: &&Owned| !o.run.is_empty() && !listed(&o.key);
        if let Some(o) = self.owner.iter().find(kept) {
            out.extend(self.patches[o.patch].row_batch(o.run.start));
        }
        if let Some(o) = self.owner.iter().rev().find(kept) {
            out.extend(self.patches[o.patch].row_batch(o.run.end - 1));
        }
        out
    }

    /// Every row after the patches, with each value of `keys` (sorted,
    /// distinct) replaced by its rows in `new` (rows of those values only),
    /// in order.
    pub fn replaced(&self, keys: &[Box<[u8]>], new: &Sorted) -> Result<Vec<RecordBatch>> {
        // Each replaced value: where its rows come from (`None`: `new`; else
        // a patch) and their run there. `keys` win over patches.
        let mine = keys
            .iter()
            .zip(new.runs(keys))
            .map(|(k, r)| (&**k, None, r))
            .collect();
        self.splice_from(merge_newest(self.patched_runs(), mine, |x| x.0), new)
    }

    /// Every row after the patches, in order.
    pub fn rows(self) -> Result<Vec<RecordBatch>> {
        if self.owner.is_empty() {
            return Ok(self.base.batches);
        }
        let with = self.patched_runs();
        self.splice_from(with, &self.base)
    }

    /// Each patched value's run in its newest patch.
    fn patched_runs(&self) -> Vec<Source<'_>> {
        self.owner
            .iter()
            .map(|o| (&*o.key, Some(o.patch), o.run.clone()))
            .collect()
    }

    /// The file's rows with each value of `with` (sorted by key) replaced
    /// by its rows (in `new` or a patch). Values whose runs are adjacent
    /// both in the file and in the same source are taken as one slice.
    fn splice_from(&self, with: Vec<Source<'_>>, new: &Sorted) -> Result<Vec<RecordBatch>> {
        let order: Vec<Box<[u8]>> = with.iter().map(|(k, _, _)| Box::from(*k)).collect();
        let mut groups: Vec<(Range<usize>, Option<usize>, Range<usize>)> = Vec::new();
        for (r, (_, src, n)) in self.base.runs(&order).into_iter().zip(with) {
            match groups.last_mut() {
                Some((gr, gs, gn)) if gr.end == r.start && *gs == src && gn.end == n.start => {
                    gr.end = r.end;
                    gn.end = n.end;
                }
                _ => groups.push((r, src, n)),
            }
        }
        let runs = groups
            .into_iter()
            .map(|(r, src, n)| {
                let from = src.map_or(new, |i| &self.patches[i]);
                (r, from.slices(n))
            })
            .collect();
        self.base.splice_runs(runs)
    }
}

/// A replaced value: its key, where its rows come from (`None`: the new
/// rows; else a patch) and their run there.
type Source<'a> = (&'a [u8], Option<usize>, Range<usize>);

/// The lowest and highest of `candidates` (one-row batches) by `cut`'s
/// key; `None` if there is none.
pub fn extremes(
    cut: &KeyEncoder,
    candidates: &[RecordBatch],
) -> Result<Option<(RecordBatch, RecordBatch)>> {
    let rows: Vec<_> = candidates.iter().filter(|b| b.num_rows() > 0).collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let keys = cut.rows_of_all(&rows.iter().map(|b| b.slice(0, 1)).collect::<Vec<_>>())?;
    let (mut lo, mut hi) = (0, 0);
    for i in 1..rows.len() {
        if keys.row(i) < keys.row(lo) {
            lo = i;
        }
        if keys.row(i) > keys.row(hi) {
            hi = i;
        }
    }
    Ok(Some((rows[lo].slice(0, 1), rows[hi].slice(0, 1))))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    use super::*;
    use crate::producers::manifest::NodeState;
    use crate::producers::node::Env;
    use crate::producers::run::tests::{
        env, first_i64s, it, keys, pairs, source_of, source_rows, source_view,
    };
    use crate::producers::source;

    use crate::test_rng::TestRng as Rng;

    fn looked_up(env: &Env, state: &NodeState, ks: &[i64]) -> BTreeMap<i64, String> {
        let mut out = BTreeMap::new();
        for b in source_view(state.clone()).lookup(env, &[keys(ks)]).unwrap() {
            let (k, v) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_string::<i32>(),
            );
            for i in 0..b.num_rows() {
                out.insert(k.value(i), v.value(i).to_string());
            }
        }
        out
    }

    /// Random small updates over a stored source: after each, the content
    /// read through the parts' patches equals a model, lookups too, the
    /// update lists exactly the changed keys, and earlier versions read
    /// as they were. Parts take patches, never more than their limit,
    /// and are rewritten (compacted) once past the bounds.
    #[test]
    fn patched_parts_read_like_rewritten_ones() {
        let env = env(40);
        let mut rng = Rng::new(0x5eed_1234_abcd);
        let mut model: BTreeMap<i64, String> =
            (0..400).step_by(2).map(|k| (k, format!("v{k}"))).collect();
        let ks: Vec<i64> = model.keys().copied().collect();
        let mut state = source_of(&env, &ks);
        let mut history = vec![(state.clone(), model.clone())];
        let (mut patched, mut compacted) = (0, 0);
        for round in 0..60 {
            let mut actions = BTreeMap::new();
            for _ in 0..1 + rng.below(6) {
                let k = rng.below(420) as i64;
                let delete = model.contains_key(&k) && rng.below(3) == 0;
                actions.insert(k, delete);
            }
            let ups: Vec<i64> = actions.iter().filter(|a| !*a.1).map(|a| *a.0).collect();
            let dels: Vec<i64> = actions.iter().filter(|a| *a.1).map(|a| *a.0).collect();
            let vals: Vec<String> = ups.iter().map(|k| format!("r{round}-{k}")).collect();
            let vr: Vec<&str> = vals.iter().map(|s| s.as_str()).collect();
            let before = state.clone();
            let (next, _) = source::apply(
                &env,
                &source_view(before.clone()),
                it(vec![pairs(&ups, &vr)]),
                vec![keys(&dels)],
            )
            .unwrap();
            for (k, v) in ups.iter().zip(&vals) {
                model.insert(*k, v.clone());
            }
            for k in &dels {
                model.remove(k);
            }
            assert_eq!(source_rows(&env, &next), model, "round {round}");
            let probe: Vec<i64> = (0..8)
                .map(|_| rng.below(420) as i64)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let want: BTreeMap<i64, String> = probe
                .iter()
                .filter_map(|k| model.get(k).map(|v| (*k, v.clone())))
                .collect();
            assert_eq!(
                looked_up(&env, &next, &probe),
                want,
                "round {round}: lookup"
            );
            // The update: every upserted key's row, the deleted keys.
            let view = source_view(next.clone());
            let upd = first_i64s(view.update_rows(&env));
            assert_eq!(upd, ups, "round {round}: update rows");
            for p in &next.content {
                assert!(p.patches.len() <= patch_limit(p) && patch_limit(p) >= 6);
                let old = before.content.iter().find(|q| q.name == p.name);
                if old.is_some_and(|q| p.patches.len() > q.patches.len()) {
                    patched += 1;
                }
            }
            // A patched part whose file is gone: rewritten with its patches.
            compacted += before
                .content
                .iter()
                .filter(|q| !q.patches.is_empty() && !next.content.iter().any(|p| p.name == q.name))
                .count();
            state = next;
            history.push((state.clone(), model.clone()));
        }
        assert!(patched > 20, "{patched} patches written");
        assert!(compacted > 0, "no patched part was ever compacted");
        for (i, (s, m)) in history.iter().enumerate().step_by(7) {
            assert_eq!(&source_rows(&env, s), m, "version {i} reads as it was");
        }
    }

    /// A small change to a large part reads only the pages holding its
    /// keys: a damaged page elsewhere in the part is not even fetched, and
    /// the patch, the update and lookups are right.
    #[test]
    fn a_small_change_to_a_large_part_reads_only_its_pages() {
        let env = env(1 << 20);
        let n = 400_000i64;
        let s1 = source_of(&env, &(0..n).collect::<Vec<_>>());
        let [part] = s1.content.as_slice() else {
            panic!("one part expected, got {}", s1.content.len());
        };
        assert!(part.file_rows() >= crate::producers::partset::SEEK_MIN_ROWS);
        // Damage the last page of the key column.
        let path = format!("{}/{}", env.root, part.name);
        use crate::runtime::block_on;
        let footer = block_on(crate::parquet::decode::read_footer_and_page_index(
            &env.store,
            &path,
            part.size_bytes,
            None,
        ))
        .unwrap()
        .unwrap();
        let pages = &footer.metadata().metadata().offset_index().unwrap()[0][0].page_locations;
        assert!(pages.len() >= 4, "{} pages", pages.len());
        let last = pages.last().unwrap();
        let at = (last.offset + last.compressed_page_size as i64 - 1) as usize;
        let mut bytes = block_on(env.store.get(&path)).unwrap().unwrap().to_vec();
        bytes[at] ^= 0x5a;
        block_on(
            env.store
                .put(&path, bytes.into(), crate::store::PutMode::Overwrite),
        )
        .unwrap()
        .unwrap();
        // Upsert 5 and 7, add -1 (below the part's range), delete 11.
        let (s2, _) = source::apply(
            &env,
            &source_view(s1.clone()),
            it(vec![pairs(&[-1, 5, 7], &["new-1", "new5", "new7"])]),
            vec![keys(&[11])],
        )
        .unwrap();
        let [p2] = s2.content.as_slice() else {
            panic!("one part expected");
        };
        assert_eq!(
            (p2.name.as_str(), p2.patches.len()),
            (part.name.as_str(), 1)
        );
        assert_eq!(p2.rows, n as u64);
        assert_eq!(p2.first_key, vec![Some(serde_json::json!(-1))]);
        assert_eq!(p2.last_key, part.last_key);
        let want: BTreeMap<i64, String> = [(-1, "new-1"), (5, "new5"), (7, "new7"), (10, "v10")]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        assert_eq!(looked_up(&env, &s2, &[-1, 5, 7, 10, 11]), want);
        let view = source_view(s2.clone());
        assert_eq!(first_i64s(view.update_rows(&env)), vec![-1, 5, 7]);
        // The damage is there: reading the part whole finds it.
        let whole: Result<Vec<RecordBatch>> = view.full_scan(&env).unwrap().collect();
        assert!(
            matches!(&whole, Err(crate::error::Error::PartCorrupted { .. })),
            "{:?}",
            whole.map(|b| b.len())
        );
    }

    #[test]
    fn damaged_patches_are_refused() {
        let env = env(40);
        let s1 = source_of(&env, &(0..100).collect::<Vec<_>>());
        let (s2, _) = source::apply(
            &env,
            &source_view(s1),
            it(vec![pairs(&[5], &["x"])]),
            vec![keys(&[7])],
        )
        .unwrap();
        assert_eq!(s2.content[0].patches.len(), 1, "{:?}", s2.content[0]);
        let read = |s: &NodeState| -> crate::error::Result<Vec<RecordBatch>> {
            source_view(s.clone()).full_scan(&env).unwrap().collect()
        };
        assert!(read(&s2).is_ok());
        // A row count that disagrees with what the patches leave.
        let mut bad = s2.clone();
        bad.content[0].rows += 1;
        let err = read(&bad).unwrap_err();
        assert!(
            matches!(err, crate::error::Error::PartCorrupted { .. }),
            "{err}"
        );
        // A patch file whose checksum is not the recorded one.
        let mut bad = s2.clone();
        bad.content[0].patches[0].rows.as_mut().unwrap().sha256 = "00".repeat(32);
        let err = read(&bad).unwrap_err();
        assert!(
            matches!(err, crate::error::Error::PartCorrupted { .. }),
            "{err}"
        );
    }
}
