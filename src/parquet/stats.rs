//! Per-file column statistics: the min, max and null count of each top-level
//! column, folded from the row groups' Parquet statistics into JSON values
//! (so that a manifest can carry them), and back into Arrow arrays of the
//! column's type (so that a reader can prune whole files with them).
//!
//! Values are JSON numbers for integers and floats, strings for text, booleans
//! for booleans, and the stored integer for dates, times, timestamps and
//! durations (days, or the type's unit since the epoch). Other types get no
//! min/max. A bound that is unknown for any row group is unknown for the file.
//! A value is only meaningful with its type (a `date32` day count is not a
//! `date64` millisecond count): read it back under the type the file was
//! written with. Floats must parse back bit for bit, which serde_json does
//! with its `float_roundtrip` feature (on in Cargo.toml).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray, UInt64Array,
};
use arrow_schema::{DataType, Schema, SortOptions};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::file::metadata::RowGroupMetaData;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Statistics of one column over a whole file (`None` when unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ColumnStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_count: Option<u64>,
}

/// How a column's values are written as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Signed,
    Unsigned,
    Float,
    Text,
    /// A 32-bit temporal type, stored as its integer.
    Int32Like,
    /// A 64-bit temporal type, stored as its integer.
    Int64Like,
}

fn kind(t: &DataType) -> Option<Kind> {
    use DataType::*;
    Some(match t {
        Boolean => Kind::Bool,
        Int8 | Int16 | Int32 | Int64 => Kind::Signed,
        UInt8 | UInt16 | UInt32 | UInt64 => Kind::Unsigned,
        Float16 | Float32 | Float64 => Kind::Float,
        Utf8 | LargeUtf8 | Utf8View => Kind::Text,
        Date32 | Time32(_) => Kind::Int32Like,
        Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => Kind::Int64Like,
        Dictionary(_, v) => return kind(v),
        _ => return None,
    })
}

/// The value of `array[i]` as JSON; `None` if it is null, not finite, or of
/// a type without JSON statistics.
pub fn to_json(array: &dyn Array, i: usize) -> Option<Value> {
    if i >= array.len() || array.is_null(i) {
        return None;
    }
    let one = arrow_array::make_array(array.to_data().slice(i, 1));
    let cast = |t: &DataType| arrow_cast::cast(&one, t).ok();
    Some(match kind(array.data_type())? {
        Kind::Bool => Value::Bool(cast(&DataType::Boolean)?.as_boolean().value(0)),
        Kind::Signed => Value::from(cast(&DataType::Int64)?.as_primitive::<Int64Type>().value(0)),
        Kind::Unsigned => Value::from(
            cast(&DataType::UInt64)?
                .as_primitive::<UInt64Type>()
                .value(0),
        ),
        Kind::Float => {
            let v = cast(&DataType::Float64)?
                .as_primitive::<Float64Type>()
                .value(0);
            Value::Number(serde_json::Number::from_f64(v)?)
        }
        Kind::Text => Value::String(cast(&DataType::Utf8)?.as_string::<i32>().value(0).into()),
        Kind::Int32Like => {
            let base = match array.data_type() {
                DataType::Dictionary(_, v) => arrow_cast::cast(&one, v).ok()?,
                _ => one.clone(),
            };
            let raw = arrow_cast::cast(&base, &DataType::Int32).ok()?;
            Value::from(raw.as_primitive::<Int32Type>().value(0))
        }
        Kind::Int64Like => {
            let base = match array.data_type() {
                DataType::Dictionary(_, v) => arrow_cast::cast(&one, v).ok()?,
                _ => one.clone(),
            };
            let raw = arrow_cast::cast(&base, &DataType::Int64).ok()?;
            Value::from(raw.as_primitive::<Int64Type>().value(0))
        }
    })
}

/// An array of `data_type` (a dictionary's value type for dictionaries) with
/// one element per JSON value; `None` values, and values of the wrong JSON
/// kind, become nulls. `None` for a type without JSON statistics.
pub fn from_json(values: &[Option<&Value>], data_type: &DataType) -> Option<ArrayRef> {
    let target = match data_type {
        DataType::Dictionary(_, v) => v.as_ref(),
        t => t,
    };
    let array: ArrayRef = match kind(target)? {
        Kind::Bool => Arc::new(BooleanArray::from(
            values
                .iter()
                .map(|v| v.and_then(Value::as_bool))
                .collect::<Vec<_>>(),
        )),
        Kind::Signed | Kind::Int64Like => Arc::new(Int64Array::from(
            values
                .iter()
                .map(|v| v.and_then(Value::as_i64))
                .collect::<Vec<_>>(),
        )),
        Kind::Unsigned => Arc::new(UInt64Array::from(
            values
                .iter()
                .map(|v| v.and_then(Value::as_u64))
                .collect::<Vec<_>>(),
        )),
        Kind::Float => Arc::new(Float64Array::from(
            values
                .iter()
                .map(|v| v.and_then(Value::as_f64))
                .collect::<Vec<_>>(),
        )),
        Kind::Text => Arc::new(StringArray::from(
            values
                .iter()
                .map(|v| v.and_then(Value::as_str))
                .collect::<Vec<_>>(),
        )),
        Kind::Int32Like => Arc::new(Int32Array::from(
            values
                .iter()
                .map(|v| {
                    v.and_then(Value::as_i64)
                        .and_then(|i| i32::try_from(i).ok())
                })
                .collect::<Vec<_>>(),
        )),
    };
    // A lossy cast (an integer beyond the column's range, say) cannot come
    // from a value pds wrote: treat it as unknown rather than fail.
    let opts = arrow_cast::CastOptions {
        safe: true,
        ..Default::default()
    };
    arrow_cast::cast_with_options(&array, target, &opts).ok()
}

/// Index of the least (or greatest) element; `None` if any is null.
fn extreme(array: &ArrayRef, least: bool) -> Option<usize> {
    if array.is_empty() || array.null_count() > 0 {
        return None;
    }
    let cmp =
        arrow_ord::ord::make_comparator(array.as_ref(), array.as_ref(), SortOptions::default())
            .ok()?;
    let mut best = 0;
    for i in 1..array.len() {
        let o = cmp(i, best);
        if (least && o.is_lt()) || (!least && o.is_gt()) {
            best = i;
        }
    }
    Some(best)
}

/// Statistics over several files from each file's: the least min, the
/// greatest max (compared as values of `data_type`) and the summed null
/// counts. A bound or count unknown for any file (`None`) is unknown.
pub fn merge(parts: &[Option<&ColumnStats>], data_type: &DataType) -> ColumnStats {
    let bound = |least: bool| -> Option<Value> {
        let values: Vec<Option<&Value>> = parts
            .iter()
            .map(|p| {
                p.and_then(|s| {
                    if least {
                        s.min.as_ref()
                    } else {
                        s.max.as_ref()
                    }
                })
            })
            .collect();
        if values.iter().any(Option::is_none) {
            return None;
        }
        let array = from_json(&values, data_type)?;
        values[extreme(&array, least)?].cloned()
    };
    let null_count = parts.iter().try_fold(0u64, |acc, p| {
        p.and_then(|s| s.null_count)
            .and_then(|n| acc.checked_add(n))
    });
    ColumnStats {
        min: bound(true),
        max: bound(false),
        null_count,
    }
}

/// Statistics of every top-level column of a file, from its row groups'
/// metadata. `schema` is the Arrow schema the file was written with.
pub fn file_stats(
    row_groups: &[RowGroupMetaData],
    schema: &Schema,
) -> BTreeMap<String, ColumnStats> {
    let mut out = BTreeMap::new();
    let Some(first) = row_groups.first() else {
        return out;
    };
    let descr = first.schema_descr();
    for field in schema.fields() {
        let Ok(conv) = StatisticsConverter::try_new(field.name(), schema, descr) else {
            continue;
        };
        let null_count = conv
            .row_group_null_counts(row_groups.iter())
            .ok()
            .and_then(|n| (n.null_count() == 0).then(|| n.values().iter().copied().sum::<u64>()));
        let bound = |least: bool| {
            let arr = if least {
                conv.row_group_mins(row_groups.iter())
            } else {
                conv.row_group_maxes(row_groups.iter())
            }
            .ok()?;
            to_json(arr.as_ref(), extreme(&arr, least)?)
        };
        let stats = ColumnStats {
            min: bound(true),
            max: bound(false),
            null_count,
        };
        if stats != ColumnStats::default() {
            out.insert(field.name().clone(), stats);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
    use arrow_array::{RecordBatch, TimestampMicrosecondArray};
    use arrow_schema::{Field, TimeUnit};
    use parquet::arrow::arrow_reader::ArrowReaderMetadata;

    #[test]
    fn folds_row_groups_and_round_trips_through_json() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("f", DataType::Float64, false),
            Field::new("s", DataType::Utf8, false),
            Field::new(
                "t",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![Some(5), None, Some(-3), Some(9)])),
                Arc::new(Float64Array::from(vec![0.5, -1.5, 2.0, 1.0])),
                Arc::new(StringArray::from(vec!["m", "b", "z", "c"])),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![10, 40, 20, 30]).with_timezone("UTC"),
                ),
            ],
        )
        .unwrap();
        let (bytes, _) = encode_to_bytes(
            &[batch],
            schema.clone(),
            &EncodeOptions::new("zstd", Some(2), None).unwrap(),
        )
        .unwrap();
        let meta = ArrowReaderMetadata::load(&bytes, Default::default()).unwrap();
        let stats = file_stats(meta.metadata().row_groups(), &schema);
        assert_eq!(stats["i"].min, Some(Value::from(-3)));
        assert_eq!(stats["i"].max, Some(Value::from(9)));
        assert_eq!(stats["i"].null_count, Some(1));
        assert_eq!(stats["f"].min, Some(Value::from(-1.5)));
        assert_eq!(stats["s"].max, Some(Value::from("z")));
        assert_eq!(stats["t"].max, Some(Value::from(40)));
        let back = from_json(
            &[stats["t"].min.as_ref(), None],
            schema.field(3).data_type(),
        )
        .unwrap();
        assert_eq!(back.data_type(), schema.field(3).data_type());
        assert_eq!(to_json(back.as_ref(), 0), Some(Value::from(10)));
        assert!(back.is_null(1));
        // Wrong JSON kinds and out-of-range integers become unknown, not errors.
        let odd = from_json(
            &[Some(&Value::from("x")), Some(&Value::from(1_i64 << 40))],
            &DataType::Int32,
        )
        .unwrap();
        assert_eq!(odd.null_count(), 2);
        assert!(from_json(&[None], &DataType::Binary).is_none());
    }

    /// Manifests are parsed and written again by every commit: a float
    /// bound must come back bit for bit (serde_json's float_roundtrip), or
    /// it drifts a step and prunes or deletes the wrong rows.
    #[test]
    fn float_bounds_survive_json_round_trips_exactly() {
        let values = [
            f64::from(3.0e38_f32),
            f64::from(0.001_f32),
            0.1,
            1e300,
            -2.2250738585072014e-308,
            5e-324,
            f64::from(f32::MAX),
        ];
        for v in values {
            let mut s = ColumnStats {
                min: Some(Value::Number(serde_json::Number::from_f64(v).unwrap())),
                ..Default::default()
            };
            for _ in 0..5 {
                let text = serde_json::to_string(&s).unwrap();
                s = serde_json::from_str(&text).unwrap();
            }
            let back = s.min.as_ref().and_then(Value::as_f64).unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{v:e}");
        }
    }
}
