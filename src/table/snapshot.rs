//! One version of a table: the immutable manifest `manifest/vNNNNNNNN.json`.
//!
//! A manifest names everything a reader of that version needs: the schema
//! (a readable column list, and the full Arrow schema as a base64 IPC
//! flatbuffer, as dataset manifests and ODF's SetDataSchema store it), the
//! data files with their statistics and checksums, and the tombstones. It is
//! written once, create-only, and never changed, so it can be cached.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The `format` every table manifest carries.
pub const FORMAT: &str = "pds-table/1";

pub use crate::parquet::stats::ColumnStats;

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

/// A table manifest: one committed version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableManifest {
    pub format: String,
    pub version: u64,
    /// The version this one was built on (`None` for the table's creation).
    pub previous: Option<u64>,
    pub created_at: String,
    pub operation: String,
    #[serde(default)]
    pub operation_parameters: BTreeMap<String, serde_json::Value>,
    pub schema: TableSchema,
    #[serde(default)]
    pub data_files: Vec<DataFile>,
    /// Tombstone objects that apply to this version.
    #[serde(default)]
    pub tombstones: Vec<TombstoneRef>,
    /// Schemas of files written before a schema change, by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub file_schemas: BTreeMap<String, TableSchema>,
    /// Settings fixed at creation and carried by every version.
    #[serde(default)]
    pub properties: TableProperties,
    /// The id of the commit that wrote this version, unique per operation:
    /// a writer that lost a PUT's reply reads the version back and knows it
    /// by this id (absent in manifests of older pds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_id: Option<String>,
}

/// A tombstone object, and the data files it deletes rows of (so that a
/// scan reads only the tombstones of the files it reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TombstoneRef {
    /// Relative to the table key (`tombstone/...del`).
    pub path: String,
    pub files: Vec<String>,
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

impl TableSchema {
    /// The readable column list and the IPC schema of `schema`.
    pub fn of(schema: &arrow_schema::Schema) -> Result<Self> {
        Ok(Self {
            columns: schema
                .fields()
                .iter()
                .map(|f| Column {
                    name: f.name().clone(),
                    data_type: f.data_type().to_string(),
                    nullable: f.is_nullable(),
                })
                .collect(),
            arrow_schema: crate::dataset::manifest::schema_to_ipc_base64(schema)?,
        })
    }
}

impl TableManifest {
    /// Canonical JSON (sorted keys, 2-space indent).
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let value = serde_json::to_value(self).map_err(|e| {
            Error::InvalidArgument(format!("table manifest is not serialisable: {e}"))
        })?;
        serde_json::to_vec_pretty(&value)
            .map_err(|e| Error::InvalidArgument(format!("table manifest is not serialisable: {e}")))
    }

    /// Parse and validate a manifest read from `path`; `version` is the one
    /// its name promises. Every failure is `ManifestCorrupted`.
    pub fn from_json(raw: &[u8], path: &str, version: u64) -> Result<Self> {
        let corrupted = |reason: String| Error::ManifestCorrupted {
            path: path.to_string(),
            reason,
        };
        let m: TableManifest = serde_json::from_slice(raw).map_err(|e| corrupted(e.to_string()))?;
        if m.format != FORMAT {
            return Err(corrupted(format!(
                "format is {:?}, this pds reads {FORMAT:?}",
                m.format
            )));
        }
        if m.version != version {
            return Err(corrupted(format!(
                "it says version {} but is stored as version {version}",
                m.version
            )));
        }
        match (m.previous, m.version) {
            (None, 0) => {}
            (Some(p), v) if p.checked_add(1) == Some(v) => {}
            (p, v) => {
                return Err(corrupted(format!(
                    "version {v} cannot follow {p:?}: versions are contiguous"
                )))
            }
        }
        for f in &m.data_files {
            let segments =
                crate::store::keys::segments(&f.path).map_err(|e| corrupted(e.to_string()))?;
            if segments.first().map(String::as_str) != Some("data") {
                return Err(corrupted(format!(
                    "data file {:?} is not under data/",
                    f.path
                )));
            }
        }
        for f in &m.data_files {
            if let Some(id) = &f.schema {
                if !m.file_schemas.contains_key(id) {
                    return Err(corrupted(format!(
                        "{} names schema {id:?}, which the manifest lacks",
                        f.path
                    )));
                }
            }
        }
        for t in &m.tombstones {
            let segments =
                crate::store::keys::segments(&t.path).map_err(|e| corrupted(e.to_string()))?;
            if segments.first().map(String::as_str) != Some("tombstone") {
                return Err(corrupted(format!(
                    "tombstone {:?} is not under tombstone/",
                    t.path
                )));
            }
        }
        Ok(m)
    }

    /// The full Arrow schema of this version.
    pub fn arrow_schema(&self, path: &str) -> Result<arrow_schema::SchemaRef> {
        crate::dataset::manifest::schema_from_ipc_base64(&self.schema.arrow_schema).map_err(|e| {
            Error::ManifestCorrupted {
                path: path.to_string(),
                reason: format!("its arrow_schema cannot be read: {e}"),
            }
        })
    }

    /// Make `schema` this version's schema: files that have none recorded
    /// keep the old one, under its id in `file_schemas`.
    pub fn record_schema_change(&mut self, schema: TableSchema) {
        let old = std::mem::replace(&mut self.schema, schema);
        let id = crate::parquet::encode::sha256_hex(old.arrow_schema.as_bytes())[..16].to_string();
        let mut used = false;
        for f in &mut self.data_files {
            if f.schema.is_none() {
                f.schema = Some(id.clone());
                used = true;
            }
        }
        if used {
            self.file_schemas.insert(id, old);
        }
    }

    /// The schema `file` was written with.
    pub fn file_schema(&self, file: &DataFile, path: &str) -> Result<arrow_schema::SchemaRef> {
        self.schema_named(file.schema.as_deref(), path)
    }

    /// The schema recorded under `id` in `file_schemas` (the version's own
    /// for `None`).
    pub fn schema_named(&self, id: Option<&str>, path: &str) -> Result<arrow_schema::SchemaRef> {
        let text = match id {
            None => &self.schema.arrow_schema,
            Some(id) => {
                &self
                    .file_schemas
                    .get(id)
                    .ok_or_else(|| Error::ManifestCorrupted {
                        path: path.to_string(),
                        reason: format!("a data file names schema {id:?}, which it lacks"),
                    })?
                    .arrow_schema
            }
        };
        crate::dataset::manifest::schema_from_ipc_base64(text).map_err(|e| {
            Error::ManifestCorrupted {
                path: path.to_string(),
                reason: format!("a schema cannot be read: {e}"),
            }
        })
    }

    /// Rows in the data files (before tombstones).
    pub fn total_rows(&self) -> u64 {
        self.data_files.iter().map(|f| f.total_rows).sum()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid manifest of `version` with one data file (shared by the tests).
    pub(crate) fn manifest(version: u64) -> TableManifest {
        TableManifest {
            format: FORMAT.into(),
            version,
            previous: version.checked_sub(1),
            created_at: "2026-11-23T00:00:00Z".into(),
            operation: "append".into(),
            operation_parameters: BTreeMap::new(),
            schema: TableSchema {
                columns: vec![Column {
                    name: "id".into(),
                    data_type: "int64".into(),
                    nullable: false,
                }],
                arrow_schema: String::new(),
            },
            data_files: vec![DataFile {
                path: "data/a.parquet".into(),
                size_bytes: 10,
                row_group_count: 1,
                total_rows: 3,
                columns: BTreeMap::new(),
                sha256: "00".into(),
                schema: None,
            }],
            tombstones: vec![],
            file_schemas: BTreeMap::new(),
            properties: TableProperties::default(),
            commit_id: None,
        }
    }

    #[test]
    fn round_trips_and_refuses_what_cannot_be_a_version() {
        let m = manifest(4);
        let json = m.to_json().unwrap();
        assert_eq!(TableManifest::from_json(&json, "p", 4).unwrap(), m);
        assert!(matches!(
            TableManifest::from_json(&json, "p", 5),
            Err(Error::ManifestCorrupted { .. })
        ));
        let mut gap = manifest(4);
        gap.previous = Some(2);
        let mut escape = manifest(4);
        escape.data_files[0].path = "../x.parquet".into();
        let mut outside = manifest(4);
        outside.data_files[0].path = "manifest/v00000001.json".into();
        for bad in [gap, escape, outside] {
            let json = bad.to_json().unwrap();
            assert!(matches!(
                TableManifest::from_json(&json, "p", 4),
                Err(Error::ManifestCorrupted { .. })
            ));
        }
    }

    /// Damaged manifests (flipped bytes, truncations) parse or fail as
    /// `ManifestCorrupted`, never panic; a schema that parses is usable.
    #[test]
    fn damaged_manifests_never_panic() {
        let mut m = manifest(3);
        m.schema = TableSchema::of(&arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "id",
            arrow_schema::DataType::Int64,
            false,
        )]))
        .unwrap();
        let good = m.to_json().unwrap();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let mut damaged = good.clone();
            if next() % 2 == 0 {
                let at = (next() % damaged.len() as u64) as usize;
                damaged[at] = (next() % 256) as u8;
            } else {
                damaged.truncate((next() % damaged.len() as u64) as usize);
            }
            match TableManifest::from_json(&damaged, "p", 3) {
                Ok(parsed) => {
                    let _ = parsed.arrow_schema("p");
                    for f in &parsed.data_files {
                        let _ = parsed.file_schema(f, "p");
                    }
                }
                Err(Error::ManifestCorrupted { .. }) => {}
                Err(other) => panic!("unexpected error {other}"),
            }
        }
    }
}
