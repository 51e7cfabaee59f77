//! Parquet -> Arrow: column projection by name, from an object store (footer
//! and column-chunk range reads) or from bytes already in memory.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{DataType, Schema, SchemaRef};
use bytes::Bytes;
use futures::StreamExt;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderBuilder, ArrowReaderMetadata, ArrowReaderOptions,
    ParquetRecordBatchReaderBuilder, RowFilter, RowSelection, RowSelector,
};
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;

use crate::error::{contain, panic_message, Error, Result};
use crate::parquet::filter::{Predicate, UnitStats};
use crate::parquet::part_schema;
use crate::parquet::range_reader::ObjectRangeReader;
use crate::store::StoreHandle;

/// Decoded batches of one part, with their (projected) schema.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// Rows in the whole part, as its footer states (before any filter).
    pub file_rows: u64,
}

/// The rows a footer says its file holds.
fn footer_rows(metadata: &ArrowReaderMetadata) -> u64 {
    u64::try_from(metadata.metadata().file_metadata().num_rows()).unwrap_or_default()
}

/// Root-column indices for `columns` in `schema`, in the caller's order.
///
/// Unknown names fail with `InvalidArgument` naming them and the choices.
pub fn column_indices(schema: &Schema, columns: &[String]) -> Result<Vec<usize>> {
    let mut missing = Vec::new();
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        match schema.index_of(c) {
            Ok(i) => out.push(i),
            Err(_) => missing.push(c.clone()),
        }
    }
    if !missing.is_empty() {
        let have: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        return Err(Error::InvalidArgument(format!(
            "unknown column(s) {missing:?}; the dataset has {have:?}"
        )));
    }
    Ok(out)
}

/// Decoding parameters shared by the in-memory and object-store readers.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Counts the parts a dataset read has decoded (see
    /// [`crate::dataset::read_dataset`]); `None`: not counted. Other readers
    /// ignore it.
    pub progress: Option<Arc<crate::progress::Progress>>,
    /// Root columns to read, in output order; `None` reads all.
    pub columns: Option<Vec<String>>,
    /// Rows per output batch; `None` uses the reader default (1024). Scans
    /// that hand batches to a consumer use [`SCAN_BATCH_ROWS`].
    pub batch_size: Option<usize>,
    /// Rows to keep. Row groups whose statistics rule it out are skipped
    /// before any of their data is fetched.
    pub predicate: Option<Arc<Predicate>>,
    /// Row groups to read (indices in file order); `None` reads all. Combined
    /// with the predicate's pruning.
    pub row_groups: Option<Vec<usize>>,
    /// Row groups not to read (e.g. deleted whole); indices the file does not
    /// have are ignored.
    pub skip_row_groups: Option<Arc<std::collections::BTreeSet<u64>>>,
    /// The dataset's full schema. Each part's footer is checked against it
    /// before any data is decoded, and every batch comes out with exactly
    /// its (projected) schema. `None` trusts the part's own schema.
    pub expected: Option<SchemaRef>,
    /// Rows to drop, or the only rows to keep, by position in the file.
    pub positions: Option<Positions>,
    /// Rows matching any of these are dropped (a table's key-range deletes).
    /// Null never matches, so a row whose column is null stays.
    pub exclude: Vec<Arc<Predicate>>,
    /// Give every output batch this schema (by column name, see
    /// [`part_schema::evolve`]): a table's file written before its schema
    /// changed. `expected` is then the file's own schema.
    pub evolve_to: Option<SchemaRef>,
    /// The only rows to read, over every row group of the file (see
    /// [`crate::parquet::seek`]): with an offset index, only the pages
    /// holding them are fetched. Not with `positions` or `row_groups`.
    pub selection: Option<parquet::arrow::arrow_reader::RowSelection>,
    /// Only the rows at these positions in the file (one piece of a file
    /// that several tasks decode at once). Combined with `positions`,
    /// `row_groups` and the predicate. Only the pages holding these rows
    /// are decompressed; with a page index loaded, only they are fetched.
    pub rows: Option<std::ops::Range<u64>>,
    /// Row groups fetched ahead of the decoder where whole column chunks
    /// are read (see [`crate::parquet::read_ahead`]); `None`:
    /// [`READ_AHEAD_ROW_GROUPS`]. A read that keeps every batch anyway
    /// (`read_dataset`) fetches the whole part at once.
    pub read_ahead: Option<usize>,
    /// A bound on the read-aheads in flight, shared by every part of one
    /// read (`read_dataset`: its `io` requests); `None`: each part's window.
    pub io_permits: Option<crate::parquet::read_ahead::IoPermits>,
}

/// Row groups a streaming read fetches ahead of its decoder by default.
pub const READ_AHEAD_ROW_GROUPS: usize = 2;

/// Rows per batch of a scan that streams to a consumer (Python, Spark) when
/// the caller gives none: large enough that the per-batch cost (the
/// channel, the C Data Interface crossing) is noise, small enough that a
/// batch of a few wide columns stays within a few tens of MiB.
pub const SCAN_BATCH_ROWS: usize = 65_536;

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
const MASK_ROWS: u64 = 1 << 27;

/// The rows to read over `row_groups` (in file order) of a file whose row
/// groups start at `starts` and hold `group_rows` rows each: those in
/// `range`, less (or only) `positions`; a bitmap up to `mask_rows` rows
/// ([`MASK_ROWS`]), runs above.
fn row_selection(
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
fn kept_rows(
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
struct KeptRows {
    mask: arrow_buffer::BooleanBuffer,
    at: usize,
}

/// Deletes applied to the decoded batches: scattered positions, and rows
/// matching a key range (null never matches).
#[derive(Debug)]
struct PostFilter {
    kept: Option<KeptRows>,
    exclude: Vec<Predicate>,
}

impl PostFilter {
    /// `batch`, the reader's next rows (file columns, before projection),
    /// without those deleted. A reader that yields more rows than its row
    /// groups declared is a corrupt file.
    fn apply(&mut self, batch: RecordBatch, path: &str) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let mut keep = None;
        if let Some(k) = &mut self.kept {
            if k.at + n > k.mask.len() {
                return Err(corrupt(
                    path,
                    format!(
                        "the decoder yielded more than the {} rows its row groups declare",
                        k.mask.len()
                    ),
                ));
            }
            keep = Some(k.mask.slice(k.at, n));
            k.at += n;
        }
        let mut bounds: Vec<(String, Option<(ArrayRef, ArrayRef)>)> = Vec::new();
        for e in &self.exclude {
            // A key range the batch's own bounds rule out costs no comparison.
            let may = e.may_match(&[n as u64], |column| {
                let known = match bounds.iter().find(|(c, _)| c == column) {
                    Some((_, b)) => b.clone(),
                    None => {
                        let b = batch.column_by_name(column).and_then(batch_bounds);
                        bounds.push((column.to_string(), b.clone()));
                        b
                    }
                };
                Ok(match known {
                    Some((lo, hi)) => UnitStats {
                        mins: Some(lo),
                        maxs: Some(hi),
                        null_counts: None,
                    },
                    None => UnitStats::default(),
                })
            })?;
            if may.first() == Some(&false) {
                continue;
            }
            let spared = !e.evaluate(&batch)?.values();
            keep = Some(match keep {
                Some(k) => &k & &spared,
                None => spared,
            });
        }
        match keep {
            Some(k) if k.count_set_bits() < n => Ok(arrow_select::filter::filter_record_batch(
                &batch,
                &BooleanArray::new(k, None),
            )?),
            _ => Ok(batch),
        }
    }
}

/// The least and greatest value of an integer, date or timestamp column,
/// as one-row arrays of its type (statistics for
/// [`Predicate::may_match`]); `None` for other types or no value.
fn batch_bounds(col: &ArrayRef) -> Option<(ArrayRef, ArrayRef)> {
    fn of<T: arrow_array::ArrowPrimitiveType>(
        a: &arrow_array::PrimitiveArray<T>,
    ) -> Option<(ArrayRef, ArrayRef)> {
        let one = |v: T::Native| -> ArrayRef {
            Arc::new(
                arrow_array::PrimitiveArray::<T>::new(vec![v].into(), None)
                    .with_data_type(arrow_array::Array::data_type(a).clone()),
            )
        };
        Some((
            one(arrow_arith::aggregate::min(a)?),
            one(arrow_arith::aggregate::max(a)?),
        ))
    }
    let t = col.data_type();
    if !(t.is_integer()
        || matches!(
            t,
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _)
        ))
    {
        return None;
    }
    arrow_array::downcast_primitive_array!(
        col => of(col),
        _ => None
    )
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

fn corrupt(path: &str, reason: String) -> Error {
    Error::PartCorrupted {
        path: path.to_string(),
        reason,
    }
}

/// A decoder panic, reported as the part's corruption.
fn decoder_panic(path: &str) -> impl FnOnce(String) -> Error + '_ {
    move |msg| Error::PartCorrupted {
        path: path.to_string(),
        reason: format!("the Parquet decoder failed on its bytes ({msg})"),
    }
}

fn corrupted(path: &str) -> impl Fn(ParquetError) -> Error + '_ {
    move |e| match e {
        ParquetError::External(inner) => match inner.downcast::<Error>() {
            // pds's own (the range reader's `NotFound`, naming the key).
            Ok(e) => *e,
            Err(inner) => match inner.downcast::<object_store::Error>() {
                // A store error reading `path` (`NotFound` names the key).
                Ok(os) => crate::error::read_error(*os, path),
                Err(other) => Error::PartCorrupted {
                    path: path.to_string(),
                    reason: other.to_string(),
                },
            },
        },
        other => Error::PartCorrupted {
            path: path.to_string(),
            reason: other.to_string(),
        },
    }
}

/// The projection mask, the permutation that restores the caller's column
/// order after decoding (which yields file order), and the output schema.
fn projection(
    metadata: &ArrowReaderMetadata,
    expected: Option<&SchemaRef>,
    columns: Option<&[String]>,
) -> Result<(ProjectionMask, Option<Vec<usize>>, SchemaRef)> {
    let reference = match expected {
        Some(s) => s.clone(),
        None => crate::parquet::chunk_crc::strip(metadata.schema()),
    };
    let Some(columns) = columns else {
        return Ok((ProjectionMask::all(), None, reference));
    };
    let indices = column_indices(metadata.schema(), columns)?;
    let target = part_schema::project(&reference, Some(&indices))?;
    let mask = ProjectionMask::roots(metadata.parquet_schema(), indices.iter().copied());
    let mut sorted = indices.clone();
    sorted.sort_unstable();
    sorted.dedup();
    // Position of each requested column within the decoded (file-order) batch.
    let order = indices
        .iter()
        .map(|i| sorted.binary_search(i).unwrap_or_default())
        .collect();
    Ok((mask, Some(order), target))
}

/// Check the part's schema, then apply projection, batch size, row-group
/// pruning and the row filter to a reader builder (sync or async). Returns
/// the column permutation to apply and the schema of the output batches.
fn configure<T>(
    builder: ArrowReaderBuilder<T>,
    metadata: &ArrowReaderMetadata,
    opts: &ReadOptions,
    path: &str,
) -> Result<Configured<T>> {
    if let Some(expected) = &opts.expected {
        part_schema::check(expected, metadata.schema(), path)?;
    }
    let exclude = opts
        .exclude
        .iter()
        .map(|p| p.as_ref().clone().bind(metadata.schema()))
        .collect::<Result<Vec<_>>>()?;
    // Without a predicate, excluded rows (key ranges) are dropped from the
    // decoded batches, reading their columns along if not asked for: one
    // comparison a row, where a row filter decodes those columns twice.
    let late_exclude = opts.predicate.is_none() && !exclude.is_empty();
    let mut columns = opts.columns.clone();
    let asked = columns.as_ref().map(Vec::len);
    if let (true, Some(cols)) = (late_exclude, &mut columns) {
        for e in &exclude {
            for c in e.columns() {
                if !cols.contains(&c) {
                    cols.push(c);
                }
            }
        }
    }
    let (mask, mut order, mut target) =
        projection(metadata, opts.expected.as_ref(), columns.as_deref())?;
    if let (Some(n), Some(o)) = (asked, &mut order) {
        if o.len() > n {
            o.truncate(n);
            target = Arc::new(target.project(&(0..n).collect::<Vec<_>>())?);
        }
    }
    let mut read_mask = mask.clone();
    let mut builder = builder.with_projection(mask);
    if let Some(n) = opts.batch_size {
        builder = builder.with_batch_size(n);
    }
    let mut selected = match &opts.row_groups {
        None => None,
        Some(wanted) => {
            let count = metadata.metadata().num_row_groups();
            if let Some(bad) = wanted.iter().find(|&&i| i >= count) {
                return Err(Error::InvalidArgument(format!(
                    "row group {bad} does not exist; the part has {count}"
                )));
            }
            Some(wanted.clone())
        }
    };
    if let Some(skip) = opts.skip_row_groups.as_ref().filter(|s| !s.is_empty()) {
        let all = selected.unwrap_or_else(|| (0..metadata.metadata().num_row_groups()).collect());
        selected = Some(
            all.into_iter()
                .filter(|&i| !skip.contains(&(i as u64)))
                .collect(),
        );
    }
    let bound = match &opts.predicate {
        Some(pred) => Some(Arc::new(pred.as_ref().clone().bind(metadata.schema())?)),
        None => None,
    };
    if let Some(bound) = &bound {
        let kept = bound.prune(metadata.metadata(), metadata.schema())?;
        selected = Some(match selected {
            None => kept,
            Some(wanted) => wanted.into_iter().filter(|i| kept.contains(i)).collect(),
        });
    }
    let (late, exclude) = match late_exclude {
        true => (exclude, Vec::new()),
        false => (Vec::new(), exclude),
    };
    let row_filtered = bound.is_some() || !exclude.is_empty();
    if row_filtered {
        let mut columns = bound.as_ref().map(|b| b.columns()).unwrap_or_default();
        for e in &exclude {
            columns.extend(e.columns());
        }
        columns.sort();
        columns.dedup();
        let cols = column_indices(metadata.schema(), &columns)?;
        let filter_mask = ProjectionMask::roots(metadata.parquet_schema(), cols);
        read_mask.union(&filter_mask);
        let row_filter = ArrowPredicateFn::new(filter_mask, move |batch| {
            let mut keep = match &bound {
                Some(b) => b.evaluate(&batch)?,
                None => arrow_array::BooleanArray::from(vec![true; batch.num_rows()]),
            };
            for e in &exclude {
                let hit = e.evaluate(&batch)?;
                keep = arrow_arith::boolean::and(&keep, &arrow_arith::boolean::not(&hit)?)?;
            }
            Ok(keep)
        });
        builder = builder.with_row_filter(RowFilter::new(vec![Box::new(row_filter)]));
    }
    if let Some(selection) = &opts.selection {
        if opts.positions.is_some() || selected.is_some() {
            return Err(Error::InvalidArgument(
                "a row selection reads every row group, without positions".into(),
            ));
        }
        builder = builder.with_row_selection(selection.clone());
    }
    let mut kept = None;
    if opts.positions.is_some() || opts.rows.is_some() {
        if opts.rows.is_some() && opts.selection.is_some() {
            return Err(Error::InvalidArgument(
                "a row selection reads every row group, without a row range".into(),
            ));
        }
        let groups = metadata.metadata().row_groups();
        let group_rows: Vec<u64> = groups.iter().map(|g| g.num_rows().max(0) as u64).collect();
        let mut list: Vec<usize> = selected
            .clone()
            .unwrap_or_else(|| (0..groups.len()).collect());
        list.sort_unstable();
        list.dedup();
        let starts = group_starts(&group_rows);
        if let Some(range) = &opts.rows {
            // Only the row groups the range touches are opened at all.
            list.retain(|&rg| {
                starts[rg] < range.end && range.start < starts[rg].saturating_add(group_rows[rg])
            });
        }
        // Scattered deletes over every row the reader yields in order (no
        // row filter): it decodes the range, and the deletes are dropped
        // from each batch after (one filter), instead of walking a selection
        // of runs a few rows long.
        let scattered = match &opts.positions {
            Some(Positions::Drop(p)) if !row_filtered => kept_rows(
                p,
                opts.rows.as_ref(),
                &starts,
                &group_rows,
                &list,
                MASK_ROWS,
            ),
            _ => None,
        };
        let selection = match (&scattered, &opts.rows) {
            (Some(_), None) => None, // Every row of the row groups is decoded.
            (Some(_), Some(r)) => Some(row_selection(
                None,
                Some(r),
                &starts,
                &group_rows,
                &list,
                MASK_ROWS,
            )),
            (None, _) => Some(row_selection(
                opts.positions.as_ref(),
                opts.rows.as_ref(),
                &starts,
                &group_rows,
                &list,
                MASK_ROWS,
            )),
        };
        kept = scattered;
        if let Some(selection) = selection {
            builder = builder.with_row_selection(selection);
        }
        selected = Some(list);
    }
    if let Some(row_groups) = &selected {
        builder = builder.with_row_groups(row_groups.clone());
    }
    let whole_chunks = !row_filtered
        && opts.selection.is_none()
        && opts.positions.is_none()
        && opts.rows.is_none();
    Ok(Configured {
        builder,
        order,
        target,
        row_groups: selected,
        mask: read_mask,
        whole_chunks,
        post: (kept.is_some() || !late.is_empty()).then(|| PostFilter {
            kept,
            exclude: late,
        }),
    })
}

/// A configured reader builder, and what it will decode.
struct Configured<T> {
    builder: ArrowReaderBuilder<T>,
    /// The permutation restoring the caller's column order.
    order: Option<Vec<usize>>,
    /// The schema of the output batches.
    target: SchemaRef,
    /// The row groups read (`None`: all).
    row_groups: Option<Vec<usize>>,
    /// The leaf columns read (projection and filter).
    mask: ProjectionMask,
    /// Whole column chunks are read, row group by row group (no row filter
    /// and no row selection): the requests can be planned ahead.
    whole_chunks: bool,
    /// Deleted rows dropped from the decoded batches.
    post: Option<PostFilter>,
}

/// The column chunks `(row group, leaf column)` a configured read decodes.
fn read_chunks(
    metadata: &ArrowReaderMetadata,
    configured: &Configured<impl Sized>,
) -> Vec<(usize, usize)> {
    let groups = metadata.metadata().num_row_groups();
    let leaves = metadata
        .metadata()
        .file_metadata()
        .schema_descr()
        .num_columns();
    let row_groups: Vec<usize> = match &configured.row_groups {
        Some(rg) => rg.clone(),
        None => (0..groups).collect(),
    };
    row_groups
        .into_iter()
        .flat_map(|rg| (0..leaves).map(move |leaf| (rg, leaf)))
        .filter(|(_, leaf)| configured.mask.leaf_included(*leaf))
        .collect()
}

/// A decoded batch in the caller's column order, with the output schema.
fn finish_batch(
    batch: RecordBatch,
    order: Option<&[usize]>,
    target: &SchemaRef,
    path: &str,
) -> Result<RecordBatch> {
    let batch = match order {
        None => batch,
        Some(order) => batch.project(order)?,
    };
    part_schema::conform(batch, target, path)
}

/// Decode a Parquet file held in memory. `path` names it in errors.
///
/// A panic inside the Parquet decoder (damaged bytes that trip one of its
/// assertions) is contained and reported as `PartCorrupted`.
pub fn decode_bytes(data: Bytes, path: &str, opts: &ReadOptions) -> Result<Decoded> {
    contain(decoder_panic(path), || {
        let err = corrupted(path);
        let metadata = ArrowReaderMetadata::load(&data, Default::default()).map_err(&err)?;
        let sums = crate::parquet::chunk_crc::ChunkChecksums::from_metadata(metadata.metadata())
            .map_err(|reason| corrupt(path, reason))?;
        let builder =
            ParquetRecordBatchReaderBuilder::new_with_metadata(data.clone(), metadata.clone());
        let configured = configure(builder, &metadata, opts, path)?;
        if let Some(sums) = sums {
            // Only the chunks this read decodes: pruned row groups stay unread.
            let chunks = read_chunks(&metadata, &configured);
            sums.check_chunks(&data, metadata.metadata(), &chunks)
                .map_err(|reason| corrupt(path, reason))?;
        }
        let Configured {
            builder,
            order,
            target,
            mut post,
            ..
        } = configured;
        let reader = builder.build().map_err(&err)?;
        let batches = reader
            .map(|b| {
                let b = b.map_err(|e| Error::PartCorrupted {
                    path: path.to_string(),
                    reason: e.to_string(),
                })?;
                let b = match &mut post {
                    Some(post) => post.apply(b, path)?,
                    None => b,
                };
                let b = finish_batch(b, order.as_deref(), &target, path)?;
                match &opts.evolve_to {
                    None => Ok(b),
                    Some(to) => part_schema::evolve(&b, to),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Decoded {
            schema: opts.evolve_to.clone().unwrap_or(target),
            batches,
            file_rows: footer_rows(&metadata),
        })
    })
}

/// The Arrow schema of a Parquet file held in memory, from its footer.
pub fn bytes_schema(data: &Bytes, path: &str) -> Result<SchemaRef> {
    contain(decoder_panic(path), || {
        Ok(crate::parquet::chunk_crc::strip(
            ArrowReaderMetadata::load(data, Default::default())
                .map_err(corrupted(path))?
                .schema(),
        ))
    })
}

/// A part being read: batches arrive as their row groups are fetched.
pub struct PartStream {
    key: String,
    stream: parquet::arrow::async_reader::ParquetRecordBatchStream<ObjectRangeReader>,
    order: Option<Vec<usize>>,
    schema: SchemaRef,
    evolve: Option<SchemaRef>,
    file_rows: u64,
    /// Deleted rows dropped from each decoded batch.
    post: Option<PostFilter>,
    /// Set once the decoder failed: the stream must not be polled again.
    failed: bool,
}

impl PartStream {
    /// The schema of the batches this part yields (projected, caller's order).
    pub fn schema(&self) -> SchemaRef {
        self.evolve.clone().unwrap_or_else(|| self.schema.clone())
    }

    /// Rows in the whole part, as its footer states (before any filter).
    pub fn file_rows(&self) -> u64 {
        self.file_rows
    }

    /// Every batch left, as one [`Decoded`].
    pub async fn read_all(mut self) -> Result<Decoded> {
        let mut batches = Vec::new();
        while let Some(b) = self.next_batch().await {
            batches.push(b?);
        }
        Ok(Decoded {
            schema: self.schema(),
            batches,
            file_rows: self.file_rows(),
        })
    }

    /// The next batch, `None` at the end of the part. A decoder panic is
    /// contained and reported as `PartCorrupted`; the stream then ends.
    pub async fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        if self.failed {
            return None;
        }
        loop {
            let out = self.next_decoded().await;
            // A batch whose every row was deleted is not worth a send.
            if !matches!(&out, Some(Ok(b)) if b.num_rows() == 0 && self.post.is_some()) {
                return out;
            }
        }
    }

    async fn next_decoded(&mut self) -> Option<Result<RecordBatch>> {
        if self.failed {
            return None;
        }
        let polled = crate::error::catch_unwind_future(self.stream.next()).await;
        let batch = match polled {
            Ok(b) => b?,
            Err(payload) => {
                self.failed = true;
                return Some(Err(decoder_panic(&self.key)(panic_message(
                    payload.as_ref(),
                ))));
            }
        };
        let out = batch
            .map_err(corrupted(&self.key))
            .and_then(|b| match &mut self.post {
                Some(post) => post.apply(b, &self.key),
                None => Ok(b),
            })
            .and_then(|b| finish_batch(b, self.order.as_deref(), &self.schema, &self.key))
            .and_then(|b| match &self.evolve {
                None => Ok(b),
                Some(to) => part_schema::evolve(&b, to),
            });
        if out.is_err() {
            self.failed = true;
        }
        Some(out)
    }
}

/// A part's footer, read once, to plan with and then to read through
/// [`open_part_with`] without fetching it again.
#[derive(Debug, Clone)]
pub struct Footer {
    metadata: ArrowReaderMetadata,
    size: u64,
    /// The ETag of the object it was read from (see [`Footer::e_tag`]).
    e_tag: Option<String>,
}

impl Footer {
    /// The rows of each row group.
    pub fn row_group_rows(&self) -> Vec<u64> {
        self.metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| u64::try_from(rg.num_rows()).unwrap_or_default())
            .collect()
    }

    /// Per row group, the least and greatest values of `column` (in the
    /// file's Arrow type) that the footer states exactly, so that some row of
    /// the row group holds each; null where unknown or only a bound (a
    /// truncated string). `None` if the file has no such column.
    pub fn exact_bounds(&self, column: &str) -> Result<Option<(ArrayRef, ArrayRef)>> {
        let schema = crate::parquet::chunk_crc::strip(self.metadata.schema());
        let meta = self.metadata.metadata();
        let Ok(conv) =
            StatisticsConverter::try_new(column, &schema, meta.file_metadata().schema_descr())
        else {
            return Ok(None);
        };
        let Some(leaf) = conv.parquet_column_index() else {
            return Ok(None);
        };
        let groups = meta.row_groups();
        let exact = |min: bool| {
            BooleanArray::from(
                groups
                    .iter()
                    .map(|g| {
                        g.column(leaf).statistics().is_some_and(|s| {
                            if min {
                                s.min_is_exact()
                            } else {
                                s.max_is_exact()
                            }
                        })
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let keep = |values: ArrayRef, exact: BooleanArray| -> Result<ArrayRef> {
            Ok(arrow_select::nullif::nullif(
                values.as_ref(),
                &arrow_arith::boolean::not(&exact)?,
            )?)
        };
        let mins = keep(conv.row_group_mins(groups.iter())?, exact(true))?;
        let maxs = keep(conv.row_group_maxes(groups.iter())?, exact(false))?;
        Ok(Some((mins, maxs)))
    }

    /// The row groups whose statistics may hold rows matching `predicate`
    /// (all without one, or if it does not apply to this file's types).
    pub fn prune(&self, predicate: Option<&Predicate>) -> Result<Vec<usize>> {
        let all: Vec<usize> = (0..self.metadata.metadata().num_row_groups()).collect();
        let Some(p) = predicate.filter(|p| !p.conditions.is_empty()) else {
            return Ok(all);
        };
        let schema = crate::parquet::chunk_crc::strip(self.metadata.schema());
        match p.clone().bind(&schema) {
            Ok(bound) => bound.prune(self.metadata.metadata(), &schema),
            Err(_) => Ok(all),
        }
    }
}

/// Fetch and parse the footer of the part at `key` (`size` bytes).
pub async fn read_footer(store: &StoreHandle, key: &str, size: u64) -> Result<Footer> {
    read_footer_with(store, key, size, None, Default::default()).await
}

/// [`read_footer`] with the size of the file's tail its writer recorded:
/// the footer then costs one GET whatever its size.
pub async fn read_footer_hinted(
    store: &StoreHandle,
    key: &str,
    size: u64,
    hint: Option<u64>,
) -> Result<Footer> {
    read_footer_with(store, key, size, hint, Default::default()).await
}

/// [`read_footer`], with the page index (column and offset indexes) where
/// the part has one: a few more bytes, in the same request where they fit.
pub async fn read_footer_and_page_index(
    store: &StoreHandle,
    key: &str,
    size: u64,
    hint: Option<u64>,
) -> Result<Footer> {
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional);
    read_footer_with(store, key, size, hint, options).await
}

/// The footer for reading a file in row-range pieces. Each piece fetches
/// the projected column chunks whole, so that their checksums are checked,
/// and decompresses only the pages of its rows (a page of a flat column
/// states its row count). The page index, which would let a piece fetch
/// only its pages, is loaded only where the file records page checksums:
/// single pages of a file that records only chunk checksums would be
/// decoded unchecked, and the page index itself has no checksum.
pub async fn read_piece_footer(
    store: &StoreHandle,
    key: &str,
    size: u64,
    hint: Option<u64>,
) -> Result<Footer> {
    let plain = read_footer_hinted(store, key, size, hint).await?;
    let pages_checked =
        crate::parquet::chunk_crc::ChunkChecksums::from_metadata(plain.metadata.metadata())
            .ok()
            .flatten()
            .is_some_and(|sums| sums.has_pages());
    if pages_checked {
        read_footer_and_page_index(store, key, size, hint).await
    } else {
        Ok(plain)
    }
}

async fn read_footer_with(
    store: &StoreHandle,
    key: &str,
    size: u64,
    hint: Option<u64>,
    options: ArrowReaderOptions,
) -> Result<Footer> {
    let (builder, e_tag) = open_footer(store, key, size, hint, options.clone()).await?;
    let metadata = ArrowReaderMetadata::try_new(builder.metadata().clone(), options)
        .map_err(corrupted(key))?;
    Ok(Footer {
        metadata,
        size,
        e_tag,
    })
}

impl Footer {
    /// The parsed footer (and page index, if it was read).
    pub fn metadata(&self) -> &ArrowReaderMetadata {
        &self.metadata
    }

    /// The ETag of the object the footer was read from, if the store gave one.
    pub fn e_tag(&self) -> Option<&str> {
        self.e_tag.as_deref()
    }
}

/// Open one part: read its footer, prune row groups, and prepare to fetch
/// only the byte ranges of the projected column chunks. `size` comes from the
/// HEAD the caller made.
pub async fn open_part(
    store: &StoreHandle,
    key: &str,
    size: u64,
    opts: &ReadOptions,
) -> Result<PartStream> {
    let footer = crate::error::catch_unwind_future(read_footer(store, key, size))
        .await
        .unwrap_or_else(|payload| Err(footer_panic(key, payload.as_ref())))?;
    open_part_with(store, key, &footer, opts).await
}

/// A panic while reading `key`'s footer, as the corruption it reveals.
pub fn footer_panic(key: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    decoder_panic(key)(panic_message(payload))
}

/// [`open_part`] with a footer read before (no footer request).
pub async fn open_part_with(
    store: &StoreHandle,
    key: &str,
    footer: &Footer,
    opts: &ReadOptions,
) -> Result<PartStream> {
    let opened = crate::error::catch_unwind_future(async {
        let err = corrupted(key);
        let metadata = footer.metadata.clone();
        let ahead = Arc::new(crate::parquet::read_ahead::ReadAhead::new(
            opts.read_ahead.unwrap_or(READ_AHEAD_ROW_GROUPS),
            opts.io_permits.clone(),
        ));
        let reader = ObjectRangeReader::with_metadata(
            store.object_store().clone(),
            store.path(key)?,
            key,
            footer.size,
            metadata.metadata(),
        )
        .map_err(&err)?
        .with_read_ahead(ahead.clone());
        let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, metadata.clone());
        let Configured {
            builder,
            order,
            target: schema,
            post,
            row_groups,
            mask,
            whole_chunks,
        } = configure(builder, &metadata, opts, key)?;
        if whole_chunks {
            ahead.plan(metadata.metadata(), row_groups.as_deref(), &mask);
        }
        let stream = builder.build().map_err(&err)?;
        Ok(PartStream {
            key: key.to_string(),
            post,
            stream,
            order,
            schema,
            evolve: opts.evolve_to.clone(),
            file_rows: footer_rows(&metadata),
            failed: false,
        })
    })
    .await;
    opened.unwrap_or_else(|payload| Err(decoder_panic(key)(panic_message(payload.as_ref()))))
}

/// Read one whole part from the store (see [`open_part`]).
pub async fn read_part(
    store: &StoreHandle,
    key: &str,
    size: u64,
    opts: &ReadOptions,
) -> Result<Decoded> {
    open_part(store, key, size, opts).await?.read_all().await
}

/// A part's footer, fetched (the tail of its `size` bytes) and parsed.
async fn open_footer(
    store: &StoreHandle,
    key: &str,
    size: u64,
    hint: Option<u64>,
    options: ArrowReaderOptions,
) -> Result<(
    ParquetRecordBatchStreamBuilder<ObjectRangeReader>,
    Option<String>,
)> {
    let reader = ObjectRangeReader::new(store.object_store().clone(), store.path(key)?, key, size)
        .with_footer_hint(hint);
    let seen = reader.clone();
    let builder = crate::error::catch_unwind_future(
        ParquetRecordBatchStreamBuilder::new_with_options(reader, options),
    )
    .await
    .unwrap_or_else(|payload| {
        Err(ParquetError::General(format!(
            "the footer decoder failed ({})",
            panic_message(payload.as_ref())
        )))
    })
    .map_err(corrupted(key))?;
    Ok((builder, seen.seen_e_tag()))
}

/// The row count of each row group of a part, from its footer alone.
pub async fn part_row_groups(store: &StoreHandle, key: &str) -> Result<Vec<u64>> {
    let size = store.head(key).await?.size;
    Ok(open_footer(store, key, size, None, Default::default())
        .await?
        .0
        .metadata()
        .row_groups()
        .iter()
        .map(|rg| u64::try_from(rg.num_rows()).unwrap_or_default())
        .collect())
}

/// From one footer read: the rows of each row group of the file at `key`,
/// and the row groups whose statistics may hold rows matching `predicate`
/// (all of them without one, or if it does not apply to this file's types).
pub async fn row_group_plan(
    store: &StoreHandle,
    key: &str,
    size: u64,
    predicate: Option<&Predicate>,
) -> Result<(Vec<u64>, Vec<usize>)> {
    let footer = read_footer(store, key, size).await?;
    Ok((footer.row_group_rows(), footer.prune(predicate)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field};

    fn sample() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
            Field::new("c", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec!["x", "y", "z"])),
                Arc::new(Int64Array::from(vec![7, 8, 9])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn projection_keeps_caller_order() {
        let b = sample();
        let (bytes, _) = encode_to_bytes(
            std::slice::from_ref(&b),
            b.schema(),
            &EncodeOptions::new("zstd", None, None).unwrap(),
        )
        .unwrap();
        let opts = ReadOptions {
            columns: Some(vec!["c".into(), "a".into()]),
            ..Default::default()
        };
        let d = decode_bytes(bytes, "p", &opts).unwrap();
        let names: Vec<&str> = d
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["c", "a"]);
        assert_eq!(d.batches[0], b.project(&[2, 0]).unwrap());
    }

    /// A part that is not the size its reader was told (empty, cut short,
    /// grown) is `PartCorrupted`, never a store error or a right-looking read.
    #[test]
    fn a_part_of_another_size_than_recorded_is_corrupted() {
        let b = sample();
        let (bytes, _) = encode_to_bytes(
            std::slice::from_ref(&b),
            b.schema(),
            &EncodeOptions::new("zstd", None, None).unwrap(),
        )
        .unwrap();
        let store = StoreHandle::open("memory://", &Default::default()).unwrap();
        let rt = crate::runtime::get().unwrap();
        let size = bytes.len() as u64;
        let mut grown = bytes.to_vec();
        grown.extend_from_slice(&[0u8; 100]);
        for (name, stored) in [
            ("empty", Bytes::new()),
            ("short", bytes.slice(0..bytes.len() - 1)),
            ("half", bytes.slice(0..bytes.len() / 2)),
            ("grown", Bytes::from(grown)),
        ] {
            rt.block_on(store.put(name, stored, crate::store::PutMode::Overwrite))
                .unwrap();
            match rt.block_on(read_part(&store, name, size, &ReadOptions::default())) {
                Err(Error::PartCorrupted { path, reason }) => {
                    assert_eq!(path, name);
                    assert!(reason.contains("recorded"), "{name}: {reason}");
                }
                other => panic!("{name}: {:?}", other.map(|d| d.file_rows)),
            }
        }
        rt.block_on(store.put("exact", bytes, crate::store::PutMode::Overwrite))
            .unwrap();
        let d = rt
            .block_on(read_part(&store, "exact", size, &ReadOptions::default()))
            .unwrap();
        assert_eq!(d.file_rows, 3);
    }

    #[test]
    fn unknown_column_and_garbage_are_reported() {
        let b = sample();
        let (bytes, _) = encode_to_bytes(
            std::slice::from_ref(&b),
            b.schema(),
            &EncodeOptions::new("zstd", None, None).unwrap(),
        )
        .unwrap();
        let opts = ReadOptions {
            columns: Some(vec!["nope".into()]),
            ..Default::default()
        };
        assert!(matches!(
            decode_bytes(bytes.clone(), "p", &opts),
            Err(Error::InvalidArgument(_))
        ));
        let truncated = bytes.slice(0..bytes.len() / 2);
        assert!(matches!(
            decode_bytes(truncated, "p", &ReadOptions::default()),
            Err(Error::PartCorrupted { .. })
        ));
        assert!(matches!(
            decode_bytes(
                Bytes::from_static(b"hello, not parquet"),
                "p",
                &ReadOptions::default()
            ),
            Err(Error::PartCorrupted { .. })
        ));
    }

    /// A seeded fuzz loop over damaged parts: every outcome is the original
    /// data or `PartCorrupted`; never a panic, never different rows.
    #[test]
    fn damaged_bytes_decode_equal_or_fail_as_corruption() {
        let b = sample();
        let schema = b.schema();
        for codec in ["zstd", "snappy", "none", "gzip", "lz4", "brotli"] {
            let (bytes, _) = encode_to_bytes(
                std::slice::from_ref(&b),
                schema.clone(),
                &EncodeOptions::new(codec, Some(2), None).unwrap(),
            )
            .unwrap();
            let mut rng = crate::test_rng::TestRng::new(0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64);
            let mut next = move || rng.next_u64();
            for _ in 0..150 {
                let mut damaged = bytes.to_vec();
                match next() % 4 {
                    0 => {
                        let at = (next() % damaged.len() as u64) as usize;
                        damaged[at] ^= 1 << (next() % 8);
                    }
                    1 => damaged.truncate((next() % damaged.len() as u64) as usize),
                    2 => {
                        // Overwrite the footer length (the 4 bytes before "PAR1").
                        let n = damaged.len();
                        damaged[n - 8..n - 4].copy_from_slice(&(next() as u32).to_le_bytes());
                    }
                    _ => {
                        let at = (next() % (damaged.len() as u64 - 4)) as usize;
                        damaged[at..at + 4].copy_from_slice(&(next() as u32).to_le_bytes());
                    }
                }
                let opts = ReadOptions {
                    expected: Some(schema.clone()),
                    ..Default::default()
                };
                match decode_bytes(Bytes::from(damaged), "p", &opts) {
                    Ok(d) => {
                        let all =
                            arrow_select::concat::concat_batches(&d.schema, &d.batches).unwrap();
                        assert_eq!(all, b, "{codec}: damaged bytes decoded to other data");
                    }
                    Err(Error::PartCorrupted { .. }) => {}
                    Err(other) => panic!("{codec}: unexpected error {other}"),
                }
            }
        }
    }

    #[test]
    fn a_flipped_bit_in_any_column_chunk_is_corruption() {
        let b = sample();
        let (bytes, _) = encode_to_bytes(
            std::slice::from_ref(&b),
            b.schema(),
            &EncodeOptions::new("none", Some(2), None).unwrap(),
        )
        .unwrap();
        let metadata = ArrowReaderMetadata::load(&bytes, Default::default()).unwrap();
        let sums = crate::parquet::chunk_crc::ChunkChecksums::from_metadata(metadata.metadata())
            .unwrap()
            .expect("pds writes chunk checksums");
        sums.check_all(&bytes).unwrap();
        for rg in metadata.metadata().row_groups() {
            for c in rg.columns() {
                let (start, len) = c.byte_range();
                let mut damaged = bytes.to_vec();
                damaged[(start + len / 2) as usize] ^= 0x10;
                assert!(matches!(
                    decode_bytes(Bytes::from(damaged), "p", &ReadOptions::default()),
                    Err(Error::PartCorrupted { .. })
                ));
            }
        }
    }

    #[test]
    fn row_groups_select_and_combine_with_pruning() {
        let b = sample();
        let (bytes, _) = encode_to_bytes(
            std::slice::from_ref(&b),
            b.schema(),
            &EncodeOptions::new("zstd", Some(1), None).unwrap(),
        )
        .unwrap();
        let a_values = |d: Decoded| -> Vec<i64> {
            d.batches
                .iter()
                .flat_map(|b| {
                    let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    a.values().to_vec()
                })
                .collect()
        };
        let only = |row_groups: Vec<usize>| ReadOptions {
            row_groups: Some(row_groups),
            ..Default::default()
        };
        assert_eq!(
            a_values(decode_bytes(bytes.clone(), "p", &only(vec![1])).unwrap()),
            [2]
        );
        let pred = crate::parquet::filter::predicate(vec![(
            "a".into(),
            ">=".into(),
            Some(Arc::new(Int64Array::from(vec![2])) as arrow_array::ArrayRef),
        )])
        .unwrap();
        let both = ReadOptions {
            predicate: Some(Arc::new(pred)),
            ..only(vec![0, 2])
        };
        assert_eq!(
            a_values(decode_bytes(bytes.clone(), "p", &both).unwrap()),
            [3]
        );
        assert!(matches!(
            decode_bytes(bytes, "p", &only(vec![3])),
            Err(Error::InvalidArgument(_))
        ));
    }

    /// A file of `n` rows (a = 0..n, b = "s<a % 5>", c = a or null every
    /// 7th), in row groups of `group` rows.
    fn numbered(n: i64, group: usize) -> Bytes {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
            Field::new("c", DataType::Int64, true),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("s{}", i % 5)),
                )),
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|i| (i % 7 != 0).then_some(i)),
                )),
            ],
        )
        .unwrap();
        let opts = EncodeOptions::new("zstd", Some(group), None).unwrap();
        encode_to_bytes(std::slice::from_ref(&b), schema, &opts)
            .unwrap()
            .0
    }

    fn column_a(d: &Decoded) -> Vec<i64> {
        d.batches
            .iter()
            .flat_map(|b| {
                let i = b.schema().index_of("a").unwrap();
                let a = b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect()
    }

    /// Column `a` of the file read as `opts` in pieces starting at `cuts`
    /// (the last piece to the end), concatenated.
    fn in_pieces(bytes: &Bytes, opts: &ReadOptions, cuts: &[u64]) -> Vec<i64> {
        let mut got = Vec::new();
        for (i, w) in cuts.windows(2).enumerate() {
            let end = if i + 2 == cuts.len() { u64::MAX } else { w[1] };
            let piece = ReadOptions {
                rows: Some(w[0]..end),
                ..opts.clone()
            };
            got.extend(column_a(&decode_bytes(bytes.clone(), "p", &piece).unwrap()));
        }
        got
    }

    fn range_on(column: &str, lo: i64, hi: i64) -> Arc<Predicate> {
        let v = |x: i64| Some(Arc::new(Int64Array::from(vec![x])) as ArrayRef);
        Arc::new(
            crate::parquet::filter::predicate(vec![
                (column.into(), ">=".into(), v(lo)),
                (column.into(), "<=".into(), v(hi)),
            ])
            .unwrap(),
        )
    }

    /// Row ranges (pieces) partition a read: with scattered or clustered
    /// positions (dropped after decoding, or skipped by the decoder), key
    /// ranges dropped after decoding (on a column not projected, and on a
    /// nullable one), row groups skipped, and a predicate, the pieces'
    /// rows, in order, are the whole read's, which are the model's.
    #[test]
    fn pieces_and_late_deletes_partition_a_read() {
        let n = 1000i64;
        let bytes = numbered(n, 300);
        let scattered: Vec<u64> = (0..n as u64).filter(|i| i % 3 == 1).collect();
        let clustered: Vec<u64> = (100..400).chain(950..960).collect();
        // (dropped positions, key-range excludes, skip row group 1, filter b != "s0")
        type Case = (Option<Vec<u64>>, Vec<Arc<Predicate>>, bool, bool);
        let cases: Vec<Case> = vec![
            (Some(scattered.clone()), vec![], false, false),
            (Some(clustered.clone()), vec![], false, false),
            (None, vec![range_on("a", 250, 640)], false, false),
            (
                Some(scattered.clone()),
                vec![range_on("c", 500, 800)],
                false,
                false,
            ),
            (Some(scattered), vec![range_on("a", 10, 20)], true, false),
            (Some(clustered), vec![range_on("a", 700, 1200)], false, true),
        ];
        for (positions, exclude, skip_group, filtered) in cases {
            let dropped = |i: i64| {
                positions.as_ref().is_some_and(|p| p.contains(&(i as u64)))
                    || exclude.iter().any(|e| {
                        let col = &e.conditions[0].column;
                        let v = if col == "c" && i % 7 == 0 {
                            None
                        } else {
                            Some(i)
                        };
                        let lo = e.conditions[0].values.as_ref().unwrap();
                        let hi = e.conditions[1].values.as_ref().unwrap();
                        let at = |a: &ArrayRef| {
                            a.as_any().downcast_ref::<Int64Array>().unwrap().value(0)
                        };
                        v.is_some_and(|v| at(lo) <= v && v <= at(hi))
                    })
                    || (skip_group && (300..600).contains(&i))
                    || (filtered && i % 5 == 0)
            };
            let model: Vec<i64> = (0..n).filter(|&i| !dropped(i)).collect();
            let base = ReadOptions {
                columns: Some(vec!["b".into()]),
                batch_size: Some(64),
                positions: positions.clone().map(|p| Positions::Drop(Arc::new(p))),
                exclude: exclude.clone(),
                skip_row_groups: skip_group.then(|| Arc::new(std::iter::once(1u64).collect())),
                predicate: filtered.then(|| {
                    Arc::new(
                        crate::parquet::filter::predicate(vec![(
                            "b".into(),
                            "!=".into(),
                            Some(Arc::new(StringArray::from(vec!["s0"])) as ArrayRef),
                        )])
                        .unwrap(),
                    )
                }),
                ..Default::default()
            };
            let with_a = ReadOptions {
                columns: Some(vec!["b".into(), "a".into()]),
                ..base.clone()
            };
            let whole = decode_bytes(bytes.clone(), "p", &with_a).unwrap();
            assert_eq!(column_a(&whole), model);
            // Without the key column the excluded rows still go, and only
            // the asked columns come out.
            let narrow = decode_bytes(bytes.clone(), "p", &base).unwrap();
            assert_eq!(narrow.schema.field(0).name(), "b");
            let b_values: Vec<String> = narrow
                .batches
                .iter()
                .flat_map(|b| {
                    assert_eq!(b.num_columns(), 1);
                    let s = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                    s.iter().map(|v| v.unwrap().to_string()).collect::<Vec<_>>()
                })
                .collect();
            let expected: Vec<String> = model.iter().map(|i| format!("s{}", i % 5)).collect();
            assert_eq!(b_values, expected);
            for cuts in [
                vec![0, 1000],
                vec![0, 150, 300, 301, 999],
                vec![0, 1, 2, 700],
            ] {
                assert_eq!(in_pieces(&bytes, &with_a, &cuts), model, "cuts {cuts:?}");
            }
        }
    }

    /// Kept positions with a row range, and a predicate whose statistics
    /// prune row groups, read in pieces.
    #[test]
    fn pieces_keep_positions_and_prune_row_groups() {
        let bytes = numbered(1000, 300);
        let keep: Vec<u64> = vec![0, 5, 299, 300, 301, 650, 999];
        let v = |x: i64| Some(Arc::new(Int64Array::from(vec![x])) as ArrayRef);
        let at_least = |x: i64| {
            Arc::new(
                crate::parquet::filter::predicate(vec![("a".into(), ">=".into(), v(x))]).unwrap(),
            )
        };
        let cases: Vec<(ReadOptions, Vec<i64>)> = vec![
            (
                ReadOptions {
                    positions: Some(Positions::Keep(Arc::new(keep.clone()))),
                    ..Default::default()
                },
                keep.iter().map(|&p| p as i64).collect(),
            ),
            (
                ReadOptions {
                    predicate: Some(at_least(610)), // Prunes row groups 0 and 1.
                    positions: Some(Positions::Drop(Arc::new((0..1000).step_by(2).collect()))),
                    ..Default::default()
                },
                (610..1000).filter(|i| i % 2 == 1).collect(),
            ),
        ];
        for (opts, model) in cases {
            for cuts in [vec![0, 1000], vec![0, 301, 640, 900], vec![0, 1, 999]] {
                assert_eq!(in_pieces(&bytes, &opts, &cuts), model, "cuts {cuts:?}");
            }
        }
    }

    /// A selection built as a bitmap selects the rows the same selection
    /// built as runs does (the runs are for footers claiming more rows than
    /// a bitmap should hold); scattered positions are kept the same way.
    #[test]
    fn bitmap_and_run_selections_agree() {
        let group_rows = [300u64, 300, 300, 100];
        let starts = group_starts(&group_rows);
        let expand = |s: RowSelection| -> Vec<bool> {
            Vec::<RowSelector>::from(s)
                .into_iter()
                .flat_map(|r| std::iter::repeat_n(!r.skip, r.row_count))
                .collect()
        };
        let listed: Vec<u64> = (0..1000)
            .filter(|i| i % 3 == 0 || (400..470).contains(i))
            .collect();
        for positions in [
            None,
            Some(Positions::Drop(Arc::new(listed.clone()))),
            Some(Positions::Keep(Arc::new(listed.clone()))),
        ] {
            for range in [None, Some(0..1000), Some(250..610), Some(999..u64::MAX)] {
                for groups in [vec![0, 1, 2, 3], vec![1, 3]] {
                    let runs = row_selection(
                        positions.as_ref(),
                        range.as_ref(),
                        &starts,
                        &group_rows,
                        &groups,
                        0,
                    );
                    let bits = row_selection(
                        positions.as_ref(),
                        range.as_ref(),
                        &starts,
                        &group_rows,
                        &groups,
                        MASK_ROWS,
                    );
                    let (runs, bits) = (expand(runs), expand(bits));
                    let total: u64 = groups.iter().map(|&g| group_rows[g]).sum();
                    // A selection may end early (no trailing skip).
                    let pad = |mut v: Vec<bool>| {
                        v.resize(total as usize, false);
                        v
                    };
                    assert_eq!(pad(runs), pad(bits.clone()));
                    if let Some(Positions::Drop(p)) = &positions {
                        let by_range = pad(expand(row_selection(
                            None,
                            range.as_ref(),
                            &starts,
                            &group_rows,
                            &groups,
                            MASK_ROWS,
                        )));
                        // What kept_rows keeps is what the selection selects
                        // within the range (it covers only the range's rows).
                        if let Some(k) =
                            kept_rows(p, range.as_ref(), &starts, &group_rows, &groups, MASK_ROWS)
                        {
                            let within: Vec<bool> = pad(bits)
                                .into_iter()
                                .zip(&by_range)
                                .filter(|(_, r)| **r)
                                .map(|(b, _)| b)
                                .collect();
                            assert_eq!(k.mask.iter().collect::<Vec<_>>(), within);
                        }
                        // Above the bitmap's limit: no bitmap.
                        let in_range = by_range.iter().filter(|r| **r).count();
                        let small = kept_rows(p, range.as_ref(), &starts, &group_rows, &groups, 10);
                        assert!(small.is_none() || in_range <= 10);
                    }
                }
            }
        }
    }

    #[test]
    fn batch_bounds_cover_integers_dates_and_timestamps_only() {
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(5), None, Some(-3), Some(9)]));
        let (lo, hi) = batch_bounds(&ints).unwrap();
        assert_eq!(
            lo.as_ref(),
            &Int64Array::from(vec![-3]) as &dyn arrow_array::Array
        );
        assert_eq!(
            hi.as_ref(),
            &Int64Array::from(vec![9]) as &dyn arrow_array::Array
        );
        let ts: ArrayRef =
            Arc::new(arrow_array::TimestampMicrosecondArray::from(vec![3, 1]).with_timezone("UTC"));
        let (lo, _) = batch_bounds(&ts).unwrap();
        assert_eq!(lo.data_type(), ts.data_type());
        let nulls: ArrayRef = Arc::new(Int64Array::from(vec![None, None]));
        assert!(batch_bounds(&nulls).is_none());
        let floats: ArrayRef = Arc::new(arrow_array::Float64Array::from(vec![1.0, f64::NAN]));
        assert!(batch_bounds(&floats).is_none());
        let strings: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
        assert!(batch_bounds(&strings).is_none());
    }
}
