//! An `AsyncFileReader` over object_store: the footer in one suffix-sized
//! request, then column chunks as coalesced range requests
//! (`ObjectStore::get_ranges` merges nearby ranges). Every whole column
//! chunk fetched is checked against the checksum pds wrote in the footer
//! (see [`crate::parquet::chunk_crc`]).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::parquet::chunk_crc::ChunkChecksums;

/// Bytes fetched from the end of a file on the first request. Most footers
/// fit, so the metadata costs one GET.
const FOOTER_PREFETCH: usize = 64 * 1024;

/// Reads one Parquet object of known size through range requests.
#[derive(Debug, Clone)]
pub struct ObjectRangeReader {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    /// The footer's column-chunk checksums, once the footer is read.
    checksums: Option<Arc<ChunkChecksums>>,
}

impl ObjectRangeReader {
    pub fn new(store: Arc<dyn ObjectStore>, path: Path, size: u64) -> Self {
        Self {
            store,
            path,
            size,
            checksums: None,
        }
    }

    /// A reader of a file whose footer was read already: its chunk
    /// checksums come from `metadata` (`get_metadata` is then not called).
    pub fn with_metadata(
        store: Arc<dyn ObjectStore>,
        path: Path,
        size: u64,
        metadata: &ParquetMetaData,
    ) -> Result<Self> {
        let checksums = ChunkChecksums::from_metadata(metadata)
            .map_err(ParquetError::General)?
            .map(Arc::new);
        Ok(Self {
            store,
            path,
            size,
            checksums,
        })
    }

    fn check(&self, start: u64, data: &Bytes) -> Result<()> {
        match &self.checksums {
            Some(c) => c.check(start, data).map_err(ParquetError::General),
            None => Ok(()),
        }
    }
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for ObjectRangeReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        async move {
            let start = range.start;
            let data = self
                .store
                .get_range(&self.path, range)
                .await
                .map_err(external)?;
            self.check(start, &data)?;
            Ok(data)
        }
        .boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move {
            let data = self
                .store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(external)?;
            for (range, bytes) in ranges.iter().zip(&data) {
                self.check(range.start, bytes)?;
            }
            Ok(data)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .with_prefetch_hint(Some(FOOTER_PREFETCH))
                .load_and_finish(&mut *self, size)
                .await?;
            self.checksums = ChunkChecksums::from_metadata(&metadata)
                .map_err(ParquetError::General)?
                .map(Arc::new);
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}
