//! Which columns of a part are written without a Parquet dictionary.
//!
//! A dictionary pays where values repeat. Where they do not (ids, random
//! floats, timestamps to the microsecond, hashes), the Parquet writer builds
//! one anyway, hashing every value, until the dictionary outgrows its page
//! limit and the writer falls back to plain encoding: time spent for
//! nothing, and the pages written before the fallback are larger than plain
//! ones. So a part's first values are sampled, and a column whose sampled
//! values are (nearly) all distinct is written plain. A column with repeats
//! in the sample keeps its dictionary, as does any type not sampled here
//! (booleans, nested and dictionary-typed columns, numbers wider than 16
//! bytes).
//!
//! The choice depends only on the part's first rows, not on how they were
//! batched or on the thread count.

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Schema};

/// Non-null values sampled per column, from the start of the part.
pub const SAMPLE_VALUES: usize = 8192;

/// Fewer sampled values than this decide nothing: the column keeps its
/// dictionary.
pub const MIN_SAMPLE: usize = 1024;

/// The share of distinct values (among those sampled) from which a column is
/// written plain. At 8,192 values sampled, a column reaches it only with
/// about 400,000 or more distinct values in a uniform spread, past the point
/// where an 8-byte column's dictionary outgrows its 1 MiB page anyway.
pub const DISTINCT_SHARE: f64 = 0.99;

/// The top-level columns of `schema` (those `batches` hold, in order) whose
/// first sampled values are nearly all distinct, skipping those in `plain`
/// already.
pub fn unique_columns(schema: &Schema, batches: &[RecordBatch], plain: &[String]) -> Vec<String> {
    schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !plain.iter().any(|p| p == f.name()))
        .filter(|(i, _)| {
            let columns = batches.iter().filter_map(|b| b.columns().get(*i));
            distinct_share(columns.map(|c| c.as_ref())).is_some_and(|s| s >= DISTINCT_SHARE)
        })
        .map(|(_, f)| f.name().clone())
        .collect()
}

/// Each value's bytes (by index), for strings, binaries and their views,
/// and fixed-size binary; `None` for other types.
fn value_bytes<'a>(column: &'a dyn Array) -> Option<Box<dyn Fn(usize) -> &'a [u8] + 'a>> {
    Some(match column.data_type() {
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            Box::new(move |i| a.value(i).as_bytes())
        }
        DataType::LargeUtf8 => {
            let a = column.as_string::<i64>();
            Box::new(move |i| a.value(i).as_bytes())
        }
        DataType::Utf8View => {
            let a = column.as_string_view();
            Box::new(move |i| a.value(i).as_bytes())
        }
        DataType::Binary => {
            let a = column.as_binary::<i32>();
            Box::new(move |i| a.value(i))
        }
        DataType::LargeBinary => {
            let a = column.as_binary::<i64>();
            Box::new(move |i| a.value(i))
        }
        DataType::BinaryView => {
            let a = column.as_binary_view();
            Box::new(move |i| a.value(i))
        }
        DataType::FixedSizeBinary(_) => {
            let a = column.as_fixed_size_binary();
            Box::new(move |i| a.value(i))
        }
        _ => return None,
    })
}

/// The share of distinct values among the first [`SAMPLE_VALUES`] non-null
/// values of `columns` (pieces of one column, in order); `None` for a type
/// not sampled, or too few values to judge.
pub fn distinct_share<'a>(columns: impl Iterator<Item = &'a dyn Array>) -> Option<f64> {
    let mut seen: HashSet<&[u8]> = HashSet::new();
    let mut numbers: HashSet<u128> = HashSet::new();
    let mut sampled = 0usize;
    for column in columns {
        let room = SAMPLE_VALUES - sampled;
        if room == 0 {
            break;
        }
        let valid = (0..column.len()).filter(|&i| column.is_valid(i)).take(room);
        if let Some(bytes) = value_bytes(column) {
            for i in valid {
                seen.insert(bytes(i));
                sampled += 1;
            }
            continue;
        }
        // Numbers up to 16 bytes wide, read as one number each.
        let t = column.data_type();
        let width = match t.is_primitive() {
            true => t.primitive_width().filter(|w| *w <= 16)?,
            false => return None,
        };
        let data = column.to_data();
        let values = data.buffers().first()?.as_slice();
        let offset = data.offset();
        for i in valid {
            let at = (offset + i) * width;
            let mut v = [0u8; 16];
            v[..width].copy_from_slice(values.get(at..at + width)?);
            numbers.insert(u128::from_le_bytes(v));
            sampled += 1;
        }
    }
    let distinct = seen.len() + numbers.len();
    (sampled >= MIN_SAMPLE).then(|| distinct as f64 / sampled as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray, StringViewArray,
    };
    use arrow_schema::Field;
    use std::sync::Arc;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, c)| Field::new(*n, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, c)| c).collect(),
        )
        .unwrap()
    }

    #[test]
    fn distinct_columns_are_found_and_repeating_ones_are_not() {
        let n = 20_000;
        let b = batch(vec![
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
            ),
            (
                "x",
                Arc::new(Float64Array::from_iter_values(
                    (0..n).map(|i| i as f64 * 1.5),
                )),
            ),
            (
                "uid",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("u{i}")),
                )),
            ),
            (
                "view",
                Arc::new(StringViewArray::from_iter_values(
                    (0..n).map(|i| format!("v{i}")),
                )),
            ),
            (
                "cat",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("c{}", i % 50)),
                )),
            ),
            (
                "user",
                Arc::new(Int32Array::from_iter_values(
                    (0..n as i32).map(|i| i % 5_000),
                )),
            ),
            (
                "flag",
                Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 2 == 0)))),
            ),
        ]);
        let got = unique_columns(&b.schema(), std::slice::from_ref(&b), &[]);
        assert_eq!(got, ["id", "x", "uid", "view"]);
        // Columns already plain are not named again.
        let got = unique_columns(&b.schema(), std::slice::from_ref(&b), &["id".to_string()]);
        assert_eq!(got, ["x", "uid", "view"]);
    }

    #[test]
    fn the_sample_spans_pieces_skips_nulls_and_respects_offsets() {
        // Distinct values, each piece a slice of a larger array.
        let all = Int64Array::from_iter((0..30_000).map(|i| (i % 3 != 0).then_some(i)));
        let pieces: Vec<ArrayRef> = (0..10)
            .map(|k| Arc::new(all.slice(k * 3_000, 3_000)) as ArrayRef)
            .collect();
        let share = distinct_share(pieces.iter().map(|c| c.as_ref())).unwrap();
        assert_eq!(share, 1.0);
        // The same, with every value twice: half distinct.
        let twice = Int64Array::from_iter_values((0..20_000).map(|i| i / 2));
        let share = distinct_share(std::iter::once(&twice as &dyn Array)).unwrap();
        assert!((share - 0.5).abs() < 0.01, "{share}");
        // Too few values (nulls do not count) decide nothing.
        let few = Int64Array::from_iter((0..5_000).map(|i| (i % 10 == 0).then_some(i)));
        assert_eq!(distinct_share(std::iter::once(&few as &dyn Array)), None);
        let none: [&dyn Array; 0] = [];
        assert_eq!(distinct_share(none.into_iter()), None);
    }
}
