//! Which Arrow types pds can store in Parquet, and the storage type of each.
//!
//! Two rules, applied to every write before any I/O:
//!
//! - **Refused up front** (`UnsupportedType`, a `TypeError` in Python): types
//!   the Parquet encoder cannot write, or cannot write so that they read back
//!   as the same type (unions, run-end encoding, list views, structs without
//!   fields). Nothing is written for them.
//! - **Stored as another type** and cast back on read: dictionaries of view
//!   types (`dictionary<_, string_view>`, what polars exports for Categorical
//!   and Enum) are encoded as dictionaries of `string` / `binary`. The
//!   manifest records the caller's type, and the reader casts back to it, so
//!   the round trip is exact.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, FieldRef, Fields, Schema, SchemaRef};
use parquet::arrow::ArrowSchemaConverter;

use crate::error::{Error, Result};

/// Fail with `UnsupportedType`, naming the column, if any field of `schema`
/// holds a type pds cannot store exactly.
pub fn check_writable(schema: &Schema) -> Result<()> {
    if schema.fields().is_empty() {
        return Err(Error::UnsupportedType {
            column: String::new(),
            reason: "the data has no columns; a Parquet dataset needs at least one".into(),
        });
    }
    for field in schema.fields() {
        check_type(field.name(), field.data_type())?;
    }
    // Whatever else the Parquet schema converter refuses (e.g. a new type).
    ArrowSchemaConverter::new()
        .convert(&storage_schema(schema))
        .map_err(|e| Error::UnsupportedType {
            column: String::new(),
            reason: e.to_string(),
        })?;
    Ok(())
}

fn check_type(column: &str, t: &DataType) -> Result<()> {
    let refuse = |reason: &str| {
        Err(Error::UnsupportedType {
            column: column.to_string(),
            reason: format!("{t} {reason}"),
        })
    };
    match t {
        DataType::Union(..) => refuse("is a union; Parquet has no union type"),
        DataType::RunEndEncoded(..) => refuse(
            "is run-end encoded; Parquet would store and return the plain values \
             (cast the column to its value type first)",
        ),
        DataType::ListView(_) | DataType::LargeListView(_) => {
            refuse("is a list view; cast it to a list first")
        }
        DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano) => {
            refuse("cannot be stored in Parquet (cast it to a duration or a struct)")
        }
        DataType::Struct(fields) if fields.is_empty() => {
            refuse("is a struct without fields; Parquet cannot store an empty group")
        }
        DataType::Struct(fields) => fields
            .iter()
            .try_for_each(|f| check_type(&format!("{column}.{}", f.name()), f.data_type())),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => check_type(column, f.data_type()),
        DataType::Dictionary(_, values) => check_type(column, values),
        _ => Ok(()),
    }
}

/// Fail with `InvalidArgument` if `schema` (read from a store, so
/// untrusted) holds a type no writer could have produced: a decimal
/// precision out of range, a negative fixed size, a non-integer dictionary key.
pub fn check_readable(schema: &Schema) -> Result<()> {
    fn walk(t: &DataType) -> std::result::Result<(), String> {
        use DataType as T;
        match t {
            T::Decimal32(p, s) | T::Decimal64(p, s) | T::Decimal128(p, s) | T::Decimal256(p, s) => {
                let max = match t {
                    T::Decimal32(..) => 9,
                    T::Decimal64(..) => 18,
                    T::Decimal128(..) => 38,
                    _ => 76,
                };
                if *p == 0 || *p > max || i16::from(*s) > i16::from(*p) {
                    return Err(format!("{t} has an invalid precision or scale"));
                }
                Ok(())
            }
            T::FixedSizeBinary(n) | T::FixedSizeList(_, n) if *n < 0 => {
                Err(format!("{t} has a negative size"))
            }
            T::Dictionary(k, v) => {
                if !k.is_dictionary_key_type() {
                    return Err(format!("{t} has a non-integer key"));
                }
                walk(v)
            }
            T::List(f) | T::LargeList(f) | T::FixedSizeList(f, _) | T::Map(f, _) => {
                walk(f.data_type())
            }
            T::ListView(f) | T::LargeListView(f) => walk(f.data_type()),
            T::Struct(fields) => fields.iter().try_for_each(|f| walk(f.data_type())),
            T::RunEndEncoded(r, v) => {
                walk(r.data_type())?;
                walk(v.data_type())
            }
            T::Union(fields, _) => fields.iter().try_for_each(|(_, f)| walk(f.data_type())),
            _ => Ok(()),
        }
    }
    if let Some(k) = nul_entry(schema.metadata()) {
        return Err(Error::InvalidArgument(format!(
            "schema metadata entry {k:?} holds a NUL character"
        )));
    }
    for f in schema.fields() {
        walk(f.data_type())
            .and_then(|()| names(f))
            .map_err(|e| Error::InvalidArgument(format!("column {:?}: {e}", f.name())))?;
    }
    Ok(())
}

/// A metadata key whose key or value holds a NUL character.
fn nul_entry(metadata: &std::collections::HashMap<String, String>) -> Option<&String> {
    metadata
        .iter()
        .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        .map(|(k, _)| k)
}

/// Field names, metadata and time zones, nested ones included, must be C
/// strings: Arrow's C Data Interface (how schemas cross into Python) cannot
/// carry a NUL.
fn names(field: &arrow_schema::Field) -> std::result::Result<(), String> {
    if field.name().contains('\0') {
        return Err(format!(
            "the field name {:?} holds a NUL character",
            field.name()
        ));
    }
    if let Some(k) = nul_entry(field.metadata()) {
        return Err(format!("field metadata entry {k:?} holds a NUL character"));
    }
    use DataType as T;
    match field.data_type() {
        T::Timestamp(_, Some(tz)) if tz.contains('\0') => {
            Err(format!("the time zone {tz:?} holds a NUL character"))
        }
        T::Struct(fields) => fields.iter().try_for_each(|f| names(f)),
        T::List(f)
        | T::LargeList(f)
        | T::FixedSizeList(f, _)
        | T::Map(f, _)
        | T::ListView(f)
        | T::LargeListView(f) => names(f),
        T::RunEndEncoded(r, v) => names(r).and_then(|()| names(v)),
        T::Union(fields, _) => fields.iter().try_for_each(|(_, f)| names(f)),
        _ => Ok(()),
    }
}

/// The type a column of type `t` is encoded as.
pub fn storage_type(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(k, v) => {
            let v = match v.as_ref() {
                DataType::Utf8View => DataType::Utf8,
                DataType::BinaryView => DataType::Binary,
                other => storage_type(other),
            };
            DataType::Dictionary(k.clone(), Box::new(v))
        }
        DataType::List(f) => DataType::List(storage_field(f)),
        DataType::LargeList(f) => DataType::LargeList(storage_field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(storage_field(f), *n),
        DataType::Map(f, sorted) => DataType::Map(storage_field(f), *sorted),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(storage_field).collect()),
        other => other.clone(),
    }
}

fn storage_field(f: &FieldRef) -> FieldRef {
    let t = storage_type(f.data_type());
    if &t == f.data_type() {
        f.clone()
    } else {
        Arc::new(f.as_ref().clone().with_data_type(t))
    }
}

/// The schema parts are encoded with (see [`storage_type`]).
pub fn storage_schema(schema: &Schema) -> Schema {
    let fields: Fields = schema.fields().iter().map(storage_field).collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// Whether any column is stored as another type.
pub fn needs_storage_cast(schema: &Schema) -> bool {
    schema
        .fields()
        .iter()
        .any(|f| &storage_type(f.data_type()) != f.data_type())
}

/// Cast `batch` to `storage` (a [`storage_schema`]); columns already of their
/// storage type are passed through without a copy.
pub fn to_storage(batch: &RecordBatch, storage: &SchemaRef) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(storage.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                arrow_cast::cast(c, f.data_type()).map_err(Error::from)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new_with_options(
        storage.clone(),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{Field, UnionFields, UnionMode};

    #[test]
    fn refuses_what_parquet_cannot_hold_and_names_the_column() {
        let union = DataType::Union(
            UnionFields::try_new(vec![0], vec![Field::new("a", DataType::Int32, true)]).unwrap(),
            UnionMode::Dense,
        );
        let nested = DataType::Struct(vec![Field::new("u", union.clone(), true)].into());
        for (name, t) in [("top", union), ("outer", nested)] {
            let schema = Schema::new(vec![Field::new(name, t, true)]);
            let err = check_writable(&schema).unwrap_err();
            assert!(
                matches!(&err, Error::UnsupportedType { column, .. } if column.starts_with(name)),
                "{err}"
            );
        }
        assert!(check_writable(&Schema::empty()).is_err());
        let ok = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        check_writable(&ok).unwrap();
    }

    #[test]
    fn view_dictionaries_are_stored_as_plain_dictionaries() {
        let t = DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8View));
        let schema = Schema::new(vec![Field::new("c", t, true)]);
        check_writable(&schema).unwrap();
        let stored = storage_schema(&schema);
        assert_eq!(
            stored.field(0).data_type(),
            &DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
        );
        assert!(needs_storage_cast(&schema));
    }
}
