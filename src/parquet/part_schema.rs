//! A part's schema against its dataset's: checked before any of its data is
//! decoded, and enforced on every batch that comes out.
//!
//! A part is untrusted bytes: it can be valid Parquet with other columns,
//! other types or another order than the manifest records. Decoding it as if
//! it had the manifest's schema would hand callers another column's bits, or
//! memory that is not there. So every read names the schema it expects
//! (the manifest's, or the first part's when the manifest records none), and:
//!
//! - [`check`] compares the part's footer schema with it, column by column,
//!   and fails with `PartCorrupted`, naming the part, on any difference other
//!   than the storage substitutions of [`crate::parquet::storage_types`];
//! - [`conform`] gives each decoded batch exactly the expected (projected)
//!   schema: the caller's types, names and schema metadata.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::parquet::storage_types::storage_type;

fn mismatch(path: &str, reason: String) -> Error {
    Error::PartCorrupted {
        path: path.to_string(),
        reason: format!("its schema differs from the dataset's: {reason}"),
    }
}

/// Whether two types have the same shape: equal, up to the names and
/// metadata of list and map item fields (which Parquet writers name
/// differently). Struct children must match by name and order.
fn same_shape(e: &DataType, a: &DataType) -> bool {
    use DataType as T;
    match (e, a) {
        (T::Struct(ef), T::Struct(af)) => {
            ef.len() == af.len()
                && ef
                    .iter()
                    .zip(af.iter())
                    .all(|(x, y)| x.name() == y.name() && same_shape(x.data_type(), y.data_type()))
        }
        (T::List(x), T::List(y)) | (T::LargeList(x), T::LargeList(y)) => {
            same_shape(x.data_type(), y.data_type())
        }
        (T::FixedSizeList(x, n), T::FixedSizeList(y, m)) => {
            n == m && same_shape(x.data_type(), y.data_type())
        }
        (T::Map(x, s), T::Map(y, t)) => s == t && same_shape(x.data_type(), y.data_type()),
        (T::Dictionary(k, v), T::Dictionary(l, w)) => k == l && same_shape(v, w),
        _ => e == a,
    }
}

/// Whether a column decoded as `actual` can stand for `expected`.
fn compatible(expected: &DataType, actual: &DataType) -> bool {
    same_shape(expected, actual) || same_shape(&storage_type(expected), actual)
}

/// Fail with `PartCorrupted` unless the part's schema `actual` matches
/// `expected` column by column (names, order, types).
pub fn check(expected: &Schema, actual: &Schema, path: &str) -> Result<()> {
    let (e, a) = (expected.fields(), actual.fields());
    if e.len() != a.len() {
        return Err(mismatch(
            path,
            format!("the part has {} columns, the dataset {}", a.len(), e.len()),
        ));
    }
    for (i, (ef, af)) in e.iter().zip(a.iter()).enumerate() {
        if ef.name() != af.name() {
            return Err(mismatch(
                path,
                format!(
                    "column {i} is {:?} in the part, {:?} in the dataset",
                    af.name(),
                    ef.name()
                ),
            ));
        }
        if ef.is_nullable() != af.is_nullable() {
            let says = |f: &arrow_schema::Field| {
                if f.is_nullable() {
                    "nullable"
                } else {
                    "not null"
                }
            };
            return Err(mismatch(
                path,
                format!(
                    "column {:?} is {} in the part, {} in the dataset",
                    ef.name(),
                    says(af),
                    says(ef)
                ),
            ));
        }
        if !compatible(ef.data_type(), af.data_type()) {
            return Err(mismatch(
                path,
                format!(
                    "column {:?} is {} in the part, {} in the dataset",
                    ef.name(),
                    af.data_type(),
                    ef.data_type()
                ),
            ));
        }
    }
    Ok(())
}

/// `expected` projected to `indices` (the caller's column order), keeping its
/// schema-level metadata.
pub fn project(expected: &Schema, indices: Option<&[usize]>) -> Result<SchemaRef> {
    Ok(Arc::new(match indices {
        None => expected.clone(),
        Some(i) => expected.project(i)?,
    }))
}

/// Give `batch` (already projected, caller's order) exactly the schema
/// `target`: columns stored as another type are cast back, and the result is
/// validated (types, nullability) against `target`.
pub fn conform(batch: RecordBatch, target: &SchemaRef, path: &str) -> Result<RecordBatch> {
    if batch.schema_ref() == target {
        return Ok(batch);
    }
    if batch.num_columns() != target.fields().len() {
        return Err(mismatch(
            path,
            format!(
                "decoded {} columns, expected {}",
                batch.num_columns(),
                target.fields().len()
            ),
        ));
    }
    let rows = batch.num_rows();
    let columns = batch
        .columns()
        .iter()
        .zip(target.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else if compatible(f.data_type(), c.data_type()) {
                arrow_cast::cast(c, f.data_type()).map_err(|e| {
                    mismatch(
                        path,
                        format!(
                            "column {:?} cannot be read as {}: {e}",
                            f.name(),
                            f.data_type()
                        ),
                    )
                })
            } else {
                Err(mismatch(
                    path,
                    format!(
                        "column {:?} decoded as {}, expected {}",
                        f.name(),
                        c.data_type(),
                        f.data_type()
                    ),
                ))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new_with_options(
        target.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|e| mismatch(path, e.to_string()))
}

/// Whether every value of `from` is exactly a value of `to`, so that a
/// column written as `from` can be read as `to` (a table's older files after
/// `schema_mode="merge"` widened it) and compared in `to` with the same
/// result: the cast is exact, one-to-one and keeps the order.
pub fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    matches!(
        (from, to),
        (Int8, Int16 | Int32 | Int64 | Float32 | Float64)
            | (Int16, Int32 | Int64 | Float32 | Float64)
            | (Int32, Int64 | Float64)
            | (
                UInt8,
                UInt16 | UInt32 | UInt64 | Int16 | Int32 | Int64 | Float32 | Float64
            )
            | (UInt16, UInt32 | UInt64 | Int32 | Int64 | Float32 | Float64)
            | (UInt32, UInt64 | Int64 | Float64)
            | (Float16, Float32 | Float64)
            | (Float32, Float64)
            | (Utf8, LargeUtf8)
            | (Binary, LargeBinary)
            | (Date32, Date64)
    )
}

/// Give `batch` the schema `target` by column name: a column it lacks
/// becomes nulls, a column of a narrower type is cast (losslessly: a value
/// that does not fit fails), and columns `target` lacks are dropped. Used for
/// a table's older files after its schema evolved, and for input batches of
/// an append. Nullability is enforced: nulls in a not-null column fail.
pub fn evolve(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema_ref() == target {
        return Ok(batch.clone());
    }
    let rows = batch.num_rows();
    let opts = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = target
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            None => Ok(arrow_array::new_null_array(f.data_type(), rows)),
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => arrow_cast::cast_with_options(c, f.data_type(), &opts).map_err(|e| {
                Error::Arrow(arrow_schema::ArrowError::CastError(format!(
                    "column {:?} ({}) cannot become {}: {e}",
                    f.name(),
                    c.data_type(),
                    f.data_type()
                )))
            }),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new_with_options(
        target.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::Field;
    use std::collections::HashMap;

    fn schema(fields: Vec<(&str, DataType)>) -> Schema {
        Schema::new(
            fields
                .into_iter()
                .map(|(n, t)| Field::new(n, t, true))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn other_types_names_or_order_are_corruption() {
        let expected = schema(vec![("id", DataType::Int64), ("s", DataType::Utf8)]);
        check(&expected, &expected, "p").unwrap();
        for actual in [
            schema(vec![("id", DataType::Int8), ("s", DataType::Utf8)]),
            schema(vec![("id", DataType::Int32), ("s", DataType::Utf8)]),
            schema(vec![("s", DataType::Utf8), ("id", DataType::Int64)]),
            schema(vec![("id", DataType::Int64)]),
        ] {
            let err = check(&expected, &actual, "ds/part-00001.parquet").unwrap_err();
            assert!(
                matches!(&err, Error::PartCorrupted { path, .. } if path == "ds/part-00001.parquet"),
                "{err}"
            );
        }
    }

    #[test]
    fn conform_restores_metadata_and_view_dictionaries() {
        let meta = HashMap::from([("k".to_string(), "v".to_string())]);
        let target = Arc::new(schema(vec![("id", DataType::Int64)]).with_metadata(meta.clone()));
        let plain = RecordBatch::try_new(
            Arc::new(schema(vec![("id", DataType::Int64)])),
            vec![Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let out = conform(plain, &target, "p").unwrap();
        assert_eq!(out.schema().metadata(), &meta);

        let view = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8View));
        let target = Arc::new(schema(vec![("c", view.clone())]));
        let stored = arrow_cast::cast(
            &(Arc::new(StringArray::from(vec!["a", "b", "a"])) as arrow_array::ArrayRef),
            &storage_type(&view),
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(schema(vec![("c", storage_type(&view))])),
            vec![stored],
        )
        .unwrap();
        assert_eq!(
            conform(batch, &target, "p").unwrap().column(0).data_type(),
            &view
        );

        let wrong = RecordBatch::try_new(
            Arc::new(schema(vec![("c", DataType::Int32)])),
            vec![Arc::new(Int32Array::from(vec![1]))],
        )
        .unwrap();
        assert!(matches!(
            conform(wrong, &target, "p"),
            Err(Error::PartCorrupted { .. })
        ));
    }
}
