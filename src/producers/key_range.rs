//! Key ranges: the unit of work when a stage update is split into tasks
//! (see [`super::split_stage`]).
//!
//! A [`KeyRange`] is `[lo, hi)` over a key's columns, each bound one value
//! per key column as JSON (the form [`RangePart`] records its first and
//! last keys in), or unbounded. Bounds compare in arrow's row format, as
//! every sort and merge of the engine does. [`plan`] cuts a part list into
//! ranges at part boundaries, so that each stored part falls in exactly one
//! range; [`RangeFilter`] is a range compiled for one key's types: it keeps
//! or checks rows, and picks the parts inside (or overlapping) the range.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_row::{OwnedRow, Row, RowConverter, Rows, SortField};
use arrow_schema::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::keys::key_columns;
use super::node::NodeView;
use super::parts::{json_key_columns, RangePart};
use super::BatchIter;
use crate::error::{Error, Result};

/// One key as JSON values, one per key column (`None`: null).
pub type KeyValues = Vec<Option<Value>>;

/// A key range `[lo, hi)`; a missing bound is unbounded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyRange {
    /// The least key in the range (inclusive).
    #[serde(default)]
    pub lo: Option<KeyValues>,
    /// The least key past the range (exclusive).
    #[serde(default)]
    pub hi: Option<KeyValues>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        Self::default()
    }

    /// From bound rows: one-row batches holding the key columns (in key
    /// order; names are not looked at). `InvalidArgument` for a batch that
    /// is not one row, or a key type without JSON bounds.
    pub fn from_rows(lo: Option<&RecordBatch>, hi: Option<&RecordBatch>) -> Result<Self> {
        let values = |b: &RecordBatch| -> Result<KeyValues> {
            if b.num_rows() != 1 {
                return Err(Error::InvalidArgument(format!(
                    "a key bound is one row, not {}",
                    b.num_rows()
                )));
            }
            b.columns()
                .iter()
                .map(|c| {
                    if c.is_null(0) {
                        return Ok(None);
                    }
                    crate::parquet::stats::to_json(c.as_ref(), 0)
                        .map(Some)
                        .ok_or_else(|| {
                            Error::InvalidArgument(format!(
                                "a key of type {} cannot bound a range",
                                c.data_type()
                            ))
                        })
                })
                .collect()
        };
        Ok(Self {
            lo: lo.map(values).transpose()?,
            hi: hi.map(values).transpose()?,
        })
    }
}

/// Cut `parts` (in key order, as a layout writes them) into at most
/// `max_ranges` ranges of about equal rows, at part boundaries: each part
/// falls in exactly one range, the first range is unbounded below and the
/// last above, and a boundary is the first key of the part it starts. Parts
/// sharing a boundary key (a key spanning parts) are never cut apart, so
/// there may be fewer ranges. No parts: one unbounded range. No I/O.
pub fn plan(parts: &[RangePart], max_ranges: usize) -> Vec<KeyRange> {
    // Where a cut may go: after part `j`, unless it shares its last key
    // with the next part's first (the records are the same JSON values).
    let cuttable: Vec<usize> = (0..parts.len().saturating_sub(1))
        .filter(|&j| parts[j].last_key != parts[j + 1].first_key)
        .collect();
    let n = max_ranges.max(1).min(cuttable.len() + 1);
    let total: u64 = parts.iter().map(|p| p.rows.max(1)).sum();
    let mut ranges = Vec::with_capacity(n);
    let mut lo: Option<KeyValues> = None;
    let mut acc = 0u64;
    let mut cuts_left = cuttable.len();
    let mut next_cut = cuttable.iter().peekable();
    for (j, p) in parts.iter().enumerate() {
        acc += p.rows.max(1);
        if next_cut.peek() != Some(&&j) {
            continue;
        }
        next_cut.next();
        let left_ranges = n - ranges.len() - 1;
        // Cut after this part once its share is reached (or cuts run short).
        let share = total * (ranges.len() as u64 + 1) / n as u64;
        if left_ranges > 0 && (acc >= share || cuts_left == left_ranges) {
            let hi = parts[j + 1].first_key.clone();
            ranges.push(KeyRange {
                lo: lo.take(),
                hi: Some(hi.clone()),
            });
            lo = Some(hi);
        }
        cuts_left -= 1;
    }
    ranges.push(KeyRange { lo, hi: None });
    ranges
}

/// Ranges from boundary keys (e.g. sampled ones, for a first build): the
/// keys are sorted and repeats dropped, each starts a range, and the first
/// range is unbounded below. `key_schema`: the key columns' types.
pub fn plan_from_bounds(key_schema: &Schema, bounds: Vec<KeyValues>) -> Result<Vec<KeyRange>> {
    let conv = converter(key_schema)?;
    let refs: Vec<&[Option<Value>]> = bounds.iter().map(|b| b.as_slice()).collect();
    let rows = json_rows(&conv, key_schema, &refs)?;
    let mut order: Vec<usize> = (0..bounds.len()).collect();
    order.sort_by(|&a, &b| rows.row(a).cmp(&rows.row(b)));
    order.dedup_by(|a, b| rows.row(*a) == rows.row(*b));
    let mut out = Vec::with_capacity(order.len() + 1);
    let mut lo = None;
    for i in order {
        let hi = bounds[i].clone();
        out.push(KeyRange {
            lo: lo.take(),
            hi: Some(hi.clone()),
        });
        lo = Some(hi);
    }
    out.push(KeyRange { lo, hi: None });
    Ok(out)
}

/// At most `max_ranges` ranges from sampled keys (any order, repeats
/// allowed): [`plan_from_bounds`], keeping evenly spaced boundaries of the
/// sorted samples. No samples: one unbounded range.
pub fn plan_from_samples(
    key_schema: &Schema,
    samples: Vec<KeyValues>,
    max_ranges: usize,
) -> Result<Vec<KeyRange>> {
    let all = plan_from_bounds(key_schema, samples)?;
    let bounds: Vec<KeyValues> = all.iter().skip(1).filter_map(|r| r.lo.clone()).collect();
    let keep = max_ranges.max(1) - 1;
    if bounds.len() <= keep {
        return Ok(all);
    }
    let picked: Vec<KeyValues> = (1..=keep)
        .map(|i| bounds[i * bounds.len() / (keep + 1)].clone())
        .collect();
    plan_from_bounds(key_schema, picked)
}

fn converter(key_schema: &Schema) -> Result<RowConverter> {
    let fields = key_schema
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    RowConverter::new(fields)
        .map_err(|e| Error::InvalidArgument(format!("the key cannot be ordered: {e}")))
}

/// Keys given as JSON values (one slice per key) as rows of `conv`.
fn json_rows(conv: &RowConverter, key_schema: &Schema, keys: &[&[Option<Value>]]) -> Result<Rows> {
    if keys.iter().any(|k| k.len() != key_schema.fields().len()) {
        return Err(Error::InvalidArgument(format!(
            "a key bound holds a value per key column ({})",
            key_schema.fields().len()
        )));
    }
    let fields: Vec<&arrow_schema::Field> =
        key_schema.fields().iter().map(|f| f.as_ref()).collect();
    let columns = json_key_columns(keys, &fields)?;
    // A value that does not parse as its column's type would become a null.
    for (n, c) in columns.iter().enumerate() {
        if let Some(i) = (0..keys.len()).find(|&i| keys[i][n].is_some() && c.is_null(i)) {
            return Err(Error::InvalidArgument(format!(
                "key value {:?} is not of key column {:?}'s type {}",
                keys[i][n],
                fields[n].name(),
                fields[n].data_type()
            )));
        }
    }
    Ok(conv.convert_columns(&columns)?)
}

/// Where a part lies with respect to a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Every key of the part is below the range.
    Before,
    /// The part holds keys of the range (see [`RangeFilter::places`]).
    Inside,
    /// Every key of the part is at or past the range's upper bound.
    After,
}

/// A [`KeyRange`] compiled for one key's types (see the module docs).
#[derive(Debug)]
pub struct RangeFilter {
    range: KeyRange,
    key_schema: SchemaRef,
    converter: RowConverter,
    lo: Option<OwnedRow>,
    hi: Option<OwnedRow>,
}

impl RangeFilter {
    /// `range` over keys of `key_schema` (the key columns, in key order).
    /// `InvalidArgument` for bounds that do not fit the key, or `lo >= hi`.
    pub fn new(range: &KeyRange, key_schema: SchemaRef) -> Result<Self> {
        let converter = converter(&key_schema)?;
        let one = |b: &Option<KeyValues>| -> Result<Option<OwnedRow>> {
            match b {
                None => Ok(None),
                Some(v) => Ok(Some(
                    json_rows(&converter, &key_schema, &[v.as_slice()])?
                        .row(0)
                        .owned(),
                )),
            }
        };
        let (lo, hi) = (one(&range.lo)?, one(&range.hi)?);
        if let (Some(l), Some(h)) = (&lo, &hi) {
            if l.row() >= h.row() {
                return Err(Error::InvalidArgument(format!(
                    "key range {range:?} is empty: lo must be below hi"
                )));
            }
        }
        Ok(Self {
            range: range.clone(),
            key_schema,
            converter,
            lo,
            hi,
        })
    }

    /// The range this filter tests.
    pub fn range(&self) -> &KeyRange {
        &self.range
    }

    /// Whether a key row lies in the range (rows compare by their bytes,
    /// whichever converter of the key's types made them).
    fn holds(&self, r: Row<'_>) -> bool {
        let r = r.as_ref();
        self.lo.as_ref().is_none_or(|l| r >= l.row().as_ref())
            && self.hi.as_ref().is_none_or(|h| r < h.row().as_ref())
    }

    /// Order by lower bound (unbounded first); both of one key.
    pub fn cmp_lo(&self, other: &Self) -> std::cmp::Ordering {
        match (&self.lo, &other.lo) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => a.row().as_ref().cmp(b.row().as_ref()),
        }
    }

    /// Whether this range ends where `other` starts, or before.
    pub fn ends_before(&self, other: &Self) -> bool {
        match (&self.hi, &other.lo) {
            (Some(h), Some(l)) => h.row().as_ref() <= l.row().as_ref(),
            _ => false,
        }
    }

    /// The key rows of `batch`'s columns `key` (in key order).
    fn rows(&self, batch: &RecordBatch, key: &[String]) -> Result<Rows> {
        Ok(self.converter.convert_columns(&key_columns(batch, key)?)?)
    }

    /// The rows of `batch` whose `key` columns lie in the range.
    pub fn keep(&self, batch: &RecordBatch, key: &[String]) -> Result<RecordBatch> {
        if self.lo.is_none() && self.hi.is_none() {
            return Ok(batch.clone());
        }
        let rows = self.rows(batch, key)?;
        let mask: arrow_array::BooleanArray = (0..batch.num_rows())
            .map(|i| Some(self.holds(rows.row(i))))
            .collect();
        Ok(arrow_select::filter::filter_record_batch(batch, &mask)?)
    }

    /// `InvalidArgument` (naming `what`) if a row of `batch` lies outside
    /// the range: rows routed to the wrong task must not be dropped.
    pub fn check(&self, batch: &RecordBatch, key: &[String], what: &str) -> Result<()> {
        if self.lo.is_none() && self.hi.is_none() {
            return Ok(());
        }
        let rows = self.rows(batch, key)?;
        match (0..batch.num_rows()).find(|&i| !self.holds(rows.row(i))) {
            None => Ok(()),
            Some(i) => Err(Error::InvalidArgument(format!(
                "{what}: row {i} has a key outside the task's range {:?}",
                self.range
            ))),
        }
    }

    /// `stream` with only its rows in the range.
    pub fn filtered(self: &Arc<Self>, stream: BatchIter, key: &[String]) -> BatchIter {
        let (this, key) = (self.clone(), key.to_vec());
        Box::new(stream.map(move |b| this.keep(&b?, &key)))
    }

    /// `stream`, failing at the first row outside the range (see [`Self::check`]).
    pub fn checked(self: &Arc<Self>, stream: BatchIter, key: &[String], what: &str) -> BatchIter {
        let (this, key, what) = (self.clone(), key.to_vec(), what.to_string());
        Box::new(stream.map(move |b| {
            let b = b?;
            this.check(&b, &key, &what)?;
            Ok(b)
        }))
    }

    /// Where each of `parts` (recorded over this filter's key) lies, and
    /// whether it lies wholly there (`false`: it straddles a bound).
    pub fn places(&self, parts: &[RangePart]) -> Result<Vec<(Place, bool)>> {
        let firsts: Vec<&[Option<Value>]> = parts.iter().map(|p| p.first_key.as_slice()).collect();
        let lasts: Vec<&[Option<Value>]> = parts.iter().map(|p| p.last_key.as_slice()).collect();
        let first = json_rows(&self.converter, &self.key_schema, &firsts)?;
        let last = json_rows(&self.converter, &self.key_schema, &lasts)?;
        Ok((0..parts.len())
            .map(|j| {
                let (f, l) = (first.row(j), last.row(j));
                let before = self
                    .lo
                    .as_ref()
                    .is_some_and(|lo| l.as_ref() < lo.row().as_ref());
                let after = self
                    .hi
                    .as_ref()
                    .is_some_and(|hi| f.as_ref() >= hi.row().as_ref());
                let place = if before {
                    Place::Before
                } else if after {
                    Place::After
                } else {
                    Place::Inside
                };
                // Inside whole, or only overlapping (straddling a bound).
                (
                    place,
                    place != Place::Inside || self.holds(f) && self.holds(l),
                )
            })
            .collect())
    }

    /// The parts lying inside the range, in order. `InvalidArgument` if a
    /// part straddles a bound: a range of work must not cut a part.
    pub fn parts_in(&self, parts: &[RangePart]) -> Result<Vec<RangePart>> {
        let mut out = Vec::new();
        for (p, (place, whole)) in parts.iter().zip(self.places(parts)?) {
            if !whole {
                return Err(Error::InvalidArgument(format!(
                    "part {:?} straddles the bounds of range {:?}: ranges must be cut at part boundaries",
                    p.name, self.range
                )));
            }
            if place == Place::Inside {
                out.push(p.clone());
            }
        }
        Ok(out)
    }

    /// The parts holding some key of the range (whole or straddling), in order.
    pub fn overlapping(&self, parts: &[RangePart]) -> Result<Vec<RangePart>> {
        Ok(parts
            .iter()
            .zip(self.places(parts)?)
            .filter(|(_, (place, _))| *place == Place::Inside)
            .map(|(p, _)| p.clone())
            .collect())
    }

    /// `node` (a source of a stage, or a merge) with only the parts that
    /// may hold keys of the range: its content, update rows and deleted
    /// keys (a merge's feeders likewise). What is read from it must still
    /// be [`Self::filtered`]: kept parts hold keys outside the range too.
    pub fn prune(&self, node: &NodeView) -> Result<NodeView> {
        let mut n = node.clone();
        n.state.content = self.overlapping(&node.state.content)?;
        n.state.update.rows = self.overlapping(&node.state.update.rows)?;
        n.state.update.deleted = self.overlapping(&node.state.update.deleted)?;
        n.feeders = node
            .feeders
            .iter()
            .map(|f| self.prune(f))
            .collect::<Result<_>>()?;
        Ok(n)
    }
}

/// The least and the greatest key of `batch` (key columns `key`, of the
/// types of `key_schema`) as lowercase hex of their row-format bytes:
/// hex texts (and the bytes they spell) order as the keys do, so a key
/// lies in the range of [`range_lows_hex`]'s bounds that its text places
/// it in. `None` for a batch of no row.
pub fn key_bounds_hex(
    key_schema: &Schema,
    batch: &RecordBatch,
    key: &[String],
) -> Result<Option<(String, String)>> {
    let conv = converter(key_schema)?;
    let rows = conv.convert_columns(&key_columns(batch, key)?)?;
    let mut it = rows.iter();
    let Some(first) = it.next() else {
        return Ok(None);
    };
    let (lo, hi) = it.fold((first, first), |(lo, hi), r| (lo.min(r), hi.max(r)));
    Ok(Some((hex::encode(lo.as_ref()), hex::encode(hi.as_ref()))))
}

/// The lower bounds of `ranges` after the first, as [`key_bounds_hex`]
/// spells keys: a key (as that hex) lies in range `i` where `i` bounds
/// are at or below it. `InvalidArgument` unless `ranges` cover every key
/// in order (the first unbounded below, each starting where the one
/// before ends, the last unbounded above), as [`plan_from_samples`] plans
/// them.
pub fn range_lows_hex(ranges: &[KeyRange], key_schema: SchemaRef) -> Result<Vec<String>> {
    let filters = ranges
        .iter()
        .map(|r| RangeFilter::new(r, key_schema.clone()))
        .collect::<Result<Vec<_>>>()?;
    let bytes = |r: &Option<OwnedRow>| r.as_ref().map(|r| r.row().as_ref().to_vec());
    let covering = filters.first().is_some_and(|f| f.lo.is_none())
        && filters.last().is_some_and(|f| f.hi.is_none())
        && filters
            .windows(2)
            .all(|w| bytes(&w[0].hi).is_some() && bytes(&w[0].hi) == bytes(&w[1].lo));
    if !covering {
        return Err(Error::InvalidArgument(
            "key ranges must cover every key in order, each starting where the one before ends"
                .into(),
        ));
    }
    Ok(filters
        .iter()
        .skip(1)
        .filter_map(|f| f.lo.as_ref().map(|l| hex::encode(l.row().as_ref())))
        .collect())
}

/// For each row of `batch`, whose columns `lead` hold the leading values
/// of keys (of the types of `key_schema`'s first `lead.len()` fields), the
/// first and last index of the ranges of `ranges` (sorted, disjoint,
/// covering every key) that may hold a key beginning with them: where a
/// changed source key's derived rows may live (see
/// [`super::split_stage::MapOutput::derived`]). Decided on the bounds' leading
/// values alone, so a range whose bound begins with the very values
/// counts on both sides of it (one range too many at most).
pub fn prefix_spans(
    ranges: &[KeyRange],
    key_schema: &Schema,
    batch: &RecordBatch,
    lead: &[String],
) -> Result<Vec<(u32, u32)>> {
    let m = lead.len();
    if m == 0 || m > key_schema.fields().len() {
        return Err(Error::InvalidArgument(format!(
            "a key prefix of 1 to {} columns, not {m}",
            key_schema.fields().len()
        )));
    }
    let prefix_schema = key_schema.project(&(0..m).collect::<Vec<_>>())?;
    let conv = converter(&prefix_schema)?;
    let bound = |b: &Option<KeyValues>| -> Result<Option<Vec<Option<Value>>>> {
        match b {
            None => Ok(None),
            Some(v) if v.len() == key_schema.fields().len() => Ok(Some(v[..m].to_vec())),
            Some(_) => Err(Error::InvalidArgument(format!(
                "a key bound holds a value per key column ({})",
                key_schema.fields().len()
            ))),
        }
    };
    // Each range's bounds' leading values, as rows (None: unbounded).
    let mut lows = Vec::with_capacity(ranges.len());
    let mut highs = Vec::with_capacity(ranges.len());
    for r in ranges {
        lows.push(bound(&r.lo)?);
        highs.push(bound(&r.hi)?);
    }
    let given: Vec<&[Option<Value>]> = lows
        .iter()
        .chain(&highs)
        .flatten()
        .map(|v| v.as_slice())
        .collect();
    let rows = json_rows(&conv, &prefix_schema, &given)?;
    let mut at = 0;
    let mut next = || {
        at += 1;
        rows.row(at - 1)
    };
    let los: Vec<Option<Row>> = lows.iter().map(|l| l.as_ref().map(|_| next())).collect();
    let his: Vec<Option<Row>> = highs.iter().map(|h| h.as_ref().map(|_| next())).collect();
    let keys = conv.convert_columns(&super::keys::key_columns(batch, lead)?)?;
    keys.iter()
        .enumerate()
        .map(|(i, p)| {
            let holds =
                |j: usize| los[j].is_none_or(|lo| lo <= p) && his[j].is_none_or(|hi| hi >= p);
            let first = (0..ranges.len()).find(|&j| holds(j));
            let last = (0..ranges.len()).rev().find(|&j| holds(j));
            match (first, last) {
                (Some(a), Some(b)) => Ok((a as u32, b as u32)),
                _ => Err(Error::InvalidArgument(format!(
                    "row {i}: no key range holds keys beginning with its values"
                ))),
            }
        })
        .collect()
}

/// For each row of `batch` (key columns `key`, of the types of
/// `key_schema`), the index of the range of `ranges` (sorted, disjoint,
/// e.g. from [`plan`]) that holds it: what a shuffle partitions by.
/// `InvalidArgument` for a row no range holds.
pub fn assign(
    ranges: &[KeyRange],
    key_schema: SchemaRef,
    batch: &RecordBatch,
    key: &[String],
) -> Result<Vec<u32>> {
    let filters = ranges
        .iter()
        .map(|r| RangeFilter::new(r, key_schema.clone()))
        .collect::<Result<Vec<_>>>()?;
    let Some(first) = filters.first() else {
        return Err(Error::InvalidArgument("no key ranges to assign to".into()));
    };
    let rows = first.rows(batch, key)?;
    (0..batch.num_rows())
        .map(|i| {
            let r = rows.row(i);
            // The last range whose lower bound is <= the row.
            let (mut lo, mut hi) = (0, filters.len());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if filters[mid]
                    .lo
                    .as_ref()
                    .is_none_or(|l| l.row().as_ref() <= r.as_ref())
                {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            match lo.checked_sub(1) {
                Some(j) if filters[j].holds(r) => Ok(j as u32),
                _ => Err(Error::InvalidArgument(format!(
                    "row {i} lies in none of the {} key ranges",
                    filters.len()
                ))),
            }
        })
        .collect()
}

/// Test helper, as a driver's shuffle does: each row of `batch` appended
/// to the batches of every range its span `(first, last)` covers (`into`:
/// one list per range; `spans`: one per row).
#[cfg(test)]
pub(crate) fn push_by_span(
    batch: &RecordBatch,
    spans: &[(u32, u32)],
    into: &mut [Vec<RecordBatch>],
) {
    for (r, out) in into.iter_mut().enumerate() {
        let mask: arrow_array::BooleanArray = spans
            .iter()
            .map(|&(a, z)| Some(a as usize <= r && r <= z as usize))
            .collect();
        out.push(arrow_select::filter::filter_record_batch(batch, &mask).unwrap());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field};

    /// Every key beginning with a prefix lies in a range of its span, and
    /// the span is no wider than one range past the keys on either side.
    #[test]
    fn prefix_spans_hold_every_key_with_the_prefix() {
        use arrow_array::StringArray;
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, false),
            Field::new("k", DataType::Int64, false),
        ]));
        let b = |s: &str, k: i64| Some(vec![Some(Value::from(s)), Some(Value::from(k))]);
        let cuts = [b("b", 5), b("b", 9), b("d", 0)];
        let mut ranges = Vec::new();
        let mut lo = None;
        for c in cuts.iter().cloned().chain([None]) {
            ranges.push(KeyRange {
                lo: lo.clone(),
                hi: c.clone(),
            });
            lo = c;
        }
        let words = ["", "a", "b", "c", "d", "e", "b\u{0}"];
        let ks = [i64::MIN, -1, 0, 5, 7, 9, i64::MAX];
        let (mut ss, mut kk) = (Vec::new(), Vec::new());
        for w in words {
            for k in ks {
                ss.push(w.to_string());
                kk.push(k);
            }
        }
        let full = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(ss.clone())),
                Arc::new(Int64Array::from(kk)),
            ],
        )
        .unwrap();
        let key = vec!["s".to_string(), "k".to_string()];
        let at = assign(&ranges, schema.clone(), &full, &key).unwrap();
        let prefixes = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)])),
            vec![Arc::new(StringArray::from(words.to_vec()))],
        )
        .unwrap();
        let spans = prefix_spans(&ranges, &schema, &prefixes, &["s".to_string()]).unwrap();
        for (w, (a, z)) in words.iter().zip(&spans) {
            let held: Vec<u32> = (0..ss.len())
                .filter(|&i| ss[i] == *w)
                .map(|i| at[i])
                .collect();
            let (lo, hi) = (*held.iter().min().unwrap(), *held.iter().max().unwrap());
            assert!(
                *a <= lo && hi <= *z,
                "{w:?}: span {a}..={z}, keys in {lo}..={hi}"
            );
            assert!(
                lo - a <= 1 && z - hi <= 1,
                "{w:?}: span {a}..={z} too wide for {lo}..={hi}"
            );
        }
        assert_eq!(spans[1], (0, 0), "a");
        assert_eq!(spans[2], (0, 2), "b");
        assert_eq!(spans[3], (2, 2), "c");
        assert_eq!(spans[5], (3, 3), "e");
        assert!(prefix_spans(&ranges, &schema, &prefixes, &[]).is_err());
    }

    #[test]
    fn hex_bounds_place_keys_where_assign_does() {
        use arrow_array::StringArray;
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, false),
            Field::new("k", DataType::Int64, false),
        ]));
        let words = ["", "a", "ab", "abc", "b", "ba", "\u{e9}", "zz", "a\u{0}"];
        let (mut ss, mut ks) = (Vec::new(), Vec::new());
        for (i, w) in words.iter().enumerate() {
            for k in [-3i64, 0, 7, i64::MAX, i64::MIN] {
                ss.push(w.to_string());
                ks.push(k.wrapping_mul(i as i64 % 3 - 1)); // i64::MIN stays i64::MIN
            }
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(ss.clone())),
                Arc::new(Int64Array::from(ks.clone())),
            ],
        )
        .unwrap();
        let key = vec!["s".to_string(), "k".to_string()];
        let samples: Vec<KeyValues> = ss
            .iter()
            .zip(&ks)
            .step_by(4)
            .map(|(s, k)| vec![Some(Value::from(s.clone())), Some(Value::from(*k))])
            .collect();
        let ranges = plan_from_samples(&schema, samples, 64).unwrap();
        assert!(ranges.len() > 4);
        let lows = range_lows_hex(&ranges, schema.clone()).unwrap();
        assert_eq!(lows.len(), ranges.len() - 1);
        let want = assign(&ranges, schema.clone(), &batch, &key).unwrap();
        for (i, w) in want.iter().enumerate() {
            let (lo, hi) = key_bounds_hex(&schema, &batch.slice(i, 1), &key)
                .unwrap()
                .unwrap();
            assert_eq!(lo, hi);
            let at = lows.iter().filter(|b| b.as_str() <= lo.as_str()).count();
            assert_eq!(at as u32, *w, "row {i}: {:?} {}", ss[i], ks[i]);
        }
        // A batch's bounds are its least and greatest keys, in any row order.
        let (lo, hi) = key_bounds_hex(&schema, &batch, &key).unwrap().unwrap();
        let each: Vec<String> = (0..batch.num_rows())
            .map(|i| {
                key_bounds_hex(&schema, &batch.slice(i, 1), &key)
                    .unwrap()
                    .unwrap()
                    .0
            })
            .collect();
        assert_eq!(&lo, each.iter().min().unwrap());
        assert_eq!(&hi, each.iter().max().unwrap());
        assert!(key_bounds_hex(&schema, &batch.slice(0, 0), &key)
            .unwrap()
            .is_none());
        // Ranges with a gap, or not starting unbounded, are refused.
        assert!(range_lows_hex(&[ranges[0].clone(), ranges[2].clone()], schema.clone()).is_err());
        assert!(range_lows_hex(&ranges[1..], schema.clone()).is_err());
        assert!(range_lows_hex(&[], schema).is_err());
    }

    #[test]
    fn samples_plan_at_most_the_ranges_asked_for() {
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, false)]);
        let samples: Vec<KeyValues> = (0..100i64)
            .rev()
            .map(|i| vec![Some(Value::from(i))])
            .collect();
        let r = plan_from_samples(&schema, samples.clone(), 5).unwrap();
        assert_eq!(r.len(), 5);
        assert!(r[0].lo.is_none() && r[4].hi.is_none());
        for w in r.windows(2) {
            assert_eq!(w[0].hi, w[1].lo);
        }
        let few = plan_from_samples(&schema, samples[..2].to_vec(), 5).unwrap();
        assert_eq!(few.len(), 3);
        assert_eq!(
            plan_from_samples(&schema, Vec::new(), 5).unwrap(),
            vec![KeyRange::all()]
        );
    }

    fn part(first: i64, last: i64, rows: u64) -> RangePart {
        RangePart {
            name: format!("p{first}"),
            rows,
            size_bytes: 1,
            sha256: String::new(),
            first_key: vec![Some(Value::from(first))],
            last_key: vec![Some(Value::from(last))],
            patches: Vec::new(),
            base_rows: None,
            footer: None,
        }
    }

    fn ks() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]))
    }

    fn batch(v: &[i64]) -> RecordBatch {
        RecordBatch::try_new(ks(), vec![Arc::new(Int64Array::from(v.to_vec()))]).unwrap()
    }

    #[test]
    fn plans_cut_at_part_boundaries_and_cover_every_part_once() {
        let parts: Vec<RangePart> = (0..10).map(|i| part(i * 10, i * 10 + 5, 3)).collect();
        assert_eq!(plan(&[], 4), vec![KeyRange::all()]);
        for k in [1, 2, 3, 5, 10, 50] {
            let ranges = plan(&parts, k);
            assert_eq!(ranges.len(), k.min(10), "k = {k}");
            assert_eq!(ranges[0].lo, None);
            assert_eq!(ranges[ranges.len() - 1].hi, None);
            let mut seen = 0;
            for r in &ranges {
                let f = RangeFilter::new(r, ks()).unwrap();
                let inside = f.parts_in(&parts).unwrap();
                assert!(!inside.is_empty(), "k = {k}: an empty range {r:?}");
                assert_eq!(inside[0].name, parts[seen].name, "in order, once each");
                seen += inside.len();
            }
            assert_eq!(seen, parts.len());
        }
        // A range that cuts a part is refused.
        let cut = KeyRange {
            lo: Some(vec![Some(Value::from(3))]),
            hi: None,
        };
        let f = RangeFilter::new(&cut, ks()).unwrap();
        assert!(matches!(f.parts_in(&parts), Err(Error::InvalidArgument(_))));
        assert_eq!(f.overlapping(&parts).unwrap().len(), 10);
    }

    /// Parts sharing a boundary key (a key spanning them) are never cut
    /// apart: every range holds whole units, whatever is asked for.
    #[test]
    fn plans_never_split_a_key_spanning_parts() {
        // Key 30 spans parts 3..=7; 60 spans 8 and 9.
        let bounds = [
            (0, 5),
            (10, 15),
            (20, 30),
            (30, 30),
            (30, 30),
            (30, 30),
            (30, 30),
            (30, 40),
            (50, 60),
            (60, 60),
        ];
        let parts: Vec<RangePart> = bounds.iter().map(|&(f, l)| part(f, l, 3)).collect();
        for k in [1, 2, 3, 4, 5, 10] {
            let ranges = plan(&parts, k);
            assert!(ranges.len() <= k.min(4), "k = {k}: {} ranges", ranges.len());
            let mut seen = 0;
            for r in &ranges {
                let f = RangeFilter::new(r, ks()).unwrap();
                seen += f.parts_in(&parts).unwrap().len();
            }
            assert_eq!(seen, parts.len(), "k = {k}");
        }
        assert_eq!(plan(&parts, 10).len(), 4);
    }

    #[test]
    fn filters_checks_and_assignment_agree() {
        let ranges = plan_from_bounds(
            &ks(),
            vec![vec![Some(Value::from(20))], vec![Some(Value::from(10))]],
        )
        .unwrap();
        assert_eq!(ranges.len(), 3);
        let b = batch(&[-5, 10, 15, 20, 99, 9]);
        assert_eq!(
            assign(&ranges, ks(), &b, &["k".into()]).unwrap(),
            [0, 1, 1, 2, 2, 0]
        );
        let mid = RangeFilter::new(&ranges[1], ks()).unwrap();
        let kept = mid.keep(&b, &["k".into()]).unwrap();
        assert_eq!(kept.num_rows(), 2);
        assert!(mid.check(&kept, &["k".into()], "rows").is_ok());
        assert!(mid.check(&b, &["k".into()], "rows").is_err());
        let lo = batch(&[10]);
        let hi = batch(&[20]);
        assert_eq!(
            KeyRange::from_rows(Some(&lo), Some(&hi)).unwrap(),
            ranges[1]
        );
        let empty = KeyRange::from_rows(Some(&hi), Some(&lo)).unwrap();
        assert!(RangeFilter::new(&empty, ks()).is_err());
        // Ranges travel as JSON (driver to tasks); a bound of another type is refused.
        let text = serde_json::to_string(&ranges[1]).unwrap();
        assert_eq!(serde_json::from_str::<KeyRange>(&text).unwrap(), ranges[1]);
        let wrong = KeyRange {
            lo: Some(vec![Some(Value::from("ten"))]),
            hi: None,
        };
        assert!(matches!(
            RangeFilter::new(&wrong, ks()),
            Err(Error::InvalidArgument(_))
        ));
    }
}
