//! Delta Lake deletion vectors, as the Delta protocol stores them in files
//! beside `_delta_log` (storage type `u`).
//!
//! - **Bitmap:** the magic number 1681511377 (`i32`, little-endian), then the
//!   deleted row positions as a 64-bit RoaringBitmapArray in its portable
//!   form: the bucket count (`i64` LE), then per bucket its key (`i32` LE)
//!   and a portable 32-bit roaring bitmap. That is roaring's
//!   `RoaringTreemap` serialization.
//! - **File** (`deletion_vector_<uuid>.bin`): the format version byte 1,
//!   then per vector its size (`i32`, big-endian), the bitmap and the
//!   CRC-32 of the bitmap (`u32` BE). A descriptor's `offset` points at the
//!   size, its `sizeInBytes` is the bitmap's length.
//! - **Descriptor:** `pathOrInlineDv` is an optional prefix followed by the
//!   Z85 encoding of the file's UUID (16 bytes, 20 characters).
//!
//! Bytes read back from a store are untrusted: every length and checksum is
//! checked before the bitmap is decoded, and a panic in the decoder is the
//! typed error.

use roaring::{RoaringBitmap, RoaringTreemap};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The first four bytes of every serialized deletion vector.
pub const MAGIC: u32 = 1_681_511_377;
/// The first byte of a deletion-vector file.
pub const FILE_VERSION: u8 = 1;

/// How a Delta log entry names one deletion vector (the `deletionVector`
/// field of an `add` action).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// `u`: a file beside the log, named from a UUID.
    pub storage_type: String,
    /// The optional prefix (a folder under the table), then the UUID in Z85.
    pub path_or_inline_dv: String,
    /// Where the vector's size field starts in its file.
    pub offset: i32,
    /// The serialized bitmap's length (without the size and the checksum).
    pub size_in_bytes: i32,
    /// The number of deleted rows.
    pub cardinality: i64,
}

impl Descriptor {
    /// The file's path relative to the table: `<prefix>/deletion_vector_<uuid>.bin`.
    /// `ManifestCorrupted` (at `at`) for a descriptor pds cannot resolve.
    pub fn relative_path(&self, at: &str) -> Result<String> {
        let bad = |reason: String| Error::ManifestCorrupted {
            path: at.to_string(),
            reason,
        };
        if self.storage_type != "u" {
            return Err(bad(format!(
                "deletion vector storage type {:?} is not \"u\"",
                self.storage_type
            )));
        }
        let text = &self.path_or_inline_dv;
        let Some(split) = text
            .len()
            .checked_sub(20)
            .filter(|&n| text.is_char_boundary(n))
        else {
            return Err(bad(format!("deletion vector path {text:?} is too short")));
        };
        let (prefix, encoded) = text.split_at(split);
        let bytes =
            z85::decode(encoded).map_err(|e| bad(format!("deletion vector path {text:?}: {e}")))?;
        let uuid: [u8; 16] = bytes
            .try_into()
            .map_err(|_| bad(format!("deletion vector path {text:?} is not a UUID")))?;
        Ok(file_path(prefix, &uuid))
    }
}

/// How every deletion-vector file's name starts.
pub const FILE_PREFIX: &str = "deletion_vector_";

/// `<prefix>/deletion_vector_<uuid>.bin` (no folder for an empty prefix).
pub fn file_path(prefix: &str, uuid: &[u8; 16]) -> String {
    let h = hex::encode(uuid);
    let name = format!(
        "{FILE_PREFIX}{}-{}-{}-{}-{}.bin",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    );
    if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    }
}

/// The serialized deletion vector of the row positions `rows` (of one
/// data file, so below 2^32): the magic number and the portable 64-bit
/// form.
pub fn encode_bitmap(rows: &RoaringBitmap) -> Result<Vec<u8>> {
    let mut buckets = RoaringTreemap::new();
    if !rows.is_empty() {
        buckets = RoaringTreemap::from_bitmaps([(0u32, rows.clone())]);
    }
    let mut out = Vec::with_capacity(4 + buckets.serialized_size());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    buckets.serialize_into(&mut out)?;
    Ok(out)
}

/// The row positions of a serialized deletion vector (read from `at`).
/// `PartCorrupted` for a wrong magic number, a malformed bitmap, or a
/// position past 2^32 (pds's data files hold fewer rows).
pub fn decode_bitmap(bytes: &[u8], at: &str) -> Result<RoaringBitmap> {
    let bad = |reason: String| Error::PartCorrupted {
        path: at.to_string(),
        reason: format!("deletion vector: {reason}"),
    };
    let Some((magic, body)) = bytes.split_first_chunk::<4>() else {
        return Err(bad(format!(
            "{} bytes, shorter than its magic number",
            bytes.len()
        )));
    };
    if u32::from_le_bytes(*magic) != MAGIC {
        return Err(bad(format!(
            "magic number {} is not {MAGIC}",
            u32::from_le_bytes(*magic)
        )));
    }
    let mut reader = body;
    let tree = crate::error::contain(
        |msg| bad(format!("the bitmap decoder panicked: {msg}")),
        || {
            RoaringTreemap::deserialize_from(&mut reader)
                .map_err(|e| bad(format!("malformed bitmap: {e}")))
        },
    )?;
    if !reader.is_empty() {
        return Err(bad(format!("{} bytes after the bitmap", reader.len())));
    }
    let mut rows = RoaringBitmap::new();
    for (key, bitmap) in tree.bitmaps() {
        if key != 0 && !bitmap.is_empty() {
            return Err(bad(format!("a row position past 2^32 (bucket {key})")));
        }
        rows |= bitmap;
    }
    Ok(rows)
}

/// A deletion-vector file as it is built: the version byte, then one
/// vector after the other.
#[derive(Debug)]
pub struct FileWriter {
    bytes: Vec<u8>,
}

impl Default for FileWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl FileWriter {
    /// A file holding no vector yet.
    pub fn new() -> Self {
        Self {
            bytes: vec![FILE_VERSION],
        }
    }

    /// Append the vector of `rows`; its descriptor's `(offset, size_in_bytes,
    /// cardinality)`. `InvalidArgument` once the file would pass 2 GiB (the
    /// descriptor's fields are 32-bit).
    pub fn push(&mut self, rows: &RoaringBitmap) -> Result<(i32, i32, i64)> {
        let bitmap = encode_bitmap(rows)?;
        let too_big = || Error::InvalidArgument("a deletion-vector file passes 2 GiB".into());
        let offset = i32::try_from(self.bytes.len()).map_err(|_| too_big())?;
        let size = i32::try_from(bitmap.len()).map_err(|_| too_big())?;
        if i32::try_from(self.bytes.len() + 8 + bitmap.len()).is_err() {
            return Err(too_big());
        }
        self.bytes.extend_from_slice(&size.to_be_bytes());
        self.bytes.extend_from_slice(&bitmap);
        self.bytes
            .extend_from_slice(&crc32fast::hash(&bitmap).to_be_bytes());
        Ok((offset, size, rows.len() as i64))
    }

    /// The file's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// The row positions of the vector at `offset` (of `size` bitmap bytes) in
/// a deletion-vector file's bytes (read from `at`). `PartCorrupted` for a
/// file of another version, a vector that does not fit the file, a size
/// field that differs from `size`, or a checksum that does not match.
pub fn read_vector(file: &[u8], offset: i32, size: i32, at: &str) -> Result<RoaringBitmap> {
    let bad = |reason: String| Error::PartCorrupted {
        path: at.to_string(),
        reason: format!("deletion vector file: {reason}"),
    };
    match file.first() {
        Some(&FILE_VERSION) => {}
        Some(v) => return Err(bad(format!("format version {v} is not {FILE_VERSION}"))),
        None => return Err(bad("the file is empty".into())),
    }
    let (Ok(start), Ok(len)) = (usize::try_from(offset), usize::try_from(size)) else {
        return Err(bad(format!("offset {offset} or size {size} is negative")));
    };
    let end = start
        .checked_add(8)
        .and_then(|n| n.checked_add(len))
        .filter(|&end| start >= 1 && end <= file.len())
        .ok_or_else(|| {
            bad(format!(
                "a vector of {len} bytes at {start} passes its {} bytes",
                file.len()
            ))
        })?;
    let entry = &file[start..end];
    let (head, rest) = entry.split_at(4);
    let (bitmap, crc) = rest.split_at(len);
    let stored = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if stored != size {
        return Err(bad(format!(
            "the vector at {start} records {stored} bytes, its descriptor {size}"
        )));
    }
    let want = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(bitmap) != want {
        return Err(bad(format!(
            "the vector at {start} does not match its CRC-32"
        )));
    }
    decode_bitmap(bitmap, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: &[u32]) -> RoaringBitmap {
        values.iter().copied().collect()
    }

    #[test]
    fn a_bitmap_is_the_magic_then_roarings_portable_64_bit_form() {
        let r = rows(&[0, 3, 4, 70_000, u32::MAX]);
        let bytes = encode_bitmap(&r).unwrap();
        assert_eq!(&bytes[..4], &MAGIC.to_le_bytes());
        // One bucket (key 0), as a little-endian i64 count then an i32 key.
        assert_eq!(&bytes[4..12], &1i64.to_le_bytes());
        assert_eq!(&bytes[12..16], &0i32.to_le_bytes());
        let mut portable = Vec::new();
        r.serialize_into(&mut portable).unwrap();
        assert_eq!(&bytes[16..], &portable[..]);
        assert_eq!(decode_bitmap(&bytes, "x").unwrap(), r);
        let empty = encode_bitmap(&RoaringBitmap::new()).unwrap();
        assert_eq!(&empty[4..], &0i64.to_le_bytes());
        assert!(decode_bitmap(&empty, "x").unwrap().is_empty());
    }

    #[test]
    fn a_file_holds_each_vector_at_its_offset_with_size_and_crc() {
        let (a, b) = (
            rows(&[1, 2, 3]),
            rows(&(0..5000).step_by(3).collect::<Vec<_>>()),
        );
        let mut w = FileWriter::new();
        let (oa, sa, ca) = w.push(&a).unwrap();
        let (ob, sb, cb) = w.push(&b).unwrap();
        let file = w.finish();
        assert_eq!(file[0], 1);
        assert_eq!((oa, ca), (1, 3));
        assert_eq!(ob, oa + 4 + sa + 4);
        assert_eq!(cb, b.len() as i64);
        assert_eq!(file.len() as i32, ob + 4 + sb + 4);
        let at = ob as usize;
        assert_eq!(&file[at..at + 4], &sb.to_be_bytes());
        let bitmap = &file[at + 4..at + 4 + sb as usize];
        assert_eq!(
            &file[at + 4 + sb as usize..],
            &crc32fast::hash(bitmap).to_be_bytes()
        );
        assert_eq!(read_vector(&file, oa, sa, "f").unwrap(), a);
        assert_eq!(read_vector(&file, ob, sb, "f").unwrap(), b);
    }

    #[test]
    fn damaged_files_and_bitmaps_are_part_corrupted_never_a_panic() {
        let mut w = FileWriter::new();
        let (o, s, _) = w.push(&rows(&[7, 8, 9, 100_000])).unwrap();
        let file = w.finish();
        let corrupted = |r: Result<RoaringBitmap>| matches!(r, Err(Error::PartCorrupted { .. }));
        assert!(corrupted(read_vector(&file, o, s + 1, "f")));
        assert!(corrupted(read_vector(&file, o, -1, "f")));
        assert!(corrupted(read_vector(&file, 0, s, "f")));
        assert!(corrupted(read_vector(&file, o + 1, s, "f")));
        assert!(corrupted(read_vector(&file[..file.len() - 1], o, s, "f")));
        assert!(corrupted(read_vector(&[], o, s, "f")));
        let mut v2 = file.clone();
        v2[0] = 2;
        assert!(corrupted(read_vector(&v2, o, s, "f")));
        // Every single-byte change is caught (size, bitmap or checksum).
        for i in 1..file.len() {
            for x in [1u8, 0x80, 0xff] {
                let mut f = file.clone();
                f[i] ^= x;
                assert!(corrupted(read_vector(&f, o, s, "f")), "byte {i} ^ {x:#x}");
            }
        }
        // Bitmaps decoded without the file's checks: any bytes, no panic.
        let good = encode_bitmap(&rows(&[1, 5, 1 << 20])).unwrap();
        let mut rng = crate::test_rng::TestRng::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let seed = rng.next_u64();
            let mut b = good.clone();
            let i = 4 + (seed as usize % (b.len() - 4));
            b[i] = (seed >> 32) as u8;
            b.truncate(4 + (seed >> 40) as usize % (b.len() - 3));
            let _ = decode_bitmap(&b, "x");
        }
        let mut past = RoaringTreemap::new();
        past.insert(1u64 << 33);
        let mut bytes = MAGIC.to_le_bytes().to_vec();
        past.serialize_into(&mut bytes).unwrap();
        assert!(matches!(
            decode_bitmap(&bytes, "x"),
            Err(Error::PartCorrupted { .. })
        ));
        assert!(decode_bitmap(&good[..3], "x").is_err());
        let mut magic = good.clone();
        magic[0] ^= 1;
        assert!(decode_bitmap(&magic, "x").is_err());
    }

    #[test]
    fn descriptors_name_their_file_by_a_z85_uuid() {
        // ZeroMQ's Z85 test vector.
        assert_eq!(
            z85::encode([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]),
            "HelloWorld"
        );
        let uuid: [u8; 16] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(5));
        let text = z85::encode(uuid);
        assert_eq!(text.len(), 20);
        let d = Descriptor {
            storage_type: "u".into(),
            path_or_inline_dv: format!("ab{text}"),
            offset: 1,
            size_in_bytes: 40,
            cardinality: 3,
        };
        let h = hex::encode(uuid);
        let want = format!(
            "ab/deletion_vector_{}-{}-{}-{}-{}.bin",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        );
        assert_eq!(d.relative_path("log").unwrap(), want);
        let plain = Descriptor {
            path_or_inline_dv: text.clone(),
            ..d.clone()
        };
        assert_eq!(
            plain.relative_path("log").unwrap(),
            want.trim_start_matches("ab/")
        );
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["storageType"], "u");
        assert_eq!(json["pathOrInlineDv"], format!("ab{text}"));
        assert_eq!(json["sizeInBytes"], 40);
        let hashes = "#".repeat(20);
        for bad in [
            hashes.as_str(),
            "short",
            "",
            "ab\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}",
        ] {
            let d = Descriptor {
                path_or_inline_dv: bad.into(),
                ..d.clone()
            };
            assert!(
                matches!(d.relative_path("log"), Err(Error::ManifestCorrupted { .. })),
                "{bad:?}"
            );
        }
        let inline = Descriptor {
            storage_type: "i".into(),
            ..d
        };
        assert!(inline.relative_path("log").is_err());
    }
}
