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
use object_store::{GetOptions, ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::parquet::chunk_crc::ChunkChecksums;
use crate::parquet::read_ahead::ReadAhead;

/// Bytes fetched from the end of a file on the first request. Most footers
/// fit, so the metadata costs one GET.
const FOOTER_PREFETCH: usize = 64 * 1024;

/// The largest footer fetched in one GET on a writer's word; a larger
/// footer costs a second GET.
const MAX_FOOTER_HINT: u64 = 16 * 1024 * 1024;

/// Reads one Parquet object of known size through range requests.
#[derive(Debug, Clone)]
pub struct ObjectRangeReader {
    store: Arc<dyn ObjectStore>,
    path: Path,
    /// The object's key in pds's store (below its root), named by errors.
    key: String,
    size: u64,
    /// The footer's column-chunk checksums, once the footer is read.
    checksums: Option<Arc<ChunkChecksums>>,
    /// Bytes fetched from the end by the footer's first request.
    prefetch: usize,
    /// The row groups' chunks requested ahead of the decoder, if planned.
    ahead: Option<Arc<ReadAhead>>,
    /// The object's ETag as the first ranged GET's reply stated it.
    e_tag: Arc<std::sync::Mutex<Option<String>>>,
    /// The length and CRC-32 of the object's tail (page index, footer,
    /// trailer) as a manifest records them: checked before it is parsed.
    tail: Option<(u64, u32)>,
}

impl ObjectRangeReader {
    /// A reader of the object at `path` in `store`, `key` in pds's store.
    pub fn new(store: Arc<dyn ObjectStore>, path: Path, key: &str, size: u64) -> Self {
        Self {
            store,
            path,
            key: key.to_string(),
            size,
            checksums: None,
            prefetch: FOOTER_PREFETCH,
            ahead: None,
            e_tag: Arc::default(),
            tail: None,
        }
    }

    /// The object's ETag as this reader's (or a clone's) first ranged GET
    /// saw it: the version of the object its footer was read from.
    pub fn seen_e_tag(&self) -> Option<String> {
        self.e_tag.lock().ok().and_then(|t| t.clone())
    }

    /// Serve planned requests through `ahead` (see [`crate::parquet::read_ahead`]).
    pub fn with_read_ahead(mut self, ahead: Arc<ReadAhead>) -> Self {
        self.ahead = Some(ahead);
        self
    }

    /// Fetch exactly the file's last `hint` bytes for its footer (what its
    /// writer recorded: page indexes, footer and trailer), so that the footer
    /// costs one GET whatever its size. A wrong hint costs a second GET,
    /// never a wrong read.
    pub fn with_footer_hint(mut self, hint: Option<u64>) -> Self {
        if let Some(hint) = hint {
            // A manifest is untrusted: a hint as large as the file must not
            // make every footer read fetch it whole.
            let hint = hint.clamp(8, self.size.clamp(8, MAX_FOOTER_HINT));
            self.prefetch = usize::try_from(hint).unwrap_or(FOOTER_PREFETCH);
        }
        self
    }

    /// Fetch the footer as the object's last `tail.0` bytes, whose CRC-32
    /// must be `tail.1` (see [`crate::parquet::encode::PartSummary`]), in
    /// one GET, and parse it (and the page index) from those bytes alone.
    pub fn with_tail_check(mut self, tail: Option<(u64, u32)>) -> Self {
        self.tail = tail;
        self
    }

    /// The footer (and page index, as `options` ask) parsed from the
    /// checked tail (see [`Self::with_tail_check`]).
    async fn checked_metadata(
        &mut self,
        options: Option<&ArrowReaderOptions>,
        (len, crc): (u64, u32),
    ) -> Result<ParquetMetaData> {
        let size = self.size;
        if !(8..=size).contains(&len) {
            return Err(ParquetError::General(format!(
                "its manifest records a tail of {len} bytes in a file of {size}"
            )));
        }
        let tail = self.get_bytes(size - len..size).await?;
        if crc32fast::hash(&tail) != crc {
            return Err(ParquetError::General(
                "its page index and footer do not match the checksum its manifest records".into(),
            ));
        }
        let mut reader = ParquetMetaDataReader::new().with_arrow_reader_options(options);
        match reader.try_parse_sized(&tail, size) {
            Ok(()) => reader.finish(),
            Err(ParquetError::NeedMoreData(n)) => Err(ParquetError::General(format!(
                "its footer and page index take {n} bytes, beyond the {len} its manifest records"
            ))),
            Err(e) => Err(e),
        }
    }

    /// A reader of a file whose footer was read already: its chunk
    /// checksums come from `metadata` (`get_metadata` is then not called).
    pub fn with_metadata(
        store: Arc<dyn ObjectStore>,
        path: Path,
        key: &str,
        size: u64,
        metadata: &ParquetMetaData,
    ) -> Result<Self> {
        let checksums = ChunkChecksums::from_metadata(metadata)
            .map_err(ParquetError::General)?
            .map(Arc::new);
        Ok(Self {
            store,
            path,
            key: key.to_string(),
            size,
            checksums,
            prefetch: FOOTER_PREFETCH,
            ahead: None,
            e_tag: Arc::default(),
            tail: None,
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

/// Why an object that holds `actual` bytes is not the part recorded as
/// `recorded` bytes long.
pub fn wrong_size(actual: u64, recorded: u64) -> String {
    format!(
        "the object holds {actual} bytes, not the {recorded} recorded for it (truncated, grown \
         or replaced)"
    )
}

impl ObjectRangeReader {
    /// A range read failed: if the object is not the size its reader was
    /// told (a truncated or replaced file, a 0-byte file), that is the
    /// file's corruption, not a store failure. One HEAD, on failures only.
    async fn explain(&self, e: object_store::Error) -> ParquetError {
        if matches!(e, object_store::Error::NotFound { .. }) {
            // Named by its key, not by the path object_store gives (on
            // file://, the absolute local path).
            let missing = crate::error::read_error(e, &self.key);
            return ParquetError::External(Box::new(missing));
        }
        match self.store.head(&self.path).await {
            Ok(meta) if meta.size != self.size => self.wrong_size(meta.size),
            _ => external(e),
        }
    }

    fn wrong_size(&self, actual: u64) -> ParquetError {
        ParquetError::General(wrong_size(actual, self.size))
    }
}

impl AsyncFileReader for ObjectRangeReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        async move {
            let start = range.start;
            // A ranged GET also tells the object's size: a file that is not
            // the size recorded for it (truncated, grown, replaced) is
            // corrupt, even where the bytes asked for are all there.
            let options = GetOptions::new().with_range(Some(range));
            let got = match self.store.get_opts(&self.path, options).await {
                Ok(got) => got,
                Err(e) => return Err(self.explain(e).await),
            };
            if got.meta.size != self.size {
                return Err(self.wrong_size(got.meta.size));
            }
            if let Ok(mut seen) = self.e_tag.lock() {
                if seen.is_none() {
                    seen.clone_from(&got.meta.e_tag);
                }
            }
            let data = match got.bytes().await {
                Ok(d) => d,
                Err(e) => return Err(self.explain(e).await),
            };
            self.check(start, &data)?;
            Ok(data)
        }
        .boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move {
            let ahead = self
                .ahead
                .as_ref()
                .and_then(|a| a.request(&ranges, &self.store, &self.path));
            let fetched = match ahead {
                Some(fetch) => match fetch.await {
                    Ok(got) => got,
                    // Cancelled (it cannot be: it was taken before) or panicked: ask again.
                    Err(_) => self.store.get_ranges(&self.path, &ranges).await,
                },
                None => self.store.get_ranges(&self.path, &ranges).await,
            };
            let data = match fetched {
                Ok(d) => d,
                Err(e) => return Err(self.explain(e).await),
            };
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
            let metadata = match self.tail {
                Some(tail) => self.checked_metadata(options, tail).await?,
                None => {
                    ParquetMetaDataReader::new()
                        .with_arrow_reader_options(options)
                        .with_prefetch_hint(Some(self.prefetch))
                        .load_and_finish(&mut *self, size)
                        .await?
                }
            };
            self.checksums = ChunkChecksums::from_metadata(&metadata)
                .map_err(ParquetError::General)?
                .map(Arc::new);
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}
