//! Compaction window by window: every version it commits reads like the
//! model, shared tombstones stay with the files of other windows, and
//! concurrent deletes are never lost.

use crate::table::versions;
use std::sync::Arc;

use super::*;
use crate::parquet::filter::predicate;
use crate::table::delete::delete;
use crate::table::scan::At;
use crate::table::tests::{append_ids, cond, counting_store, ids, int, props, rows, schema};
use crate::table::versions::{read_version_at, Depth};
use crate::table::write::create;

fn block<T>(f: impl std::future::Future<Output = crate::error::Result<T>>) -> T {
    crate::runtime::block_on(f).unwrap().unwrap()
}

/// Table `t` keyed by `id`, one row per file: two segments of 520 files
/// (ids 0..1040; more than a segment holds, so that a commit rewriting
/// both keeps two) and a small one of 10 (1040..1050). The ids, the model.
fn big_segments(store: &Arc<StoreHandle>) -> Vec<i64> {
    let mut p = props(Some("id"));
    p.target_file_size = Some(1);
    create(
        store.clone(),
        "t",
        schema(),
        Some(rows(0..520)),
        p,
        false,
        2,
    )
    .unwrap();
    append_ids(store, 520..1040).unwrap();
    let m = append_ids(store, 1040..1050).unwrap();
    let files: Vec<u64> = m.segments.iter().map(|s| s.file_count).collect();
    assert_eq!(files, [520, 520, 10]);
    (0..1050).collect()
}

fn delete_where(store: &Arc<StoreHandle>, conds: Vec<(String, String, Option<ArrayRef>)>) {
    let d = delete(store.clone(), "t", predicate(conds).unwrap(), 2).unwrap();
    assert!(d.committed);
}

use arrow_array::ArrayRef;

fn opts(target_file_size: u64, min_deleted_fraction: f64) -> CompactOptions {
    CompactOptions {
        target_file_size: Some(target_file_size),
        min_deleted_fraction,
        parallelism: 2,
        progress: None,
    }
}

fn root(store: &Arc<StoreHandle>, version: u64) -> TableManifest {
    block(read_version_at(store, "t", version, Depth::Root))
}

#[test]
fn windows_bind_segments_sharing_tombstones_and_pack_small_ones() {
    let seg = |file_count: u64| SegmentRef {
        path: String::new(),
        sha256: String::new(),
        file_count,
        total_rows: 0,
        size_bytes: 0,
        tombstone_count: 0,
        schema: None,
        columns: Default::default(),
        files_schema: None,
    };
    let names = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // 0 and 3 share a tombstone, and 3 and 5 another: one window. 10 + 249
    // files of small segments fit one window; 600 and 300 are not small.
    let segments = [
        seg(1000),
        seg(10),
        seg(SMALL_SEGMENT),
        seg(600),
        seg(300),
        seg(SMALL_SEGMENT - 1),
        seg(20),
    ];
    let tombstones = [
        names(&["a", "b"]),
        names(&["c"]),
        names(&[]),
        names(&["b", "d"]),
        names(&[]),
        names(&["d"]),
        names(&["c"]),
    ];
    let got = windows(&segments, &tombstones);
    // The last segment's window comes first.
    assert_eq!(got, [vec![1, 6], vec![0, 3, 5], vec![2], vec![4]]);
    // Small segments alone: packed up to a segment's worth of files.
    let smalls = vec![seg(200); 6];
    let none = vec![Vec::new(); 6];
    assert_eq!(windows(&smalls, &none), [vec![5], vec![0, 1, 2, 3, 4]]);
    // Small segments bound by tombstones into a segment's worth: alone.
    let bound = vec![names(&["x"]); 6];
    assert_eq!(windows(&smalls, &bound), [vec![0, 1, 2, 3, 4, 5]]);
    assert!(windows(&[], &[]).is_empty());
}

#[test]
fn each_window_commits_a_version_that_reads_like_the_model() {
    let (store, _) = counting_store();
    let mut model = big_segments(&store);
    // Deletes within one segment each.
    delete_where(
        &store,
        vec![cond("id", ">=", int(500)), cond("id", "<", int(520))],
    );
    delete_where(&store, vec![cond("id", "==", int(5))]);
    delete_where(&store, vec![cond("id", "==", int(800))]);
    model.retain(|&i| !(500..520).contains(&i) && i != 5 && i != 800);
    let before = block(crate::table::versions::latest(&store, "t"))
        .unwrap()
        .manifest
        .version;
    // Files whose rows are all deleted go; no other file is rewritten.
    let counts: Vec<(u64, u64)> = root(&store, before)
        .segments
        .iter()
        .map(|s| (s.file_count, s.tombstone_count))
        .collect();
    assert_eq!(counts, [(520, 2), (520, 1), (10, 0)]);
    let c = compact(store.clone(), "t", opts(1, 1.0)).unwrap();
    assert!(c.committed);
    assert_eq!((c.files_removed, c.files_added), (22, 0));
    let after = c.manifest.version;
    // One version per window with work: the small last segment has none.
    assert_eq!(after, before + 2);
    for v in before + 1..=after {
        assert_eq!(ids(&store, At::Version(v), None), model, "version {v}");
        let m = root(&store, v);
        assert_eq!(m.operation, "compact");
    }
    let m = root(&store, after);
    assert_eq!(m.segments.iter().map(|s| s.tombstone_count).sum::<u64>(), 0);
    assert_eq!(m.file_count(), 1050 - 22);
    // The versions before still read as they did.
    assert_eq!(
        ids(&store, At::Version(before - 3), None),
        (0..1050).collect::<Vec<_>>()
    );

    // Small files merged, window by window: each window's files become one
    // (the last segment's first), and a window does not merge what the
    // ones before it wrote.
    let c = compact(store.clone(), "t", opts(1 << 20, 0.5)).unwrap();
    assert!(c.committed);
    assert!(c.manifest.version >= after + 2, "one version per window");
    assert_eq!(ids(&store, At::Latest, None), model);
    let m = root(&store, c.manifest.version);
    assert!(m.file_count() <= 3, "{} files", m.file_count());
    assert_eq!(m.segments.len(), 1);
    // The next compaction merges those; then there is nothing left to do.
    let c = compact(store.clone(), "t", opts(1 << 20, 0.5)).unwrap();
    assert_eq!(root(&store, c.manifest.version).file_count(), 1);
    assert_eq!(ids(&store, At::Latest, None), model);
    let again = compact(store.clone(), "t", opts(1 << 20, 0.5)).unwrap();
    assert!(!again.committed);
    assert_eq!(again.manifest.version, c.manifest.version);
}

/// Table `t` keyed by `id`: `segments` segments of 520 files of 20 rows
/// (ids `0..10400 segments`), then the deletes `[lo, hi)` of `deletes`,
/// one version each. The ids, the model.
fn thin_files(store: &Arc<StoreHandle>, segments: i64, deletes: &[(i64, i64)]) -> Vec<i64> {
    let mut p = props(Some("id"));
    // The size of 20 rows, as the writer estimates it from a first batch.
    let first = rows(0..20).next().unwrap().unwrap();
    p.target_file_size = Some(first.get_array_memory_size() as u64);
    let twenty = |lo: i64| {
        let batches: Vec<_> = (0..520)
            .map(|i| {
                Ok(rows(lo + 20 * i..lo + 20 * (i + 1))
                    .next()
                    .unwrap()
                    .unwrap())
            })
            .collect();
        Box::new(arrow_array::RecordBatchIterator::new(batches, schema()))
            as crate::table::write::BoxedReader
    };
    create(store.clone(), "t", schema(), Some(twenty(0)), p, false, 2).unwrap();
    let mut m = None;
    for k in 1..segments {
        let strict = crate::table::schema::SchemaMode::Strict;
        m = Some(
            crate::table::write::append(store.clone(), "t", twenty(10400 * k), strict, None, 2)
                .unwrap(),
        );
    }
    let per_segment: Vec<(u64, u64)> = m
        .unwrap()
        .segments
        .iter()
        .map(|s| (s.file_count, s.total_rows))
        .collect();
    assert_eq!(per_segment, vec![(520, 10400); segments as usize]);
    let mut model: Vec<i64> = (0..10400 * segments).collect();
    for &(lo, hi) in deletes {
        delete_where(
            store,
            vec![cond("id", ">=", int(lo)), cond("id", "<", int(hi))],
        );
        model.retain(|&i| !(lo..hi).contains(&i));
    }
    model
}

fn tombstone_counts(m: &TableManifest) -> Vec<u64> {
    m.segments.iter().map(|s| s.tombstone_count).collect()
}

fn latest_root(store: &Arc<StoreHandle>) -> TableManifest {
    let v = block(crate::table::versions::latest(store, "t"))
        .unwrap()
        .manifest
        .version;
    root(store, v)
}

#[test]
fn tombstones_coalesce_per_window_and_a_shared_one_binds_its_segments() {
    let (store, _) = counting_store();
    // Two tombstones in each segment, and one naming files of the first two.
    let deletes = [
        (10390, 10410),
        (100, 103),
        (11000, 11002),
        (5001, 5002),
        (15001, 15003),
        (21000, 21003),
        (25000, 25001),
    ];
    let model = thin_files(&store, 3, &deletes);
    let before = latest_root(&store);
    assert_eq!(tombstone_counts(&before), [3, 3, 2]);
    // No file qualifies (none small, none thin enough): tombstones coalesce,
    // the first two segments' together.
    let c = compact(store.clone(), "t", opts(1, 1.0)).unwrap();
    assert!(c.committed);
    assert_eq!((c.files_removed, c.files_added), (0, 0));
    assert_eq!(c.manifest.version, before.version + 2);
    // The last segment's window first; the other two are untouched.
    let mid = root(&store, before.version + 1);
    assert_eq!(tombstone_counts(&mid), [3, 3, 1]);
    assert_eq!(mid.segments[..2], before.segments[..2]);
    assert_eq!(ids(&store, At::Version(before.version + 1), None), model);
    let end = root(&store, c.manifest.version);
    assert_eq!(tombstone_counts(&end), [1, 1, 1]);
    assert_eq!(end.segments[2], mid.segments[2]);
    assert_eq!(ids(&store, At::Latest, None), model);
    // One tombstone per window: nothing more to coalesce.
    assert!(!compact(store.clone(), "t", opts(1, 1.0)).unwrap().committed);
}

#[test]
fn a_window_keeps_the_files_of_a_tombstone_it_shares_with_segments_not_loaded() {
    let (store, _) = counting_store();
    // A tombstone naming files of both segments, others in the first.
    let model = thin_files(&store, 2, &[(10390, 10410), (100, 103), (5001, 5002)]);
    let latest = versions::latest_existing_root(&store, "t").unwrap();
    let before = latest.manifest.clone();
    assert_eq!(tombstone_counts(&before), [3, 1]);
    // The first segment alone, as when a concurrent commit cut the
    // segments anew after the windows were found.
    let choice = SegmentChoice {
        named: HashSet::from([before.segments[0].path.clone()]),
        known: before.segments.iter().map(|s| s.path.clone()).collect(),
    };
    let w = compact_window(
        &store,
        "t",
        &opts(1 << 30, 0.0),
        latest,
        Arc::new(choice),
        Counting::Continue,
    )
    .unwrap()
    .unwrap();
    // Every file of the first segment is small and merged, but the one the
    // shared tombstone names; its own two tombstones are gone.
    assert_eq!((w.files_removed, w.files_added), (519, 1));
    let after = root(&store, w.manifest.version);
    let full: TableManifest = block(read_version_at(&store, "t", after.version, Depth::Full));
    let shared = &full.tombstones;
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert_eq!(shared[0].files.len(), 2);
    // The second segment, not loaded, is kept as it was.
    assert!(after.segments.contains(&before.segments[1]));
    assert_eq!(ids(&store, At::Latest, None), model);
    // A compaction of the whole table then takes them together (the
    // window's merged file went into a small segment of its own, merged by
    // the compaction after).
    let c = compact(store.clone(), "t", opts(1 << 30, 0.0)).unwrap();
    assert!(c.committed);
    let full: TableManifest = block(read_version_at(
        &store,
        "t",
        c.manifest.version,
        Depth::Full,
    ));
    assert!(full.tombstones.is_empty());
    assert_eq!(full.data_files.len(), 2);
    assert_eq!(ids(&store, At::Latest, None), model);
    let c = compact(store.clone(), "t", opts(1 << 30, 0.0)).unwrap();
    assert!(c.committed);
    assert_eq!(c.manifest.file_count(), 1);
    assert_eq!(ids(&store, At::Latest, None), model);
}

#[test]
fn deletes_racing_a_compaction_of_many_windows_are_never_lost() {
    let (store, _) = counting_store();
    let mut model = big_segments(&store);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deleter = {
        let store = store.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut deleted = Vec::new();
            for k in (3..1050).step_by(61) {
                if done.load(std::sync::atomic::Ordering::SeqCst) && deleted.len() >= 4 {
                    break;
                }
                let pred = predicate(vec![cond("id", "==", int(k))]).unwrap();
                delete(store.clone(), "t", pred, 2).unwrap();
                deleted.push(k);
            }
            deleted
        })
    };
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        match compact(store.clone(), "t", opts(1 << 20, 0.0)) {
            Ok(c) => outcomes.push(c.committed),
            // Deletes kept landing on the window: allowed, nothing lost.
            Err(Error::CommitConflict { .. }) => outcomes.push(false),
            Err(e) => panic!("{e}"),
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let deleted = deleter.join().unwrap();
    assert!(outcomes.iter().any(|&c| c), "{outcomes:?}");
    model.retain(|i| !deleted.contains(i));
    assert_eq!(ids(&store, At::Latest, None), model);
    // And once the deletes stop, it compacts everything.
    compact(store.clone(), "t", opts(1 << 20, 0.0)).unwrap();
    assert_eq!(ids(&store, At::Latest, None), model);
    let m = root(
        &store,
        block(crate::table::versions::latest(&store, "t"))
            .unwrap()
            .manifest
            .version,
    );
    assert_eq!(m.segments.iter().map(|s| s.tombstone_count).sum::<u64>(), 0);
}
