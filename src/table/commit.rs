//! The commit loop: read the latest version, build the next, create its
//! manifest create-only, then move the pointer.
//!
//! See the module docs of [`crate::table`] for why the create-only manifest
//! name, not the pointer, decides which writer gets a version. Building the
//! next version is the caller's (`prepare`), kept apart from trying it: an
//! append rebases on whatever won meanwhile; a delete or compaction can
//! re-validate the files it touched, or give up.
//!
//! Reading versions (the pointer, the roll-forward past it, the depth a
//! version is loaded to) is [`super::versions`]'s; its items are re-exported
//! here for the callers that commit.

use std::time::Duration;

use bytes::Bytes;

use super::snapshot::TableManifest;
use super::{manifest_key, pointer_key, Pointer};
use crate::error::{Error, Result};
use crate::store::{PutMode, StoreHandle};

use super::versions::{latest_at, read_version_at, Depth, Latest, Versioned};

/// A base read longer ago than this (an append that uploaded for a long
/// time, say) is read again before a commit attempt builds on it. Vacuum
/// removes no manifest younger than its `min_age` (1 hour by default), so
/// an attempt never builds on a version whose successor vacuum removed
/// (which would let it create that name again, below the latest).
pub const MAX_BASE_AGE: Duration = Duration::from_secs(300);

/// Failed read-backs of a version whose manifest PUT's outcome is unclear
/// before the commit gives up with `CommitUnknown`.
const MAX_SETTLE_FAILURES: u32 = 5;

/// PUTs in a row that fail without a clear answer (after object_store's own
/// retries) before a commit, or a pointer update, stops trying: a store
/// that keeps failing is not waited out for minutes.
const MAX_UNCLEAR: u32 = 4;

/// Compare-and-swap attempts to move the pointer forward before leaving it
/// to the next commit.
const MAX_POINTER_ATTEMPTS: u32 = 16;

/// How hard a commit tries.
#[derive(Debug, Clone)]
pub struct CommitOptions {
    /// Attempts before `CommitConflict`.
    pub max_attempts: u32,
    /// The first backoff after a lost race; doubled each time, with jitter.
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// How much of the latest version each attempt reads before `prepare`
    /// builds on it: an append needs a table's root alone.
    pub depth: Depth,
    /// Build on a version in an earlier format (an upgrade): every other
    /// commit on one is `UpgradeRequired`.
    pub upgrade: bool,
}

impl Default for CommitOptions {
    fn default() -> Self {
        Self {
            max_attempts: 64,
            base_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(500),
            depth: Depth::Full,
            upgrade: false,
        }
    }
}

/// What a commit did.
#[derive(Debug, Clone)]
pub enum Outcome<M = TableManifest> {
    /// A new version was committed.
    Committed { manifest: Box<M>, attempts: u32 },
    /// `prepare` found nothing to commit; the latest version stays.
    Unchanged { version: Option<u64> },
}

/// Remove what an attempt wrote for a manifest that is not committed (its
/// name was another writer's, or the PUT was refused without applying):
/// nothing references it, and nothing ever will. Best effort: what is left
/// is garbage that vacuum removes.
async fn discard(store: &StoreHandle, keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    if let Err(e) = store.delete_many(keys).await {
        log::debug!(target: "pds::table", "{} objects of a lost commit attempt were left for vacuum: {}", keys.len(), crate::store::failure::redact_urls(&e.to_string()));
    }
}

/// Move the pointer forward to `version`: compare-and-swap against the
/// pointer `latest` read (create-only for a table's first version). If
/// another writer moved it meanwhile, re-read it and try again, unless it
/// already names `version` or a later one. The pointer never moves back.
async fn advance_pointer<M>(
    store: &StoreHandle,
    table: &str,
    latest: Option<&Latest<M>>,
    version: u64,
    id: Option<&str>,
) -> Result<()> {
    let key = pointer_key(table);
    let body = Bytes::from(Pointer::new(version, id).to_json()?);
    let mut current = latest.and_then(|l| l.pointer.clone());
    let mut unclear = 0u32;
    for _ in 0..MAX_POINTER_ATTEMPTS {
        let mode = match current.take() {
            Some((e_tag, v)) => PutMode::Update { e_tag, version: v },
            None => PutMode::Create,
        };
        match store.put(&key, body.clone(), mode).await {
            Ok(_) => return Ok(()),
            // A lost race, a retry of its own landed PUT, or a failure after
            // which the PUT may have landed: read the pointer to find out.
            Err(e)
                if matches!(e, Error::Precondition { .. } | Error::AlreadyExists { .. })
                    || (e.may_have_applied() && unclear < MAX_UNCLEAR) =>
            {
                if e.may_have_applied() {
                    unclear += 1;
                    log::debug!(target: "pds::table", "{table}: retrying the pointer PUT (attempt {}) after: {}", unclear + 1, crate::store::failure::redact_urls(&e.to_string()));
                    tokio::time::sleep(Duration::from_millis(20 << unclear)).await;
                }
                let (raw, meta) = match store.get_with_meta(&key).await {
                    Ok(got) => got,
                    // No pointer: a first version's is created; a later
                    // one's is gone because the table was dropped, and is
                    // not brought back.
                    Err(Error::NotFound { .. }) if version == 0 => continue,
                    Err(Error::NotFound { .. }) => return Ok(()),
                    Err(e) => return Err(e),
                };
                let now = Pointer::from_json(&raw, &key)?;
                // Another table at the key (this one was dropped): not ours
                // to move.
                if now.version >= version || super::identity::differ(now.table_id.as_deref(), id) {
                    return Ok(());
                }
                current = Some((meta.e_tag, meta.version));
            }
            Err(e) => return Err(e),
        }
    }
    // Committed all the same; the next commit rolls the pointer forward.
    Ok(())
}

/// Log at INFO (target `pds::table`) that `m` is committed to `table` by
/// the operation that started at `started`: the operation, the version, its
/// numeric parameters (`rows_added`, `files_added`, `rows_deleted`, ...),
/// the bytes it wrote and read, its store requests and its time.
pub fn log_committed(
    store: &StoreHandle,
    table: &str,
    m: &TableManifest,
    started: &crate::store::counted::Started,
) {
    if !log::log_enabled!(target: "pds::table", log::Level::Info) {
        return;
    }
    let (c, ms) = started.cost(store);
    let params: Vec<String> = m
        .operation_parameters
        .iter()
        .filter(|(_, v)| v.is_u64())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    log::info!(
        target: "pds::table",
        "table {table}: {} committed version {} ({}): {} bytes written, {} bytes read, {} requests, {ms:.1} ms",
        m.operation,
        m.version,
        params.join(", "),
        c.bytes_written,
        c.bytes_read,
        c.requests
    );
}

/// A small, dependency-free jitter source.
fn jitter(seed: &mut u64) -> f64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed % 1000) as f64 / 1000.0
}

/// Commit one new version of `table`.
///
/// Each attempt: the latest version (`base` for the first attempt if the
/// caller already read it, else GET pointer + GET manifest), `prepare`
/// builds the next manifest from it (or `None`: nothing to commit), a
/// create-only PUT of `manifest/v<next>.json`, and a compare-and-swap PUT of
/// the pointer. A lost race (the name exists) backs off with jitter and
/// starts over from the new latest version, rolling forward past versions
/// whose writers died; after `max_attempts`, `CommitConflict`.
///
/// An attempt that wins at once costs 2 GETs and 2 PUTs (2 PUTs alone with
/// `base`). The version is committed when its manifest is created; the
/// pointer update lets readers find it in one GET.
///
/// **Faults.** Every manifest this call writes carries one commit id. A
/// manifest PUT that fails without a clear answer (a lost reply, a reset,
/// a timeout), or that is refused because the name exists (perhaps a retry
/// of its own landed PUT), is settled by reading that version back: this
/// writer's id means committed, another's means a lost race, none means it
/// is tried again. Once the manifest exists the commit stands: a failing
/// pointer PUT is left for the next commit to roll forward. If the outcome
/// cannot be learned, `CommitUnknown`; every other error means that no
/// manifest of this call exists or can appear, so its caller may remove the
/// files it uploaded.
pub async fn commit<F>(
    store: &StoreHandle,
    table: &str,
    opts: &CommitOptions,
    base: Option<Latest>,
    prepare: F,
) -> Result<Outcome>
where
    F: FnMut(Option<&TableManifest>) -> Result<Option<TableManifest>>,
{
    let mut prepare = prepare;
    // A version whose schema changed must still be one its formats can
    // publish: checked before its manifest is written.
    let checked = |base: Option<&TableManifest>| -> Result<Option<TableManifest>> {
        let next = prepare(base)?;
        if let Some(n) = &next {
            let changed = base.is_none_or(|b| b.schema.arrow_schema != n.schema.arrow_schema);
            if changed && !n.formats.is_empty() {
                super::formats::check_publishable(n, &*n.arrow_schema(table)?)?;
            }
        }
        Ok(next)
    };
    let out = commit_versioned(store, table, opts, base, checked).await?;
    if let Outcome::Committed { manifest, .. } = &out {
        publish_formats(store, table, manifest).await;
    }
    Ok(out)
}

/// Publish the formats `m`'s table publishes up to `m`'s version, once it
/// is committed (the entries the log lacks first, so a log left behind by
/// a writer that stopped is filled). The version stands whatever happens
/// here: a failure is logged, and the next commit, or `sync_formats`,
/// writes what is missing.
pub async fn publish_formats(store: &StoreHandle, table: &str, m: &TableManifest) {
    if let Some(delta) = m.formats.get("delta") {
        if let Err(e) = super::delta::publish::publish(store, table, delta.since, m.version).await {
            log::warn!(
                "table {table}: version {} is committed, but its Delta log entry was not published ({}); the next commit or Table.sync_formats() writes it",
                m.version,
                crate::error::chain(&e)
            );
        }
    }
}

/// What reading back a version whose manifest PUT this writer tried showed.
enum Settled<M> {
    /// The version is this writer's: committed.
    Ours(M),
    /// Another writer holds the version.
    Theirs,
    /// No manifest of that version exists (yet).
    Absent,
}

/// Read back `version` to learn whether this writer's (`id`) PUT landed.
async fn settle<M: Versioned>(
    store: &StoreHandle,
    table: &str,
    version: u64,
    id: &str,
) -> Result<Settled<M>> {
    // The commit id is in the manifest object itself (a table's root): its
    // segments are not read to tell whose the version is.
    match read_version_at::<M>(store, table, version, Depth::Root).await {
        Ok(m) if m.commit_id() == Some(id) => Ok(Settled::Ours(m)),
        Ok(_) => Ok(Settled::Theirs),
        Err(Error::NotFound { .. }) => Ok(Settled::Absent),
        Err(e) => Err(e),
    }
}

/// A fresh commit id: unique per call of the commit loop.
pub fn new_commit_id() -> String {
    crate::dataset::unique_token()
}

/// [`commit`] for any [`Versioned`] manifest (a pipeline's, say).
pub async fn commit_versioned<M, F>(
    store: &StoreHandle,
    table: &str,
    opts: &CommitOptions,
    base: Option<Latest<M>>,
    mut prepare: F,
) -> Result<Outcome<M>>
where
    M: Versioned,
    F: FnMut(Option<&M>) -> Result<Option<M>>,
{
    let id = new_commit_id();
    let mut seed = (std::process::id() as u64) << 32
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9)
        | 1;
    let mut backoff = opts.base_backoff;
    let mut given = base;
    // The table this commit builds on (`Some(None)`: one without an id):
    // the caller's (see `identity::expecting`), else the first read's.
    let mut held: Option<Option<String>> = super::identity::expected().map(Some);
    // A version whose manifest PUT this call tried without learning whether
    // it landed: settled (read back) before anything else is tried.
    let mut pending: Option<(u64, String)> = None;
    let mut settle_failures = 0;
    let mut unclear_puts = 0;
    let unknown = |why: String| Error::CommitUnknown {
        key: table.to_string(),
        reason: format!("{why} (this commit's id is {id:?}; a version with it is this commit)"),
    };
    for attempt in 1..=opts.max_attempts.max(1) {
        if let Some((v, why)) = pending.take() {
            match settle::<M>(store, table, v, &id).await {
                Ok(Settled::Ours(m)) => {
                    let _ = advance_pointer::<M>(store, table, None, v, m.table_id()).await;
                    return Ok(Outcome::Committed {
                        manifest: Box::new(m),
                        attempts: attempt - 1,
                    });
                }
                Ok(Settled::Theirs) => {}
                // Not there: the next PUT of that version settles it.
                Ok(Settled::Absent) => pending = Some((v, why)),
                Err(e) => {
                    settle_failures += 1;
                    if settle_failures >= MAX_SETTLE_FAILURES {
                        return Err(unknown(format!(
                            "{why}; reading version {v} back failed: {}",
                            crate::error::chain(&e)
                        )));
                    }
                    pending = Some((v, why));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(opts.max_backoff);
                    continue;
                }
            }
        }
        let base = match given.take() {
            Some(b) if b.read_at.elapsed() < MAX_BASE_AGE => Some(b),
            _ => match latest_at::<M>(store, table, attempt > 1, opts.depth.clone()).await {
                Ok(b) => b,
                Err(e) => match &pending {
                    Some((_, why)) => {
                        return Err(unknown(format!("{why}; then {}", crate::error::chain(&e))))
                    }
                    None => return Err(e),
                },
            },
        };
        // Every attempt builds on the table the first one read, and on the
        // one the caller opened if it said which: never on another table
        // created at the key meanwhile, nor on a dropped one.
        let found = base.as_ref().map(|l| l.manifest.table_id());
        let same = match (&held, found) {
            (None, None) => true,
            (None, Some(f)) => {
                held = Some(f.map(str::to_string));
                true
            }
            // An id-less side is an earlier pds's: the same table.
            (Some(h), Some(f)) => !super::identity::differ(h.as_deref(), f),
            // No table any more: it was dropped.
            (Some(_), None) => false,
        };
        if !same {
            let opened = held.as_ref().and_then(|h| h.as_deref());
            let e = super::identity::gone(table, opened, found);
            return Err(match &pending {
                Some((_, why)) => unknown(format!("{why}; then {}", crate::error::chain(&e))),
                None => e,
            });
        }
        // Help a writer that died (or is about to) before moving the pointer.
        // Best effort: the version is committed whether or not this lands.
        if let Some(l) = &base {
            if l.pointed != Some(l.manifest.version()) {
                let _ = advance_pointer(
                    store,
                    table,
                    Some(l),
                    l.manifest.version(),
                    l.manifest.table_id(),
                )
                .await;
            }
        }
        // No silent upgrade: only an upgrade builds on an earlier format.
        let writable = match &base {
            Some(l) if !opts.upgrade => l.manifest.check_writable(table),
            _ => Ok(()),
        };
        let prepared = match writable.and_then(|()| prepare(base.as_ref().map(|l| &l.manifest))) {
            Ok(p) => p,
            Err(e) => match &pending {
                Some((_, why)) => {
                    return Err(unknown(format!("{why}; then {}", crate::error::chain(&e))))
                }
                None => return Err(e),
            },
        };
        let Some(mut next) = prepared else {
            if let Some((_, why)) = &pending {
                return Err(unknown(why.clone()));
            }
            return Ok(Outcome::Unchanged {
                version: base.map(|l| l.manifest.version()),
            });
        };
        let version = match base.as_ref() {
            None => 0,
            Some(l) => {
                l.manifest
                    .version()
                    .checked_add(1)
                    .ok_or_else(|| Error::ManifestCorrupted {
                        path: manifest_key(table, l.manifest.version()),
                        reason: "its version is the last one there can be".into(),
                    })?
            }
        };
        if let Some((v, _)) = &pending {
            if *v != version {
                // The pending version is absent, so the latest is below it.
                return Err(unknown(format!(
                    "version {v} was tried and is absent, but the latest is now {}",
                    version.saturating_sub(1)
                )));
            }
        }
        next.set_version(version, version.checked_sub(1));
        next.set_commit_id(&id);
        // What the manifest references beyond itself (a table's new
        // segments) is written first: unreferenced until the manifest is.
        let written = match next.lay_out(store, table).await {
            Ok(keys) => keys,
            Err(e) => {
                return Err(match &pending {
                    Some((_, why)) => unknown(format!("{why}; then {}", crate::error::chain(&e))),
                    None => e,
                })
            }
        };
        let body = Bytes::from(next.to_json()?);
        // Never write a manifest that readers would refuse (a plan gone
        // stale in a way its prepare missed): the table would be unreadable.
        let key = manifest_key(table, version);
        if let Err(e) = M::from_json(&body, &key, version) {
            let refused = Error::Task(format!(
                "pds refused to commit a manifest that readers would reject (a bug; nothing \
                 was committed by this attempt): {}",
                crate::error::chain(&e)
            ));
            return Err(match &pending {
                Some((_, why)) => unknown(format!("{why}; then {}", crate::error::chain(&refused))),
                None => refused,
            });
        }
        match store.put(&key, body, PutMode::Create).await {
            Ok(_) => {
                let _ =
                    advance_pointer(store, table, base.as_ref(), version, next.table_id()).await;
                return Ok(Outcome::Committed {
                    manifest: Box::new(next),
                    attempts: attempt,
                });
            }
            Err(Error::AlreadyExists { .. }) | Err(Error::Precondition { .. }) => {
                match settle::<M>(store, table, version, &id).await {
                    Ok(Settled::Ours(m)) => {
                        let _ = advance_pointer(store, table, base.as_ref(), version, m.table_id())
                            .await;
                        return Ok(Outcome::Committed {
                            manifest: Box::new(m),
                            attempts: attempt,
                        });
                    }
                    Ok(Settled::Theirs) => {
                        // Its segments: the next attempt lays out anew.
                        discard(store, &written).await;
                        pending = None;
                        log::debug!(target: "pds::table", "{table}: version {version} was taken by another writer; retrying the commit (attempt {} of {})", attempt + 1, opts.max_attempts);
                        let wait = backoff.mul_f64(0.5 + jitter(&mut seed));
                        tokio::time::sleep(wait).await;
                        backoff = (backoff * 2).min(opts.max_backoff);
                    }
                    // Refused as existing, yet absent: a store that lies;
                    // try again after a pause.
                    Ok(Settled::Absent) => {
                        pending = Some((version, "the manifest PUT was refused".into()));
                        tokio::time::sleep(backoff).await;
                    }
                    Err(e) => {
                        // Settled at the top of the next attempt.
                        pending = Some((
                            version,
                            format!(
                                "the manifest PUT of version {version} was refused as existing \
                                 and reading it back failed ({})",
                                crate::error::chain(&e)
                            ),
                        ));
                        tokio::time::sleep(backoff).await;
                    }
                }
            }
            Err(e) if !e.may_have_applied() && pending.is_none() => {
                discard(store, &written).await;
                return Err(e);
            }
            Err(e) => {
                unclear_puts += 1;
                log::debug!(target: "pds::table", "{table}: the manifest PUT of version {version} failed without a clear answer (attempt {unclear_puts}); reading it back: {}", crate::store::failure::redact_urls(&e.to_string()));
                if unclear_puts >= MAX_UNCLEAR {
                    // Stop trying: settle once more below, then give up.
                    pending = Some((
                        version,
                        format!(
                            "the manifest PUT of version {version} failed {unclear_puts} times without \
                             a clear answer ({})",
                            crate::error::chain(&e)
                        ),
                    ));
                    break;
                }
                // The store may have applied the PUT: settle it next round.
                pending = Some((
                    version,
                    format!(
                        "the manifest PUT of version {version} failed ({})",
                        crate::error::chain(&e)
                    ),
                ));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(opts.max_backoff);
            }
        }
    }
    if let Some((v, why)) = pending {
        // One last read-back before giving up.
        return match settle::<M>(store, table, v, &id).await {
            Ok(Settled::Ours(m)) => {
                let _ = advance_pointer::<M>(store, table, None, v, m.table_id()).await;
                Ok(Outcome::Committed {
                    manifest: Box::new(m),
                    attempts: opts.max_attempts,
                })
            }
            Ok(Settled::Theirs) => Err(Error::CommitConflict {
                key: table.to_string(),
                attempts: opts.max_attempts,
            }),
            Ok(Settled::Absent) => Err(unknown(why)),
            Err(e) => Err(unknown(format!("{why}; {}", crate::error::chain(&e)))),
        };
    }
    Err(Error::CommitConflict {
        key: table.to_string(),
        attempts: opts.max_attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::versions::{latest, latest_with, read_version};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn next_manifest(op: &str, files: Vec<super::super::snapshot::DataFile>) -> TableManifest {
        let mut m = super::super::snapshot::tests::manifest(0);
        m.operation = op.into();
        m.data_files = files;
        m
    }

    fn file(name: &str) -> super::super::snapshot::DataFile {
        super::super::snapshot::DataFile {
            path: format!("data/{name}.parquet"),
            size_bytes: 1,
            row_group_count: 1,
            total_rows: 1,
            columns: BTreeMap::new(),
            sha256: "ab".repeat(32),
            schema: None,
            footer_bytes: None,
        }
    }

    /// An append: the base's files plus one new file, whatever the base is.
    fn append(name: String) -> impl FnMut(Option<&TableManifest>) -> Result<Option<TableManifest>> {
        move |base| {
            let mut files = base.map(|b| b.data_files.clone()).unwrap_or_default();
            files.push(file(&name));
            Ok(Some(next_manifest("append", files)))
        }
    }

    /// Commit an append of file `name` with the default options.
    fn append_now(store: &StoreHandle, name: &str) -> Outcome {
        crate::runtime::block_on(commit(
            store,
            "t",
            &CommitOptions::default(),
            None,
            append(name.into()),
        ))
        .and_then(|r| r)
        .unwrap()
    }

    fn stores() -> Vec<(Arc<StoreHandle>, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path())
            .unwrap()
            .to_string();
        vec![
            (
                Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap()),
                None,
            ),
            (
                Arc::new(StoreHandle::open(&url, &BTreeMap::new()).unwrap()),
                Some(dir),
            ),
        ]
    }

    #[test]
    fn concurrent_appends_all_land_exactly_once_in_contiguous_versions() {
        for (store, _dir) in stores() {
            let rt = crate::runtime::get().unwrap();
            let writers = 8;
            let each = 5;
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        for i in 0..each {
                            crate::runtime::block_on(commit(
                                &store,
                                "t",
                                &CommitOptions::default(),
                                None,
                                append(format!("w{w}-{i}")),
                            ))
                            .unwrap()
                            .unwrap();
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let last = rt.block_on(latest(&store, "t")).unwrap().unwrap();
            assert_eq!(last.manifest.version, writers * each - 1);
            assert_eq!(last.pointed, Some(last.manifest.version));
            let mut names: Vec<String> = last
                .manifest
                .data_files
                .iter()
                .map(|f| f.path.clone())
                .collect();
            names.sort();
            names.dedup();
            assert_eq!(
                names.len() as u64,
                writers * each,
                "every append exactly once"
            );
            for v in 0..=last.manifest.version {
                let m = rt.block_on(read_version(&store, "t", v)).unwrap();
                assert_eq!(m.data_files.len() as u64, v + 1);
            }
        }
    }

    #[test]
    fn a_writer_that_died_before_the_pointer_blocks_no_one() {
        for (store, _dir) in stores() {
            let rt = crate::runtime::get().unwrap();
            append_now(&store, "a");
            // A writer created v1 and died before moving the pointer.
            let mut orphan = next_manifest("append", vec![file("a"), file("b")]);
            orphan.version = 1;
            orphan.previous = Some(0);
            // As a current writer writes it: in segments (pds-table/3).
            rt.block_on(orphan.lay_out_segments(&store, "t")).unwrap();
            rt.block_on(store.put(
                &manifest_key("t", 1),
                Bytes::from(orphan.to_json().unwrap()),
                PutMode::Create,
            ))
            .unwrap();
            // Readers and writers alike look past the pointer: the version
            // is committed since its manifest exists.
            let seen = rt.block_on(latest(&store, "t")).unwrap().unwrap();
            assert_eq!((seen.manifest.version, seen.pointed), (1, Some(0)));
            let seen = rt
                .block_on(latest_with(&store, "t", true))
                .unwrap()
                .unwrap();
            assert_eq!((seen.manifest.version, seen.pointed), (1, Some(0)));
            let out = append_now(&store, "c");
            let Outcome::Committed { manifest, .. } = out else {
                panic!("nothing committed")
            };
            assert_eq!(manifest.version, 2);
            assert_eq!(manifest.data_files.len(), 3, "built on the orphaned v1");
            let now = rt.block_on(latest(&store, "t")).unwrap().unwrap();
            assert_eq!((now.manifest.version, now.pointed), (2, Some(2)));
        }
    }

    /// A pointer naming a version whose manifest is missing is the
    /// pointer's corruption, not "no table"; a dataset key says so.
    #[test]
    fn a_pointer_to_a_missing_version_and_a_dataset_key_say_what_is_wrong() {
        for (store, _dir) in stores() {
            let rt = crate::runtime::get().unwrap();
            append_now(&store, "a");
            let bad = Pointer::new(7, None).to_json().unwrap();
            rt.block_on(store.put(&pointer_key("t"), Bytes::from(bad), PutMode::Overwrite))
                .unwrap();
            match rt.block_on(latest(&store, "t")) {
                Err(Error::ManifestCorrupted { path, .. }) => assert_eq!(path, pointer_key("t")),
                other => panic!("{other:?}"),
            }
            let huge = format!(
                "{{\"version\":{},\"manifest\":\"{}\"}}",
                u64::MAX,
                super::super::manifest_name(u64::MAX)
            );
            rt.block_on(store.put(&pointer_key("t"), Bytes::from(huge), PutMode::Overwrite))
                .unwrap();
            assert!(matches!(
                rt.block_on(latest_with(&store, "t", true)),
                Err(Error::ManifestCorrupted { .. })
            ));
            rt.block_on(store.put(
                "ds/manifest.json",
                Bytes::from_static(b"{}"),
                PutMode::Create,
            ))
            .unwrap();
            let err = rt.block_on(super::super::not_found(&store, "ds", "table"));
            assert!(
                matches!(&err, Error::OtherKind { reason, .. } if reason.contains("unfinished dataset") && reason.contains("stored at \"ds\", not a table")),
                "{err}"
            );
            assert!(matches!(
                rt.block_on(super::super::not_found(&store, "none", "table")),
                Error::NotFound { .. }
            ));
        }
    }

    #[test]
    fn a_pointer_naming_a_missing_version_is_manifest_corrupted_naming_the_pointer() {
        for (store, _dir) in stores() {
            let rt = crate::runtime::get().unwrap();
            append_now(&store, "a");
            let body = Bytes::from(Pointer::new(5, None).to_json().unwrap());
            rt.block_on(store.put(&pointer_key("t"), body, PutMode::Overwrite))
                .unwrap();
            for roll_forward in [false, true] {
                let err = rt
                    .block_on(latest_with(&store, "t", roll_forward))
                    .unwrap_err();
                assert!(
                    matches!(&err, Error::ManifestCorrupted { path, reason }
                        if path == "t/_latest_manifest" && reason.contains("version 5")),
                    "{err}"
                );
            }
            // No table at all is still NotFound-free: `None`.
            assert!(rt.block_on(latest(&store, "other")).unwrap().is_none());
        }
    }

    #[test]
    fn nothing_to_commit_and_lost_races_end_cleanly() {
        let store = StoreHandle::open("memory://", &BTreeMap::new()).unwrap();
        let rt = crate::runtime::get().unwrap();
        let out = rt
            .block_on(commit(&store, "t", &CommitOptions::default(), None, |_| {
                Ok(None)
            }))
            .unwrap();
        assert!(matches!(out, Outcome::Unchanged { version: None }));
        // A writer whose version name is always taken gives up with CommitConflict.
        append_now(&store, "a");
        let opts = CommitOptions {
            max_attempts: 3,
            base_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            depth: Depth::Full,
            upgrade: false,
        };
        let store = Arc::new(store);
        let racer = store.clone();
        let err = rt
            .block_on(commit(&store, "t", &opts, None, move |base| {
                // Someone else commits the version this attempt is about to take.
                let next = base.map_or(0, |b| b.version + 1);
                let mut theirs = next_manifest("append", vec![]);
                theirs.version = next;
                theirs.previous = next.checked_sub(1);
                // A current writer's manifest: a root (no files to lay out).
                theirs.layout.laid_out = true;
                let key = manifest_key("t", next);
                let put = racer.put(&key, Bytes::from(theirs.to_json()?), PutMode::Create);
                futures::executor::block_on(put)?;
                Ok(Some(next_manifest("append", vec![])))
            }))
            .unwrap_err();
        assert!(
            matches!(err, Error::CommitConflict { attempts: 3, .. }),
            "{err}"
        );
    }
}
