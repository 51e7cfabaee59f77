//! Parquet -> Arrow: column projection by name, from an object store (footer
//! and column-chunk range reads) or from bytes already in memory.
//!
//! This file holds the read's options and its configuration of the Parquet
//! reader, and the decode of bytes in memory; `open` reads a part from a
//! store (footer, then row groups streamed), `selection` turns positions
//! and row ranges into row selections, and `post_filter` filters decoded
//! batches.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderBuilder, ArrowReaderMetadata, ParquetRecordBatchReaderBuilder,
    RowFilter,
};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;

use crate::error::{contain, Error, Result};
use crate::parquet::filter::Predicate;
use crate::parquet::part_schema;

mod open;
mod post_filter;
mod selection;
#[cfg(test)]
mod tests;

pub use open::{
    footer_panic, open_part, open_part_with, part_row_groups, read_footer,
    read_footer_and_page_index, read_footer_and_page_index_checked, read_footer_hinted, read_part,
    read_piece_footer, row_group_plan, Footer, PartStream,
};
use post_filter::PostFilter;
pub use selection::{group_starts, Positions};
use selection::{kept_rows, row_selection, MASK_ROWS};

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
    let lazy = decode_bytes_lazy(data, path, opts)?;
    Ok(Decoded {
        schema: lazy.schema,
        batches: lazy.batches.collect::<Result<Vec<_>>>()?,
        file_rows: lazy.file_rows,
    })
}

/// A Parquet file held in memory, checked and ready to decode batch by
/// batch: the file's bytes and one batch are in memory at a time, not all
/// of its decoded rows.
pub struct LazyDecoded {
    pub schema: SchemaRef,
    /// The batches, decoded as they are taken. A decoder panic on one is
    /// `PartCorrupted`.
    pub batches: Box<dyn Iterator<Item = Result<RecordBatch>> + Send>,
    /// Rows in the whole part, as its footer states (before any filter).
    pub file_rows: u64,
}

/// [`decode_bytes`], the batches decoded as they are taken. The footer,
/// the schema and the checksums of the chunks read are checked here,
/// before any batch.
pub fn decode_bytes_lazy(data: Bytes, path: &str, opts: &ReadOptions) -> Result<LazyDecoded> {
    let (reader, order, target, post, file_rows) = contain(decoder_panic(path), || {
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
            post,
            ..
        } = configured;
        let reader = builder.build().map_err(&err)?;
        Ok((reader, order, target, post, footer_rows(&metadata)))
    })?;
    let schema = opts.evolve_to.clone().unwrap_or_else(|| target.clone());
    let evolve_to = opts.evolve_to.clone();
    let path = path.to_string();
    let mut state = Some((reader, post));
    let batches = std::iter::from_fn(move || {
        let (reader, post) = state.as_mut()?;
        let next = contain(decoder_panic(&path), || {
            let Some(b) = reader.next() else {
                return Ok(None);
            };
            let b = b.map_err(|e| corrupt(&path, e.to_string()))?;
            let b = match post {
                Some(post) => post.apply(b, &path)?,
                None => b,
            };
            let b = finish_batch(b, order.as_deref(), &target, &path)?;
            match &evolve_to {
                None => Ok(Some(b)),
                Some(to) => part_schema::evolve(&b, to).map(Some),
            }
        });
        match next {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => {
                state = None;
                None
            }
            Err(e) => {
                state = None; // Nothing follows an error.
                Some(Err(e))
            }
        }
    });
    Ok(LazyDecoded {
        schema,
        batches: Box::new(batches),
        file_rows,
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
