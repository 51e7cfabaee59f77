//! Upsert by primary key: replace the rows whose key is in the data and
//! insert the rest, in one commit, rewriting no data file.
//!
//! 1. The data must hold the key column (checked before any I/O but the
//!    latest version's read).
//! 2. Its rows stream into new data files (as an append's); only their key
//!    column is kept. A null key fails the stream at its batch; repeated or
//!    NaN keys fail the upsert once the stream ends. The files uploaded so
//!    far are then removed and nothing is committed.
//! 3. The replaced rows are found as a delete by key finds them
//!    ([`super::delete::plan`]): when the keys are consecutive integers, as
//!    one key range (no data file read once a live match is proven);
//!    otherwise as `key in (...)`, where the manifest's key statistics
//!    prune files, the footers' prune row groups, and only the key column
//!    of the remaining row groups is read (a sorted set: a binary search
//!    per row). The rows found become row-group or bitmap tombstone entries.
//! 4. Tombstones and files commit in one version through
//!    [`super::rewrite`]: serializable with every other commit.
//!
//! Cost in requests: 2 GETs + 1 HEAD (latest version, which the plan uses
//! too), the data PUTs; per
//! candidate file a footer GET (2 for a large footer) and a range GET per
//! key column chunk of a candidate row group; 1 PUT for the tombstone, then
//! the commit's 2 PUTs (manifest, pointer) when it wins at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchReader};
use arrow_schema::{DataType, Schema};

use super::delete;
use super::rewrite::{CheckedSchema, Rewrite, Rewritten};
use super::schema::SchemaMode;
use super::snapshot::{DataFile, TableManifest, TableSchema};
use super::versions;
use super::write::{self, BoxedReader};
use crate::error::{Error, Result};
use crate::parquet::filter::{Condition, Op, Predicate};
use crate::parquet::value_set::ValueSet;
use crate::store::StoreHandle;

/// The sorted, distinct keys of `keys` (already of the table's key type),
/// after checking that there is no null, NaN or repeated key.
pub fn distinct_keys(keys: &ArrayRef, pk: &str) -> Result<ValueSet> {
    if keys.null_count() > 0 {
        return Err(Error::InvalidArgument(format!(
            "the data holds {} null keys in the primary-key column {pk:?}; every row needs a key",
            keys.null_count()
        )));
    }
    let set = ValueSet::new(keys)?;
    if set.len() != keys.len() {
        let (rows, distinct) = (keys.len(), set.len());
        // Naming a key is a courtesy: if that fails, the count still tells.
        return Err(Error::InvalidArgument(
            match repeated_key(keys).ok().flatten() {
                Some(k) => format!(
                    "the data repeats primary keys of {pk:?}: {k} among them ({rows} rows, \
                 {distinct} distinct keys); an upsert needs one row per key"
                ),
                None => format!(
                    "the data holds repeated or NaN keys in {pk:?} ({rows} rows, {distinct} \
                 distinct keys); NaN equals no key, and an upsert needs one row per key"
                ),
            },
        ));
    }
    Ok(set)
}

/// A key that `keys` holds more than once, as text (`None` if every key is
/// distinct, or only NaN makes them seem not to be).
fn repeated_key(keys: &ArrayRef) -> Result<Option<String>> {
    if keys.len() < 2 {
        return Ok(None);
    }
    let sorted = arrow_ord::sort::sort(keys, None)?;
    let n = sorted.len();
    let same = arrow_ord::cmp::eq(&sorted.slice(0, n - 1), &sorted.slice(1, n - 1))?;
    let Some(at) = (0..same.len()).find(|&i| same.is_valid(i) && same.value(i)) else {
        return Ok(None);
    };
    let shown = arrow_cast::display::ArrayFormatter::try_new(
        sorted.as_ref(),
        &arrow_cast::display::FormatOptions::default(),
    )?
    .value(at)
    .to_string();
    if shown == "NaN" {
        return Ok(None);
    }
    let text = matches!(
        keys.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    Ok(Some(if text { format!("{shown:?}") } else { shown }))
}

/// The rows with a key in `keys`, as a predicate on `pk`: a closed range
/// when the keys are consecutive integers (a key-range tombstone then),
/// else `pk in keys`.
pub fn key_predicate(pk: &str, keys: &ArrayRef, set: &ValueSet) -> Result<Predicate> {
    let cond = |op: Op, values: ArrayRef| Condition {
        column: pk.to_string(),
        op,
        values: Some(values),
        set: Default::default(),
    };
    if keys.data_type().is_integer() && !keys.is_empty() {
        let as_i128 = arrow_cast::cast(keys, &DataType::Decimal128(38, 0))?;
        let d = as_i128
            .as_any()
            .downcast_ref::<arrow_array::Decimal128Array>()
            .ok_or_else(|| Error::Task("decimal cast".into()))?;
        // Where the smallest and the largest key are (no nulls: checked).
        let (mut lo, mut hi) = ((0usize, i128::MAX), (0usize, i128::MIN));
        for (i, &v) in d.values().iter().enumerate() {
            if v < lo.1 {
                lo = (i, v);
            }
            if v > hi.1 {
                hi = (i, v);
            }
        }
        if hi.1 - lo.1 + 1 == set.len() as i128 {
            return Ok(Predicate {
                conditions: vec![
                    cond(Op::Ge, keys.slice(lo.0, 1)),
                    cond(Op::Le, keys.slice(hi.0, 1)),
                ],
            });
        }
    }
    Ok(Predicate {
        conditions: vec![cond(Op::In, keys.clone())],
    })
}

/// The key column of `batches`, cast to `key_type`, as one array.
fn key_column(batches: &[RecordBatch], pk: &str, key_type: &DataType) -> Result<ArrayRef> {
    let mut parts = Vec::with_capacity(batches.len());
    for b in batches {
        let col = b.column_by_name(pk).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "the data lacks the primary-key column {pk:?}; an upsert needs every row's key"
            ))
        })?;
        // Not `safe`: a key that does not fit the key type is an error, not a null.
        let opts = arrow_cast::CastOptions {
            safe: false,
            ..Default::default()
        };
        parts.push(arrow_cast::cast_with_options(col, key_type, &opts)?);
    }
    if parts.is_empty() {
        return Ok(arrow_array::new_empty_array(key_type));
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(arrow_select::concat::concat(&refs)?)
}

/// Replace the rows of `files`' keys that `base` holds (already-uploaded
/// `files` of the table, as a Spark job's tasks wrote them): the keys are
/// read back from the files' key column.
///
/// `schema` is the schema the files were written in: the table's when the
/// job started. A table whose schema changed since is `SchemaMismatch` (the
/// files are removed), as for an append of files.
pub fn upsert_files(
    store: Arc<StoreHandle>,
    table: &str,
    files: Vec<DataFile>,
    schema: Arc<Schema>,
    parallelism: usize,
) -> Result<Rewritten> {
    crate::store::keys::object_segments(table)?;
    let started = crate::store::counted::Started::now(&store);
    write::check_uploaded(&store, table, &files, &schema)?;
    let checked_schema = TableSchema::of(&schema)?.arrow_schema;
    // The root: the rewrite loads the segments its keys can be in.
    let latest = versions::latest_existing_root(&store, table)?;
    let base = latest.manifest.clone();
    if base.schema.arrow_schema != checked_schema {
        write::discard(&store, table, &files);
        return Err(Error::SchemaMismatch {
            key: table.to_string(),
            reason: "the table's schema changed while the upsert's files were written; \
                     nothing was committed, retry it"
                .into(),
        });
    }
    let (pk, schema) = key_and_schema(&base, table)?;
    let key_type = schema.field_with_name(&pk)?.data_type().clone();
    let root = table.trim_end_matches('/');
    let mut batches = Vec::new();
    for f in &files {
        let opts = crate::parquet::decode::ReadOptions {
            columns: Some(vec![pk.clone()]),
            batch_size: Some(crate::parquet::decode::SCAN_BATCH_ROWS),
            ..Default::default()
        };
        let part = f.part_ref(root);
        let read = crate::runtime::block_on(crate::parquet::part_ref::read(&store, &part, &opts));
        match read.and_then(|r| r) {
            Ok(d) => batches.extend(d.batches),
            Err(e) => {
                write::discard(&store, table, &files);
                return Err(e);
            }
        }
    }
    let checked = key_column(&batches, &pk, &key_type)
        .and_then(|keys| distinct_keys(&keys, &pk).map(|set| (keys, set)));
    let (keys, set) = match checked {
        Ok(k) => k,
        Err(e) => {
            write::discard(&store, table, &files);
            return Err(e);
        }
    };
    commit_upsert(
        &store,
        table,
        latest,
        &pk,
        &keys,
        &set,
        files,
        (checked_schema, None),
        parallelism,
    )
    .map(|done| done.logged(&store, table, &started))
}

/// The table's primary key (`InvalidArgument` if it declares none) and schema.
fn key_and_schema(base: &TableManifest, table: &str) -> Result<(String, Arc<Schema>)> {
    let pk = base.properties.primary_key.clone().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "upsert replaces rows by primary key, and the table {table:?} declares none \
             (create it with primary_key=...)"
        ))
    })?;
    let schema = base.arrow_schema(&super::manifest_key(table, base.version))?;
    Ok((pk, schema))
}

/// Upsert `reader`'s rows into `table` (see the module docs). Returns the
/// version after it; nothing is committed for no rows.
///
/// The rows stream: they are encoded and uploaded as they arrive, and only
/// their key column is kept (cast to the table's key type) to find the
/// rows they replace. A null key fails the stream at its batch; repeated
/// keys fail it at the end. Either way, and whenever the input itself
/// fails, the files uploaded so far are removed and nothing is committed.
pub fn upsert(
    store: Arc<StoreHandle>,
    table: &str,
    reader: BoxedReader,
    mode: SchemaMode,
    parallelism: usize,
) -> Result<Rewritten> {
    crate::store::keys::object_segments(table)?;
    let started = crate::store::counted::Started::now(&store);
    // The root: the rewrite loads the segments its keys can be in.
    let latest = versions::latest_existing_root(&store, table)?;
    let base = latest.manifest.clone();
    let (pk, old) = key_and_schema(&base, table)?;
    if reader.schema().field_with_name(&pk).is_err() {
        return Err(Error::InvalidArgument(format!(
            "the data lacks the primary-key column {pk:?}; an upsert needs every row's key"
        )));
    }
    let seen: Arc<Mutex<Vec<ArrayRef>>> = Arc::default();
    let up = write::upload_reconciled(
        &store,
        table,
        &old,
        &base.properties,
        reader,
        mode,
        parallelism,
        |reader, target| -> Result<BoxedReader> {
            let key_type = target.field_with_name(&pk)?.data_type().clone();
            let (pk, seen) = (pk.clone(), seen.clone());
            Ok(write::Checked::boxed(reader, move |batch| {
                keep_keys(batch, &pk, &key_type, &seen)
            }))
        },
    )?;
    let parts = std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()));
    let checked = concat_keys(parts, &up.target, &pk)
        .and_then(|keys| distinct_keys(&keys, &pk).map(|set| (keys, set)));
    let (keys, set) = match checked {
        Ok(k) => k,
        Err(e) => {
            write::discard(&store, table, &up.files);
            return Err(e);
        }
    };
    if up.files.is_empty() {
        return Ok(Rewritten {
            manifest: base,
            rows: Some(0),
            rows_added: 0,
            committed: false,
        });
    }
    let schema_change = if up.change.is_empty() {
        None
    } else {
        Some((up.table_schema, up.change))
    };
    commit_upsert(
        &store,
        table,
        latest,
        &pk,
        &keys,
        &set,
        up.files,
        (base.schema.arrow_schema.clone(), schema_change),
        parallelism,
    )
    .map(|done| done.logged(&store, table, &started))
}

/// The key columns an upload's [`KeyTap`] kept, as one array of the key's
/// type in `target`.
fn concat_keys(parts: Vec<ArrayRef>, target: &Schema, pk: &str) -> Result<ArrayRef> {
    if parts.is_empty() {
        let key_type = target.field_with_name(pk)?.data_type();
        return Ok(arrow_array::new_empty_array(key_type));
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(arrow_select::concat::concat(&refs)?)
}

/// Keep `batch`'s key column (cast to the table's key type) in `seen`, as
/// the upload streams it; a batch with a null key fails the stream there,
/// so the upload stops and removes what it wrote.
fn keep_keys(
    batch: &RecordBatch,
    pk: &str,
    key_type: &DataType,
    seen: &Mutex<Vec<ArrayRef>>,
) -> Result<()> {
    let keys = crate::owned::array(&key_column(std::slice::from_ref(batch), pk, key_type)?)?;
    if keys.null_count() > 0 {
        return Err(Error::InvalidArgument(format!(
            "the data holds null keys in the primary-key column {pk:?}; every row needs a key \
             (nothing was committed)"
        )));
    }
    seen.lock().unwrap_or_else(|p| p.into_inner()).push(keys);
    Ok(())
}

/// Plan and commit the replacement of `keys` with the uploaded `files`.
#[allow(clippy::too_many_arguments)]
fn commit_upsert(
    store: &Arc<StoreHandle>,
    table: &str,
    latest: versions::Latest,
    pk: &str,
    keys: &ArrayRef,
    set: &ValueSet,
    files: Vec<DataFile>,
    schema: CheckedSchema,
    parallelism: usize,
) -> Result<Rewritten> {
    let predicate = match key_predicate(pk, keys, set) {
        Ok(p) => p,
        Err(e) => {
            write::discard(store, table, &files);
            return Err(e);
        }
    };
    let mut params = BTreeMap::new();
    params.insert("keys".to_string(), serde_json::Value::from(set.len()));
    params.insert(
        "key_ranges".to_string(),
        serde_json::Value::from(predicate.conditions.iter().all(|c| c.op != Op::In)),
    );
    let op = Rewrite {
        operation: "upsert",
        params,
        predicate: Some(predicate.clone()),
        files,
        reads_rows: false,
        schema: Some(schema),
        commits_always: false,
    };
    delete::commit_removal(store, table, op, Some(latest), parallelism)
}

#[cfg(test)]
mod tests {
    use super::super::scan::At;
    use super::super::tests::{counting_store, data_files, ids, props, schema};
    use super::super::write::create;
    use super::*;
    use arrow_array::{Int64Array, RecordBatchIterator, StringArray};

    /// [`schema`] with a nullable key column.
    fn nullable() -> arrow_schema::SchemaRef {
        let fields: Vec<_> = schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// One batch of rows `ids` (customer `u<id>`).
    fn batch(ids: &[Option<i64>]) -> RecordBatch {
        RecordBatch::try_new(
            nullable(),
            vec![
                arr(Int64Array::from(ids.to_vec())),
                arr(StringArray::from_iter_values(
                    ids.iter().map(|i| format!("u{}", i.unwrap_or(-1))),
                )),
            ],
        )
        .unwrap()
    }

    /// The batches as a stream, counting how many were read.
    fn stream(batches: Vec<RecordBatch>, read: Arc<Mutex<usize>>) -> BoxedReader {
        let counted = batches.into_iter().map(move |b| {
            *read.lock().unwrap() += 1;
            Ok(b)
        });
        Box::new(RecordBatchIterator::new(counted, nullable()))
    }

    fn run(store: &Arc<StoreHandle>, batches: Vec<RecordBatch>) -> (Result<Rewritten>, usize) {
        let read = Arc::new(Mutex::new(0));
        let out = upsert(
            store.clone(),
            "t",
            stream(batches, read.clone()),
            SchemaMode::Strict,
            2,
        );
        let n = *read.lock().unwrap();
        (out, n)
    }

    /// Table `t` keyed by a nullable `id`, with ids 0..100.
    fn keyed() -> Arc<StoreHandle> {
        let (store, _) = counting_store();
        let rows: Vec<Option<i64>> = (0..100).map(Some).collect();
        let data = Box::new(RecordBatchIterator::new(vec![Ok(batch(&rows))], nullable()));
        create(
            store.clone(),
            "t",
            nullable(),
            Some(data),
            props(Some("id")),
            false,
            2,
        )
        .unwrap();
        store
    }

    #[test]
    fn a_stream_of_batches_upserts_in_one_version() {
        let store = keyed();
        let (done, read) = run(
            &store,
            vec![batch(&[Some(5), Some(6)]), batch(&[Some(99), Some(150)])],
        );
        let done = done.unwrap();
        assert_eq!(read, 2);
        assert!(done.committed);
        assert_eq!(done.manifest.version, 1);
        assert_eq!(done.rows, Some(3), "keys 5, 6 and 99 replaced");
        let mut expected: Vec<i64> = (0..100).collect();
        expected.push(150);
        assert_eq!(ids(&store, At::Latest, None), expected);
    }

    #[test]
    fn bad_keys_in_a_stream_leave_no_file_and_no_version() {
        let store = keyed();
        let before = data_files(&store);
        // A key repeated across batches: known once the stream ends.
        let (out, read) = run(
            &store,
            vec![
                batch(&[Some(1), Some(2)]),
                batch(&[Some(3), Some(2)]),
                batch(&[Some(4)]),
            ],
        );
        assert!(
            matches!(out, Err(Error::InvalidArgument(ref m)) if m.contains("repeats primary keys of \"id\": 2 among them")),
            "{out:?}"
        );
        assert_eq!(read, 3);
        assert_eq!(data_files(&store), before);
        // A null key stops the stream at its batch.
        let (out, read) = run(
            &store,
            vec![
                batch(&[Some(1)]),
                batch(&[Some(3), None]),
                batch(&[Some(4)]),
            ],
        );
        assert!(
            matches!(out, Err(Error::InvalidArgument(ref m)) if m.contains("null keys")),
            "{out:?}"
        );
        assert_eq!(read, 2);
        assert_eq!(data_files(&store), before);
        let latest = crate::runtime::block_on(versions::latest(&store, "t"))
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(latest.manifest.version, 0);
    }

    fn arr(a: impl Array + 'static) -> ArrayRef {
        Arc::new(a)
    }

    #[test]
    fn consecutive_integer_keys_become_one_range_and_others_a_set() {
        let keys = arr(Int64Array::from(vec![7, 5, 6, 8]));
        let set = distinct_keys(&keys, "id").unwrap();
        let p = key_predicate("id", &keys, &set).unwrap();
        let ops: Vec<Op> = p.conditions.iter().map(|c| c.op).collect();
        assert_eq!(ops, vec![Op::Ge, Op::Le]);
        let bound = |i: usize| {
            p.conditions[i]
                .values
                .as_ref()
                .unwrap()
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0)
        };
        assert_eq!((bound(0), bound(1)), (5, 8));
        let gap = arr(Int64Array::from(vec![1, 2, 4]));
        let set = distinct_keys(&gap, "id").unwrap();
        let p = key_predicate("id", &gap, &set).unwrap();
        assert_eq!(p.conditions.len(), 1);
        assert_eq!(p.conditions[0].op, Op::In);
        let text = arr(StringArray::from(vec!["a", "b"]));
        let set = distinct_keys(&text, "id").unwrap();
        assert_eq!(
            key_predicate("id", &text, &set).unwrap().conditions[0].op,
            Op::In
        );
    }

    #[test]
    fn repeated_null_or_nan_keys_are_refused() {
        let dup = arr(Int64Array::from(vec![1, 2, 1]));
        assert!(matches!(
            distinct_keys(&dup, "id"),
            Err(Error::InvalidArgument(m)) if m.contains("2 distinct keys")
        ));
        let null = arr(Int64Array::from(vec![Some(1), None]));
        assert!(matches!(
            distinct_keys(&null, "id"),
            Err(Error::InvalidArgument(m)) if m.contains("null")
        ));
        let nan = arr(arrow_array::Float64Array::from(vec![1.0, f64::NAN]));
        assert!(matches!(
            distinct_keys(&nan, "id"),
            Err(Error::InvalidArgument(m)) if m.contains("NaN keys")
        ));
        assert!(matches!(
            distinct_keys(&dup, "id"),
            Err(Error::InvalidArgument(m)) if m.contains("repeats primary keys of \"id\": 1 among them")
        ));
        let text = arr(StringArray::from(vec!["b", "a", "b"]));
        assert!(matches!(
            distinct_keys(&text, "id"),
            Err(Error::InvalidArgument(m)) if m.contains(": \"b\" among them")
        ));
    }
}
