//! Replace: remove the rows a filter matches and add new rows, in one
//! commit (Delta's `replaceWhere`; what re-materialising a partition is).
//!
//! 1. The latest version is read, and the filter bound to its schema: an
//!    unknown column or a value of the wrong type fails here, before
//!    anything is written. The data's schema is reconciled with the table's
//!    as an append's is (`strict` or `merge`).
//! 2. The data streams into new data files as an append's does (encoded and
//!    uploaded as it arrives, never held whole). Each batch is checked on
//!    the way: every row must match the filter (a null never does). The
//!    first row that does not fails the replace with `RowsRefused` naming it
//!    (its position in the stream, its filter columns' values and the
//!    condition it fails); the files already uploaded are removed, and
//!    nothing is committed. An error of the input stream itself fails it
//!    the same way.
//! 3. The rows to remove are found as a delete finds them
//!    ([`super::delete::plan`]: statistics prune files and row groups, only
//!    the filter's columns are read) and become one tombstone; tombstone
//!    and new files commit in one version through [`super::rewrite`]. A
//!    reader sees the version before (the old rows) or the version after
//!    (the new rows), never the partition empty or doubled.
//! 4. An empty filter replaces every row: the version after holds exactly
//!    the new files (every file and tombstone of the table is dropped from
//!    it, nothing is read), like an overwrite that keeps the table, its
//!    settings and its history.
//!
//! A replace that removes no row and adds none (no data, nothing matching;
//! for an empty filter: no data and no data file in the table) commits a
//! version all the same: re-materialising a partition adds exactly one
//! version, and the caller reports the version and commit id it made.
//!
//! **Serializable.** The result must be the one some serial order of the
//! commits gives, in version order, so that time travel agrees with it.
//! A commit C that lands between this replace's snapshot and its commit
//! comes first in that order, so the replace must act as if it ran after C:
//! - C appended rows that match the filter: they are removed too. Files
//!   added since the snapshot whose statistics may hold matching rows are
//!   planned in a further round on the version that added them (their own
//!   tombstone, in the same commit), exactly as a delete plans them. Rows
//!   appended concurrently into the partition are thus replaced, not
//!   doubled: the partition holds exactly the replace's rows.
//! - C is another replace of a disjoint filter (another partition): its
//!   new files' statistics rule this filter out, so nothing is planned
//!   again; the commit just rebases on C and both land.
//! - C is a replace of the same partition: its new rows match, so they are
//!   removed: the later replace wins, as in the serial order.
//! - C deleted rows this replace also marks: a row deleted twice is
//!   deleted once; nothing changes for the new rows, which come from the
//!   caller, not from the rows removed.
//! - C removed a file this replace's tombstone marks (a compaction): the
//!   plan starts over on C's version (compaction wrote those rows again).
//! - C changed the schema (a merge-mode append): with a filter,
//!   `SchemaMismatch`, nothing committed (as for an append). The empty
//!   filter fits its data to C's schema as if it had started on C (see
//!   [`fit`]): it commits if the data's schema reconciles with C's in the
//!   replace's mode (strict: the same columns) and the files read as the
//!   result (the files then record the schema they were written in);
//!   otherwise `SchemaMismatch` naming both schemas.
//!
//! For the empty filter the commit drops whatever files the version it
//! builds on holds, so the rows of every earlier commit go, as they would in
//! the serial order.
//!
//! **Faults.** The data files are uploaded once and reused by every round
//! and every commit attempt; tombstones of a plan that starts over are
//! removed. A lost reply to the manifest PUT is settled by reading back the
//! commit id; a lost pointer reply leaves a committed version that readers
//! roll forward to. Every object written is removed on a failure that
//! certainly committed nothing, never on `CommitUnknown` (a manifest may
//! name them): they are garbage for vacuum then.
//!
//! Cost in requests: 2 GETs + 1 HEAD (the latest version, which the plan
//! and the commit build on), the data PUTs; with a filter, per candidate
//! file (whose manifest statistics may match) a footer GET and a range GET
//! per filter column chunk of its candidate row groups (a range on the
//! primary key: none when statistics prove a match), and 1 tombstone PUT if
//! a row matches; then 2 PUTs (manifest, pointer) when the commit wins at
//! once, plus a manifest segment PUT per changed segment.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};
use serde_json::Value;

use super::commit::{self, CommitOptions, Outcome};
use super::delete;
use super::manifest_key;
use super::rewrite::{CheckedSchema, Rewrite, Rewritten};
use super::schema::{describe_change, reconcile, SchemaMode};
use super::snapshot::TableSchema;
use super::versions;
use super::versions::Depth;
use super::write::{self, BoxedReader};
use crate::dataset::manifest::now_iso8601;
use crate::error::{Error, Result};
use crate::parquet::filter::{Op, Predicate};
use crate::store::counted::Started;
use crate::store::StoreHandle;

/// Replace the rows of `table` that `predicate` matches with `reader`'s
/// rows, in one commit (see the module docs); an empty predicate replaces
/// every row. Returns the version after it (always a new one, even when
/// nothing was removed or added).
pub fn replace(
    store: Arc<StoreHandle>,
    table: &str,
    predicate: Predicate,
    reader: BoxedReader,
    mode: SchemaMode,
    parallelism: usize,
) -> Result<Rewritten> {
    crate::store::keys::object_segments(table)?;
    let started = Started::now(&store);
    let latest = versions::latest_existing(&store, table)?;
    replace_on(
        &store,
        table,
        latest,
        predicate,
        reader,
        mode,
        parallelism,
        &started,
    )
}

/// [`replace`] on `latest`, the version as read (maybe stale: a commit
/// since makes the replace plan again, as a lost race does).
#[allow(clippy::too_many_arguments)]
fn replace_on(
    store: &Arc<StoreHandle>,
    table: &str,
    latest: versions::Latest,
    predicate: Predicate,
    reader: BoxedReader,
    mode: SchemaMode,
    parallelism: usize,
    started: &Started,
) -> Result<Rewritten> {
    let base = &latest.manifest;
    let old = base.arrow_schema(&manifest_key(table, base.version))?;
    // A bad filter fails here, before anything is written.
    predicate.clone().bind(&old)?;
    let whole = predicate.conditions.is_empty();
    let up = write::upload_reconciled(
        store,
        table,
        &old,
        &base.properties,
        reader,
        mode,
        parallelism,
        |reader, target| -> Result<BoxedReader> {
            if whole {
                Ok(reader)
            } else {
                let mut within = Within::new(&predicate, target, table)?;
                Ok(write::Checked::boxed(reader, move |b| within.check(b)))
            }
        },
    )?;
    if whole {
        return replace_all(store, table, latest, up, mode, started);
    }
    let schema_change = if up.change.is_empty() {
        None
    } else {
        Some((up.table_schema, up.change))
    };
    let checked: CheckedSchema = (base.schema.arrow_schema.clone(), schema_change);
    let mut params = BTreeMap::new();
    params.insert("filter".to_string(), delete::describe(&predicate));
    let op = Rewrite {
        operation: "replace",
        params,
        predicate: Some(predicate.clone()),
        files: up.files,
        reads_rows: false,
        schema: Some(checked),
        commits_always: true,
    };
    delete::commit_removal(store, table, op, Some(latest), parallelism)
        .map(|done| done.logged(store, table, started))
}

/// How a whole-table replace's files go into the version it commits on:
/// that version's schema reconciled with the data's (as if the replace had
/// started on it), and the schema the files were written in when it is
/// not that one.
struct Fit {
    /// The schema of the version committed.
    schema: TableSchema,
    /// How it differs from the schema of the version it builds on.
    change: Vec<String>,
    /// The schema the files were written in, when it is not `schema`.
    files_in: Option<TableSchema>,
}

/// The [`Fit`] of `up` (uploaded in `mode`) on version `now`.
/// `SchemaMismatch` naming both schemas when the data does not fit `now`'s
/// schema (in strict mode: its columns are not `now`'s), or the files were
/// written in a schema that does not read as the result (a type `now`
/// changed in a way no widening gives).
fn fit(
    now: &super::snapshot::TableManifest,
    table: &str,
    up: &write::Uploaded,
    mode: SchemaMode,
) -> Result<Fit> {
    let current = now.arrow_schema(&manifest_key(table, now.version))?;
    let refused = |why: String| Error::SchemaMismatch {
        key: table.to_string(),
        reason: format!(
            "the table's schema changed while this replace ran: it is now ({}), and the data's \
             schema ({}) does not fit it in {} mode: {why}; nothing was changed",
            show(&current),
            show(&up.input),
            match mode {
                SchemaMode::Strict => "strict",
                SchemaMode::Merge => "merge",
            },
        ),
    };
    let target = match reconcile(&current, &up.input, mode, table) {
        Ok(t) => t,
        Err(Error::SchemaMismatch { reason, .. }) => return Err(refused(reason)),
        Err(e) => return Err(e),
    };
    let same = |a: &Schema, b: &Schema| a.fields() == b.fields();
    // The files hold `up.target`: they read as `target` if merging it in
    // changes nothing (it lacks columns, or holds narrower types).
    let readable = reconcile(&target, &up.target, SchemaMode::Merge, table)
        .map(|t| same(&t, &target))
        .unwrap_or(false);
    if !readable {
        return Err(refused(format!(
            "the data was written as ({}), which does not read as ({})",
            show(&up.target),
            show(&target)
        )));
    }
    let change = describe_change(&current, &target);
    let schema = if change.is_empty() {
        now.schema.clone()
    } else {
        TableSchema::of(&target)?
    };
    let files_in = if same(&up.target, &target) {
        None
    } else {
        Some(up.table_schema.clone())
    };
    Ok(Fit {
        schema,
        change,
        files_in,
    })
}

/// `name: type, ...`, for messages.
fn show(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The whole-table replace: one version holding exactly the uploaded files,
/// built on whatever version is the latest when it commits (its root alone
/// is read). A schema changed since the snapshot (a concurrent merge) is
/// fitted again ([`fit`]). A version is committed even when it removes
/// nothing and adds nothing.
fn replace_all(
    store: &Arc<StoreHandle>,
    table: &str,
    latest: versions::Latest,
    up: write::Uploaded,
    mode: SchemaMode,
    started: &Started,
) -> Result<Rewritten> {
    let files = &up.files;
    let rows_added: u64 = files.iter().map(|f| f.total_rows).sum();
    let opts = CommitOptions {
        depth: Depth::Root,
        ..Default::default()
    };
    let out = crate::runtime::block_on(commit::commit(store, table, &opts, Some(latest), |now| {
        let now = now.ok_or_else(|| Error::NotFound {
            path: table.to_string(),
        })?;
        let fit = fit(now, table, &up, mode)?;
        let removed = now.file_count();
        let mut next = now.clone();
        next.created_at = now_iso8601();
        next.operation = "replace".into();
        let mut params = BTreeMap::new();
        params.insert("filter".to_string(), Value::Array(Vec::new()));
        params.insert("files_removed".into(), removed.into());
        params.insert("rows_added".into(), rows_added.into());
        params.insert("files_added".into(), files.len().into());
        if !fit.change.is_empty() {
            params.insert("schema_change".into(), fit.change.clone().into());
        }
        next.schema = fit.schema;
        next.operation_parameters = params;
        // No file is left but the new ones.
        next.file_schemas = BTreeMap::new();
        let mut added = files.clone();
        if let Some(written) = fit.files_in {
            let id = crate::parquet::encode::sha256_hex(written.arrow_schema.as_bytes())[..16]
                .to_string();
            for f in &mut added {
                f.schema = Some(id.clone());
            }
            if !added.is_empty() {
                next.file_schemas.insert(id, written);
            }
        }
        next.replace_files(added);
        Ok(Some(next))
    }))
    .and_then(|r| r);
    match out {
        Ok(Outcome::Committed { manifest, .. }) => Ok(Rewritten {
            manifest: write::committed(store, table, *manifest, started),
            rows: None,
            rows_added,
            committed: true,
        }),
        Ok(Outcome::Unchanged { .. }) => {
            write::discard(store, table, files);
            Err(Error::Task("replace committed nothing".into()))
        }
        Err(e) => {
            if write::may_discard(&e) {
                write::discard(store, table, files);
            }
            Err(e)
        }
    }
}

/// The input, each batch checked to hold only rows the filter matches
/// (compared in the table's types: the filter columns are cast as the
/// upload casts them); the first row that does not is `RowsRefused`.
struct Within {
    /// The filter, bound to `columns`.
    filter: Predicate,
    /// The filter's columns, of the types the rows are stored in, nullable.
    columns: SchemaRef,
    /// Rows checked so far (the position of the next batch's first row).
    seen: u64,
    table: String,
}

impl Within {
    fn new(predicate: &Predicate, target: &Schema, table: &str) -> Result<Self> {
        let fields: Vec<Field> = predicate
            .columns()
            .iter()
            .map(|c| {
                Ok(target
                    .field_with_name(c)
                    .map_err(|_| Error::InvalidArgument(format!("filter on unknown column {c:?}")))?
                    .clone()
                    .with_nullable(true))
            })
            .collect::<Result<_>>()?;
        let columns = Arc::new(Schema::new(fields));
        let filter = predicate.clone().bind(&columns)?;
        Ok(Self {
            filter,
            columns,
            seen: 0,
            table: table.to_string(),
        })
    }

    /// The filter's columns of `batch`, in the stored types (a column the
    /// input lacks is all nulls, as the upload writes it).
    fn filter_columns(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let opts = arrow_cast::CastOptions {
            safe: false,
            ..Default::default()
        };
        let columns = self
            .columns
            .fields()
            .iter()
            .map(|f| match batch.column_by_name(f.name()) {
                None => Ok(arrow_array::new_null_array(f.data_type(), rows)),
                Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
                Some(c) => arrow_cast::cast_with_options(c, f.data_type(), &opts),
            })
            .collect::<std::result::Result<Vec<ArrayRef>, ArrowError>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.columns.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?)
    }

    fn check(&mut self, batch: &RecordBatch) -> Result<()> {
        let columns = self.filter_columns(batch)?;
        let matched = self.filter.evaluate(&columns)?;
        // `evaluate` gives no nulls: a null is a row that does not match.
        match (0..matched.len()).find(|&i| !matched.value(i)) {
            None => {
                self.seen += batch.num_rows() as u64;
                Ok(())
            }
            Some(i) => Err(Error::RowsRefused {
                key: self.table.clone(),
                reason: self.refusal(&columns, i)?,
            }),
        }
    }

    /// Why row `i` of `columns` is refused: its position in the input, its
    /// filter columns' values and the first condition it fails.
    fn refusal(&self, columns: &RecordBatch, i: usize) -> Result<String> {
        let row = columns.slice(i, 1);
        let options = FormatOptions::default().with_null("null");
        let show = |a: &dyn Array, at: usize| -> Result<String> {
            Ok(ArrayFormatter::try_new(a, &options)?.value(at).to_string())
        };
        let mut values = Vec::new();
        for (f, c) in row.schema().fields().iter().zip(row.columns()) {
            values.push(format!("{}={}", f.name(), show(c.as_ref(), 0)?));
        }
        let mut failed = String::new();
        for c in &self.filter.conditions {
            let one = Predicate {
                conditions: vec![c.clone()],
            };
            if one.evaluate(&row)?.value(0) {
                continue;
            }
            let shown = match &c.values {
                None => Vec::new(),
                Some(v) => (0..v.len())
                    .map(|k| show(v.as_ref(), k))
                    .collect::<Result<Vec<_>>>()?,
            };
            failed = match c.op {
                Op::IsNull => format!("{} is null", c.column),
                Op::IsNotNull => format!("{} is not null", c.column),
                Op::In | Op::NotIn => {
                    format!("{} {} [{}]", c.column, op_text(c.op), shown.join(", "))
                }
                op => format!("{} {} {}", c.column, op_text(op), shown.join(", ")),
            };
            break;
        }
        Ok(format!(
            "row {} of the data (counting from 0), with {}, is outside the replace's filter: \
             it fails {failed}. Every row of a replace must match its filter (a null matches \
             no condition); nothing was committed",
            self.seen + i as u64,
            values.join(", ")
        ))
    }
}

fn op_text(op: Op) -> &'static str {
    match op {
        Op::Eq => "==",
        Op::Ne => "!=",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        Op::Ge => ">=",
        Op::In => "in",
        Op::NotIn => "not in",
        Op::IsNull => "is_null",
        Op::IsNotNull => "is_not_null",
    }
}

#[cfg(test)]
mod tests {
    use super::super::scan::At;
    use super::super::tests::{cond, counting_store, data_files, ids, props, rows, schema, text};
    use super::super::write::{append, create};
    use super::*;
    use crate::parquet::filter::predicate;
    use arrow_array::{Int64Array, RecordBatchIterator, StringArray};

    /// Rows `ids`, all of customer `customer`.
    fn part(ids: &[i64], customer: &str) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef,
                Arc::new(StringArray::from(vec![customer; ids.len()])),
            ],
        )
        .unwrap()
    }

    fn stream(batches: Vec<RecordBatch>) -> BoxedReader {
        Box::new(RecordBatchIterator::new(
            batches.into_iter().map(Ok),
            schema(),
        ))
    }

    fn of(customer: &str) -> Predicate {
        predicate(vec![cond("customer", "==", text(customer))]).unwrap()
    }

    /// Table `t`: ids 0..70, customer `c<id % 7>`, no primary key.
    fn table() -> Arc<StoreHandle> {
        counted_table().0
    }

    /// [`table`], and the requests its store counts.
    fn counted_table() -> (Arc<StoreHandle>, Arc<super::super::tests::Counts>) {
        let (store, counts) = counting_store();
        create(
            store.clone(),
            "t",
            schema(),
            Some(rows(0..70)),
            props(None),
            false,
            2,
        )
        .unwrap();
        (store, counts)
    }

    fn run(store: &Arc<StoreHandle>, p: Predicate, data: Vec<RecordBatch>) -> Result<Rewritten> {
        replace(store.clone(), "t", p, stream(data), SchemaMode::Strict, 2)
    }

    /// The ids of version `at` whose customer is not `customer`, plus `new`.
    fn without(store: &Arc<StoreHandle>, at: At, customer: &str, new: &[i64]) -> Vec<i64> {
        let others = predicate(vec![cond("customer", "!=", text(customer))]).unwrap();
        let mut out = ids(store, at, Some(others));
        out.extend_from_slice(new);
        out.sort_unstable();
        out
    }

    #[test]
    fn a_replace_swaps_a_partitions_rows_in_one_version() {
        let store = table();
        let old = ids(&store, At::Latest, None);
        let done = run(&store, of("c3"), vec![part(&[1000, 1001, 1002], "c3")]).unwrap();
        assert!(done.committed);
        assert_eq!(done.manifest.version, 1);
        assert_eq!(done.manifest.operation, "replace");
        assert_eq!(done.rows, Some(10), "ten rows of c3 removed");
        assert_eq!(done.rows_added, 3);
        let expected = without(&store, At::Version(0), "c3", &[1000, 1001, 1002]);
        assert_eq!(ids(&store, At::Latest, None), expected);
        assert_eq!(ids(&store, At::Version(0), None), old, "time travel");
        // Again: the new rows replace the previous replace's.
        let again = run(&store, of("c3"), vec![part(&[7], "c3")]).unwrap();
        assert_eq!(again.manifest.version, 2);
        assert_eq!(
            ids(&store, At::Latest, None),
            without(&store, At::Version(0), "c3", &[7])
        );
        // Nothing matches and no data: a version all the same (a
        // re-materialisation adds exactly one), holding the same rows.
        let before = ids(&store, At::Latest, None);
        let none = run(&store, of("zz"), Vec::new()).unwrap();
        assert!(none.committed);
        assert_eq!(none.manifest.version, 3);
        assert_eq!(none.manifest.operation, "replace");
        assert_eq!(ids(&store, At::Latest, None), before);
        // No data, rows match: the partition is emptied, in one version.
        let emptied = run(&store, of("c3"), Vec::new()).unwrap();
        assert_eq!(emptied.manifest.version, 4);
        assert_eq!(
            ids(&store, At::Latest, None),
            without(&store, At::Version(0), "c3", &[])
        );
    }

    #[test]
    fn rows_outside_the_filter_are_refused_naming_the_first_and_nothing_is_left() {
        let store = table();
        let files = data_files(&store);
        let err = run(
            &store,
            of("c3"),
            vec![part(&[100, 101, 102], "c3"), part(&[103, 104], "c4")],
        )
        .unwrap_err();
        match &err {
            Error::RowsRefused { key, reason } => {
                assert_eq!(key, "t");
                assert!(reason.contains("row 3 of the data"), "{reason}");
                assert!(reason.contains("customer=c4"), "{reason}");
                assert!(reason.contains("customer == c3"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let latest = versions::latest_existing(&store, "t").unwrap();
        assert_eq!(latest.manifest.version, 0, "nothing committed");
        assert_eq!(data_files(&store), files, "the uploaded files are removed");
        // A null never matches.
        let null = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![5])) as ArrayRef,
                Arc::new(StringArray::from(vec![None::<&str>])),
            ],
        )
        .unwrap();
        let err = run(&store, of("c3"), vec![null]).unwrap_err();
        assert!(
            matches!(&err, Error::RowsRefused { reason, .. } if reason.contains("row 0") && reason.contains("customer=null")),
            "{err}"
        );
    }

    #[test]
    fn a_failing_input_stream_or_a_bad_filter_commits_nothing() {
        let (store, counts) = counted_table();
        let files = data_files(&store);
        let batches: Vec<std::result::Result<RecordBatch, ArrowError>> = vec![
            Ok(part(&[100, 101], "c3")),
            Err(ArrowError::ComputeError("the source failed".into())),
        ];
        let failing = Box::new(RecordBatchIterator::new(batches, schema()));
        let err =
            replace(store.clone(), "t", of("c3"), failing, SchemaMode::Strict, 2).unwrap_err();
        assert!(err.to_string().contains("the source failed"), "{err}");
        let latest = versions::latest_existing(&store, "t").unwrap();
        assert_eq!(latest.manifest.version, 0);
        assert_eq!(data_files(&store), files);
        // An unknown column: refused before any PUT.
        counts.take();
        let bad = predicate(vec![cond("nope", "==", text("x"))]).unwrap();
        let err = run(&store, bad, vec![part(&[1], "c3")]).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("nope")),
            "{err}"
        );
        assert_eq!(counts.take()[2], 0, "no PUT");
    }

    #[test]
    fn a_replace_planned_on_an_older_version_removes_the_matching_rows_appended_since() {
        let store = table();
        let started = Started::now(&store);
        let stale = versions::latest_existing(&store, "t").unwrap();
        // Committed after the replace read its snapshot: rows of c3 (match)
        // and of c5 (do not).
        append(
            store.clone(),
            "t",
            stream(vec![part(&[500, 501], "c3")]),
            SchemaMode::Strict,
            None,
            2,
        )
        .unwrap();
        append(
            store.clone(),
            "t",
            stream(vec![part(&[600], "c5")]),
            SchemaMode::Strict,
            None,
            2,
        )
        .unwrap();
        let done = replace_on(
            &store,
            "t",
            stale,
            of("c3"),
            stream(vec![part(&[1000], "c3")]),
            SchemaMode::Strict,
            2,
            &started,
        )
        .unwrap();
        assert_eq!(done.manifest.version, 3);
        assert_eq!(
            done.rows,
            Some(12),
            "10 rows of v0 and the 2 appended since"
        );
        let c3 = ids(&store, At::Latest, Some(of("c3")));
        assert_eq!(
            c3,
            vec![1000],
            "the partition holds exactly the replace's rows"
        );
        assert_eq!(
            ids(&store, At::Latest, None),
            without(&store, At::Version(2), "c3", &[1000]),
            "the other partitions, with the row appended since, stay"
        );
        // The whole-table replace on an older version drops what was
        // committed since too.
        let stale = versions::latest_existing(&store, "t").unwrap();
        append(
            store.clone(),
            "t",
            stream(vec![part(&[700], "c1")]),
            SchemaMode::Strict,
            None,
            2,
        )
        .unwrap();
        let all = replace_on(
            &store,
            "t",
            stale,
            Predicate::default(),
            stream(vec![part(&[1, 2], "c0")]),
            SchemaMode::Strict,
            2,
            &started,
        )
        .unwrap();
        assert_eq!(all.manifest.version, 5);
        assert_eq!(all.manifest.data_files.len(), 1);
        assert!(all.manifest.tombstones.is_empty());
        assert_eq!(ids(&store, At::Latest, None), vec![1, 2]);
        assert_eq!(ids(&store, At::Version(4), None).len(), 70 - 10 + 1 + 1 + 1);
    }

    #[test]
    fn an_empty_whole_table_replace_of_an_empty_table_commits_a_version() {
        let store = table();
        let all = |data| {
            replace(
                store.clone(),
                "t",
                Predicate::default(),
                data,
                SchemaMode::Strict,
                2,
            )
        };
        assert_eq!(all(stream(Vec::new())).unwrap().manifest.version, 1);
        let again = all(stream(Vec::new())).unwrap();
        assert!(again.committed);
        assert_eq!(again.manifest.version, 2, "one version per replace");
        assert!(ids(&store, At::Latest, None).is_empty());
    }

    #[test]
    fn a_whole_table_replace_fits_its_data_to_a_schema_merged_since_its_snapshot() {
        let store = table();
        let started = Started::now(&store);
        let stale = versions::latest_existing(&store, "t").unwrap();
        // Another writer adds a column (merge mode) after the snapshot.
        let wide = Arc::new(Schema::new(vec![
            Field::new("id", arrow_schema::DataType::Int64, false),
            Field::new("customer", arrow_schema::DataType::Utf8, true),
            Field::new("extra", arrow_schema::DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            wide.clone(),
            vec![
                Arc::new(Int64Array::from(vec![900])) as ArrayRef,
                Arc::new(StringArray::from(vec!["c1"])),
                Arc::new(Int64Array::from(vec![5])),
            ],
        )
        .unwrap();
        let merged = Box::new(RecordBatchIterator::new(vec![Ok(batch)], wide));
        append(store.clone(), "t", merged, SchemaMode::Merge, None, 2).unwrap();
        let all = |mode| {
            replace_on(
                &store,
                "t",
                stale.clone(),
                Predicate::default(),
                stream(vec![part(&[1, 2], "c0")]),
                mode,
                2,
                &started,
            )
        };
        // Strict: the data lacks a column the table has now.
        let err = all(SchemaMode::Strict).unwrap_err();
        match &err {
            Error::SchemaMismatch { reason, .. } => {
                assert!(
                    reason.contains("it is now (id: Int64, customer: Utf8, extra: Int64)"),
                    "{reason}"
                );
                assert!(
                    reason.contains("the data's schema (id: Int64, customer: Utf8)"),
                    "{reason}"
                );
                assert!(reason.contains("\"extra\" is missing"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let latest = versions::latest_existing(&store, "t").unwrap();
        assert_eq!(latest.manifest.version, 1, "nothing committed");
        // Merge: the data fits the new schema; its files lack the column.
        let done = all(SchemaMode::Merge).unwrap();
        assert_eq!(done.manifest.version, 2);
        assert_eq!(ids(&store, At::Latest, None), vec![1, 2]);
        let m = crate::runtime::block_on(super::super::scan::resolve(&store, "t", At::Latest))
            .unwrap()
            .unwrap();
        let schema = m.arrow_schema("t").unwrap();
        assert!(
            schema.field_with_name("extra").is_ok(),
            "the merged column stays"
        );
        let opts = super::super::scan::ScanOptions {
            columns: None,
            predicate: None,
            batch_size: None,
            parallelism: 2,
            files: None,
        };
        let batches: Vec<RecordBatch> = super::super::scan::scan(store.clone(), "t", &m, opts)
            .unwrap()
            .map(|b| b.unwrap())
            .collect();
        let extra: usize = batches
            .iter()
            .map(|b| b.column_by_name("extra").unwrap().null_count())
            .sum();
        assert_eq!(extra, 2, "the files written before the merge read nulls");
    }

    #[test]
    fn concurrent_replaces_of_disjoint_partitions_all_land() {
        let store = table();
        let rounds = 4;
        let handles: Vec<_> = ["c1", "c2"]
            .into_iter()
            .enumerate()
            .map(|(w, customer)| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for r in 0..rounds {
                        let first = 10_000 * (w as i64 + 1) + 100 * r;
                        run(
                            &store,
                            of(customer),
                            vec![part(&[first, first + 1], customer)],
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let latest = versions::latest_existing(&store, "t").unwrap();
        assert_eq!(
            latest.manifest.version,
            2 * rounds as u64,
            "one version each"
        );
        let last = 100 * (rounds - 1);
        assert_eq!(
            ids(&store, At::Latest, Some(of("c1"))),
            vec![10_000 + last, 10_001 + last]
        );
        assert_eq!(
            ids(&store, At::Latest, Some(of("c2"))),
            vec![20_000 + last, 20_001 + last]
        );
        let untouched = predicate(vec![cond("customer", "not in", {
            let v: ArrayRef = Arc::new(StringArray::from(vec!["c1", "c2"]));
            Some(v)
        })])
        .unwrap();
        assert_eq!(
            ids(&store, At::Latest, Some(untouched.clone())),
            ids(&store, At::Version(0), Some(untouched))
        );
    }
}
