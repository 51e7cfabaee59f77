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
use super::schema::{describe_change, reconcile, same_logical_type, SchemaMode};
use super::snapshot::{DataFile, TableManifest, TableProperties, TableSchema, FORMAT};
use super::versions;
use crate::dataset::{self, manifest::now_iso8601, WriteRequest};
use crate::error::{Error, Result};
use crate::parquet::encode::EncodeOptions;
use crate::parquet::part_schema;
use crate::store::occupancy::{self, Kind};
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

/// `SchemaMismatch` naming the column if `batch` holds a null where
/// `target` (by column name) allows none, at any depth of structs. Arrow
/// input need not honour its own schema's nullability (pyarrow does not
/// check it), so the values are counted, whatever the input schema says.
pub fn check_not_null(
    batch: &RecordBatch,
    target: &arrow_schema::Schema,
    table: &str,
) -> Result<()> {
    for field in target.fields() {
        let Some(column) = batch.column_by_name(field.name()) else {
            continue; // A missing column is the schema check's.
        };
        if let Some((path, nulls)) = forbidden_nulls(column.as_ref(), field, None, field.name()) {
            return Err(Error::SchemaMismatch {
                key: table.to_string(),
                reason: format!(
                    "column {path:?} is not nullable in the table, and the data holds {nulls} \
                     null value(s) in it; nothing was written"
                ),
            });
        }
    }
    Ok(())
}

/// The first field at or under `field` (named `path`) with nulls it does
/// not allow, and how many, counting only the rows `valid_above` (the
/// enclosing structs' validity) keeps.
fn forbidden_nulls(
    array: &dyn arrow_array::Array,
    field: &arrow_schema::Field,
    valid_above: Option<&[bool]>,
    path: &str,
) -> Option<(String, usize)> {
    let nulls = array.logical_nulls();
    if !field.is_nullable() {
        let count = match (&nulls, valid_above) {
            (None, _) => 0,
            (Some(n), None) => n.null_count(),
            (Some(n), Some(above)) => (0..array.len())
                .filter(|&i| n.is_null(i) && above.get(i).copied().unwrap_or(false))
                .count(),
        };
        if count > 0 {
            return Some((path.to_string(), count));
        }
    }
    let arrow_schema::DataType::Struct(children) = field.data_type() else {
        return None;
    };
    let parent = arrow_array::cast::AsArray::as_struct_opt(array)?;
    let valid: Option<Vec<bool>> = match (&nulls, valid_above) {
        (None, None) => None,
        _ => Some(
            (0..array.len())
                .map(|i| {
                    nulls.as_ref().is_none_or(|n| n.is_valid(i))
                        && valid_above.is_none_or(|a| a.get(i).copied().unwrap_or(false))
                })
                .collect(),
        ),
    };
    for child in children.iter() {
        let Some(values) = parent.column_by_name(child.name()) else {
            continue;
        };
        let found = forbidden_nulls(
            values.as_ref(),
            child,
            valid.as_deref(),
            &format!("{path}.{}", child.name()),
        );
        if found.is_some() {
            return found;
        }
    }
    None
}

/// `inner` with `check` run on each batch as it streams: a batch that
/// fails it ends the stream with that error (so an upload stops there and
/// removes what it wrote).
pub struct Checked<F> {
    inner: BoxedReader,
    check: F,
}

impl<F: FnMut(&RecordBatch) -> Result<()> + Send> Checked<F> {
    pub fn boxed(inner: BoxedReader, check: F) -> BoxedReader
    where
        F: 'static,
    {
        Box::new(Self { inner, check })
    }
}

impl<F: FnMut(&RecordBatch) -> Result<()>> Iterator for Checked<F> {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.inner.next()? {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        Some(
            (self.check)(&batch)
                .map(|()| batch)
                .map_err(|e| ArrowError::ExternalError(Box::new(e))),
        )
    }
}

impl<F: FnMut(&RecordBatch) -> Result<()>> RecordBatchReader for Checked<F> {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

/// Batches of `inner`, each checked against `target`'s nullability (see
/// [`check_not_null`]) and given the schema `target` (by column name; see
/// [`part_schema::evolve`]).
struct Conformed {
    inner: BoxedReader,
    first: Option<RecordBatch>,
    target: SchemaRef,
    table: String,
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
            check_not_null(&batch, &self.target, &self.table)
                .and_then(|()| part_schema::evolve(&batch, &self.target))
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
        table: table.to_string(),
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
            footer_bytes: Some(s.footer_bytes),
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
    base: Option<versions::Latest>,
    depth: versions::Depth,
    prepare: F,
) -> Result<Outcome>
where
    F: FnMut(Option<&TableManifest>) -> Result<Option<TableManifest>> + Send,
{
    let opts = CommitOptions {
        depth,
        ..Default::default()
    };
    let out = crate::runtime::block_on(commit::commit(store, table, &opts, base, prepare))
        .and_then(|r| r);
    if let Err(e) = &out {
        if may_discard(e) {
            discard(store, table, files);
        }
    }
    out
}

/// `m`, committed by the operation that started at `started`, once its
/// INFO line is logged (see [`commit::log_committed`]).
pub fn committed(
    store: &StoreHandle,
    table: &str,
    m: TableManifest,
    started: &crate::store::counted::Started,
) -> TableManifest {
    commit::log_committed(store, table, &m, started);
    m
}

/// The manifest of a table's version 0, publishing `formats` from it.
fn first_version(
    schema: &TableSchema,
    files: &[DataFile],
    props: &TableProperties,
    params: BTreeMap<String, serde_json::Value>,
    formats: &[String],
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
        segments: Vec::new(),
        file_schemas: BTreeMap::new(),
        properties: props.clone(),
        commit_id: None,
        table_id: Some(super::identity::new_table_id()),
        formats: formats
            .iter()
            .map(|f| (f.clone(), super::snapshot::PublishedFormat { since: 0 }))
            .collect(),
        layout: Default::default(),
    }
}

/// How the settings of an existing table differ from `asked`, one
/// sentence per setting (none: they agree). Every setting a table is
/// created with counts: the primary key (what key-range deletes use), and
/// the compression, row group size and target file size every later write
/// uses. A size left unset means the default, so unset and the default
/// itself agree.
fn property_differences(theirs: &TableProperties, asked: &TableProperties) -> Vec<String> {
    let mut out = Vec::new();
    let key = |k: &Option<String>| k.as_ref().map_or("none".to_string(), |k| format!("{k:?}"));
    if theirs.primary_key != asked.primary_key {
        out.push(format!(
            "primary_key is {}, not {}",
            key(&theirs.primary_key),
            key(&asked.primary_key)
        ));
    }
    if !theirs.compression.eq_ignore_ascii_case(&asked.compression) {
        out.push(format!(
            "compression is {:?}, not {:?}",
            theirs.compression, asked.compression
        ));
    }
    let rows = |r: Option<usize>| r.unwrap_or(crate::parquet::encode::DEFAULT_ROW_GROUP_ROWS);
    if rows(theirs.row_group_size) != rows(asked.row_group_size) {
        out.push(format!(
            "row_group_size is {}, not {}",
            rows(theirs.row_group_size),
            rows(asked.row_group_size)
        ));
    }
    let bytes = |b: Option<u64>| b.unwrap_or(DEFAULT_TARGET_FILE_SIZE);
    if bytes(theirs.target_file_size) != bytes(asked.target_file_size) {
        out.push(format!(
            "target_file_size is {}, not {}",
            bytes(theirs.target_file_size),
            bytes(asked.target_file_size)
        ));
    }
    out
}

/// Whether `asked` describes the table schema `stored` up to the physical
/// variants that are one logical type (string, large_string and
/// string_view, ...; see [`same_logical_type`]): the same field names in
/// the same order, with the same nullability.
fn same_logical_schema(stored: &arrow_schema::Schema, asked: &arrow_schema::Schema) -> bool {
    stored.fields().len() == asked.fields().len()
        && stored.fields().iter().zip(asked.fields()).all(|(s, a)| {
            s.name() == a.name()
                && s.is_nullable() == a.is_nullable()
                && same_logical_type(s.data_type(), a.data_type())
        })
}

/// Create `table` with `schema` and, optionally, `data` as its version 0.
///
/// If a table exists at the key: with `exist_ok` and no data, its latest
/// version is returned if it has `schema` and the settings `props` (see
/// [`property_differences`]; `SchemaMismatch` naming the differences if
/// not); otherwise `AlreadyExists`, and nothing is written. A dataset or
/// pipeline at the key, or anything inside or around it, is `KeyOccupied`,
/// before any data is written.
///
/// Cost: [`occupancy::check_free`] (5 HEADs per level of the key, 1 LIST),
/// 1 GET + 1 HEAD to see that no table exists, the data PUTs, then 2 PUTs
/// (the first manifest, the pointer).
pub fn create(
    store: Arc<StoreHandle>,
    table: &str,
    schema: SchemaRef,
    data: Option<BoxedReader>,
    props: TableProperties,
    exist_ok: bool,
    parallelism: usize,
) -> Result<TableManifest> {
    create_publishing(
        store,
        table,
        schema,
        data,
        props,
        exist_ok,
        parallelism,
        &[],
    )
}

/// [`create`], publishing `formats` (see [`super::formats::FORMATS`]) from version 0.
/// `InvalidArgument` for an unknown format, and for `delta`,
/// `UnsupportedType` naming a column with no exact Delta type, before any
/// I/O.
#[allow(clippy::too_many_arguments)]
pub fn create_publishing(
    store: Arc<StoreHandle>,
    table: &str,
    schema: SchemaRef,
    data: Option<BoxedReader>,
    props: TableProperties,
    exist_ok: bool,
    parallelism: usize,
    formats: &[String],
) -> Result<TableManifest> {
    super::formats::check(formats, &schema)?;
    crate::store::keys::object_segments(table)?;
    let started = crate::store::counted::Started::now(&store);
    check_properties(&props, &schema)?;
    let table_schema = TableSchema::of(&schema)?;
    let with_data = data.is_some();
    let existing = |m: TableManifest| -> Result<TableManifest> {
        if exist_ok && !with_data {
            if m.schema.arrow_schema != table_schema.arrow_schema {
                let theirs = m.arrow_schema(table)?;
                if !same_logical_schema(&theirs, &schema) {
                    return Err(Error::SchemaMismatch {
                        key: table.to_string(),
                        reason: format!(
                            "the table exists with another schema: {}",
                            super::schema::differences(&theirs, &schema).join("; ")
                        ),
                    });
                }
            }
            let mut differences = property_differences(&m.properties, &props);
            let theirs: Vec<&String> = m.formats.keys().collect();
            let asked: std::collections::BTreeSet<&String> = formats.iter().collect();
            if theirs
                .iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>()
                != asked
            {
                differences.push(format!(
                    "formats {theirs:?}, not {:?}",
                    asked.into_iter().collect::<Vec<_>>()
                ));
            }
            if !differences.is_empty() {
                return Err(Error::SchemaMismatch {
                    key: table.to_string(),
                    reason: format!(
                        "the table exists with other settings: {}",
                        differences.join("; ")
                    ),
                });
            }
            return Ok(m);
        }
        Err(Error::AlreadyExists {
            path: table.to_string(),
        })
    };
    crate::runtime::block_on(occupancy::check_free(store.as_ref(), table, Kind::Table))??;
    if let Some(latest) = crate::runtime::block_on(versions::latest(&store, table))?? {
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
    let out = commit_or_discard(&store, table, &files, None, versions::Depth::Root, |base| {
        if let Some(b) = base {
            lost_to = Some(b.clone());
            return Ok(None);
        }
        let mut params = BTreeMap::new();
        params.insert("rows_added".into(), rows.into());
        params.insert("files_added".into(), files.len().into());
        Ok(Some(first_version(
            &table_schema,
            &files,
            &props,
            params,
            formats,
        )))
    })?;
    match out {
        Outcome::Committed { manifest, .. } => Ok(committed(&store, table, *manifest, &started)),
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
/// latest one unchanged if `reader` holds no rows. Columns of the table's
/// logical type in another physical type (polars' `string_view`, say; see
/// [`super::schema::same_logical_type`]) are cast to the table's type as
/// they stream in, before encoding: every file has the table's types.
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
    let started = crate::store::counted::Started::now(&store);
    // The root alone: an append adds segments and keeps the others as they
    // are, so its cost does not grow with the table.
    let latest = versions::latest_existing_root(&store, table)?;
    let base = latest.manifest.clone();
    let path = super::manifest_key(table, base.version);
    let old = base.arrow_schema(&path)?;
    let checked = base.schema.arrow_schema.clone();
    let Uploaded {
        table_schema: new_schema,
        change,
        files,
        ..
    } = upload_reconciled(
        &store,
        table,
        &old,
        &base.properties,
        reader,
        mode,
        parallelism,
        |r, _| Ok(r),
    )?;
    if files.is_empty() {
        return Ok(base);
    }
    let rows: u64 = files.iter().map(|f| f.total_rows).sum();
    // A schema change records the old schema on every segment reference
    // (the root alone), or in pds-table/2 on every file (the whole list).
    let (given, depth) = if change.is_empty() {
        (Some(latest), versions::Depth::Root)
    } else {
        (
            None,
            versions::Depth::ChangingSchema(Box::new(versions::Depth::Root)),
        )
    };
    let out = commit_or_discard(&store, table, &files, given, depth, |now| {
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
            next.record_schema_change(new_schema.clone())?;
            next.operation_parameters
                .insert("schema_change".into(), change.clone().into());
        }
        next.add_files(files.iter().cloned())?;
        Ok(Some(next))
    })?;
    match out {
        Outcome::Committed { manifest, .. } => Ok(committed(&store, table, *manifest, &started)),
        Outcome::Unchanged { .. } => Err(Error::Task("append committed nothing".into())),
    }
}

/// Data an append or a replace uploaded: its schema reconciled with the
/// table's, and its new data files.
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// The data's own schema, as its reader declared it.
    pub input: SchemaRef,
    /// The schema the files are written in: the table's, reconciled with
    /// `input` ([`reconcile`]).
    pub target: SchemaRef,
    /// `target` as a manifest records it.
    pub table_schema: TableSchema,
    /// How `target` differs from the table's schema, for the history
    /// (empty: it does not).
    pub change: Vec<String>,
    /// The new data files (none for data without rows).
    pub files: Vec<DataFile>,
}

/// Reconcile `reader`'s schema with `old`, the table's (per `mode`), then
/// stream the reader `check` makes of it (given the target schema; a
/// replace checks every row against its filter there) into new data files
/// of the target schema, cast as they stream ([`upload`]). A schema that
/// does not fit, or a type that cannot be stored, fails before anything is
/// uploaded; a failing stream removes what was uploaded.
#[allow(clippy::too_many_arguments)]
pub fn upload_reconciled(
    store: &Arc<StoreHandle>,
    table: &str,
    old: &arrow_schema::Schema,
    props: &TableProperties,
    reader: BoxedReader,
    mode: SchemaMode,
    parallelism: usize,
    check: impl FnOnce(BoxedReader, &arrow_schema::Schema) -> Result<BoxedReader>,
) -> Result<Uploaded> {
    let input = reader.schema();
    let target = reconcile(old, &input, mode, table)?;
    // The input is cast to `target` as it streams, so `target` is what must
    // be storable (an input column of an unstorable variant of the table's
    // type, a list view say, is cast to the table's type first).
    crate::parquet::storage_types::check_writable(&target)?;
    let table_schema = TableSchema::of(&target)?;
    let change = describe_change(old, &target);
    let reader = check(reader, &target)?;
    let files = upload(
        store,
        table,
        reader,
        target.clone(),
        props,
        parallelism,
        None,
    )?;
    Ok(Uploaded {
        input,
        target,
        table_schema,
        change,
        files,
    })
}

/// Check files from [`upload`] before a commit names them: each is a
/// `data/<name>` file of the table's current schema, and its statistics
/// show no null in a column `schema` declares not nullable (`SchemaMismatch`,
/// and the files are removed).
pub fn check_uploaded(
    store: &StoreHandle,
    table: &str,
    files: &[DataFile],
    schema: &arrow_schema::Schema,
) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(files.len());
    for f in files {
        let segments = crate::store::keys::segments(&f.path)?;
        if segments.len() != 2 || segments[0] != "data" || f.schema.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{:?} is not a data file written by upload()",
                f.path
            )));
        }
        if !seen.insert(f.path.as_str()) {
            return Err(Error::InvalidArgument(format!(
                "{:?} is listed twice",
                f.path
            )));
        }
        if !crate::table::snapshot::is_sha256(&f.sha256) {
            return Err(Error::InvalidArgument(format!(
                "{:?} has no valid sha256",
                f.path
            )));
        }
    }
    // Files written by `upload` were checked row by row; their statistics
    // tell again, before anything is committed.
    for f in files {
        for field in schema.fields().iter().filter(|f| !f.is_nullable()) {
            let nulls = f
                .columns
                .get(field.name())
                .and_then(|c| c.null_count)
                .unwrap_or(0);
            if nulls > 0 {
                discard(store, table, files);
                return Err(Error::SchemaMismatch {
                    key: table.to_string(),
                    reason: format!(
                        "column {:?} is not nullable, and data file {:?} holds {nulls} null \
                         value(s) in it; nothing was committed",
                        field.name(),
                        f.path
                    ),
                });
            }
        }
    }
    Ok(())
}

/// How [`commit_files`] changes the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesMode {
    /// Add the files (creating the table if there is none). In
    /// [`SchemaMode::Merge`], files whose schema is the merge of theirs into
    /// the table's (as an append in merge mode computes it) change the
    /// table's schema in the same version.
    Append(SchemaMode),
    /// Replace every file and tombstone with the files, in one version.
    Overwrite,
}

/// Commit data files uploaded earlier with [`upload`] (by Spark tasks, say)
/// in one version: appended, or replacing the content. Creates the table
/// with `schema` and `props` if none exists. Every file is checked to be
/// there first (a HEAD each, at once). On failure the files are removed.
///
/// `SchemaMismatch` if the table's schema is not `schema` (a strict
/// append), or, for a merge append, unless `schema` is the table's schema
/// at commit time merged with the data's (a schema another writer changed
/// meanwhile is accepted if the files still merge into it, so the version
/// committed always has the files' schema). `KeyOccupied` (and the files are
/// removed) if a dataset or pipeline is at the key, or anything inside or
/// around it ([`occupancy::check_free`]: 5 HEADs per level, 1 LIST).
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
    let started = crate::store::counted::Started::now(&store);
    check_properties(&props, &schema)?;
    check_uploaded(&store, table, &files, &schema)?;
    let table_schema = TableSchema::of(&schema)?;
    let free = crate::runtime::block_on(occupancy::check_free(store.as_ref(), table, Kind::Table))?;
    if let Err(e) = free {
        discard(&store, table, &files);
        return Err(e);
    }
    let heads = files.iter().map(|f| {
        let key = format!("{}/{}", table.trim_end_matches('/'), f.path);
        let store = store.clone();
        async move { store.head(&key).await }
    });
    crate::runtime::block_on(futures::future::try_join_all(heads))??;
    let rows: u64 = files.iter().map(|f| f.total_rows).sum();
    // A merge may record the old schema (see `Depth::ChangingSchema`).
    let depth = match mode {
        FilesMode::Append(SchemaMode::Merge) => {
            versions::Depth::ChangingSchema(Box::new(versions::Depth::Root))
        }
        _ => versions::Depth::Root,
    };
    let out = commit_or_discard(&store, table, &files, None, depth, |now| {
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
            return Ok(Some(first_version(
                &table_schema,
                &files,
                &props,
                params,
                &[],
            )));
        };
        let mut next = now.clone();
        next.created_at = now_iso8601();
        match mode {
            FilesMode::Append(schema_mode) => {
                if now.schema.arrow_schema != table_schema.arrow_schema {
                    let theirs = now.arrow_schema(table)?;
                    if merges_into(&theirs, &schema, schema_mode, table)? {
                        params.insert(
                            "schema_change".into(),
                            describe_change(&theirs, &schema).into(),
                        );
                        next.record_schema_change(table_schema.clone())?;
                        next.operation = "append".into();
                        next.add_files(files.iter().cloned())?;
                        next.operation_parameters = params;
                        return Ok(Some(next));
                    }
                    return Err(Error::SchemaMismatch {
                        key: table.to_string(),
                        reason: format!(
                            "the files were written in another schema than the table's \
                             (changed meanwhile?): {}",
                            super::schema::differences(&theirs, &schema).join("; ")
                        ),
                    });
                }
                next.operation = "append".into();
                next.add_files(files.iter().cloned())?;
            }
            FilesMode::Overwrite => {
                let old = now.arrow_schema(table)?;
                let change = describe_change(&old, &schema);
                next.operation = "overwrite".into();
                params.insert("files_removed".into(), now.file_count().into());
                params.insert("rows_removed".into(), now.total_rows().into());
                if now.schema.arrow_schema != table_schema.arrow_schema {
                    params.insert("schema_change".into(), change.into());
                }
                next.schema = table_schema.clone();
                next.file_schemas = BTreeMap::new();
                next.replace_files(files.clone());
            }
        }
        next.operation_parameters = params;
        Ok(Some(next))
    })?;
    match out {
        Outcome::Committed { manifest, .. } => Ok(committed(&store, table, *manifest, &started)),
        Outcome::Unchanged { .. } => Err(Error::Task("commit_files committed nothing".into())),
    }
}

/// Whether files written in `files` may be appended to a table of schema
/// `table` in `mode`: in merge mode, when `files` is exactly the schema a
/// merge of `files` into `table` gives (the table's columns, widened, then
/// the new ones as nullable), as [`reconcile`] computes it for the writer.
fn merges_into(
    table: &arrow_schema::Schema,
    files: &arrow_schema::Schema,
    mode: SchemaMode,
    key: &str,
) -> Result<bool> {
    if mode != SchemaMode::Merge {
        return Ok(false);
    }
    match reconcile(table, files, SchemaMode::Merge, key) {
        Ok(merged) => {
            Ok(TableSchema::of(&merged)?.arrow_schema == TableSchema::of(files)?.arrow_schema)
        }
        Err(Error::SchemaMismatch { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, StructArray};
    use arrow_schema::{DataType, Field, Fields, Schema};

    fn not_null_schema() -> Arc<Schema> {
        let inner = Fields::from(vec![Field::new("b", DataType::Int64, false)]);
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Struct(inner), true),
        ]))
    }

    /// A batch whose own schema says everything is nullable (as pyarrow's
    /// do), with `id` and `s.b` as given; `s` null where `s_valid` is false.
    fn batch(id: Vec<Option<i64>>, b: Vec<Option<i64>>, s_valid: Vec<bool>) -> RecordBatch {
        let inner = Fields::from(vec![Field::new("b", DataType::Int64, true)]);
        let s = StructArray::new(
            inner.clone(),
            vec![Arc::new(Int64Array::from(b)) as ArrayRef],
            Some(s_valid.into()),
        );
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", DataType::Struct(inner), true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(Int64Array::from(id)) as ArrayRef, Arc::new(s)],
        )
        .unwrap()
    }

    #[test]
    fn nulls_where_the_table_allows_none_are_schema_mismatch_naming_the_column() {
        let target = not_null_schema();
        let fine = batch(
            vec![Some(1), Some(2)],
            vec![Some(1), None],
            vec![true, false],
        );
        check_not_null(&fine, &target, "t").unwrap();
        let top = batch(
            vec![Some(1), None],
            vec![Some(1), Some(2)],
            vec![true, true],
        );
        let err = check_not_null(&top, &target, "t").unwrap_err();
        assert!(
            matches!(&err, Error::SchemaMismatch { reason, .. } if reason.contains("\"id\"") && reason.contains("1 null")),
            "{err}"
        );
        let nested = batch(
            vec![Some(1), Some(2)],
            vec![None, Some(2)],
            vec![true, true],
        );
        let err = check_not_null(&nested, &target, "t").unwrap_err();
        assert!(
            matches!(&err, Error::SchemaMismatch { reason, .. } if reason.contains("\"s.b\"")),
            "{err}"
        );
    }

    #[test]
    fn a_merge_commit_takes_exactly_the_schema_a_merge_append_gives() {
        let field = |name: &str, t: DataType, nullable: bool| Field::new(name, t, nullable);
        let table = Schema::new(vec![
            field("id", DataType::Int64, false),
            field("n", DataType::Int32, true),
        ]);
        let merged = Schema::new(vec![
            field("id", DataType::Int64, false),
            field("n", DataType::Int64, true),
            field("extra", DataType::Utf8, true),
        ]);
        assert!(merges_into(&table, &merged, SchemaMode::Merge, "t").unwrap());
        assert!(!merges_into(&table, &merged, SchemaMode::Strict, "t").unwrap());
        let reordered = Schema::new(vec![
            field("extra", DataType::Utf8, true),
            field("id", DataType::Int64, false),
            field("n", DataType::Int64, true),
        ]);
        assert!(!merges_into(&table, &reordered, SchemaMode::Merge, "t").unwrap());
        let narrowed = Schema::new(vec![
            field("id", DataType::Int32, false),
            field("n", DataType::Int32, true),
        ]);
        assert!(!merges_into(&table, &narrowed, SchemaMode::Merge, "t").unwrap());
        let required_new = Schema::new(vec![
            field("id", DataType::Int64, false),
            field("n", DataType::Int32, true),
            field("extra", DataType::Utf8, false),
        ]);
        assert!(!merges_into(&table, &required_new, SchemaMode::Merge, "t").unwrap());
    }

    #[test]
    fn an_existing_tables_settings_are_compared_one_by_one() {
        let base = TableProperties {
            primary_key: Some("id".into()),
            compression: "zstd".into(),
            row_group_size: None,
            target_file_size: None,
        };
        assert!(property_differences(&base, &base).is_empty());
        let same = TableProperties {
            compression: "ZSTD".into(),
            row_group_size: Some(crate::parquet::encode::DEFAULT_ROW_GROUP_ROWS),
            target_file_size: Some(DEFAULT_TARGET_FILE_SIZE),
            ..base.clone()
        };
        assert!(
            property_differences(&base, &same).is_empty(),
            "defaults agree"
        );
        let other = TableProperties {
            primary_key: Some("v".into()),
            compression: "snappy".into(),
            row_group_size: Some(10),
            target_file_size: Some(1000),
        };
        let diff = property_differences(&base, &other);
        assert_eq!(diff.len(), 4, "{diff:?}");
        assert!(
            diff[0].contains("\"id\"") && diff[0].contains("\"v\""),
            "{diff:?}"
        );
    }
}
