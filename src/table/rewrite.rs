//! The loop every operation that removes rows commits through: delete,
//! upsert and update. None rewrites a data file: each writes tombstones for
//! the rows it removes (and, for upsert and update, new data files), then
//! commits them in one version.
//!
//! **Serializable.** The plan depends on what it read, so a lost race is
//! not simply rebased:
//! - files added since the plan's snapshot (appends) whose statistics may
//!   hold rows the operation removes are planned too, in a further round
//!   on the version that added them (its own tombstone, committed with the
//!   first), as if the operation had run after them;
//! - a file a tombstone marks that a concurrent commit removed (a
//!   compaction) makes the operation start over from the new version;
//! - for an operation whose new rows are computed from the rows it removes
//!   (update), a concurrent tombstone on a file it read makes it start over
//!   too: the rows it read may be gone or replaced.
//!
//! An upsert's new rows come from its caller, not from the rows replaced,
//! so a concurrent delete of the same rows changes nothing it writes.
//!
//! **Faults.** Every object a round writes is removed again when the
//! operation starts over or fails, unless the outcome of its commit is
//! unknown (`CommitUnknown`: a manifest may name them).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::commit::{self, CommitOptions, Outcome};
use super::manifest_key;
use super::prune::file_may_match;
use super::snapshot::{DataFile, TableManifest, TableSchema, TombstoneRef};
use super::tombstone::{Entry, Tombstone};
use super::versions;
use crate::dataset::manifest::now_iso8601;
use crate::error::{Error, Result};
use crate::parquet::filter::Predicate;
use crate::store::StoreHandle;

/// Plans before an operation that keeps finding new files (appends landing
/// faster than it commits) or its files compacted away gives up with
/// `CommitConflict`. A further round plans only the files added since the
/// last.
pub const MAX_REPLANS: u32 = 64;

/// What one round of planning produced, over the files it was given.
#[derive(Debug, Default)]
pub struct Round {
    /// Tombstone entries for the rows it removes.
    pub entries: Vec<Entry>,
    /// Rows those entries newly delete, when known (`None` for key ranges,
    /// counted on read).
    pub rows: Option<u64>,
    /// Data files this round uploaded (update: the rows it rewrote).
    pub files: Vec<DataFile>,
}

/// An operation to commit through [`rewrite`].
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// `"delete"`, `"upsert"`, `"update"`: the history's operation.
    pub operation: &'static str,
    /// Operation parameters recorded with the version (the filter, ...).
    pub params: BTreeMap<String, Value>,
    /// The rows removed are among these: a file added meanwhile whose
    /// statistics rule it out needs no round. `None`: any file may hold
    /// them (an expression filter), so every new file is planned.
    pub predicate: Option<Predicate>,
    /// Data files committed whatever the plan finds (an upsert's rows),
    /// already uploaded; removed on failure like the rounds' own.
    pub files: Vec<DataFile>,
    /// Whether the new rows are computed from the rows removed (update): a
    /// concurrent tombstone on a file a round read restarts the operation.
    pub reads_rows: bool,
    /// The `schema.arrow_schema` text the rows were checked against; a
    /// commit that finds another fails with `SchemaMismatch`. With a schema
    /// change (merge mode) the new schema and its description.
    pub schema: Option<CheckedSchema>,
    /// Whether a version is committed even when the plan removes no row
    /// and nothing is added (a replace: re-materialising a partition adds
    /// exactly one version, whatever it held).
    pub commits_always: bool,
}

impl Rewrite {
    /// How much of a version its rounds and commit load: with a predicate,
    /// the segments whose statistics can hold rows it matches (the rest
    /// are kept as they are, and record the old schema if it changes the
    /// schema); without one, the whole file list.
    fn depth(&self) -> versions::Depth {
        match (&self.predicate, &self.schema) {
            (None, _) => versions::Depth::Full,
            (Some(p), Some((_, Some(_)))) => versions::Depth::ChangingSchema(Box::new(
                versions::Depth::Where(Arc::new(p.clone())),
            )),
            (Some(p), _) => versions::Depth::Where(Arc::new(p.clone())),
        }
    }
}

/// The schema text an operation checked its rows against, and the schema
/// change it makes (the new schema and its description), if any.
pub type CheckedSchema = (String, Option<(TableSchema, Vec<String>)>);

/// What [`rewrite`] did.
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The version after it (the latest, unchanged, if nothing was done).
    pub manifest: TableManifest,
    /// Rows removed, when known.
    pub rows: Option<u64>,
    /// Rows added (in new data files).
    pub rows_added: u64,
    /// Whether a version was committed.
    pub committed: bool,
}

impl Rewritten {
    /// This result, once its INFO line is logged if it committed (see
    /// [`super::commit::log_committed`]; `started`: the operation's start).
    pub fn logged(
        self,
        store: &StoreHandle,
        table: &str,
        started: &crate::store::counted::Started,
    ) -> Self {
        if self.committed {
            super::commit::log_committed(store, table, &self.manifest, started);
        }
        self
    }
}

/// A tombstone a round wrote, not yet committed.
struct Written {
    /// Relative to the table key.
    name: String,
    /// The data files its entries mark.
    files: Vec<String>,
    /// Its SHA-256, recorded in the manifest.
    sha256: String,
}

/// Everything the rounds so far planned and wrote.
#[derive(Default)]
struct Progress {
    tombstones: Vec<Written>,
    files: Vec<DataFile>,
    planned: BTreeSet<String>,
    /// Files a round marked rows of (the rows it read).
    read: BTreeSet<String>,
    /// The tombstones of the version the last round planned on.
    seen: BTreeSet<String>,
    rows: Option<u64>,
}

impl Progress {
    fn new(base: &TableManifest) -> Self {
        Self {
            seen: base.tombstones.iter().map(|t| t.path.clone()).collect(),
            rows: Some(0),
            ..Default::default()
        }
    }

    /// Whether `now` removed a file a tombstone marks, or (for an operation
    /// that reads rows) added a tombstone on a file a round read.
    fn invalidated_by(&self, now: &TableManifest, reads_rows: bool) -> bool {
        let present: BTreeSet<&str> = now.data_files.iter().map(|f| f.path.as_str()).collect();
        let lost = self
            .tombstones
            .iter()
            .flat_map(|w| &w.files)
            .any(|f| !present.contains(f.as_str()));
        let overwritten = reads_rows
            && now.tombstones.iter().any(|t| {
                !self.seen.contains(&t.path) && t.files.iter().any(|f| self.read.contains(f))
            });
        lost || overwritten
    }

    /// Remove every object the rounds wrote (best effort).
    fn forget(&mut self, store: &StoreHandle, table: &str) {
        let root = table.trim_end_matches('/');
        let keys: Vec<String> = self
            .tombstones
            .iter()
            .map(|w| format!("{root}/{}", w.name))
            .chain(self.files.iter().map(|f| format!("{root}/{}", f.path)))
            .collect();
        if !keys.is_empty() {
            let _ = crate::runtime::block_on(store.delete_many(&keys));
        }
        self.tombstones.clear();
        self.files.clear();
        self.planned.clear();
        self.read.clear();
    }
}

/// Commit `op`: plan rounds with `plan(base, files not planned yet)` until a
/// commit wins (see the module docs). `plan` may be called again from
/// scratch after a start-over. `first`, the latest version as the caller
/// already read it, is the first round's base (saving its reads); later
/// rounds read the latest again.
pub fn rewrite<P>(
    store: &Arc<StoreHandle>,
    table: &str,
    op: Rewrite,
    mut first: Option<versions::Latest>,
    mut plan: P,
) -> Result<Rewritten>
where
    P: FnMut(&TableManifest, &[DataFile]) -> Result<Round>,
{
    crate::store::keys::object_segments(table)?;
    let mut progress: Option<Progress> = None;
    let fail = |progress: &mut Option<Progress>, op: &Rewrite, e: Error| {
        if super::write::may_discard(&e) {
            if let Some(p) = progress.as_mut() {
                p.forget(store, table);
            }
            super::write::discard(store, table, &op.files);
        }
        e
    };
    for _ in 0..MAX_REPLANS {
        let latest = match first.take() {
            // The caller's read: its root, loaded here as deep as `op` needs.
            Some(mut l) => {
                let loaded = if l.manifest.layout.view == super::snapshot::View::Root {
                    use versions::Versioned;
                    crate::runtime::block_on(l.manifest.load(store, table, op.depth()))
                        .and_then(|r| r)
                } else {
                    Ok(())
                };
                loaded.map(|()| l)
            }
            None => versions::latest_existing_at(store, table, op.depth()),
        };
        let latest = match latest {
            Ok(l) => l,
            Err(e) => return Err(fail(&mut progress, &op, e)),
        };
        let base = latest.manifest.clone();
        if let Some(schema) = &op.schema {
            if base.schema.arrow_schema != schema.0 {
                return Err(fail(&mut progress, &op, schema_changed(table)));
            }
        }
        let state = match progress.as_mut() {
            Some(p) if p.invalidated_by(&base, op.reads_rows) => {
                p.forget(store, table);
                progress.insert(Progress::new(&base))
            }
            Some(p) => {
                // No tombstone since the last round touches what it read:
                // this round plans on `base`, with its deletes applied.
                p.seen
                    .extend(base.tombstones.iter().map(|t| t.path.clone()));
                p
            }
            None => progress.insert(Progress::new(&base)),
        };
        let unseen: Vec<DataFile> = base
            .data_files
            .iter()
            .filter(|f| !state.planned.contains(&f.path))
            .cloned()
            .collect();
        let round = match plan(&base, &unseen) {
            Ok(r) => r,
            Err(e) => return Err(fail(&mut progress, &op, e)),
        };
        let state = progress
            .as_mut()
            .ok_or_else(|| Error::Task("no plan".into()))?;
        state.planned.extend(unseen.iter().map(|f| f.path.clone()));
        state.rows = match (state.rows, round.rows) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        state.files.extend(round.files);
        state
            .read
            .extend(round.entries.iter().map(|e| e.file().to_string()));
        if !round.entries.is_empty() {
            let put =
                crate::runtime::block_on(Tombstone::put(store, table, base.version, round.entries))
                    .and_then(|r| r);
            match put {
                Ok(r) => state.tombstones.push(Written {
                    name: r.path,
                    files: r.files,
                    sha256: r.sha256,
                }),
                Err(e) => return Err(fail(&mut progress, &op, e)),
            }
        }
        let state = progress
            .as_ref()
            .ok_or_else(|| Error::Task("no plan".into()))?;
        if !op.commits_always
            && state.tombstones.is_empty()
            && state.files.is_empty()
            && op.files.is_empty()
        {
            return Ok(Rewritten {
                manifest: base,
                rows: Some(0),
                rows_added: 0,
                committed: false,
            });
        }
        match try_commit(store, table, latest, &op, state) {
            Ok(Some(manifest)) => {
                let rows_added = op
                    .files
                    .iter()
                    .chain(&state.files)
                    .map(|f| f.total_rows)
                    .sum();
                return Ok(Rewritten {
                    manifest,
                    rows: state.rows,
                    rows_added,
                    committed: true,
                });
            }
            // Files were added or removed meanwhile: plan what changed.
            Ok(None) => continue,
            Err(e) => return Err(fail(&mut progress, &op, e)),
        }
    }
    let e = Error::CommitConflict {
        key: table.to_string(),
        attempts: MAX_REPLANS,
    };
    Err(fail(&mut progress, &op, e))
}

fn schema_changed(table: &str) -> Error {
    Error::SchemaMismatch {
        key: table.to_string(),
        reason: "the table's schema changed while this operation ran; nothing was \
                 changed, retry it"
            .into(),
    }
}

/// Commit what the rounds wrote; `None` if the version found has data files
/// not planned whose statistics do not rule the operation out, or
/// invalidates the plan (see [`Progress::invalidated_by`]): the caller plans
/// again. Removes nothing.
fn try_commit(
    store: &Arc<StoreHandle>,
    table: &str,
    latest: versions::Latest,
    op: &Rewrite,
    state: &Progress,
) -> Result<Option<TableManifest>> {
    let mut stale = false;
    let added: Vec<&DataFile> = op.files.iter().chain(&state.files).collect();
    let rows_added: u64 = added.iter().map(|f| f.total_rows).sum();
    let opts = CommitOptions {
        depth: op.depth(),
        ..Default::default()
    };
    let out =
        crate::runtime::block_on(commit::commit(store, table, &opts, Some(latest), |now| {
            let now = now.ok_or_else(|| Error::NotFound {
                path: table.to_string(),
            })?;
            if let Some(schema) = &op.schema {
                if now.schema.arrow_schema != schema.0 {
                    return Err(schema_changed(table));
                }
            }
            let fresh: Vec<&DataFile> = now
                .data_files
                .iter()
                .filter(|d| !state.planned.contains(&d.path))
                .collect();
            let mut unseen = false;
            if !fresh.is_empty() {
                match &op.predicate {
                    None => unseen = true,
                    Some(predicate) => {
                        let schema = now.arrow_schema(&manifest_key(table, now.version))?;
                        let bound = predicate.clone().bind(&schema)?;
                        for d in fresh {
                            unseen |= file_may_match(d, &schema, &bound)?;
                        }
                    }
                }
            }
            if unseen || state.invalidated_by(now, op.reads_rows) {
                stale = true;
                return Ok(None);
            }
            let mut next = now.clone();
            next.created_at = now_iso8601();
            next.operation = op.operation.into();
            next.operation_parameters = op.params.clone();
            next.operation_parameters.insert(
                "rows_deleted".into(),
                state.rows.map_or(Value::Null, Value::from),
            );
            if !added.is_empty() {
                next.operation_parameters
                    .insert("rows_added".into(), rows_added.into());
                next.operation_parameters
                    .insert("files_added".into(), added.len().into());
            }
            let names: Vec<Value> = state
                .tombstones
                .iter()
                .map(|w| Value::from(w.name.clone()))
                .collect();
            match names.len() {
                0 => {}
                1 => {
                    next.operation_parameters
                        .insert("tombstone".into(), names[0].clone());
                }
                _ => {
                    next.operation_parameters
                        .insert("tombstone".into(), Value::Array(names));
                }
            }
            if let Some((_, Some((schema, change)))) = &op.schema {
                next.record_schema_change(schema.clone())?;
                next.operation_parameters
                    .insert("schema_change".into(), change.clone().into());
            }
            next.tombstones
                .extend(state.tombstones.iter().map(|w| TombstoneRef {
                    path: w.name.clone(),
                    files: w.files.clone(),
                    sha256: w.sha256.clone(),
                }));
            next.data_files.extend(added.iter().map(|f| (*f).clone()));
            Ok(Some(next))
        }))??;
    match out {
        Outcome::Committed { manifest, .. } => Ok(Some(*manifest)),
        Outcome::Unchanged { .. } if stale => Ok(None),
        Outcome::Unchanged { .. } => {
            Err(Error::Task(format!("{} committed nothing", op.operation)))
        }
    }
}
