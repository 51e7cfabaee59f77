//! One entry of the Delta log: pds version N against version N-1 (or, for
//! the first version published, alone), with the deletion-vector files its
//! `add` actions name.
//!
//! - **Deletion vectors.** Each data file with deleted rows has its own
//!   `.bin` (one vector, at offset 1), named by a UUID taken from the
//!   SHA-256 of the table id, the file's path and the sorted SHA-256s of the
//!   tombstones that apply to it. While those do not change, neither does
//!   the vector's name, and every process names it alike.
//! - **Actions.** A file is added when it appears or its tombstones change
//!   (with its new vector), and removed when it goes or its tombstones
//!   change (naming the vector it was added with). A file whose tombstones
//!   did not change gets no action. The first entry carries the protocol
//!   and the metadata; a later one carries the metadata again when the
//!   schema changed, and the protocol too if it needs another feature.
//! - **Determinism.** Everything comes from the two manifests and the
//!   objects they name (times from `created_at`), so the entry's bytes are
//!   a function of versions N-1 and N.

use std::collections::{BTreeMap, BTreeSet};

use chrono::DateTime;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::StoreHandle;
use crate::table::delta::actions::{self, Action, CommitInfo, Format, MetaData, Protocol};
use crate::table::delta::deletion_vector::{file_path, Descriptor, FileWriter};
use crate::table::delta::positions::version_positions;
use crate::table::delta::schema::delta_schema;
use crate::table::snapshot::{DataFile, TableManifest, TombstoneRef};

/// The writer feature that makes every other Delta writer refuse the
/// table: pds's own versions are the source of truth, and the Delta log is
/// a view of them that only pds writes.
pub const PDS_WRITER_FEATURE: &str = "pdsManaged";

/// A deletion-vector file to write beside the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DvFile {
    /// Relative to the table key.
    pub path: String,
    pub bytes: Vec<u8>,
}

/// The entry of one version: its bytes, and the vector files it names
/// (written, create-only, before the entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub version: u64,
    pub bytes: Vec<u8>,
    pub dv_files: Vec<DvFile>,
}

/// The entry's object key, relative to the table key.
pub fn entry_path(version: u64) -> String {
    format!("_delta_log/{version:020}.json")
}

/// The entry of `cur`, after `prev` (`None`: the first version published).
/// `at`: the manifest's key, for errors.
pub async fn entry(
    store: &StoreHandle,
    table: &str,
    prev: Option<&TableManifest>,
    cur: &TableManifest,
    at: &str,
) -> Result<Entry> {
    let (out, dv_files) = entry_actions(store, table, prev, cur, at).await?;
    Ok(Entry {
        version: cur.version,
        bytes: actions::entry_bytes(&out)?,
        dv_files,
    })
}

/// The actions of [`entry`], in order, and the vector files they name.
pub async fn entry_actions(
    store: &StoreHandle,
    table: &str,
    prev: Option<&TableManifest>,
    cur: &TableManifest,
    at: &str,
) -> Result<(Vec<Action>, Vec<DvFile>)> {
    let time = millis(&cur.created_at, at)?;
    let mut out = vec![Action::CommitInfo(CommitInfo {
        timestamp: time,
        operation: cur.operation.clone(),
        engine_info: format!("pds/{}", env!("CARGO_PKG_VERSION")),
        pds_version: cur.version,
    })];
    let schema = cur.arrow_schema(at)?;
    let (delta, ntz) = delta_schema(&schema)?;
    let protocol = protocol(ntz);
    let prev_protocol = match prev {
        Some(p) => Some(protocol_of(p, at)?),
        None => None,
    };
    if prev_protocol.as_ref() != Some(&protocol) {
        out.push(Action::Protocol(protocol));
    }
    if prev.is_none_or(|p| p.schema.arrow_schema != cur.schema.arrow_schema) {
        out.push(Action::MetaData(MetaData {
            id: table_uuid(cur, table),
            format: Format {
                provider: "parquet".into(),
                options: Default::default(),
            },
            schema_string: delta.to_string(),
            partition_columns: vec![],
            configuration: [(
                "delta.enableDeletionVectors".to_string(),
                "true".to_string(),
            )]
            .into_iter()
            .collect(),
            created_time: None,
        }));
    }
    let now = by_file(cur);
    let before = prev.map(by_file).unwrap_or_default();
    let changed = |path: &str| before.get(path) != now.get(path);
    let mut dv_files = Vec::new();
    if let Some(prev) = prev {
        let gone: Vec<&DataFile> = prev
            .data_files
            .iter()
            .filter(|f| !now.contains_key(f.path.as_str()) || changed(&f.path))
            .collect();
        let vectors = vectors(store, table, prev, &gone, at).await?;
        for f in gone {
            let dv = vectors.get(&f.path).map(|(d, _)| d.clone());
            out.push(Action::Remove(actions::remove(f, time, dv)));
        }
    }
    let added: Vec<&DataFile> = cur
        .data_files
        .iter()
        .filter(|f| !before.contains_key(f.path.as_str()) || changed(&f.path))
        .collect();
    let vectors = vectors(store, table, cur, &added, at).await?;
    for f in added {
        let file_schema = cur.file_schema(f, at)?;
        let dv = vectors.get(&f.path).map(|(d, bytes)| {
            dv_files.push(bytes.clone());
            d.clone()
        });
        out.push(Action::Add(actions::add(f, &file_schema, time, dv)));
    }
    Ok((out, dv_files))
}

/// The protocol a table of this schema needs (`ntz`: a timestamp without
/// a time zone).
fn protocol(ntz: bool) -> Protocol {
    let mut features = vec!["deletionVectors".to_string()];
    if ntz {
        features.push("timestampNtz".to_string());
    }
    let mut writer = features.clone();
    writer.push(PDS_WRITER_FEATURE.to_string());
    Protocol {
        min_reader_version: 3,
        min_writer_version: 7,
        reader_features: features,
        writer_features: writer,
    }
}

fn protocol_of(m: &TableManifest, at: &str) -> Result<Protocol> {
    Ok(protocol(delta_schema(m.arrow_schema(at)?.as_ref())?.1))
}

/// The table id as a UUID (the `metaData` id): `table_id`'s 32 hex digits,
/// or, for a table created before ids existed, the first 32 hex digits of
/// the SHA-256 of its key.
fn table_uuid(m: &TableManifest, table: &str) -> String {
    let hex = match &m.table_id {
        Some(id) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            id.to_lowercase()
        }
        _ => hex::encode(&Sha256::digest(table.as_bytes())[..16]),
    };
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Per data file of `m`, the sorted SHA-256s of the tombstones that apply
/// to it (files with none are listed with none).
fn by_file(m: &TableManifest) -> BTreeMap<&str, BTreeSet<&str>> {
    by_file_in(&m.data_files, &m.tombstones)
}

/// [`by_file`] of the files `files` and the tombstones `tombstones` (a
/// segment's: every tombstone of its files is listed with them).
fn by_file_in<'a>(
    files: &'a [DataFile],
    tombstones: &'a [TombstoneRef],
) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let mut out: BTreeMap<&str, BTreeSet<&str>> = files
        .iter()
        .map(|f| (f.path.as_str(), BTreeSet::new()))
        .collect();
    for t in tombstones {
        for f in &t.files {
            if let Some(set) = out.get_mut(f.as_str()) {
                set.insert(t.sha256.as_str());
            }
        }
    }
    out
}

/// The deletion vectors of `files` in `m` (those with deleted rows): each
/// one's descriptor and its `.bin` file.
async fn vectors(
    store: &StoreHandle,
    table: &str,
    m: &TableManifest,
    files: &[&DataFile],
    at: &str,
) -> Result<BTreeMap<String, (Descriptor, DvFile)>> {
    let positions = version_positions(store, table, m, files, at).await?;
    let shas = by_file(m);
    let id = table_uuid(m, table);
    let mut out = BTreeMap::new();
    for (path, rows) in positions {
        let uuid = vector_uuid(&id, &path, shas.get(path.as_str()).into_iter().flatten());
        let mut w = FileWriter::new();
        let (offset, size, cardinality) = w.push(&rows)?;
        let encoded = z85::encode(uuid);
        let descriptor = Descriptor {
            storage_type: "u".into(),
            path_or_inline_dv: encoded,
            offset,
            size_in_bytes: size,
            cardinality,
        };
        let file = DvFile {
            path: file_path("", &uuid),
            bytes: w.finish(),
        };
        out.insert(path, (descriptor, file));
    }
    Ok(out)
}

/// The UUID that names the deletion vector of the data file `path` of the
/// table `id` while the tombstones with SHA-256s `shas` (sorted) apply to it.
fn vector_uuid<'a>(id: &str, path: &str, shas: impl Iterator<Item = &'a &'a str>) -> [u8; 16] {
    let mut h = Sha256::new();
    for part in [id, path] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for sha in shas {
        h.update(sha.as_bytes());
        h.update([0]);
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&h.finalize()[..16]);
    uuid
}

/// The names (relative to the table key) of the deletion-vector files
/// version `m` of `table` (its root suffices) can name for its data files
/// `files`, whose tombstones are `tombstones` (all of theirs: the whole
/// version's, or a segment's): one per file some tombstone applies to (a
/// file whose tombstones remove none of its rows has no vector, and its
/// name is listed all the same). No I/O.
pub fn vector_files(
    m: &TableManifest,
    table: &str,
    files: &[DataFile],
    tombstones: &[TombstoneRef],
) -> Vec<String> {
    let id = table_uuid(m, table);
    by_file_in(files, tombstones)
        .into_iter()
        .filter(|(_, shas)| !shas.is_empty())
        .map(|(path, shas)| file_path("", &vector_uuid(&id, path, shas.iter())))
        .collect()
}

/// An ISO 8601 time (a manifest's `created_at`) in ms since the epoch.
fn millis(text: &str, at: &str) -> Result<i64> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| Error::ManifestCorrupted {
            path: at.to_string(),
            reason: format!("created_at {text:?} is not a time: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::scan::{resolve, At};
    use crate::table::tests::{append_ids, create_keyed};
    use bytes::Bytes;
    use std::sync::Arc;

    /// Publish every version of table `t` in `store` as a Delta log.
    fn publish(store: &Arc<StoreHandle>) -> Vec<Entry> {
        let latest = crate::runtime::block_on(resolve(store, "t", At::Latest))
            .unwrap()
            .unwrap();
        let mut prev: Option<TableManifest> = None;
        let mut out = Vec::new();
        for v in 0..=latest.version {
            let m = crate::runtime::block_on(resolve(store, "t", At::Version(v)))
                .unwrap()
                .unwrap();
            let e = crate::runtime::block_on(entry(store, "t", prev.as_ref(), &m, "t/m"))
                .unwrap()
                .unwrap();
            for f in &e.dv_files {
                let key = format!("t/{}", f.path);
                let _ = crate::runtime::block_on(store.put(
                    &key,
                    Bytes::from(f.bytes.clone()),
                    crate::store::PutMode::Create,
                ));
            }
            crate::runtime::block_on(store.put(
                &format!("t/{}", entry_path(v)),
                Bytes::from(e.bytes.clone()),
                crate::store::PutMode::Create,
            ))
            .unwrap()
            .unwrap();
            out.push(e);
            prev = Some(m);
        }
        out
    }

    /// Creates, appends and deletes of every tombstone kind published as
    /// entries: the same bytes twice; a delete adds each touched file again
    /// with a vector and removes it without; files a delete did not touch
    /// get no action. With `PDS_DELTA_KEEP=<dir>` the log is left there (a
    /// file store) for a Delta reader to open.
    #[test]
    fn entries_mirror_every_version_and_are_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::env::var("PDS_DELTA_KEEP")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| dir.path().to_path_buf());
        std::fs::create_dir_all(&root).unwrap();
        let url = url::Url::from_directory_path(&root).unwrap().to_string();
        let store = Arc::new(StoreHandle::open(&url, &BTreeMap::new()).unwrap());
        create_keyed(&store, 0..1000);
        append_ids(&store, 1000..2000).unwrap();
        crate::table::delta::test_tables::delete_every_kind(&store);
        let entries = publish(&store);
        assert_eq!(entries.len(), 5);
        let lines = |e: &Entry| -> Vec<serde_json::Value> {
            String::from_utf8(e.bytes.clone())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let first = lines(&entries[0]);
        assert!(first[1].get("protocol").is_some() && first[2].get("metaData").is_some());
        let adds = |e: &[serde_json::Value]| e.iter().filter(|a| a.get("add").is_some()).count();
        let removes =
            |e: &[serde_json::Value]| e.iter().filter(|a| a.get("remove").is_some()).count();
        assert_eq!((adds(&first), removes(&first)), (1, 0));
        let appended = lines(&entries[1]);
        assert_eq!((adds(&appended), removes(&appended)), (1, 0));
        // The key-range delete touches both files; the others the files they delete from.
        for e in &entries[2..] {
            let l = lines(e);
            assert_eq!(adds(&l), removes(&l), "{l:?}");
            for a in l.iter().filter_map(|a| a.get("add")) {
                assert!(a.get("deletionVector").is_some(), "{a}");
            }
        }
        // Deterministic: the same entries again, from the same versions.
        for (v, e) in entries.iter().enumerate() {
            let m = crate::runtime::block_on(resolve(&store, "t", At::Version(v as u64)))
                .unwrap()
                .unwrap();
            let prev = (v > 0).then(|| {
                crate::runtime::block_on(resolve(&store, "t", At::Version(v as u64 - 1)))
                    .unwrap()
                    .unwrap()
            });
            let again = crate::runtime::block_on(entry(&store, "t", prev.as_ref(), &m, "t/m"))
                .unwrap()
                .unwrap();
            assert_eq!(&again, e);
        }
    }
}
