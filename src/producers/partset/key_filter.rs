//! Rows filtered by key sets, and the key sets a change is about.

use arrow_array::{BooleanArray, RecordBatch};
use arrow_row::Rows;

use crate::error::{Error, Result};
use crate::producers::keys::{key_set_new, KeyEncoder, KeySet};
use crate::producers::patch::merge_newest;

/// Whether each row's cut-key value satisfies `test`, asked once per run
/// of equal values (rows are sorted by the cut key).
pub(super) fn per_value(rows: &Rows, mut test: impl FnMut(&[u8]) -> bool) -> Vec<bool> {
    let mut out = Vec::with_capacity(rows.num_rows());
    let mut prev: Option<bool> = None;
    for i in 0..rows.num_rows() {
        let same = i > 0 && rows.row(i - 1) == rows.row(i);
        let v = match (same, prev) {
            (true, Some(v)) => v,
            _ => test(rows.row(i).as_ref()),
        };
        prev = Some(v);
        out.push(v);
    }
    out
}

/// Limits a key filter to the rows whose value of another key (sorted
/// rows' cut key, read by the encoder) is in the set.
pub type Within<'a> = Option<(&'a KeyEncoder, &'a KeySet)>;

/// Which rows of `b` have their `encoder` key in `set`, and (if `within` is
/// given) their cut-key value in its set.
pub(super) fn key_mask(
    b: &RecordBatch,
    encoder: &KeyEncoder,
    set: &KeySet,
    within: Within,
) -> Result<BooleanArray> {
    let inside = match within {
        Some((cut, values)) => Some(per_value(&cut.rows(b)?, |v| values.contains(v))),
        None => None,
    };
    let rows = encoder.rows(b)?;
    Ok((0..b.num_rows())
        .map(|i| {
            let within = inside.as_ref().is_none_or(|v| v[i]);
            Some(within && set.contains(rows.row(i).as_ref()))
        })
        .collect())
}

/// `b` split by `mask`: the rows it marks, then the others.
pub(super) fn split_by_mask(
    b: &RecordBatch,
    mask: &BooleanArray,
) -> Result<(RecordBatch, RecordBatch)> {
    let inverse = arrow_arith::boolean::not(mask)?;
    Ok((
        arrow_select::filter::filter_record_batch(b, mask)?,
        arrow_select::filter::filter_record_batch(b, &inverse)?,
    ))
}

/// Rows of `batches` whose `key` columns are (`keep == true`) or are not in
/// `set`, then the others; with `within`, only rows in its values count as
/// in `set`.
pub fn filter_by_keys(
    batches: &[RecordBatch],
    encoder: &KeyEncoder,
    set: &KeySet,
    keep: bool,
    within: Within,
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    let (mut hit, mut miss) = (Vec::new(), Vec::new());
    for b in batches {
        let mask = key_mask(b, encoder, set, within)?;
        let (yes, no) = match mask.true_count() {
            0 => (b.slice(0, 0), b.clone()),
            n if n == b.num_rows() => (b.clone(), b.slice(0, 0)),
            _ => split_by_mask(b, &mask)?,
        };
        let (a, c) = if keep { (yes, no) } else { (no, yes) };
        if a.num_rows() > 0 {
            hit.push(a);
        }
        if c.num_rows() > 0 {
            miss.push(c);
        }
    }
    Ok((hit, miss))
}

/// The distinct key rows of `batches`.
pub fn key_set(batches: &[RecordBatch], encoder: &KeyEncoder) -> Result<KeySet> {
    let mut set = key_set_new();
    for b in batches {
        let rows = encoder.rows(b)?;
        for i in 0..b.num_rows() {
            set.insert(Box::from(rows.row(i).as_ref()));
        }
    }
    Ok(set)
}

/// The values of `lead` (batches of a key's leading columns, any names)
/// as row-format bytes, sorted, distinct: what a key beginning with one of
/// them begins with.
pub fn lead_prefixes(lead: &[RecordBatch]) -> Result<Vec<Box<[u8]>>> {
    let mut prefixes: Vec<Box<[u8]>> = Vec::new();
    for b in lead {
        let names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let rows = KeyEncoder::new(&b.schema(), &names)?.rows(b)?;
        prefixes.extend((0..b.num_rows()).map(|i| Box::from(rows.row(i).data())));
    }
    prefixes.sort_unstable();
    prefixes.dedup();
    Ok(prefixes)
}

/// The distinct keys of several batch lists (each sorted by its key,
/// with the encoder of its key columns: same key types), as row-format
/// bytes, sorted: one linear merge. `Task` if a list is out of order.
pub(super) fn sorted_keys(lists: &[(&[RecordBatch], &KeyEncoder)]) -> Result<Vec<Box<[u8]>>> {
    let mut out: Vec<Box<[u8]>> = Vec::new();
    for (batches, enc) in lists {
        let mut mine: Vec<Box<[u8]>> = Vec::new();
        for b in batches.iter() {
            let rows = enc.rows(b)?;
            for i in 0..b.num_rows() {
                let r = rows.row(i).data();
                match mine.last() {
                    Some(l) if **l == *r => {}
                    Some(l) if **l > *r => return Err(Error::Task("keys out of order".into())),
                    _ => mine.push(Box::from(r)),
                }
            }
        }
        out = merge_newest(std::mem::take(&mut out), mine, |k| k);
    }
    Ok(out)
}

/// The distinct rows of `keys` whose key is not in `present`, in order.
pub(super) fn missing(
    keys: &[RecordBatch],
    encoder: &KeyEncoder,
    present: &KeySet,
) -> Result<Vec<RecordBatch>> {
    let mut seen = key_set_new();
    let mut out = Vec::new();
    for b in keys {
        let rows = encoder.rows(b)?;
        let mask: BooleanArray = (0..b.num_rows())
            .map(|i| {
                let r = rows.row(i);
                Some(!present.contains(r.as_ref()) && seen.insert(Box::from(r.as_ref())))
            })
            .collect();
        let kept = arrow_select::filter::filter_record_batch(b, &mask)?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}
