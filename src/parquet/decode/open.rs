//! A part opened from a store: its footer read (and checked) with a few
//! range requests, then its row groups streamed as Arrow batches.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use futures::StreamExt;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::errors::ParquetError;

use super::post_filter::PostFilter;
use super::{
    configure, corrupted, decoder_panic, finish_batch, footer_rows, Configured, Decoded,
    ReadOptions, READ_AHEAD_ROW_GROUPS,
};
use crate::error::{panic_message, Error, Result};
use crate::parquet::filter::Predicate;
use crate::parquet::part_schema;
use crate::parquet::range_reader::ObjectRangeReader;
use crate::store::StoreHandle;

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
    read_footer_with(store, key, size, None, Default::default(), None).await
}

/// [`read_footer`] with the size of the file's tail its writer recorded:
/// the footer then costs one GET whatever its size.
pub async fn read_footer_hinted(
    store: &StoreHandle,
    key: &str,
    size: u64,
    hint: Option<u64>,
) -> Result<Footer> {
    read_footer_with(store, key, size, hint, Default::default(), None).await
}

/// Reader options that load the page index where the file has one.
fn page_index_options() -> ArrowReaderOptions {
    ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional)
}

/// [`read_footer`], with the page index (column and offset indexes) where
/// the part has one: a few more bytes, in the same request where they fit.
pub async fn read_footer_and_page_index(
    store: &StoreHandle,
    key: &str,
    size: u64,
    hint: Option<u64>,
) -> Result<Footer> {
    read_footer_with(store, key, size, hint, page_index_options(), None).await
}

/// [`read_footer_and_page_index`] of a part whose manifest records the
/// length and CRC-32 of its tail (page index, footer, trailer): the tail is
/// fetched in one GET and checked before it is parsed, so that a damaged
/// page index is `PartCorrupted`, never pages skipped or misplaced.
pub async fn read_footer_and_page_index_checked(
    store: &StoreHandle,
    key: &str,
    size: u64,
    tail: (u64, u32),
) -> Result<Footer> {
    read_footer_with(store, key, size, None, page_index_options(), Some(tail)).await
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
    tail: Option<(u64, u32)>,
) -> Result<Footer> {
    let (builder, e_tag) = open_footer(store, key, size, hint, options.clone(), tail).await?;
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
    tail: Option<(u64, u32)>,
) -> Result<(
    ParquetRecordBatchStreamBuilder<ObjectRangeReader>,
    Option<String>,
)> {
    let reader = ObjectRangeReader::new(store.object_store().clone(), store.path(key)?, key, size)
        .with_footer_hint(hint)
        .with_tail_check(tail);
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
    Ok(
        open_footer(store, key, size, None, Default::default(), None)
            .await?
            .0
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| u64::try_from(rg.num_rows()).unwrap_or_default())
            .collect(),
    )
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
