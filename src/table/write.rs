//! Creating a table, and appending to it.
//!
//! An append uploads its rows as new, uniquely named data files under
//! `data/` (through the dataset layer's streaming writer: parts are encoded
//! while they fill and uploaded as they are encoded), records each file's
//! row groups, rows, size, SHA-256 and per-column min/max/null counts, then
//! commits the next version (see [`super::commit`]). Appends rebase on
//! whatever won meanwhile, so concurrent appends never conflict and each
//! lands exactly once. If the commit fails, the files are removed.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use super::commit::{self, CommitOptions, Outcome};
use super::schema::{describe_change, reconcile, SchemaMode};
use super::snapshot::{DataFile, TableManifest, TableProperties, TableSchema, FORMAT};
use crate::dataset::{self, manifest::now_iso8601, WriteRequest};
use crate::error::{Error, Result};
use crate::parquet::encode::EncodeOptions;
use crate::parquet::part_schema;
use crate::store::StoreHandle;

/// A stream of Arrow batches.
pub type BoxedReader = Box<dyn RecordBatchReader + Send>;

/// Data files of one table are at most this big when no target is set.
pub const DEFAULT_TARGET_FILE_SIZE: u64 = 512 * 1024 * 1024;

/// Check the settings a table is created with (before any I/O).
pub fn check_properties(props: &TableProperties, schema: &arrow_schema::Schema) -> Result<()> {
    EncodeOptions::new(&props.compression, props.row_group_size, None)?;
    if props.target_file_size == Some(0) {
        return Err(Error::InvalidArgument(
            "target_file_size must be >= 1".into(),
        ));
    }
    if let Some(pk) = &props.primary_key {
        let field = schema.field_with_name(pk).map_err(|_| {
            Error::InvalidArgument(format!("primary_key {pk:?} is not a column of the schema"))
        })?;
        if crate::parquet::stats::from_json(&[None], field.data_type()).is_none() {
            return Err(Error::InvalidArgument(format!(
                "primary_key {pk:?} has type {}; a key must be an integer, float, string, \
                 boolean or temporal column",
                field.data_type()
            )));
        }
    }
    crate::parquet::storage_types::check_writable(schema)
}

/// Batches of `inner`, each given the schema `target` (by column name; see
/// [`part_schema::evolve`]).
struct Conformed {
    inner: BoxedReader,
    first: Option<RecordBatch>,
    target: SchemaRef,
}

impl Iterator for Conformed {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.first.take() {
            Some(b) => b,
            None => match self.inner.next()? {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            },
        };
        Some(
            part_schema::evolve(&batch, &self.target)
                .map_err(|e| ArrowError::ExternalError(Box::new(e))),
        )
    }
}

impl RecordBatchReader for Conformed {
    fn schema(&self) -> SchemaRef {
        self.target.clone()
    }
}

/// Upload `reader` as data files of `table` whose batches have the schema
/// `target`, named `data/part-<prefix>-NNNNN.parquet` (a unique prefix if
/// `None`), without committing them. Returns the files (paths relative to
/// the table), none for no rows.
pub fn upload(
    store: &Arc<StoreHandle>,
    table: &str,
    mut reader: BoxedReader,
    target: SchemaRef,
    props: &TableProperties,
    parallelism: usize,
    prefix: Option<String>,
) -> Result<Vec<DataFile>> {
    // Rows per file from the target size and the first batch's Arrow size
    // (Parquet is smaller, so files come out at or below the target).
    let first = loop {
        match reader.next() {
            None => break None,
            Some(Ok(b)) if b.num_rows() == 0 => continue,
            Some(Ok(b)) => break Some(b),
            Some(Err(e)) => return Err(e.into()),
        }
    };
    let Some(first) = first else {
        return Ok(Vec::new());
    };
    let target_bytes = props.target_file_size.unwrap_or(DEFAULT_TARGET_FILE_SIZE);
    let row_bytes = (first.get_array_memory_size() / first.num_rows()).max(1) as u64;
    let rows_per_file = usize::try_from((target_bytes / row_bytes).max(1)).unwrap_or(usize::MAX);
    let opts = EncodeOptions::new(
        &props.compression,
        props.row_group_size,
        Some(rows_per_file),
    )?;
    let conformed = Conformed {
        inner: reader,
        first: Some(first),
        target,
    };
    let req = WriteRequest {
        location: format!("{}/data", table.trim_end_matches('/')),
        parallelism: parallelism.max(1),
        part_prefix: Some(prefix.unwrap_or_else(dataset::unique_token)),
        ..Default::default()
    };
    let written = dataset::write_parts(store.clone(), Box::new(conformed), &opts, &req)?;
    Ok(written
        .names
        .iter()
        .zip(written.summaries)
        .map(|(name, s)| DataFile {
            path: format!("data/{name}"),
            size_bytes: s.size_bytes,
            row_group_count: s.row_groups,
            total_rows: s.row_count,
            columns: s.columns,
            sha256: s.sha256,
            schema: None,
        })
        .collect())
}

/// Remove data files a failed commit leaves behind (best effort).
pub fn discard(store: &StoreHandle, table: &str, files: &[DataFile]) {
    let keys: Vec<String> = files
        .iter()
        .map(|f| format!("{}/{}", table.trim_end_matches('/'), f.path))
        .collect();
    if !keys.is_empty() {
        let _ = crate::runtime::block_on(store.delete_many(&keys));
    }
}

/// Whether a commit that failed with `err` may have its uploads removed:
/// every error but `CommitUnknown` means that no manifest of that commit
/// exists or can appear (see [`commit::commit`]).
pub fn may_discard(err: &Error) -> bool {
    !matches!(err, Error::CommitUnknown { .. })
}

/// Commit `prepare`; on a failure that certainly committed nothing, remove
/// `files` (never when the outcome is unknown: a manifest may name them).
fn commit_or_discard<F>(
    store: &Arc<StoreHandle>,
    table: &str,
    files: &[DataFile],
    base: Option<commit::Latest>,
    prepare: F,
) -> Result<Outcome>
where
    F: FnMut(Option<&TableManifest>) -> Result<Option<TableManifest>> + Send,
{
    let out = crate::runtime::block_on(commit::commit(
        store,
        table,
        &CommitOptions::default(),
        base,
        prepare,
    ))
    .and_then(|r| r);
    if let Err(e) = &out {
        if may_discard(e) {
            discard(store, table, files);
        }
    }
    out
}

/// The manifest of a table's version 0.
fn first_version(
    schema: &TableSchema,
    files: &[DataFile],
    props: &TableProperties,
    params: BTreeMap<String, serde_json::Value>,
) -> TableManifest {
    TableManifest {
        format: FORMAT.into(),
        version: 0,
        previous: None,
        created_at: now_iso8601(),
        operation: "create".into(),
        operation_parameters: params,
        schema: schema.clone(),
        data_files: files.to_vec(),
        tombstones: Vec::new(),
        file_schemas: BTreeMap::new(),
        properties: props.clone(),
        commit_id: None,
    }
}

/// Create `table` with `schema` and, optionally, `data` as its version 0.
///
/// If a table exists at the key: with `exist_ok` and no data, its latest
/// version is returned if its schema is `schema` (`SchemaMismatch` if not);
/// otherwise `AlreadyExists`, and nothing is written.
pub fn create(
    store: Arc<StoreHandle>,
    table: &str,
    schema: SchemaRef,
    data: Option<BoxedReader>,
    props: TableProperties,
    exist_ok: bool,
    parallelism: usize,
) -> Result<TableManifest> {
    crate::store::keys::object_segments(table)?;
    check_properties(&props, &schema)?;
    let table_schema = TableSchema::of(&schema)?;
    let with_data = data.is_some();
    let existing = |m: TableManifest| -> Result<TableManifest> {
        if exist_ok && !with_data {
            if m.schema.arrow_schema != table_schema.arrow_schema {
                let theirs = m.arrow_schema(table)?;
                return Err(Error::SchemaMismatch {
                    key: table.to_string(),
                    reason: format!("the table exists with schema {theirs:?}"),
                });
            }
            return Ok(m);
        }
        Err(Error::AlreadyExists {
            path: table.to_string(),
        })
    };
    if let Some(latest) = crate::runtime::block_on(commit::latest(&store, table))?? {
        return existing(latest.manifest);
    }
    let files = match data {
        None => Vec::new(),
        Some(reader) => {
            reconcile(&schema, &reader.schema(), SchemaMode::Strict, table)?;
            upload(
                &store,
                table,
                reader,
                schema.clone(),
                &props,
                parallelism,
                None,
            )?
        }
    };
    let rows: u64 = files.iter().map(|f| f.total_rows).sum();
    let mut lost_to: Option<TableManifest> = None;
    let out = commit_or_discard(&store, table, &files, None, |base| {
        if let Some(b) = base {
            lost_to = Some(b.clone());
            return Ok(None);
        }
        let mut params = BTreeMap::new();
        params.insert("rows_added".into(), rows.into());
        params.insert("files_added".into(), files.len().into());
        Ok(Some(first_version(&table_schema, &files, &props, params)))
    })?;
    match out {
        Outcome::Committed { manifest, .. } => Ok(*manifest),
        Outcome::Unchanged { .. } => {
            // Another writer created the table first.
            discard(&store, table, &files);
            match lost_to {
                Some(m) => existing(m),
                None => Err(Error::AlreadyExists {
                    path: table.to_string(),
                }),
            }
        }
    }
}

/// Append `reader` to `table`; returns the new version's manifest, or the
/// latest one unchanged if `reader` holds no rows.
///
/// Cost: 2 GETs (pointer, manifest), the data PUTs, then 2 PUTs (manifest
/// create-only, pointer compare-and-swap) when the commit wins at once.
pub fn append(
    store: Arc<StoreHandle>,
    table: &str,
    reader: BoxedReader,
    mode: SchemaMode,
    metadata: Option<BTreeMap<String, String>>,
    parallelism: usize,
) -> Result<TableManifest> {
    crate::store::keys::object_segments(table)?;
    crate::parquet::storage_types::check_writable(&reader.schema())?;
    let latest = commit::latest_existing(&store, table)?;
    let base = latest.manifest.clone();
    let path = super::manifest_key(table, base.version);
    let old = base.arrow_schema(&path)?;
    let target = reconcile(&old, &reader.schema(), mode, table)?;
    let checked = base.schema.arrow_schema.clone();
    let new_schema = TableSchema::of(&target)?;
    let change = describe_change(&old, &target);
    let files = upload(
        &store,
        table,
        reader,
        target,
        &base.properties,
        parallelism,
        None,
    )?;
    if files.is_empty() {
        return Ok(base);
    }
    let rows: u64 = files.iter().map(|f| f.total_rows).sum();
    let out = commit_or_discard(&store, table, &files, Some(latest), |now| {
        let now = now.ok_or_else(|| Error::NotFound {
            path: table.to_string(),
        })?;
        if now.schema.arrow_schema != checked {
            return Err(Error::SchemaMismatch {
                key: table.to_string(),
                reason: "the table's schema changed while this append ran; nothing was \
                         appended, retry it"
                    .into(),
            });
        }
        let mut next = now.clone();
        next.created_at = now_iso8601();
        next.operation = "append".into();
        next.operation_parameters = BTreeMap::new();
        next.operation_parameters
            .insert("rows_added".into(), rows.into());
        next.operation_parameters
            .insert("files_added".into(), files.len().into());
        if let Some(m) = &metadata {
            next.operation_parameters.insert(
                "metadata".into(),
                serde_json::to_value(m).unwrap_or_default(),
            );
        }
        if !change.is_empty() {
            next.record_schema_change(new_schema.clone());
            next.operation_parameters
                .insert("schema_change".into(), change.clone().into());
        }
        next.data_files.extend(files.iter().cloned());
        Ok(Some(next))
    })?;
    match out {
        Outcome::Committed { manifest, .. } => Ok(*manifest),
        Outcome::Unchanged { .. } => Err(Error::Task("append committed nothing".into())),
    }
}

/// How [`commit_files`] changes the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesMode {
    /// Add the files (creating the table if there is none).
    Append,
    /// Replace every file and tombstone with the files, in one version.
    Overwrite,
}

/// Commit data files uploaded earlier with [`upload`] (by Spark tasks, say)
/// in one version: appended, or replacing the content. Creates the table
/// with `schema` and `props` if none exists. Every file is checked to be
/// there first (a HEAD each, at once). On failure the files are removed.
///
/// `SchemaMismatch` if the table's schema is not `schema` (append), or
/// changed while the files were written.
pub fn commit_files(
    store: Arc<StoreHandle>,
    table: &str,
    files: Vec<DataFile>,
    mode: FilesMode,
    schema: SchemaRef,
    props: TableProperties,
    metadata: Option<BTreeMap<String, String>>,
) -> Result<TableManifest> {
    crate::store::keys::object_segments(table)?;
    check_properties(&props, &schema)?;
    for f in &files {
        let segments = crate::store::keys::segments(&f.path)?;
        if segments.len() != 2 || segments[0] != "data" || f.schema.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{:?} is not a data file written by upload()",
                f.path
            )));
        }
    }
    let table_schema = TableSchema::of(&schema)?;
    let heads = files.iter().map(|f| {
        let key = format!("{}/{}", table.trim_end_matches('/'), f.path);
        let store = store.clone();
        async move { store.head(&key).await }
    });
    crate::runtime::block_on(futures::future::try_join_all(heads))??;
    let rows: u64 = files.iter().map(|f| f.total_rows).sum();
    let out = commit_or_discard(&store, table, &files, None, |now| {
        let mut params = BTreeMap::new();
        params.insert("rows_added".into(), rows.into());
        params.insert("files_added".into(), files.len().into());
        if let Some(m) = &metadata {
            params.insert(
                "metadata".into(),
                serde_json::to_value(m).unwrap_or_default(),
            );
        }
        let Some(now) = now else {
            return Ok(Some(first_version(&table_schema, &files, &props, params)));
        };
        let mut next = now.clone();
        next.created_at = now_iso8601();
        match mode {
            FilesMode::Append => {
                if now.schema.arrow_schema != table_schema.arrow_schema {
                    let theirs = now.arrow_schema(table)?;
                    return Err(Error::SchemaMismatch {
                        key: table.to_string(),
                        reason: format!(
                            "the files were written as {schema:?}; the table's schema is {theirs:?}"
                        ),
                    });
                }
                next.operation = "append".into();
                next.data_files.extend(files.iter().cloned());
            }
            FilesMode::Overwrite => {
                let old = now.arrow_schema(table)?;
                let change = describe_change(&old, &schema);
                next.operation = "overwrite".into();
                params.insert("files_removed".into(), now.data_files.len().into());
                params.insert("rows_removed".into(), now.total_rows().into());
                if now.schema.arrow_schema != table_schema.arrow_schema {
                    params.insert("schema_change".into(), change.into());
                }
                next.schema = table_schema.clone();
                next.file_schemas = BTreeMap::new();
                next.data_files = files.clone();
                next.tombstones = Vec::new();
            }
        }
        next.operation_parameters = params;
        Ok(Some(next))
    })?;
    match out {
        Outcome::Committed { manifest, .. } => Ok(*manifest),
        Outcome::Unchanged { .. } => Err(Error::Task("commit_files committed nothing".into())),
    }
}
