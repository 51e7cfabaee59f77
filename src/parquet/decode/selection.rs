//! Row selections: the rows a read keeps by position (deletes, kept
//! positions, a file's row range), as a selection over its row groups or
//! a mask applied after decoding.

use std::sync::Arc;

use parquet::arrow::arrow_reader::{RowSelection, RowSelector};

/// Row positions in a file (0-based, sorted, without duplicates).
#[derive(Debug, Clone)]
pub enum Positions {
    /// Read every row except these.
    Drop(Arc<Vec<u64>>),
    /// Read only these rows.
    Keep(Arc<Vec<u64>>),
}

impl Positions {
    /// The row selection over `row_groups` (in file order) of a file whose
    /// row groups start at `starts` and hold `group_rows` rows each.
    fn selection(&self, starts: &[u64], group_rows: &[u64], row_groups: &[usize]) -> RowSelection {
        let (listed, keep) = match self {
            Positions::Drop(p) => (p.as_slice(), false),
            Positions::Keep(p) => (p.as_slice(), true),
        };
        let mut out = Selectors::default();
        let mut push = |select: bool, n: u64| out.push(select, n);
        for &rg in row_groups {
            let (start, end) = (starts[rg], starts[rg].saturating_add(group_rows[rg]));
            let from = listed.partition_point(|&p| p < start);
            let to = listed.partition_point(|&p| p < end);
            let mut cursor = start;
            for &p in &listed[from..to] {
                push(!keep, p - cursor);
                push(keep, 1);
                cursor = p + 1;
            }
            push(!keep, end - cursor);
        }
        RowSelection::from(out.0)
    }
}

/// Rows up to which a selection is built as a bitmap (16 MiB at most): one
/// bit a row, however fragmented the deletes, where selectors cost 16 bytes
/// a run and the decoder walks them one by one. Above it (a footer claiming
/// more rows than any real file), runs, whose size follows the positions.
pub(super) const MASK_ROWS: u64 = 1 << 27;

/// The rows to read over `row_groups` (in file order) of a file whose row
/// groups start at `starts` and hold `group_rows` rows each: those in
/// `range`, less (or only) `positions`; a bitmap up to `mask_rows` rows
/// ([`MASK_ROWS`]), runs above.
pub(super) fn row_selection(
    positions: Option<&Positions>,
    range: Option<&std::ops::Range<u64>>,
    starts: &[u64],
    group_rows: &[u64],
    row_groups: &[usize],
    mask_rows: u64,
) -> RowSelection {
    let total = row_groups
        .iter()
        .fold(0u64, |n, &rg| n.saturating_add(group_rows[rg]));
    if total > mask_rows {
        let by_range = range.map(|r| range_selection(r, starts, group_rows, row_groups));
        let by_position = positions.map(|p| p.selection(starts, group_rows, row_groups));
        return match (by_position, by_range) {
            (Some(p), Some(r)) => p.intersection(&r),
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => range_selection(&(0..u64::MAX), starts, group_rows, row_groups),
        };
    }
    let mut bits = arrow_buffer::BooleanBufferBuilder::new(total as usize);
    for &rg in row_groups {
        let (start, end) = (starts[rg], starts[rg].saturating_add(group_rows[rg]));
        let (from, to) = clamp_span(range, start, end);
        bits.append_n((from - start) as usize, false);
        let base = bits.len();
        let (listed, keep) = match positions {
            None => (&[][..], false),
            Some(Positions::Drop(p)) => (p.as_slice(), false),
            Some(Positions::Keep(p)) => (p.as_slice(), true),
        };
        bits.append_n((to - from) as usize, positions.is_none() || !keep);
        let lo = listed.partition_point(|&p| p < from);
        let hi = listed.partition_point(|&p| p < to);
        for &p in &listed[lo..hi] {
            bits.set_bit(base + (p - from) as usize, keep);
        }
        bits.append_n((end - to) as usize, false);
    }
    RowSelection::from(bits.finish())
}

/// Average rows between deletes below which they are dropped after
/// decoding rather than skipped by the decoder (arrow's own threshold for
/// preferring a bitmap to runs).
const SCATTERED_RUN: u64 = 32;

/// The rows the reader yields, in order (those of `range` over
/// `row_groups`), with a bit set for each not in `dropped`; `None` if the
/// deletes are not scattered enough to be worth decoding through, or the
/// row groups claim more rows than `mask_rows` ([`MASK_ROWS`]).
pub(super) fn kept_rows(
    dropped: &[u64],
    range: Option<&std::ops::Range<u64>>,
    starts: &[u64],
    group_rows: &[u64],
    row_groups: &[usize],
    mask_rows: u64,
) -> Option<KeptRows> {
    let spans: Vec<(u64, u64)> = row_groups
        .iter()
        .map(|&rg| clamp_span(range, starts[rg], starts[rg].saturating_add(group_rows[rg])))
        .collect();
    let total = spans.iter().fold(0u64, |n, (a, b)| n.saturating_add(b - a));
    if total > mask_rows {
        return None;
    }
    let mut runs = 0u64;
    let mut hits = Vec::with_capacity(spans.len());
    for &(from, to) in &spans {
        let lo = dropped.partition_point(|&p| p < from);
        let hi = dropped.partition_point(|&p| p < to);
        let listed = &dropped[lo..hi];
        runs += listed
            .iter()
            .enumerate()
            .filter(|(i, &p)| *i == 0 || listed[i - 1] + 1 != p)
            .count() as u64;
        hits.push(listed);
    }
    if runs == 0 || total / (2 * runs + 1) >= SCATTERED_RUN {
        return None;
    }
    let mut bits = arrow_buffer::BooleanBufferBuilder::new(total as usize);
    for (&(from, to), listed) in spans.iter().zip(hits) {
        let base = bits.len();
        bits.append_n((to - from) as usize, true);
        for &p in listed {
            bits.set_bit(base + (p - from) as usize, false);
        }
    }
    Some(KeptRows {
        mask: bits.finish(),
        at: 0,
    })
}

/// Which of the rows a reader yields (in order) to keep, and how many of
/// them it has yielded so far.
#[derive(Debug)]
pub(super) struct KeptRows {
    pub(super) mask: arrow_buffer::BooleanBuffer,
    pub(super) at: usize,
}

/// Selectors built run by run, merging neighbours of one kind.
#[derive(Default)]
struct Selectors(Vec<RowSelector>);

impl Selectors {
    fn push(&mut self, select: bool, n: u64) {
        if n == 0 {
            return;
        }
        let n = n as usize;
        match self.0.last_mut() {
            // Saturates: a footer claiming more rows than fit fails to
            // decode later, as the corruption it is.
            Some(last) if last.skip != select => last.row_count = last.row_count.saturating_add(n),
            _ => self.0.push(if select {
                RowSelector::select(n)
            } else {
                RowSelector::skip(n)
            }),
        }
    }
}

/// Where each row group starts, by row position in the file (saturating:
/// footer counts are untrusted).
pub fn group_starts(group_rows: &[u64]) -> Vec<u64> {
    let mut at = 0u64;
    group_rows
        .iter()
        .map(|n| {
            let s = at;
            at = at.saturating_add(*n);
            s
        })
        .collect()
}

/// The rows of a row group spanning `start..end` that `range` holds, as
/// `(from, to)` positions (all of them without a range).
fn clamp_span(range: Option<&std::ops::Range<u64>>, start: u64, end: u64) -> (u64, u64) {
    match range {
        Some(r) => {
            let from = r.start.clamp(start, end);
            (from, r.end.clamp(from, end))
        }
        None => (start, end),
    }
}

/// The rows of `range` (file positions) over `row_groups` (in file order).
fn range_selection(
    range: &std::ops::Range<u64>,
    starts: &[u64],
    group_rows: &[u64],
    row_groups: &[usize],
) -> RowSelection {
    let mut out = Selectors::default();
    for &rg in row_groups {
        let (start, end) = (starts[rg], starts[rg].saturating_add(group_rows[rg]));
        let (from, to) = clamp_span(Some(range), start, end);
        out.push(false, from - start);
        out.push(true, to - from);
        out.push(false, end - to);
    }
    RowSelection::from(out.0)
}
