//! Arrow -> Parquet: writer settings, codec names, and a part encoder that
//! counts and hashes the bytes it produces as it goes.

use std::io::Write;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use std::sync::Arc;

use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory,
};
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter};
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::parquet::chunk_crc::ChunkCrcWriter;

/// The codec names pds accepts: pyarrow's, case-insensitive.
pub const CODECS: &[&str] = &["none", "snappy", "gzip", "brotli", "lz4", "zstd"];

/// Map a pyarrow-style codec name to Parquet's, at pyarrow's default levels.
pub fn parse_compression(name: &str) -> Result<Compression> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "none" | "uncompressed" => Compression::UNCOMPRESSED,
        "snappy" => Compression::SNAPPY,
        "gzip" => Compression::GZIP(GzipLevel::default()),
        "brotli" => Compression::BROTLI(BrotliLevel::try_new(1)?),
        // pyarrow's "lz4" writes the LZ4_RAW codec.
        "lz4" | "lz4_raw" => Compression::LZ4_RAW,
        "zstd" => Compression::ZSTD(ZstdLevel::try_new(1)?),
        _ => {
            return Err(Error::InvalidArgument(format!(
                "unknown compression codec {name:?}; expected one of {}",
                CODECS.join(", ")
            )))
        }
    })
}

/// How parts are encoded and split.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// The codec name as the caller gave it (recorded in the manifest).
    pub compression_name: String,
    pub compression: Compression,
    /// Rows per row group; `None` uses the Parquet default (1Mi rows, as pyarrow).
    pub row_group_size: Option<usize>,
    /// Rows per part file; `None` writes one `data.parquet`.
    pub max_rows_per_file: Option<usize>,
    /// Columns written with page statistics (a column index), so that a
    /// reader can fetch only the pages that may hold a value; every page's
    /// CRC-32 is then recorded too (see [`crate::parquet::chunk_crc`]).
    pub page_index: Vec<String>,
    /// Columns written without a dictionary: sorted keys, whose values
    /// mostly differ from page to page, so that building a dictionary costs
    /// time and, once it outgrows its page, falls back to plain anyway.
    pub plain: Vec<String>,
}

impl EncodeOptions {
    /// Validate the settings. Fails with `InvalidArgument` before any I/O.
    pub fn new(
        compression: &str,
        row_group_size: Option<usize>,
        max_rows_per_file: Option<usize>,
    ) -> Result<Self> {
        if row_group_size == Some(0) {
            return Err(Error::InvalidArgument("row_group_size must be >= 1".into()));
        }
        if max_rows_per_file == Some(0) {
            return Err(Error::InvalidArgument(
                "max_rows_per_file must be >= 1".into(),
            ));
        }
        Ok(Self {
            compression_name: compression.to_string(),
            compression: parse_compression(compression)?,
            row_group_size,
            max_rows_per_file,
            page_index: Vec::new(),
            plain: Vec::new(),
        })
    }

    /// These options, with page statistics on `columns` (see [`Self::page_index`]).
    pub fn with_page_index(mut self, columns: &[String]) -> Self {
        self.page_index = columns.to_vec();
        self
    }

    /// These options, with no dictionary for `columns` (see [`Self::plain`]).
    pub fn without_dictionary(mut self, columns: &[String]) -> Self {
        self.plain = columns.to_vec();
        self
    }

    /// Parquet writer properties for these options.
    pub fn writer_properties(&self) -> WriterProperties {
        // Row-group (chunk) statistics are what readers prune with, and what
        // pyarrow writes; page-level statistics cost encode time for no use here.
        let mut b = WriterProperties::builder()
            .set_compression(self.compression)
            .set_statistics_enabled(EnabledStatistics::Chunk);
        if let Some(n) = self.row_group_size {
            b = b.set_max_row_group_row_count(Some(n));
        }
        for c in &self.plain {
            b = b.set_column_dictionary_enabled(
                parquet::schema::types::ColumnPath::new(vec![c.clone()]),
                false,
            );
        }
        for c in &self.page_index {
            b = b.set_column_statistics_enabled(
                parquet::schema::types::ColumnPath::new(vec![c.clone()]),
                EnabledStatistics::Page,
            );
        }
        b.build()
    }
}

/// Row count, byte size, SHA-256 and statistics of one encoded part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSummary {
    pub row_count: u64,
    pub size_bytes: u64,
    pub sha256: String,
    pub row_groups: u64,
    /// The bytes after the last row group: page indexes, the footer and its
    /// 8-byte trailer. A reader fetches them with one GET of this size.
    pub footer_bytes: u64,
    /// The CRC-32 of those `footer_bytes`: what a reader that seeks pages by
    /// the page index checks them against (the chunk checksums cover only
    /// the data; see [`crate::parquet::chunk_crc`]).
    pub footer_crc32: u32,
    /// Per top-level column min/max/null count (see [`crate::parquet::stats`]).
    pub columns: std::collections::BTreeMap<String, crate::parquet::stats::ColumnStats>,
}

/// A `Write` adapter that hashes and counts every byte on its way through,
/// and computes the column-chunk checksums (see [`crate::parquet::chunk_crc`]).
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
    crcs: ChunkCrcWriter,
    /// Page checksums, where pages are indexed.
    page_crcs: ChunkCrcWriter,
    /// The CRC-32 of what is written after the data, once it begins.
    tail: Option<crc32fast::Hasher>,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
            crcs: ChunkCrcWriter::default(),
            page_crcs: ChunkCrcWriter::default(),
            tail: None,
        }
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.crcs.update(self.written, &buf[..n]);
        self.page_crcs.update(self.written, &buf[..n]);
        if let Some(tail) = self.tail.as_mut() {
            tail.update(&buf[..n]);
        }
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Rows per row group when none is set (pyarrow's and parquet-rs's default).
pub const DEFAULT_ROW_GROUP_ROWS: usize = 1024 * 1024;

/// Rows buffered (zero-copy) before they are encoded into the open row
/// group's column writers: what a part holds of its input, whatever its row
/// group size.
pub const ENCODE_SLICE_ROWS: usize = 64 * 1024;

/// One leaf column's writer of the open row group, and its slices to encode.
type ColumnJob = (usize, ArrowColumnWriter, Vec<ArrowLeafColumn>);

/// Encodes one part file into a sink, batch by batch.
///
/// Batches are buffered (zero-copy) up to [`ENCODE_SLICE_ROWS`] rows, then
/// encoded into the open row group's column writers in parallel, one leaf
/// column per task on up to one thread per core, so a single file also uses
/// every core. A part thus holds at most a slice of its input and the
/// encoded (compressed) pages of one row group, not the row group's Arrow
/// data. Complete row groups go to the sink in file order.
pub struct PartEncoder<W: Write + Send> {
    /// The file, opened once the first rows are buffered (see [`Self::file`]).
    file: Option<OpenFile<W>>,
    /// The sink, until the file is opened.
    sink: Option<W>,
    opts: EncodeOptions,
    /// The Parquet schema of [`Self::schema`].
    parquet_schema: parquet::schema::types::TypePtr,
    /// The caller's schema: every batch must have exactly these types.
    input: SchemaRef,
    /// What is encoded (see [`crate::parquet::storage_types`]); batches are cast to it.
    schema: SchemaRef,
    cast: bool,
    row_group_rows: usize,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// The open row group's column writers (by leaf), and its rows so far.
    open: Option<Vec<ArrowColumnWriter>>,
    open_rows: usize,
    row_groups: usize,
    rows: u64,
}

/// A part's Parquet writer and the factory of its row groups' column writers.
struct OpenFile<W: Write + Send> {
    writer: SerializedFileWriter<HashingWriter<W>>,
    factory: ArrowRowGroupWriterFactory,
}

impl<W: Write + Send> PartEncoder<W> {
    /// Fails with `UnsupportedType` for a schema pds cannot store
    /// (see [`crate::parquet::storage_types::check_writable`]).
    pub fn new(sink: W, input: SchemaRef, opts: &EncodeOptions) -> Result<Self> {
        crate::parquet::storage_types::check_writable(&input)?;
        let cast = crate::parquet::storage_types::needs_storage_cast(&input);
        let schema = if cast {
            Arc::new(crate::parquet::storage_types::storage_schema(&input))
        } else {
            input.clone()
        };
        let props = opts.writer_properties();
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)?;
        Ok(Self {
            file: None,
            sink: Some(sink),
            opts: opts.clone(),
            parquet_schema: parquet_schema.root_schema_ptr(),
            input,
            schema,
            cast,
            row_group_rows: opts.row_group_size.unwrap_or(DEFAULT_ROW_GROUP_ROWS),
            pending: Vec::new(),
            pending_rows: 0,
            open: None,
            open_rows: 0,
            row_groups: 0,
            rows: 0,
        })
    }

    /// The part's file writer, opened on first use: the columns whose first
    /// buffered values are all distinct are written without a dictionary
    /// (see [`crate::parquet::dictionary_choice`]).
    fn file(&mut self) -> Result<&mut OpenFile<W>> {
        if self.file.is_none() {
            let sink = self
                .sink
                .take()
                .ok_or_else(|| Error::Task("a part encoder lost its sink".into()))?;
            let mut opts = self.opts.clone();
            let unique = crate::parquet::dictionary_choice::unique_columns(
                &self.schema,
                &self.pending,
                &opts.plain,
            );
            opts.plain.extend(unique);
            let mut props = opts.writer_properties();
            add_encoded_arrow_schema_to_metadata(&self.schema, &mut props);
            let writer = SerializedFileWriter::new(
                HashingWriter::new(sink),
                self.parquet_schema.clone(),
                Arc::new(props),
            )?;
            let factory = ArrowRowGroupWriterFactory::new(&writer, self.schema.clone());
            self.file = Some(OpenFile { writer, factory });
        }
        self.file
            .as_mut()
            .ok_or_else(|| Error::Task("a part encoder's file did not open".into()))
    }

    /// Append a batch. Each full row group is encoded and flushed to the sink.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let same_types = batch.num_columns() == self.input.fields().len()
            && batch
                .columns()
                .iter()
                .zip(self.input.fields())
                .all(|(c, f)| c.data_type() == f.data_type());
        if !same_types {
            return Err(Error::Arrow(arrow_schema::ArrowError::SchemaError(
                format!(
                    "batch schema {:?} differs from the stream's {:?}",
                    batch.schema(),
                    self.input
                ),
            )));
        }
        let stored;
        let batch = if self.cast {
            stored = crate::parquet::storage_types::to_storage(batch, &self.schema)?;
            &stored
        } else {
            batch
        };
        let slice_rows = self.row_group_rows.min(ENCODE_SLICE_ROWS);
        let mut offset = 0;
        while offset < batch.num_rows() {
            let room = self.row_group_rows - self.open_rows - self.pending_rows;
            let take = room
                .min(slice_rows.saturating_sub(self.pending_rows).max(1))
                .min(batch.num_rows() - offset);
            self.pending.push(batch.slice(offset, take));
            self.pending_rows += take;
            offset += take;
            if self.open_rows + self.pending_rows == self.row_group_rows {
                self.flush_row_group()?;
            } else if self.pending_rows >= slice_rows {
                self.encode_pending()?;
            }
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Encode the buffered slices into the open row group (opened if none).
    fn encode_pending(&mut self) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let writers = match self.open.take() {
            Some(w) => w,
            None => {
                // The file opens here, sampling the buffered rows.
                let index = self.row_groups;
                self.file()?.factory.create_column_writers(index)?
            }
        };
        let batches = std::mem::take(&mut self.pending);
        let rows = std::mem::take(&mut self.pending_rows);
        // One job per leaf column: its writer and its slices of every batch.
        let mut jobs: Vec<ColumnJob> = writers
            .into_iter()
            .enumerate()
            .map(|(i, w)| (i, w, Vec::new()))
            .collect();
        let mut leaf = 0;
        for (col, field) in self.schema.fields().iter().enumerate() {
            let mut width = 0;
            for b in &batches {
                let leaves = compute_leaves(field, b.column(col))?;
                width = leaves.len();
                for (j, l) in leaves.into_iter().enumerate() {
                    jobs[leaf + j].2.push(l);
                }
            }
            leaf += width;
        }
        let mut written = in_lanes(jobs, |(i, mut w, leaves)| {
            for l in &leaves {
                w.write(l)?;
            }
            Ok((i, w))
        })?;
        written.sort_by_key(|(i, _)| *i);
        self.open = Some(written.into_iter().map(|(_, w)| w).collect());
        self.open_rows += rows;
        Ok(())
    }

    /// Encode what is buffered, close the open row group and write it out.
    fn flush_row_group(&mut self) -> Result<()> {
        self.encode_pending()?;
        let Some(writers) = self.open.take() else {
            return Ok(());
        };
        self.open_rows = 0;
        let jobs: Vec<(usize, ArrowColumnWriter)> = writers.into_iter().enumerate().collect();
        let mut chunks = in_lanes(jobs, |(i, w)| Ok((i, w.close()?)))?;
        chunks.sort_by_key(|(i, _)| *i);
        let pages = !self.opts.page_index.is_empty();
        let file = self.file()?;
        // The chunks land back to back from here on: plan their checksums.
        let mut at = file.writer.bytes_written() as u64;
        for (_, chunk) in &chunks {
            let close = chunk.close();
            let len = u64::try_from(close.metadata.compressed_size()).unwrap_or_default();
            let hw = file.writer.inner_mut();
            hw.crcs.plan(at, len);
            // Pages lie back to back in the chunk, the dictionary page (the
            // bytes the data pages leave) first.
            if let Some(index) = close.offset_index.as_ref().filter(|_| pages) {
                let sizes: Vec<u64> = index
                    .page_locations
                    .iter()
                    .map(|p| u64::try_from(p.compressed_page_size).unwrap_or_default())
                    .collect();
                let dictionary = len.saturating_sub(sizes.iter().sum());
                if dictionary > 0 {
                    hw.page_crcs.plan(at, dictionary);
                }
                let mut page = at + dictionary;
                for size in sizes {
                    hw.page_crcs.plan(page, size);
                    page += size;
                }
            }
            at += len;
        }
        let mut rg = file.writer.next_row_group()?;
        for (_, chunk) in chunks {
            chunk.append_to_row_group(&mut rg)?;
        }
        rg.close()?;
        self.row_groups += 1;
        Ok(())
    }

    /// Write the last row group and the footer; return the summary and the sink.
    pub fn finish(mut self) -> Result<(PartSummary, W)> {
        self.flush_row_group()?;
        let (rows, page_index) = (self.rows, !self.opts.page_index.is_empty());
        self.file()?;
        let Some(OpenFile { mut writer, .. }) = self.file.take() else {
            return Err(Error::Task("a part encoder's file did not open".into()));
        };
        writer.flush()?; // Every chunk's bytes have passed the checksums.
        let ranges = crate::parquet::chunk_crc::flushed_ranges(writer.flushed_row_groups());
        if let Some(entry) = writer.inner_mut().crcs.entry(&ranges) {
            writer.append_key_value_metadata(entry);
        }
        let pages = &writer.inner_mut().page_crcs;
        if let Some(entry) = pages.entry_as(crate::parquet::chunk_crc::PAGE_KEY) {
            if page_index && !entry.value.as_deref().unwrap_or("").is_empty() {
                writer.append_key_value_metadata(entry);
            }
        }
        let flushed = writer.flushed_row_groups();
        let row_groups = flushed.len() as u64;
        let columns = crate::parquet::stats::file_stats(flushed, &self.schema);
        let data_end = writer.inner_mut().written;
        writer.inner_mut().tail = Some(crc32fast::Hasher::new());
        let mut hw = writer.into_inner()?;
        hw.flush()?;
        let footer_crc32 = hw.tail.take().map(|t| t.finalize()).unwrap_or_default();
        let summary = PartSummary {
            row_count: rows,
            size_bytes: hw.written,
            footer_bytes: hw.written.saturating_sub(data_end),
            footer_crc32,
            sha256: hex::encode(hw.hasher.finalize()),
            row_groups,
            columns,
        };
        Ok((summary, hw.inner))
    }
}

/// Run `work` on each job, spread over the process's CPU pool (see
/// [`crate::runtime::cpu_pool`]). A panic in one is the typed error.
fn in_lanes<J: Send, T: Send>(
    jobs: Vec<J>,
    work: impl Fn(J) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    use rayon::prelude::*;
    let work = &work;
    crate::runtime::cpu_pool()?.install(|| {
        jobs.into_par_iter()
            .map(|job| crate::error::contain(encoder_panic, || work(job)))
            .collect()
    })
}

/// An encoder panic, reported as a data error (the input could not be encoded).
pub fn encoder_panic(msg: String) -> Error {
    Error::Arrow(arrow_schema::ArrowError::ComputeError(format!(
        "the Parquet encoder failed on this data ({msg})"
    )))
}

/// Encode `batches` as one Parquet file in memory. A panic in the encoder
/// is contained and reported as a data error.
pub fn encode_to_bytes(
    batches: &[RecordBatch],
    schema: SchemaRef,
    opts: &EncodeOptions,
) -> Result<(Bytes, PartSummary)> {
    encode_batches(batches.iter().cloned(), Vec::new(), schema, opts)
}

/// [`encode_to_bytes`] of batches handed over: each is dropped once it is
/// encoded, so the part's Arrow data is freed as its pages grow, and the
/// output is allocated once, for as many bytes as the batches' Arrow data
/// (pages never touched cost no memory), instead of growing by doubling.
pub fn encode_owned(
    batches: Vec<RecordBatch>,
    schema: SchemaRef,
    opts: &EncodeOptions,
) -> Result<(Bytes, PartSummary)> {
    // The bytes the batches' rows take (a slice counts only its rows).
    let arrow_bytes: usize = batches
        .iter()
        .flat_map(|b| b.columns())
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum();
    let sink = Vec::with_capacity(arrow_bytes.min(OWNED_CAPACITY_MAX));
    encode_batches(batches.into_iter(), sink, schema, opts)
}

/// The most [`encode_owned`] reserves up front.
const OWNED_CAPACITY_MAX: usize = 1 << 30;

/// Encode `batches` into `sink`, each batch dropped once written.
fn encode_batches(
    batches: impl Iterator<Item = RecordBatch>,
    sink: Vec<u8>,
    schema: SchemaRef,
    opts: &EncodeOptions,
) -> Result<(Bytes, PartSummary)> {
    crate::error::contain(encoder_panic, || {
        let mut enc = PartEncoder::new(sink, schema, opts)?;
        for b in batches {
            enc.write(&b)?;
        }
        let (summary, buf) = enc.finish()?;
        Ok((Bytes::from(buf), summary))
    })
}

/// SHA-256 of a byte string, as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    pub fn sample(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("n{i}")),
                )),
            ],
        )
        .unwrap()
    }

    #[test]
    fn codecs_parse_case_insensitively() {
        assert_eq!(
            parse_compression("ZSTD").unwrap(),
            Compression::ZSTD(ZstdLevel::try_new(1).unwrap())
        );
        assert_eq!(
            parse_compression("none").unwrap(),
            Compression::UNCOMPRESSED
        );
        assert!(matches!(
            parse_compression("zip"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(EncodeOptions::new("zstd", Some(0), None).is_err());
    }

    /// Columns whose first values are all distinct are written plain; a
    /// column whose values repeat keeps its dictionary, in every row group.
    #[test]
    fn distinct_columns_are_written_without_a_dictionary() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let n = 150_000i64;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("cat", DataType::Utf8, true),
            Field::new("tiny", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("c{}", i % 40)),
                )),
                // Too few non-null values to judge: the dictionary stays.
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|i| (i % 1000 == 0).then_some(i)),
                )),
            ],
        )
        .unwrap();
        let opts = EncodeOptions::new("zstd", Some(100_000), None).unwrap();
        for step in [1_000usize, 150_000] {
            let mut enc = PartEncoder::new(Vec::new(), schema.clone(), &opts).unwrap();
            let mut at = 0;
            while at < batch.num_rows() {
                let k = step.min(batch.num_rows() - at);
                enc.write(&batch.slice(at, k)).unwrap();
                at += k;
            }
            let (summary, buf) = enc.finish().unwrap();
            assert_eq!(summary.row_groups, 2);
            let file = SerializedFileReader::new(Bytes::from(buf)).unwrap();
            for rg in file.metadata().row_groups() {
                let dict: Vec<bool> = rg
                    .columns()
                    .iter()
                    .map(|c| c.dictionary_page_offset().is_some())
                    .collect();
                assert_eq!(dict, [false, true, true], "batches of {step}");
            }
        }
    }

    /// Large row groups are encoded slice by slice: the encoder never holds
    /// more than a slice of input rows, and the file is the same rows in
    /// the same row groups, whatever the batch sizes.
    #[test]
    fn input_is_held_a_slice_at_a_time() {
        let opts = EncodeOptions::new("zstd", Some(300_000), None).unwrap();
        let big = sample(700_000);
        for step in [1_000usize, 50_000, 100_000, 700_000] {
            let mut enc = PartEncoder::new(Vec::new(), big.schema(), &opts).unwrap();
            let mut at = 0;
            while at < big.num_rows() {
                let n = step.min(big.num_rows() - at);
                enc.write(&big.slice(at, n)).unwrap();
                assert!(enc.pending_rows < ENCODE_SLICE_ROWS, "step {step}");
                assert!(enc.open_rows < 300_000);
                at += n;
            }
            let (summary, buf) = enc.finish().unwrap();
            assert_eq!((summary.row_count, summary.row_groups), (700_000, 3));
            let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(buf)).unwrap();
            let sizes: Vec<i64> = builder
                .metadata()
                .row_groups()
                .iter()
                .map(|g| g.num_rows())
                .collect();
            assert_eq!(sizes, [300_000, 300_000, 100_000], "step {step}");
            let reader = builder.build().unwrap();
            let read: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
            let read = arrow_select::concat::concat_batches(&big.schema(), &read).unwrap();
            assert_eq!(read, big, "step {step}");
        }
    }

    #[test]
    fn summary_matches_bytes_and_rows() {
        let b = sample(1000);
        let opts = EncodeOptions::new("zstd", Some(300), None).unwrap();
        let (bytes, s) = encode_to_bytes(std::slice::from_ref(&b), b.schema(), &opts).unwrap();
        assert_eq!(s.size_bytes, bytes.len() as u64);
        assert_eq!(s.sha256, sha256_hex(&bytes));
        assert_eq!(s.row_count, 1000);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert_eq!(reader.metadata().num_row_groups(), 4);
        let back: Vec<RecordBatch> = reader.build().unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            arrow_select::concat::concat_batches(&b.schema(), &back).unwrap(),
            b
        );
    }

    #[test]
    fn nested_columns_and_many_batches() {
        use arrow_array::{Array, ListArray, StructArray};
        let list = ListArray::from_iter_primitive::<arrow_array::types::Int32Type, _, _>(
            (0..50).map(|i| {
                if i % 7 == 0 {
                    None
                } else {
                    Some(vec![Some(i), None])
                }
            }),
        );
        let inner = StructArray::from(vec![
            (
                Arc::new(Field::new("a", DataType::Int64, false)),
                Arc::new(Int64Array::from_iter_values(0..50)) as _,
            ),
            (
                Arc::new(Field::new("b", DataType::Utf8, true)),
                Arc::new(StringArray::from_iter_values(
                    (0..50).map(|i| format!("{i}")),
                )) as _,
            ),
        ]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("l", list.data_type().clone(), true),
            Field::new("s", inner.data_type().clone(), false),
            Field::new("x", DataType::Int64, false),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(list),
                Arc::new(inner),
                Arc::new(Int64Array::from_iter_values(0..50)),
            ],
        )
        .unwrap();
        let pieces: Vec<RecordBatch> = (0..5).map(|i| b.slice(i * 10, 10)).collect();
        let opts = EncodeOptions::new("zstd", Some(16), None).unwrap();
        let (bytes, s) = encode_to_bytes(&pieces, schema.clone(), &opts).unwrap();
        assert_eq!(s.row_count, 50);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert_eq!(reader.metadata().num_row_groups(), 4);
        let back: Vec<RecordBatch> = reader.build().unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            arrow_select::concat::concat_batches(&schema, &back).unwrap(),
            b
        );
    }

    /// Batches handed over (slices of one batch, so their sizes count only
    /// their rows) encode to the same bytes as borrowed ones.
    #[test]
    fn owned_batches_encode_to_the_same_bytes() {
        let b = sample(10_000);
        let pieces: Vec<RecordBatch> = (0..10).map(|i| b.slice(i * 1000, 1000)).collect();
        let opts = EncodeOptions::new("zstd", Some(4096), None).unwrap();
        let (borrowed, s1) = encode_to_bytes(&pieces, b.schema(), &opts).unwrap();
        let (owned, s2) = encode_owned(pieces, b.schema(), &opts).unwrap();
        assert_eq!(borrowed, owned);
        assert_eq!(s1, s2);
        assert_eq!(s2.row_count, 10_000);
    }

    #[test]
    fn empty_input_is_a_valid_file() {
        let b = sample(0);
        let opts = EncodeOptions::new("snappy", None, None).unwrap();
        let (bytes, s) = encode_to_bytes(&[], b.schema(), &opts).unwrap();
        assert_eq!(s.row_count, 0);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert_eq!(reader.schema().fields().len(), 2);
    }
}
