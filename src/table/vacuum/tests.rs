//! Vacuum against real stores (memory, file), with the clock moved forward
//! through `now` so that every object counts as old, and a store that lets a
//! commit land while vacuum lists.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::{Duration, Utc};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStoreExt;

use super::*;
use crate::parquet::filter::predicate;
use crate::store::hooked::{Hooked, Op, Outcome};
use crate::store::PutMode;
use crate::table::compact::{compact, CompactOptions};
use crate::table::delete::delete;
use crate::table::scan::At;
use crate::table::schema::SchemaMode;
use crate::table::tests::{cond, ids, int, props, rows, schema};
use crate::table::versions::{latest, latest_with, read_version};
use crate::table::write::{append, create};
use crate::table::{manifest_key, pointer_key, Pointer};

/// Run a store operation that must succeed.
fn block<T>(f: impl std::future::Future<Output = crate::error::Result<T>>) -> T {
    crate::runtime::block_on(f).unwrap().unwrap()
}

/// Vacuum options removing whatever is unreferenced at once.
fn at_once(keep_versions: bool) -> VacuumOptions {
    VacuumOptions {
        retain: Duration::zero(),
        min_age: Duration::zero(),
        keep_versions,
        dry_run: false,
        progress: None,
    }
}

/// A moment at which every object written so far is a day old.
fn tomorrow() -> DateTime<Utc> {
    Utc::now() + Duration::days(1)
}

fn memory() -> Arc<StoreHandle> {
    Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap())
}

/// Table `t` with versions 0..=3: create, two appends, a delete (100 rows each).
fn table(store: &Arc<StoreHandle>) {
    create(
        store.clone(),
        "t",
        schema(),
        Some(rows(0..100)),
        props(None),
        false,
        2,
    )
    .unwrap();
    for i in 1..3 {
        append(
            store.clone(),
            "t",
            rows(i * 100..(i + 1) * 100),
            SchemaMode::Strict,
            None,
            2,
        )
        .unwrap();
    }
    let pred = predicate(vec![cond("id", "<", int(10))]).unwrap();
    assert!(delete(store.clone(), "t", pred, 2).unwrap().committed);
}

fn keys(store: &StoreHandle, under: &str) -> Vec<String> {
    let listing = block(store.list(under, true));
    listing.objects.into_iter().map(|o| o.key).collect()
}

fn put(store: &StoreHandle, key: &str, body: &[u8]) {
    block(store.put(key, Bytes::copy_from_slice(body), PutMode::Overwrite));
}

#[test]
fn the_version_the_pointer_names_and_every_later_one_survive_any_retention() {
    let store = memory();
    table(&store);
    // A writer created v4 and died before moving the pointer (still at 3).
    let mut orphan = block(read_version(&store, "t", 3));
    orphan.version = 4;
    orphan.previous = Some(3);
    block(store.put(
        &manifest_key("t", 4),
        Bytes::from(orphan.to_json().unwrap()),
        PutMode::Create,
    ));
    let v = block(vacuum(&store, "t", &at_once(false), tomorrow()));
    assert!(v.removed.contains(&manifest_name(2)), "{:?}", v.removed);
    assert!(!v.removed.contains(&manifest_name(3)), "the pointer's");
    assert!(!v.removed.contains(&manifest_name(4)), "the latest");
    // Readers look one name past the pointer: they read the committed v4.
    let seen = block(latest(&store, "t")).unwrap();
    assert_eq!(seen.manifest.version, 4);
    assert_eq!(
        ids(&store, At::Version(3), None),
        (10..300).collect::<Vec<_>>()
    );
    assert_eq!(ids(&store, At::Latest, None), (10..300).collect::<Vec<_>>());
}

/// What [`OnList`] runs as a listing starts.
type Hook = Box<dyn FnOnce(&InMemory) + Send>;

/// Runs a hook once, as the store's first recursive listing starts.
struct OnList {
    on_list: Mutex<Option<Hook>>,
}

impl crate::store::hooked::Hook for OnList {
    fn on(&self, op: Op, _: Option<&Path>, inner: &InMemory) -> Outcome {
        if op == Op::List {
            let hook = self.on_list.lock().unwrap().take();
            if let Some(hook) = hook {
                hook(inner);
            }
        }
        Outcome::Forward
    }
}

#[test]
fn a_commit_landing_while_vacuum_lists_keeps_its_manifest_and_files() {
    let hooked = Arc::new(Hooked::new(OnList {
        on_list: Mutex::new(None),
    }));
    let store = Arc::new(StoreHandle::from_object_store(hooked.clone(), "").unwrap());
    table(&store);
    // Another writer commits v4 (a new data file) as vacuum starts listing.
    let mut next = block(read_version(&store, "t", 3));
    let mut file = next.data_files[0].clone();
    let copied = file.path.replace("data/", "data/racer-");
    let body = block(store.get(&format!("t/{}", file.path)));
    file.path = copied.clone();
    next.data_files.push(file);
    next.version = 4;
    next.previous = Some(3);
    block(next.lay_out_segments(&store, "t"));
    let manifest = next.to_json().unwrap();
    let pointer = Pointer::new(4, None).to_json().unwrap();
    *hooked.on_list.lock().unwrap() = Some(Box::new(move |inner: &InMemory| {
        let put = |key: String, body: Vec<u8>| {
            futures::executor::block_on(inner.put(&Path::from(key), body.into())).unwrap();
        };
        put(format!("t/{copied}"), body.to_vec());
        put(manifest_key("t", 4), manifest);
        put(pointer_key("t"), pointer);
    }));
    let v = block(vacuum(&store, "t", &at_once(false), tomorrow()));
    assert!(hooked.on_list.lock().unwrap().is_none(), "the hook ran");
    assert!(
        !v.removed.iter().any(|r| r.contains("racer")),
        "{:?}",
        v.removed
    );
    assert!(!v.removed.contains(&manifest_name(4)));
    let mut expected: Vec<i64> = (10..300).collect();
    expected.extend(0..100); // the racer's copy of the first file (no tombstone)
    expected.sort_unstable();
    assert_eq!(ids(&store, At::Latest, None), expected);
}

#[test]
fn keep_versions_removes_only_what_no_version_references() {
    let store = memory();
    table(&store);
    let opts = CompactOptions::deleted(0.0);
    assert!(compact(store.clone(), "t", opts).unwrap().committed);
    put(&store, "t/data/killed-writer.parquet", b"PAR1 half");
    put(&store, "t/tombstone/killed.del", b"{}");
    let before: Vec<Vec<i64>> = (0..5).map(|v| ids(&store, At::Version(v), None)).collect();
    let v = block(vacuum(&store, "t", &at_once(true), tomorrow()));
    assert_eq!(
        v.removed,
        ["data/killed-writer.parquet", "tombstone/killed.del"]
    );
    assert_eq!(v.retained, [0, 1, 2, 3, 4]);
    for (version, rows) in before.iter().enumerate() {
        assert_eq!(&ids(&store, At::Version(version as u64), None), rows);
    }
    // Without it, history goes: the files the compaction replaced too.
    let v = block(vacuum(&store, "t", &at_once(false), tomorrow()));
    assert!(v.removed.contains(&manifest_name(0)));
    assert!(v.removed.iter().any(|r| r.starts_with("data/")));
    assert!(v.removed.iter().any(|r| r.starts_with("tombstone/")));
    assert_eq!(v.retained, [4]);
    assert_eq!(ids(&store, At::Latest, None), before[4]);
}

#[test]
fn nothing_younger_than_min_age_goes_and_the_window_is_kept() {
    let store = memory();
    table(&store);
    put(&store, "t/data/in-flight.parquet", b"PAR1 uploading");
    let hour = VacuumOptions {
        retain: Duration::hours(1),
        min_age: Duration::hours(1),
        keep_versions: false,
        dry_run: false,
        progress: None,
    };
    let v = block(vacuum(&store, "t", &hour, Utc::now()));
    assert!(v.removed.is_empty(), "{:?}", v.removed);
    // Two hours on: older than the floor, and versions past the window go.
    let later = Utc::now() + Duration::hours(2);
    let planned = block(vacuum(
        &store,
        "t",
        &VacuumOptions {
            dry_run: true,
            ..hour.clone()
        },
        later,
    ));
    assert!(planned
        .removed
        .contains(&"data/in-flight.parquet".to_string()));
    assert!(keys(&store, "t").contains(&"t/data/in-flight.parquet".to_string()));
    let v = block(vacuum(&store, "t", &hour, later));
    assert_eq!(v.removed, planned.removed);
    assert!(!keys(&store, "t").contains(&"t/data/in-flight.parquet".to_string()));
    // A window reaching back past every version keeps them all.
    let store = memory();
    table(&store);
    let wide = VacuumOptions {
        retain: Duration::days(2),
        ..at_once(false)
    };
    let v = block(vacuum(&store, "t", &wide, tomorrow()));
    assert!(v.removed.is_empty());
}

#[test]
fn bad_options_are_refused_and_huge_windows_clamped() {
    let bad = [
        (-1.0, 0.0),
        (f64::NAN, 0.0),
        (f64::INFINITY, 0.0),
        (0.0, -1.0),
        (0.0, f64::NAN),
        (10.0, 3600.0),
    ];
    for (retain, min_age) in bad {
        let r = VacuumOptions::from_seconds(retain, min_age, false, true);
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{retain} {min_age}: {r:?}"
        );
    }
    let store = memory();
    table(&store);
    put(&store, "t/data/orphan.parquet", b"x");
    for secs in [8.64e12, 1e300, f64::MAX] {
        let opts = VacuumOptions::from_seconds(secs, 0.0, false, false).unwrap();
        let v = block(vacuum(&store, "t", &opts, Utc::now()));
        assert!(v.removed.is_empty(), "{secs}");
        let opts = VacuumOptions::from_seconds(secs, secs, true, false).unwrap();
        assert!(block(vacuum(&store, "t", &opts, Utc::now()))
            .removed
            .is_empty());
    }
    let max = VacuumOptions {
        retain: Duration::MAX,
        ..at_once(false)
    };
    for now in [
        Utc::now(),
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
    ] {
        block(vacuum(&store, "t", &max, now));
    }
    let r = crate::runtime::block_on(vacuum(&store, "absent", &at_once(false), Utc::now()));
    let r = r.unwrap();
    assert!(matches!(r, Err(Error::NotFound { .. })), "{r:?}");
}

#[test]
fn keys_inside_the_key_and_other_objects_are_never_touched() {
    let store = memory();
    table(&store);
    let nested = [
        "t/archive/_SUCCESS",
        "t/archive/manifest.json",
        "t/archive/part-00000.parquet",
        "t/data/inner/_latest_manifest",
        "t/data/inner/manifest/v00000000.json",
        "t/data/inner/data/x.parquet",
        "t/manifest/sub/_WRITING",
        "t/manifest/sub/data.parquet",
        "t/nodes/a/content/x.parquet",
        "t/notes.txt",
        "t/manifest.json",
    ];
    for k in nested {
        put(&store, k, b"x");
    }
    put(&store, "t/data/orphan.parquet", b"x");
    let v = block(vacuum(&store, "t", &at_once(false), tomorrow()));
    assert!(v.removed.contains(&"data/orphan.parquet".to_string()));
    let left = keys(&store, "t");
    for k in nested {
        assert!(left.contains(&k.to_string()), "{k} was removed");
    }
    // A dataset at `t/data` itself: nothing in data/ is vacuum's any more.
    put(&store, "t/data/_SUCCESS", b"");
    put(&store, "t/data/orphan.parquet", b"x");
    let v = block(vacuum(&store, "t", &at_once(false), tomorrow()));
    assert!(
        v.removed.iter().all(|r| !r.starts_with("data/")),
        "{:?}",
        v.removed
    );
    assert!(keys(&store, "t").contains(&"t/data/orphan.parquet".to_string()));
}

#[test]
fn the_layouts_own_what_their_writers_write() {
    let names = ["data/_SUCCESS", "x/manifest/v00000001.json"];
    let table = Ownership::new(TableManifest::LAYOUT, names.into_iter());
    assert_eq!(
        table.nested,
        BTreeSet::from(["data".to_string(), "x".to_string()])
    );
    let table = Ownership::new(
        TableManifest::LAYOUT,
        ["manifest/v00000001.json"].into_iter(),
    );
    assert!(
        table.nested.is_empty(),
        "its own manifests mark no nested key"
    );
    for (rel, folder, owned) in [
        ("_latest_manifest", false, true),
        ("manifest/v00000001.json", false, true),
        ("data/a.parquet", false, true),
        ("tombstone/v00000001-x.del", false, true),
        ("data/a/b.parquet", false, false),
        ("data", false, false),
        ("other/a", false, false),
        ("data", true, true),
        ("data/a", true, false),
        ("nodes", true, false),
    ] {
        assert_eq!(table.owns(rel, folder), owned, "{rel} {folder}");
    }
    let pipeline = Ownership::new(
        crate::producers::manifest::PipelineManifest::LAYOUT,
        ["nodes/b/_latest_manifest"].into_iter(),
    );
    for (rel, folder, owned) in [
        ("nodes/a/content/p-00000.parquet", false, true),
        ("nodes/a/mappings/p-00000.parquet", false, true),
        ("nodes/a/update/p-00000.parquet", false, true),
        ("nodes/a/other/p.parquet", false, false),
        ("nodes/b/content/p-00000.parquet", false, false),
        ("data/a.parquet", false, false),
        ("nodes/a", true, true),
        ("nodes/b", true, false),
        ("nodes/a/content", true, true),
    ] {
        assert_eq!(pipeline.owns(rel, folder), owned, "{rel} {folder}");
    }
    assert_eq!(version_of("manifest/v00000012.json"), Some(12));
    assert_eq!(version_of("manifest/v+12.json"), None);
    assert_eq!(version_of("manifest/v.json"), None);
}

#[test]
fn on_file_stores_staging_files_go_only_from_the_own_layout() {
    let dir = tempfile::tempdir().unwrap();
    let url = url::Url::from_directory_path(dir.path())
        .unwrap()
        .to_string();
    let store = Arc::new(StoreHandle::open(&url, &BTreeMap::new()).unwrap());
    table(&store);
    let t = dir.path().join("t");
    for d in ["data/inner", "archive"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    for f in [
        "data/killed.parquet#12",
        "data/inner/x#3",
        "archive/y#4",
        "z#5",
    ] {
        std::fs::write(t.join(f), b"x").unwrap();
    }
    let v = block(vacuum(&store, "t", &at_once(false), tomorrow()));
    assert!(
        v.removed.contains(&"data/killed.parquet#12".to_string()),
        "{:?}",
        v.removed
    );
    assert!(!t.join("data/killed.parquet#12").exists());
    for f in ["data/inner/x#3", "archive/y#4", "z#5"] {
        assert!(t.join(f).exists(), "{f}");
    }
    assert_eq!(ids(&store, At::Latest, None), (10..300).collect::<Vec<_>>());
    // Writers rolling forward still find the latest version.
    let seen = block(latest_with(&store, "t", true)).unwrap();
    assert_eq!(seen.manifest.version, 3);
}

#[test]
fn versions_sharing_segments_keep_exactly_what_their_whole_file_lists_name() {
    use crate::table::tests::{append_ids, counting_store, create_and_append_steps};
    use crate::table::versions::{read_version_at, Depth};
    let (store, _) = counting_store();
    // A compacted table, then segments of 32 files, most shared by every
    // later version, and a tombstone naming files of two of them.
    create_and_append_steps(&store, 20);
    let pred = predicate(vec![cond("id", "==", int(5))]).unwrap();
    assert!(delete(store.clone(), "t", pred, 2).unwrap().committed);
    assert!(
        compact(store.clone(), "t", CompactOptions::deleted(0.0))
            .unwrap()
            .committed
    );
    for i in 0..70 {
        let lo = 1000 + 3 * i;
        append_ids(&store, lo..lo + 3).unwrap();
    }
    let pred = predicate(vec![
        cond("id", ">=", int(1080)),
        cond("id", "<", int(1110)),
    ])
    .unwrap();
    assert!(delete(store.clone(), "t", pred, 2).unwrap().committed);
    let pred = predicate(vec![cond("id", "==", int(1200))]).unwrap();
    assert!(delete(store.clone(), "t", pred, 2).unwrap().committed);
    put(&store, "t/data/killed-writer.parquet", b"PAR1 half");
    put(&store, "t/segment/killed.json", b"{}");
    let last = block(latest(&store, "t")).unwrap().manifest.version;
    let root: TableManifest = block(read_version_at(&store, "t", last, Depth::Root));
    assert!(root.segments.len() >= 2, "{:?}", root.segments);
    // What each version names, from its whole file list.
    let mut named = BTreeSet::from([POINTER.to_string()]);
    let mut before = Vec::new();
    for v in 0..=last {
        let m: TableManifest = block(read_version_at(&store, "t", v, Depth::Full));
        named.insert(manifest_name(v));
        named.extend(m.segments.iter().map(|s| s.path.clone()));
        named.extend(m.data_files.iter().map(|f| f.path.clone()));
        named.extend(m.tombstones.iter().map(|t| t.path.clone()));
        before.push(ids(&store, At::Version(v), None));
    }
    let everything: BTreeSet<String> = keys(&store, "t")
        .into_iter()
        .map(|k| k.strip_prefix("t/").unwrap().to_string())
        .collect();
    let v = block(vacuum(&store, "t", &at_once(true), tomorrow()));
    let unnamed: Vec<String> = everything.difference(&named).cloned().collect();
    assert_eq!(v.removed, unnamed);
    assert_eq!(
        v.removed,
        ["data/killed-writer.parquet", "segment/killed.json"]
    );
    assert_eq!(v.retained, (0..=last).collect::<Vec<_>>());
    for (version, rows) in before.iter().enumerate() {
        assert_eq!(&ids(&store, At::Version(version as u64), None), rows);
    }
    // Without history: what the latest version's whole list names stays.
    let m: TableManifest = block(read_version_at(&store, "t", last, Depth::Full));
    let v = block(vacuum(&store, "t", &at_once(false), tomorrow()));
    assert_eq!(v.retained, [last]);
    let left: BTreeSet<String> = keys(&store, "t")
        .into_iter()
        .map(|k| k.strip_prefix("t/").unwrap().to_string())
        .collect();
    let mut want = BTreeSet::from([POINTER.to_string(), manifest_name(last)]);
    want.extend(m.segments.iter().map(|s| s.path.clone()));
    want.extend(m.data_files.iter().map(|f| f.path.clone()));
    want.extend(m.tombstones.iter().map(|t| t.path.clone()));
    assert_eq!(left, want);
    assert_eq!(ids(&store, At::Latest, None), before[last as usize]);
}
