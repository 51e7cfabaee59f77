//! Schema changes in `pds-table/3`: the segment references record the old
//! schema, no segment is rewritten, and every version reads in its own
//! schema; `pds-table/2` tables keep their format until upgraded.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, RecordBatchIterator, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;

use super::*;
use crate::parquet::filter::predicate;
use crate::store::PutMode;
use crate::table::compact::{compact, CompactOptions};
use crate::table::delete::delete;
use crate::table::scan::{for_scan, scan, At, ScanOptions};
use crate::table::schema::SchemaMode;
use crate::table::snapshot::{Written, FORMAT, SEGMENTED_FORMAT};
use crate::table::tests::{cond, counting_store, int, props};
use crate::table::versions::{read_version_at, Depth};
use crate::table::write::{append, create};
use crate::table::{manifest_key, pointer_key, Pointer};

fn block<T>(f: impl std::future::Future<Output = crate::error::Result<T>>) -> T {
    crate::runtime::block_on(f).unwrap().unwrap()
}

/// Rows `ids` with `n = id + offset`: `n` an int32 (`wide` false) or an
/// int64 with an `extra` column (`wide`), and `more` too (`wider`).
fn batch(
    ids: std::ops::Range<i64>,
    offset: i64,
    width: usize,
) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(ids.clone()))];
    if width == 0 {
        fields.push(Field::new("n", DataType::Int32, true));
        let n = ids.clone().map(|i| i32::try_from(i + offset).unwrap());
        columns.push(Arc::new(Int32Array::from_iter_values(n)));
    } else {
        fields.push(Field::new("n", DataType::Int64, true));
        columns.push(Arc::new(Int64Array::from_iter_values(
            ids.clone().map(|i| i + offset),
        )));
        fields.push(Field::new("extra", DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from_iter_values(
            ids.clone().map(|i| format!("e{i}")),
        )));
    }
    if width == 2 {
        fields.push(Field::new("more", DataType::Int64, true));
        columns.push(Arc::new(Int64Array::from_iter_values(ids.clone())));
    }
    let schema = Arc::new(Schema::new(fields));
    let b = RecordBatch::try_new(schema.clone(), columns).unwrap();
    Box::new(RecordBatchIterator::new(vec![Ok(b)], schema))
}

/// Table `t` keyed by `id` with an int32 `n`: ids 0..10, then 40 appends
/// of 3 ids (two segments: the tail fills, then a new one).
fn narrow_table(store: &Arc<StoreHandle>) -> Vec<i64> {
    let s = batch(0..1, 0, 0).schema();
    create(
        store.clone(),
        "t",
        s,
        Some(batch(0..10, 0, 0)),
        props(Some("id")),
        false,
        2,
    )
    .unwrap();
    for i in 0..40 {
        let lo = 10 + 3 * i;
        append(
            store.clone(),
            "t",
            batch(lo..lo + 3, 0, 0),
            SchemaMode::Strict,
            None,
            2,
        )
        .unwrap();
    }
    (0..130).collect()
}

fn root(store: &StoreHandle, v: u64) -> TableManifest {
    block(read_version_at(store, "t", v, Depth::Root))
}

/// `(id, n)` of version `v` whose `n` equals `k` (all rows for `None`), and
/// the segments the scan loaded.
fn rows_where(store: &Arc<StoreHandle>, v: u64, k: Option<i64>) -> (Vec<(i64, i64)>, usize) {
    let pred = k.map(|k| predicate(vec![cond("n", "==", int(k))]).unwrap());
    let m = block(for_scan(store, "t", v, pred.as_ref(), false));
    let loaded = m.layout.bodies.iter().flatten().count();
    let opts = ScanOptions {
        columns: Some(vec!["id".into(), "n".into()]),
        predicate: pred.map(Arc::new),
        parallelism: 2,
        ..Default::default()
    };
    let mut out = Vec::new();
    for b in scan(store.clone(), "t", &m, opts).unwrap() {
        let b = b.unwrap();
        let ids = b.column(0).as_primitive::<Int64Type>().values().to_vec();
        let n = arrow_cast::cast(b.column(1), &DataType::Int64).unwrap();
        let n = n.as_primitive::<Int64Type>().values().to_vec();
        out.extend(ids.into_iter().zip(n));
    }
    out.sort_unstable();
    (out, loaded)
}

fn whole(store: &StoreHandle, v: u64) -> TableManifest {
    block(read_version_at(store, "t", v, Depth::Full))
}

#[test]
fn a_schema_change_keeps_every_segment_and_each_version_reads_in_its_schema() {
    let (store, counts) = counting_store();
    let model = narrow_table(&store);
    let before = root(&store, 40);
    assert_eq!(before.segments.len(), 2);
    assert!(before.segments.iter().all(|s| s.files_schema.is_none()));
    // Pruning by `n` before the change: one segment holds n == 5.
    let (got, loaded) = rows_where(&store, 40, Some(5));
    assert_eq!((got, loaded), (vec![(5, 5)], 1));

    // Widen `n` to int64 and add a column: the root and one new segment.
    let big = 5_000_000_000;
    let m = append(
        store.clone(),
        "t",
        batch(130..133, big, 1),
        SchemaMode::Merge,
        None,
        2,
    )
    .unwrap();
    assert_eq!(m.version, 41);
    let after = root(&store, 41);
    let raw = block(store.get(&manifest_key("t", 41)));
    assert!(String::from_utf8_lossy(&raw).contains(&format!("\"format\": \"{FORMAT}\"")));
    assert_eq!(after.segments.len(), 3, "the old two and a new one");
    let id = after.file_schemas.keys().next().cloned().unwrap();
    assert_eq!(after.file_schemas.len(), 1);
    for (old, now) in before.segments.iter().zip(&after.segments) {
        assert_eq!(
            (&now.path, &now.sha256),
            (&old.path, &old.sha256),
            "not rewritten"
        );
        assert_eq!(now.files_schema.as_deref(), Some(id.as_str()));
        assert_eq!(
            now.schema.as_deref(),
            Some(id.as_str()),
            "its statistics are the old schema's"
        );
        assert_eq!(now.columns, old.columns);
    }
    assert_eq!(after.segments[2].files_schema, None);

    // Each version reads in its own schema, the cache holding both
    // resolutions of the same bodies (the new version is read first).
    // The bodies this process read before the change serve the
    // references that now record the old schema: no segment is read again.
    counts.take();
    root(&store, 41);
    let [root_gets, ..] = counts.take();
    let new = whole(&store, 41);
    let [gets, ..] = counts.take();
    assert_eq!(gets, root_gets, "the segments came from the cache");
    let old = whole(&store, 40);
    assert!(old.data_files.iter().all(|f| f.schema.is_none()));
    let named = new
        .data_files
        .iter()
        .filter(|f| f.schema.as_deref() == Some(&id))
        .count();
    assert_eq!(
        (named, new.data_files.len()),
        (old.data_files.len(), old.data_files.len() + 1)
    );
    assert_eq!(
        old.arrow_schema("t")
            .unwrap()
            .field_with_name("n")
            .unwrap()
            .data_type(),
        &DataType::Int32
    );
    assert_eq!(
        new.arrow_schema("t")
            .unwrap()
            .field_with_name("n")
            .unwrap()
            .data_type(),
        &DataType::Int64
    );
    let mut want: Vec<(i64, i64)> = model.iter().map(|&i| (i, i)).collect();
    assert_eq!(rows_where(&store, 40, None).0, want);
    want.extend((130..133).map(|i| (i, i + big)));
    assert_eq!(rows_where(&store, 41, None).0, want);

    // Pruning after the change, by the old statistics converted and the
    // new ones: each key's segment alone.
    assert_eq!(rows_where(&store, 41, Some(5)), (vec![(5, 5)], 1));
    assert_eq!(rows_where(&store, 41, Some(129)), (vec![(129, 129)], 1));
    assert_eq!(
        rows_where(&store, 41, Some(big + 131)),
        (vec![(131, big + 131)], 1)
    );
    assert_eq!(rows_where(&store, 41, Some(big)), (vec![], 0));

    // A second change: the references that record a schema keep it, the
    // segment written in between records the intermediate one.
    append(
        store.clone(),
        "t",
        batch(133..135, big, 2),
        SchemaMode::Merge,
        None,
        2,
    )
    .unwrap();
    let second = root(&store, 42);
    assert_eq!(second.file_schemas.len(), 2);
    let id2 = second
        .file_schemas
        .keys()
        .find(|k| **k != id)
        .cloned()
        .unwrap();
    let kept: Vec<Option<&str>> = second
        .segments
        .iter()
        .map(|s| s.files_schema.as_deref())
        .collect();
    assert_eq!(
        kept,
        [
            Some(id.as_str()),
            Some(id.as_str()),
            Some(id2.as_str()),
            None
        ]
    );
    for (a, b) in after.segments.iter().zip(&second.segments) {
        assert_eq!(a.sha256, b.sha256);
    }
    want.extend((133..135).map(|i| (i, i + big)));
    assert_eq!(rows_where(&store, 42, None).0, want);
    assert_eq!(rows_where(&store, 41, None).0.len(), 133);

    // A delete in an old segment rewrites it, its files naming their
    // schema; compaction merges everything; each version reads as before.
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("id", "==", int(7))]).unwrap(),
        2,
    )
    .unwrap();
    assert!(d.committed);
    want.retain(|(i, _)| *i != 7);
    assert_eq!(rows_where(&store, d.manifest.version, None).0, want);
    let rewritten = root(&store, d.manifest.version);
    assert_ne!(rewritten.segments[0].sha256, second.segments[0].sha256);
    assert_eq!(rewritten.segments[0].files_schema, None);
    assert_eq!(rewritten.segments[1], second.segments[1]);
    // A third change: the rewritten segment, whose files each name their
    // schema, records none; the others keep theirs.
    let wider = {
        let s = batch(0..1, 0, 2).schema();
        let mut fields: Vec<Field> = s.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("last", DataType::Utf8, true));
        let schema = Arc::new(Schema::new(fields));
        let b = batch(135..136, big, 2).next().unwrap().unwrap();
        let mut columns = b.columns().to_vec();
        columns.push(Arc::new(StringArray::from(vec!["x"])));
        let b = RecordBatch::try_new(schema.clone(), columns).unwrap();
        Box::new(RecordBatchIterator::new(vec![Ok(b)], schema))
    };
    let m = append(store.clone(), "t", wider, SchemaMode::Merge, None, 2).unwrap();
    let after3 = root(&store, m.version);
    assert_eq!(
        after3.segments[0].files_schema, None,
        "its files name theirs"
    );
    assert_eq!(after3.segments[0].sha256, rewritten.segments[0].sha256);
    assert_eq!(
        after3.segments[1].files_schema,
        second.segments[1].files_schema
    );
    want.push((135, 135 + big));
    assert_eq!(rows_where(&store, m.version, None).0, want);
    let c = compact(store.clone(), "t", CompactOptions::deleted(0.0)).unwrap();
    assert!(c.committed);
    assert_eq!(rows_where(&store, c.manifest.version, None).0, want);
    assert_eq!(
        rows_where(&store, c.manifest.version, Some(big + 134)).0,
        vec![(134, big + 134)]
    );
    assert_eq!(rows_where(&store, 40, None).0.len(), 130);
}

/// Make the latest version of `t` (at `v`) a `pds-table/2` one, as pds
/// before `files_schema` wrote it: the same root, one version on.
fn as_segmented(store: &Arc<StoreHandle>, v: u64) {
    let mut m = root(store, v);
    m.version = v + 1;
    m.previous = Some(v);
    m.layout.written = Written::Segmented;
    let raw = m.to_json().unwrap();
    assert!(String::from_utf8_lossy(&raw).contains(&format!("\"format\": \"{SEGMENTED_FORMAT}\"")));
    block(store.put(&manifest_key("t", v + 1), Bytes::from(raw), PutMode::Create));
    let pointer = Pointer::new(v + 1, m.table_id.as_deref())
        .to_json()
        .unwrap();
    block(store.put(&pointer_key("t"), Bytes::from(pointer), PutMode::Overwrite));
}

fn format_of(store: &StoreHandle, v: u64) -> String {
    let raw = block(store.get(&manifest_key("t", v)));
    let value: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    value["format"].as_str().unwrap().to_string()
}

#[test]
fn a_pds_table_2_table_stays_in_its_format_until_upgraded_by_its_root_alone() {
    let (store, counts) = counting_store();
    let model = narrow_table(&store);
    as_segmented(&store, 40);
    assert_eq!(root(&store, 41).layout.written, Written::Segmented);
    // Writable, and written on in its format.
    append(
        store.clone(),
        "t",
        batch(130..131, 0, 0),
        SchemaMode::Strict,
        None,
        2,
    )
    .unwrap();
    assert_eq!(format_of(&store, 42), SEGMENTED_FORMAT);
    // A schema change records the old schema on every file: every segment
    // is rewritten, none records files_schema.
    let big = 5_000_000_000;
    let before = root(&store, 42);
    append(
        store.clone(),
        "t",
        batch(131..133, big, 1),
        SchemaMode::Merge,
        None,
        2,
    )
    .unwrap();
    assert_eq!(format_of(&store, 43), SEGMENTED_FORMAT);
    let changed = root(&store, 43);
    assert!(changed.segments.iter().all(|s| s.files_schema.is_none()));
    assert!(changed
        .segments
        .iter()
        .all(|s| !before.segments.iter().any(|b| b.sha256 == s.sha256)));
    let mut want: Vec<(i64, i64)> = model.iter().map(|&i| (i, i)).chain([(130, 130)]).collect();
    want.extend((131..133).map(|i| (i, i + big)));
    assert_eq!(rows_where(&store, 43, None).0, want);

    // The upgrade writes the root alone (and the pointer), not a segment.
    counts.take();
    let up = block(crate::table::upgrade::upgrade_table(&store, "t"));
    assert_eq!((up.from, up.version), (Some(SEGMENTED_FORMAT), 44));
    let [_, _, puts, _, _] = counts.take();
    assert_eq!(puts, 2, "the root and the pointer");
    let upgraded = root(&store, 44);
    assert_eq!(format_of(&store, 44), FORMAT);
    assert_eq!(
        (upgraded.layout.written, upgraded.operation.as_str()),
        (Written::Current, "upgrade")
    );
    assert_eq!(upgraded.segments, changed.segments);
    assert_eq!(rows_where(&store, 44, None).0, want);
    // Once only.
    let again = block(crate::table::upgrade::upgrade_table(&store, "t"));
    assert_eq!((again.from, again.version), (None, 44));
    // From then on a schema change keeps the segments.
    append(
        store.clone(),
        "t",
        batch(133..134, big, 2),
        SchemaMode::Merge,
        None,
        2,
    )
    .unwrap();
    let next = root(&store, 45);
    for (a, b) in upgraded.segments.iter().zip(&next.segments) {
        assert_eq!(a.sha256, b.sha256);
    }
    want.push((133, 133 + big));
    assert_eq!(rows_where(&store, 45, None).0, want);
    // Every version still reads.
    assert_eq!(rows_where(&store, 41, None).0.len(), 130);
    assert_eq!(rows_where(&store, 43, None).0.len(), 133);
}

#[test]
fn a_pds_table_2_root_recording_files_schema_is_corrupted() {
    let (store, _) = counting_store();
    narrow_table(&store);
    append(
        store.clone(),
        "t",
        batch(130..131, 1, 1),
        SchemaMode::Merge,
        None,
        2,
    )
    .unwrap();
    let m = root(&store, 41);
    assert!(m.segments.iter().any(|s| s.files_schema.is_some()));
    // Written as pds-table/2 it would be misread: the writer refuses it...
    let mut as2 = m.clone();
    as2.layout.written = Written::Segmented;
    let refused = as2.to_json();
    assert!(matches!(refused, Err(Error::Task(_))), "{refused:?}");
    // ...and the reader too.
    let mut value = m.root_value().unwrap();
    value["format"] = SEGMENTED_FORMAT.into();
    let raw = crate::table::sealed::seal(value).unwrap();
    let read = TableManifest::from_json(&raw, "t/manifest/v00000041.json", 41);
    match read {
        Err(Error::ManifestCorrupted { reason, .. }) => {
            assert!(reason.contains("files_schema"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // A files_schema naming no schema of the root is refused as well.
    let mut value = m.root_value().unwrap();
    value["segments"][0]["files_schema"] = "0123456789abcdef".into();
    let raw = crate::table::sealed::seal(value).unwrap();
    let read = TableManifest::from_json(&raw, "t/manifest/v00000041.json", 41);
    assert!(
        matches!(read, Err(Error::ManifestCorrupted { .. })),
        "{read:?}"
    );
}

#[test]
fn an_upsert_changing_the_schema_reads_and_rewrites_only_the_segments_of_its_keys() {
    let (store, _) = counting_store();
    let mut want: Vec<(i64, i64)> = narrow_table(&store).iter().map(|&i| (i, i)).collect();
    let read = |r: &SegmentRef| cache().get::<Cached>(&cache_key(r)).is_some();
    let upsert = |ids: std::ops::Range<i64>, offset: i64, width: usize| {
        let m = root(
            &store,
            crate::runtime::block_on(crate::table::scan::resolve(&store, "t", At::Latest))
                .unwrap()
                .unwrap()
                .version,
        );
        for r in &m.segments {
            forget(r);
        }
        let out = crate::table::upsert::upsert(
            store.clone(),
            "t",
            batch(ids, offset, width),
            SchemaMode::Merge,
            2,
        )
        .unwrap();
        assert!(out.committed);
        (m, root(&store, out.manifest.version))
    };
    let big = 5_000_000_000;
    // Key 5 is in the first segment; the second is small, read too (new
    // files may join it), and kept as it is.
    let (before, after) = upsert(5..6, big, 1);
    let id = after.file_schemas.keys().next().cloned().unwrap();
    assert_ne!(
        after.segments[0].sha256, before.segments[0].sha256,
        "it held key 5"
    );
    assert_eq!(
        after.segments[1].sha256, before.segments[1].sha256,
        "read, kept"
    );
    assert_eq!(after.segments[1].files_schema.as_deref(), Some(id.as_str()));
    assert!(read(&before.segments[0]) && read(&before.segments[1]));
    want[5] = (5, 5 + big);
    assert_eq!(rows_where(&store, after.version, None).0, want);
    // Key 120 is in the second: the first is neither read nor rewritten.
    let (before, after) = upsert(120..121, big, 2);
    assert_eq!(after.file_schemas.len(), 2);
    assert_eq!(after.segments[0].sha256, before.segments[0].sha256);
    assert!(
        !read(&before.segments[0]) && !read(&after.segments[0]),
        "not read"
    );
    want[120] = (120, 120 + big);
    assert_eq!(rows_where(&store, after.version, None).0, want);
    assert_eq!(
        rows_where(&store, after.version, Some(big + 5)).0,
        vec![(5, 5 + big)]
    );
}

#[test]
fn a_schema_change_on_a_whole_file_list_keeps_its_segments() {
    let (store, _) = counting_store();
    narrow_table(&store);
    let mut m = whole(&store, 40);
    let before = m.segments.clone();
    m.version = 41;
    m.previous = Some(40);
    let wide = batch(0..1, 0, 1).schema();
    m.record_schema_change(crate::table::snapshot::TableSchema::of(&wide).unwrap())
        .unwrap();
    block(m.lay_out_segments(&store, "t"));
    assert_eq!(m.segments.len(), 2);
    for (a, b) in before.iter().zip(&m.segments) {
        assert_eq!((&a.path, &a.sha256), (&b.path, &b.sha256));
        assert!(b.files_schema.is_some());
    }
    // Written and read back: the files name the old schema.
    let raw = m.to_json().unwrap();
    block(store.put(&manifest_key("t", 41), Bytes::from(raw), PutMode::Create));
    let back = whole(&store, 41);
    assert!(back.data_files.iter().all(|f| f.schema.is_some()));
    assert_eq!(back.data_files.len(), 41);
}

#[test]
fn an_upsert_changing_the_schema_of_a_pds_table_2_table_reads_it_whole() {
    let (store, _) = counting_store();
    let mut want: Vec<(i64, i64)> = narrow_table(&store).iter().map(|&i| (i, i)).collect();
    as_segmented(&store, 40);
    let big = 5_000_000_000;
    let out = crate::table::upsert::upsert(
        store.clone(),
        "t",
        batch(120..121, big, 1),
        SchemaMode::Merge,
        2,
    )
    .unwrap();
    assert_eq!((out.committed, out.manifest.version), (true, 42));
    assert_eq!(format_of(&store, 42), SEGMENTED_FORMAT);
    let m = root(&store, 42);
    assert!(m.segments.iter().all(|s| s.files_schema.is_none()));
    assert!(
        whole(&store, 42)
            .data_files
            .iter()
            .filter(|f| f.schema.is_some())
            .count()
            >= 40
    );
    want[120] = (120, 120 + big);
    assert_eq!(rows_where(&store, 42, None).0, want);
}
