//! Tests of rewrites of units of one part (the next part read ahead on the
//! reader's thread, its answers taken in order, its failures reported), and
//! the helpers every partset test shares: a two-column layout on a memory
//! store, its rows, and a change by key.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;

use super::*;
use crate::error::Error;
use crate::parquet::encode::EncodeOptions;
use crate::store::{PutMode, StoreHandle};

pub(crate) fn schema() -> arrow_schema::SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]))
}

pub(crate) fn rows(pairs: &[(i64, i64)]) -> RecordBatch {
    let (k, v): (Vec<i64>, Vec<i64>) = pairs.iter().copied().unzip();
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(k)), Arc::new(Int64Array::from(v))],
    )
    .unwrap()
}

pub(crate) fn keys(ks: &[i64]) -> RecordBatch {
    let s = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    RecordBatch::try_new(s, vec![Arc::new(Int64Array::from(ks.to_vec()))]).unwrap()
}

pub(crate) fn stream(batches: Vec<RecordBatch>) -> BatchIter {
    Box::new(batches.into_iter().map(Ok))
}

pub(crate) fn layout() -> PartSet {
    PartSet {
        store: Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap()),
        root: "n/content".into(),
        schema: schema(),
        sort_key: vec!["k".into(), "v".into()],
        cut_key: vec!["k".into()],
        opts: EncodeOptions::new("zstd", None, None).unwrap(),
        target_rows: 100,
        shared_files: Default::default(),
    }
}

pub(crate) fn read(l: &PartSet, parts: &[RangePart]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for b in l.read_many(parts, None).unwrap().into_iter().flatten() {
        let (k, v) = (b.column(0).as_primitive::<Int64Type>(), b.column(1));
        let v = v.as_primitive::<Int64Type>();
        out.extend((0..b.num_rows()).map(|i| (k.value(i), v.value(i))));
    }
    out
}

pub(crate) fn change(prefix: &str, remove: &[i64], adds: &[(i64, i64)]) -> Change {
    let k = keys(remove);
    let set = key_set(
        std::slice::from_ref(&k),
        &KeyEncoder::new(&k.schema(), &["k".to_string()]).unwrap(),
    )
    .unwrap();
    Change {
        remove: Remove::Keys {
            key: vec!["k".into()],
            set,
        },
        touch: stream(vec![k]),
        adds: stream(vec![rows(adds)]),
        collect_removed: true,
        select: true,
        prefix: prefix.into(),
        derived: None,
    }
}

/// The parts' object keys under the layout's store.
fn objects(l: &PartSet) -> Vec<String> {
    let listing = crate::runtime::block_on(l.store.list("", true))
        .unwrap()
        .unwrap();
    let mut keys: Vec<String> = listing.objects.into_iter().map(|m| m.key).collect();
    keys.sort();
    keys
}

/// Distinct keys 0..1000 (value = key), in parts of about 100 rows: ten
/// parts, each a unit of its own, too small to seek in.
fn ten_parts(l: &PartSet) -> Vec<RangePart> {
    let all: Vec<(i64, i64)> = (0..1000).map(|k| (k, k)).collect();
    let parts = l
        .write("p", stream(vec![rows(&all)]), &mut Vec::new())
        .unwrap();
    let units = crate::producers::parts::units(&parts, &l.schema, &l.cut_key).unwrap();
    assert!(parts.len() >= 9 && units.len() == parts.len(), "{units:?}");
    parts
}

/// A change to every part, twice (the second over the first's patches):
/// each part after the first is read ahead while the one before it is
/// rewritten, and every result is the model's.
#[test]
fn a_change_to_every_part_reads_the_next_ahead_and_matches_its_model() {
    let l = layout();
    let mut parts = ten_parts(&l);
    let mut model: BTreeMap<i64, i64> = (0..1000).map(|k| (k, k)).collect();
    for (round, offset) in [(0i64, 7i64), (1, 53)] {
        // One key replaced and one removed in every hundred; one key added
        // past the end.
        let removed: Vec<i64> = (0..10).map(|h| h * 100 + offset).collect();
        let replaced: Vec<(i64, i64)> = (0..10).map(|h| (h * 100 + 31, -h - 100 * round)).collect();
        let mut adds = replaced.clone();
        adds.push((2000 + round, 1));
        let mut touched: Vec<i64> = removed.to_vec();
        touched.extend(adds.iter().map(|r| r.0));
        touched.sort();
        let c = l
            .rewrite(&parts, change(&format!("c{round}"), &touched, &adds))
            .unwrap();
        for k in &touched {
            model.remove(k);
        }
        model.extend(adds.iter().copied());
        let want: Vec<(i64, i64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(read(&l, &c.parts), want, "round {round}");
        let mut selected = adds.clone();
        selected.sort();
        assert_eq!(read(&l, &c.selected), selected, "round {round}");
        let deleted: Vec<i64> = c
            .deleted
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        assert_eq!(deleted, removed, "round {round}");
        parts = c.parts;
    }
}

/// A damaged part read ahead fails the rewrite with `PartCorrupted` naming
/// it; what the rewrite wrote before is removed, and the stored parts are
/// as they were.
#[test]
fn a_damaged_part_read_ahead_fails_the_rewrite_and_leaves_nothing() {
    let l = layout();
    let parts = ten_parts(&l);
    let before = objects(&l);
    let victim = l.object(&parts[3]);
    let good = crate::runtime::block_on(l.store.get(&victim))
        .unwrap()
        .unwrap();
    let mut bad = good.to_vec();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    crate::runtime::block_on(l.store.put(&victim, Bytes::from(bad), PutMode::Overwrite))
        .unwrap()
        .unwrap();
    let touched: Vec<i64> = (0..10).map(|h| h * 100 + 5).collect();
    let err = l
        .rewrite(&parts, change("c", &touched, &[]))
        .expect_err("a damaged part");
    match &err {
        Error::PartCorrupted { path, .. } => assert_eq!(path, &victim),
        other => panic!("{other:?}"),
    }
    assert_eq!(objects(&l), before, "only the stored parts remain");
}

/// The deleted values of each part's patch: its run of `patch.deleted`.
fn patch_deleted(l: &PartSet, part: &RangePart) -> (String, Option<[u64; 2]>, Vec<i64>) {
    let p = part.patches.last().expect("a patch");
    let f = p.deleted.as_ref().expect("deleted values");
    let cut = PartSet {
        schema: l.cut_schema().unwrap(),
        sort_key: l.cut_key.clone(),
        ..l.clone()
    };
    let whole = cut
        .read_many(std::slice::from_ref(f), None)
        .unwrap()
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    let run = match p.deleted_rows {
        Some([a, b]) => rows_in(&whole, a, b),
        None => whole,
    };
    let ks = run
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    (f.name.clone(), p.deleted_rows, ks)
}

/// A change removing one key of every part patches each part, and the
/// patches share one file of deleted keys, each owning its run, in key
/// order; with `select` that file is the update's deleted keys. A second
/// change patches over the first; both read back as the model.
#[test]
fn the_patches_of_a_rewrite_share_one_file_of_deleted_values() {
    for select in [true, false] {
        let l = layout();
        let mut parts = ten_parts(&l);
        let mut model: BTreeMap<i64, i64> = (0..1000).map(|k| (k, k)).collect();
        for (round, offset) in [(0i64, 7i64), (1, 58)] {
            let before = objects(&l).len();
            let removed: Vec<i64> = (0..10).map(|h| h * 100 + offset).collect();
            let mut c = change(&format!("c{round}"), &removed, &[]);
            c.select = select;
            let c = l.rewrite(&parts, c).unwrap();
            for k in &removed {
                model.remove(k);
            }
            let want: Vec<(i64, i64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            assert_eq!(read(&l, &c.parts), want, "select {select}, round {round}");
            // One new object: the shared file (no patch has rows).
            assert_eq!(objects(&l).len(), before + 1, "select {select}");
            let mut names = std::collections::BTreeSet::new();
            for (at, (part, k)) in (0u64..).zip(c.parts.iter().zip(&removed)) {
                assert_eq!(part.patches.len(), round as usize + 1);
                let (name, run, ks) = patch_deleted(&l, part);
                assert_eq!(run, Some([at, at + 1]), "runs in key order");
                assert_eq!(ks, vec![*k]);
                names.insert(name);
            }
            assert_eq!(names.len(), 1, "one shared file");
            let shared = c.parts[0].patches[round as usize].deleted.clone();
            assert_eq!(c.deleted_file.is_some(), select);
            if select {
                assert_eq!(c.deleted_file, shared);
            }
            assert_eq!(
                crate::producers::patch::patched_rows(&c.parts[0]),
                round as u64 + 1
            );
            parts = c.parts;
        }
    }
}

/// A part set fetches and decodes each shared file of deleted keys once,
/// however many of its parts' patches name it: after one read of ten
/// patched parts (two updates, so two shared files), the files can be gone
/// from the store and the same part set still reads, scans and looks up
/// every part; a new part set cannot.
#[test]
fn a_part_set_decodes_each_shared_file_once() {
    let l = layout();
    let mut parts = ten_parts(&l);
    let mut model: BTreeMap<i64, i64> = (0..1000).map(|k| (k, k)).collect();
    for (round, offset) in [(0i64, 7i64), (1, 58)] {
        let removed: Vec<i64> = (0..10).map(|h| h * 100 + offset).collect();
        parts = l
            .rewrite(&parts, change(&format!("c{round}"), &removed, &[]))
            .unwrap()
            .parts;
        for k in &removed {
            model.remove(k);
        }
    }
    let want: Vec<(i64, i64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
    let shared: std::collections::BTreeSet<String> = parts
        .iter()
        .flat_map(|p| &p.patches)
        .filter(|p| p.deleted_rows.is_some())
        .filter_map(|p| p.deleted.as_ref().map(|f| l.object(f)))
        .collect();
    assert_eq!(shared.len(), 2, "one shared file per update");

    let fresh = || PartSet {
        shared_files: Default::default(),
        ..l.clone()
    };
    let r = Arc::new(fresh());
    assert_eq!(read(&r, &parts), want);
    assert_eq!(r.shared_files.kept(), 2);
    for key in &shared {
        crate::runtime::block_on(l.store.delete(key))
            .unwrap()
            .unwrap();
    }
    assert_eq!(read(&r, &parts), want, "read from the one decode");
    let scanned: usize = r
        .scan(parts.clone(), None)
        .map(|b| b.unwrap().num_rows())
        .sum();
    assert_eq!(scanned, want.len());
    let names = r.schema_names();
    let found: usize = r
        .lookup(&parts, &[keys(&[1, 7, 107, 999])], &names)
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(found, 2, "7 and 107 were deleted");
    assert!(
        fresh().read_many(&parts, None).is_err(),
        "the files are gone"
    );
}

/// With `select`, a key spanning parts that loses every row is rewritten as
/// a stream and adds its key to the update's deleted keys; a patch after it
/// in key order still names its own run of the shared file (after that
/// key), so its part reads back without the key it deleted.
#[test]
fn a_patch_after_a_streamed_key_owns_its_run() {
    let l = layout();
    let mut all: Vec<(i64, i64)> = (0..1000).filter(|k| *k != 500).map(|k| (k, k)).collect();
    all.extend((0..300).map(|v| (500, v)));
    all.sort_unstable();
    let parts = l
        .write("p", stream(vec![rows(&all)]), &mut Vec::new())
        .unwrap();
    let units = crate::producers::parts::units(&parts, &l.schema, &l.cut_key).unwrap();
    assert!(units.iter().any(|u| u.len() > 1), "key 500 spans parts");
    let c = l.rewrite(&parts, change("c", &[500, 900], &[])).unwrap();
    let want: Vec<(i64, i64)> = all
        .iter()
        .copied()
        .filter(|(k, _)| *k != 500 && *k != 900)
        .collect();
    assert_eq!(read(&l, &c.parts), want);
    let patched: Vec<&RangePart> = c.parts.iter().filter(|p| !p.patches.is_empty()).collect();
    assert_eq!(patched.len(), 1, "the part of 900 is patched");
    let (name, run, ks) = patch_deleted(&l, patched[0]);
    assert_eq!((run, ks), (Some([1, 2]), vec![900]));
    assert_eq!(c.deleted_file.map(|f| f.name), Some(name));
    let deleted: Vec<i64> = c
        .deleted
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(deleted, vec![500, 900]);
}

/// Past [`SHARED_DELETED_MAX_ROWS`] deleted values, each patch
/// writes its own file (no run), and the rows read back as the model.
#[test]
fn past_the_shared_limit_each_patch_writes_its_own_deleted_values() {
    let mut l = layout();
    let per_part = 170_000i64;
    l.target_rows = per_part as usize;
    let all: Vec<(i64, i64)> = (0..2 * per_part).map(|k| (k, k)).collect();
    let parts = l
        .write("p", stream(vec![rows(&all)]), &mut Vec::new())
        .unwrap();
    assert_eq!(parts.len(), 2);
    // Every fourth key of the first 132,000 in each part: 33,000 per part
    // (a patch: 33,000 x 4 <= the 137,000 rows left), 66,000 in all.
    let removed: Vec<i64> = (0..2)
        .flat_map(|p| (0..33_000).map(move |i| p * per_part + i * 4))
        .collect();
    assert!(removed.len() as u64 > SHARED_DELETED_MAX_ROWS);
    let c = l.rewrite(&parts, change("c", &removed, &[])).unwrap();
    assert_eq!(c.deleted_file, None);
    let mut names = std::collections::BTreeSet::new();
    for part in &c.parts {
        let (name, run, ks) = patch_deleted(&l, part);
        assert_eq!(run, None);
        assert_eq!(ks.len(), 33_000);
        names.insert(name);
    }
    assert_eq!(names.len(), 2);
    let gone: std::collections::BTreeSet<i64> = removed.iter().copied().collect();
    let want: Vec<(i64, i64)> = all.into_iter().filter(|(k, _)| !gone.contains(k)).collect();
    assert_eq!(read(&l, &c.parts), want);
}

/// A change that rewrites the first part in place (at its limit of
/// patches) and patches the others: the update's deleted keys are the
/// first part's, then the patches'; each patch's run starts after the
/// first part's key, and a read of a patched part takes only its own run
/// of the shared file.
#[test]
fn runs_follow_the_deleted_keys_of_parts_rewritten_in_place() {
    let l = layout();
    let mut parts = ten_parts(&l);
    let mut gone = std::collections::BTreeSet::new();
    let mut k = 0i64;
    while parts[0].patches.len() < crate::producers::patch::patch_limit(&parts[0]) {
        let c = l
            .rewrite(&parts, change(&format!("a{k}"), &[k], &[]))
            .unwrap();
        gone.insert(k);
        k += 1;
        parts = c.parts;
    }
    let mut removed = vec![k];
    removed.extend((1..10).map(|h| h * 100 + 50));
    gone.extend(removed.iter().copied());
    let c = l.rewrite(&parts, change("c", &removed, &[])).unwrap();
    assert!(c.parts[0].patches.is_empty(), "rewritten in place");
    let want: Vec<(i64, i64)> = (0..1000)
        .filter(|k| !gone.contains(k))
        .map(|k| (k, k))
        .collect();
    assert_eq!(read(&l, &c.parts), want);
    let patched: Vec<&RangePart> = c.parts[1..].iter().collect();
    assert_eq!(patched.len(), 9);
    for (i, part) in (1u64..).zip(&patched) {
        let (_, run, ks) = patch_deleted(&l, part);
        assert_eq!(run, Some([i, i + 1]), "after the first part's key");
        assert_eq!(ks, vec![i as i64 * 100 + 50]);
        // Its own deleted key only, not the shared file's others.
        assert_eq!(l.read_whole(part).unwrap().patched_values(), 1);
    }
    assert_eq!(
        c.deleted_file.map(|f| f.rows),
        Some(10),
        "the update's deleted keys"
    );
}

/// A patch shares the rewrite's file of deleted keys only where that file
/// holds at most a quarter of its part's rows: a small part's patch writes
/// its own. Where no patch shares it, the update's deleted keys are left
/// to the caller (`deleted_file` is `None`).
#[test]
fn a_small_part_writes_its_own_deleted_keys_and_no_sharer_leaves_none() {
    let l = layout();
    // A 30-row part, then ten of about 100.
    let small: Vec<(i64, i64)> = (0..30).map(|k| (k, k)).collect();
    let rest: Vec<(i64, i64)> = (30..1030).map(|k| (k, k)).collect();
    let mut parts = l
        .write("a", stream(vec![rows(&small)]), &mut Vec::new())
        .unwrap();
    parts.extend(
        l.write("b", stream(vec![rows(&rest)]), &mut Vec::new())
            .unwrap(),
    );
    assert_eq!(parts[0].rows, 30);
    // One key of each part: 11 keys, 44 > the small part's 29 rows left.
    let removed: Vec<i64> = std::iter::once(5)
        .chain((0..parts.len() as i64 - 1).map(|h| 30 + h * 100 + 7))
        .filter(|k| *k < 1030)
        .collect();
    let c = l.rewrite(&parts, change("c", &removed, &[])).unwrap();
    let gone: std::collections::BTreeSet<i64> = removed.iter().copied().collect();
    let want: Vec<(i64, i64)> = (0..1030)
        .filter(|k| !gone.contains(k))
        .map(|k| (k, k))
        .collect();
    assert_eq!(read(&l, &c.parts), want);
    let (own, run, ks) = patch_deleted(&l, &c.parts[0]);
    assert_eq!((run, ks), (None, vec![5]), "the small part's own file");
    let shared = c.deleted_file.clone().expect("the others share one");
    for part in &c.parts[1..] {
        let (name, run, _) = patch_deleted(&l, part);
        assert!(
            run.is_some() && name == shared.name && name != own,
            "{name}"
        );
    }
    // Three keys of each of ten parts: 30 keys, 120 > any part's rows.
    let l = layout();
    let parts = ten_parts(&l);
    let removed: Vec<i64> = (0..10)
        .flat_map(|h| [h * 100 + 1, h * 100 + 2, h * 100 + 3])
        .collect();
    let c = l.rewrite(&parts, change("d", &removed, &[])).unwrap();
    assert_eq!(
        c.deleted_file, None,
        "the caller writes the update's deleted keys"
    );
    assert_eq!(c.deleted.iter().map(|b| b.num_rows()).sum::<usize>(), 30);
    for part in &c.parts {
        let (_, run, ks) = patch_deleted(&l, part);
        assert_eq!((run, ks.len()), (None, 3));
    }
}
