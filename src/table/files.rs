//! A version's data files as one Arrow record batch (`Table.files()`):
//! built segment by segment, so that memory holds the columns of the
//! answer and the segments the process cache keeps (up to its limit), not
//! the version's whole file list as one manifest.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::snapshot::{DataFile, TableManifest, TombstoneRef};
use super::versions::{read_version_at, Depth};
use crate::error::{Error, Result};
use crate::store::StoreHandle;

/// The columns of [`files`]: per data file its path (relative to the
/// table), rows, rows known deleted (null where a primary-key range
/// applies: counted only by reading), bytes, row groups, SHA-256, and per
/// column the minimum and maximum its statistics record, as JSON objects
/// (column name to value, names sorted).
pub fn schema() -> SchemaRef {
    let int = |name: &str, nullable: bool| Field::new(name, DataType::Int64, nullable);
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        int("rows", false),
        int("deleted_rows", true),
        int("bytes", false),
        int("row_groups", false),
        Field::new("sha256", DataType::Utf8, false),
        Field::new("min", DataType::Utf8, false),
        Field::new("max", DataType::Utf8, false),
    ]))
}

/// The columns of [`schema`] but `deleted_rows`, as files are added.
#[derive(Default)]
struct Columns {
    path: StringBuilder,
    rows: Int64Builder,
    bytes: Int64Builder,
    row_groups: Int64Builder,
    sha256: StringBuilder,
    min: StringBuilder,
    max: StringBuilder,
}

/// A count of a manifest as Arrow's signed 64-bit integer.
fn int64(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::Task(format!("a data file's {what} ({n}) exceeds 2^63")))
}

impl Columns {
    fn add(&mut self, files: &[DataFile]) -> Result<()> {
        for f in files {
            self.path.append_value(&f.path);
            self.rows.append_value(int64(f.total_rows, "rows")?);
            self.bytes.append_value(int64(f.size_bytes, "bytes")?);
            self.row_groups
                .append_value(int64(f.row_group_count, "row groups")?);
            self.sha256.append_value(&f.sha256);
            let bound = |pick: fn(&super::snapshot::ColumnStats) -> &Option<serde_json::Value>| {
                let values: BTreeMap<&str, &serde_json::Value> = f
                    .columns
                    .iter()
                    .filter_map(|(name, c)| pick(c).as_ref().map(|v| (name.as_str(), v)))
                    .collect();
                serde_json::to_string(&values)
                    .map_err(|e| Error::Task(format!("statistics are not serialisable: {e}")))
            };
            self.min.append_value(bound(|c| &c.min)?);
            self.max.append_value(bound(|c| &c.max)?);
        }
        Ok(())
    }
}

/// Add `more` (a segment's tombstone references, or a root's) to `refs`,
/// each tombstone once with the files of every segment that names it; a
/// tombstone listed with different SHA-256s is refused (the reason).
fn merge(
    refs: &mut BTreeMap<String, TombstoneRef>,
    more: &[TombstoneRef],
) -> std::result::Result<(), String> {
    for t in more {
        match refs.get_mut(&t.path) {
            Some(r) if r.sha256 != t.sha256 => {
                return Err(format!(
                    "segments list tombstone {:?} with different SHA-256s",
                    t.path
                ))
            }
            Some(r) => r.files.extend(t.files.iter().cloned()),
            None => {
                refs.insert(t.path.clone(), t.clone());
            }
        }
    }
    Ok(())
}

/// The data files of `version` of `table` (see [`schema`]), in the order
/// of its manifest.
///
/// Cost: the root (1 GET, none if cached), every segment (a GET each not
/// cached, 16 at a time, parsed one at a time and then cached), the
/// tombstones, and a footer GET per file with whole-row-group deletes.
pub async fn files(store: &StoreHandle, table: &str, version: u64) -> Result<RecordBatch> {
    let m: TableManifest = read_version_at(store, table, version, Depth::Root).await?;
    let corrupted = |reason: String| Error::ManifestCorrupted {
        path: super::manifest_key(table, m.version),
        reason,
    };
    let mut columns = Columns::default();
    let mut refs = BTreeMap::new();
    // What loading the whole list checks across segments: each file listed
    // once, each tombstone with one SHA-256 and naming files listed.
    let mut seen: HashSet<String> = HashSet::new();
    let mut failed = None;
    let mut add = |files: &[DataFile], tombstones: &[TombstoneRef]| -> Result<()> {
        if let Some(f) = files.iter().find(|f| !seen.insert(f.path.clone())) {
            return Err(corrupted(format!("data file {:?} is listed twice", f.path)));
        }
        columns.add(files)?;
        merge(&mut refs, tombstones).map_err(corrupted)
    };
    // A whole list in the root (the first format's), then the segments.
    add(&m.data_files, &m.tombstones)?;
    let all: Vec<usize> = (0..m.segments.len()).collect();
    // Kept in the process's segment cache, as any read's: the operations
    // after it read only the root.
    super::segment::visit(store, table, &m, &all, true, |_, s| {
        if failed.is_none() {
            failed = add(&s.files, &s.tombstones).err();
        }
    })
    .await?;
    if let Some(e) = failed {
        return Err(e);
    }
    if let Some((t, f)) = refs
        .values()
        .flat_map(|t| t.files.iter().map(move |f| (t, f)))
        .find(|(_, f)| !seen.contains(*f))
    {
        return Err(corrupted(format!(
            "tombstone {:?} names {f:?}, which is not a data file of this version",
            t.path
        )));
    }
    drop(seen);
    let refs: Vec<TombstoneRef> = refs.into_values().collect();
    let tombstones = super::tombstone::load_scoped(store, table, m.version, &refs, None).await?;
    let deletes = super::tombstone::fold(&tombstones)?;
    let paths = columns.path.finish();
    let mut deleted = Int64Builder::with_capacity(paths.len());
    for path in paths.iter().flatten() {
        match deletes.get(path) {
            None => deleted.append_value(0),
            Some(d) => match super::scan::known_deleted(store, table, path, d).await? {
                Some(n) => deleted.append_value(int64(n, "deleted rows")?),
                None => deleted.append_null(),
            },
        }
    }
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(paths),
        Arc::new(columns.rows.finish()),
        Arc::new(deleted.finish()),
        Arc::new(columns.bytes.finish()),
        Arc::new(columns.row_groups.finish()),
        Arc::new(columns.sha256.finish()),
        Arc::new(columns.min.finish()),
        Arc::new(columns.max.finish()),
    ];
    Ok(RecordBatch::try_new(schema(), arrays)?)
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    use super::*;
    use crate::parquet::filter::predicate;
    use crate::table::delete::delete;
    use crate::table::tests::{cond, counting_store, create_and_append_steps, int};

    fn block<T>(f: impl std::future::Future<Output = crate::error::Result<T>>) -> T {
        crate::runtime::block_on(f).unwrap().unwrap()
    }

    #[test]
    fn the_file_list_reads_like_the_whole_manifest_in_its_order() {
        let (store, _) = counting_store();
        // Segments of 32 files, a tombstone naming files of two of them.
        create_and_append_steps(&store, 70);
        let pred = predicate(vec![cond("id", ">=", int(95)), cond("id", "<", int(130))]).unwrap();
        assert!(delete(store.clone(), "t", pred, 2).unwrap().committed);
        let pred = predicate(vec![cond("id", "==", int(3))]).unwrap();
        assert!(delete(store.clone(), "t", pred, 2).unwrap().committed);
        let version = 72;
        let full: TableManifest = block(read_version_at(&store, "t", version, Depth::Full));
        assert!(full.segments.len() >= 2);
        let want = block(super::super::scan::deleted_rows(&store, "t", &full));
        let got = block(files(&store, "t", version));
        assert_eq!(got.schema(), schema());
        let paths: Vec<&str> = got.column(0).as_string::<i32>().iter().flatten().collect();
        let listed: Vec<&str> = full.data_files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, listed);
        let rows = got.column(1).as_primitive::<Int64Type>();
        let deleted = got.column(2).as_primitive::<Int64Type>();
        for (i, f) in full.data_files.iter().enumerate() {
            assert_eq!(rows.value(i) as u64, f.total_rows);
            let known = want[&f.path].map(|n| n as i64);
            assert_eq!(
                deleted.is_valid(i).then(|| deleted.value(i)),
                known,
                "{}",
                f.path
            );
        }
        assert!(deleted.iter().flatten().sum::<i64>() > 0 || deleted.null_count() > 0);
        let min = got.column(6).as_string::<i32>().value(0);
        let parsed: serde_json::Value = serde_json::from_str(min).unwrap();
        assert_eq!(parsed["id"], serde_json::json!(0));
        assert_eq!(parsed["customer"], serde_json::json!("c0"));
    }
}
