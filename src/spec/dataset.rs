//! A dataset's manifest (`manifest.json`, RFC-0008): the parts it lists,
//! with their row counts, sizes and checksums. See `docs/concepts/format-dataset.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Per-part facts pds records (absent in manifests written by remote-store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInfo {
    pub name: String,
    pub row_count: u64,
    pub size_bytes: u64,
    pub sha256: String,
    /// The bytes after the part's last row group (page indexes, footer and
    /// trailer), so that a reader fetches them with one GET of that size.
    /// Absent in manifests written before pds 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer_bytes: Option<u64>,
}

/// A dataset manifest. The first eight fields are RFC-0008's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub dataset_key: String,
    pub parts: Vec<String>,
    pub row_count: u64,
    pub schema_hash: String,
    pub compression: String,
    pub created_at_utc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrow_schema: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_info: Option<Vec<PartInfo>>,
}
