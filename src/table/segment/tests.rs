//! Segments: layout, reuse, pruning, the legacy format, damage.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_schema::DataType;
use bytes::Bytes;

use super::*;
use crate::parquet::filter::predicate;
use crate::store::PutMode;
use crate::table::compact::{compact, CompactOptions};
use crate::table::delete::delete;
use crate::table::scan::{for_scan, scan, At, ScanOptions};
use crate::table::schema::SchemaMode;
use crate::table::snapshot::tests::manifest as one_file_manifest;
use crate::table::tests::{
    append_ids, cond, counting_store, create_and_append, create_and_append_steps, create_keyed,
    ids, int, rows,
};
use crate::table::versions::{read_version_at, Depth};
use crate::table::write::append;
use crate::table::{manifest_key, pointer_key, Pointer};

fn block<T>(f: impl std::future::Future<Output = crate::error::Result<T>>) -> T {
    crate::runtime::block_on(f).unwrap().unwrap()
}

/// A data file `data/f<i>.parquet` holding ids `10 i .. 10 i + 9`.
fn file(i: u64) -> DataFile {
    let mut f = one_file_manifest(0).data_files[0].clone();
    f.path = format!("data/f{i:06}.parquet");
    f.columns = BTreeMap::from([(
        "id".to_string(),
        ColumnStats {
            min: Some((10 * i).into()),
            max: Some((10 * i + 9).into()),
            null_count: Some(0),
        },
    )]);
    f
}

fn tomb(name: &str, files: &[u64]) -> TombstoneRef {
    TombstoneRef {
        path: format!("tombstone/{name}.del"),
        files: files.iter().map(|i| file(*i).path).collect(),
        sha256: "cd".repeat(32),
    }
}

/// A whole version of `n` files laid out in `store` (no data objects: the
/// layout alone is under test).
fn laid_out(store: &StoreHandle, n: u64, tombstones: Vec<TombstoneRef>) -> TableManifest {
    let mut m = one_file_manifest(1);
    m.data_files = (0..n).map(file).collect();
    m.tombstones = tombstones;
    block(m.lay_out_segments(store, "t"));
    m
}

/// The manifest as a later reader gets it: written, read back, loaded.
fn reread(store: &StoreHandle, m: &TableManifest, depth: Depth) -> TableManifest {
    let key = manifest_key("t", m.version);
    block(store.put(&key, Bytes::from(m.to_json().unwrap()), PutMode::Overwrite));
    block(read_version_at::<TableManifest>(
        store, "t", m.version, depth,
    ))
}

#[test]
fn merged_statistics_take_the_extremes_by_value_and_sum_nulls() {
    let s = |min: i64, max: i64, nulls: Option<u64>| ColumnStats {
        min: Some(min.into()),
        max: Some(max.into()),
        null_count: nulls,
    };
    let (a, b, c) = (s(5, 90, Some(1)), s(-3, 9, Some(2)), s(10, 100, None));
    let m = stats::merge(&[Some(&a), Some(&b)], &DataType::Int64);
    assert_eq!(m, s(-3, 90, Some(3)));
    let m = stats::merge(&[Some(&a), Some(&c)], &DataType::Int64);
    assert_eq!(
        (m.min, m.max, m.null_count),
        (Some(5.into()), Some(100.into()), None)
    );
    // A file without statistics for the column: nothing is known.
    assert_eq!(
        stats::merge(&[Some(&a), None], &DataType::Int64),
        ColumnStats::default()
    );
    // Strings compare as strings, not as JSON text.
    let t = |lo: &str, hi: &str| ColumnStats {
        min: Some(lo.into()),
        max: Some(hi.into()),
        null_count: Some(0),
    };
    let m = stats::merge(&[Some(&t("b", "q")), Some(&t("ab", "z"))], &DataType::Utf8);
    assert_eq!((m.min, m.max), (Some("ab".into()), Some("z".into())));
}

#[test]
fn a_version_is_cut_into_segments_and_reads_back_whole() {
    let (store, _) = counting_store();
    let m = laid_out(&store, 2500, vec![tomb("a", &[3, 1200, 2400])]);
    assert_eq!(
        m.segments.len(),
        3,
        "2,500 files in segments of at most 1,000"
    );
    assert!(m
        .segments
        .iter()
        .all(|s| s.file_count <= SEGMENT_FILES as u64));
    assert_eq!(m.segments[0].columns["id"].min, Some(0.into()));
    assert_eq!(
        m.segments[2].columns["id"].max,
        Some((10 * 2499 + 9).into())
    );
    // Each segment names the tombstone with its own files only.
    let named: Vec<u64> = m
        .layout
        .bodies
        .iter()
        .map(|b| b.as_ref().unwrap().tombstones[0].files.len() as u64)
        .collect();
    assert_eq!(named, [1, 1, 1]);
    let back = reread(&store, &m, Depth::Full);
    assert_eq!(back.data_files, m.data_files);
    assert_eq!(back.tombstones, vec![tomb("a", &[3, 1200, 2400])]);
    assert_eq!(back.file_count(), 2500);
    // The root names segments only.
    let root = reread(&store, &m, Depth::Root);
    assert!(root.data_files.is_empty() && root.layout.view == View::Root);
    assert_eq!((root.file_count(), root.total_rows()), (2500, 2500 * 3));
}

#[test]
fn a_commit_rewrites_only_the_segments_it_changes() {
    let (store, _) = counting_store();
    let m = laid_out(&store, 2500, vec![]);
    let before: Vec<String> = m.segments.iter().map(|s| s.path.clone()).collect();
    // A delete touching the first and last segment's files.
    let mut next = m.clone();
    next.tombstones.push(tomb("b", &[10, 2490]));
    block(next.lay_out_segments(&store, "t"));
    let after: Vec<String> = next.segments.iter().map(|s| s.path.clone()).collect();
    assert_eq!(after.len(), 3);
    assert_ne!(after[0], before[0]);
    assert_eq!(after[1], before[1], "the untouched segment is reused");
    assert_ne!(after[2], before[2]);
    assert_eq!(next.tombstones, vec![tomb("b", &[10, 2490])]);
    // A file removed (compaction): its segment shrinks, the others stay.
    let mut fewer = next.clone();
    fewer.data_files.retain(|f| f.path != file(1500).path);
    block(fewer.lay_out_segments(&store, "t"));
    let paths: Vec<&str> = fewer.segments.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths[0], after[0]);
    assert_ne!(paths[1], after[1]);
    assert_eq!(paths[2], after[2]);
    assert_eq!(fewer.segments[1].file_count, 834 - 1);
    assert_eq!(fewer.file_count(), 2499);
    // An overwrite keeps nothing.
    let mut over = fewer.clone();
    over.replace_files(vec![file(7)]);
    block(over.lay_out_segments(&store, "t"));
    assert_eq!(over.segments.len(), 1);
    assert_eq!(reread(&store, &over, Depth::Full).data_files, vec![file(7)]);
}

#[test]
fn an_append_on_the_root_keeps_every_segment_and_writes_little() {
    let (store, counts) = counting_store();
    let m = laid_out(&store, 100_000, vec![tomb("a", &[5, 99_999])]);
    assert_eq!(m.segments.len(), 100);
    let root = reread(&store, &m, Depth::Root);
    counts.take();
    let mut next = root.clone();
    next.add_files([file(100_000)]).unwrap();
    assert_eq!(next.layout.view, View::Appended);
    block(next.lay_out_segments(&store, "t"));
    let [get, head, put, ..] = counts.take();
    assert_eq!((get, head, put), (0, 0, 1), "one new segment, nothing read");
    assert_eq!(next.segments.len(), 101);
    assert_eq!(next.segments[..100], m.segments[..]);
    let json = next.to_json().unwrap();
    assert!(
        json.len() < 64 * 1024,
        "root of 100,000 files: {} bytes",
        json.len()
    );
    let back = reread(&store, &next, Depth::Full);
    assert_eq!(back.file_count(), 100_001);
    assert_eq!(back.data_files.last(), Some(&file(100_000)));
    assert_eq!(back.tombstones, vec![tomb("a", &[5, 99_999])]);
    // The next append joins that small last segment.
    let mut again = reread(&store, &next, Depth::Root);
    again.add_files([file(100_001)]).unwrap();
    block(again.lay_out_segments(&store, "t"));
    assert_eq!(again.segments.len(), 101);
    assert_eq!(again.segments[100].file_count, 2);
}

#[test]
fn planning_a_point_read_loads_only_segments_that_can_match() {
    let (store, _) = counting_store();
    let m = laid_out(&store, 5000, vec![tomb("a", &[10, 4000])]);
    reread(&store, &m, Depth::Root);
    let key = |k: i64| predicate(vec![cond("id", "==", int(k))]).unwrap();
    let pruned = block(for_scan(&store, "t", 1, Some(&key(40_005)), false));
    assert_eq!(pruned.layout.view, View::Pruned);
    let loaded = pruned.layout.bodies.iter().filter(|b| b.is_some()).count();
    assert_eq!(pruned.data_files.len(), 1000);
    assert!(pruned.data_files.contains(&file(4000)));
    assert!(loaded >= 1);
    // The tombstone lists the loaded segment's file only.
    assert_eq!(pruned.tombstones, vec![tomb("a", &[4000])]);
    // A key no segment holds: none loaded; no predicate: all of them.
    let none = block(for_scan(&store, "t", 1, Some(&key(-5)), false));
    assert!(none.data_files.is_empty());
    let all = block(for_scan(&store, "t", 1, None, false));
    assert_eq!((all.layout.view, all.data_files.len()), (View::Full, 5000));
    let whole = block(for_scan(&store, "t", 1, Some(&key(40_005)), true));
    assert_eq!(whole.data_files.len(), 5000);
}

#[test]
fn a_real_table_grows_segments_by_appends_and_reads_like_its_model() {
    let (store, counts) = counting_store();
    let mut model = create_and_append_steps(&store, 40);
    let root: TableManifest = block(read_version_at(&store, "t", 40, Depth::Root));
    let files: Vec<u64> = root.segments.iter().map(|s| s.file_count).collect();
    assert_eq!(
        files,
        [TAIL_FILES, 41 - TAIL_FILES],
        "the tail fills, then a new one"
    );
    assert_eq!(ids(&store, At::Latest, None), model);
    // A delete in the first segment rewrites it alone.
    counts.take();
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("id", "==", int(20))]).unwrap(),
        2,
    )
    .unwrap();
    assert!(d.committed);
    model.retain(|i| *i != 20);
    assert_eq!(d.manifest.segments[1], root.segments[1]);
    assert_ne!(d.manifest.segments[0].path, root.segments[0].path);
    // Point reads through pruning agree with the model, before and after.
    for k in [0i64, 20, 21, 129, 200] {
        let pred = predicate(vec![cond("id", "==", int(k))]).unwrap();
        let m = block(for_scan(
            &store,
            "t",
            d.manifest.version,
            Some(&pred),
            false,
        ));
        let opts = ScanOptions {
            columns: Some(vec!["id".into()]),
            predicate: Some(Arc::new(pred)),
            parallelism: 2,
            ..Default::default()
        };
        let got: Vec<i64> = scan(store.clone(), "t", &m, opts)
            .unwrap()
            .flat_map(|b| {
                b.unwrap()
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        let want: Vec<i64> = model.iter().copied().filter(|i| *i == k).collect();
        assert_eq!(got, want, "key {k}");
    }
    // Compaction merges the small segments into one.
    let c = compact(store.clone(), "t", CompactOptions::deleted(0.5)).unwrap();
    assert!(c.committed);
    assert_eq!(c.manifest.segments.len(), 1);
    assert_eq!(ids(&store, At::Latest, None), model);
    assert_eq!(ids(&store, At::Version(40), None).len(), 130);
}

#[test]
fn a_legacy_manifest_reads_and_is_read_only_until_upgraded() {
    let (store, _) = counting_store();
    create_and_append(&store);
    // Version 2 as earlier pds wrote it: every file inline.
    let mut old: TableManifest = block(read_version_at(&store, "t", 1, Depth::Full));
    old.version = 2;
    old.previous = Some(1);
    old.segments.clear();
    old.layout = Default::default();
    let raw = old.to_json().unwrap();
    assert!(String::from_utf8_lossy(&raw).contains("\"format\": \"pds-table/1\""));
    assert!(String::from_utf8_lossy(&raw).contains("\"data_files\""));
    block(store.put(&manifest_key("t", 2), Bytes::from(raw), PutMode::Create));
    let pointer = Pointer::new(2, None).to_json().unwrap();
    block(store.put(&pointer_key("t"), Bytes::from(pointer), PutMode::Overwrite));
    let back: TableManifest = block(read_version_at(&store, "t", 2, Depth::Root));
    assert_eq!((back.layout.view, back.data_files.len()), (View::Full, 2));
    assert_eq!(ids(&store, At::Latest, None), (0..150).collect::<Vec<_>>());
    // No commit builds on it (older readers could not read the next
    // version) but an explicit upgrade, which writes segments.
    // Refused before anything is written.
    let objects = || block(store.list("t", true)).objects.len();
    let before = objects();
    let refused = append_ids(&store, 150..160);
    assert!(
        matches!(refused, Err(Error::UpgradeRequired { kind: "table", .. })),
        "{refused:?}"
    );
    assert_eq!(objects(), before);
    let up = block(crate::table::upgrade::upgrade_table(&store, "t"));
    assert_eq!(up.version, 3);
    append_ids(&store, 150..160).unwrap();
    let raw = block(store.get(&manifest_key("t", 3)));
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("\"format\": \"pds-table/3\"") && !text.contains("data_files"));
    let v3: TableManifest = block(read_version_at(&store, "t", 3, Depth::Full));
    assert_eq!((v3.file_count(), v3.operation.as_str()), (2, "upgrade"));
    assert_eq!(ids(&store, At::Latest, None), (0..160).collect::<Vec<_>>());
}

#[test]
fn missing_or_damaged_segments_are_manifest_corrupted() {
    let (store, _) = counting_store();
    let m = laid_out(&store, 30, vec![tomb("a", &[1])]);
    let corrupt = |m: &TableManifest| {
        let key = manifest_key("t", m.version);
        block(store.put(&key, Bytes::from(m.to_json().unwrap()), PutMode::Overwrite));
        match crate::runtime::block_on(read_version_at::<TableManifest>(
            &store,
            "t",
            m.version,
            Depth::Full,
        ))
        .unwrap()
        {
            Err(Error::ManifestCorrupted { reason, .. }) => reason,
            other => panic!("{other:?}"),
        }
    };
    // A segment that is not there (a sha no read has cached).
    let mut gone = m.clone();
    gone.segments[0].path = "segment/none.json".into();
    gone.segments[0].sha256 = "0e".repeat(32);
    assert!(corrupt(&gone).contains("missing"));
    // A segment whose bytes are not the ones the root records.
    let mut replaced = m.clone();
    replaced.segments[0].sha256 = "0f".repeat(32);
    assert!(corrupt(&replaced).contains("SHA-256"));
    // A root that says other things of cached bytes is held to them.
    let mut miscounted = m.clone();
    miscounted.segments[0].total_rows += 1;
    assert!(corrupt(&miscounted).contains("counts"));
    let mut restated = m.clone();
    restated.segments[0].columns.clear();
    assert!(corrupt(&restated).contains("statistics"));
    // Roots that name segments badly are refused when parsed.
    let mut outside = m.clone();
    outside.segments[0].path = "data/x.json".into();
    assert!(corrupt(&outside).contains("not under segment/"));
    let mut twice = m.clone();
    twice.segments.push(twice.segments[0].clone());
    assert!(corrupt(&twice).contains("listed twice"));
}

/// Segment bytes changed anywhere (with a reference that matches them, as
/// a writer with a bug would make) open or fail as `ManifestCorrupted`;
/// the same bytes against the true reference always fail.
#[test]
fn damaged_segment_bytes_never_panic() {
    let m = one_file_manifest(1);
    let files: Vec<DataFile> = (0..20).map(file).collect();
    let (r, _, body) = Segment::build(
        files,
        vec![tomb("a", &[2, 3])],
        "segment/s.json".into(),
        &m,
        "p",
    )
    .unwrap();
    assert!(Segment::open(&body, "k", &r, &m, "p").is_ok());
    let mut rng = crate::test_rng::TestRng::new(0x2545_f491_4f6c_dd1d);
    let mut next = move || rng.next_u64();
    for _ in 0..3000 {
        let mut damaged = body.to_vec();
        match next() % 3 {
            0 => {
                let at = (next() % damaged.len() as u64) as usize;
                damaged[at] = (next() % 256) as u8;
            }
            1 => damaged.truncate((next() % damaged.len() as u64) as usize),
            _ => {
                let at = (next() % damaged.len() as u64) as usize;
                damaged[at] = b"0123456789,:{}[]\"-.e"[(next() % 20) as usize];
            }
        }
        if damaged == body.to_vec() {
            continue;
        }
        assert!(matches!(
            Segment::open(&damaged, "k", &r, &m, "p"),
            Err(Error::ManifestCorrupted { .. })
        ));
        let mut matching = r.clone();
        matching.sha256 = crate::parquet::encode::sha256_hex(&damaged);
        match Segment::open(&damaged, "k", &matching, &m, "p") {
            Ok(_) | Err(Error::ManifestCorrupted { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
}

/// A version whose file list readers would refuse is not laid out (nor
/// anything written): a file listed twice, a tombstone naming a file the
/// version lacks, a file without a valid SHA-256.
#[test]
fn a_file_list_readers_would_refuse_is_never_written() {
    let (store, counts) = counting_store();
    let m = laid_out(&store, 50, vec![]);
    counts.take();
    let refused = |next: &mut TableManifest, why: &str| match crate::runtime::block_on(
        next.lay_out_segments(&store, "t"),
    )
    .unwrap()
    {
        Err(Error::Task(reason)) => assert!(reason.contains(why), "{why}: {reason}"),
        other => panic!("{why}: {other:?}"),
    };
    let mut twice = m.clone();
    twice.data_files.push(file(3));
    refused(&mut twice, "listed twice");
    let mut stale = m.clone();
    stale.tombstones.push(tomb("gone", &[7, 900]));
    refused(&mut stale, "not a data file of this version");
    let mut bad_sha = m.clone();
    let mut f = file(60);
    f.sha256 = "xyz".into();
    bad_sha.data_files.push(f);
    refused(&mut bad_sha, "sha256");
    let [_, _, put, ..] = counts.take();
    assert_eq!(put, 0, "nothing written");
}

#[test]
fn a_long_run_of_appends_keeps_only_its_live_segments_cached() {
    // Each append rewrites the small last segment: the one it replaced is
    // forgotten, so a writer that runs for days holds the segments of its
    // current version, not one per version it wrote.
    let (store, counts) = counting_store();
    create_keyed(&store, 0..10);
    let mut seen: Vec<String> = Vec::new();
    let mut m = None;
    for i in 0..(2 * TAIL_FILES as i64 + 5) {
        let v = append(
            store.clone(),
            "t",
            rows(100 + i..101 + i),
            SchemaMode::Strict,
            None,
            1,
        )
        .unwrap();
        seen.extend(v.segments.iter().map(|r| r.sha256.clone()));
        m = Some(v);
    }
    let m = m.unwrap();
    assert!(m.segments.len() >= 3, "{} segments", m.segments.len());
    seen.sort();
    seen.dedup();
    let live: Vec<&String> = m.segments.iter().map(|r| &r.sha256).collect();
    let cached: Vec<&String> = seen
        .iter()
        .filter(|s| cache().get::<Cached>(s).is_some())
        .collect();
    assert_eq!(
        cached.len(),
        live.len(),
        "of {} segments written, the cache holds more than the live ones",
        seen.len()
    );
    assert!(live.iter().all(|s| cached.contains(s)));
    // The live ones stay cached: the next append GETs the root alone.
    counts.take();
    append(store.clone(), "t", rows(0..1), SchemaMode::Strict, None, 1).unwrap();
    let [gets, ..] = counts.take();
    assert_eq!(gets, 2, "the pointer and the root, no segment");
}

#[test]
fn segment_weights_grow_with_files_and_the_cache_is_bounded() {
    let small = Segment {
        format: FORMAT.into(),
        files: vec![file(1)],
        tombstones: vec![],
    };
    let big = Segment {
        format: FORMAT.into(),
        files: (0..100).map(file).collect(),
        tombstones: vec![tomb("x", &[1, 2])],
    };
    let empty = Segment {
        format: FORMAT.into(),
        files: vec![],
        tombstones: vec![],
    };
    let per_file = weight(&small) - weight(&empty);
    assert!(per_file > std::mem::size_of::<DataFile>());
    assert!(weight(&big) > weight(&empty) + 100 * per_file);
    // Filled with distinct segments far beyond either bound, it keeps at
    // most its bounds (a private cache of the same kind and limits).
    let c = ObjectCache::with_limits(100 * weight(&big), 50);
    for i in 0..500u64 {
        c.insert(format!("{i:064}"), Arc::new(big.clone()), weight(&big));
        let (n, bytes) = c.usage();
        assert!(n <= 50 && bytes <= 100 * weight(&big), "{n} {bytes}");
    }
}

/// On a table of several segments (keys in append order), a delete, an
/// upsert and an update by primary key plan and commit on the segments
/// that can hold their keys (and the small last one): the others are kept
/// as they are, never loaded, and the table reads as its model.
#[test]
fn key_rewrites_load_only_the_segments_that_can_hold_their_keys() {
    use crate::table::update::{update, UpdateOptions};
    use crate::table::upsert::upsert;
    let (store, _) = counting_store();
    let mut model = create_and_append_steps(&store, 150);
    let before: TableManifest = block(read_version_at(&store, "t", 150, Depth::Root));
    assert!(before.segments.len() >= 3, "{:?}", before.segments);
    let file_count = before.file_count() as usize;

    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("id", "==", int(20))]).unwrap(),
        2,
    )
    .unwrap();
    model.retain(|&k| k != 20);
    assert_eq!(d.manifest.layout.view, View::Partial);
    assert!(
        d.manifest.data_files.len() < file_count / 2,
        "{} of {file_count} files loaded",
        d.manifest.data_files.len()
    );
    let after: TableManifest = block(read_version_at(&store, "t", 151, Depth::Root));
    let kept = after
        .segments
        .iter()
        .filter(|s| before.segments.iter().any(|b| b.path == s.path))
        .count();
    assert!(kept >= before.segments.len() - 2, "{kept} segments kept");
    assert_eq!(ids(&store, At::Latest, None), model);

    let up = upsert(store.clone(), "t", rows(30..33), SchemaMode::Strict, 2).unwrap();
    assert!(up.manifest.data_files.len() < file_count / 2);
    let mut sorted = model.clone();
    sorted.sort_unstable();
    assert_eq!(ids(&store, At::Latest, None), sorted);

    let opts = UpdateOptions {
        predicate: Some(predicate(vec![cond("id", "==", int(40))]).unwrap()),
        columns: vec!["customer".into()],
        filter: serde_json::Value::Null,
        parallelism: 2,
    };
    let mut set = |b: arrow_array::RecordBatch| {
        let n = b.num_rows();
        let columns = vec![
            b.column(0).clone(),
            Arc::new(arrow_array::StringArray::from(vec!["w"; n])) as arrow_array::ArrayRef,
        ];
        Ok((
            None,
            arrow_array::RecordBatch::try_new(b.schema(), columns)?,
        ))
    };
    let u = update(store.clone(), "t", opts, &mut set).unwrap();
    assert_eq!(u.rows, Some(1));
    assert!(u.manifest.data_files.len() < file_count / 2);
    assert_eq!(ids(&store, At::Latest, None), sorted);
}
