//! The dataset manifest: model, canonical JSON, and the Arrow schema as IPC.
//!
//! The JSON is byte-compatible with remote-store's `DatasetManifest.to_json()`
//! (Python's `json.dumps(sort_keys=True, indent=2)`, ASCII-escaped, `None`
//! fields left out), so either library reads what the other wrote. pds adds
//! two keys that remote-store ignores: `arrow_schema` (the full Arrow schema
//! as a base64 IPC stream, as in ODF's SetDataSchema) and `part_info` (rows,
//! bytes and SHA-256 per part).

use std::io::Write;

use arrow_schema::{Schema, SchemaRef};
use base64::Engine;
use serde::Serialize;

use crate::error::{Error, Result};
pub use crate::spec::dataset::{Manifest, PartInfo};

/// The largest row count a manifest may state (Arrow and Parquet count rows in i64).
pub const MAX_ROWS: u64 = i64::MAX as u64;

/// The smallest tail of a Parquet file: an empty footer's length field and
/// the `PAR1` magic after it, plus at least a few bytes of footer.
const MIN_FOOTER_BYTES: u64 = 12;

impl Manifest {
    /// Canonical JSON: sorted keys, 2-space indent, non-ASCII as `\uXXXX`.
    pub fn to_json(&self) -> Result<String> {
        // Going through Value sorts every object's keys (serde_json's map is a BTreeMap).
        let value = serde_json::to_value(self)
            .map_err(|e| Error::InvalidArgument(format!("manifest is not serialisable: {e}")))?;
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter::new());
        value
            .serialize(&mut ser)
            .map_err(|e| Error::InvalidArgument(format!("manifest is not serialisable: {e}")))?;
        String::from_utf8(out).map_err(|e| Error::Task(e.to_string()))
    }

    /// Parse and validate manifest JSON; `path` names it in errors.
    pub fn from_json(text: &[u8], path: &str) -> Result<Self> {
        let corrupted = |reason: String| Error::ManifestCorrupted {
            path: path.to_string(),
            reason,
        };
        let m: Manifest = serde_json::from_slice(text).map_err(|e| corrupted(e.to_string()))?;
        if m.parts.is_empty() {
            return Err(corrupted(
                "the manifest lists no parts (an empty dataset has one empty part)".into(),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(m.parts.len());
        for part in &m.parts {
            if part.is_empty() || part.contains(['/', '\\', '\0']) || part == "." || part == ".." {
                return Err(corrupted(format!(
                    "part name {part:?} is not a plain file name inside the dataset"
                )));
            }
            if !seen.insert(part.as_str()) {
                return Err(corrupted(format!("part {part:?} is listed twice")));
            }
        }
        if m.row_count > MAX_ROWS {
            return Err(corrupted(format!(
                "row_count {} is beyond any dataset (at most 2^63 - 1)",
                m.row_count
            )));
        }
        if let Some(info) = &m.part_info {
            let names: Vec<&str> = info.iter().map(|p| p.name.as_str()).collect();
            if names != m.parts.iter().map(String::as_str).collect::<Vec<_>>() {
                return Err(corrupted("part_info does not list the same parts".into()));
            }
            if let Some(p) = info.iter().find(|p| {
                p.footer_bytes
                    .is_some_and(|f| f < MIN_FOOTER_BYTES || f > p.size_bytes)
            }) {
                return Err(corrupted(format!(
                    "part_info of {:?} states a footer of {} bytes in a part of {}",
                    p.name,
                    p.footer_bytes.unwrap_or_default(),
                    p.size_bytes
                )));
            }
            let sum = info
                .iter()
                .try_fold(0u64, |acc, p| acc.checked_add(p.row_count));
            if sum != Some(m.row_count) {
                return Err(corrupted(format!(
                    "row_count is {}, but part_info's row counts add up to {}",
                    m.row_count,
                    sum.map_or_else(|| "more than 2^64".to_string(), |s| s.to_string())
                )));
            }
        }
        Ok(m)
    }

    /// Fail with `ManifestCorrupted` unless the parts' footers hold
    /// `row_count` rows in all.
    pub fn check_rows(&self, footer_rows: u64, path: &str) -> Result<()> {
        if footer_rows != self.row_count {
            return Err(Error::ManifestCorrupted {
                path: path.to_string(),
                reason: format!(
                    "row_count is {}, but the parts hold {footer_rows} rows",
                    self.row_count
                ),
            });
        }
        Ok(())
    }

    /// The Arrow schema recorded in the manifest, if any.
    pub fn schema(&self, path: &str) -> Result<Option<SchemaRef>> {
        self.arrow_schema
            .as_deref()
            .map(|s| {
                schema_from_ipc_base64(s).map_err(|e| Error::ManifestCorrupted {
                    path: path.to_string(),
                    reason: format!("arrow_schema is unreadable: {e}"),
                })
            })
            .transpose()
    }
}

/// Serialise a schema as an Arrow IPC stream holding only the schema, base64.
///
/// pyarrow reads it with `pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s)))`.
pub fn schema_to_ipc_base64(schema: &Schema) -> Result<String> {
    let mut buf = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, schema)?;
        w.finish()?;
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(buf))
}

/// The inverse of [`schema_to_ipc_base64`].
///
/// The text comes from a store, so it is untrusted: the flatbuffer is
/// verified by the IPC reader, a panic while converting it is contained, and
/// the schema must be usable (an empty batch of it can be built) before it
/// is returned. Every failure is `InvalidArgument` with the reason.
pub fn schema_from_ipc_base64(text: &str) -> Result<SchemaRef> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| Error::InvalidArgument(format!("bad base64: {e}")))?;
    check_ipc_length(&raw)?;
    crate::error::contain(
        |msg| Error::InvalidArgument(format!("invalid Arrow IPC schema ({msg})")),
        || {
            let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(raw), None)
                .map_err(|e| Error::InvalidArgument(format!("invalid Arrow IPC schema: {e}")))?;
            let schema = reader.schema();
            arrow_array::RecordBatch::new_empty(schema.clone());
            crate::parquet::storage_types::check_readable(&schema)?;
            Ok(schema)
        },
    )
}

/// Refuse an IPC message whose length prefix claims more bytes than there
/// are, before the reader allocates a buffer of that size.
fn check_ipc_length(raw: &[u8]) -> Result<()> {
    let word = |at: usize| -> Option<u32> {
        raw.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (prefix, len) = match word(0) {
        Some(0xffff_ffff) => (8, word(4)),
        other => (4, other),
    };
    let len = len.ok_or_else(|| Error::InvalidArgument("Arrow IPC schema is truncated".into()))?;
    if len as usize > raw.len().saturating_sub(prefix) {
        return Err(Error::InvalidArgument(format!(
            "Arrow IPC schema claims {len} bytes of metadata but holds {}",
            raw.len().saturating_sub(prefix)
        )));
    }
    Ok(())
}

/// The current UTC time as Python's `datetime.now(UTC).isoformat()` writes it.
pub fn now_iso8601() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

/// serde_json's pretty printer with Python's `ensure_ascii` escaping.
struct PythonFormatter {
    inner: serde_json::ser::PrettyFormatter<'static>,
}

impl PythonFormatter {
    fn new() -> Self {
        Self {
            inner: serde_json::ser::PrettyFormatter::with_indent(b"  "),
        }
    }
}

impl serde_json::ser::Formatter for PythonFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, ch) in fragment.char_indices() {
            if (ch as u32) < 0x7f {
                continue;
            }
            w.write_all(&fragment.as_bytes()[start..i])?;
            let mut units = [0u16; 2];
            for u in ch.encode_utf16(&mut units) {
                write!(w, "\\u{:04x}", u)?;
            }
            start = i + ch.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_array(w)
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_array(w)
    }
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.inner.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_array_value(w)
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_object(w)
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_object(w)
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.inner.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{DataType, Field, TimeUnit};
    use std::collections::BTreeMap;

    fn manifest() -> Manifest {
        Manifest {
            dataset_key: "silver/orders".into(),
            parts: vec!["data.parquet".into()],
            row_count: 3,
            schema_hash: "0123456789abcdef".into(),
            compression: "zstd".into(),
            created_at_utc: "2026-01-01T00:00:00.000001+00:00".into(),
            run_id: None,
            metadata: Some(BTreeMap::from([
                ("b".into(), "é😀".into()),
                ("a".into(), "x".into()),
            ])),
            arrow_schema: None,
            part_info: None,
        }
    }

    #[test]
    fn json_matches_python_json_dumps() {
        // json.dumps(d, sort_keys=True, indent=2) for the same dict, from CPython.
        let expected = "{\n  \"compression\": \"zstd\",\n  \"created_at_utc\": \"2026-01-01T00:00:00.000001+00:00\",\n  \"dataset_key\": \"silver/orders\",\n  \"metadata\": {\n    \"a\": \"x\",\n    \"b\": \"\\u00e9\\ud83d\\ude00\"\n  },\n  \"parts\": [\n    \"data.parquet\"\n  ],\n  \"row_count\": 3,\n  \"schema_hash\": \"0123456789abcdef\"\n}";
        assert_eq!(manifest().to_json().unwrap(), expected);
    }

    #[test]
    fn round_trips_and_validates() {
        let m = manifest();
        let back = Manifest::from_json(m.to_json().unwrap().as_bytes(), "m").unwrap();
        assert_eq!(back, m);
        for bad in [
            "not json",
            "[]",
            "{\"dataset_key\": \"x\"}",
            "{\"dataset_key\":\"x\",\"parts\":[\"../../etc/passwd\"],\"row_count\":1,\"schema_hash\":\"h\",\"compression\":\"zstd\",\"created_at_utc\":\"t\"}",
            "{\"dataset_key\":\"x\",\"parts\":[],\"row_count\":true,\"schema_hash\":\"h\",\"compression\":\"zstd\",\"created_at_utc\":\"t\"}",
        ] {
            assert!(
                matches!(Manifest::from_json(bad.as_bytes(), "m"), Err(Error::ManifestCorrupted { .. })),
                "{bad}"
            );
        }
    }

    /// Every single-byte change of a stored IPC schema parses to a usable
    /// schema or fails with `InvalidArgument`: never a panic.
    #[test]
    fn damaged_ipc_schemas_never_panic() {
        let s = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Decimal128(10, 2), true),
            Field::new(
                "c",
                DataType::List(std::sync::Arc::new(Field::new(
                    "item",
                    DataType::Utf8,
                    true,
                ))),
                true,
            ),
        ]);
        let raw = base64::engine::general_purpose::STANDARD
            .decode(schema_to_ipc_base64(&s).unwrap())
            .unwrap();
        for at in 0..raw.len() {
            for value in [0u8, 1, 0x7f, 0xff, raw[at] ^ 0x01] {
                let mut damaged = raw.clone();
                damaged[at] = value;
                let text = base64::engine::general_purpose::STANDARD.encode(&damaged);
                match schema_from_ipc_base64(&text) {
                    Ok(_) | Err(Error::InvalidArgument(_)) => {}
                    Err(other) => panic!("byte {at} = {value}: {other}"),
                }
            }
        }
    }

    #[test]
    fn schema_survives_ipc() {
        let s = Schema::new(vec![
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new(
                "d",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                false,
            ),
        ]);
        let text = schema_to_ipc_base64(&s).unwrap();
        assert_eq!(*schema_from_ipc_base64(&text).unwrap(), s);
    }
}
