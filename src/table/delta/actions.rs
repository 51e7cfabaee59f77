//! The actions of a Delta log entry (`_delta_log/<version:020>.json`: one
//! JSON object per line) as pds writes them, and the `stats` of an `add`.
//!
//! Every field is a function of pds's manifests (times from their
//! `created_at`), and serde writes the fields in declaration order, so an
//! entry's bytes are the same whichever process writes it.
//!
//! Statistics: `numRecords` is the file's physical row count (deleted rows
//! included, as Delta counts them); `minValues`/`maxValues` are written for
//! integers, floats, strings, dates (`YYYY-MM-DD`) and timestamps (ISO 8601
//! in milliseconds, the minimum rounded down and the maximum up, so that the
//! bounds still hold every value); other types have none (a reader then
//! reads the file). `nullCount` is written wherever pds knows it.
//! `tightBounds` is false once a deletion vector removes rows: the bounds
//! may then be wider than the live rows.

use arrow_schema::{DataType, Schema, TimeUnit};
use chrono::{DateTime, NaiveDate};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::table::delta::deletion_vector::Descriptor;
use crate::table::snapshot::DataFile;

/// One line of a Delta log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    CommitInfo(CommitInfo),
    Protocol(Protocol),
    MetaData(MetaData),
    Add(Add),
    Remove(Remove),
}

/// Who wrote the entry, and which pds version it mirrors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitInfo {
    /// The pds version's `created_at`, in milliseconds since the epoch.
    pub timestamp: i64,
    /// pds's operation (`append`, `delete`, ...).
    pub operation: String,
    pub engine_info: String,
    /// The pds version this entry mirrors (equal to the Delta version).
    pub pds_version: u64,
}

/// The reader and writer versions and features the table needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub min_reader_version: u32,
    pub min_writer_version: u32,
    pub reader_features: Vec<String>,
    pub writer_features: Vec<String>,
}

/// The table's id, schema and settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaData {
    pub id: String,
    pub format: Format,
    /// The Delta schema (see [`crate::table::delta::schema`]), as JSON text.
    pub schema_string: String,
    pub partition_columns: Vec<String>,
    pub configuration: std::collections::BTreeMap<String, String>,
    /// Left out: no time both versions of an entry know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_time: Option<i64>,
}

/// The data files' format: always Parquet, with no options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Format {
    pub provider: String,
    pub options: std::collections::BTreeMap<String, String>,
}

/// A data file the version holds (again, with a new deletion vector).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Add {
    /// Relative to the table (`data/...parquet`).
    pub path: String,
    pub partition_values: std::collections::BTreeMap<String, String>,
    pub size: u64,
    pub modification_time: i64,
    pub data_change: bool,
    /// [`stats`], as JSON text.
    pub stats: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_vector: Option<Descriptor>,
}

/// A data file (or its deletion vector) the version no longer holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remove {
    pub path: String,
    pub deletion_timestamp: i64,
    pub data_change: bool,
    pub extended_file_metadata: bool,
    pub partition_values: std::collections::BTreeMap<String, String>,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_vector: Option<Descriptor>,
}

/// The entry's bytes: each action as one line of JSON, each line ended by
/// a newline.
pub fn entry_bytes(actions: &[Action]) -> crate::error::Result<Vec<u8>> {
    let mut out = Vec::new();
    for a in actions {
        serde_json::to_writer(&mut out, a)
            .map_err(|e| crate::error::Error::Task(format!("a Delta action as JSON: {e}")))?;
        out.push(b'\n');
    }
    Ok(out)
}

/// The `add` of `file` (written with `file_schema`) at `time` (ms), with
/// its deletion vector if rows of it are deleted.
pub fn add(file: &DataFile, file_schema: &Schema, time: i64, dv: Option<Descriptor>) -> Add {
    Add {
        path: file.path.clone(),
        partition_values: Default::default(),
        size: file.size_bytes,
        modification_time: time,
        data_change: true,
        stats: stats(file, file_schema, dv.is_some()).to_string(),
        deletion_vector: dv,
    }
}

/// The `remove` of `file` at `time` (ms), naming the deletion vector it was
/// added with, if any.
pub fn remove(file: &DataFile, time: i64, dv: Option<Descriptor>) -> Remove {
    Remove {
        path: file.path.clone(),
        deletion_timestamp: time,
        data_change: true,
        extended_file_metadata: true,
        partition_values: Default::default(),
        size: file.size_bytes,
        deletion_vector: dv,
    }
}

/// A file's Delta statistics (see the module docs). `deleted`: a deletion
/// vector removes rows of it.
pub fn stats(file: &DataFile, file_schema: &Schema, deleted: bool) -> Value {
    let (mut mins, mut maxs, mut nulls) = (Map::new(), Map::new(), Map::new());
    for field in file_schema.fields() {
        let Some(s) = file.columns.get(field.name()) else {
            continue;
        };
        if let Some(n) = s.null_count {
            nulls.insert(field.name().clone(), Value::from(n));
        }
        let bound =
            |v: &Option<Value>, up: bool| v.as_ref().and_then(|v| bound(v, field.data_type(), up));
        if let (Some(lo), Some(hi)) = (bound(&s.min, false), bound(&s.max, true)) {
            mins.insert(field.name().clone(), lo);
            maxs.insert(field.name().clone(), hi);
        }
    }
    let mut out = Map::new();
    out.insert("numRecords".into(), Value::from(file.total_rows));
    out.insert("minValues".into(), Value::Object(mins));
    out.insert("maxValues".into(), Value::Object(maxs));
    out.insert("nullCount".into(), Value::Object(nulls));
    out.insert("tightBounds".into(), Value::Bool(!deleted));
    Value::Object(out)
}

/// A pds statistic (see [`crate::parquet::stats`]) as Delta writes it for
/// a column of type `t`; `up`: a maximum (rounded up where Delta's form
/// is coarser). `None`: no Delta bound for the type.
fn bound(v: &Value, t: &DataType, up: bool) -> Option<Value> {
    use DataType::*;
    match t {
        Int8 | Int16 | Int32 | Int64 => v.as_i64().map(Value::from),
        Float32 | Float64 => v
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        Utf8 | LargeUtf8 | Utf8View => v.as_str().map(|s| Value::String(s.into())),
        Date32 => {
            let days = v.as_i64()?;
            let date = NaiveDate::from_ymd_opt(1970, 1, 1)?
                .checked_add_signed(chrono::Duration::days(days))?;
            Some(Value::String(date.format("%Y-%m-%d").to_string()))
        }
        Timestamp(unit, _) => {
            let raw = v.as_i64()?;
            let per_ms: i64 = match unit {
                TimeUnit::Second => return millis(raw.checked_mul(1000)?),
                TimeUnit::Millisecond => 1,
                TimeUnit::Microsecond => 1_000,
                TimeUnit::Nanosecond => 1_000_000,
            };
            let ms = match up {
                false => raw.div_euclid(per_ms),
                true => raw.div_euclid(per_ms) + i64::from(raw.rem_euclid(per_ms) != 0),
            };
            millis(ms)
        }
        Dictionary(_, inner) => bound(v, inner, up),
        _ => None,
    }
}

/// `ms` since the epoch as Delta's timestamp statistic (`...T..:..:..SSSZ`).
fn millis(ms: i64) -> Option<Value> {
    let t = DateTime::from_timestamp_millis(ms)?;
    Some(Value::String(
        t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::stats::ColumnStats;
    use arrow_schema::Field;
    use serde_json::json;

    fn file(columns: &[(&str, Value, Value, u64)]) -> DataFile {
        let mut f: DataFile = serde_json::from_value(json!({
            "path": "data/part-x-00000.parquet", "size_bytes": 10, "row_group_count": 1,
            "total_rows": 5, "sha256": "00"
        }))
        .unwrap();
        for (name, lo, hi, nulls) in columns {
            f.columns.insert(
                name.to_string(),
                ColumnStats {
                    min: Some(lo.clone()),
                    max: Some(hi.clone()),
                    null_count: Some(*nulls),
                },
            );
        }
        f
    }

    #[test]
    fn stats_bound_every_value_in_deltas_forms() {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Date32, true),
            Field::new(
                "t",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("b", DataType::Binary, true),
        ]);
        let f = file(&[
            ("i", json!(-3), json!(9), 1),
            ("s", json!("a"), json!("z"), 0),
            ("d", json!(-1), json!(19_000), 0),
            // 1.000001 s and 2.000001 s: the minimum rounds down, the maximum up.
            ("t", json!(1_000_001), json!(2_000_001), 2),
            ("b", json!(1), json!(2), 0),
        ]);
        let s = stats(&f, &schema, false);
        assert_eq!(
            s,
            json!({
                "numRecords": 5,
                "minValues": {"i": -3, "s": "a", "d": "1969-12-31", "t": "1970-01-01T00:00:01.000Z"},
                "maxValues": {"i": 9, "s": "z", "d": "2022-01-08", "t": "1970-01-01T00:00:02.001Z"},
                "nullCount": {"i": 1, "s": 0, "d": 0, "t": 2, "b": 0},
                "tightBounds": true,
            })
        );
        assert_eq!(stats(&f, &schema, true)["tightBounds"], json!(false));
    }

    #[test]
    fn an_entry_is_one_line_per_action_in_a_fixed_field_order() {
        let schema = Schema::new(vec![Field::new("i", DataType::Int64, true)]);
        let f = file(&[("i", json!(1), json!(2), 0)]);
        let actions = vec![
            Action::Add(add(&f, &schema, 7, None)),
            Action::Remove(remove(&f, 8, None)),
        ];
        let bytes = entry_bytes(&actions).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with(r#"{"add":{"path":"data/part-x-00000.parquet","partitionValues":{},"size":10,"modificationTime":7,"dataChange":true,"stats":"#));
        assert!(text.ends_with("\n"));
        assert_eq!(entry_bytes(&actions).unwrap(), bytes);
        let back: Vec<Action> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, actions);
    }
}
