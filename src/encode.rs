//! Arrow -> Parquet: writer settings, codec names, and a part encoder that
//! counts and hashes the bytes it produces as it goes.

use std::io::Write;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

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
        })
    }

    /// Parquet writer properties for these options.
    pub fn writer_properties(&self) -> WriterProperties {
        let mut b = WriterProperties::builder().set_compression(self.compression);
        if let Some(n) = self.row_group_size {
            b = b.set_max_row_group_row_count(Some(n));
        }
        b.build()
    }
}

/// Row count, byte size and SHA-256 of one encoded part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSummary {
    pub row_count: u64,
    pub size_bytes: u64,
    pub sha256: String,
}

/// A `Write` adapter that hashes and counts every byte on its way through.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Encodes one part file into a sink, batch by batch.
pub struct PartEncoder<W: Write + Send> {
    writer: ArrowWriter<HashingWriter<W>>,
    rows: u64,
}

impl<W: Write + Send> PartEncoder<W> {
    pub fn new(sink: W, schema: SchemaRef, opts: &EncodeOptions) -> Result<Self> {
        let writer = ArrowWriter::try_new(
            HashingWriter::new(sink),
            schema,
            Some(opts.writer_properties()),
        )?;
        Ok(Self { writer, rows: 0 })
    }

    /// Append a batch. Complete row groups are flushed to the sink.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch)?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Write the footer and return the summary and the sink.
    pub fn finish(self) -> Result<(PartSummary, W)> {
        let rows = self.rows;
        let mut hw = self.writer.into_inner()?;
        hw.flush()?;
        let summary = PartSummary {
            row_count: rows,
            size_bytes: hw.written,
            sha256: hex::encode(hw.hasher.finalize()),
        };
        Ok((summary, hw.inner))
    }
}

/// Encode `batches` as one Parquet file in memory.
pub fn encode_to_bytes(
    batches: &[RecordBatch],
    schema: SchemaRef,
    opts: &EncodeOptions,
) -> Result<(Bytes, PartSummary)> {
    let mut enc = PartEncoder::new(Vec::new(), schema, opts)?;
    for b in batches {
        enc.write(b)?;
    }
    let (summary, buf) = enc.finish()?;
    Ok((Bytes::from(buf), summary))
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
    use std::sync::Arc;

    pub fn sample(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("n{i}")))),
            ],
        )
        .unwrap()
    }

    #[test]
    fn codecs_parse_case_insensitively() {
        assert_eq!(parse_compression("ZSTD").unwrap(), Compression::ZSTD(ZstdLevel::try_new(1).unwrap()));
        assert_eq!(parse_compression("none").unwrap(), Compression::UNCOMPRESSED);
        assert!(matches!(parse_compression("zip"), Err(Error::InvalidArgument(_))));
        assert!(EncodeOptions::new("zstd", Some(0), None).is_err());
    }

    #[test]
    fn summary_matches_bytes_and_rows() {
        let b = sample(1000);
        let opts = EncodeOptions::new("zstd", Some(300), None).unwrap();
        let (bytes, s) = encode_to_bytes(&[b.clone()], b.schema(), &opts).unwrap();
        assert_eq!(s.size_bytes, bytes.len() as u64);
        assert_eq!(s.sha256, sha256_hex(&bytes));
        assert_eq!(s.row_count, 1000);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert_eq!(reader.metadata().num_row_groups(), 4);
        let back: Vec<RecordBatch> = reader.build().unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(arrow_select::concat::concat_batches(&b.schema(), &back).unwrap(), b);
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
