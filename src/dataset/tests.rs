//! Tests of the dataset protocol: writes, commits, reads and their races.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, RecordBatchIterator};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;

use super::commit::{all_landed, committed_to_replace, write_replacing};
use super::manifest::{Manifest, PartInfo};
use super::parts::{part_infos, HOLD_UNNAMED};
use super::*;
use crate::error::{Error, Result};
use crate::parquet::decode::ReadOptions;
use crate::parquet::encode::EncodeOptions;
use crate::store::{PutMode, StoreHandle};

fn batches(n: i64, per: i64) -> (SchemaRef, Vec<RecordBatch>) {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let end = (start + per).min(n);
        out.push(
            RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from_iter_values(start..end))],
            )
            .unwrap(),
        );
        start = end;
    }
    (schema, out)
}

fn write(
    store: &Arc<StoreHandle>,
    key: &str,
    n: i64,
    max: Option<usize>,
    total: Option<u64>,
) -> Result<Manifest> {
    let (schema, b) = batches(n, 7);
    let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
    let opts = EncodeOptions::new("zstd", Some(10), max).unwrap();
    let req = WriteRequest {
        location: key.into(),
        dataset_key: key.into(),
        schema_hash: "h".into(),
        total_rows: total,
        parallelism: 2,
        ..Default::default()
    };
    write_dataset(store.clone(), reader, opts, req)
}

fn memory() -> Arc<StoreHandle> {
    Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap())
}

/// A store on a new temporary folder, removed when the `TempDir` drops.
fn file_store() -> (Arc<StoreHandle>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = url::Url::from_directory_path(dir.path())
        .unwrap()
        .to_string();
    (
        Arc::new(StoreHandle::open(&url, &BTreeMap::new()).unwrap()),
        dir,
    )
}

#[test]
fn delete_own_removes_the_dataset_and_no_nested_key() {
    let (file, _dir) = file_store();
    for store in [memory(), file] {
        let rt = crate::runtime::get().unwrap();
        write(&store, "ds", 50, Some(20), None).unwrap();
        // A dataset nested below it, as pds let users make them before.
        write(&store, "src", 5, None, None).unwrap();
        for o in rt.block_on(store.list("src", true)).unwrap().objects {
            let to = o.key.replacen("src/", "ds/inner/", 1);
            rt.block_on(store.copy(&o.key, &to, false)).unwrap();
        }
        let others = ["ds/t/_latest_manifest", "ds/notes.txt", "ds/WRITING"];
        for k in others {
            rt.block_on(store.put(k, Bytes::from_static(b"x"), PutMode::Create))
                .unwrap();
        }
        rt.block_on(delete_own(&store, "ds")).unwrap();
        let left = listed_keys(&store, "ds", true);
        let mut expected = vec![
            "ds/WRITING",
            "ds/inner/_SUCCESS",
            "ds/inner/data.parquet",
            "ds/inner/manifest.json",
            "ds/notes.txt",
            "ds/t/_latest_manifest",
        ];
        expected.sort_unstable();
        assert_eq!(left, expected, "{:?}", store.scheme());
        assert!(read_dataset(
            store.clone(),
            "ds/inner",
            ReadOptions::default(),
            true,
            2,
            None
        )
        .is_ok());
    }
    for (name, own) in [
        ("_SUCCESS", true),
        ("part-00003.parquet", true),
        ("part-abc-00003.parquet", true),
        ("data.parquet", true),
        ("inner/data.parquet", false),
        ("part-1/x.parquet", false),
        ("notes.txt", false),
    ] {
        assert_eq!(is_own_object(name), own, "{name}");
    }
}

#[test]
fn write_then_read_multi_part() {
    let store = memory();
    let m = write(&store, "ds", 95, Some(20), None).unwrap();
    assert_eq!(m.parts.len(), 5);
    assert_eq!(m.parts[0], "part-00000.parquet");
    assert_eq!(m.row_count, 95);
    let d = read_dataset(store.clone(), "ds", ReadOptions::default(), true, 2, None).unwrap();
    let all = arrow_select::concat::concat_batches(&d.schema, &d.batches).unwrap();
    let col = all.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(col.values().to_vec(), (0..95).collect::<Vec<_>>());
}

/// A first part larger than [`HOLD_UNNAMED`], of a stream without a row
/// count: uploaded before its name is known, then renamed if it is the
/// only part. Nothing else is left, and every row reads back.
#[test]
fn a_large_first_part_is_uploaded_before_it_is_named() {
    let (file, _dir) = file_store();
    // Incompressible: 3M rows are 24 MB, more than HOLD_UNNAMED (16 MiB).
    let rows = 4_000_000i64;
    let values = || {
        (0..rows).map(|i| {
            // splitmix64: no run, delta or dictionary to compress.
            let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as i64
        })
    };
    for store in [memory(), file] {
        let rt = crate::runtime::get().unwrap();
        for (key, max, parts) in [
            ("one", 5_000_000usize, vec!["data.parquet"]),
            (
                "two",
                3_000_000,
                vec!["part-00000.parquet", "part-00001.parquet"],
            ),
        ] {
            let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
            let batches: Vec<RecordBatch> = values()
                .collect::<Vec<_>>()
                .chunks(100_000)
                .map(|c| {
                    RecordBatch::try_new(
                        schema.clone(),
                        vec![Arc::new(Int64Array::from(c.to_vec()))],
                    )
                    .unwrap()
                })
                .collect();
            let reader = Box::new(RecordBatchIterator::new(
                batches.into_iter().map(Ok),
                schema,
            ));
            let opts = EncodeOptions::new("none", None, Some(max)).unwrap();
            let req = WriteRequest {
                location: key.into(),
                dataset_key: key.into(),
                schema_hash: "h".into(),
                parallelism: 2,
                ..Default::default()
            };
            let m = write_dataset(store.clone(), reader, opts, req).unwrap();
            assert_eq!(m.parts, parts, "{:?}", store.scheme());
            let first = m.part_info.as_ref().unwrap()[0].size_bytes;
            assert!(first > HOLD_UNNAMED as u64, "{first} {:?}", m.part_info);
            let mut left: Vec<String> = rt
                .block_on(store.list(key, true))
                .unwrap()
                .objects
                .into_iter()
                .map(|o| o.key.rsplit('/').next().unwrap().to_string())
                .collect();
            left.sort_unstable();
            let mut expected: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
            expected.extend(["_SUCCESS".into(), "manifest.json".into()]);
            expected.sort_unstable();
            assert_eq!(left, expected);
            let read =
                read_dataset(store.clone(), key, ReadOptions::default(), true, 2, None).unwrap();
            let got: Vec<i64> = read
                .batches
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .values()
                        .to_vec()
                })
                .collect();
            assert_eq!(got, values().collect::<Vec<_>>());
        }
    }
}

#[test]
fn uploads_per_part_stay_within_bounds() {
    assert_eq!(uploads_per_part(32, 2), 8);
    assert_eq!(uploads_per_part(2, 2), 2);
    assert_eq!(uploads_per_part(12, 2), 6);
    assert_eq!(uploads_per_part(1, 0), 2);
    assert_eq!(uploads_per_part(usize::MAX, 1), 8);
}

#[test]
fn single_part_is_data_parquet_with_or_without_row_hint() {
    let store = memory();
    assert_eq!(
        write(&store, "a", 15, Some(20), None).unwrap().parts,
        ["data.parquet"]
    );
    assert_eq!(
        write(&store, "b", 15, Some(20), Some(15)).unwrap().parts,
        ["data.parquet"]
    );
    assert_eq!(
        write(&store, "c", 40, Some(20), Some(40))
            .unwrap()
            .parts
            .len(),
        2
    );
    assert_eq!(
        write(&store, "d", 0, None, None).unwrap().parts,
        ["data.parquet"]
    );
    let d = read_dataset(store, "d", ReadOptions::default(), false, 2, None).unwrap();
    assert_eq!(d.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
}

#[test]
fn read_checks_success_and_parts() {
    let store = memory();
    write(&store, "ds", 50, Some(20), None).unwrap();
    let rt = crate::runtime::get().unwrap();
    rt.block_on(store.delete("ds/part-00001.parquet")).unwrap();
    let r = read_dataset(store.clone(), "ds", ReadOptions::default(), false, 2, None);
    assert!(matches!(r, Err(Error::DatasetIncomplete { .. })), "{r:?}");
    rt.block_on(store.delete("ds/_SUCCESS")).unwrap();
    let r = read_dataset(store, "ds", ReadOptions::default(), false, 2, None);
    assert!(matches!(r, Err(Error::DatasetIncomplete { .. })));
}

#[test]
fn a_write_clears_what_a_failed_writer_left() {
    let store = memory();
    let rt = crate::runtime::get().unwrap();
    for junk in [
        "ds/part-00000.parquet",
        "ds/data.parquet",
        "ds/manifest.json",
    ] {
        rt.block_on(store.put(junk, Bytes::from_static(b"junk"), PutMode::Overwrite))
            .unwrap();
    }
    write(&store, "ds", 50, Some(20), None).unwrap();
    let read = read_dataset(store.clone(), "ds", ReadOptions::default(), true, 2, None).unwrap();
    assert_eq!(read.file_rows, 50);
    let names = listed_keys(&store, "ds", false);
    assert!(!names.contains(&"ds/data.parquet".to_string()), "{names:?}");
}

#[test]
fn the_commit_check_finds_a_replaced_or_missing_object() {
    let meta = |key: &str, size: u64, e_tag: Option<&str>| crate::store::Meta {
        key: key.into(),
        size,
        last_modified: chrono::Utc::now(),
        e_tag: e_tag.map(String::from),
        version: None,
    };
    let objects = vec![
        meta("k/part-00000.parquet", 10, Some("\"a\"")),
        meta("k/part-00001.parquet", 20, Some("b")),
    ];
    let ok = [
        ("part-00000.parquet", 10, Some("a")),
        ("part-00001.parquet", 20, None),
    ];
    assert!(all_landed("k", &objects, &ok).is_ok());
    for bad in [
        ("part-00000.parquet", 10, Some("c")),
        ("part-00001.parquet", 21, None),
        ("part-00002.parquet", 10, None),
    ] {
        assert!(matches!(
            all_landed("k", &objects, &[bad]),
            Err(Error::ClaimLost { .. })
        ));
    }
}

#[test]
fn a_read_of_a_replaced_dataset_starts_over_from_the_new_manifest() {
    let store = memory();
    write(&store, "ds", 50, Some(20), None).unwrap();
    let rt = crate::runtime::get().unwrap();
    let old = rt.block_on(store.get("ds/manifest.json")).unwrap();
    let (schema, b) = batches(30, 7);
    let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
    let req = WriteRequest {
        location: "ds".into(),
        dataset_key: "ds".into(),
        schema_hash: "h".into(),
        parallelism: 2,
        overwrite: true,
        ..Default::default()
    };
    let opts = EncodeOptions::new("zstd", Some(10), Some(20)).unwrap();
    write_dataset(store.clone(), reader, opts, req).unwrap();
    // A reader that took the old manifest finds the parts replaced.
    let read = read_dataset(
        store.clone(),
        "ds",
        ReadOptions::default(),
        false,
        2,
        Some(&old),
    );
    assert_eq!(read.unwrap().file_rows, 30);
    // With the dataset gone, it says the dataset was replaced.
    rt.block_on(delete_own(&store, "ds")).unwrap();
    let read = read_dataset(store, "ds", ReadOptions::default(), false, 2, Some(&old));
    match read {
        Err(Error::DatasetIncomplete { reason, .. }) => assert!(reason.contains("replaced")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn verify_detects_a_swapped_part() {
    let store = memory();
    write(&store, "ds", 50, Some(20), None).unwrap();
    let rt = crate::runtime::get().unwrap();
    let other = rt.block_on(store.get("ds/part-00000.parquet")).unwrap();
    rt.block_on(store.put("ds/part-00001.parquet", other, PutMode::Overwrite))
        .unwrap();
    let r = read_dataset(store, "ds", ReadOptions::default(), true, 2, None);
    assert!(matches!(r, Err(Error::PartCorrupted { .. })), "{r:?}");
}

#[test]
fn input_error_writes_no_manifest_and_removes_parts() {
    let store = memory();
    let (schema, mut b) = batches(60, 10);
    let tail: Vec<std::result::Result<RecordBatch, arrow_schema::ArrowError>> = vec![Err(
        arrow_schema::ArrowError::ComputeError("source died".into()),
    )];
    let first: Vec<_> = b.drain(..).map(Ok).collect();
    let reader = Box::new(RecordBatchIterator::new(
        first.into_iter().chain(tail),
        schema,
    ));
    let opts = EncodeOptions::new("zstd", None, Some(20)).unwrap();
    let req = WriteRequest {
        location: "bad".into(),
        dataset_key: "bad".into(),
        parallelism: 2,
        ..Default::default()
    };
    assert!(write_dataset(store.clone(), reader, opts, req).is_err());
    let rt = crate::runtime::get().unwrap();
    assert!(rt
        .block_on(store.list("bad", true))
        .unwrap()
        .objects
        .is_empty());
}

/// The names of the objects directly under `key`, sorted.
/// The keys of the objects below `key` (`recursive`: at any depth), as listed.
fn listed_keys(store: &StoreHandle, key: &str, recursive: bool) -> Vec<String> {
    let rt = crate::runtime::get().unwrap();
    rt.block_on(store.list(key, recursive))
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect()
}

fn names_under(store: &StoreHandle, key: &str) -> Vec<String> {
    let rt = crate::runtime::get().unwrap();
    let mut names: Vec<String> = rt
        .block_on(store.list(key, false))
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key.trim_start_matches(&format!("{key}/")).to_string())
        .collect();
    names.sort_unstable();
    names
}

/// An overwrite of `key` with the rows of `b`, `max` rows per part.
fn overwrite(
    store: &Arc<StoreHandle>,
    key: &str,
    schema: SchemaRef,
    b: impl Iterator<Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>> + Send + 'static,
    max: usize,
) -> Result<Manifest> {
    let reader = Box::new(RecordBatchIterator::new(b, schema));
    let opts = EncodeOptions::new("zstd", Some(10), Some(max)).unwrap();
    let req = WriteRequest {
        location: key.into(),
        dataset_key: key.into(),
        schema_hash: "h".into(),
        parallelism: 2,
        overwrite: true,
        ..Default::default()
    };
    write_dataset(store.clone(), reader, opts, req)
}

fn rows(store: &Arc<StoreHandle>, key: &str) -> Result<u64> {
    read_dataset(store.clone(), key, ReadOptions::default(), true, 2, None).map(|d| d.file_rows)
}

/// The objects of a committed dataset of `parts`, sorted.
fn layout_of(parts: &[String]) -> Vec<String> {
    let mut names = parts.to_vec();
    names.extend(["_SUCCESS".into(), "manifest.json".into()]);
    names.sort_unstable();
    names
}

/// A part name of an overwrite of a committed dataset.
fn is_swapped_part(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("part-") else {
        return false;
    };
    rest.len() == "0123456789ab-00000.parquet".len()
        && rest.ends_with(".parquet")
        && rest[..12].chars().all(|c| c.is_ascii_hexdigit())
}

#[test]
fn an_overwrite_keeps_the_old_dataset_readable_until_it_commits() {
    let (file, _dir) = file_store();
    for store in [memory(), file] {
        // Nothing committed yet: an overwrite writes RFC-0008's names.
        write(&store, "ds", 50, Some(20), None).unwrap();
        let (schema, b) = batches(3, 10);
        overwrite(&store, "one", schema, b.into_iter().map(Ok), 20).unwrap();
        assert_eq!(
            names_under(&store, "one"),
            ["_SUCCESS", "data.parquet", "manifest.json"]
        );
        // Debris of a killed overwrite.
        let rt = crate::runtime::get().unwrap();
        rt.block_on(store.put(
            "ds/part-0123456789ab-00000.parquet",
            Bytes::from_static(b"junk"),
            PutMode::Create,
        ))
        .unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (schema, b) = batches(60, 10);
        let (st, log) = (store.clone(), seen.clone());
        let input = b.into_iter().enumerate().map(move |(i, batch)| {
            // Once a part of the overwrite landed, read the dataset.
            // Up to 30 s: a loaded machine may take long for a part to land.
            for _ in 0..3000 {
                let landed = names_under(&st, "ds")
                    .iter()
                    .any(|n| is_swapped_part(n) && !n.starts_with("part-0123456789ab"));
                if i < 4 || landed {
                    let read = rows(&st, "ds").map_err(|e| e.to_string());
                    log.lock().unwrap().push((i, landed, read));
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Ok(batch)
        });
        let m = overwrite(&store, "ds", schema, input, 20).unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 6, "{seen:?}");
        assert!(seen.iter().any(|(_, landed, _)| *landed), "{seen:?}");
        for (_, _, read) in &seen {
            assert_eq!(read, &Ok(50), "{:?}: {seen:?}", store.scheme());
        }
        assert_eq!(rows(&store, "ds").unwrap(), 60);
        // The old parts and the debris are gone; the claim is released.
        assert!(m.parts.iter().all(|n| is_swapped_part(n)), "{:?}", m.parts);
        assert_eq!(names_under(&store, "ds"), layout_of(&m.parts));
        // And again: the next overwrite replaces those.
        let (schema, b) = batches(5, 5);
        let next = overwrite(&store, "ds", schema, b.into_iter().map(Ok), 20).unwrap();
        assert_eq!(rows(&store, "ds").unwrap(), 5);
        assert!(next.parts.iter().all(|n| !m.parts.contains(n)));
        assert_eq!(names_under(&store, "ds"), layout_of(&next.parts));
    }
}

#[test]
fn a_failed_overwrite_leaves_the_old_dataset_and_removes_its_parts() {
    let (file, _dir) = file_store();
    for store in [memory(), file] {
        write(&store, "ds", 50, Some(20), None).unwrap();
        let before = names_under(&store, "ds");
        let rt = crate::runtime::get().unwrap();
        let manifest = rt.block_on(store.get("ds/manifest.json")).unwrap();
        let (schema, b) = batches(40, 10);
        let died = std::iter::once(Err(arrow_schema::ArrowError::ComputeError(
            "source died".into(),
        )));
        let input = b.into_iter().map(Ok).chain(died);
        let r = overwrite(&store, "ds", schema, input, 20);
        assert!(r.is_err(), "{r:?}");
        assert_eq!(rows(&store, "ds").unwrap(), 50);
        assert_eq!(
            rt.block_on(store.get("ds/manifest.json")).unwrap(),
            manifest
        );
        assert_eq!(names_under(&store, "ds"), before, "{:?}", store.scheme());
    }
}

#[test]
fn racing_overwrites_commit_one_and_the_loser_leaves_no_parts() {
    let (file, _dir) = file_store();
    for store in [memory(), file] {
        write(&store, "ds", 50, Some(20), None).unwrap();
        // A second overwrite runs whole while the first writes its parts.
        let (schema, b) = batches(60, 10);
        let st = store.clone();
        let second = Arc::new(std::sync::Mutex::new(None));
        let result = second.clone();
        let input = b.into_iter().enumerate().map(move |(i, batch)| {
            if i == 3 {
                let (schema, b) = batches(7, 7);
                let r = overwrite(&st, "ds", schema, b.into_iter().map(Ok), 20);
                *result.lock().unwrap() = Some(r.map(|m| m.parts));
            }
            Ok(batch)
        });
        let first = overwrite(&store, "ds", schema, input, 20);
        assert!(matches!(first, Err(Error::ClaimLost { .. })), "{first:?}");
        let won = second.lock().unwrap().take().unwrap().unwrap();
        assert_eq!(rows(&store, "ds").unwrap(), 7);
        assert_eq!(
            names_under(&store, "ds"),
            layout_of(&won),
            "{:?}",
            store.scheme()
        );
    }
}

#[test]
fn a_swap_refused_because_another_writer_committed_removes_its_parts() {
    let (file, _dir) = file_store();
    for store in [memory(), file] {
        write(&store, "ds", 50, Some(20), None).unwrap();
        let rt = crate::runtime::get().unwrap();
        let claim = rt.block_on(Claim::take_over(&store, "ds")).unwrap();
        let old = rt
            .block_on(committed_to_replace(&store, "ds"))
            .unwrap()
            .unwrap();
        // Another writer's commit lands after this one read the manifest.
        let other = Bytes::from(
            rt.block_on(store.get("ds/manifest.json"))
                .unwrap()
                .to_vec()
                .into_iter()
                .chain(*b" ")
                .collect::<Vec<u8>>(),
        );
        rt.block_on(store.put("ds/manifest.json", other.clone(), PutMode::Overwrite))
            .unwrap();
        let before = names_under(&store, "ds");
        let (schema, b) = batches(30, 10);
        let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
        let opts = EncodeOptions::new("zstd", None, Some(20)).unwrap();
        let req = WriteRequest {
            location: "ds".into(),
            dataset_key: "ds".into(),
            parallelism: 2,
            overwrite: true,
            ..Default::default()
        };
        let r = write_replacing(&store, reader, &opts, &req, &claim, &old);
        assert!(matches!(r, Err(Error::AlreadyExists { .. })), "{r:?}");
        assert_eq!(rt.block_on(store.get("ds/manifest.json")).unwrap(), other);
        assert_eq!(names_under(&store, "ds"), before, "{:?}", store.scheme());
    }
}

#[test]
fn prefixed_parts_are_written_but_not_committed() {
    let store = memory();
    let (schema, b) = batches(45, 10);
    let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
    let opts = EncodeOptions::new("zstd", None, Some(20)).unwrap();
    let req = WriteRequest {
        location: "ds".into(),
        dataset_key: "ds".into(),
        parallelism: 2,
        part_prefix: Some("t3-a1".into()),
        ..Default::default()
    };
    let parts = write_parts(store.clone(), reader, &opts, &req).unwrap();
    assert_eq!(
        parts.names,
        [
            "part-t3-a1-00000.parquet",
            "part-t3-a1-00001.parquet",
            "part-t3-a1-00002.parquet"
        ]
    );
    let rt = crate::runtime::get().unwrap();
    assert!(rt
        .block_on(store.try_head("ds/_SUCCESS"))
        .unwrap()
        .is_none());
    let bad = WriteRequest {
        part_prefix: Some("../x".into()),
        ..req
    };
    let (schema, b) = batches(1, 1);
    let reader = Box::new(RecordBatchIterator::new(b.into_iter().map(Ok), schema));
    assert!(matches!(
        write_parts(store, reader, &opts, &bad),
        Err(Error::InvalidArgument(_))
    ));
}

/// Parts uploaded by "tasks" under `prefix` (45 rows, 20 a part), as
/// `PartInfo`s for [`commit_parts`].
fn uploaded(store: &Arc<StoreHandle>, key: &str, prefix: &str) -> (SchemaRef, Vec<PartInfo>) {
    let (schema, b) = batches(45, 10);
    let reader = Box::new(RecordBatchIterator::new(
        b.into_iter().map(Ok),
        schema.clone(),
    ));
    let opts = EncodeOptions::new("zstd", None, Some(20)).unwrap();
    let req = WriteRequest {
        location: key.into(),
        dataset_key: key.into(),
        parallelism: 2,
        part_prefix: Some(prefix.into()),
        ..Default::default()
    };
    let parts = write_parts(store.clone(), reader, &opts, &req).unwrap();
    (schema, part_infos(&parts.names, &parts.summaries))
}

fn commit_request(key: &str, overwrite: bool) -> WriteRequest {
    WriteRequest {
        location: key.into(),
        dataset_key: key.into(),
        schema_hash: "h".into(),
        overwrite,
        ..Default::default()
    }
}

#[test]
fn uploaded_parts_commit_as_a_write_does_and_a_lost_part_commits_nothing() {
    let store = memory();
    let rt = crate::runtime::get().unwrap();
    // Debris of a failed attempt beside the job's parts.
    let (_, debris) = uploaded(&store, "ds", "job-00001-9");
    let (schema, parts) = uploaded(&store, "ds", "job-00001-7");
    let claim = rt.block_on(Claim::take(&store, "ds")).unwrap();
    // A part lost before the commit: nothing is committed, nothing removed.
    let lost = child_key("ds", &parts[1].name);
    rt.block_on(store.delete(&lost)).unwrap();
    let req = commit_request("ds", false);
    match commit_parts(&store, &claim, &schema, parts.clone(), "zstd", &req) {
        Err(Error::DatasetIncomplete { reason, .. }) => {
            assert!(reason.contains("1 of its 3"), "{reason}")
        }
        other => panic!("expected DatasetIncomplete, got {other:?}"),
    }
    assert!(rt
        .block_on(store.try_head("ds/_SUCCESS"))
        .unwrap()
        .is_none());
    assert_eq!(
        names_under(&store, "ds").len(),
        5,
        "2 of the job's parts and 3 of debris; the claim released"
    );
    // With every part there, the commit lists them in order and removes the debris.
    let (_, parts) = uploaded(&store, "ds", "job-00002-7");
    let claim = rt.block_on(Claim::take_over(&store, "ds")).unwrap();
    let m = commit_parts(&store, &claim, &schema, parts.clone(), "zstd", &req).unwrap();
    let names: Vec<String> = parts.iter().map(|p| p.name.clone()).collect();
    assert_eq!(m.parts, names);
    assert_eq!(m.row_count, 45);
    assert_eq!(
        names_under(&store, "ds"),
        layout_of(&names),
        "the debris {debris:?} and the claim are gone"
    );
    assert_eq!(rows(&store, "ds").unwrap(), 45);
    // Committed: another commit without overwrite is refused before writing.
    let claim = rt.block_on(Claim::take(&store, "ds")).unwrap();
    assert!(matches!(
        commit_parts(&store, &claim, &schema, parts, "zstd", &req),
        Err(Error::AlreadyExists { .. })
    ));
    // A name that is no part's, or listed twice, is refused before any I/O.
    let mut bad = m.part_info.clone().unwrap();
    bad.push(bad[0].clone());
    assert!(matches!(
        commit_parts(
            &store,
            &claim,
            &schema,
            bad,
            "zstd",
            &commit_request("ds", true)
        ),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn an_overwrite_by_uploaded_parts_swaps_the_manifest_and_removes_the_old_parts() {
    let (file, _dir) = file_store();
    let rt = crate::runtime::get().unwrap();
    let old = write(&file, "ds", 30, Some(10), Some(30)).unwrap();
    let claim = rt.block_on(Claim::take_over(&file, "ds")).unwrap();
    let (schema, parts) = uploaded(&file, "ds", "job-00003-1");
    // Until the commit, the old dataset is what readers read.
    assert_eq!(rows(&file, "ds").unwrap(), 30);
    let m = commit_parts(
        &file,
        &claim,
        &schema,
        parts,
        "zstd",
        &commit_request("ds", true),
    )
    .unwrap();
    assert_eq!(rows(&file, "ds").unwrap(), 45);
    let names = names_under(&file, "ds");
    assert_eq!(names, layout_of(&m.parts));
    assert!(old.parts.iter().all(|p| !names.contains(p)));
}

#[test]
fn a_dataset_never_nests_with_a_table() {
    let store = memory();
    let rt = crate::runtime::get().unwrap();
    rt.block_on(store.put(
        "t/manifest/v00000000.json",
        Bytes::from_static(br#"{"format": "pds-table/1"}"#),
        PutMode::Create,
    ))
    .unwrap();
    for key in ["t", "t/inner"] {
        let r = write(&store, key, 5, None, None);
        assert!(matches!(r, Err(Error::KeyOccupied { .. })), "{key}: {r:?}");
    }
    write(&store, "d/x", 5, None, None).unwrap();
    let r = write(&store, "d", 5, None, None);
    assert!(
        matches!(&r, Err(Error::KeyOccupied { reason, .. }) if reason.contains("\"d/x\"")),
        "{r:?}"
    );
    // Nothing was left behind, the claims included.
    let left: Vec<String> = rt
        .block_on(store.list("", true))
        .unwrap()
        .objects
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(
        left,
        [
            "d/x/_SUCCESS",
            "d/x/data.parquet",
            "d/x/manifest.json",
            "t/manifest/v00000000.json"
        ]
    );
}

#[test]
fn schema_from_manifest() {
    let store = memory();
    write(&store, "ds", 5, None, None).unwrap();
    let s = read_schema(store, "ds").unwrap();
    assert_eq!(s.field(0).name(), "v");
}
