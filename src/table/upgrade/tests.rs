//! Every earlier table and pipeline format reads; which unsealed manifests
//! are refused; the explicit upgrade.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::parquet::filter::predicate;
use crate::store::PutMode;
use crate::table::delete::delete;
use crate::table::scan::At;
use crate::table::snapshot::{ColumnStats, TableProperties, TableSchema};
use crate::table::tests::{append_ids, cond, counting_store, create_and_append, ids, int};
use crate::table::versions::read_version_at;
use crate::table::{manifest_key, pointer_key, Pointer};

fn block<T>(f: impl std::future::Future<Output = Result<T>>) -> T {
    crate::runtime::block_on(f).unwrap().unwrap()
}

/// A data file as pds wrote it before the seal (commit 43df652's
/// `snapshot.rs`, field for field).
#[derive(Serialize)]
struct OldDataFile {
    path: String,
    size_bytes: u64,
    row_group_count: u64,
    total_rows: u64,
    columns: BTreeMap<String, ColumnStats>,
    sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<String>,
}

/// A tombstone reference before the seal: no SHA-256.
#[derive(Serialize)]
struct OldTombstoneRef {
    path: String,
    files: Vec<String>,
}

/// A table manifest before the seal (43df652), with its tombstones as
/// references, or (3e9447b, the first tables) as bare paths.
#[derive(Serialize)]
struct OldManifest {
    format: String,
    version: u64,
    previous: Option<u64>,
    created_at: String,
    operation: String,
    operation_parameters: BTreeMap<String, Value>,
    schema: TableSchema,
    data_files: Vec<OldDataFile>,
    tombstones: Value,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    file_schemas: BTreeMap<String, TableSchema>,
    properties: TableProperties,
    #[serde(skip_serializing_if = "Option::is_none")]
    commit_id: Option<String>,
}

/// `m` (a whole version) as the pds before the seal wrote it: its
/// `to_json` was `to_value` then `to_vec_pretty`.
fn old_bytes(m: &TableManifest, bare_tombstones: bool) -> Vec<u8> {
    let tombstones = if bare_tombstones {
        serde_json::to_value(m.tombstones.iter().map(|t| &t.path).collect::<Vec<_>>())
    } else {
        serde_json::to_value(
            m.tombstones
                .iter()
                .map(|t| OldTombstoneRef {
                    path: t.path.clone(),
                    files: t.files.clone(),
                })
                .collect::<Vec<_>>(),
        )
    }
    .unwrap();
    let old = OldManifest {
        format: "pds-table/1".into(),
        version: m.version,
        previous: m.previous,
        created_at: m.created_at.clone(),
        operation: m.operation.clone(),
        operation_parameters: m.operation_parameters.clone(),
        schema: m.schema.clone(),
        data_files: m
            .data_files
            .iter()
            .map(|f| OldDataFile {
                path: f.path.clone(),
                size_bytes: f.size_bytes,
                row_group_count: f.row_group_count,
                total_rows: f.total_rows,
                columns: f.columns.clone(),
                sha256: f.sha256.clone(),
                schema: f.schema.clone(),
            })
            .collect(),
        tombstones,
        file_schemas: m.file_schemas.clone(),
        properties: m.properties.clone(),
        commit_id: m.commit_id.clone(),
    };
    serde_json::to_vec_pretty(&serde_json::to_value(&old).unwrap()).unwrap()
}

/// Table `t` on a memory store: ids 0..100 (version 0), 100..150 appended
/// (1), id 20 deleted (2); then every version rewritten as the pds before
/// the seal wrote it, and its pointer too.
fn old_table(bare_tombstones: bool) -> Arc<crate::store::StoreHandle> {
    let (store, _) = counting_store();
    create_and_append(&store);
    let pred = predicate(vec![cond("id", "==", int(20))]).unwrap();
    assert!(delete(store.clone(), "t", pred, 2).unwrap().committed);
    for v in 0..3 {
        let m: TableManifest = block(read_version_at(&store, "t", v, Depth::Full));
        let raw = old_bytes(&m, bare_tombstones);
        block(store.put(&manifest_key("t", v), Bytes::from(raw), PutMode::Overwrite));
    }
    let pointer = Pointer::new(2, None).to_json().unwrap();
    block(store.put(&pointer_key("t"), Bytes::from(pointer), PutMode::Overwrite));
    store
}

/// A write refused because the table is in an earlier format.
fn refused_as_old<T: std::fmt::Debug>(out: Result<T>) {
    assert!(matches!(out, Err(Error::UpgradeRequired { .. })), "{out:?}");
}

fn expected(upto: i64) -> Vec<i64> {
    (0..upto).filter(|i| *i != 20).collect()
}

#[test]
fn unsealed_tables_read_refuse_writes_and_upgrade() {
    for bare in [false, true] {
        let store = old_table(bare);
        let v2: TableManifest = block(read_version_at(&store, "t", 2, Depth::Full));
        assert_eq!(v2.layout.written, Written::Unsealed);
        assert!(v2.tombstones.iter().all(|t| t.sha256.is_empty()));
        assert_eq!(ids(&store, At::Latest, None), expected(150));
        assert_eq!(
            ids(&store, At::Version(1), None),
            (0..150).collect::<Vec<_>>()
        );
        // Writes are refused before anything is written.
        let count = || block(store.list("t", true)).objects.len();
        let before = count();
        refused_as_old(append_ids(&store, 150..160));
        let pred = predicate(vec![cond("id", "==", int(30))]).unwrap();
        refused_as_old(delete(store.clone(), "t", pred, 2));
        assert_eq!(count(), before);
        // The upgrade: a version in the current format, the same rows.
        let up = block(upgrade_table(&store, "t"));
        assert_eq!(
            up,
            Upgraded {
                from: Some("pds-table/1 (from before sealed manifests)"),
                version: 3
            }
        );
        let raw = block(store.get(&manifest_key("t", 3)));
        assert!(String::from_utf8_lossy(&raw).contains("\"format\": \"pds-table/3\""));
        let v3: TableManifest = block(read_version_at(&store, "t", 3, Depth::Full));
        assert_eq!(v3.layout.written, Written::Current);
        assert_eq!(v3.operation, "upgrade");
        assert_eq!(v3.data_files, v2.data_files);
        assert!(v3.tombstones.iter().all(|t| is_sha256(&t.sha256)));
        assert_eq!(
            v3.tombstones[0].files.len(),
            1,
            "narrowed to the files it deletes from"
        );
        assert_eq!(ids(&store, At::Latest, None), expected(150));
        // Old versions read as they were; a second upgrade is a no-op.
        assert_eq!(ids(&store, At::Version(2), None), expected(150));
        assert_eq!(
            block(upgrade_table(&store, "t")),
            Upgraded {
                from: None,
                version: 3
            }
        );
        append_ids(&store, 150..160).unwrap();
        assert_eq!(ids(&store, At::Latest, None), expected(160));
    }
}

use crate::table::snapshot::is_sha256;

#[test]
fn sealed_flat_tables_are_read_only_until_upgraded() {
    let store = old_table(false);
    // Version 2 as the sealed pds-table/1 writer wrote it.
    let mut m: TableManifest = block(read_version_at(&store, "t", 1, Depth::Full));
    m.version = 2;
    m.previous = Some(1);
    m.layout = Default::default();
    block(store.put(
        &manifest_key("t", 2),
        Bytes::from(m.to_json().unwrap()),
        PutMode::Overwrite,
    ));
    let back: TableManifest = block(read_version_at(&store, "t", 2, Depth::Root));
    assert_eq!(back.layout.written, Written::Flat);
    refused_as_old(append_ids(&store, 150..160));
    let up = block(upgrade_table(&store, "t"));
    assert_eq!(up.from, Some("pds-table/1 (sealed, files inline)"));
    assert_eq!(ids(&store, At::Latest, None), (0..150).collect::<Vec<_>>());
}

/// An unsealed manifest is taken for an earlier pds's only in the format
/// and the bytes that pds wrote, without the fields later writers added.
#[test]
fn stripped_or_edited_manifests_stay_corrupted() {
    let store = old_table(false);
    let v2: TableManifest = block(read_version_at(&store, "t", 2, Depth::Full));
    let old = old_bytes(&v2, false);
    assert!(TableManifest::from_json(&old, "p", 2).is_ok());
    let refused = |raw: &[u8], why: &str| match TableManifest::from_json(raw, "p", 2) {
        Err(Error::ManifestCorrupted { reason, .. }) => {
            assert!(reason.contains(why), "{why:?} not in {reason:?}")
        }
        other => panic!("{why}: {other:?}"),
    };
    let strip = |sealed: &[u8]| {
        let mut map: serde_json::Map<String, Value> = serde_json::from_slice(sealed).unwrap();
        map.remove("checksum");
        serde_json::to_vec_pretty(&map).unwrap()
    };
    // The current format, checksum removed.
    let sealed_v3 = {
        block(upgrade_table(&store, "t"));
        block(store.get(&manifest_key("t", 3)))
    };
    let stripped = strip(&sealed_v3);
    match TableManifest::from_json(&stripped, "p", 3) {
        Err(Error::ManifestCorrupted { reason, .. }) => {
            assert!(reason.contains("every pds-table/3 manifest"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // A sealed pds-table/1 with tombstones, checksum removed: its
    // tombstones' SHA-256s give it away.
    let mut flat = v2.clone();
    flat.layout = Default::default();
    flat.tombstones[0].sha256 = "ab".repeat(32);
    refused(&strip(&flat.to_json().unwrap()), "a tombstone's \"sha256\"");
    // Later fields in an unsealed manifest.
    let text = String::from_utf8(old.clone()).unwrap();
    let with = |field: &str| {
        let mut map: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
        map.insert(field.into(), "x".into());
        serde_json::to_vec_pretty(&map).unwrap()
    };
    refused(&with("table_id"), "\"table_id\"");
    refused(&with("segments"), "\"segments\"");
    let mut footer: Value = serde_json::from_str(&text).unwrap();
    footer["data_files"][0]["footer_bytes"] = 100.into();
    refused(&serde_json::to_vec_pretty(&footer).unwrap(), "footer_bytes");
    // Its bytes laid out otherwise (compact, a changed space, CRLF).
    let value: Value = serde_json::from_slice(&old).unwrap();
    refused(&serde_json::to_vec(&value).unwrap(), "not laid out");
    refused(text.replacen("  ", "   ", 1).as_bytes(), "not laid out");
    refused(text.replace('\n', "\r\n").as_bytes(), "not laid out");
    // An edited value that keeps the layout is read (no checksum to tell):
    // the documented residual risk of the unsealed format, exactly this.
    let edited = text.replace("\"operation\": \"delete\"", "\"operation\": \"remove\"");
    assert_ne!(edited, text);
    assert_eq!(
        TableManifest::from_json(edited.as_bytes(), "p", 2)
            .map(|m| m.operation)
            .ok(),
        Some("remove".to_string())
    );
}

/// Objects under the table key (to tell that nothing was written).
fn objects(store: &crate::store::StoreHandle) -> Vec<String> {
    let mut keys: Vec<String> = block(store.list("t", true))
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    keys.sort();
    keys
}

/// A tombstone an unsealed version lists but the store lacks: the upgrade
/// (and reads) say the table is damaged, naming its manifest and the
/// tombstone; if the version's manifest is gone too, vacuum removed the
/// version after it was read (`VersionNotFound`), as for segments and data
/// files.
#[test]
fn a_missing_tombstone_is_damage_or_a_vacuumed_version() {
    let store = old_table(false);
    let v2: TableManifest = block(read_version_at(&store, "t", 2, Depth::Full));
    let tomb = v2.tombstones[0].path.clone();
    block(store.delete(&format!("t/{tomb}")));
    let damaged = |out: Result<Upgraded>| match out {
        Err(Error::ManifestCorrupted { path, reason }) => {
            assert_eq!(path, manifest_key("t", 2));
            assert!(
                reason.contains(&tomb) && reason.contains("missing"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    };
    damaged(crate::runtime::block_on(upgrade_table(&store, "t")).unwrap());
    // Reads map it the same way (one helper).
    let read = crate::runtime::block_on(crate::table::tombstone::load(
        &store,
        "t",
        2,
        &v2.tombstones,
    ))
    .unwrap()
    .map(|_| Upgraded {
        from: None,
        version: 2,
    });
    damaged(read);
    // The version's manifest gone as well: vacuum removed it meanwhile.
    block(store.delete(&manifest_key("t", 2)));
    match crate::runtime::block_on(crate::table::tombstone::fetch(&store, "t", 2, &tomb)).unwrap() {
        Err(Error::VersionNotFound { reason, .. }) => {
            assert!(reason.contains("vacuum removed it"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// An upgraded table gets a fresh id (pointer and manifest), and an
/// upgrade on behalf of a handle commits only to the table it opened: a
/// handle bound to a table with an id, which was dropped and replaced by
/// one in an earlier format (which has none), gets `NotFound` and nothing
/// is written.
#[test]
fn the_upgrade_assigns_an_id_and_checks_the_one_it_was_given() {
    use crate::table::identity::expecting;
    let store = old_table(false);
    let before = objects(&store);
    let run = |id: Option<&str>| {
        expecting(id, || {
            crate::runtime::block_on(upgrade_table(&store, "t")).unwrap()
        })
    };
    match run(Some("a-dropped-table")) {
        Err(Error::OtherKind { reason, .. }) => assert!(reason.contains("dropped"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(objects(&store), before, "nothing written");
    // The handle that opened this (id-less) table upgrades it.
    assert_eq!(run(None).unwrap().version, 3);
    let v3: TableManifest = block(read_version_at(&store, "t", 3, Depth::Root));
    let id = v3.table_id.clone().expect("the upgrade assigns an id");
    crate::table::identity::check(&id).unwrap();
    let pointer = Pointer::from_json(&block(store.get(&pointer_key("t"))), "p").unwrap();
    assert_eq!(pointer.table_id.as_deref(), Some(id.as_str()));
    // From now on its id binds handles: another id is another table.
    assert!(matches!(run(Some("another")), Err(Error::OtherKind { .. })));
    assert_eq!(
        run(Some(&id)).unwrap(),
        Upgraded {
            from: None,
            version: 3
        }
    );
}

/// The upgrade checks a tombstone's entries as reads do: only files its
/// reference names. One whose entries name a data file its reference does
/// not is refused by both (before, the upgrade accepted it and widened the
/// reference, so the upgraded version applied deletes the earlier one
/// refused).
#[test]
fn the_upgrade_checks_tombstones_as_reads_do() {
    let store = old_table(false);
    let mut v2: TableManifest = block(read_version_at(&store, "t", 2, Depth::Full));
    let named = v2.tombstones[0].files.clone();
    let other = v2
        .data_files
        .iter()
        .map(|f| f.path.clone())
        .find(|p| !named.contains(p))
        .unwrap();
    v2.tombstones[0].files = vec![other];
    block(store.put(
        &manifest_key("t", 2),
        Bytes::from(old_bytes(&v2, false)),
        PutMode::Overwrite,
    ));
    let refused = |out: Result<()>| match out {
        Err(Error::ManifestCorrupted { reason, .. }) => {
            assert!(reason.contains("does not name"), "{reason}")
        }
        other => panic!("{other:?}"),
    };
    let latest: TableManifest = block(crate::table::scan::resolve(&store, "t", At::Latest));
    let opts = crate::table::scan::ScanOptions {
        columns: None,
        predicate: None,
        batch_size: None,
        parallelism: 2,
        files: None,
    };
    refused(crate::table::scan::scan(store.clone(), "t", &latest, opts).map(|_| ()));
    let before = objects(&store);
    refused(
        crate::runtime::block_on(upgrade_table(&store, "t"))
            .unwrap()
            .map(|_| ()),
    );
    assert_eq!(objects(&store), before);
}

/// A pipeline manifest as pds wrote it before the seal (43df652's
/// `manifest.rs`: `to_vec_pretty` of the struct, in declaration order).
#[derive(Serialize)]
struct OldPipeline {
    format: String,
    version: u64,
    previous: Option<u64>,
    timestamp_ms: i64,
    operation: String,
    detail: Value,
    graph: Value,
    nodes: BTreeMap<String, OldNode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    commit_id: Option<String>,
}

#[derive(Serialize)]
struct OldNode {
    content: Vec<OldPart>,
    mappings: Vec<OldPart>,
    update: OldUpdate,
}

#[derive(Serialize)]
struct OldUpdate {
    rows: Vec<OldPart>,
    deleted: Vec<OldPart>,
}

#[derive(Serialize, Clone)]
struct OldPart {
    name: String,
    rows: u64,
    size_bytes: u64,
    sha256: String,
    first_key: Vec<Option<Value>>,
    last_key: Vec<Option<Value>>,
}

fn old_pipeline(version: u64) -> OldPipeline {
    let part = OldPart {
        name: "nodes/src/content-00000.parquet".into(),
        rows: 3,
        size_bytes: 100,
        sha256: "cd".repeat(32),
        first_key: vec![Some(1.into())],
        last_key: vec![Some(0.5.into())],
    };
    OldPipeline {
        format: "pds-pipeline/1".into(),
        version,
        previous: version.checked_sub(1),
        timestamp_ms: 1_763_900_000_000,
        operation: if version == 0 { "create" } else { "update" }.into(),
        detail: serde_json::json!({"sources": ["src"]}),
        graph: serde_json::json!({"nodes": [{"name": "src", "kind": "source"}]}),
        nodes: BTreeMap::from([(
            "src".to_string(),
            OldNode {
                content: vec![part.clone()],
                mappings: vec![],
                update: OldUpdate {
                    rows: vec![part],
                    deleted: vec![],
                },
            },
        )]),
        commit_id: (version > 0).then(|| "c".to_string()),
    }
}

#[test]
fn unsealed_pipelines_read_and_stripped_ones_do_not() {
    let raw = serde_json::to_vec_pretty(&old_pipeline(1)).unwrap();
    let m = PipelineManifest::from_json(&raw, "p", 1).unwrap();
    assert!(m.unsealed);
    assert_eq!(
        m.earlier_format(),
        Some("pds-pipeline/1 (from before sealed manifests)")
    );
    assert!(matches!(
        m.check_writable("k"),
        Err(Error::UpgradeRequired {
            kind: "pipeline",
            ..
        })
    ));
    // Sealed again, then stripped: sorted keys give it away.
    let mut sealed_m = m.clone();
    sealed_m.unsealed = false;
    let sealed = sealed_m.to_json().unwrap();
    let back = PipelineManifest::from_json(&sealed, "p", 1).unwrap();
    // A sealed pds-pipeline/1 manifest is read, and is an earlier format.
    assert!(!back.unsealed);
    assert_eq!(back.earlier_format(), Some("pds-pipeline/1"));
    assert!(back.check_writable("k").is_err());
    let mut map: serde_json::Map<String, Value> = serde_json::from_slice(&sealed).unwrap();
    map.remove("checksum");
    for stripped in [
        serde_json::to_vec_pretty(&map).unwrap(),
        serde_json::to_vec(&map).unwrap(),
    ] {
        match PipelineManifest::from_json(&stripped, "p", 1) {
            Err(Error::ManifestCorrupted { reason, .. }) => {
                assert!(reason.contains("not laid out"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
    // Fields only sealed writers wrote.
    let mut with_prefix: Value = serde_json::to_value(old_pipeline(1)).unwrap();
    with_prefix["nodes"]["src"]["derived_prefix"] = 1.into();
    let parsed: PipelineManifest = serde_json::from_value(with_prefix).unwrap();
    let raw = serde_json::to_vec_pretty(&parsed).unwrap();
    assert!(matches!(
        PipelineManifest::from_json(&raw, "p", 1),
        Err(Error::ManifestCorrupted { .. })
    ));
}

#[test]
fn unsealed_pipelines_upgrade_once() {
    let (store, _) = counting_store();
    for v in 0..2 {
        let raw = serde_json::to_vec_pretty(&old_pipeline(v)).unwrap();
        block(store.put(&manifest_key("p", v), Bytes::from(raw), PutMode::Create));
    }
    let pointer = Pointer::new(1, None).to_json().unwrap();
    block(store.put(&pointer_key("p"), Bytes::from(pointer), PutMode::Create));
    let up = block(upgrade_pipeline(&store, "p"));
    assert_eq!(up.version, 2);
    assert!(up.from.is_some());
    let v2: PipelineManifest = block(read_version_at(&store, "p", 2, Depth::Root));
    assert!(!v2.unsealed);
    assert_eq!(v2.operation, "upgrade");
    let v1: PipelineManifest = block(read_version_at(&store, "p", 1, Depth::Root));
    assert_eq!(v2.nodes["src"].content, v1.nodes["src"].content);
    assert!(v2.nodes["src"].update.is_empty());
    assert_eq!(
        block(upgrade_pipeline(&store, "p")),
        Upgraded {
            from: None,
            version: 2
        }
    );
}
