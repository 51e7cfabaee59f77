//! Column-chunk checksums: written into every part pds encodes, checked on
//! every read, so that a flipped bit in a data page is an error, not
//! silently different values.
//!
//! Parquet pages can carry a CRC-32, but the arrow-rs writer does not write
//! them (the parquet crate's `crc` feature, enabled, checks pages that carry
//! one, such as pyarrow's with `write_page_checksum=True`). So pds records
//! its own: the CRC-32 of each column chunk's bytes, in row-group then
//! column order, as the footer key-value entry [`KEY`] (8 hex digits each).
//! The offsets and lengths come from the footer's own column-chunk metadata.
//!
//! Parts written with a page index (a pipeline's, whose key columns carry
//! page statistics so that a lookup fetches only the pages that may hold
//! its keys) also record the CRC-32 of each page, as [`PAGE_KEY`]: per
//! column chunk in the same order, its dictionary page (if any), then each
//! data page of its offset index. A reader that fetches single pages checks
//! each one.
//!
//! Readers check every column chunk they fetch: the range reader checks each
//! fetched range that is a whole chunk (the async reader fetches whole
//! chunks), and the in-memory decoder checks every chunk before decoding.
//! What remains unchecked without `verify=True` (the whole-file SHA-256 in
//! the manifest) is the footer itself (and the page index after the data),
//! and parts written by other tools. A pipeline's manifest also records the
//! CRC-32 of each part's tail (page index and footer), which its page
//! lookups check ([`crate::parquet::seek`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{Schema, SchemaRef};

use parquet::file::metadata::{KeyValue, ParquetMetaData, RowGroupMetaData};

/// The footer key-value entry holding the checksums.
pub const KEY: &str = "pds.chunk_crc32";

/// The footer key-value entry holding the page checksums.
pub const PAGE_KEY: &str = "pds.page_crc32";

/// The byte range of every column chunk, in row-group then column order.
/// (Not `ColumnChunkMetaData::byte_range`, which panics on the negative
/// values a damaged footer can hold: those become an impossible range.)
fn chunk_ranges(row_groups: &[RowGroupMetaData]) -> Vec<(u64, u64)> {
    row_groups
        .iter()
        .flat_map(|rg| rg.columns().iter())
        .map(chunk_range)
        .collect()
}

fn chunk_range(c: &parquet::file::metadata::ColumnChunkMetaData) -> (u64, u64) {
    let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
    let len = c.compressed_size();
    (
        u64::try_from(start).unwrap_or(u64::MAX),
        u64::try_from(len).unwrap_or(u64::MAX),
    )
}

/// The byte range of every page, in row-group then column order, each
/// chunk's dictionary page (the bytes before its first data page) first;
/// `None` without an offset index.
fn page_ranges(metadata: &ParquetMetaData) -> Option<Vec<(u64, u64)>> {
    let index = metadata.offset_index()?;
    let mut out = Vec::new();
    for (rg, columns) in metadata.row_groups().iter().zip(index) {
        for (chunk, offsets) in rg.columns().iter().zip(columns) {
            let (start, _) = chunk_range(chunk);
            let pages = &offsets.page_locations;
            let at = |o: i64| u64::try_from(o).unwrap_or(u64::MAX);
            match pages.first() {
                Some(first) if at(first.offset) > start => {
                    out.push((start, at(first.offset) - start))
                }
                _ => {}
            }
            for p in pages {
                let len = u64::try_from(p.compressed_page_size).unwrap_or(u64::MAX);
                out.push((at(p.offset), len));
            }
        }
    }
    Some(out)
}

/// A footer entry's CRC-32s (8 hex digits each) for `ranges`.
fn parse_entry(
    text: &str,
    ranges: Vec<(u64, u64)>,
    key: &str,
    what: &str,
) -> Result<HashMap<(u64, u64), u32>, String> {
    if text.len() != ranges.len() * 8 || !text.is_ascii() {
        return Err(format!(
            "its footer's {key} entry does not match its {} {what}",
            ranges.len()
        ));
    }
    let mut by_range = HashMap::with_capacity(ranges.len());
    for (i, range) in ranges.into_iter().enumerate() {
        let crc = u32::from_str_radix(&text[i * 8..i * 8 + 8], 16)
            .map_err(|e| format!("its footer's {key} entry is malformed: {e}"))?;
        by_range.insert(range, crc);
    }
    Ok(by_range)
}

/// The checksums a part's footer records, by `(offset, length)` of chunk
/// (and of page, where the footer records them and the offset index was read).
#[derive(Debug, Clone, Default)]
pub struct ChunkChecksums {
    by_range: HashMap<(u64, u64), u32>,
    pages: HashMap<(u64, u64), u32>,
}

impl ChunkChecksums {
    /// Read the checksums from a footer; `Ok(None)` if it records none (a
    /// part written by another tool). A malformed entry is an error.
    pub fn from_metadata(metadata: &ParquetMetaData) -> Result<Option<Self>, String> {
        let Some(kv) = metadata.file_metadata().key_value_metadata() else {
            return Ok(None);
        };
        let entry = |key: &str| kv.iter().find(|e| e.key == key).map(|e| e.value.as_deref());
        let Some(value) = entry(KEY) else {
            return Ok(None);
        };
        let ranges = chunk_ranges(metadata.row_groups());
        let by_range = parse_entry(value.unwrap_or_default(), ranges, KEY, "column chunks")?;
        let pages = match (entry(PAGE_KEY), page_ranges(metadata)) {
            (Some(text), Some(ranges)) => {
                parse_entry(text.unwrap_or_default(), ranges, PAGE_KEY, "pages")?
            }
            _ => HashMap::new(),
        };
        Ok(Some(Self { by_range, pages }))
    }

    /// Check `data`, fetched from `offset`, if it is a whole column chunk,
    /// or a page whose checksum the footer records.
    pub fn check(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        let range = (offset, data.len() as u64);
        let (expected, what) = match (self.by_range.get(&range), self.pages.get(&range)) {
            (Some(&c), _) => (c, "column chunk"),
            (None, Some(&c)) => (c, "page"),
            (None, None) => return Ok(()),
        };
        let actual = crc32fast::hash(data);
        if actual != expected {
            return Err(format!(
                "checksum mismatch in the {what} at bytes {offset}..{}: \
                 the footer has CRC-32 {expected:08x}, the bytes {actual:08x}",
                offset + data.len() as u64
            ));
        }
        Ok(())
    }

    /// Whether the footer records page checksums (and the offset index
    /// they follow was read).
    pub fn has_pages(&self) -> bool {
        !self.pages.is_empty()
    }

    /// Check the column chunks `(row group, leaf column)` of a file held
    /// whole in memory.
    pub fn check_chunks(
        &self,
        file: &[u8],
        metadata: &ParquetMetaData,
        chunks: &[(usize, usize)],
    ) -> Result<(), String> {
        let groups = metadata.row_groups();
        let ranges: Vec<(u64, u64)> = chunks
            .iter()
            .filter_map(|&(rg, leaf)| groups.get(rg).and_then(|g| g.columns().get(leaf)))
            .map(chunk_range)
            .collect();
        self.check_ranges(file, ranges)
    }

    /// Check every column chunk of a file held whole in memory.
    pub fn check_all(&self, file: &[u8]) -> Result<(), String> {
        self.check_ranges(file, self.by_range.keys().copied().collect())
    }

    fn check_ranges(&self, file: &[u8], ranges: Vec<(u64, u64)>) -> Result<(), String> {
        for (start, len) in ranges {
            let end = start.checked_add(len).filter(|&e| e <= file.len() as u64);
            let Some(end) = end else {
                return Err(format!(
                    "a column chunk at bytes {start}..{} lies beyond the file's {} bytes",
                    start.saturating_add(len),
                    file.len()
                ));
            };
            self.check(start, &file[start as usize..end as usize])?;
        }
        Ok(())
    }
}

/// `schema` without the checksum entry, which a footer's key-value metadata
/// carries into the Arrow schema read from it.
pub fn strip(schema: &SchemaRef) -> SchemaRef {
    if !schema.metadata().contains_key(KEY) && !schema.metadata().contains_key(PAGE_KEY) {
        return schema.clone();
    }
    let mut metadata = schema.metadata().clone();
    metadata.remove(KEY);
    metadata.remove(PAGE_KEY);
    Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata))
}

/// Computes CRC-32s of planned byte ranges as a file's bytes stream past.
#[derive(Debug, Default)]
pub struct ChunkCrcWriter {
    /// Planned `(start, len)` ranges, in file order, with their running hash.
    planned: Vec<(u64, u64, crc32fast::Hasher)>,
    /// Index of the first range not yet complete.
    next: usize,
}

impl ChunkCrcWriter {
    /// Expect a column chunk of `len` bytes at file offset `start`.
    pub fn plan(&mut self, start: u64, len: u64) {
        self.planned.push((start, len, crc32fast::Hasher::new()));
    }

    /// Feed the bytes `data`, which sit at file offset `at`.
    pub fn update(&mut self, at: u64, data: &[u8]) {
        let end = at + data.len() as u64;
        let mut i = self.next;
        while i < self.planned.len() {
            let (start, len, ref mut hasher) = self.planned[i];
            if start >= end {
                break;
            }
            let (lo, hi) = (start.max(at), (start + len).min(end));
            if lo < hi {
                hasher.update(&data[(lo - at) as usize..(hi - at) as usize]);
            }
            if start + len <= end {
                self.next = i + 1;
            }
            i += 1;
        }
    }

    /// The footer entry, once every planned range has streamed past; `None`
    /// if the plan does not match the chunks the footer describes.
    pub fn entry(&self, ranges: &[(u64, u64)]) -> Option<KeyValue> {
        let planned: Vec<(u64, u64)> = self.planned.iter().map(|(s, l, _)| (*s, *l)).collect();
        if planned != ranges {
            return None;
        }
        self.entry_as(KEY)
    }

    /// The footer entry `key` of every planned range, once all have
    /// streamed past; `None` if some did not.
    pub fn entry_as(&self, key: &str) -> Option<KeyValue> {
        if self.next != self.planned.len() {
            return None;
        }
        let value: String = self
            .planned
            .iter()
            .map(|(_, _, h)| format!("{:08x}", h.clone().finalize()))
            .collect();
        Some(KeyValue::new(key.to_string(), value))
    }
}

/// The chunk ranges of the row groups a writer has flushed so far.
pub fn flushed_ranges(row_groups: &[RowGroupMetaData]) -> Vec<(u64, u64)> {
    chunk_ranges(row_groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hash_across_arbitrary_write_boundaries() {
        let file: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = ChunkCrcWriter::default();
        w.plan(4, 100);
        w.plan(104, 396);
        w.plan(500, 1);
        let mut at = 0;
        for piece in file.chunks(37) {
            w.update(at, piece);
            at += piece.len() as u64;
        }
        let kv = w.entry(&[(4, 100), (104, 396), (500, 1)]).unwrap();
        let value = kv.value.unwrap();
        assert_eq!(
            &value[..8],
            format!("{:08x}", crc32fast::hash(&file[4..104]))
        );
        assert_eq!(
            &value[8..16],
            format!("{:08x}", crc32fast::hash(&file[104..500]))
        );
        assert!(w.entry(&[(4, 100)]).is_none());
    }
}
