//! The change feed: the rows appended and the rows deleted by a range of
//! versions, as Delta's change data feed gives them, without rewriting
//! anything.
//!
//! For each version `v` in `from..=to`:
//! - rows of the data files `v` added are `insert`s (all of them: a row
//!   inserted and later deleted within the range shows as both);
//! - rows that `v`'s new tombstones delete, and that were not already
//!   deleted in `v - 1`, are `delete`s (read back from the data files by
//!   position);
//! - rows of the data files `v` removed that were live in `v - 1` are
//!   `delete`s too: an overwrite removes every file, so every row of the
//!   version before it shows as deleted;
//! - a compaction changes no row (it removes files but writes their live
//!   rows again), so it adds nothing.
//!
//! - an update's deleted rows are `update_preimage`s and its new rows
//!   `update_postimage`s; an upsert's deleted rows are `update_preimage`s,
//!   and its new rows `update_postimage`s where their key was one of the
//!   replaced rows' keys, `insert`s otherwise (Delta's change types).
//!
//! Rows come in the schema of `to` (older files read with nulls for the
//! columns they lack), with two more columns: `_change_type` and
//! `_commit_version`.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::manifest_key;
use super::scan::{deleted_positions, file_read_options, output_schema};
use super::schema::widens;
use super::snapshot::{DataFile, TableManifest};
use super::tombstone::{self, FileDeletes};
use super::versions::{read_version_at, Depth};
use crate::error::{Error, Result};
use crate::parquet::decode::Positions;
use crate::parquet::scan::{BatchMap, BatchStream, ScanHooks, Source};
use crate::parquet::value_set::ValueSet;
use crate::store::StoreHandle;

/// The change-type column.
pub const CHANGE_TYPE: &str = "_change_type";
/// The version column.
pub const COMMIT_VERSION: &str = "_commit_version";

/// The schema of the feed: the table's, then the two change columns.
pub fn feed_schema(table: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = table.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(CHANGE_TYPE, DataType::Utf8, false));
    fields.push(Field::new(COMMIT_VERSION, DataType::Int64, false));
    Arc::new(Schema::new_with_metadata(fields, table.metadata().clone()))
}

/// Adds the change columns to every batch.
fn tag(schema: SchemaRef, kind: &'static str, version: u64) -> BatchMap {
    Arc::new(move |batch: RecordBatch| {
        let n = batch.num_rows();
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(StringArray::from(vec![kind; n])) as ArrayRef);
        columns.push(Arc::new(Int64Array::from(vec![version as i64; n])) as ArrayRef);
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    })
}

/// The deletes of `manifest` that apply to `file`.
async fn file_deletes(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    file: &str,
) -> Result<Option<FileDeletes>> {
    Ok(tombstone::deletes_of(store, table, manifest, |f| f == file)
        .await?
        .remove(file))
}

/// `SchemaMismatch` unless the rows of `file` (of `manifest`) read exactly
/// in the feed's schema `output`: each column there is the file's, of the
/// same type or one it widens to and no stricter about nulls, or absent
/// from the file and nullable. Within a table's history that always holds
/// but across an overwrite that changed the schema.
fn readable(
    table: &str,
    manifest: &TableManifest,
    file: &DataFile,
    output: &Schema,
    version: u64,
) -> Result<()> {
    let schema = manifest.file_schema(file, &manifest_key(table, manifest.version))?;
    let problem = output
        .fields()
        .iter()
        .find_map(|f| match schema.field_with_name(f.name()) {
            Err(_) if f.is_nullable() => None,
            Err(_) => Some(format!("they lack the not-null column {:?}", f.name())),
            Ok(o) if o.is_nullable() && !f.is_nullable() => Some(format!(
                "{:?} is nullable in them, not null in the feed",
                f.name()
            )),
            Ok(o) if o.data_type() == f.data_type() || widens(o.data_type(), f.data_type()) => None,
            Ok(o) => Some(format!(
                "{:?} is {} in them, {} in the feed",
                f.name(),
                o.data_type(),
                f.data_type()
            )),
        });
    match problem {
        None => Ok(()),
        Some(p) => Err(Error::SchemaMismatch {
            key: table.to_string(),
            reason: format!(
                "the rows version {version} changed cannot be shown in the schema of the \
                 range's last version: {p} (an overwrite changed the schema; read the \
                 changes before and after it separately)"
            ),
        }),
    }
}

/// The sources one version contributes.
async fn version_sources(
    store: &StoreHandle,
    table: &str,
    prev: Option<&TableManifest>,
    m: &TableManifest,
    output: &SchemaRef,
    feed: &SchemaRef,
) -> Result<Vec<Source>> {
    let mut out = Vec::new();
    if m.operation == "compact" {
        return Ok(out);
    }
    let path = manifest_key(table, m.version);
    let before: BTreeSet<&str> = prev
        .map(|p| p.data_files.iter().map(|f| f.path.as_str()).collect())
        .unwrap_or_default();
    // The files `m` removed (an overwrite replaces them all): each row that
    // was live in `prev` left the table.
    if let Some(p) = prev {
        let kept: BTreeSet<&str> = m.data_files.iter().map(|f| f.path.as_str()).collect();
        let removed: Vec<&DataFile> = p
            .data_files
            .iter()
            .filter(|f| !kept.contains(f.path.as_str()))
            .collect();
        if !removed.is_empty() {
            let prev_path = manifest_key(table, p.version);
            let gone: BTreeSet<&str> = removed.iter().map(|f| f.path.as_str()).collect();
            let deletes = tombstone::deletes_of(store, table, p, |f| gone.contains(f)).await?;
            for f in removed {
                readable(table, p, f, output, m.version)?;
                let opts =
                    file_read_options(p, f, output, None, deletes.get(&f.path), None, &prev_path)?;
                if let Some(opts) = opts {
                    out.push(Source::pending(
                        f.part_ref(table),
                        Arc::new(opts),
                        Some(tag(feed.clone(), "delete", m.version)),
                    ));
                }
            }
        }
    }
    let old: BTreeSet<&str> = prev
        .map(|p| p.tombstones.iter().map(|t| t.path.as_str()).collect())
        .unwrap_or_default();
    let touched: BTreeSet<&str> = m
        .tombstones
        .iter()
        .filter(|t| !old.contains(t.path.as_str()))
        .flat_map(|t| t.files.iter().map(String::as_str))
        .collect();
    // The rows `m`'s own tombstones newly delete, by file.
    let mut deleted: Vec<(&DataFile, roaring::RoaringBitmap)> = Vec::new();
    for name in touched {
        let Some(f) = m.data_files.iter().find(|f| f.path == name) else {
            continue;
        };
        let now = match file_deletes(store, table, m, name).await? {
            Some(d) => deleted_positions(store, table, m, f, &d).await?,
            None => continue,
        };
        // The file as `prev` lists it: a schema change since gives it
        // there a schema of `prev`'s own (`m` names it by an id `prev`
        // lacks).
        let then =
            match prev.and_then(|p| Some((p, p.data_files.iter().find(|pf| pf.path == name)?))) {
                Some((p, pf)) => match file_deletes(store, table, p, name).await? {
                    Some(d) => deleted_positions(store, table, p, pf, &d).await?,
                    None => roaring::RoaringBitmap::new(),
                },
                None => roaring::RoaringBitmap::new(),
            };
        let newly = now - then;
        if !newly.is_empty() {
            readable(table, m, f, output, m.version)?;
            deleted.push((f, newly));
        }
    }
    // An update's rows are pre- and post-images; an upsert's deletes are
    // pre-images, and its inserts post-images where their key was replaced.
    let (removed_kind, added) = match m.operation.as_str() {
        "update" => ("update_preimage", Added::Every("update_postimage")),
        "upsert" => match &m.properties.primary_key {
            Some(pk) => (
                "update_preimage",
                Added::ByKey(replaced_keys(store, table, m, &deleted, output, pk).await?),
            ),
            None => ("delete", Added::Every("insert")),
        },
        _ => ("delete", Added::Every("insert")),
    };
    for (f, newly) in deleted {
        let Some(mut opts) = file_read_options(m, f, output, None, None, None, &path)? else {
            continue;
        };
        opts.positions = Some(Positions::Keep(Arc::new(
            newly.iter().map(u64::from).collect(),
        )));
        out.push(Source::pending(
            f.part_ref(table),
            Arc::new(opts),
            Some(tag(feed.clone(), removed_kind, m.version)),
        ));
    }
    for f in m
        .data_files
        .iter()
        .filter(|f| !before.contains(f.path.as_str()))
    {
        readable(table, m, f, output, m.version)?;
        if let Some(opts) = file_read_options(m, f, output, None, None, None, &path)? {
            let map = match &added {
                Added::Every(kind) => tag(feed.clone(), kind, m.version),
                Added::ByKey((pk, set)) => tag_by_key(feed.clone(), pk, set.clone(), m.version),
            };
            out.push(Source::pending(
                f.part_ref(table),
                Arc::new(opts),
                Some(map),
            ));
        }
    }
    Ok(out)
}

/// The parts of versions `prev` and `m` (roots, as read) that differ: each
/// with only the segments the other lacks loaded. A segment is an
/// immutable object, so one both list holds the same files and tombstones
/// in both, and a file is listed once per version: the files `m` added are
/// in its new segments, those it removed in `prev`'s old ones, and every
/// tombstone of a file whose deletes changed is in that file's segment,
/// which changed. A version without segments (an earlier format) is whole.
/// Cost: a GET per segment loaded that this process has not read yet.
pub(crate) async fn changed_part(
    store: &StoreHandle,
    table: &str,
    prev: Option<&TableManifest>,
    m: &TableManifest,
) -> Result<(Option<TableManifest>, TableManifest)> {
    let paths = |x: &TableManifest| -> BTreeSet<String> {
        x.segments.iter().map(|s| s.path.clone()).collect()
    };
    let (theirs, ours) = (prev.map(paths).unwrap_or_default(), paths(m));
    let mut now = m.clone();
    now.load_where(store, table, |_, s| Ok(!theirs.contains(&s.path)))
        .await?;
    let before = match prev {
        Some(p) => {
            let mut b = p.clone();
            b.load_where(store, table, |_, s| Ok(!ours.contains(&s.path)))
                .await?;
            Some(b)
        }
        None => None,
    };
    Ok((before, now))
}

/// How a version's added rows are tagged.
enum Added {
    Every(&'static str),
    /// `update_postimage` where the key (this column) is in the set, else `insert`.
    ByKey((String, Arc<ValueSet>)),
}

/// The keys of the rows `deleted` (positions by file, of `m`) in the feed's
/// key type: the keys an upsert replaced. Reads their key column only.
async fn replaced_keys(
    store: &StoreHandle,
    table: &str,
    m: &TableManifest,
    deleted: &[(&DataFile, roaring::RoaringBitmap)],
    output: &SchemaRef,
    pk: &str,
) -> Result<(String, Arc<ValueSet>)> {
    let path = manifest_key(table, m.version);
    let key_schema = output_schema(output, Some(&[pk.to_string()]))?;
    let key_type = key_schema.field(0).data_type().clone();
    let mut parts: Vec<ArrayRef> = Vec::new();
    for (f, newly) in deleted {
        let Some(mut opts) = file_read_options(m, f, &key_schema, None, None, None, &path)? else {
            continue;
        };
        opts.positions = Some(Positions::Keep(Arc::new(
            newly.iter().map(u64::from).collect(),
        )));
        let decoded = crate::parquet::part_ref::read(store, &f.part_ref(table), &opts).await?;
        for b in decoded.batches {
            parts.push(arrow_cast::cast(b.column(0), &key_type)?);
        }
    }
    let keys = if parts.is_empty() {
        arrow_array::new_empty_array(&key_type)
    } else {
        let refs: Vec<&dyn arrow_array::Array> = parts.iter().map(|a| a.as_ref()).collect();
        arrow_select::concat::concat(&refs)?
    };
    Ok((pk.to_string(), Arc::new(ValueSet::new(&keys)?)))
}

/// Tags each row `update_postimage` if its key `pk` is in `set`, else `insert`.
fn tag_by_key(schema: SchemaRef, pk: &str, set: Arc<ValueSet>, version: u64) -> BatchMap {
    let pk = pk.to_string();
    Arc::new(move |batch: RecordBatch| {
        let n = batch.num_rows();
        let col = batch.column_by_name(&pk).ok_or_else(|| {
            Error::Task(format!(
                "the key column {pk:?} is missing from the change feed"
            ))
        })?;
        let col = arrow_cast::cast(col, set.data_type())?;
        let found = set.contains(&col)?;
        let kinds: StringArray = (0..n)
            .map(|i| {
                Some(if found.value(i) {
                    "update_postimage"
                } else {
                    "insert"
                })
            })
            .collect();
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(kinds) as ArrayRef);
        columns.push(Arc::new(Int64Array::from(vec![version as i64; n])) as ArrayRef);
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    })
}

/// The manifest of version `v` of the range asked for; `VersionNotFound`
/// naming it if it is not there.
async fn in_range(store: &StoreHandle, table: &str, v: u64) -> Result<TableManifest> {
    read_version_at(store, table, v, Depth::Root)
        .await
        .map_err(|e| match e {
            Error::NotFound { .. } => Error::VersionNotFound {
                path: table.to_string(),
                reason: format!(
                    "the changes asked for include version {v} of table {table:?}, which does not \
                 exist (never committed, or vacuumed)"
                ),
            },
            other => other,
        })
}

/// The manifest of version `p`, the one before the range: what the
/// range's first version added and deleted is the difference from it.
/// `VersionNotFound` saying so if it was vacuumed.
async fn before_range(store: &StoreHandle, table: &str, p: u64) -> Result<TableManifest> {
    read_version_at(store, table, p, Depth::Root)
        .await
        .map_err(|e| match e {
            Error::NotFound { .. } => Error::VersionNotFound {
                path: table.to_string(),
                reason: format!(
                    "changes from version {from} of table {table:?} need the manifest of version \
                 {p} (what version {from} changed is its difference from {p}), which was \
                 vacuumed; ask for changes from version {next} or later (vacuum with \
                 keep_versions=True keeps every version's manifest)",
                    from = p + 1,
                    next = p + 2,
                ),
            },
            other => other,
        })
}

/// Stream the changes of versions `from..=to` (`to`: `latest`'s version
/// when `None`). `InvalidArgument` for an empty range;
/// `VersionNotFound`, naming the version, if one in the range, or the one
/// before it (whose difference gives the first version's changes), does
/// not exist.
///
/// Cost: a manifest GET per version (and the one before `from`), the
/// segments each version changed ([`changed_part`]), the tombstones they
/// add, then the added files and the rows deleted.
pub fn changes(
    store: Arc<StoreHandle>,
    table: &str,
    from: u64,
    to: u64,
    parallelism: usize,
) -> Result<BatchStream> {
    if from > to {
        return Err(Error::InvalidArgument(format!(
            "from_version {from} is after to_version {to}"
        )));
    }
    let (feed, sources) = crate::runtime::block_on({
        let store = store.clone();
        async move {
            let last = in_range(&store, table, to).await?;
            let schema = last.arrow_schema(&manifest_key(table, to))?;
            let output = output_schema(&schema, None)?;
            let feed = feed_schema(&output);
            let mut prev = match from.checked_sub(1) {
                Some(p) => Some(before_range(&store, table, p).await?),
                None => None,
            };
            let mut sources = Vec::new();
            for v in from..=to {
                let m = if v == to {
                    last.clone()
                } else {
                    in_range(&store, table, v).await?
                };
                if m.operation == "compact" {
                    // Its rows are unchanged: none of its segments is read.
                    prev = Some(m);
                    continue;
                }
                let (before, now) = changed_part(&store, table, prev.as_ref(), &m).await?;
                sources.extend(
                    version_sources(&store, table, before.as_ref(), &now, &output, &feed).await?,
                );
                prev = Some(m);
            }
            Ok::<_, Error>((feed, sources))
        }
    })??;
    crate::parquet::scan::spawn(
        store,
        feed,
        sources,
        parallelism.max(1),
        ScanHooks::default(),
    )
}
