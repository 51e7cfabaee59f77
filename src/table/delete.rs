//! Deleting rows by a filter, without rewriting any data file.
//!
//! 1. Files whose manifest statistics (read under each file's own schema)
//!    rule the filter out are skipped.
//! 2. On a primary-key table, a filter that is a range (or equality) on the
//!    key writes `pk_range` entries, without rewriting or fully reading any
//!    file, once it knows a live row matches. Statistics can prove that for
//!    free only for a file with no deletes at all: its recorded min or max
//!    key is a key one of its rows holds, so if it lies in the range, a live
//!    row matches and no data file is read. Otherwise (a file with deletes
//!    may have lost exactly those rows) the candidates' footers are read
//!    (1 GET each, several at once): a row group untouched by any delete
//!    whose exact min or max is in the range proves a match; failing that,
//!    the key column chunks of the row groups that may match are read, with
//!    the deletes applied, until a live match is found. A range no live row
//!    matches commits nothing.
//! 3. Otherwise, per remaining file: its footer prunes row groups, then only
//!    the filter's columns of the remaining row groups are read. A row group
//!    whose rows are now all deleted becomes a `row_group` entry; other
//!    matches become row positions in a roaring bitmap.
//! 4. One tombstone object is written (create-only), then the version is
//!    committed: 3 PUTs in all when the commit wins at once.
//!
//! A delete that matches nothing commits nothing. Deletes are serializable:
//! files appended after the plan's snapshot are planned too before the
//! commit (their own tombstone, committed with the first), so a later
//! delete never misses rows an earlier append committed. A concurrent commit
//! that removed a file this delete marks (a compaction) makes it start over
//! on the new version. No tombstone is removed once its commit's outcome is
//! unknown.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema, SchemaRef};
use serde_json::Value;

use super::manifest_key;
use super::prune::{file_may_match, FileSchemas};
use super::rewrite::{rewrite, Rewrite, Rewritten, Round};
use super::scan::{file_read_options, output_schema, pk_predicate};
use super::snapshot::{DataFile, TableManifest};
use super::tombstone::{self, Entry, FileDeletes};
use crate::error::{Error, Result};
use crate::parquet::decode;
use crate::parquet::filter::{Op, Predicate};
use crate::parquet::stats;
use crate::store::StoreHandle;

/// What a delete did.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// The version after the delete (unchanged if nothing matched).
    pub manifest: TableManifest,
    /// Rows deleted, when known (`None` for key-range entries, counted on read).
    pub rows: Option<u64>,
    /// Whether a version was committed.
    pub committed: bool,
}

/// `(lower, upper)` bounds of a filter that is a range on `pk` alone, as
/// JSON values with their exclusiveness; `None` if it is anything else.
type Bound = Option<(Value, bool)>;

fn pk_range(pred: &Predicate, pk: &str) -> Option<(Bound, Bound)> {
    let (mut lo, mut hi): (Bound, Bound) = (None, None);
    for c in &pred.conditions {
        if c.column != pk {
            return None;
        }
        let v = stats::to_json(c.values.as_ref()?.as_ref(), 0)?;
        match c.op {
            Op::Eq if lo.is_none() && hi.is_none() => {
                lo = Some((v.clone(), false));
                hi = Some((v, false));
            }
            Op::Gt | Op::Ge if lo.is_none() => lo = Some((v, c.op == Op::Gt)),
            Op::Lt | Op::Le if hi.is_none() => hi = Some((v, c.op == Op::Lt)),
            _ => return None,
        }
    }
    (!pred.conditions.is_empty()).then_some((lo, hi))
}

/// Entries for one file by reading the filter's columns of its candidate
/// row groups; `(entries, rows newly deleted)`.
async fn plan_file(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    file: &DataFile,
    predicate: &Predicate,
    deletes: Option<&FileDeletes>,
) -> Result<(Vec<Entry>, u64)> {
    let path = manifest_key(table, manifest.version);
    let schema = manifest.arrow_schema(&path)?;
    let mut columns = predicate.columns();
    if let (Some(pk), Some(d)) = (&manifest.properties.primary_key, deletes) {
        if !d.pk_ranges.is_empty() && !columns.contains(pk) {
            columns.push(pk.clone());
        }
    }
    let needed = output_schema(&schema, Some(&columns))?;
    // Read without row filter or deleted positions, so that the k-th row out
    // is the k-th row of the row groups read; deletes are applied below.
    let Some(mut opts) = file_read_options(manifest, file, &needed, None, None, None, &path)?
    else {
        return Ok((Vec::new(), 0));
    };
    let key = format!("{}/{}", table.trim_end_matches('/'), file.path);
    // Only conditions on columns the file has can prune its row groups.
    let mut local = predicate.clone();
    local.conditions.retain(|c| {
        opts.expected
            .as_ref()
            .is_some_and(|s| s.field_with_name(&c.column).is_ok())
    });
    // One footer read serves the plan and the read.
    let footer = crate::parquet::part_ref::footer(store, &file.part_ref(table)).await?;
    let (groups, pruned) = (footer.row_group_rows(), footer.prune(Some(&local))?);
    let dead_groups = deletes.map(|d| d.row_groups.clone()).unwrap_or_default();
    let read: Vec<usize> = pruned
        .into_iter()
        .filter(|rg| !dead_groups.contains(&(*rg as u64)))
        .collect();
    if read.is_empty() {
        return Ok((Vec::new(), 0));
    }
    opts.row_groups = Some(read.clone());
    let mut part = decode::open_part_with(store, &key, &footer, &opts).await?;
    let mut batches = Vec::new();
    while let Some(b) = part.next_batch().await {
        batches.push(b?);
    }
    let starts = decode::group_starts(&groups);
    let bound = predicate.clone().bind(&needed)?;
    let file_schema = manifest.file_schema(file, &path)?;
    let excludes: Vec<Predicate> = match (&manifest.properties.primary_key, deletes) {
        (Some(pk), Some(d)) => d
            .pk_ranges
            .iter()
            .filter_map(|r| pk_predicate(pk, r, &file_schema).transpose())
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .map(|p| p.bind(&needed))
            .collect::<Result<Vec<_>>>()?,
        _ => Vec::new(),
    };
    // The k-th decoded row is the k-th row of the row groups read, in order.
    let mut read_starts = Vec::with_capacity(read.len());
    let mut total = 0u64;
    for &rg in &read {
        read_starts.push(total);
        total = total.saturating_add(groups[rg]);
    }
    let locate = |k: u64| -> Result<(usize, u64)> {
        let idx = read_starts.partition_point(|&s| s <= k).saturating_sub(1);
        let rg = read[idx];
        let offset = k - read_starts[idx];
        if offset >= groups[rg] {
            return Err(Error::PartCorrupted {
                path: key.clone(),
                reason: "it decoded more rows than its row groups hold".into(),
            });
        }
        Ok((rg, starts[rg] + offset))
    };
    let mut hits: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut dead_by_key: BTreeMap<usize, u64> = BTreeMap::new();
    let old_rows = deletes.map(|d| d.rows.clone()).unwrap_or_default();
    let already = |pos: u64| u32::try_from(pos).is_ok_and(|p| old_rows.contains(p));
    let mut k0 = 0u64;
    for batch in &batches {
        // Only the rows that match are visited (nulls do not match).
        let matched = bound.evaluate(batch)?;
        let mut excluded: Option<arrow_array::BooleanArray> = None;
        for e in &excludes {
            let m = e.evaluate(batch)?;
            excluded = Some(match excluded {
                None => m,
                Some(x) => arrow_arith::boolean::or(&x, &m)?,
            });
        }
        for i in matched.values().set_indices() {
            if excluded.as_ref().is_some_and(|x| x.value(i)) {
                continue;
            }
            let (rg, pos) = locate(k0 + i as u64)?;
            if !already(pos) {
                hits.entry(rg).or_default().push(pos);
            }
        }
        if let Some(x) = &excluded {
            for i in x.values().set_indices() {
                let (rg, pos) = locate(k0 + i as u64)?;
                if !already(pos) {
                    *dead_by_key.entry(rg).or_default() += 1;
                }
            }
        }
        k0 += batch.num_rows() as u64;
    }
    if k0 != total {
        return Err(Error::PartCorrupted {
            path: key.clone(),
            reason: format!("it decoded {k0} rows where its row groups hold {total}"),
        });
    }
    let mut entries = Vec::new();
    let mut positions = Vec::new();
    let mut newly = 0u64;
    for (rg, rows) in hits {
        newly += rows.len() as u64;
        let (start, len) = (starts[rg], groups[rg]);
        let dead_positions = match (
            u32::try_from(start),
            u32::try_from(start.saturating_add(len)),
        ) {
            (Ok(lo), Ok(hi)) => old_rows.range_cardinality(lo..hi),
            _ => 0,
        };
        let dead = dead_positions + dead_by_key.get(&rg).copied().unwrap_or(0);
        if rows.len() as u64 + dead >= len {
            entries.push(Entry::RowGroup {
                file: file.path.clone(),
                row_group: rg as u64,
                rows: len,
            });
        } else {
            positions.extend(rows);
        }
    }
    if !positions.is_empty() {
        let mut map = BTreeMap::new();
        map.insert(file.path.clone(), positions);
        for (f, b) in tombstone::bitmaps(map)? {
            entries.push(Entry::rows(&f, &b)?);
        }
    }
    Ok((entries, newly))
}

/// Plan the deletion of `predicate`'s rows in `files` of `base`: the
/// tombstone entries and the rows they newly delete (`None` for key-range
/// entries, counted on read).
pub fn plan(
    store: &Arc<StoreHandle>,
    table: &str,
    base: &TableManifest,
    predicate: &Predicate,
    files: &[DataFile],
    parallelism: usize,
) -> Result<(Vec<Entry>, Option<u64>)> {
    let path = manifest_key(table, base.version);
    let schema = base.arrow_schema(&path)?;
    let bound = predicate.clone().bind(&schema)?;
    let schemas = FileSchemas::of(base, &path)?;
    let mut candidates: Vec<&DataFile> = Vec::new();
    for f in files {
        if file_may_match(f, schemas.get(f)?, &bound)? {
            candidates.push(f);
        }
    }
    if candidates.is_empty() {
        return Ok((Vec::new(), Some(0)));
    }
    let tombstones = crate::runtime::block_on(tombstone::load_version(store, table, base))??;
    let deletes = tombstone::fold(&tombstones)?;
    let pk = base.properties.primary_key.clone();
    if let Some((pk, (lo, hi))) = pk
        .as_deref()
        .zip(pk.as_deref().and_then(|pk| pk_range(&bound, pk)))
    {
        // Key ranges, only once a live row is known to match (see the
        // module docs); a key range of an older file records the key type
        // its bounds are values of when the column has widened since.
        let key_type = schema.field_with_name(pk)?.data_type().clone();
        let hit = crate::runtime::block_on(files_with_key_match(
            store,
            table,
            base,
            &schemas,
            &candidates,
            &bound,
            pk,
            &deletes,
            parallelism,
        ))??;
        let mut entries = Vec::new();
        for f in hit {
            let file_type = schemas.get(f)?.field_with_name(pk)?.data_type().clone();
            entries.push(Entry::PkRange {
                file: f.path.clone(),
                pk_min: lo.as_ref().map(|(v, _)| v.clone()),
                pk_max: hi.as_ref().map(|(v, _)| v.clone()),
                pk_min_exclusive: lo.as_ref().is_some_and(|(_, x)| *x),
                pk_max_exclusive: hi.as_ref().is_some_and(|(_, x)| *x),
                pk_type: (file_type != key_type).then(|| key_type.to_string()),
            });
        }
        return Ok((entries, None));
    }
    // One task per file, so that files decode on every core.
    let shared = Arc::new((base.clone(), bound, deletes));
    let planned = crate::runtime::block_on(async {
        use futures::StreamExt;
        futures::stream::iter(candidates.into_iter().cloned().map(|f| {
            let (store, shared, table) = (store.clone(), shared.clone(), table.to_string());
            async move {
                tokio::spawn(async move {
                    let (base, bound, deletes) = shared.as_ref();
                    plan_file(&store, &table, base, &f, bound, deletes.get(&f.path)).await
                })
                .await
                .map_err(Error::from)
                .and_then(|r| r)
            }
        }))
        .buffered(parallelism.max(1))
        .collect::<Vec<_>>()
        .await
    })?;
    let mut entries = Vec::new();
    let mut rows = 0;
    for p in planned {
        let (e, n) = p?;
        entries.extend(e);
        rows += n;
    }
    Ok((entries, Some(rows)))
}

/// Whether some live row of `file` has a key that `range` (a predicate on
/// `pk` alone, bound to the version's schema) matches.
///
/// A key the footer states exactly as a row group's min or max is a key of
/// one of its rows: in the range, and in a row group no delete touches, it
/// proves a live match. Otherwise the key column chunks of the row groups
/// whose statistics may match are read, with the file's deletes applied.
///
/// Cost: the footer (1 GET, 2 for a large one), then those column chunks
/// unless the footer proves a match.
#[allow(clippy::too_many_arguments)]
async fn key_match(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    file: &DataFile,
    file_schema: &SchemaRef,
    range: &Predicate,
    pk: &str,
    deletes: Option<&FileDeletes>,
) -> Result<bool> {
    let path = manifest_key(table, manifest.version);
    let schema = manifest.arrow_schema(&path)?;
    let needed = output_schema(&schema, Some(&[pk.to_string()]))?;
    let Some(mut opts) =
        file_read_options(manifest, file, &needed, Some(range), deletes, None, &path)?
    else {
        return Ok(false);
    };
    let key = format!("{}/{}", table.trim_end_matches('/'), file.path);
    let footer = crate::parquet::part_ref::footer(store, &file.part_ref(table)).await?;
    let groups = footer.row_group_rows();
    let dead = deletes.map(|d| d.row_groups.clone()).unwrap_or_default();
    let candidates: Vec<usize> = footer
        .prune(Some(range))?
        .into_iter()
        .filter(|rg| !dead.contains(&(*rg as u64)))
        .collect();
    if candidates.is_empty() {
        return Ok(false);
    }
    let no_key_deletes = deletes.is_none_or(|d| d.pk_ranges.is_empty());
    if no_key_deletes {
        if let Some((mins, maxs)) = footer.exact_bounds(pk)? {
            let (in_min, in_max) = (
                holds(range, pk, file_schema, mins)?,
                holds(range, pk, file_schema, maxs)?,
            );
            let starts = decode::group_starts(&groups);
            for &rg in &candidates {
                let (Some(&lo), Some(&n)) = (starts.get(rg), groups.get(rg)) else {
                    continue;
                };
                let untouched = deletes.is_none_or(|d| {
                    match (u32::try_from(lo), u32::try_from(lo.saturating_add(n))) {
                        (Ok(lo), Ok(hi)) => d.rows.range_cardinality(lo..hi) == 0,
                        _ => false,
                    }
                });
                let stated = |held: &[bool]| held.get(rg).copied().unwrap_or(false);
                if untouched && (stated(&in_min) || stated(&in_max)) {
                    return Ok(true);
                }
            }
        }
    }
    opts.row_groups = Some(candidates);
    let mut part = decode::open_part_with(store, &key, &footer, &opts).await?;
    while let Some(b) = part.next_batch().await {
        if b?.num_rows() > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Per element of `values` (keys of a file, its own type): does `range`
/// hold it? Null holds nothing.
fn holds(range: &Predicate, pk: &str, file_schema: &Schema, values: ArrayRef) -> Result<Vec<bool>> {
    let field = file_schema.field_with_name(pk)?.clone().with_nullable(true);
    let values = arrow_cast::cast(&values, field.data_type())?;
    let batch = RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![values])?;
    let bound = range.clone().bind(batch.schema_ref())?;
    let mask = bound.evaluate(&batch)?;
    Ok((0..mask.len())
        .map(|i| mask.is_valid(i) && mask.value(i))
        .collect())
}

/// Whether the manifest alone proves that `file` holds a live row in
/// `range`: it has no deletes, and its recorded min or max key (a key of
/// one of its rows) is in the range. Text keys never prove (their
/// statistics may be truncated).
fn stats_prove(
    file: &DataFile,
    file_schema: &Schema,
    range: &Predicate,
    pk: &str,
    deletes: Option<&FileDeletes>,
) -> Result<bool> {
    if deletes.is_some() {
        return Ok(false);
    }
    let Ok(field) = file_schema.field_with_name(pk) else {
        return Ok(false);
    };
    let value_type = match field.data_type() {
        DataType::Dictionary(_, v) => v.as_ref(),
        t => t,
    };
    if matches!(
        value_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        return Ok(false);
    }
    let Some(s) = file.columns.get(pk) else {
        return Ok(false);
    };
    let Some(values) = stats::from_json(&[s.min.as_ref(), s.max.as_ref()], field.data_type())
    else {
        return Ok(false);
    };
    Ok(holds(range, pk, file_schema, values)?
        .into_iter()
        .any(|h| h))
}

/// The candidate files a key-range delete must mark: none if no live row
/// matches. A match the manifest proves ([`stats_prove`]) costs nothing and
/// keeps every candidate; otherwise the candidates are checked
/// ([`key_match`]), `parallelism` at a time, until one matches: those found
/// without a match are left out, the rest kept (marking a file with no
/// matching row deletes nothing).
#[allow(clippy::too_many_arguments)]
async fn files_with_key_match<'a>(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    schemas: &FileSchemas,
    candidates: &[&'a DataFile],
    range: &Predicate,
    pk: &str,
    deletes: &tombstone::Deletes,
    parallelism: usize,
) -> Result<Vec<&'a DataFile>> {
    for f in candidates {
        if stats_prove(f, schemas.get(f)?, range, pk, deletes.get(&f.path))? {
            return Ok(candidates.to_vec());
        }
    }
    use futures::StreamExt;
    let checks = candidates.iter().enumerate().map(|(i, f)| async move {
        let schema = schemas.get(f)?;
        key_match(
            store,
            table,
            manifest,
            f,
            schema,
            range,
            pk,
            deletes.get(&f.path),
        )
        .await
        .map(|hit| (i, hit))
    });
    let mut results = futures::stream::iter(checks).buffer_unordered(parallelism.max(1));
    let mut without = std::collections::BTreeSet::new();
    while let Some(r) = results.next().await {
        let (i, hit) = r?;
        if hit {
            return Ok(candidates
                .iter()
                .enumerate()
                .filter(|(j, _)| !without.contains(j))
                .map(|(_, f)| *f)
                .collect());
        }
        without.insert(i);
    }
    Ok(Vec::new())
}

/// Delete the rows of `table` matching `predicate` (see the module docs).
///
/// Serializable against concurrent commits (see [`super::rewrite`]): an
/// append that lands between the plan and the commit adds files the plan
/// has not seen, so they are planned too (on the version that added them:
/// their own tombstone, in the same commit), as if the delete had run after
/// the append. A compaction that removed a file the delete marks makes it
/// plan again from scratch.
pub fn delete(
    store: Arc<StoreHandle>,
    table: &str,
    predicate: Predicate,
    parallelism: usize,
) -> Result<Deleted> {
    crate::store::keys::object_segments(table)?;
    let started = crate::store::counted::Started::now(&store);
    if predicate.conditions.is_empty() {
        return Err(Error::InvalidArgument(
            "delete needs a filter; an empty filter would delete every row".into(),
        ));
    }
    let mut params = BTreeMap::new();
    params.insert("filter".to_string(), describe(&predicate));
    let op = Rewrite {
        operation: "delete",
        params,
        predicate: Some(predicate.clone()),
        files: Vec::new(),
        reads_rows: false,
        schema: None,
        commits_always: false,
    };
    let done =
        commit_removal(&store, table, op, None, parallelism)?.logged(&store, table, &started);
    Ok(Deleted {
        manifest: done.manifest,
        rows: done.rows,
        committed: done.committed,
    })
}

/// Commit `op` through [`rewrite`]: the rows its predicate matches are
/// removed, planned as a delete plans them (each round over the files not
/// planned yet), and its files (already uploaded) added, in one version.
/// What delete, upsert and replace commit. `first`: the latest version as
/// the caller read it, if it did.
pub fn commit_removal(
    store: &Arc<StoreHandle>,
    table: &str,
    op: Rewrite,
    first: Option<super::versions::Latest>,
    parallelism: usize,
) -> Result<Rewritten> {
    let Some(predicate) = op.predicate.clone() else {
        return Err(Error::Task(format!(
            "{} has no filter to plan (a bug; nothing was committed)",
            op.operation
        )));
    };
    rewrite(store, table, op, first, |base, files| {
        let (entries, rows) = plan(store, table, base, &predicate, files, parallelism)?;
        Ok(Round {
            entries,
            rows,
            files: Vec::new(),
        })
    })
}

/// A filter as JSON, for the history.
pub fn describe(predicate: &Predicate) -> Value {
    Value::Array(
        predicate
            .conditions
            .iter()
            .map(|c| {
                let values: Vec<Value> = c
                    .values
                    .as_ref()
                    .map(|v| {
                        (0..v.len())
                            .filter_map(|i| stats::to_json(v.as_ref(), i))
                            .collect()
                    })
                    .unwrap_or_default();
                serde_json::json!([c.column, format!("{:?}", c.op).to_lowercase(), values])
            })
            .collect(),
    )
}
