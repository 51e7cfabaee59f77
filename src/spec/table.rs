//! A table's on-disk records: the pointer, the manifest's segments, data
//! files, tombstone entries and references, properties. The manifest
//! itself ([`crate::table::snapshot::TableManifest`]) and a tombstone object
//! ([`crate::table::tombstone::Tombstone`]) carry in-memory state beside
//! their fields (loaded segments, decoded bitmaps), so they live with
//! their code.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::parquet::stats::ColumnStats;

/// The content of `_latest_manifest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pointer {
    pub version: u64,
    pub manifest: String,
    /// The id of the table it points into (see [`crate::table::identity`]); absent in
    /// pointers of tables created by earlier pds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_id: Option<String>,
}

/// A data file of the table, immutable and uniquely named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataFile {
    /// Relative to the table key (`data/...parquet`).
    pub path: String,
    pub size_bytes: u64,
    pub row_group_count: u64,
    pub total_rows: u64,
    /// Per-column statistics, as values of the file's own schema (see
    /// `schema`): a reader of a later version converts them, exactly.
    #[serde(default)]
    pub columns: BTreeMap<String, ColumnStats>,
    pub sha256: String,
    /// The schema the file was written with, as a key of the manifest's
    /// `file_schemas`; absent when it is the version's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The bytes after the file's last row group (page indexes, footer,
    /// trailer): its footer is then one GET of that size. Absent in
    /// manifests of earlier pds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer_bytes: Option<u64>,
}

/// One column of the readable schema list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    #[serde(rename = "type")]
    pub data_type: String,
    pub nullable: bool,
}

/// The schema a version carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableSchema {
    pub columns: Vec<Column>,
    /// The full Arrow schema, an IPC flatbuffer in base64.
    pub arrow_schema: String,
}

/// A format published beside a table's versions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedFormat {
    /// The first version published in it.
    pub since: u64,
}

/// A tombstone object, and the data files it deletes rows of (so that a
/// scan reads only the tombstones of the files it reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TombstoneRef {
    /// Relative to the table key (`tombstone/...del`).
    pub path: String,
    pub files: Vec<String>,
    /// The SHA-256 of the tombstone object (checked when it is read).
    pub sha256: String,
}

/// A table's settings, fixed when it is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TableProperties {
    /// The primary-key column: deletes by a range of it write key ranges
    /// and rewrite no data file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_key: Option<String>,
    #[serde(default = "default_compression")]
    pub compression: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_group_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_file_size: Option<u64>,
}

fn default_compression() -> String {
    "zstd".into()
}

/// A segment as the root manifest names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentRef {
    /// Relative to the table key (`segment/<token>.json`).
    pub path: String,
    /// The SHA-256 of the segment object (checked when it is read).
    pub sha256: String,
    pub file_count: u64,
    pub total_rows: u64,
    pub size_bytes: u64,
    pub tombstone_count: u64,
    /// The schema id (a key of the root's `file_schemas`) every file of the
    /// segment was written with; absent when that is the version's own. A
    /// segment whose files were written with different schemas has no
    /// `columns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Per column: the least min, the greatest max and the summed null
    /// counts of its files (unknown where any file's is unknown), as values
    /// of `schema`'s types.
    #[serde(default)]
    pub columns: BTreeMap<String, ColumnStats>,
    /// The schema id (a key of the root's `file_schemas`) of the segment's
    /// files that name none, recorded by a schema change so that the
    /// segment stays as it is; absent: the version's own. Only in
    /// `pds-table/3` (see [`crate::table::snapshot`]). Readers resolve it into
    /// the files as the segment is read: in memory every file names its
    /// schema, or none for the version's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_schema: Option<String>,
}

/// The body of a segment object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub format: String,
    pub files: Vec<DataFile>,
    /// The tombstones that delete rows of `files`, each naming only files
    /// of this segment.
    #[serde(default)]
    pub tombstones: Vec<TombstoneRef>,
}

/// One entry of a tombstone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    RowGroup {
        file: String,
        row_group: u64,
        /// Rows in the row group (all deleted).
        rows: u64,
    },
    PkRange {
        file: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pk_min: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pk_max: Option<Value>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pk_min_exclusive: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pk_max_exclusive: bool,
        /// The Arrow type the bounds are values of, when it is not the
        /// file's own key type (a delete after the key column widened:
        /// `"Date64"` bounds for a `date32` file). Absent: the file's type.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pk_type: Option<String>,
    },
    Rows {
        file: String,
        /// Portable roaring serialization, base64.
        bitmap: String,
        /// Positions in the bitmap.
        rows: u64,
    },
}
