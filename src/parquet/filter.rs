//! Row filters: a conjunction of `(column, op, value)` conditions, used twice:
//! to prune row groups by their Parquet min/max/null-count statistics before
//! any column data is fetched, and to filter rows while decoding (the filter
//! columns are decoded first; the others only for matching rows).
//!
//! Comparisons follow SQL: a null compares as unknown and the row is dropped.

use std::sync::Arc;

use arrow_arith::boolean::{and_kleene, is_not_null, is_null, not, or_kleene};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, Scalar, UInt64Array};
use arrow_ord::cmp;
use arrow_schema::{ArrowError, DataType, Schema};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::file::metadata::ParquetMetaData;

use crate::error::{Error, Result};
use crate::parquet::part_schema::widens;
use crate::parquet::value_set::SetCache;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
    IsNull,
    IsNotNull,
}

impl Op {
    /// Parse pyarrow's spellings (`==`, `=`, `!=`, `<`, ..., `in`, `not in`).
    pub fn parse(op: &str) -> Result<Self> {
        Ok(match op.trim().to_ascii_lowercase().as_str() {
            "==" | "=" => Op::Eq,
            "!=" | "<>" => Op::Ne,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            "in" => Op::In,
            "not in" => Op::NotIn,
            "is_null" | "is null" => Op::IsNull,
            "is_not_null" | "is not null" => Op::IsNotNull,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown filter operator {other:?}; use ==, !=, <, <=, >, >=, in, not in, is_null, is_not_null"
                )))
            }
        })
    }

    fn takes_values(self) -> bool {
        !matches!(self, Op::IsNull | Op::IsNotNull)
    }
}

/// One condition. `values` holds one value for comparisons, any number for
/// `in` / `not in`, none for the null checks.
#[derive(Debug, Clone)]
pub struct Condition {
    pub column: String,
    pub op: Op,
    pub values: Option<ArrayRef>,
    /// `values` as a sorted set, built on first use for an `in` / `not in`
    /// with many values (reset whenever `values` changes).
    pub set: SetCache,
}

/// All conditions must hold.
#[derive(Debug, Clone, Default)]
pub struct Predicate {
    pub conditions: Vec<Condition>,
}

fn arrow_err(e: Error) -> ArrowError {
    ArrowError::ExternalError(Box::new(e))
}

impl Predicate {
    /// The columns the predicate reads.
    pub fn columns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.conditions {
            if !out.contains(&c.column) {
                out.push(c.column.clone());
            }
        }
        out
    }

    /// Check columns against `schema` and cast every value to its column's
    /// type, so that evaluation compares like with like. A value of a type
    /// its column widens to ([`widens`]: a table's file written before its
    /// schema widened) stays as it is: such a column is cast up to the
    /// value's type to compare (and its statistics too), never the value
    /// down, which could round it.
    pub fn bind(self, schema: &Schema) -> Result<Self> {
        let mut out = Vec::with_capacity(self.conditions.len());
        for c in self.conditions {
            let field = schema.field_with_name(&c.column).map_err(|_| {
                Error::InvalidArgument(format!(
                    "filter on unknown column {:?}; the dataset has {:?}",
                    c.column,
                    schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
                ))
            })?;
            let values = match (&c.values, c.op.takes_values()) {
                (Some(v), true) => {
                    if !matches!(c.op, Op::In | Op::NotIn) && v.len() != 1 {
                        return Err(Error::InvalidArgument(format!(
                            "filter {:?} {:?} needs exactly one value",
                            c.column, c.op
                        )));
                    }
                    let target = value_type(field.data_type());
                    if v.data_type() == &target {
                        // Already of the column's type (bound before): the
                        // values, and their set if built, stay as they are.
                        out.push(c);
                        continue;
                    }
                    if widens(&target, v.data_type()) {
                        // A column read as a narrower type than the value's
                        // (a table's file from before its schema widened):
                        // compare in the value's type, exactly.
                        out.push(Condition {
                            values: Some(v.clone()),
                            set: SetCache::default(),
                            ..c
                        });
                        continue;
                    }
                    Some(arrow_cast::cast(v, &target).map_err(|e| {
                        Error::InvalidArgument(format!(
                            "filter value for {:?} does not fit its type {}: {e}",
                            c.column, target
                        ))
                    })?)
                }
                (None, true) => {
                    return Err(Error::InvalidArgument(format!(
                        "filter on {:?} needs a value",
                        c.column
                    )))
                }
                (_, false) => None,
            };
            out.push(Condition {
                values,
                set: SetCache::default(),
                ..c
            });
        }
        Ok(Self { conditions: out })
    }

    /// Which rows of `batch` pass (nulls become false).
    pub fn evaluate(&self, batch: &RecordBatch) -> std::result::Result<BooleanArray, ArrowError> {
        let mut acc: Option<BooleanArray> = None;
        for c in &self.conditions {
            let col = batch.column_by_name(&c.column).ok_or_else(|| {
                arrow_err(Error::InvalidArgument(format!(
                    "filter column {:?} missing",
                    c.column
                )))
            })?;
            let col = widen_to_values(unpack_dictionary(col)?, c.values.as_ref())?;
            let mask = condition_mask(c.op, &col, c.values.as_ref(), &c.set)?;
            acc = Some(match acc {
                None => mask,
                Some(a) => and_kleene(&a, &mask)?,
            });
        }
        let mask = acc.unwrap_or_else(|| BooleanArray::from(vec![true; batch.num_rows()]));
        if mask.null_count() == 0 {
            return Ok(mask);
        }
        // (prep_null_mask_filter expects a null buffer, so only call it with one.)
        Ok(arrow_select::filter::prep_null_mask_filter(&mask))
    }

    /// Indices of the row groups that may hold matching rows.
    pub fn prune(&self, metadata: &ParquetMetaData, arrow_schema: &Schema) -> Result<Vec<usize>> {
        let groups = metadata.row_groups();
        let rows: Vec<u64> = groups.iter().map(|g| g.num_rows().max(0) as u64).collect();
        let keep = self.may_match(&rows, |column| {
            let conv = StatisticsConverter::try_new(
                column,
                arrow_schema,
                metadata.file_metadata().schema_descr(),
            )?;
            Ok(UnitStats {
                mins: Some(conv.row_group_mins(groups.iter())?),
                maxs: Some(conv.row_group_maxes(groups.iter())?),
                null_counts: Some(conv.row_group_null_counts(groups.iter())?),
            })
        })?;
        Ok((0..groups.len()).filter(|&i| keep[i]).collect())
    }

    /// For each of `rows.len()` units (row groups, or whole files) holding
    /// `rows[i]` rows: may it hold a matching row? `stats(column)` gives the
    /// units' statistics of a column; unknown statistics rule nothing out.
    pub fn may_match<F>(&self, rows: &[u64], mut stats: F) -> Result<Vec<bool>>
    where
        F: FnMut(&str) -> Result<UnitStats>,
    {
        let n = rows.len();
        let mut keep = vec![true; n];
        for c in &self.conditions {
            let s = stats(&c.column)?;
            let may = match (c.op, &s.null_counts) {
                (Op::IsNull, Some(nulls)) => (0..n)
                    .map(|i| nulls.is_null(i) || nulls.value(i) > 0)
                    .collect::<Vec<_>>(),
                (Op::IsNotNull, Some(nulls)) => (0..n)
                    .map(|i| nulls.is_null(i) || nulls.value(i) < rows[i])
                    .collect(),
                (Op::IsNull | Op::IsNotNull | Op::NotIn, _) => vec![true; n],
                (op, _) => {
                    let (Some(values), Some(mins), Some(maxs)) =
                        (c.values.as_ref(), s.mins.as_ref(), s.maxs.as_ref())
                    else {
                        continue;
                    };
                    range_may_match(op, mins, maxs, values, &c.set)
                        .unwrap_or_else(|_| vec![true; n])
                }
            };
            for (k, m) in keep.iter_mut().zip(may) {
                *k &= m;
            }
        }
        Ok(keep)
    }
}

/// Statistics of one column over several units (row groups or files); an
/// unknown entry is null, an unknown array `None`.
#[derive(Debug, Clone, Default)]
pub struct UnitStats {
    pub mins: Option<ArrayRef>,
    pub maxs: Option<ArrayRef>,
    pub null_counts: Option<UInt64Array>,
}

/// Dictionary columns compare by their values.
fn value_type(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(_, v) => v.as_ref().clone(),
        other => other.clone(),
    }
}

fn unpack_dictionary(col: &ArrayRef) -> std::result::Result<ArrayRef, ArrowError> {
    match col.data_type() {
        DataType::Dictionary(_, v) => arrow_cast::cast(col, v),
        _ => Ok(col.clone()),
    }
}

/// `col` cast up to its condition values' type when its own type widens to
/// it (exact), else `col` unchanged.
fn widen_to_values(
    col: ArrayRef,
    values: Option<&ArrayRef>,
) -> std::result::Result<ArrayRef, ArrowError> {
    match values {
        Some(v) if widens(col.data_type(), v.data_type()) => arrow_cast::cast(&col, v.data_type()),
        _ => Ok(col),
    }
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

/// `true` where a float array holds NaN (null where it is null).
fn nan_mask(col: &ArrayRef) -> Option<BooleanArray> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float16Type, Float32Type, Float64Type};
    Some(match col.data_type() {
        DataType::Float16 => {
            BooleanArray::from_unary(col.as_primitive::<Float16Type>(), |v| v.is_nan())
        }
        DataType::Float32 => {
            BooleanArray::from_unary(col.as_primitive::<Float32Type>(), |v| v.is_nan())
        }
        DataType::Float64 => {
            BooleanArray::from_unary(col.as_primitive::<Float64Type>(), |v| v.is_nan())
        }
        _ => return None,
    })
}

/// Map -0.0 to +0.0 (x + 0.0), so that zeros compare equal as in IEEE 754.
fn positive_zero(col: &ArrayRef) -> std::result::Result<ArrayRef, ArrowError> {
    let zero = arrow_cast::cast(
        &(Arc::new(arrow_array::Float64Array::from(vec![0.0])) as ArrayRef),
        col.data_type(),
    )?;
    arrow_arith::numeric::add(col, &Scalar::new(zero))
}

/// Compare with IEEE 754 semantics on floats (as pyarrow and SQL do): -0.0
/// equals 0.0, and NaN compares false with everything except `!=`. Arrow's
/// kernels use a total order instead, so floats are adjusted around them.
fn compare_values(
    op: Op,
    col: &ArrayRef,
    value: &ArrayRef,
) -> std::result::Result<BooleanArray, ArrowError> {
    if !is_float(col.data_type()) {
        return compare(op, col, value);
    }
    let (col_z, value_z) = (positive_zero(col)?, positive_zero(value)?);
    let value_is_nan =
        nan_mask(&value_z).is_some_and(|m| m.len() == 1 && m.is_valid(0) && m.value(0));
    if value_is_nan {
        let all = BooleanArray::from(vec![op == Op::Ne; col.len()]);
        return and_kleene(&all, &is_not_null(col)?);
    }
    let raw = compare(op, &col_z, &value_z)?;
    let Some(nan) = nan_mask(col) else {
        return Ok(raw);
    };
    if op == Op::Ne {
        or_kleene(&raw, &nan)
    } else {
        and_kleene(&raw, &not(&nan)?)
    }
}

fn compare(
    op: Op,
    left: &dyn arrow_array::Datum,
    value: &ArrayRef,
) -> std::result::Result<BooleanArray, ArrowError> {
    let v = Scalar::new(value.clone());
    match op {
        Op::Eq => cmp::eq(left, &v),
        Op::Ne => cmp::neq(left, &v),
        Op::Lt => cmp::lt(left, &v),
        Op::Le => cmp::lt_eq(left, &v),
        Op::Gt => cmp::gt(left, &v),
        Op::Ge => cmp::gt_eq(left, &v),
        _ => Err(ArrowError::InvalidArgumentError(format!(
            "{op:?} is not a comparison"
        ))),
    }
}

fn condition_mask(
    op: Op,
    col: &ArrayRef,
    values: Option<&ArrayRef>,
    set: &SetCache,
) -> std::result::Result<BooleanArray, ArrowError> {
    match (op, values) {
        (Op::IsNull, _) => is_null(col),
        (Op::IsNotNull, _) => is_not_null(col),
        (Op::In | Op::NotIn, Some(values)) => {
            // NOT IN with a null among its values holds for no row (SQL);
            // the comparison below gives that, the set (nulls left out) not.
            let usable = op == Op::In || values.null_count() == 0;
            if let Some(set) = set.get(values).filter(|_| usable) {
                if set.data_type() == col.data_type() {
                    // Null and NaN elements are in no set; NOT IN drops
                    // nulls (as SQL does) but keeps NaN (NaN != v).
                    let found = set.contains(col)?;
                    return if op == Op::In {
                        Ok(found)
                    } else {
                        and_kleene(&not(&found)?, &is_not_null(col)?)
                    };
                }
            }
            let mut any: Option<BooleanArray> = None;
            for i in 0..values.len() {
                let eq = compare_values(Op::Eq, col, &values.slice(i, 1))?;
                any = Some(match any {
                    None => eq,
                    Some(a) => or_kleene(&a, &eq)?,
                });
            }
            let any = any.unwrap_or_else(|| BooleanArray::from(vec![false; col.len()]));
            if op == Op::In {
                Ok(any)
            } else {
                // NOT IN drops null column values, as SQL does.
                and_kleene(&not(&any)?, &is_not_null(col)?)
            }
        }
        (op, Some(value)) => compare_values(op, col, value),
        (_, None) => Err(ArrowError::InvalidArgumentError(
            "filter value missing".into(),
        )),
    }
}

/// Per row group: can `[min, max]` contain a value satisfying `op value`?
fn range_may_match(
    op: Op,
    mins: &ArrayRef,
    maxs: &ArrayRef,
    values: &ArrayRef,
    set: &SetCache,
) -> std::result::Result<Vec<bool>, ArrowError> {
    if op == Op::In {
        if let Some(set) = set.get(values) {
            if set.data_type() == mins.data_type() && set.data_type() == maxs.data_type() {
                return set.meets_ranges(mins, maxs);
            }
        }
    }
    // Statistics of a narrower type than the values' (a table's file from
    // before its schema widened) are cast up, exactly; otherwise the values
    // are cast to the statistics' type, as `bind` did for the column.
    let (mins, maxs, values) = if widens(mins.data_type(), values.data_type()) {
        let t = values.data_type();
        (
            arrow_cast::cast(mins, t)?,
            arrow_cast::cast(maxs, t)?,
            values.clone(),
        )
    } else {
        (
            mins.clone(),
            maxs.clone(),
            arrow_cast::cast(values, mins.data_type())?,
        )
    };
    let (mins, maxs) = (&mins, &maxs);
    let one = |op: Op, v: &ArrayRef| -> std::result::Result<BooleanArray, ArrowError> {
        match op {
            Op::Eq => and_kleene(&compare(Op::Le, mins, v)?, &compare(Op::Ge, maxs, v)?),
            Op::Lt => compare(Op::Lt, mins, v),
            Op::Le => compare(Op::Le, mins, v),
            Op::Gt => compare(Op::Gt, maxs, v),
            Op::Ge => compare(Op::Ge, maxs, v),
            // Statistics leave NaN out, and NaN != v: a float row group may
            // hold one whatever its min and max.
            Op::Ne if is_float(mins.data_type()) => Ok(BooleanArray::from(vec![true; mins.len()])),
            // Only a row group whose every value equals v is excluded.
            Op::Ne => not(&and_kleene(
                &compare(Op::Eq, mins, v)?,
                &compare(Op::Eq, maxs, v)?,
            )?),
            _ => Ok(BooleanArray::from(vec![true; mins.len()])),
        }
    };
    let mask = if op == Op::In {
        let mut any: Option<BooleanArray> = None;
        for i in 0..values.len() {
            let m = one(Op::Eq, &values.slice(i, 1))?;
            any = Some(match any {
                None => m,
                Some(a) => or_kleene(&a, &m)?,
            });
        }
        any.unwrap_or_else(|| BooleanArray::from(vec![false; mins.len()]))
    } else {
        one(op, &values)?
    };
    // Unknown statistics (null) cannot rule a row group out.
    Ok((0..mask.len())
        .map(|i| mask.is_null(i) || mask.value(i))
        .collect())
}

/// Build a predicate from `(column, op, values)` triples.
pub fn predicate(conditions: Vec<(String, String, Option<ArrayRef>)>) -> Result<Predicate> {
    let conditions = conditions
        .into_iter()
        .map(|(column, op, values)| {
            Ok(Condition {
                column,
                op: Op::parse(&op)?,
                values,
                set: SetCache::default(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Predicate { conditions })
}

/// A predicate shared by the reader's row filter closures.
pub type SharedPredicate = Arc<Predicate>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::Field;
    use parquet::arrow::arrow_reader::ArrowReaderMetadata;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), Some(5), None, Some(9)])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("b"),
                    Some("a"),
                    None,
                ])),
            ],
        )
        .unwrap()
    }

    fn cond(col: &str, op: &str, v: Option<ArrayRef>) -> (String, String, Option<ArrayRef>) {
        (col.into(), op.into(), v)
    }

    fn ints(v: &[i64]) -> Option<ArrayRef> {
        Some(Arc::new(Int64Array::from(v.to_vec())))
    }

    #[test]
    fn many_values_in_agree_with_value_by_value_comparison() {
        use arrow_array::Float64Array;
        // 40 values take the sorted-set path; each is checked against the
        // comparison of one value at a time (the path below 16 values).
        let values: Vec<f64> = (0..40).map(|i| (i * 3) as f64 - 30.0).collect();
        let mut probe: Vec<Option<f64>> = (-40..90).map(|i| Some(i as f64)).collect();
        probe.extend([None, Some(f64::NAN), Some(-0.0)]);
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Float64, true)]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Float64Array::from(probe.clone()))],
        )
        .unwrap();
        let arr = |v: Vec<f64>| -> Option<ArrayRef> { Some(Arc::new(Float64Array::from(v))) };
        for op in ["in", "not in"] {
            let many = predicate(vec![cond("x", op, arr(values.clone()))])
                .unwrap()
                .bind(&schema)
                .unwrap()
                .evaluate(&b)
                .unwrap();
            for (i, p) in probe.iter().enumerate() {
                let found = p.is_some_and(|p| values.contains(&p));
                let want = match (op, p) {
                    (_, None) => false,
                    ("in", _) => found,
                    _ => !found,
                };
                assert_eq!(many.value(i), want, "{op} at {p:?}");
            }
            // Row groups: [min, max] statistics with and without a value inside.
            let mins: ArrayRef = Arc::new(Float64Array::from(vec![-100.0, -29.5, 87.5, -0.0]));
            let maxs: ArrayRef = Arc::new(Float64Array::from(vec![-31.0, -28.0, 99.0, 0.0]));
            if op == "in" {
                let p = predicate(vec![cond("x", op, arr(values.clone()))])
                    .unwrap()
                    .bind(&schema)
                    .unwrap();
                let keep = p
                    .may_match(&[1, 1, 1, 1], |_| {
                        Ok(UnitStats {
                            mins: Some(mins.clone()),
                            maxs: Some(maxs.clone()),
                            null_counts: None,
                        })
                    })
                    .unwrap();
                assert_eq!(keep, vec![false, false, false, true]);
            }
        }
    }

    #[test]
    fn not_in_with_a_null_among_many_values_matches_no_row() {
        let b = batch();
        let mut values: Vec<Option<i64>> = (100..130).map(Some).collect();
        values.push(None);
        let v: Option<ArrayRef> = Some(Arc::new(Int64Array::from(values)));
        let p = predicate(vec![cond("x", "not in", v.clone())])
            .unwrap()
            .bind(&b.schema())
            .unwrap();
        assert_eq!(p.evaluate(&b).unwrap(), BooleanArray::from(vec![false; 4]));
        // IN ignores the null: 1, 5 and 9 are not among the values.
        let p = predicate(vec![cond("x", "in", v)])
            .unwrap()
            .bind(&b.schema())
            .unwrap();
        assert_eq!(p.evaluate(&b).unwrap(), BooleanArray::from(vec![false; 4]));
    }

    #[test]
    fn evaluates_like_sql() {
        let b = batch();
        let check = |conds, expected: Vec<bool>| {
            let p = predicate(conds).unwrap().bind(&b.schema()).unwrap();
            assert_eq!(p.evaluate(&b).unwrap(), BooleanArray::from(expected));
        };
        check(
            vec![cond("x", ">", ints(&[3]))],
            vec![false, true, false, true],
        );
        check(
            vec![cond("x", "in", ints(&[1, 9]))],
            vec![true, false, false, true],
        );
        check(
            vec![cond("x", "not in", ints(&[1]))],
            vec![false, true, false, true],
        );
        check(
            vec![cond("x", "is_null", None)],
            vec![false, false, true, false],
        );
        let s: Option<ArrayRef> = Some(Arc::new(StringArray::from(vec!["a"])));
        check(
            vec![cond("s", "==", s), cond("x", "<", ints(&[100]))],
            vec![true, false, false, false],
        );
    }

    #[test]
    fn floats_compare_like_ieee() {
        use arrow_array::Float64Array;
        let schema = Arc::new(Schema::new(vec![Field::new("f", DataType::Float64, true)]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Float64Array::from(vec![
                Some(-0.0),
                Some(0.0),
                Some(f64::NAN),
                Some(2.0),
                None,
            ]))],
        )
        .unwrap();
        let f = |op: &str, v: f64| {
            let p = predicate(vec![cond(
                "f",
                op,
                Some(Arc::new(Float64Array::from(vec![v]))),
            )])
            .unwrap()
            .bind(&schema)
            .unwrap();
            p.evaluate(&b).unwrap()
        };
        assert_eq!(
            f("==", 0.0),
            BooleanArray::from(vec![true, true, false, false, false])
        );
        assert_eq!(
            f("<", 0.0),
            BooleanArray::from(vec![false, false, false, false, false])
        );
        assert_eq!(
            f(">", 1.0),
            BooleanArray::from(vec![false, false, false, true, false])
        );
        assert_eq!(
            f("!=", 2.0),
            BooleanArray::from(vec![true, true, true, false, false])
        );
        assert_eq!(
            f("==", f64::NAN),
            BooleanArray::from(vec![false, false, false, false, false])
        );
        assert_eq!(
            f("!=", f64::NAN),
            BooleanArray::from(vec![true, true, true, true, false])
        );
    }

    #[test]
    fn binding_rejects_bad_filters() {
        let b = batch();
        assert!(predicate(vec![cond("x", "~", ints(&[1]))]).is_err());
        assert!(predicate(vec![cond("nope", "==", ints(&[1]))])
            .unwrap()
            .bind(&b.schema())
            .is_err());
        assert!(predicate(vec![cond("x", "==", None)])
            .unwrap()
            .bind(&b.schema())
            .is_err());
        assert!(predicate(vec![cond("x", "==", ints(&[1, 2]))])
            .unwrap()
            .bind(&b.schema())
            .is_err());
    }

    /// A file written before its column widened compares in the wider type:
    /// the value is never rounded to the file's type.
    #[test]
    fn narrower_columns_compare_cast_up_to_the_values_type() {
        use arrow_array::{Date32Array, Date64Array, Float64Array, Int32Array};
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("d", DataType::Date32, true),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![Some(2), Some(3), None])),
                Arc::new(Date32Array::from(vec![Some(1), Some(2), Some(3)])),
            ],
        )
        .unwrap();
        let f = |v: f64| -> Option<ArrayRef> { Some(Arc::new(Float64Array::from(vec![v]))) };
        let ms = |v: i64| -> Option<ArrayRef> { Some(Arc::new(Date64Array::from(vec![v]))) };
        let check = |conds, expected: Vec<bool>| {
            let p = predicate(conds).unwrap().bind(&schema).unwrap();
            assert_eq!(p.evaluate(&b).unwrap(), BooleanArray::from(expected));
        };
        // Rounded to int32, 2.5 would be 2: "< 2.5" would lose 2, "== 2.5" keep it.
        check(vec![cond("i", "<", f(2.5))], vec![true, false, false]);
        check(vec![cond("i", "==", f(2.5))], vec![false, false, false]);
        check(vec![cond("i", "in", f(3.0))], vec![false, true, false]);
        // Days compare as days * 86_400_000 ms, not as milliseconds.
        check(
            vec![cond("d", "==", ms(2 * 86_400_000))],
            vec![false, true, false],
        );
        check(
            vec![cond("d", ">", ms(86_400_000 + 1))],
            vec![false, true, true],
        );
        // Row groups: int32 / date32 statistics against float64 / date64 values.
        let mins: ArrayRef = Arc::new(Int32Array::from(vec![0, 2]));
        let maxs: ArrayRef = Arc::new(Int32Array::from(vec![2, 9]));
        let v = f(2.5).unwrap();
        assert_eq!(
            range_may_match(Op::Lt, &mins, &maxs, &v, &SetCache::default()).unwrap(),
            vec![true, true]
        );
        assert_eq!(
            range_may_match(Op::Gt, &mins, &maxs, &v, &SetCache::default()).unwrap(),
            vec![false, true]
        );
        assert_eq!(
            range_may_match(Op::Eq, &mins, &maxs, &v, &SetCache::default()).unwrap(),
            vec![false, true]
        );
        let dmins: ArrayRef = Arc::new(Date32Array::from(vec![0, 10]));
        let dmaxs: ArrayRef = Arc::new(Date32Array::from(vec![5, 20]));
        let v = ms(6 * 86_400_000).unwrap();
        assert_eq!(
            range_may_match(Op::Ge, &dmins, &dmaxs, &v, &SetCache::default()).unwrap(),
            vec![false, true]
        );
        assert_eq!(
            range_may_match(Op::Lt, &dmins, &dmaxs, &v, &SetCache::default()).unwrap(),
            vec![true, false]
        );
        // NaN is left out of statistics, so "!=" never prunes a float row group.
        let fm: ArrayRef = Arc::new(Float64Array::from(vec![1.0]));
        assert_eq!(
            range_may_match(Op::Ne, &fm, &fm, &f(1.0).unwrap(), &SetCache::default()).unwrap(),
            vec![true]
        );
    }

    #[test]
    fn prunes_row_groups_by_statistics() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..100))],
        )
        .unwrap();
        let opts = EncodeOptions::new("zstd", Some(10), None).unwrap();
        let (bytes, _) = encode_to_bytes(&[b], schema.clone(), &opts).unwrap();
        let meta = ArrowReaderMetadata::load(&bytes, Default::default()).unwrap();
        let prune = |op: &str, v: &[i64]| {
            predicate(vec![cond("v", op, ints(v))])
                .unwrap()
                .bind(&schema)
                .unwrap()
                .prune(meta.metadata(), &schema)
                .unwrap()
        };
        assert_eq!(prune("<", &[25]), vec![0, 1, 2]);
        assert_eq!(prune(">=", &[95]), vec![9]);
        assert_eq!(prune("==", &[42]), vec![4]);
        assert_eq!(prune("in", &[5, 77]), vec![0, 7]);
        assert_eq!(prune("!=", &[3]).len(), 10);
    }
}
