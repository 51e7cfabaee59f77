//! Reading a table: which version, then which files, row groups and rows.
//!
//! A scan reads one manifest and nothing else that can change, so it sees
//! one snapshot for its whole life: commits that land while it runs are
//! invisible to it (data files and tombstones are immutable).
//!
//! Planning, per data file of the version:
//! 1. the manifest's per-file min/max/null counts rule the file out for the
//!    filter, without a request;
//! 2. whole-row-group tombstones drop row groups before any fetch;
//! 3. the footer's row-group statistics prune further (in the decoder);
//! 4. only the projected (and filter) column chunks are range-read;
//! 5. deleted row positions become a row selection, and primary-key range
//!    tombstones a row filter, applied while decoding.

use std::sync::Arc;

use arrow_array::Array;
use arrow_schema::{Schema, SchemaRef};
use chrono::{DateTime, Utc};

use super::manifest_key;
use super::prune::{segments_may_match, which_may_match, FileSchemas};
use super::snapshot::{DataFile, TableManifest};
use super::tombstone::{self, FileDeletes, PkRange};
use super::versions::{latest, latest_at, read_version_at, Depth, Versioned};
use crate::error::{Error, Result};
use crate::parquet::decode::{column_indices, Positions, ReadOptions, SCAN_BATCH_ROWS};
use crate::parquet::filter::{Condition, Op, Predicate};
use crate::parquet::scan::{prefetch_footer, BatchStream, ScanHooks, SharedFooter, Source};
use crate::parquet::stats;
use crate::store::StoreHandle;

/// Which version to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The latest (the pointer, rolled forward).
    Latest,
    /// This version's manifest, directly.
    Version(u64),
    /// The last version created at or before this time.
    AsOf(DateTime<Utc>),
}

/// The manifest of the version `at` names. `NotFound` if the table does
/// not exist; `VersionNotFound` if that version does not (never committed,
/// or vacuumed), or, for `AsOf`, if no version existed at that time.
pub async fn resolve(store: &StoreHandle, table: &str, at: At) -> Result<TableManifest> {
    resolve_at(store, table, at, Depth::Full).await
}

/// [`resolve`], loading the manifest to `depth` (the root alone: 1 GET
/// after the pointer, whatever the table's size).
pub async fn resolve_at(
    store: &StoreHandle,
    table: &str,
    at: At,
    depth: Depth,
) -> Result<TableManifest> {
    let mut m = match at {
        At::Version(v) => match read_version_at(store, table, v, Depth::Root).await {
            Err(Error::NotFound { .. }) => return Err(no_version(store, table, v).await),
            other => other?,
        },
        At::Latest | At::AsOf(_) => match latest_at(store, table, false, Depth::Root).await? {
            Some(l) => l.manifest,
            None => return Err(super::not_found(store, table, "table").await),
        },
    };
    if let At::AsOf(t) = at {
        m = as_of(store, table, m, t).await?;
    }
    m.load(store, table, depth).await?;
    Ok(m)
}

/// [`super::missing_object`] for the data file `path` of `version`, from
/// the scan's runtime thread (error path only: 1 HEAD).
fn missing_file(store: &StoreHandle, table: &str, version: u64, path: String) -> Error {
    let what = format!("data file {path:?}");
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => tokio::task::block_in_place(|| {
            rt.block_on(super::missing_object(store, table, version, &what))
        }),
        Err(_) => Error::ManifestCorrupted {
            path: manifest_key(table, version),
            reason: format!("its {what} is missing"),
        },
    }
}

/// The manifest of `version` as a scan with `predicate` (bound to the
/// version's schema) needs it: the root, then only the segments whose
/// statistics can match (every segment when there is no predicate, or when
/// `whole` asks for the full file list).
///
/// Cost: 1 GET for the root (none if this handle has read it) and 1 per
/// segment read that is not cached.
pub async fn for_scan(
    store: &StoreHandle,
    table: &str,
    version: u64,
    predicate: Option<&Predicate>,
    whole: bool,
) -> Result<TableManifest> {
    let mut m: TableManifest = match read_version_at(store, table, version, Depth::Root).await {
        Err(Error::NotFound { .. }) => return Err(no_version(store, table, version).await),
        other => other?,
    };
    match predicate {
        Some(p) if !whole => {
            let keep = segments_may_match(&m, table, p)?;
            m.load_where(store, table, |i, _| {
                Ok(keep.get(i).copied().unwrap_or(true))
            })
            .await?;
        }
        _ => m.load_all(store, table).await?,
    }
    Ok(m)
}

/// `VersionNotFound` for version `v`, saying which versions there are
/// ("table \"t\" has no version 999: the latest is 12"); `NotFound` if there is no table.
/// Reads the latest version (error path only).
async fn no_version(store: &StoreHandle, table: &str, v: u64) -> Error {
    let reason = match latest(store, table).await {
        Ok(Some(l)) if v > l.manifest.version => {
            format!(
                "table {table:?} has no version {v}: the latest is {}",
                l.manifest.version
            )
        }
        // Versions are contiguous: one below the latest was committed, and
        // is gone because vacuum removed it.
        Ok(Some(l)) => format!(
            "version {v} of table {table:?} is gone: vacuum removed it (it was older than \
             what vacuum retains; the latest version is {})",
            l.manifest.version
        ),
        Ok(None) => return super::not_found(store, table, "table").await,
        Err(_) => format!("table {table:?} has no version {v} (never committed, or vacuumed)"),
    };
    Error::VersionNotFound {
        path: table.to_string(),
        reason,
    }
}

fn created_at(m: &TableManifest, table: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&m.created_at)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| Error::ManifestCorrupted {
            path: manifest_key(table, m.version),
            reason: format!("created_at {:?} is not a time: {e}", m.created_at),
        })
}

/// Binary search over versions `0..=last` by `created_at` (commits are
/// made in time order): O(log n) manifest GETs.
async fn as_of(
    store: &StoreHandle,
    table: &str,
    last: TableManifest,
    t: DateTime<Utc>,
) -> Result<TableManifest> {
    if created_at(&last, table)? <= t {
        return Ok(last);
    }
    let (mut lo, mut hi) = (0u64, last.version); // Answer in [lo, hi).
    let mut best: Option<TableManifest> = None;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let m = match read_version_at(store, table, mid, Depth::Root).await {
            Ok(m) => m,
            // Vacuumed: nothing older than it can be read either.
            Err(Error::NotFound { .. }) => {
                lo = mid + 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        if created_at(&m, table)? <= t {
            lo = mid + 1;
            best = Some(m);
        } else {
            hi = mid;
        }
    }
    best.ok_or_else(|| Error::VersionNotFound {
        path: table.to_string(),
        reason: format!(
            "table {table:?} has no version created at or before {} (none existed \
             then, or those that did were vacuumed)",
            t.to_rfc3339()
        ),
    })
}

/// Rows below which a file is not split between decode tasks: a piece
/// costs a task and a fetch of the projected column chunks (see
/// [`crate::parquet::decode::read_piece_footer`]).
pub const MIN_PIECE_ROWS: u64 = 128 * 1024;

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    pub columns: Option<Vec<String>>,
    pub predicate: Option<Arc<Predicate>>,
    /// Rows per batch at most; `None`: [`SCAN_BATCH_ROWS`].
    pub batch_size: Option<usize>,
    /// Files, or pieces of files, decoded at once.
    pub parallelism: usize,
    /// Read only these data files (paths relative to the table), e.g. one
    /// per Spark task; `None` reads all.
    pub files: Option<Vec<String>>,
}

/// The table's schema projected to `columns` (caller's order).
pub fn output_schema(schema: &Schema, columns: Option<&[String]>) -> Result<SchemaRef> {
    match columns {
        None => Ok(Arc::new(schema.clone())),
        Some(c) => Ok(Arc::new(schema.project(&column_indices(schema, c)?)?)),
    }
}

/// The predicate excluding rows in a primary-key range of a file written
/// with `file_schema`. Its values are of the range's own type (the file's
/// key type, or the wider one the delete recorded): bind it to the schema
/// the rows are read in, and the comparison is exact either way.
pub fn pk_predicate(pk: &str, range: &PkRange, file_schema: &Schema) -> Result<Option<Predicate>> {
    let Ok(field) = file_schema.field_with_name(pk) else {
        return Ok(None);
    };
    let key_type = range.key_type.as_ref().unwrap_or(field.data_type());
    let mut conditions = Vec::new();
    for (bound, exclusive, op_in, op_ex) in [
        (&range.min, range.min_exclusive, Op::Ge, Op::Gt),
        (&range.max, range.max_exclusive, Op::Le, Op::Lt),
    ] {
        if let Some(v) = bound {
            let values = stats::from_json(&[Some(v)], key_type)
                .filter(|a| a.null_count() == 0)
                .ok_or_else(|| Error::ManifestCorrupted {
                    path: pk.to_string(),
                    reason: format!("a key-range bound {v} is not a {key_type}"),
                })?;
            conditions.push(Condition {
                column: pk.to_string(),
                op: if exclusive { op_ex } else { op_in },
                values: Some(values),
                set: Default::default(),
            });
        }
    }
    if conditions.is_empty() {
        // No bound at all: every row with a key.
        conditions.push(Condition {
            column: pk.to_string(),
            op: Op::IsNotNull,
            values: None,
            set: Default::default(),
        });
    }
    Ok(Some(Predicate { conditions }))
}

/// How to read `file` of `manifest` so that its rows come out in the
/// version's schema, projected to `columns`, with `deletes` applied, in
/// batches of `batch_size` rows ([`SCAN_BATCH_ROWS`] if `None`).
/// `None` if no row of it can survive.
pub fn file_read_options(
    manifest: &TableManifest,
    file: &DataFile,
    output: &SchemaRef,
    predicate: Option<&Predicate>,
    deletes: Option<&FileDeletes>,
    batch_size: Option<usize>,
    path: &str,
) -> Result<Option<ReadOptions>> {
    let file_schema = manifest.file_schema(file, path)?;
    // The file's columns come out as the output's unless they differ.
    let evolved = output.fields().iter().any(|f| {
        file_schema
            .field_with_name(f.name())
            .map(|ff| ff.data_type() != f.data_type() || ff.is_nullable() != f.is_nullable())
            .unwrap_or(true)
    });
    let present = |c: &str| file_schema.field_with_name(c).is_ok();
    // A column the file lacks is all null in it.
    let mut predicate = predicate.cloned();
    if let Some(p) = &mut predicate {
        let mut kept = Vec::new();
        for c in p.conditions.drain(..) {
            if present(&c.column) {
                kept.push(c);
            } else if c.op != Op::IsNull {
                return Ok(None);
            }
        }
        p.conditions = kept;
    }
    let columns: Vec<String> = output
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|c| present(c))
        .collect();
    let mut opts = ReadOptions {
        columns: Some(columns),
        batch_size: Some(batch_size.unwrap_or(SCAN_BATCH_ROWS)),
        predicate: predicate.filter(|p| !p.conditions.is_empty()).map(Arc::new),
        expected: Some(file_schema.clone()),
        evolve_to: evolved.then(|| output.clone()),
        ..Default::default()
    };
    if let Some(d) = deletes {
        if !d.row_groups.is_empty() {
            // Counted against the manifest (no allocation by its numbers);
            // the footer's own count decides what is read.
            if (0..file.row_group_count).all(|rg| d.row_groups.contains(&rg))
                && file.row_group_count > 0
            {
                return Ok(None);
            }
            opts.skip_row_groups = Some(Arc::new(d.row_groups.clone()));
        }
        if !d.rows.is_empty() {
            let rows: Vec<u64> = d.rows.iter().map(u64::from).collect();
            opts.positions = Some(Positions::Drop(Arc::new(rows)));
        }
        if let Some(pk) = &manifest.properties.primary_key {
            for r in &d.pk_ranges {
                if let Some(p) = pk_predicate(pk, r, &file_schema)? {
                    opts.exclude.push(Arc::new(p));
                }
            }
        }
    }
    Ok(Some(opts))
}

/// Stream the rows of `manifest`'s version (see the module docs).
///
/// Cost: the tombstones not yet cached (one GET each, at once), and at the
/// same time the footers of the first files that survive pruning (the
/// store's request concurrency of them; the stream fetches the rest ahead
/// of their turns), then per file the projected column chunks.
pub fn scan(
    store: Arc<StoreHandle>,
    table: &str,
    manifest: &TableManifest,
    opts: ScanOptions,
) -> Result<BatchStream> {
    let path = manifest_key(table, manifest.version);
    use super::snapshot::View;
    match manifest.layout.view {
        // A partial view is scanned whole: the files it loaded (a
        // compaction's, its tombstones checked for those files alone).
        View::Full | View::Partial => {}
        View::Pruned if opts.predicate.is_some() && opts.files.is_none() => {}
        _ => {
            return Err(Error::Task(
                "a scan was given a manifest without the files it reads (a bug)".into(),
            ))
        }
    }
    let schema = manifest.arrow_schema(&path)?;
    let output = output_schema(&schema, opts.columns.as_deref())?;
    let predicate = match &opts.predicate {
        Some(p) => Some(p.as_ref().clone().bind(&schema)?),
        None => None,
    };
    if let Some(only) = &opts.files {
        if let Some(bad) = only
            .iter()
            .find(|p| !manifest.data_files.iter().any(|f| &f.path == *p))
        {
            return Err(Error::InvalidArgument(format!(
                "{bad:?} is not a data file of version {}",
                manifest.version
            )));
        }
    }
    let schemas = FileSchemas::of(manifest, &path)?;
    let may = match &predicate {
        Some(p) => which_may_match(
            manifest
                .data_files
                .iter()
                .map(|f| (f.schema.as_deref(), f.total_rows, &f.columns)),
            &schemas,
            p,
        )?,
        None => vec![true; manifest.data_files.len()],
    };
    let mut files = Vec::new();
    for (file, may) in manifest.data_files.iter().zip(may) {
        if !may
            || opts
                .files
                .as_ref()
                .is_some_and(|only| !only.contains(&file.path))
        {
            continue;
        }
        files.push(file);
    }
    // Fewer files than cores: each is decoded in row-range pieces at once.
    let parallelism = opts.parallelism.max(1);
    let pieces = parallelism.div_ceil(files.len().max(1));
    // The first files' footers are fetched while the tombstones load (the
    // scan fetches the rest ahead of their turns).
    let footers: Vec<SharedFooter> = files.iter().map(|_| SharedFooter::default()).collect();
    let runtime = crate::runtime::get()?;
    let ahead: Vec<_> = {
        let _in_runtime = runtime.enter();
        files
            .iter()
            .zip(&footers)
            .take(store.default_io_concurrency().max(1))
            .map(|(f, cell)| {
                let split = Source::piece_count(f.total_rows, pieces, MIN_PIECE_ROWS) > 1;
                prefetch_footer(&store, &f.part_ref(table), cell, split)
            })
            .collect()
    };
    // Only the tombstones of the files read.
    let read: std::collections::BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let deletes = crate::runtime::block_on(tombstone::deletes_of(&store, table, manifest, |f| {
        read.contains(f)
    }))??;
    let mut sources = Vec::new();
    for (file, footer) in files.into_iter().zip(footers) {
        let Some(read) = file_read_options(
            manifest,
            file,
            &output,
            predicate.as_ref(),
            deletes.get(&file.path),
            opts.batch_size,
            &path,
        )?
        else {
            continue;
        };
        sources.extend(Source::split(
            file.part_ref(table),
            read,
            file.total_rows,
            pieces,
            MIN_PIECE_ROWS,
            footer,
        ));
    }
    let version = manifest.version;
    let table_key = table.to_string();
    let err_store = store.clone();
    let hooks = ScanHooks {
        map_err: Arc::new(move |e| match e {
            Error::NotFound { path } => missing_file(&err_store, &table_key, version, path),
            other => other,
        }),
        at_end: None,
        ahead,
        io: None,
    };
    crate::parquet::scan::spawn(store, output, sources, parallelism, hooks)
}

/// Per data file of `manifest`: rows, rows known deleted (`None` where a
/// key-range tombstone applies: those are counted only by reading). The
/// whole-manifest form of [`super::files::files`]' count, which tests
/// check it against.
#[cfg(test)]
pub async fn deleted_rows(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
) -> Result<std::collections::BTreeMap<String, Option<u64>>> {
    let tombstones = tombstone::load_version(store, table, manifest).await?;
    let deletes = tombstone::fold(&tombstones)?;
    let mut out = std::collections::BTreeMap::new();
    for f in &manifest.data_files {
        let n = match deletes.get(&f.path) {
            None => Some(0),
            Some(d) => known_deleted(store, table, &f.path, d).await?,
        };
        out.insert(f.path.clone(), n);
    }
    Ok(out)
}

/// The rows of data file `path` that `deletes` are known to delete, or
/// `None` where a key-range tombstone applies (counted only by reading).
///
/// Cost: the footer when whole row groups are deleted.
pub async fn known_deleted(
    store: &StoreHandle,
    table: &str,
    path: &str,
    d: &FileDeletes,
) -> Result<Option<u64>> {
    if !d.pk_ranges.is_empty() {
        return Ok(None);
    }
    // Row groups of a pds file are full but the last: positions of
    // whole-row-group deletes need the footer, so count overlap only when
    // both kinds apply.
    if d.row_groups.is_empty() {
        return Ok(Some(d.rows.len()));
    }
    let key = format!("{}/{}", table.trim_end_matches('/'), path);
    let rows = crate::parquet::decode::part_row_groups(store, &key).await?;
    let starts = crate::parquet::decode::group_starts(&rows);
    Ok(Some(d.known_rows(&starts, &rows)))
}

/// Every deleted row position of `file` under `deletes`: positions, whole
/// row groups, and the rows a key range covers (read from the key column).
///
/// Cost: nothing for positions alone; the footer for row groups; the key
/// column for key ranges.
pub async fn deleted_positions(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    file: &DataFile,
    deletes: &FileDeletes,
) -> Result<roaring::RoaringBitmap> {
    let mut out = deletes.rows.clone();
    let key = format!("{}/{}", table.trim_end_matches('/'), file.path);
    let too_big = || Error::PartCorrupted {
        path: key.clone(),
        reason: "it holds more than 2^32 rows".into(),
    };
    if deletes.row_groups.is_empty() && deletes.pk_ranges.is_empty() {
        return Ok(out);
    }
    let footer = crate::parquet::part_ref::footer(store, &file.part_ref(table)).await?;
    let groups = footer.row_group_rows();
    let starts = crate::parquet::decode::group_starts(&groups);
    for &rg in &deletes.row_groups {
        let (Some(&s), Some(&n)) = (starts.get(rg as usize), groups.get(rg as usize)) else {
            continue;
        };
        let lo = u32::try_from(s).map_err(|_| too_big())?;
        let hi = u32::try_from(s + n).map_err(|_| too_big())?;
        out.insert_range(lo..hi);
    }
    let Some(pk) = &manifest.properties.primary_key else {
        return Ok(out);
    };
    if deletes.pk_ranges.is_empty() {
        return Ok(out);
    }
    let path = manifest_key(table, manifest.version);
    let schema = manifest.file_schema(file, &path)?;
    let preds = deletes
        .pk_ranges
        .iter()
        .filter_map(|r| pk_predicate(pk, r, &schema).transpose())
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .map(|p| p.bind(&schema))
        .collect::<Result<Vec<_>>>()?;
    let opts = ReadOptions {
        columns: Some(vec![pk.clone()]),
        expected: Some(schema.clone()),
        ..Default::default()
    };
    let mut part = crate::parquet::decode::open_part_with(store, &key, &footer, &opts).await?;
    let mut batches = Vec::new();
    while let Some(b) = part.next_batch().await {
        batches.push(b?);
    }
    let mut position = 0u64;
    for batch in &batches {
        let mut hit = vec![false; batch.num_rows()];
        for p in &preds {
            let m = p.evaluate(batch)?;
            for (i, h) in hit.iter_mut().enumerate() {
                *h |= m.value(i);
            }
        }
        for (i, h) in hit.into_iter().enumerate() {
            if h {
                out.insert(u32::try_from(position + i as u64).map_err(|_| too_big())?);
            }
        }
        position += batch.num_rows() as u64;
    }
    Ok(out)
}
