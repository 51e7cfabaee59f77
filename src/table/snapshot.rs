//! One version of a table: the immutable manifest `manifest/vNNNNNNNN.json`.
//!
//! A manifest names everything a reader of that version needs: the schema
//! (a readable column list, and the full Arrow schema as a base64 IPC
//! flatbuffer, as dataset manifests and ODF's SetDataSchema store it), the
//! data files with their statistics and checksums, and the tombstones. It is
//! written once, create-only, and never changed, so it can be cached.
//!
//! Since `pds-table/2` the manifest object is a root whose file list lives
//! in segments ([`super::segment`]); a [`TableManifest`] in memory holds the
//! root and, as its [`Layout`]'s view says, all of the file list, part of
//! it, or (for an append) the files it adds.
//!
//! # Format versions
//!
//! Every version pds ever wrote is read (see [`Written`]):
//!
//! - `pds-table/1`, unsealed (pds before 2026-11-23 18:38 UTC): the files
//!   inline in `data_files`, the tombstones in `tombstones` without a
//!   SHA-256 (`{"path", "files"}`; in the very first tables a bare list of
//!   tombstone paths), no `checksum`. Its bytes must be exactly the pretty
//!   JSON (sorted keys, 2-space indent) its writer produced, and it must
//!   hold no field only later writers wrote (`segments`, `table_id`, a
//!   tombstone's `sha256`, a file's `footer_bytes`): else it is taken for a
//!   damaged later manifest, `ManifestCorrupted`. The tombstones' objects
//!   are read unchecked (there is no SHA-256 to check them against).
//! - `pds-table/1`, sealed (until 2026-11-25 02:31 UTC): the same with a
//!   `checksum` and each tombstone's `sha256`.
//! - `pds-table/2` ([`SEGMENTED_FORMAT`]), sealed: a root naming segments;
//!   `table_id` and `footer_bytes` may be absent (older writers). A file
//!   that names no schema was written with the version's, so a schema
//!   change writes the old schema's id into every file entry: every
//!   segment. Such a table stays writable in it (its writes keep that
//!   format, and that rewrite), and [`super::upgrade`] takes it to
//!   [`FORMAT`] with a root-only commit.
//! - `pds-table/3` ([`FORMAT`]): as `pds-table/2`, and a segment reference
//!   may carry `files_schema`, the schema of its files that name none. A
//!   schema change sets it on the references lacking it, and rewrites no
//!   segment. (A reader of `pds-table/2` would ignore the field and read
//!   those files in the wrong schema: hence the new format.)
//!
//! A table whose latest version is `pds-table/1` is read-only: every
//! commit on it is `UpgradeRequired` until [`super::upgrade`] commits a
//! version in [`FORMAT`] (older pds cannot read that one, so the upgrade
//! is never implicit).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The `format` of the table manifests this pds writes: a root that lists
/// its files through segments (see [`super::segment`]), each of which may
/// record the schema of its files (`files_schema`).
pub const FORMAT: &str = "pds-table/3";

/// The format of pds before `files_schema`: written on for tables in it
/// (a schema change then rewrites every segment) until upgraded.
pub const SEGMENTED_FORMAT: &str = "pds-table/2";

/// The format of earlier pds, whose manifests list every file inline. They
/// are read as they are; a table whose latest version is one is read-only
/// until upgraded (see [`super::upgrade`]).
pub const LEGACY_FORMAT: &str = "pds-table/1";

/// Which format a manifest was read in (in memory only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Written {
    /// [`FORMAT`]: writable.
    #[default]
    Current,
    /// [`SEGMENTED_FORMAT`]: writable, and written in that format (a
    /// schema change rewrites every segment) until upgraded.
    Segmented,
    /// [`LEGACY_FORMAT`], sealed: read-only until upgraded.
    Flat,
    /// [`LEGACY_FORMAT`] from before the sealed manifests: read-only until
    /// upgraded; its tombstones carry no SHA-256 (an empty `sha256`).
    Unsealed,
}

impl Written {
    /// What an error says about a table whose latest version is in this
    /// format (`None`: the current one).
    pub fn earlier(self) -> Option<&'static str> {
        match self {
            Written::Current | Written::Segmented => None,
            Written::Flat => Some("pds-table/1 (sealed, files inline)"),
            Written::Unsealed => Some("pds-table/1 (from before sealed manifests)"),
        }
    }

    /// The format an upgrade takes the table from (`None`: it is current):
    /// [`Self::earlier`]'s, and [`SEGMENTED_FORMAT`], which is writable.
    pub fn upgradable(self) -> Option<&'static str> {
        match self {
            Written::Segmented => Some(SEGMENTED_FORMAT),
            other => other.earlier(),
        }
    }

    /// The format a version built on this one is written in.
    pub fn format(self) -> &'static str {
        match self {
            Written::Segmented => SEGMENTED_FORMAT,
            _ => FORMAT,
        }
    }

    /// Whether a schema change can leave every segment as it is (its
    /// references record the old schema): else it records the old schema
    /// on every file, and needs the whole file list.
    pub fn schema_per_segment(self) -> bool {
        self == Written::Current
    }
}

pub use crate::parquet::stats::ColumnStats;
pub use crate::spec::table::{
    Column, DataFile, PublishedFormat, Segment, SegmentRef, TableProperties, TableSchema,
    TombstoneRef,
};

impl DataFile {
    /// The file as a part to read, under the table at `table`: its footer
    /// is one GET, and is cached by the store handle under its SHA-256.
    pub fn part_ref(&self, table: &str) -> crate::parquet::part_ref::PartRef {
        crate::parquet::part_ref::PartRef {
            key: format!("{}/{}", table.trim_end_matches('/'), self.path),
            size: self.size_bytes,
            footer_hint: self.footer_bytes,
            sha256: Some(self.sha256.clone()),
        }
    }
}

/// How much of a version's file list a [`TableManifest`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum View {
    /// `data_files` and `tombstones` are the whole version's.
    #[default]
    Full,
    /// The root only: `data_files` and `tombstones` are empty.
    Root,
    /// Only the segments a scan's filter can match are loaded.
    Pruned,
    /// Built on a root for an append: `data_files` are the files it adds.
    Appended,
    /// Only the segments that can hold a rewrite's rows are loaded (and a
    /// small last one, for the files it adds), for a commit on them:
    /// segments not loaded are kept as they are when it is laid out.
    Partial,
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
    /// The data files of this version, as far as [`TableManifest::layout`]'s
    /// view says: all of them in a [`View::Full`] manifest. Written inline
    /// only by [`LEGACY_FORMAT`]; [`FORMAT`] lists them in `segments`.
    #[serde(default, skip_serializing)]
    pub data_files: Vec<DataFile>,
    /// Tombstone objects that apply to this version (as `data_files`).
    #[serde(default, skip_serializing)]
    pub tombstones: Vec<TombstoneRef>,
    /// The segments holding the file list (see [`super::segment`]).
    #[serde(default)]
    pub segments: Vec<SegmentRef>,
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
    /// The id of the table this version belongs to, drawn at its creation
    /// and carried by every version (see [`super::identity`]); absent in
    /// tables created by older pds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_id: Option<String>,
    /// The formats published beside the table's own (`delta`: a Delta log,
    /// see [`super::delta`]), each with the first version it holds; carried
    /// by every later version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub formats: BTreeMap<String, PublishedFormat>,
    /// What of the file list is in memory (not part of the manifest).
    #[serde(skip)]
    pub layout: Layout,
}

/// The in-memory side of a manifest's segments: which are loaded, and
/// whether `segments` was laid out from the file list (by the commit loop,
/// before the manifest is written).
#[derive(Debug, Clone, Default)]
pub struct Layout {
    pub view: View,
    /// The bodies of `segments` that are loaded, in the same order.
    pub bodies: Vec<Option<std::sync::Arc<Segment>>>,
    /// `segments` describes `data_files` and `tombstones` exactly.
    pub laid_out: bool,
    /// Merge small segments when laid out (compaction).
    pub repack: bool,
    /// The format the manifest was read in.
    pub written: Written,
}

/// Two manifests are equal by what they hold, whatever is loaded.
impl PartialEq for Layout {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Whether `s` is a SHA-256 in lowercase hex.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Check a manifest time: RFC 3339 as pds writes it (`now_iso8601`), in
/// years 1 to 9999 (what every reader, Python's `datetime` too, can hold).
pub fn check_time(text: &str) -> std::result::Result<chrono::DateTime<chrono::Utc>, String> {
    use chrono::{Datelike, Timelike};
    let t = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("created_at {text:?} is not a time: {e}"))?;
    if !(1..=9999).contains(&t.year()) || t.nanosecond() >= 1_000_000_000 {
        return Err(format!("created_at {text:?} is out of range"));
    }
    Ok(t.with_timezone(&chrono::Utc))
}

impl TableSchema {
    /// The Arrow schema, read and checked against the readable column list.
    pub fn arrow(&self) -> Result<arrow_schema::SchemaRef> {
        let schema = crate::dataset::manifest::schema_from_ipc_base64(&self.arrow_schema)?;
        let listed: Vec<(&str, String, bool)> = self
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.data_type.clone(), c.nullable))
            .collect();
        let actual: Vec<(&str, String, bool)> = schema
            .fields()
            .iter()
            .map(|f| {
                (
                    f.name().as_str(),
                    f.data_type().to_string(),
                    f.is_nullable(),
                )
            })
            .collect();
        if listed != actual {
            return Err(Error::InvalidArgument(
                "arrow_schema and the column list differ".into(),
            ));
        }
        Ok(schema)
    }

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
    /// Sealed JSON (sorted keys, 2-space indent, with the checksum of its
    /// content: see [`super::sealed`]).
    ///
    /// A manifest laid out in segments is written as [`FORMAT`]; a whole
    /// version that was not (built by hand) as [`LEGACY_FORMAT`], with its
    /// files inline. Anything else would lose files, and is refused.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut value = self.root_value()?;
        if !self.layout.laid_out {
            if self.layout.view != View::Full || !self.segments.is_empty() {
                return Err(Error::Task(
                    "a table manifest holding part of its files was about to be written \
                     (a bug; nothing was written)"
                        .into(),
                ));
            }
            self.insert_files(&mut value)?;
            if let Some(o) = value.as_object_mut() {
                o.insert("format".into(), LEGACY_FORMAT.into());
                o.remove("segments");
            }
        }
        super::sealed::seal(value)
    }

    /// The root as JSON (no file list), in [`FORMAT`] (in
    /// [`SEGMENTED_FORMAT`] for a table still in it).
    pub fn root_value(&self) -> Result<serde_json::Value> {
        let written = self.layout.written;
        if !written.schema_per_segment() && self.segments.iter().any(|s| s.files_schema.is_some()) {
            return Err(Error::Task(format!(
                "a {} manifest recording a segment's schema was about to be written (a bug; \
                 nothing was written)",
                written.format()
            )));
        }
        let mut value = serde_json::to_value(self).map_err(|e| {
            Error::InvalidArgument(format!("table manifest is not serialisable: {e}"))
        })?;
        if let Some(o) = value.as_object_mut() {
            o.insert("format".into(), written.format().into());
        }
        Ok(value)
    }

    /// The manifest as JSON for a reader of the whole version: the root
    /// plus `data_files` and `tombstones` (a [`View::Full`] manifest).
    pub fn expanded_value(&self) -> Result<serde_json::Value> {
        if self.layout.view != View::Full {
            return Err(Error::Task(
                "a manifest without its whole file list was asked for it (a bug)".into(),
            ));
        }
        let mut value = self.root_value()?;
        self.insert_files(&mut value)?;
        Ok(value)
    }

    /// Add `data_files` and `tombstones` to the JSON object `value`.
    fn insert_files(&self, value: &mut serde_json::Value) -> Result<()> {
        let as_json = |v: std::result::Result<serde_json::Value, serde_json::Error>| {
            v.map_err(|e| {
                Error::InvalidArgument(format!("table manifest is not serialisable: {e}"))
            })
        };
        if let Some(o) = value.as_object_mut() {
            o.insert(
                "data_files".into(),
                as_json(serde_json::to_value(&self.data_files))?,
            );
            o.insert(
                "tombstones".into(),
                as_json(serde_json::to_value(&self.tombstones))?,
            );
        }
        Ok(())
    }

    /// Parse and validate a manifest read from `path`; `version` is the one
    /// its name promises. Every failure is `ManifestCorrupted`: a checksum
    /// that does not match, a manifest of another kind, and any content
    /// that cannot be a version (see [`TableManifest::check`]).
    pub fn from_json(raw: &[u8], path: &str, version: u64) -> Result<Self> {
        let corrupted = |reason: String| Error::ManifestCorrupted {
            path: path.to_string(),
            reason,
        };
        let (mut content, seal) = super::sealed::open_any(
            raw,
            path,
            &[FORMAT, SEGMENTED_FORMAT, LEGACY_FORMAT],
            &[LEGACY_FORMAT],
            // The unsealed writer: `to_value`, then `to_vec_pretty`.
            |map| serde_json::to_vec_pretty(map).ok(),
        )?;
        let unsealed = seal == super::sealed::Seal::Unsealed;
        if unsealed {
            unsealed_as_read(&mut content).map_err(corrupted)?;
        }
        let format = content.get("format").and_then(|f| f.as_str());
        let legacy = format == Some(LEGACY_FORMAT);
        let segmented = format == Some(SEGMENTED_FORMAT);
        if !legacy && (content.contains_key("data_files") || content.contains_key("tombstones")) {
            return Err(corrupted(
                "a pds-table/2 or later manifest lists its files only through segments".into(),
            ));
        }
        let mut m: TableManifest = serde_json::from_value(serde_json::Value::Object(content))
            .map_err(|e| corrupted(e.to_string()))?;
        if legacy && !m.segments.is_empty() {
            return Err(corrupted(format!(
                "a {LEGACY_FORMAT} manifest has no segments"
            )));
        }
        m.layout.view = if legacy { View::Full } else { View::Root };
        // As read, its segments describe it (a legacy one has none).
        m.layout.laid_out = !legacy;
        m.layout.written = match (legacy, unsealed) {
            (false, _) if segmented => Written::Segmented,
            (false, _) => Written::Current,
            (true, false) => Written::Flat,
            (true, true) => Written::Unsealed,
        };
        if segmented {
            if let Some(s) = m.segments.iter().find(|s| s.files_schema.is_some()) {
                return Err(corrupted(format!(
                    "segment {:?} records files_schema, which {SEGMENTED_FORMAT} has not",
                    s.path
                )));
            }
        }
        if m.version != version {
            return Err(corrupted(format!(
                "it says version {} but is stored as version {version}",
                m.version
            )));
        }
        m.check().map_err(corrupted)?;
        if legacy {
            check_file_list_of(
                &m.data_files,
                &m.tombstones,
                &m.file_schemas,
                true,
                unsealed,
            )
            .map_err(corrupted)?;
        }
        m.format = FORMAT.into();
        Ok(m)
    }

    /// Everything a reader of the root relies on, checked: contiguous
    /// versions, a time, schemas that can be read, a primary key that is a
    /// column, segments under `segment/` listed once with a SHA-256 and a
    /// known schema, rows that fit. (The file list: [`Self::check_files`].)
    pub fn check(&self) -> std::result::Result<(), String> {
        if ![FORMAT, SEGMENTED_FORMAT, LEGACY_FORMAT].contains(&self.format.as_str()) {
            return Err(format!(
                "format is {:?}, this pds reads {FORMAT:?}, {SEGMENTED_FORMAT:?} and \
                 {LEGACY_FORMAT:?}",
                self.format
            ));
        }
        if self.version > super::MAX_VERSION {
            return Err(format!("version {} is beyond any table", self.version));
        }
        match (self.previous, self.version) {
            (None, 0) => {}
            (Some(p), v) if p.checked_add(1) == Some(v) => {}
            (p, v) => {
                return Err(format!(
                    "version {v} cannot follow {p:?}: versions are contiguous"
                ))
            }
        }
        check_time(&self.created_at)?;
        if let Some(id) = &self.table_id {
            super::identity::check(id)?;
        }
        let schema = self
            .schema
            .arrow()
            .map_err(|e| format!("its schema: {e}"))?;
        for (id, s) in &self.file_schemas {
            let fs = s.arrow().map_err(|e| format!("file schema {id:?}: {e}"))?;
            if let Some(pk) = &self.properties.primary_key {
                if fs.field_with_name(pk).is_err() {
                    return Err(format!(
                        "primary_key {pk:?} is not a column of file schema {id:?}"
                    ));
                }
            }
        }
        if let Some(pk) = &self.properties.primary_key {
            if schema.field_with_name(pk).is_err() {
                return Err(format!(
                    "primary_key {pk:?} is not a column of the table's schema"
                ));
            }
        }
        let mut paths = std::collections::HashSet::with_capacity(self.segments.len());
        let mut rows = 0u64;
        for s in &self.segments {
            s.check()?;
            if !paths.insert(s.path.as_str()) {
                return Err(format!("segment {:?} is listed twice", s.path));
            }
            for id in s.schema.iter().chain(&s.files_schema) {
                if !self.file_schemas.contains_key(id) {
                    return Err(format!(
                        "segment {} names schema {id:?}, which the manifest lacks",
                        s.path
                    ));
                }
            }
            rows = rows
                .checked_add(s.total_rows)
                .filter(|r| *r <= crate::dataset::manifest::MAX_ROWS)
                .ok_or_else(|| "its data files hold more than 2^63 rows".to_string())?;
        }
        Ok(())
    }

    /// The file list's own consistency, over what is loaded: data files
    /// under `data/` listed once with a SHA-256, tombstones under
    /// `tombstone/` listed once, each naming only files of this version.
    pub fn check_files(&self) -> std::result::Result<(), String> {
        check_file_list(&self.data_files, &self.tombstones, &self.file_schemas, true)
    }

    /// [`Self::check_files`] for a list made of segments, each checked in
    /// full when it was read: files listed once across them, tombstones
    /// naming only files of the list.
    pub fn check_segmented_files(&self) -> std::result::Result<(), String> {
        check_file_list(
            &self.data_files,
            &self.tombstones,
            &self.file_schemas,
            false,
        )
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
    ///
    /// In [`FORMAT`] the segment references lacking a `files_schema` record
    /// it, so no segment is rewritten (the loaded files and bodies take it
    /// too, as a read of the new version would resolve them). In
    /// [`SEGMENTED_FORMAT`] every file entry records it, which needs the
    /// whole file list: a manifest without it is refused (a bug; see
    /// [`super::versions::Depth::ChangingSchema`]).
    pub fn record_schema_change(&mut self, schema: TableSchema) -> Result<()> {
        let per_segment = self.layout.written.schema_per_segment();
        if !per_segment && self.layout.view != View::Full {
            return Err(Error::Task(
                "a schema change of a pds-table/2 table without its whole file list (a bug; \
                 nothing was committed)"
                    .into(),
            ));
        }
        let old = std::mem::replace(&mut self.schema, schema);
        let id = crate::parquet::encode::sha256_hex(old.arrow_schema.as_bytes())[..16].to_string();
        let mut used = false;
        for f in &mut self.data_files {
            if f.schema.is_none() {
                f.schema = Some(id.clone());
                used = true;
            }
        }
        if per_segment {
            for (i, r) in self.segments.iter_mut().enumerate() {
                // A reference recording the schema its files share, without
                // `files_schema`, is of files that each name theirs.
                if r.files_schema.is_some() || r.schema.is_some() {
                    continue;
                }
                r.files_schema = Some(id.clone());
                if !r.columns.is_empty() {
                    r.schema = Some(id.clone());
                }
                used = true;
                if let Some(Some(body)) = self.layout.bodies.get_mut(i) {
                    *body = resolved(body.clone(), r);
                }
            }
        }
        if used {
            self.file_schemas.insert(id, old);
        }
        Ok(())
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
    /// (Saturating: a checked manifest holds at most 2^63 rows.)
    pub fn total_rows(&self) -> u64 {
        let sum = |it: &mut dyn Iterator<Item = u64>| it.fold(0u64, u64::saturating_add);
        let listed = sum(&mut self.data_files.iter().map(|f| f.total_rows));
        let segmented = sum(&mut self.segments.iter().map(|s| s.total_rows));
        match self.layout.view {
            View::Full => listed,
            View::Appended => segmented.saturating_add(listed),
            View::Root | View::Pruned | View::Partial => segmented,
        }
    }

    /// Data files in the version.
    pub fn file_count(&self) -> u64 {
        let listed = self.data_files.len() as u64;
        let segmented = self
            .segments
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.file_count));
        match self.layout.view {
            View::Full => listed,
            View::Appended => segmented.saturating_add(listed),
            View::Root | View::Pruned | View::Partial => segmented,
        }
    }

    /// The files a tombstone check of this manifest covers: `None` (every
    /// file) for a whole file list, else the files of the segments loaded
    /// (a pruned view lists a tombstone's files in those only; see
    /// `Tombstone::check_files`).
    pub fn loaded_scope(&self) -> Option<std::collections::HashSet<String>> {
        matches!(self.layout.view, View::Pruned | View::Partial)
            .then(|| self.data_files.iter().map(|f| f.path.clone()).collect())
    }

    /// Make `files` the version's whole file list, with no tombstone (an
    /// overwrite): no segment of the version it was built on is kept.
    pub fn replace_files(&mut self, files: Vec<DataFile>) {
        self.segments.clear();
        self.layout.bodies.clear();
        self.layout.view = View::Full;
        self.data_files = files;
        self.tombstones.clear();
    }

    /// Add `files` to the version: to the whole list if it is loaded, else
    /// as an append on the root (its segments are kept as they are, and
    /// the files go into the last small one or a new one when it is laid
    /// out).
    pub fn add_files(&mut self, files: impl IntoIterator<Item = DataFile>) -> Result<()> {
        match self.layout.view {
            View::Full | View::Appended | View::Partial => {}
            View::Root => self.layout.view = View::Appended,
            View::Pruned => {
                return Err(Error::Task(
                    "files were added to a pruned manifest (a bug; nothing was committed)".into(),
                ))
            }
        }
        self.data_files.extend(files);
        Ok(())
    }
}

/// The fields of an unsealed `pds-table/1` manifest (43df652's struct).
const UNSEALED_FIELDS: &[&str] = &[
    "format",
    "version",
    "previous",
    "created_at",
    "operation",
    "operation_parameters",
    "schema",
    "data_files",
    "tombstones",
    "file_schemas",
    "properties",
    "commit_id",
];

/// The fields of a data file in an unsealed `pds-table/1` manifest.
const UNSEALED_FILE_FIELDS: &[&str] = &[
    "path",
    "size_bytes",
    "row_group_count",
    "total_rows",
    "columns",
    "sha256",
    "schema",
];

/// The content of an unsealed `pds-table/1` manifest (see the module docs)
/// made into what the reader parses: each tombstone gets an empty `sha256`
/// (none was recorded), and a bare tombstone path (the first tables') names
/// every data file of the version. Fields only sealed writers wrote are
/// refused: such a manifest is a later one whose checksum was removed.
fn unsealed_as_read(
    content: &mut serde_json::Map<String, serde_json::Value>,
) -> std::result::Result<(), String> {
    use serde_json::Value;
    let later = |what: &str| {
        format!(
            "it has no checksum but holds {what}, which only sealed manifests hold \
             (it was damaged or edited)"
        )
    };
    for field in ["segments", "table_id", "checksum"] {
        if content.contains_key(field) {
            return Err(later(&format!("{field:?}")));
        }
    }
    // Only what that writer wrote (a damaged key, `checksum`'s say, would
    // otherwise pass for an unsealed manifest with an extra field).
    let unknown = |o: &serde_json::Map<String, Value>, known: &[&str], what: &str| match o
        .keys()
        .find(|k| !known.contains(&k.as_str()))
    {
        Some(k) => Err(format!(
            "it has no checksum and its {what} holds {k:?}, which the pds that wrote \
                 unsealed manifests never wrote (it was damaged or edited)"
        )),
        None => Ok(()),
    };
    unknown(content, UNSEALED_FIELDS, "root")?;
    let files: Vec<Value> = match content.get("data_files") {
        None => vec![],
        Some(Value::Array(files)) => {
            if files.iter().any(|f| f.get("footer_bytes").is_some()) {
                return Err(later("a data file's \"footer_bytes\""));
            }
            for f in files {
                let Value::Object(f) = f else {
                    return Err("a data file is not an object".into());
                };
                unknown(f, UNSEALED_FILE_FIELDS, "data file")?;
            }
            files
                .iter()
                .filter_map(|f| f.get("path").cloned())
                .collect()
        }
        Some(_) => return Err("data_files is not a list".into()),
    };
    if let Some(Value::Array(tombstones)) = content.get_mut("tombstones") {
        for t in tombstones.iter_mut() {
            match t {
                Value::String(path) => {
                    *t = serde_json::json!({
                        "path": path.clone(), "files": files.clone(), "sha256": ""
                    });
                }
                Value::Object(o) => {
                    if o.contains_key("sha256") {
                        return Err(later("a tombstone's \"sha256\""));
                    }
                    unknown(o, &["path", "files"], "tombstone")?;
                    o.insert("sha256".into(), "".into());
                }
                _ => return Err("a tombstone is neither a path nor a reference".into()),
            }
        }
    }
    Ok(())
}

/// Check a file list and its tombstones: files listed once, tombstones
/// listed once naming only listed files, each once; with `deep`, also each
/// entry's path (`data/...`, `tombstone/...`), SHA-256 and schema id.
pub fn check_file_list(
    data_files: &[DataFile],
    tombstones_listed: &[TombstoneRef],
    file_schemas: &BTreeMap<String, TableSchema>,
    deep: bool,
) -> std::result::Result<(), String> {
    check_file_list_of(data_files, tombstones_listed, file_schemas, deep, false)
}

/// [`check_file_list`]; with `unsealed`, a tombstone's SHA-256 may be
/// empty (manifests from before the seal recorded none).
fn check_file_list_of(
    data_files: &[DataFile],
    tombstones_listed: &[TombstoneRef],
    file_schemas: &BTreeMap<String, TableSchema>,
    deep: bool,
    unsealed: bool,
) -> std::result::Result<(), String> {
    let mut files = std::collections::HashSet::with_capacity(data_files.len());
    let mut rows = 0u64;
    for f in data_files {
        if !files.insert(f.path.as_str()) {
            return Err(format!("data file {:?} is listed twice", f.path));
        }
        if !deep {
            continue;
        }
        let segments = crate::store::keys::segments(&f.path).map_err(|e| e.to_string())?;
        if segments.first().map(String::as_str) != Some("data") || segments.len() < 2 {
            return Err(format!("data file {:?} is not under data/", f.path));
        }
        if !is_sha256(&f.sha256) {
            return Err(format!("data file {:?} has no valid sha256", f.path));
        }
        if f.footer_bytes.is_some_and(|b| b < 12 || b > f.size_bytes) {
            return Err(format!(
                "data file {:?} states a footer larger than the file, or too small",
                f.path
            ));
        }
        if let Some(id) = &f.schema {
            if !file_schemas.contains_key(id) {
                return Err(format!(
                    "{} names schema {id:?}, which the manifest lacks",
                    f.path
                ));
            }
        }
        rows = rows
            .checked_add(f.total_rows)
            .filter(|r| *r <= crate::dataset::manifest::MAX_ROWS)
            .ok_or_else(|| "its data files hold more than 2^63 rows".to_string())?;
    }
    let mut tombstones = std::collections::HashSet::with_capacity(tombstones_listed.len());
    for t in tombstones_listed {
        if !tombstones.insert(t.path.as_str()) {
            return Err(format!("tombstone {:?} is listed twice", t.path));
        }
        let segments = crate::store::keys::segments(&t.path).map_err(|e| e.to_string())?;
        if segments.first().map(String::as_str) != Some("tombstone") || segments.len() < 2 {
            return Err(format!("tombstone {:?} is not under tombstone/", t.path));
        }
        let recorded = is_sha256(&t.sha256) || (unsealed && t.sha256.is_empty());
        if !recorded {
            return Err(format!("tombstone {:?} has no valid sha256", t.path));
        }
        let mut named = std::collections::HashSet::with_capacity(t.files.len());
        for f in &t.files {
            if !files.contains(f.as_str()) {
                return Err(format!(
                    "tombstone {:?} deletes rows of {f:?}, which is not a data file of \
                         this version",
                    t.path
                ));
            }
            if !named.insert(f.as_str()) {
                return Err(format!("tombstone {:?} names {f:?} twice", t.path));
            }
        }
    }
    Ok(())
}

/// `body` as the reference `r` describes it: its files that name no schema
/// name `r.files_schema` (the same body if that is absent, or no file
/// lacks one; else a copy, never the shared body changed).
pub fn resolved(body: std::sync::Arc<Segment>, r: &SegmentRef) -> std::sync::Arc<Segment> {
    let Some(id) = &r.files_schema else {
        return body;
    };
    if body.files.iter().all(|f| f.schema.is_some()) {
        return body;
    }
    let mut copy = Segment::clone(&body);
    name_schema(&mut copy.files, id);
    std::sync::Arc::new(copy)
}

/// Make the files of `files` that name no schema name `id`.
pub(super) fn name_schema(files: &mut [DataFile], id: &str) {
    for f in files.iter_mut().filter(|f| f.schema.is_none()) {
        f.schema = Some(id.to_string());
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
            created_at: "2026-11-23T00:00:00.000001+00:00".into(),
            operation: "append".into(),
            operation_parameters: BTreeMap::new(),
            schema: TableSchema::of(&arrow_schema::Schema::new(vec![
                arrow_schema::Field::new("id", arrow_schema::DataType::Int64, false),
                arrow_schema::Field::new("x", arrow_schema::DataType::Float64, true),
            ]))
            .unwrap(),
            data_files: vec![DataFile {
                path: "data/a.parquet".into(),
                size_bytes: 10,
                row_group_count: 1,
                total_rows: 3,
                columns: BTreeMap::from([(
                    "x".to_string(),
                    ColumnStats {
                        min: Some(serde_json::json!(0.1)),
                        max: Some(serde_json::json!(1e300)),
                        null_count: Some(0),
                    },
                )]),
                sha256: "ab".repeat(32),
                schema: None,
                footer_bytes: None,
            }],
            tombstones: vec![],
            segments: vec![],
            file_schemas: BTreeMap::new(),
            properties: TableProperties::default(),
            commit_id: None,
            table_id: None,
            formats: BTreeMap::new(),
            layout: Layout::default(),
        }
    }

    fn refused(m: &TableManifest, why: &str) {
        let json = m.to_json().unwrap();
        match TableManifest::from_json(&json, "p", m.version) {
            Err(Error::ManifestCorrupted { reason, .. }) => {
                assert!(reason.contains(why), "{why:?} not in {reason:?}")
            }
            other => panic!("{why}: {other:?}"),
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
        refused(&gap, "contiguous");
        let mut escape = manifest(4);
        escape.data_files[0].path = "../x.parquet".into();
        refused(&escape, "");
        let mut outside = manifest(4);
        outside.data_files[0].path = "manifest/v00000001.json".into();
        refused(&outside, "not under data/");
    }

    /// Each inconsistency that once changed rows silently (issue #15 S-4)
    /// is refused when the manifest is parsed, even with a valid checksum.
    #[test]
    fn inconsistent_manifests_are_refused() {
        let mut m = manifest(2);
        let mut other = m.data_files[0].clone();
        other.path = "data/b.parquet".into();
        m.data_files.push(other);
        let tomb = TombstoneRef {
            path: "tombstone/v00000002-x.del".into(),
            files: vec!["data/a.parquet".into()],
            sha256: "cd".repeat(32),
        };
        m.tombstones.push(tomb.clone());
        assert!(TableManifest::from_json(&m.to_json().unwrap(), "p", 2).is_ok());

        let mut stray = m.clone();
        stray.tombstones[0].files = vec!["data/gone.parquet".into()];
        refused(&stray, "not a data file of this version");
        let mut twice = m.clone();
        twice.data_files.push(twice.data_files[0].clone());
        refused(&twice, "listed twice");
        let mut tomb_twice = m.clone();
        tomb_twice.tombstones.push(tomb);
        refused(&tomb_twice, "listed twice");
        let mut named_twice = m.clone();
        named_twice.tombstones[0]
            .files
            .push("data/a.parquet".into());
        refused(&named_twice, "twice");
        let mut pk = m.clone();
        pk.properties.primary_key = Some("nope".into());
        refused(&pk, "primary_key");
        let mut good_pk = m.clone();
        good_pk.properties.primary_key = Some("id".into());
        assert!(TableManifest::from_json(&good_pk.to_json().unwrap(), "p", 2).is_ok());
        let mut schema = m.clone();
        schema.schema.arrow_schema = "AAAA".into();
        refused(&schema, "its schema");
        let mut listed = m.clone();
        listed.schema.columns[0].name = "other".into();
        refused(&listed, "column list");
        let mut file_schema = m.clone();
        file_schema.data_files[0].schema = Some("old".into());
        let mut old = file_schema.schema.clone();
        old.arrow_schema = "!!".into();
        file_schema.file_schemas.insert("old".into(), old);
        refused(&file_schema, "file schema");
        let mut missing_schema = m.clone();
        missing_schema.data_files[0].schema = Some("old".into());
        refused(&missing_schema, "lacks");
        for bad in [
            "yesterday",
            "2026-13-01T00:00:00Z",
            "+10000-01-01T00:00:00Z",
            "",
        ] {
            let mut time = m.clone();
            time.created_at = bad.into();
            refused(&time, "created_at");
        }
        let mut sha = m.clone();
        sha.data_files[0].sha256 = "00".into();
        refused(&sha, "sha256");
        let mut rows = m.clone();
        rows.data_files[0].total_rows = u64::MAX / 2;
        rows.data_files[1].total_rows = u64::MAX / 2;
        refused(&rows, "2^63");
    }

    /// Any single-byte change of a stored manifest that still parses as
    /// JSON is caught by its checksum; a pipeline's manifest names itself.
    #[test]
    fn edited_bytes_and_other_kinds_are_caught() {
        let good = manifest(1).to_json().unwrap();
        for at in 0..good.len() {
            let mut edited = good.clone();
            edited[at] = if edited[at] == b'1' { b'2' } else { b'1' };
            match TableManifest::from_json(&edited, "p", 1) {
                Err(Error::ManifestCorrupted { .. }) => {}
                other => panic!("byte {at}: {other:?}"),
            }
        }
        let pipeline = super::super::sealed::seal(serde_json::json!({
            "format": "pds-pipeline/1", "version": 0, "timestamp_ms": 0,
            "operation": "create", "graph": {"nodes": []}, "nodes": {}
        }))
        .unwrap();
        let err = TableManifest::from_json(&pipeline, "p", 0).unwrap_err();
        assert!(err.to_string().contains("pds.Pipeline.open"), "{err}");
    }

    /// Damaged manifests (flipped bytes, truncations) parse or fail as
    /// `ManifestCorrupted`, never panic; a schema that parses is usable.
    #[test]
    fn damaged_manifests_never_panic() {
        let m = manifest(3);
        let good = m.to_json().unwrap();
        let mut rng = crate::test_rng::TestRng::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next_u64();
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
