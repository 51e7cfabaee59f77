//! The values of an `in` / `not in` condition as a sorted set, so that a
//! condition with many values (an upsert's keys: tens of thousands) costs
//! a binary search per row and per statistics unit, not a comparison with
//! every value.
//!
//! Integers (and temporal values) are held as native `i64` / `u64`; other
//! values in arrow's row format, whose byte order is the type's order. Floats are compared as SQL does, not by that total order: `-0.0`
//! is stored as `0.0`, and NaN (equal to nothing) and null (unknown) are
//! left out, so they never match.

use std::sync::{Arc, OnceLock};

use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_buffer::BooleanBuffer;
use arrow_row::{OwnedRow, RowConverter, SortField};
use arrow_schema::{ArrowError, DataType};

type ArrowResult<T> = std::result::Result<T, ArrowError>;

/// Below this many values a condition compares value by value.
pub const MIN_SET: usize = 16;

/// A sorted, deduplicated set of values of one type.
#[derive(Debug)]
pub struct ValueSet {
    data_type: DataType,
    values: Sorted,
}

/// The set's values: integers (and the temporal types, which are integers)
/// as native numbers; anything else in arrow's row format.
#[derive(Debug)]
enum Sorted {
    Signed(Vec<i64>, Members<i64>),
    Unsigned(Vec<u64>, Members<u64>),
    Rows {
        converter: RowConverter,
        rows: Vec<OwnedRow>,
    },
}

/// A hash set of the values, for membership in constant time (the sorted
/// values answer range questions).
type Members<T> = std::collections::HashSet<T, ahash::RandomState>;

/// `sorted` as a hash set.
fn members<T: std::hash::Hash + Eq + Copy>(sorted: &[T]) -> Members<T> {
    let mut set = Members::with_capacity_and_hasher(sorted.len(), ahash::RandomState::new());
    set.extend(sorted.iter().copied());
    set
}

/// The native integer type `t` is compared in, if it is one.
fn integer_kind(t: &DataType) -> Option<DataType> {
    use DataType::*;
    match t {
        UInt64 => Some(UInt64),
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 => Some(Int64),
        Date32 | Date64 | Timestamp(_, _) => Some(Int64),
        _ => None,
    }
}

/// `col` as native integers of `kind` (nulls kept).
fn as_integers(col: &ArrayRef, kind: &DataType) -> ArrowResult<ArrayRef> {
    if col.data_type() == kind {
        return Ok(col.clone());
    }
    arrow_cast::cast_with_options(
        col,
        kind,
        &arrow_cast::CastOptions {
            safe: false,
            ..Default::default()
        },
    )
}

/// Per element of `probe` (native integers, nulls kept): is it in the set
/// (`sorted`, `set`)? Probes in ascending order (a key column written in
/// key order) walk the sorted values once; others look each up in `set`.
fn contains_native<T>(
    sorted: &[T],
    set: &Members<T>,
    probe: &arrow_array::PrimitiveArray<impl arrow_array::ArrowPrimitiveType<Native = T>>,
) -> BooleanArray
where
    T: std::hash::Hash + Ord + Copy + arrow_array::ArrowNativeTypeOp,
{
    let values = probe.values();
    let found = match probe.nulls() {
        None if values.windows(2).all(|w| w[0] <= w[1]) => {
            let mut at = values
                .first()
                .map_or(0, |v| sorted.partition_point(|s| s < v));
            BooleanBuffer::collect_bool(values.len(), |i| {
                let v = values[i];
                while at < sorted.len() && sorted[at] < v {
                    at += 1;
                }
                at < sorted.len() && sorted[at] == v
            })
        }
        None => BooleanBuffer::collect_bool(values.len(), |i| set.contains(&values[i])),
        Some(n) => {
            BooleanBuffer::collect_bool(values.len(), |i| n.is_valid(i) && set.contains(&values[i]))
        }
    };
    BooleanArray::new(found, None)
}

/// Per unit `[lo[i], hi[i]]` (native integers): does a value of `sorted`
/// lie inside? An unknown bound may.
fn meets_native<T>(
    sorted: &[T],
    lo: &arrow_array::PrimitiveArray<impl arrow_array::ArrowPrimitiveType<Native = T>>,
    hi: &arrow_array::PrimitiveArray<impl arrow_array::ArrowPrimitiveType<Native = T>>,
) -> Vec<bool>
where
    T: Ord + Copy + arrow_array::ArrowNativeTypeOp,
{
    (0..lo.len())
        .map(|i| {
            if lo.is_null(i) || hi.is_null(i) {
                return true;
            }
            let at = sorted.partition_point(|v| *v < lo.value(i));
            sorted.get(at).is_some_and(|v| *v <= hi.value(i))
        })
        .collect()
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

/// `col` with `-0.0` as `0.0` (x + 0.0), so that zeros compare equal.
fn positive_zero(col: &ArrayRef) -> ArrowResult<ArrayRef> {
    if !is_float(col.data_type()) {
        return Ok(col.clone());
    }
    let zero = arrow_cast::cast(
        &(Arc::new(arrow_array::Float64Array::from(vec![0.0])) as ArrayRef),
        col.data_type(),
    )?;
    arrow_arith::numeric::add(col, &arrow_array::Scalar::new(zero))
}

/// Whether element `i` of a float array is NaN (false for other types).
fn is_nan(col: &ArrayRef, i: usize) -> bool {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float16Type, Float32Type, Float64Type};
    match col.data_type() {
        DataType::Float16 => col.as_primitive::<Float16Type>().value(i).is_nan(),
        DataType::Float32 => col.as_primitive::<Float32Type>().value(i).is_nan(),
        DataType::Float64 => col.as_primitive::<Float64Type>().value(i).is_nan(),
        _ => false,
    }
}

impl ValueSet {
    /// The set of `values`' non-null, non-NaN values.
    pub fn new(values: &ArrayRef) -> ArrowResult<Self> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Int64Type, UInt64Type};
        let data_type = values.data_type().clone();
        let sorted = match integer_kind(&data_type) {
            Some(DataType::UInt64) => {
                let ints = as_integers(values, &DataType::UInt64)?;
                let mut v: Vec<u64> = ints.as_primitive::<UInt64Type>().iter().flatten().collect();
                v.sort_unstable();
                v.dedup();
                let m = members(&v);
                Sorted::Unsigned(v, m)
            }
            Some(kind) => {
                let ints = as_integers(values, &kind)?;
                let mut v: Vec<i64> = ints.as_primitive::<Int64Type>().iter().flatten().collect();
                v.sort_unstable();
                v.dedup();
                let m = members(&v);
                Sorted::Signed(v, m)
            }
            None => {
                let converter = RowConverter::new(vec![SortField::new(data_type.clone())])?;
                let normal = positive_zero(values)?;
                let rows = converter.convert_columns(std::slice::from_ref(&normal))?;
                let mut sorted: Vec<OwnedRow> = (0..normal.len())
                    .filter(|&i| normal.is_valid(i) && !is_nan(&normal, i))
                    .map(|i| rows.row(i).owned())
                    .collect();
                sorted.sort_unstable();
                sorted.dedup();
                Sorted::Rows {
                    converter,
                    rows: sorted,
                }
            }
        };
        Ok(Self {
            data_type,
            values: sorted,
        })
    }

    /// The type of the values.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// How many distinct values.
    pub fn len(&self) -> usize {
        match &self.values {
            Sorted::Signed(v, _) => v.len(),
            Sorted::Unsigned(v, _) => v.len(),
            Sorted::Rows { rows, .. } => rows.len(),
        }
    }

    /// Whether the set holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Per element of `col` (of the set's type): is it in the set? Null
    /// and NaN elements are not.
    pub fn contains(&self, col: &ArrayRef) -> ArrowResult<BooleanArray> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Int64Type, UInt64Type};
        let found: Vec<bool> = match &self.values {
            Sorted::Signed(v, m) => {
                let ints = as_integers(col, &DataType::Int64)?;
                return Ok(contains_native(v, m, ints.as_primitive::<Int64Type>()));
            }
            Sorted::Unsigned(v, m) => {
                let ints = as_integers(col, &DataType::UInt64)?;
                return Ok(contains_native(v, m, ints.as_primitive::<UInt64Type>()));
            }
            Sorted::Rows { converter, rows } => {
                let normal = positive_zero(col)?;
                let probe = converter.convert_columns(std::slice::from_ref(&normal))?;
                (0..normal.len())
                    .map(|i| {
                        normal.is_valid(i)
                            && !is_nan(&normal, i)
                            && rows
                                .binary_search_by(|v| v.row().cmp(&probe.row(i)))
                                .is_ok()
                    })
                    .collect()
            }
        };
        Ok(found.into())
    }

    /// Per unit with statistics `mins[i]`, `maxs[i]` (of the set's type):
    /// may it hold a value of the set? A unit with an unknown bound may.
    pub fn meets_ranges(&self, mins: &ArrayRef, maxs: &ArrayRef) -> ArrowResult<Vec<bool>> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Int64Type, UInt64Type};
        Ok(match &self.values {
            Sorted::Signed(v, _) => {
                let (lo, hi) = (
                    as_integers(mins, &DataType::Int64)?,
                    as_integers(maxs, &DataType::Int64)?,
                );
                meets_native(
                    v,
                    lo.as_primitive::<Int64Type>(),
                    hi.as_primitive::<Int64Type>(),
                )
            }
            Sorted::Unsigned(v, _) => {
                let (lo, hi) = (
                    as_integers(mins, &DataType::UInt64)?,
                    as_integers(maxs, &DataType::UInt64)?,
                );
                meets_native(
                    v,
                    lo.as_primitive::<UInt64Type>(),
                    hi.as_primitive::<UInt64Type>(),
                )
            }
            Sorted::Rows { converter, rows } => {
                let (lo, hi) = (positive_zero(mins)?, positive_zero(maxs)?);
                let lo_rows = converter.convert_columns(std::slice::from_ref(&lo))?;
                let hi_rows = converter.convert_columns(std::slice::from_ref(&hi))?;
                (0..lo.len())
                    .map(|i| {
                        if lo.is_null(i) || hi.is_null(i) || is_nan(&lo, i) || is_nan(&hi, i) {
                            return true;
                        }
                        // The first value at or above the minimum: at or below the maximum?
                        let at = rows.partition_point(|v| v.row() < lo_rows.row(i));
                        rows.get(at).is_some_and(|v| v.row() <= hi_rows.row(i))
                    })
                    .collect()
            }
        })
    }
}

/// A condition's value set, built on first use and shared by its clones
/// (row filters evaluate one condition on many batches).
#[derive(Debug, Clone, Default)]
pub struct SetCache(Arc<OnceLock<Option<Arc<ValueSet>>>>);

impl SetCache {
    /// The set of `values`, if there are enough of them to be worth one
    /// (see [`MIN_SET`]) and their type has a row format.
    pub fn get(&self, values: &ArrayRef) -> Option<Arc<ValueSet>> {
        self.0
            .get_or_init(|| {
                (values.len() >= MIN_SET)
                    .then(|| ValueSet::new(values).ok().map(Arc::new))
                    .flatten()
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array, StringArray};

    fn arr(a: impl Array + 'static) -> ArrayRef {
        Arc::new(a)
    }

    #[test]
    fn membership_matches_comparison_for_ints_strings_and_floats() {
        let set = ValueSet::new(&arr(Int64Array::from(vec![
            Some(5),
            Some(1),
            None,
            Some(5),
            Some(9),
        ])))
        .unwrap();
        assert_eq!(set.len(), 3);
        let probe = arr(Int64Array::from(vec![
            Some(1),
            Some(2),
            None,
            Some(9),
            Some(10),
        ]));
        assert_eq!(
            set.contains(&probe).unwrap(),
            BooleanArray::from(vec![true, false, false, true, false])
        );
        let s = ValueSet::new(&arr(StringArray::from(vec!["b", "a"]))).unwrap();
        assert_eq!(
            s.contains(&arr(StringArray::from(vec!["a", "c", "b"])))
                .unwrap(),
            BooleanArray::from(vec![true, false, true])
        );
        let f = ValueSet::new(&arr(Float64Array::from(vec![-0.0, f64::NAN, 2.5]))).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(
            f.contains(&arr(Float64Array::from(vec![0.0, -0.0, f64::NAN, 2.5])))
                .unwrap(),
            BooleanArray::from(vec![true, true, false, true])
        );
    }

    #[test]
    fn ranges_meet_the_set_only_where_a_value_lies_inside() {
        let set = ValueSet::new(&arr(Int64Array::from(vec![10, 20, 30]))).unwrap();
        let mins = arr(Int64Array::from(vec![
            Some(0),
            Some(11),
            Some(21),
            None,
            Some(31),
        ]));
        let maxs = arr(Int64Array::from(vec![
            Some(9),
            Some(19),
            Some(30),
            Some(0),
            Some(99),
        ]));
        assert_eq!(
            set.meets_ranges(&mins, &maxs).unwrap(),
            vec![false, false, true, true, false]
        );
        // Zeros of either sign meet a range ending at -0.0.
        let f = ValueSet::new(&arr(Float64Array::from(vec![0.0]))).unwrap();
        let lo = arr(Float64Array::from(vec![-1.0]));
        let hi = arr(Float64Array::from(vec![-0.0]));
        assert_eq!(f.meets_ranges(&lo, &hi).unwrap(), vec![true]);
    }

    #[test]
    fn integers_of_every_width_and_temporal_values_compare_natively() {
        use arrow_array::{Date32Array, UInt64Array, UInt8Array};
        let big = ValueSet::new(&arr(UInt64Array::from(vec![u64::MAX, 3]))).unwrap();
        assert_eq!(
            big.contains(&arr(UInt64Array::from(vec![u64::MAX, 4, 3])))
                .unwrap(),
            BooleanArray::from(vec![true, false, true])
        );
        let small = ValueSet::new(&arr(UInt8Array::from(vec![200, 7]))).unwrap();
        assert_eq!(
            small
                .meets_ranges(
                    &arr(UInt8Array::from(vec![0, 8, 199])),
                    &arr(UInt8Array::from(vec![6, 100, 255]))
                )
                .unwrap(),
            vec![false, false, true]
        );
        let ts = ValueSet::new(&arr(arrow_array::TimestampMicrosecondArray::from(vec![
            5, 9,
        ])
        .with_timezone("UTC")))
        .unwrap();
        assert_eq!(
            ts.contains(&arr(arrow_array::TimestampMicrosecondArray::from(vec![
                9, 6
            ])
            .with_timezone("UTC")))
                .unwrap(),
            BooleanArray::from(vec![true, false])
        );
        let days = ValueSet::new(&arr(Date32Array::from(vec![19000, 19002]))).unwrap();
        assert_eq!(
            days.contains(&arr(Date32Array::from(vec![
                Some(19001),
                Some(19002),
                None
            ])))
            .unwrap(),
            BooleanArray::from(vec![false, true, false])
        );
    }

    #[test]
    fn sorted_and_unsorted_probes_agree() {
        let set = ValueSet::new(&arr(Int64Array::from(vec![3, 10, 11, 50, -4]))).unwrap();
        let up: Vec<i64> = (-10..60).collect();
        let mut down = up.clone();
        down.reverse();
        let a = set.contains(&arr(Int64Array::from(up.clone()))).unwrap();
        let b = set.contains(&arr(Int64Array::from(down))).unwrap();
        let want: Vec<bool> = up.iter().map(|v| [3, 10, 11, 50, -4].contains(v)).collect();
        assert_eq!(a, BooleanArray::from(want.clone()));
        let mut back: Vec<bool> = b.iter().map(|x| x.unwrap()).collect();
        back.reverse();
        assert_eq!(back, want);
        // Repeated probe values, and values past the last.
        let rep = set
            .contains(&arr(Int64Array::from(vec![3, 3, 50, 50, 51, 99])))
            .unwrap();
        assert_eq!(
            rep,
            BooleanArray::from(vec![true, true, true, true, false, false])
        );
    }

    #[test]
    fn the_cache_builds_once_and_only_for_many_values() {
        let few = arr(Int64Array::from(vec![1, 2, 3]));
        assert!(SetCache::default().get(&few).is_none());
        let many = arr(Int64Array::from((0..100).collect::<Vec<i64>>()));
        let cache = SetCache::default();
        let a = cache.get(&many).unwrap();
        let b = cache.clone().get(&many).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
