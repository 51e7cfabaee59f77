//! A table's Arrow schema as a Delta schema (the `schemaString` of a
//! `metaData` action): each column's exact Delta type, or
//! `UnsupportedType` naming the column. A column is never dropped or
//! changed to fit.
//!
//! Exact means a Delta reader reads the Parquet column pds wrote as the
//! same values: 64-bit timestamps in microseconds (with a time zone:
//! `timestamp`; without: `timestamp_ntz`, which needs the `timestampNtz`
//! table feature), signed integers, decimals up to 38 digits. Unsigned
//! integers, other timestamp units, times, durations and intervals have no
//! Delta type.

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// The Delta schema of `schema` (a `struct` type), and whether it needs the
/// `timestampNtz` table feature.
pub fn delta_schema(schema: &Schema) -> Result<(Value, bool)> {
    let mut ntz = false;
    let fields = schema
        .fields()
        .iter()
        .map(|f| field(f, f.name(), &mut ntz))
        .collect::<Result<Vec<_>>>()?;
    Ok((json!({"type": "struct", "fields": fields}), ntz))
}

fn field(f: &Field, path: &str, ntz: &mut bool) -> Result<Value> {
    Ok(json!({
        "name": f.name(),
        "type": delta_type(f.data_type(), path, ntz)?,
        "nullable": f.is_nullable(),
        "metadata": {},
    }))
}

/// The Delta type of a column (`path` names it in errors).
fn delta_type(t: &DataType, path: &str, ntz: &mut bool) -> Result<Value> {
    let refuse = |why: &str| Error::UnsupportedType {
        column: path.to_string(),
        reason: format!("{t} has no exact Delta Lake type ({why})"),
    };
    Ok(match t {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 => json!("byte"),
        DataType::Int16 => json!("short"),
        DataType::Int32 => json!("integer"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => json!("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => json!("binary"),
        DataType::Date32 => json!("date"),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => json!("timestamp"),
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            *ntz = true;
            json!("timestamp_ntz")
        }
        DataType::Timestamp(_, _) => return Err(refuse("Delta timestamps are in microseconds")),
        DataType::Decimal128(p, s) if *p <= 38 && *s >= 0 => json!(format!("decimal({p},{s})")),
        DataType::Decimal128(..) | DataType::Decimal256(..) => {
            return Err(refuse(
                "Delta decimals hold 1 to 38 digits, scale 0 or more",
            ))
        }
        DataType::Dictionary(_, values) => delta_type(values, path, ntz)?,
        DataType::List(item) | DataType::LargeList(item) | DataType::ListView(item) => json!({
            "type": "array",
            "elementType": delta_type(item.data_type(), &format!("{path}.element"), ntz)?,
            "containsNull": item.is_nullable(),
        }),
        DataType::Struct(fields) => json!({
            "type": "struct",
            "fields": fields
                .iter()
                .map(|f| field(f, &format!("{path}.{}", f.name()), ntz))
                .collect::<Result<Vec<_>>>()?,
        }),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(refuse("a map's entries are not a struct"));
            };
            let [k, v] = kv.iter().collect::<Vec<_>>()[..] else {
                return Err(refuse("a map's entries are not a key and a value"));
            };
            json!({
                "type": "map",
                "keyType": delta_type(k.data_type(), &format!("{path}.key"), ntz)?,
                "valueType": delta_type(v.data_type(), &format!("{path}.value"), ntz)?,
                "valueContainsNull": v.is_nullable(),
            })
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            return Err(refuse("Delta integers are signed"))
        }
        _ => return Err(refuse("no Delta type holds its values")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_arrow_type_maps_to_its_exact_delta_type() {
        let utc = Some("UTC".into());
        let item = Arc::new(Field::new("item", DataType::Int32, false));
        let schema = Schema::new(vec![
            Field::new("b", DataType::Boolean, true),
            Field::new("i8", DataType::Int8, false),
            Field::new("i64", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8View, true),
            Field::new("d", DataType::Date32, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, utc), true),
            Field::new("dec", DataType::Decimal128(38, 4), true),
            Field::new("l", DataType::List(item.clone()), true),
            Field::new_struct("st", vec![Field::new("x", DataType::Binary, true)], true),
            Field::new_map(
                "m",
                "entries",
                Field::new("k", DataType::Utf8, false),
                Field::new("v", DataType::Int16, true),
                false,
                true,
            ),
            Field::new_dictionary("dict", DataType::Int32, DataType::Utf8, true),
        ]);
        let (v, ntz) = delta_schema(&schema).unwrap();
        assert!(!ntz);
        let types: Vec<&Value> = v["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| &f["type"])
            .collect();
        assert_eq!(types[0], "boolean");
        assert_eq!(types[1], "byte");
        assert_eq!(types[2], "long");
        assert_eq!(types[3], "double");
        assert_eq!(types[4], "string");
        assert_eq!(types[5], "date");
        assert_eq!(types[6], "timestamp");
        assert_eq!(types[7], "decimal(38,4)");
        assert_eq!(
            types[8],
            &json!({"type": "array", "elementType": "integer", "containsNull": false})
        );
        assert_eq!(types[9]["fields"][0]["type"], "binary");
        assert_eq!(
            types[10],
            &json!({"type": "map", "keyType": "string", "valueType": "short", "valueContainsNull": true})
        );
        assert_eq!(types[11], "string");
        assert_eq!(v["fields"][1]["nullable"], false);
        let (_, ntz) = delta_schema(&Schema::new(vec![Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]))
        .unwrap();
        assert!(ntz);
    }

    #[test]
    fn a_column_with_no_exact_delta_type_is_refused_by_name() {
        let cases = [
            ("u", DataType::UInt32),
            ("ns", DataType::Timestamp(TimeUnit::Nanosecond, None)),
            (
                "ms",
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            ),
            ("t", DataType::Time64(TimeUnit::Microsecond)),
            ("big", DataType::Decimal256(40, 2)),
            ("dur", DataType::Duration(TimeUnit::Second)),
            ("h", DataType::Float16),
        ];
        for (name, t) in cases {
            let err = delta_schema(&Schema::new(vec![Field::new(name, t, true)])).unwrap_err();
            assert!(
                matches!(&err, Error::UnsupportedType { column, .. } if column == name),
                "{err}"
            );
        }
        let nested = Schema::new(vec![Field::new_struct(
            "outer",
            vec![Field::new("inner", DataType::UInt8, true)],
            true,
        )]);
        let err = delta_schema(&nested).unwrap_err();
        assert!(
            matches!(&err, Error::UnsupportedType { column, .. } if column == "outer.inner"),
            "{err}"
        );
    }
}
