//! Publishing the Delta log: the entries it lacks, in version order, each
//! after the deletion-vector files it names.
//!
//! Every object is written create-only with bytes that are a function of
//! pds's versions ([`crate::table::delta::entry`]), so a process that finds
//! an object there already accepts it only if it holds exactly those bytes
//! (another process published it, or this one before a lost reply). Any
//! other entry is a commit pds did not make: `ManifestCorrupted` naming it,
//! and nothing more is written. Entries are written in order, so a process
//! that stops between two leaves the log at a consistent earlier version,
//! and the next publish fills the gap.

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::store::StoreHandle;
use crate::table::delta::entry::{entry, entry_path};
use crate::table::scan::{resolve, At};
use crate::table::snapshot::TableManifest;

/// The versions `table`'s `_delta_log` holds entries for (1 LIST). Other
/// objects there (checkpoints, `_last_checkpoint`) are not entries.
pub async fn logged_versions(store: &StoreHandle, table: &str) -> Result<BTreeSet<u64>> {
    let folder = format!("{}/_delta_log", table.trim_end_matches('/'));
    let listing = match store.list(&folder, false).await {
        Ok(l) => l,
        Err(Error::NotFound { .. }) => return Ok(BTreeSet::new()),
        Err(e) => return Err(e),
    };
    Ok(listing
        .objects
        .iter()
        .filter_map(|m| {
            let name = m.key.rsplit('/').next()?;
            let digits = name.strip_suffix(".json")?;
            (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse().ok())
                .flatten()
        })
        .collect())
}

/// Write the entries of versions `since..=upto` of `table` that its log
/// lacks (`since`: the first version published, whose entry holds the
/// whole table); the versions written. An entry the log holds past `upto`,
/// or one that differs from pds's, is `ManifestCorrupted` naming it.
///
/// Cost: 1 LIST; per entry written, its two manifests (the earlier one read
/// already for the one before), the tombstones and key columns its
/// deletion vectors need, and its PUTs.
pub async fn publish(store: &StoreHandle, table: &str, since: u64, upto: u64) -> Result<Vec<u64>> {
    let logged = logged_versions(store, table).await?;
    if let Some(v) = logged.range(upto.saturating_add(1)..).next() {
        return Err(foreign(table, *v, "past the table's latest version"));
    }
    let missing: Vec<u64> = (since..=upto).filter(|v| !logged.contains(v)).collect();
    let mut prev: Option<TableManifest> = None;
    for &v in &missing {
        let before = match prev.take() {
            Some(m) if v > since && m.version == v - 1 => Some(m),
            _ if v > since => Some(resolve(store, table, At::Version(v - 1)).await?),
            _ => None,
        };
        let cur = resolve(store, table, At::Version(v)).await?;
        let at = crate::table::manifest_key(table, v);
        let e = entry(store, table, before.as_ref(), &cur, &at).await?;
        let root = table.trim_end_matches('/');
        for f in &e.dv_files {
            let key = format!("{root}/{}", f.path);
            own(store, &key, &f.bytes, table, v).await?;
        }
        own(
            store,
            &format!("{root}/{}", entry_path(v)),
            &e.bytes,
            table,
            v,
        )
        .await?;
        prev = Some(cur);
    }
    Ok(missing)
}

/// Create `key` with `bytes`, or accept it holding exactly them.
async fn own(store: &StoreHandle, key: &str, bytes: &[u8], table: &str, v: u64) -> Result<()> {
    match store
        .put_create_own(key, Bytes::copy_from_slice(bytes))
        .await
    {
        Ok(_) => Ok(()),
        Err(Error::AlreadyExists { .. }) => {
            Err(foreign(table, v, "that differs from pds's version"))
        }
        Err(e) => Err(e),
    }
}

fn foreign(table: &str, v: u64, what: &str) -> Error {
    Error::ManifestCorrupted {
        path: format!("{}/{}", table.trim_end_matches('/'), entry_path(v)),
        reason: format!(
            "a Delta log entry {what}: a commit pds did not make (other writers must not write to a pds table's Delta view)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::filter::predicate;
    use crate::store::PutMode;
    use crate::table::delete::delete;
    use crate::table::tests::{append_ids, cond, counting_store, create_keyed, int, text};

    /// A table created publishing `delta` logs every commit, whatever the
    /// operation: its entries are versions 0..=latest, each what
    /// [`entry`] computes from pds's versions. With `PDS_DELTA_KEEP=<dir>`
    /// the table is left there for a Delta reader.
    #[test]
    fn every_commit_of_a_table_publishing_delta_is_logged() {
        use crate::table::compact::{compact, CompactOptions};
        use crate::table::tests::{props, rows, schema};
        use crate::table::upsert::upsert;
        use crate::table::write::create_publishing;
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let root = std::env::var("PDS_DELTA_KEEP")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| dir.path().to_path_buf());
        std::fs::create_dir_all(&root).unwrap();
        let url = url::Url::from_directory_path(&root).unwrap().to_string();
        let store = Arc::new(StoreHandle::open(&url, &Default::default()).unwrap());
        let delta = vec!["delta".to_string()];
        create_publishing(
            store.clone(),
            "t",
            schema(),
            Some(rows(0..1000)),
            props(Some("id")),
            false,
            2,
            &delta,
        )
        .unwrap();
        append_ids(&store, 1000..2000).unwrap();
        for conditions in [
            vec![cond("id", ">=", int(950)), cond("id", "<", int(1010))],
            vec![cond("customer", "==", text("c0"))],
            vec![
                cond("id", ">=", int(1200)),
                cond("customer", "!=", text("none")),
            ],
        ] {
            delete(store.clone(), "t", predicate(conditions).unwrap(), 2).unwrap();
        }
        upsert(
            store.clone(),
            "t",
            rows(1500..2500),
            crate::table::schema::SchemaMode::Strict,
            2,
        )
        .unwrap();
        let opts = CompactOptions {
            target_file_size: None,
            min_deleted_fraction: 0.1,
            parallelism: 2,
            progress: None,
        };
        compact(store.clone(), "t", opts).unwrap();
        let latest = crate::runtime::block_on(resolve(&store, "t", At::Latest))
            .unwrap()
            .unwrap();
        assert_eq!(
            latest.version, 6,
            "create, append, 3 deletes, upsert, compact"
        );
        let logged = crate::runtime::block_on(logged_versions(&store, "t"))
            .unwrap()
            .unwrap();
        assert_eq!(
            logged.into_iter().collect::<Vec<_>>(),
            (0..=latest.version).collect::<Vec<_>>()
        );
        let mut prev = None;
        for v in 0..=latest.version {
            let m = crate::runtime::block_on(resolve(&store, "t", At::Version(v)))
                .unwrap()
                .unwrap();
            let e = crate::runtime::block_on(entry(&store, "t", prev.as_ref(), &m, "t/m"))
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
        let run = |upto| crate::runtime::block_on(publish(&store, "t", 0, upto)).unwrap();
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
        let entries = crate::runtime::block_on(logged_versions(&store, "t"))
            .unwrap()
            .unwrap();
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
    }
}
