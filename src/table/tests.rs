//! End-to-end tests of the table layer on an in-memory store whose requests
//! are counted, so that the costs the docs state are checked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use object_store::memory::InMemory;
use object_store::path::Path;

use super::delete::delete;
use super::scan::{resolve, scan, At, ScanOptions};
use super::schema::SchemaMode;
use super::snapshot::TableProperties;
use super::write::{append, create};
use crate::error::Error;
use crate::parquet::filter::{predicate, Predicate};
use crate::store::hooked::{Hook, Hooked, Op, Outcome};
use crate::store::StoreHandle;

/// Requests by kind.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub get: AtomicUsize,
    pub head: AtomicUsize,
    pub put: AtomicUsize,
    pub list: AtomicUsize,
    pub delete: AtomicUsize,
}

impl Counts {
    pub(crate) fn take(&self) -> [usize; 5] {
        [
            self.get.swap(0, Ordering::SeqCst),
            self.head.swap(0, Ordering::SeqCst),
            self.put.swap(0, Ordering::SeqCst),
            self.list.swap(0, Ordering::SeqCst),
            self.delete.swap(0, Ordering::SeqCst),
        ]
    }
}

impl Hook for Counts {
    fn on(&self, op: Op, _: Option<&Path>, _: &InMemory) -> Outcome {
        let counter = match op {
            Op::Put | Op::PutMultipart | Op::Copy => &self.put,
            Op::Get => &self.get,
            Op::Head => &self.head,
            Op::Delete => &self.delete,
            Op::List | Op::ListDelimited => &self.list,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        Outcome::Forward
    }
}

pub(crate) fn counting_store() -> (Arc<StoreHandle>, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let store = Hooked::shared(counts.clone());
    let handle = StoreHandle::from_object_store(Arc::new(store), "").unwrap();
    (Arc::new(handle), counts)
}

pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, true),
    ]))
}

/// Rows `ids` with customer `c<id % 7>`.
pub(crate) fn rows(ids: std::ops::Range<i64>) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    let schema = schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
            Arc::new(StringArray::from_iter_values(
                ids.map(|i| format!("c{}", i % 7)),
            )),
        ],
    )
    .unwrap();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema))
}

/// Create table `t` with rows `ids`, keyed by `id`, at version 0.
pub(crate) fn create_keyed(store: &Arc<StoreHandle>, ids: std::ops::Range<i64>) {
    create_keyed_publishing(store, ids, &[]);
}

/// [`create_keyed`], publishing `formats` from version 0.
pub(crate) fn create_keyed_publishing(
    store: &Arc<StoreHandle>,
    ids: std::ops::Range<i64>,
    formats: &[String],
) {
    super::write::create_publishing(
        store.clone(),
        "t",
        schema(),
        Some(rows(ids)),
        props(Some("id")),
        false,
        2,
        formats,
    )
    .unwrap();
}

/// Table `t` keyed by `id`: ids 0..100 (version 0), 100..150 appended (1).
pub(crate) fn create_and_append(store: &Arc<StoreHandle>) {
    create_keyed(store, 0..100);
    append_ids(store, 100..150).unwrap();
}

/// Append rows `ids` to table `t` (strict schema, parallelism 2).
pub(crate) fn append_ids(
    store: &Arc<StoreHandle>,
    ids: std::ops::Range<i64>,
) -> crate::error::Result<super::snapshot::TableManifest> {
    append(store.clone(), "t", rows(ids), SchemaMode::Strict, None, 2)
}

/// Table `t` keyed by `id`: ids 0..10 created, then `steps` appends of 3
/// ids each (one file per version); the ids in order, the model.
pub(crate) fn create_and_append_steps(store: &Arc<StoreHandle>, steps: i64) -> Vec<i64> {
    create_keyed(store, 0..10);
    let mut model: Vec<i64> = (0..10).collect();
    for i in 0..steps {
        let lo = 10 + 3 * i;
        append_ids(store, lo..lo + 3).unwrap();
        model.extend(lo..lo + 3);
    }
    model
}

pub(crate) fn props(pk: Option<&str>) -> TableProperties {
    TableProperties {
        primary_key: pk.map(str::to_string),
        compression: "zstd".into(),
        row_group_size: Some(100),
        target_file_size: None,
    }
}

pub(crate) fn cond(
    column: &str,
    op: &str,
    value: Option<ArrayRef>,
) -> (String, String, Option<ArrayRef>) {
    (column.into(), op.into(), value)
}

pub(crate) fn int(v: i64) -> Option<ArrayRef> {
    Some(Arc::new(Int64Array::from(vec![v])))
}

pub(crate) fn text(v: &str) -> Option<ArrayRef> {
    Some(Arc::new(StringArray::from(vec![v])))
}

/// The keys of table `t`'s data files in the store (committed or not).
pub(crate) fn data_files(store: &Arc<StoreHandle>) -> Vec<String> {
    let listing = crate::runtime::block_on(store.list("t/data", true))
        .unwrap()
        .unwrap();
    listing.objects.into_iter().map(|m| m.key).collect()
}

/// The sorted ids of a version, optionally filtered.
pub(crate) fn ids(store: &Arc<StoreHandle>, at: At, pred: Option<Predicate>) -> Vec<i64> {
    let m = crate::runtime::block_on(resolve(store, "t", at))
        .unwrap()
        .unwrap();
    let opts = ScanOptions {
        columns: Some(vec!["id".into()]),
        predicate: pred.map(Arc::new),
        batch_size: Some(37),
        parallelism: 2,
        files: None,
    };
    let mut out: Vec<i64> = scan(store.clone(), "t", &m, opts)
        .unwrap()
        .flat_map(|b| {
            b.unwrap()
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn append_delete_scan_and_time_travel_cost_what_the_docs_say() {
    let (store, counts) = counting_store();
    create(
        store.clone(),
        "t",
        schema(),
        Some(rows(0..1000)),
        props(None),
        false,
        2,
    )
    .unwrap();
    counts.take();

    // An append that wins at once: 2 GETs + 1 HEAD (the root alone), the
    // data PUT, then its segment (the small last one rewritten: cached, so
    // no GET), the manifest and the pointer.
    let m = append(
        store.clone(),
        "t",
        rows(1000..1500),
        SchemaMode::Strict,
        None,
        2,
    )
    .unwrap();
    assert_eq!(m.version, 1);
    assert_eq!(
        counts.take(),
        [2, 1, 4, 0, 0],
        "[get, head, put, list, delete]: the pointer and its manifest, a HEAD of the next name"
    );

    // A scattered delete (one customer's rows, in every row group): reads the
    // footers and the filter column, then 4 PUTs (tombstone, the segment of
    // the files it touches, manifest, pointer).
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("customer", "==", text("c3"))]).unwrap(),
        2,
    )
    .unwrap();
    assert!(d.committed);
    assert_eq!(
        d.rows,
        Some((0..1500).filter(|i| i % 7 == 3).count() as u64)
    );
    let [_, _, puts, lists, deletes] = counts.take();
    assert_eq!((puts, lists, deletes), (4, 0, 0));

    let expected: Vec<i64> = (0..1500).filter(|i| i % 7 != 3).collect();
    assert_eq!(ids(&store, At::Latest, None), expected);
    assert_eq!(
        ids(&store, At::Version(1), None),
        (0..1500).collect::<Vec<_>>()
    );
    assert_eq!(
        ids(&store, At::Version(0), None),
        (0..1000).collect::<Vec<_>>()
    );
    // As of the creation time of version 1: version 1.
    let v1 = crate::runtime::block_on(resolve(&store, "t", At::Version(1)))
        .unwrap()
        .unwrap();
    let t1 = chrono::DateTime::parse_from_rfc3339(&v1.created_at)
        .unwrap()
        .with_timezone(&chrono::Utc);
    assert_eq!(ids(&store, At::AsOf(t1), None).len(), 1500);
    let before = t1 - chrono::Duration::days(365);
    assert!(matches!(
        crate::runtime::block_on(resolve(&store, "t", At::AsOf(before))).unwrap(),
        Err(Error::VersionNotFound { path, .. }) if path == "t"
    ));

    // Whole row groups: ids 100..300 are row groups 1 and 2 of the first file.
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("id", ">=", int(100)), cond("id", "<", int(300))]).unwrap(),
        2,
    )
    .unwrap();
    let t = crate::runtime::block_on(super::tombstone::load(
        &store,
        "t",
        d.manifest.version,
        &d.manifest.tombstones[1..],
    ))
    .unwrap()
    .unwrap();
    let kinds: Vec<&str> = t[0]
        .entries
        .iter()
        .map(|e| match e {
            super::tombstone::Entry::RowGroup { .. } => "row_group",
            super::tombstone::Entry::PkRange { .. } => "pk_range",
            super::tombstone::Entry::Rows { .. } => "rows",
        })
        .collect();
    assert_eq!(kinds, ["row_group", "row_group"]);
    let expected: Vec<i64> = (0..1500)
        .filter(|i| i % 7 != 3 && !(100..300).contains(i))
        .collect();
    assert_eq!(ids(&store, At::Latest, None), expected);

    // A delete that matches nothing commits nothing.
    counts.take();
    let none = delete(
        store.clone(),
        "t",
        predicate(vec![cond("id", ">", int(10_000))]).unwrap(),
        2,
    )
    .unwrap();
    assert!(!none.committed);
    assert_eq!(none.manifest.version, 3);
    assert_eq!(counts.take()[2], 0, "no PUT");

    // Filters and deletes compose.
    let pred = predicate(vec![cond("id", "<", int(120))]).unwrap();
    let expected: Vec<i64> = (0..100).filter(|i| i % 7 != 3).collect();
    assert_eq!(ids(&store, At::Latest, Some(pred)), expected);
}

#[test]
fn primary_key_range_deletes_read_no_data_file() {
    let (store, counts) = counting_store();
    create_keyed(&store, 0..1000);
    append(
        store.clone(),
        "t",
        rows(1000..2000),
        SchemaMode::Strict,
        None,
        2,
    )
    .unwrap();
    counts.take();
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("id", ">=", int(950)), cond("id", "<", int(1010))]).unwrap(),
        2,
    )
    .unwrap();
    assert!(d.committed);
    assert_eq!(d.rows, None, "key ranges are counted on read");
    // Pointer + manifest (its segment cached), then tombstone + segment +
    // manifest + pointer.
    assert_eq!(
        counts.take(),
        [2, 1, 4, 0, 0],
        "[get, head, put, list, delete]: the pointer and its manifest, a HEAD of the next name"
    );
    let expected: Vec<i64> = (0..2000).filter(|i| !(950..1010).contains(i)).collect();
    assert_eq!(ids(&store, At::Latest, None), expected);
    // An equality on the key, and a later general delete over a key range.
    delete(
        store.clone(),
        "t",
        predicate(vec![cond("id", "==", int(5))]).unwrap(),
        2,
    )
    .unwrap();
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("customer", "==", text("c0"))]).unwrap(),
        2,
    )
    .unwrap();
    let expected: Vec<i64> = (0..2000)
        .filter(|i| !(950..1010).contains(i) && *i != 5 && i % 7 != 0)
        .collect();
    // Rows already gone under a key range are not counted again.
    let already = (0..2000)
        .filter(|i| i % 7 == 0 && (950..1010).contains(i))
        .count() as u64;
    assert_eq!(
        d.rows,
        Some((0..2000).filter(|i| i % 7 == 0).count() as u64 - already)
    );
    assert_eq!(ids(&store, At::Latest, None), expected);
}

#[test]
fn schemas_are_checked_and_merged_and_old_files_read_with_nulls() {
    let (store, _) = counting_store();
    create(
        store.clone(),
        "t",
        schema(),
        Some(rows(0..10)),
        props(None),
        false,
        2,
    )
    .unwrap();
    let wide = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, true),
        Field::new("score", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(
        wide.clone(),
        vec![
            Arc::new(Int64Array::from(vec![100])) as ArrayRef,
            Arc::new(StringArray::from(vec!["x"])),
            Arc::new(Int64Array::from(vec![7])),
        ],
    )
    .unwrap();
    let input = || -> Box<dyn arrow_array::RecordBatchReader + Send> {
        Box::new(RecordBatchIterator::new(
            vec![Ok(batch.clone())],
            wide.clone(),
        ))
    };
    assert!(matches!(
        append(store.clone(), "t", input(), SchemaMode::Strict, None, 2),
        Err(Error::SchemaMismatch { .. })
    ));
    let m = append(store.clone(), "t", input(), SchemaMode::Merge, None, 2).unwrap();
    assert_eq!(m.version, 1);
    assert!(m.operation_parameters.contains_key("schema_change"));
    // The append returns its root; the scan reads the whole version.
    let m = crate::runtime::block_on(resolve(&store, "t", At::Latest))
        .unwrap()
        .unwrap();
    let opts = ScanOptions {
        columns: Some(vec!["score".into(), "id".into()]),
        predicate: Some(Arc::new(
            predicate(vec![cond("score", "is_null", None)]).unwrap(),
        )),
        batch_size: None,
        parallelism: 1,
        files: None,
    };
    let got: usize = scan(store.clone(), "t", &m, opts)
        .unwrap()
        .map(|b| {
            let b = b.unwrap();
            assert_eq!(b.schema().field(0).name(), "score");
            assert_eq!(b.column(0).null_count(), b.num_rows());
            b.num_rows()
        })
        .sum();
    assert_eq!(got, 10, "the old file's rows, with null scores");
    // Deleting by the new column reaches only the new file.
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("score", "==", int(7))]).unwrap(),
        2,
    )
    .unwrap();
    assert_eq!(d.rows, Some(1));
    assert_eq!(ids(&store, At::Latest, None), (0..10).collect::<Vec<_>>());
    assert_eq!(
        ids(&store, At::Version(1), None),
        (0..10).chain([100]).collect::<Vec<_>>()
    );
}

#[test]
fn create_refuses_what_it_cannot_keep() {
    let (store, _) = counting_store();
    create(store.clone(), "t", schema(), None, props(None), false, 1).unwrap();
    assert!(matches!(
        create(store.clone(), "t", schema(), None, props(None), false, 1),
        Err(Error::AlreadyExists { .. })
    ));
    assert_eq!(
        create(store.clone(), "t", schema(), None, props(None), true, 1)
            .unwrap()
            .version,
        0
    );
    assert!(matches!(
        create(
            store.clone(),
            "t",
            schema(),
            Some(rows(0..3)),
            props(None),
            true,
            1
        ),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        create(
            store.clone(),
            "u",
            schema(),
            None,
            props(Some("nope")),
            false,
            1
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        append(
            store.clone(),
            "absent",
            rows(0..3),
            SchemaMode::Strict,
            None,
            1
        ),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        delete(store.clone(), "t", Predicate::default(), 1),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn hostile_row_group_counts_in_a_manifest_allocate_nothing() {
    use super::scan::file_read_options;
    use super::tombstone::FileDeletes;
    let (store, _) = counting_store();
    let m = create(
        store,
        "t",
        schema(),
        Some(rows(0..10)),
        props(None),
        false,
        1,
    )
    .unwrap();
    let mut file = m.data_files[0].clone();
    file.row_group_count = u64::MAX;
    let deletes = FileDeletes {
        row_groups: [0, 1].into(),
        ..Default::default()
    };
    let opts = file_read_options(&m, &file, &schema(), None, Some(&deletes), None, "p")
        .unwrap()
        .expect("not every row group is deleted");
    assert_eq!(opts.skip_row_groups.as_ref().map(|s| s.len()), Some(2));
    // And a file whose every row group is deleted is not read at all.
    file.row_group_count = 2;
    assert!(
        file_read_options(&m, &file, &schema(), None, Some(&deletes), None, "p")
            .unwrap()
            .is_none()
    );
}

#[test]
fn key_range_deletes_commit_only_when_a_live_row_matches() {
    let (store, counts) = counting_store();
    create(
        store.clone(),
        "t",
        schema(),
        Some(rows(0..1000)),
        props(Some("id")),
        false,
        2,
    )
    .unwrap();
    append(
        store.clone(),
        "t",
        rows(1000..2000),
        SchemaMode::Strict,
        None,
        2,
    )
    .unwrap();
    let range = |lo: i64, hi: i64| {
        predicate(vec![cond("id", ">=", int(lo)), cond("id", "<", int(hi))]).unwrap()
    };
    counts.take();
    // No file's statistics overlap: nothing read, nothing committed.
    let d = delete(store.clone(), "t", range(2500, 2600), 2).unwrap();
    assert!(!d.committed);
    assert_eq!(
        counts.take(),
        [2, 1, 0, 0, 0],
        "[get, head, put, list, delete]"
    );
    // Inside one file with no deletes, but neither its min nor max: its
    // footer and then its key column are read to find a live match.
    let d = delete(store.clone(), "t", range(150, 160), 2).unwrap();
    assert!(d.committed);
    let [get, head, put, ..] = counts.take();
    assert!(get > 2 && head == 1 && put == 4, "{get} {head} {put}");
    // The same range again: every row in it is deleted, so no commit.
    let d = delete(store.clone(), "t", range(150, 160), 2).unwrap();
    assert!(!d.committed);
    let [get, _, put, ..] = counts.take();
    assert!(get > 2 && put == 0);
    // A file without deletes whose recorded max is in the range: proven
    // from the manifest, no data file read.
    let d = delete(store.clone(), "t", range(1990, 5000), 2).unwrap();
    assert!(d.committed);
    // GETs: the pointer alone (the latest manifest was read by the delete
    // before, on this handle, which keeps it; the segments are cached). PUTs:
    // tombstone, the segment of the file, manifest, pointer.
    assert_eq!(counts.take(), [1, 1, 4, 0, 0]);
    let expected: Vec<i64> = (0..1990).filter(|i| !(150..160).contains(i)).collect();
    assert_eq!(ids(&store, At::Latest, None), expected);
}

#[test]
fn a_date32_column_widened_to_date64_filters_and_deletes_by_days() {
    use arrow_array::{Date32Array, Date64Array};
    const DAY: i64 = 86_400_000;
    let (store, _) = counting_store();
    let old = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("d", DataType::Date32, true),
    ]));
    let new = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("d", DataType::Date64, true),
    ]));
    let batch = |schema: &SchemaRef, ids: Vec<i64>, d: ArrayRef| {
        let b =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids)), d]).unwrap();
        Box::new(RecordBatchIterator::new(vec![Ok(b)], schema.clone()))
            as Box<dyn arrow_array::RecordBatchReader + Send>
    };
    let days = Arc::new(Date32Array::from(vec![18_000, 18_001, 18_002]));
    create(
        store.clone(),
        "t",
        old.clone(),
        Some(batch(&old, vec![0, 1, 2], days)),
        props(Some("d")),
        false,
        1,
    )
    .unwrap();
    let ms = Arc::new(Date64Array::from(vec![18_001 * DAY, 19_000 * DAY]));
    append(
        store.clone(),
        "t",
        batch(&new, vec![3, 4], ms),
        SchemaMode::Merge,
        None,
        1,
    )
    .unwrap();
    let day = |d: i64| -> Option<ArrayRef> { Some(Arc::new(Date64Array::from(vec![d * DAY]))) };
    let at = |op: &str, d: i64| Some(predicate(vec![cond("d", op, day(d))]).unwrap());
    assert_eq!(ids(&store, At::Latest, at("==", 18_001)), vec![1, 3]);
    assert_eq!(ids(&store, At::Latest, at(">", 18_001)), vec![2, 4]);
    assert_eq!(ids(&store, At::Latest, at("<", 18_001)), vec![0]);
    // A key-range delete over both files: the old file's key range records
    // its type (Date64), and the old days compare as days.
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("d", "<=", day(18_001))]).unwrap(),
        1,
    )
    .unwrap();
    assert!(d.committed);
    assert_eq!(ids(&store, At::Latest, None), vec![2, 4]);
    let d = delete(
        store.clone(),
        "t",
        predicate(vec![cond("d", "<", day(18_002))]).unwrap(),
        1,
    )
    .unwrap();
    assert!(!d.committed, "only deleted rows are in range");
}

#[test]
fn create_refuses_keys_that_others_occupy_before_writing() {
    use crate::store::PutMode;
    let (store, counts) = counting_store();
    let put = |key: &str, body: &'static str| {
        crate::runtime::block_on(store.put(
            key,
            bytes::Bytes::from_static(body.as_bytes()),
            PutMode::Create,
        ))
        .unwrap()
        .unwrap();
    };
    put("ds/_SUCCESS", "");
    put("outer/inner/_SUCCESS", "");
    put(
        "pl/manifest/v00000000.json",
        r#"{"format": "pds-pipeline/1", "version": 0}"#,
    );
    create(store.clone(), "t", schema(), None, props(None), false, 1).unwrap();
    counts.take();
    for (key, says) in [
        ("ds", "a dataset is stored there"),
        ("pl", "a pipeline is stored there"),
        ("t/archive", "inside the table at \"t\""),
        ("ds/x", "inside the dataset at \"ds\""),
        ("outer", "the dataset at \"outer/inner\" lies inside it"),
    ] {
        let r = create(
            store.clone(),
            key,
            schema(),
            Some(rows(0..3)),
            props(None),
            false,
            1,
        );
        match r {
            Err(e @ Error::KeyOccupied { .. }) => assert!(e.to_string().contains(says), "{e}"),
            other => panic!("{key}: expected KeyOccupied, got {other:?}"),
        }
        assert_eq!(counts.take()[2], 0, "{key}: nothing written");
    }
    // The check's cost on a free key: 5 HEADs per level and 1 LIST; then
    // the latest version (GET + HEAD), and the commit (GET + HEAD, 2 PUTs).
    create(store.clone(), "a/b", schema(), None, props(None), false, 1).unwrap();
    assert_eq!(
        counts.take(),
        [2, 12, 2, 1, 0],
        "[get, head, put, list, delete]"
    );
}
