//! Publishing the Delta log: the entries it lacks, in version order, each
//! after the deletion-vector files it names, and a checkpoint every
//! [`CHECKPOINT_INTERVAL`] versions.
//!
//! Every entry is written create-only with bytes that are a function of
//! pds's versions ([`crate::table::delta::entry`]), so a process that finds
//! an object there already accepts it only if it holds exactly those bytes
//! (another process published it, or this one before a lost reply). Any
//! other entry is a commit pds did not make: `ManifestCorrupted` naming it,
//! and nothing more is written. Entries are written in order, so a process
//! that stops between two leaves the log at a consistent earlier version,
//! and the next publish fills the gap.
//!
//! **Where the log starts.** A table published from its creation (`since`
//! 0) has an entry for every version. One whose view was enabled later
//! starts with a checkpoint of version `since` and has entries after it.
//! Entries below the newest checkpoint may have been removed by vacuum;
//! they are not written again.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::store::StoreHandle;
use crate::table::changes::changed_part;
use crate::table::delta::checkpoint::write_checkpoint;
use crate::table::delta::entry::{entry, entry_path};
use crate::table::delta::log_objects::{foreign, own, own_vectors};
use crate::table::scan::{resolve_at, At};
use crate::table::snapshot::TableManifest;
use crate::table::versions::Depth;

/// A checkpoint is written at every version that is a multiple of this,
/// and at the latest version when the newest checkpoint (or the log's
/// start) is this many versions behind (one a stopped writer missed).
pub const CHECKPOINT_INTERVAL: u64 = 100;

/// What `_delta_log` holds: the versions with an entry, and those with a
/// checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Logged {
    pub entries: BTreeSet<u64>,
    pub checkpoints: BTreeSet<u64>,
}

/// The version a log object name stands for, and whether it is a
/// checkpoint (`None`: not an entry or single-file checkpoint).
pub fn log_object(name: &str) -> Option<(u64, bool)> {
    let (digits, checkpoint) = match name.strip_suffix(".checkpoint.parquet") {
        Some(d) => (d, true),
        None => (name.strip_suffix(".json")?, false),
    };
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, checkpoint))
}

/// What `table`'s `_delta_log` holds (1 LIST). Other objects there
/// (`_last_checkpoint`) are neither.
pub async fn logged(store: &StoreHandle, table: &str) -> Result<Logged> {
    let folder = format!("{}/_delta_log", table.trim_end_matches('/'));
    let listing = match store.list(&folder, false).await {
        Ok(l) => l,
        Err(Error::NotFound { .. }) => return Ok(Logged::default()),
        Err(e) => return Err(e),
    };
    let mut out = Logged::default();
    for m in &listing.objects {
        let Some(name) = m.key.rsplit('/').next() else {
            continue;
        };
        match log_object(name) {
            Some((v, true)) => out.checkpoints.insert(v),
            Some((v, false)) => out.entries.insert(v),
            None => false,
        };
    }
    Ok(out)
}

/// What one publish wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// The versions whose entries it wrote.
    pub entries: Vec<u64>,
    /// The versions whose checkpoints it wrote.
    pub checkpoints: Vec<u64>,
}

impl Published {
    /// Every version it wrote an entry or a checkpoint of, in order.
    pub fn versions(&self) -> Vec<u64> {
        let all: BTreeSet<u64> = self
            .entries
            .iter()
            .chain(&self.checkpoints)
            .copied()
            .collect();
        all.into_iter().collect()
    }
}

/// Write what the log of `table` lacks up to version `upto` (`since`: the
/// first version published; see the module docs): the starting checkpoint
/// if the view was enabled after creation, the missing entries in order,
/// and the checkpoints due. An entry or checkpoint the log holds past
/// `upto`, or an entry that differs from pds's, is `ManifestCorrupted`
/// naming it.
///
/// Cost: 1 LIST (and a HEAD if the log holds versions past `upto`: a
/// writer that committed since); per entry written, the roots of its two
/// versions (the earlier one read already for the one before) and the
/// segments they do not share, the tombstones and key columns its deletion
/// vectors need, and its PUTs; per checkpoint, every segment, and the same
/// for every file with deleted rows.
pub async fn publish(store: &StoreHandle, table: &str, since: u64, upto: u64) -> Result<Published> {
    let logged = logged(store, table).await?;
    // Past `upto`: another writer's newer commit (its version exists), or
    // an object pds did not write.
    let past = upto.saturating_add(1)..;
    let entry_past = logged.entries.range(past.clone()).next_back().copied();
    let check = logged.checkpoints.range(past).next_back().copied();
    for (v, path) in [
        entry_past.map(|v| (v, entry_path(v))),
        check.map(|v| (v, super::checkpoint::checkpoint_path(v))),
    ]
    .into_iter()
    .flatten()
    {
        match store.head(&crate::table::manifest_key(table, v)).await {
            Ok(_) => {}
            Err(Error::NotFound { .. }) => {
                return Err(foreign(table, &path, "past the table's latest version"))
            }
            Err(e) => return Err(e),
        }
    }
    let mut out = Published::default();
    let mut newest = logged.checkpoints.range(since..).next_back().copied();
    // Roots only: each entry loads just the segments its two versions do
    // not share (`changes::changed_part`); a checkpoint loads them all.
    let root_of = |v: u64| resolve_at(store, table, At::Version(v), Depth::Root);
    let mut prev: Option<TableManifest> = None;
    if since > 0 && !logged.checkpoints.contains(&since) {
        // The view starts here: its first checkpoint.
        let m = root_of(since).await?;
        write_checkpoint(store, table, &m, newest).await?;
        out.checkpoints.push(since);
        newest = newest.max(Some(since));
        prev = Some(m);
    }
    // Entries below the newest checkpoint are not needed (vacuum may have
    // removed them): only those after it are written.
    let first = match newest {
        Some(c) => c + 1,
        None => since,
    };
    let missing: Vec<u64> = (first..=upto)
        .filter(|v| !logged.entries.contains(v))
        .collect();
    for &v in &missing {
        let before = match prev.take() {
            Some(m) if v > since && m.version == v - 1 => Some(m),
            _ if v > since => Some(root_of(v - 1).await?),
            _ => None,
        };
        let cur = root_of(v).await?;
        let (was, now) = changed_part(store, table, before.as_ref(), &cur).await?;
        let at = crate::table::manifest_key(table, v);
        let e = entry(store, table, was.as_ref(), &now, &at).await?;
        let root = table.trim_end_matches('/');
        own_vectors(store, table, &e.dv_files, v).await?;
        let path = entry_path(v);
        own(store, &format!("{root}/{path}"), &e.bytes, table, v).await?;
        out.entries.push(v);
        if v > since && v % CHECKPOINT_INTERVAL == 0 && !logged.checkpoints.contains(&v) {
            write_checkpoint(store, table, &cur, newest).await?;
            out.checkpoints.push(v);
            newest = newest.max(Some(v));
        }
        prev = Some(cur);
    }
    // A checkpoint a stopped writer missed: one at the latest version.
    let base = newest.unwrap_or(since);
    if upto >= base.saturating_add(CHECKPOINT_INTERVAL) {
        let m = match prev {
            Some(m) if m.version == upto => m,
            _ => root_of(upto).await?,
        };
        write_checkpoint(store, table, &m, newest).await?;
        out.checkpoints.push(upto);
    }
    Ok(out)
}

/// Publish what the formats of `table` lack up to its latest version: the
/// versions written, per format (see [`publish`]).
pub async fn sync(
    store: &StoreHandle,
    table: &str,
) -> Result<std::collections::BTreeMap<String, Published>> {
    let latest = crate::table::scan::resolve_at(store, table, At::Latest, Depth::Root).await?;
    let mut out = std::collections::BTreeMap::new();
    if let Some(delta) = latest.formats.get("delta") {
        let written = publish(store, table, delta.since, latest.version).await?;
        out.insert("delta".to_string(), written);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::filter::predicate;
    use crate::store::PutMode;
    use crate::table::delete::delete;
    use crate::table::scan::resolve;
    use crate::table::tests::{append_ids, cond, counting_store, create_keyed, int, text};
    use bytes::Bytes;

    /// A table created publishing `delta` logs every commit, whatever the
    /// operation: its entries are versions 0..=latest, each what
    /// [`entry`] computes from pds's versions. With `PDS_DELTA_KEEP=<dir>`
    /// the table is left there for a Delta reader.
    #[test]
    fn every_commit_of_a_table_publishing_delta_is_logged() {
        use crate::table::compact::{compact, CompactOptions};
        use crate::table::tests::rows;
        use crate::table::upsert::upsert;
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let root = std::env::var("PDS_DELTA_KEEP")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| dir.path().to_path_buf());
        std::fs::create_dir_all(&root).unwrap();
        let url = url::Url::from_directory_path(&root).unwrap().to_string();
        let store = Arc::new(StoreHandle::open(&url, &Default::default()).unwrap());
        crate::table::delta::test_tables::create_with_view(&store, 0..1000);
        append_ids(&store, 1000..2000).unwrap();
        crate::table::delta::test_tables::delete_every_kind(&store);
        upsert(
            store.clone(),
            "t",
            rows(1500..2500),
            crate::table::schema::SchemaMode::Strict,
            2,
        )
        .unwrap();
        let opts = CompactOptions::deleted(0.1);
        compact(store.clone(), "t", opts).unwrap();
        let latest = crate::runtime::block_on(resolve(&store, "t", At::Latest))
            .unwrap()
            .unwrap();
        assert_eq!(
            latest.version, 6,
            "create, append, 3 deletes, upsert, compact"
        );
        let logged = crate::runtime::block_on(logged(&store, "t"))
            .unwrap()
            .unwrap()
            .entries;
        assert_eq!(
            logged.into_iter().collect::<Vec<_>>(),
            (0..=latest.version).collect::<Vec<_>>()
        );
        assert_entries_are_the_whole_versions(&store, latest.version);
    }

    /// Every entry of table `t` up to `latest` holds exactly the bytes
    /// [`entry`] computes from the two whole versions.
    fn assert_entries_are_the_whole_versions(store: &StoreHandle, latest: u64) {
        let mut prev = None;
        for v in 0..=latest {
            let m = crate::runtime::block_on(resolve(store, "t", At::Version(v)))
                .unwrap()
                .unwrap();
            let e = crate::runtime::block_on(entry(store, "t", prev.as_ref(), &m, "t/m"))
                .unwrap()
                .unwrap();
            let there = crate::runtime::block_on(store.get(&format!("t/{}", entry_path(v))))
                .unwrap()
                .unwrap();
            assert_eq!(there.as_ref(), e.bytes.as_slice(), "version {v}");
            prev = Some(m);
        }
    }

    #[test]
    fn publish_fills_what_the_log_lacks_and_refuses_foreign_entries() {
        let (store, _) = counting_store();
        create_keyed(&store, 0..300);
        append_ids(&store, 300..600).unwrap();
        let run = |upto| {
            crate::runtime::block_on(publish(&store, "t", 0, upto))
                .unwrap()
                .map(|p| p.entries)
        };
        assert_eq!(run(1).unwrap(), vec![0, 1]);
        assert_eq!(run(1).unwrap(), Vec::<u64>::new(), "nothing left to write");
        delete(
            store.clone(),
            "t",
            predicate(vec![cond("customer", "==", text("c1"))]).unwrap(),
            2,
        )
        .unwrap();
        delete(
            store.clone(),
            "t",
            predicate(vec![cond("id", "<", int(10))]).unwrap(),
            2,
        )
        .unwrap();
        // A process that stopped after version 2's entry: the next fills 3.
        assert_eq!(run(2).unwrap(), vec![2]);
        assert_eq!(run(3).unwrap(), vec![3]);
        let entries = crate::runtime::block_on(logged(&store, "t"))
            .unwrap()
            .unwrap()
            .entries;
        assert_eq!(entries.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3]);

        // A missing entry below the last (removed by hand) is written again, alike.
        let key = format!("t/{}", entry_path(1));
        let bytes = crate::runtime::block_on(store.get(&key)).unwrap().unwrap();
        crate::runtime::block_on(store.delete(&key))
            .unwrap()
            .unwrap();
        assert_eq!(run(3).unwrap(), vec![1]);
        assert_eq!(
            crate::runtime::block_on(store.get(&key)).unwrap().unwrap(),
            bytes
        );

        // Another writer's entry: at the next version, or in place of a missing one.
        let next = format!("t/{}", entry_path(4));
        crate::runtime::block_on(store.put(&next, Bytes::from_static(b"{}\n"), PutMode::Create))
            .unwrap()
            .unwrap();
        let err = run(3).unwrap_err();
        assert!(
            matches!(&err, Error::ManifestCorrupted { path, .. } if path == &next),
            "{err}"
        );
        crate::runtime::block_on(store.delete(&next))
            .unwrap()
            .unwrap();
        // A create that meets other bytes (another writer won the race for a
        // missing entry) stops the publish, naming the entry.
        let err = crate::runtime::block_on(own(&store, &key, b"{}\n", "t", 1))
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(&err, Error::ManifestCorrupted { path, .. } if path == &key),
            "{err}"
        );
        crate::runtime::block_on(own(&store, &key, &bytes, "t", 1))
            .unwrap()
            .unwrap();

        // An entry past `upto` whose version pds holds is another writer's
        // newer commit, published before this writer got to its own: fine.
        append_ids(&store, 600..700).unwrap();
        assert_eq!(run(4).unwrap(), vec![4]);
        assert_eq!(run(3).unwrap(), Vec::<u64>::new());
    }

    /// A view enabled on an existing table starts with a checkpoint of the
    /// version that enables it, and entries follow it; enabling it again
    /// commits nothing. An unknown format is refused before any request.
    #[test]
    fn a_view_enabled_later_starts_with_a_checkpoint() {
        use crate::table::enable_format::enable_format;
        let (store, counts) = counting_store();
        create_keyed(&store, 0..1000);
        append_ids(&store, 1000..2000).unwrap();
        crate::table::delta::test_tables::delete_every_kind(&store);
        counts.take();
        let err = crate::runtime::block_on(enable_format(&store, "t", "iceberg"))
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert_eq!(counts.take(), [0; 5], "no request for an unknown format");

        let e = crate::runtime::block_on(enable_format(&store, "t", "delta"))
            .unwrap()
            .unwrap();
        assert_eq!((e.since, e.version, e.committed), (5, 5, true));
        let log = crate::runtime::block_on(logged(&store, "t"))
            .unwrap()
            .unwrap();
        assert_eq!(log.checkpoints.into_iter().collect::<Vec<_>>(), [5]);
        assert!(log.entries.is_empty());
        let hint = crate::runtime::block_on(store.get("t/_delta_log/_last_checkpoint"))
            .unwrap()
            .unwrap();
        let hint: serde_json::Value = serde_json::from_slice(&hint).unwrap();
        assert_eq!(hint["version"], 5);
        assert_eq!(hint["numOfAddFiles"], 2);

        append_ids(&store, 2000..2100).unwrap();
        let log = crate::runtime::block_on(logged(&store, "t"))
            .unwrap()
            .unwrap();
        assert_eq!(log.entries.into_iter().collect::<Vec<_>>(), [6]);
        let again = crate::runtime::block_on(enable_format(&store, "t", "delta"))
            .unwrap()
            .unwrap();
        assert_eq!((again.since, again.version, again.committed), (5, 6, false));
    }

    /// A checkpoint at every hundredth version; one a stopped writer missed
    /// is written at the latest version by the next publish. Vacuum then
    /// removes the entries below the newest retained checkpoint and the
    /// vectors no retained version names, and publishing again writes none
    /// of them back.
    #[test]
    fn checkpoints_every_hundred_versions_and_vacuum_keeps_what_opens_the_retained_ones() {
        use crate::table::vacuum::{vacuum, VacuumOptions};
        let (store, _) = counting_store();
        crate::table::delta::test_tables::create_with_view(&store, 0..1000);
        let delete_where = |conditions| {
            delete(store.clone(), "t", predicate(conditions).unwrap(), 2).unwrap();
        };
        delete_where(vec![cond("customer", "==", text("c1"))]);
        delete_where(vec![cond("customer", "==", text("c2"))]);
        let vectors = |store: &StoreHandle| -> BTreeSet<String> {
            crate::runtime::block_on(store.list("t", false))
                .unwrap()
                .unwrap()
                .objects
                .iter()
                .filter_map(|o| o.key.strip_prefix("t/"))
                .filter(|k| k.starts_with("deletion_vector_"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            vectors(&store).len(),
            2,
            "one per tombstone set of the file"
        );
        for i in 3..=100 {
            append_ids(&store, 1000 + i..1001 + i).unwrap();
        }
        let log = crate::runtime::block_on(logged(&store, "t"))
            .unwrap()
            .unwrap();
        assert_eq!(log.checkpoints.iter().copied().collect::<Vec<_>>(), [100]);
        assert_eq!(log.entries.len(), 101);

        // A writer that stopped after entry 100, before its checkpoint.
        for key in [
            format!("t/{}", super::super::checkpoint::checkpoint_path(100)),
            format!("t/{}", super::super::checkpoint::LAST_CHECKPOINT),
        ] {
            crate::runtime::block_on(store.delete(&key))
                .unwrap()
                .unwrap();
        }
        append_ids(&store, 5000..5001).unwrap();
        let log = crate::runtime::block_on(logged(&store, "t"))
            .unwrap()
            .unwrap();
        assert_eq!(log.checkpoints.iter().copied().collect::<Vec<_>>(), [101]);

        let opts = VacuumOptions {
            retain: chrono::Duration::zero(),
            min_age: chrono::Duration::zero(),
            keep_versions: false,
            dry_run: false,
            progress: None,
        };
        let tomorrow = chrono::Utc::now() + chrono::Duration::days(1);
        let gone = crate::runtime::block_on(vacuum(&store, "t", &opts, tomorrow))
            .unwrap()
            .unwrap();
        let log = crate::runtime::block_on(logged(&store, "t"))
            .unwrap()
            .unwrap();
        assert_eq!(log.checkpoints.iter().copied().collect::<Vec<_>>(), [101]);
        assert_eq!(log.entries.iter().copied().collect::<Vec<_>>(), [101]);
        let removed_entries = gone
            .removed
            .iter()
            .filter(|k| k.starts_with("_delta_log/"))
            .count();
        assert_eq!(removed_entries, 101);
        assert_eq!(vectors(&store).len(), 1, "the superseded vector is removed");
        assert!(
            crate::runtime::block_on(store.get("t/_delta_log/_last_checkpoint"))
                .unwrap()
                .is_ok()
        );
        let again = crate::runtime::block_on(publish(&store, "t", 0, 101))
            .unwrap()
            .unwrap();
        assert_eq!(
            again,
            Published::default(),
            "nothing below the checkpoint again"
        );
    }

    /// On a table of several segments each entry loads only the segments
    /// its two versions do not share, and is byte for byte the entry of
    /// the two whole versions.
    #[test]
    fn entries_of_a_segmented_table_equal_those_of_the_whole_versions() {
        use crate::table::compact::{compact, CompactOptions};
        let (store, _) = counting_store();
        crate::table::delta::test_tables::create_with_view(&store, 0..100);
        for i in 1..=40 {
            append_ids(&store, i * 100..i * 100 + 100).unwrap();
        }
        delete(
            store.clone(),
            "t",
            predicate(vec![cond("id", "<", int(5))]).unwrap(),
            2,
        )
        .unwrap();
        delete(
            store.clone(),
            "t",
            predicate(vec![cond("customer", "==", text("c3"))]).unwrap(),
            2,
        )
        .unwrap();
        append_ids(&store, 9000..9100).unwrap();
        let segmented = crate::runtime::block_on(resolve(&store, "t", At::Latest))
            .unwrap()
            .unwrap();
        assert!(segmented.segments.len() >= 2, "{:?}", segmented.segments);
        let opts = CompactOptions::deleted(0.5);
        compact(store.clone(), "t", opts).unwrap();
        let latest = crate::runtime::block_on(resolve(&store, "t", At::Latest))
            .unwrap()
            .unwrap();
        assert_entries_are_the_whole_versions(&store, latest.version);
        // An append's entry loads the segment it changed, not the others.
        let before = crate::runtime::block_on(resolve_at(
            &store,
            "t",
            At::Version(latest.version - 2),
            Depth::Root,
        ))
        .unwrap()
        .unwrap();
        let after = crate::runtime::block_on(resolve_at(
            &store,
            "t",
            At::Version(latest.version - 1),
            Depth::Root,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(after.operation, "append");
        let (was, now) = crate::runtime::block_on(changed_part(&store, "t", Some(&before), &after))
            .unwrap()
            .unwrap();
        let full = crate::runtime::block_on(resolve(&store, "t", At::Version(after.version)))
            .unwrap()
            .unwrap();
        assert!(
            now.data_files.len() < full.data_files.len() / 2,
            "{} of {} files loaded",
            now.data_files.len(),
            full.data_files.len()
        );
        assert!(was.unwrap().data_files.len() < full.data_files.len() / 2);
    }
}
