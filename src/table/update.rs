//! Update: set columns of the rows that match a filter, in one commit,
//! rewriting no data file. The matched rows are tombstoned (bitmaps) and
//! written again, changed, as new data files.
//!
//! Per round (see [`super::rewrite`]), over the files not planned yet:
//! 1. Candidate rows: with a filter of conditions, the rows a delete of it
//!    would remove ([`super::delete::plan`]: the filter's columns of the row
//!    groups its statistics keep, deletes applied); with none, every live
//!    row.
//! 2. Those rows are read whole, by position, and handed to the caller's
//!    [`RowUpdate`] in batches. It returns which of them match (an
//!    expression filter the conditions could not express) and their new
//!    values.
//! 3. The matched positions become one bitmap entry per file; the new
//!    rows, checked against the table's schema, are uploaded.
//!
//! The new rows depend on the rows read, so a concurrent commit that
//! tombstones a file a round read restarts the update from the new version
//! (no update is lost, none applied twice).
//!
//! Memory: the new rows of a round are held until they are uploaded.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, RecordBatchIterator};
use arrow_schema::SchemaRef;
use roaring::RoaringBitmap;
use serde_json::Value;

use super::delete;
use super::manifest_key;
use super::rewrite::{rewrite, Rewrite, Rewritten, Round};
use super::scan::{deleted_positions, file_read_options, output_schema};
use super::schema::{reconcile, SchemaMode};
use super::snapshot::{DataFile, TableManifest};
use super::tombstone::{self, Entry, Tombstone};
use super::write;
use crate::error::{Error, Result};
use crate::parquet::decode::Positions;
use crate::parquet::filter::Predicate;
use crate::store::StoreHandle;

/// The caller's part of an update: given candidate rows (the table's
/// schema), which of them match (`None`: all) and their new values (one
/// row per match, in order).
pub type RowUpdate<'a> =
    dyn FnMut(RecordBatch) -> Result<(Option<BooleanArray>, RecordBatch)> + Send + 'a;

/// What to update.
pub struct UpdateOptions {
    /// Conditions the rows must meet (pushed down); `None`: every row is a
    /// candidate.
    pub predicate: Option<Predicate>,
    /// The columns set, for the history.
    pub columns: Vec<String>,
    /// The filter as the history shows it.
    pub filter: Value,
    pub parallelism: usize,
}

/// The live rows `entries` (of one round, on `base`) newly delete in
/// `file`: their positions, sorted.
async fn candidate_positions(
    store: &StoreHandle,
    table: &str,
    base: &TableManifest,
    file: &DataFile,
    newly: Option<&tombstone::FileDeletes>,
    old: Option<&tombstone::FileDeletes>,
) -> Result<RoaringBitmap> {
    let before = match old {
        Some(d) => deleted_positions(store, table, base, file, d).await?,
        None => RoaringBitmap::new(),
    };
    let wanted = match newly {
        Some(d) => deleted_positions(store, table, base, file, d).await?,
        None => {
            let rows = u32::try_from(file.total_rows).map_err(|_| Error::PartCorrupted {
                path: file.path.clone(),
                reason: "it holds more than 2^32 rows".into(),
            })?;
            let mut all = RoaringBitmap::new();
            all.insert_range(0..rows);
            all
        }
    };
    Ok(wanted - before)
}

/// One round: the candidates of `files`, their matches and new rows.
fn round(
    store: &Arc<StoreHandle>,
    table: &str,
    base: &TableManifest,
    files: &[DataFile],
    opts: &UpdateOptions,
    f: &mut RowUpdate<'_>,
) -> Result<Round> {
    let path = manifest_key(table, base.version);
    let schema = base.arrow_schema(&path)?;
    let output: SchemaRef = output_schema(&schema, None)?;
    let old = tombstone::fold(&crate::runtime::block_on(tombstone::load_version(
        store, table, base,
    ))??)?;
    // Which files hold candidates, and which rows of them.
    let (files, newly): (Vec<&DataFile>, Option<tombstone::Deletes>) = match &opts.predicate {
        Some(p) => {
            let (entries, _) = delete::plan(store, table, base, p, files, opts.parallelism)?;
            let marked: std::collections::BTreeSet<String> =
                entries.iter().map(|e| e.file().to_string()).collect();
            let folded = tombstone::fold(&[Arc::new(Tombstone::new(entries))])?;
            (
                files.iter().filter(|f| marked.contains(&f.path)).collect(),
                Some(folded),
            )
        }
        None => (files.iter().collect(), None),
    };
    let mut entries = Vec::new();
    let mut new_rows: Vec<RecordBatch> = Vec::new();
    let mut matched = 0u64;
    for file in files {
        let wanted = crate::runtime::block_on(candidate_positions(
            store,
            table,
            base,
            file,
            newly.as_ref().and_then(|n| n.get(&file.path)),
            old.get(&file.path),
        ))??;
        if wanted.is_empty() {
            continue;
        }
        let positions: Vec<u64> = wanted.iter().map(u64::from).collect();
        let Some(mut read) = file_read_options(base, file, &output, None, None, None, &path)?
        else {
            continue;
        };
        read.positions = Some(Positions::Keep(Arc::new(positions.clone())));
        let part = file.part_ref(table);
        let key = part.key.clone();
        let decoded =
            crate::runtime::block_on(crate::parquet::part_ref::read(store, &part, &read))??;
        let mut at = 0usize;
        let mut hit = RoaringBitmap::new();
        for batch in decoded.batches {
            let n = batch.num_rows();
            let (mask, rows) = f(batch)?;
            let chosen: Vec<usize> = match &mask {
                Some(m) if m.len() != n => {
                    return Err(Error::InvalidArgument(format!(
                        "the update's filter gave {} results for {n} rows",
                        m.len()
                    )))
                }
                Some(m) => (0..n).filter(|&i| m.is_valid(i) && m.value(i)).collect(),
                None => (0..n).collect(),
            };
            if rows.num_rows() != chosen.len() {
                return Err(Error::InvalidArgument(format!(
                    "the update gave {} new rows for {} matching rows",
                    rows.num_rows(),
                    chosen.len()
                )));
            }
            for i in chosen {
                let p = positions.get(at + i).ok_or_else(|| Error::PartCorrupted {
                    path: key.clone(),
                    reason: "it returned more rows than the positions asked for".into(),
                })?;
                hit.insert(u32::try_from(*p).unwrap_or(u32::MAX));
            }
            at += n;
            if rows.num_rows() > 0 {
                new_rows.push(rows);
            }
        }
        if at != positions.len() {
            return Err(Error::PartCorrupted {
                path: key,
                reason: format!(
                    "it returned {at} rows for {} positions asked for",
                    positions.len()
                ),
            });
        }
        if !hit.is_empty() {
            matched += hit.len();
            entries.push(Entry::rows(&file.path, &hit)?);
        }
    }
    let mut uploaded = Vec::new();
    if let Some(first) = new_rows.first() {
        // The new rows must be of the table's schema (types cast where only
        // the physical variant differs), with no null where it is not null.
        let target = reconcile(&schema, &first.schema(), SchemaMode::Strict, table)?;
        for b in &new_rows[1..] {
            reconcile(&schema, &b.schema(), SchemaMode::Strict, table)?;
        }
        let input = first.schema();
        let reader = Box::new(RecordBatchIterator::new(
            new_rows.into_iter().map(Ok),
            input,
        ));
        uploaded = write::upload(
            store,
            table,
            reader,
            target,
            &base.properties,
            opts.parallelism,
            None,
        )?;
    }
    Ok(Round {
        entries,
        rows: Some(matched),
        files: uploaded,
    })
}

/// Update the rows of `table` that match (see the module docs); `f` gives
/// the matches among the candidates and their new values. Returns the
/// version after it; nothing is committed when no row matches.
pub fn update(
    store: Arc<StoreHandle>,
    table: &str,
    opts: UpdateOptions,
    f: &mut RowUpdate<'_>,
) -> Result<Rewritten> {
    crate::store::keys::object_segments(table)?;
    let started = crate::store::counted::Started::now(&store);
    if opts.columns.is_empty() {
        return Err(Error::InvalidArgument(
            "update needs at least one column to set".into(),
        ));
    }
    let mut params = BTreeMap::new();
    params.insert("filter".to_string(), opts.filter.clone());
    params.insert(
        "set".to_string(),
        Value::from(
            opts.columns
                .iter()
                .map(|c| Value::from(c.clone()))
                .collect::<Vec<_>>(),
        ),
    );
    // The root: the rewrite loads the segments its filter can match.
    let latest = super::versions::latest_existing_root(&store, table)?;
    let op = Rewrite {
        operation: "update",
        params,
        predicate: opts.predicate.clone(),
        files: Vec::new(),
        reads_rows: true,
        schema: Some((latest.manifest.schema.arrow_schema.clone(), None)),
        commits_always: false,
    };
    rewrite(&store, table, op, Some(latest), |base, files| {
        round(&store, table, base, files, &opts, f)
    })
    .map(|done| done.logged(&store, table, &started))
}
