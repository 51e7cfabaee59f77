//! Parquet -> Arrow: column projection by name, from an object store (footer
//! and column-chunk range reads) or from bytes already in memory.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{Schema, SchemaRef};
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
use crate::parquet::filter::Predicate;
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
    /// Root columns to read, in output order; `None` reads all.
    pub columns: Option<Vec<String>>,
    /// Rows per output batch; `None` uses the reader default (8192).
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
}

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
    /// row groups hold `group_rows` rows each.
    fn selection(&self, group_rows: &[u64], row_groups: &[usize]) -> RowSelection {
        let (listed, keep) = match self {
            Positions::Drop(p) => (p.as_slice(), false),
            Positions::Keep(p) => (p.as_slice(), true),
        };
        let mut starts = Vec::with_capacity(group_rows.len());
        let mut at = 0u64;
        for n in group_rows {
            starts.push(at);
            at += n;
        }
        let mut out: Vec<RowSelector> = Vec::new();
        let mut push = |select: bool, n: u64| {
            if n == 0 {
                return;
            }
            let n = n as usize;
            match out.last_mut() {
                Some(last) if last.skip != select => last.row_count += n,
                _ => out.push(if select {
                    RowSelector::select(n)
                } else {
                    RowSelector::skip(n)
                }),
            }
        };
        for &rg in row_groups {
            let (start, len) = (starts[rg], group_rows[rg]);
            let end = start + len;
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
        RowSelection::from(out)
    }
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
        ParquetError::External(inner) => match inner.downcast::<object_store::Error>() {
            Ok(os) => Error::from(*os),
            Err(other) => Error::PartCorrupted {
                path: path.to_string(),
                reason: other.to_string(),
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
    opts: &ReadOptions,
) -> Result<(ProjectionMask, Option<Vec<usize>>, SchemaRef)> {
    let reference = match &opts.expected {
        Some(s) => s.clone(),
        None => crate::parquet::chunk_crc::strip(metadata.schema()),
    };
    let Some(columns) = &opts.columns else {
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
    let (mask, order, target) = projection(metadata, opts)?;
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
    let exclude = opts
        .exclude
        .iter()
        .map(|p| p.as_ref().clone().bind(metadata.schema()))
        .collect::<Result<Vec<_>>>()?;
    if bound.is_some() || !exclude.is_empty() {
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
    if let Some(positions) = &opts.positions {
        let groups = metadata.metadata().row_groups();
        let group_rows: Vec<u64> = groups.iter().map(|g| g.num_rows().max(0) as u64).collect();
        let mut list: Vec<usize> = selected
            .clone()
            .unwrap_or_else(|| (0..groups.len()).collect());
        list.sort_unstable();
        list.dedup();
        builder = builder.with_row_selection(positions.selection(&group_rows, &list));
        selected = Some(list);
    }
    if let Some(row_groups) = &selected {
        builder = builder.with_row_groups(row_groups.clone());
    }
    Ok(Configured {
        builder,
        order,
        target,
        row_groups: selected,
        mask: read_mask,
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
            ..
        } = configured;
        let reader = builder.build().map_err(&err)?;
        let batches = reader
            .map(|b| {
                let b = b.map_err(|e| Error::PartCorrupted {
                    path: path.to_string(),
                    reason: e.to_string(),
                })?;
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
    read_footer_with(store, key, size, Default::default()).await
}

/// [`read_footer`], with the page index (column and offset indexes) where
/// the part has one: a few more bytes, in the same request where they fit.
pub async fn read_footer_and_page_index(
    store: &StoreHandle,
    key: &str,
    size: u64,
) -> Result<Footer> {
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional);
    read_footer_with(store, key, size, options).await
}

async fn read_footer_with(
    store: &StoreHandle,
    key: &str,
    size: u64,
    options: ArrowReaderOptions,
) -> Result<Footer> {
    let builder = open_footer(store, key, size, options.clone()).await?;
    let metadata = ArrowReaderMetadata::try_new(builder.metadata().clone(), options)
        .map_err(corrupted(key))?;
    Ok(Footer { metadata, size })
}

impl Footer {
    /// The parsed footer (and page index, if it was read).
    pub fn metadata(&self) -> &ArrowReaderMetadata {
        &self.metadata
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
        .unwrap_or_else(|payload| Err(decoder_panic(key)(panic_message(payload.as_ref()))))?;
    open_part_with(store, key, &footer, opts).await
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
        let reader = ObjectRangeReader::with_metadata(
            store.object_store().clone(),
            store.path(key)?,
            footer.size,
            metadata.metadata(),
        )
        .map_err(&err)?;
        let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, metadata.clone());
        let Configured {
            builder,
            order,
            target: schema,
            ..
        } = configure(builder, &metadata, opts, key)?;
        let stream = builder.build().map_err(&err)?;
        Ok(PartStream {
            key: key.to_string(),
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
    options: ArrowReaderOptions,
) -> Result<ParquetRecordBatchStreamBuilder<ObjectRangeReader>> {
    let reader = ObjectRangeReader::new(store.object_store().clone(), store.path(key)?, size);
    crate::error::catch_unwind_future(ParquetRecordBatchStreamBuilder::new_with_options(
        reader, options,
    ))
    .await
    .unwrap_or_else(|payload| {
        Err(ParquetError::General(format!(
            "the footer decoder failed ({})",
            panic_message(payload.as_ref())
        )))
    })
    .map_err(corrupted(key))
}

/// The row count of each row group of a part, from its footer alone.
pub async fn part_row_groups(store: &StoreHandle, key: &str) -> Result<Vec<u64>> {
    let size = store.head(key).await?.size;
    Ok(open_footer(store, key, size, Default::default())
        .await?
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

/// The Arrow schema of a part, from its footer alone.
pub async fn read_part_schema(store: &StoreHandle, key: &str) -> Result<SchemaRef> {
    let size = store.head(key).await?.size;
    Ok(crate::parquet::chunk_crc::strip(
        open_footer(store, key, size, Default::default())
            .await?
            .schema(),
    ))
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
            let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ bytes.len() as u64;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
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
}
