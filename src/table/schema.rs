//! A table's schema against an append's: the strict check, and the merge
//! that `schema_mode="merge"` allows (ODF's schema-in-metadata: every
//! version carries its full schema, and a change is an explicit new one).
//!
//! Merging adds the input's new columns as nullable, and widens a column to
//! a type that holds every value of the old one (int32 to int64, float32 to
//! float64, string to large_string, ...). Files written before keep their
//! schema (the manifest records it) and are read with nulls for the columns
//! they lack and their values cast to the wider types.
//!
//! Both modes compare *logical* types ([`same_logical_type`]): the physical
//! variants Arrow producers choose between (`string`, `large_string` and
//! `string_view`; the three binaries; the four lists; a dictionary of
//! strings or binaries and its plain values) are one type. An append's
//! columns of another variant are cast to the table's type as they stream
//! in, before encoding; the table's schema does not change for them.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};

/// How an append's schema may differ from the table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaMode {
    /// The same columns with the same logical types (any order; see
    /// [`same_logical_type`]).
    #[default]
    Strict,
    /// New columns are added as nullable; columns may widen.
    Merge,
}

impl SchemaMode {
    pub fn parse(mode: &str) -> Result<Self> {
        match mode {
            "strict" => Ok(Self::Strict),
            "merge" => Ok(Self::Merge),
            other => Err(Error::InvalidArgument(format!(
                "schema_mode must be \"strict\" or \"merge\", got {other:?}"
            ))),
        }
    }
}

pub use crate::parquet::part_schema::widens;

/// The schema the table has after appending data of schema `input`, or
/// `SchemaMismatch` naming every field that differs. Strict mode returns
/// the table's schema unchanged when the columns match (in any order, each
/// of the table's logical type). A column of the table's logical type in
/// another physical type keeps the table's type in both modes (the append
/// casts it); merge widens only as [`widens`] allows.
pub fn reconcile(table: &Schema, input: &Schema, mode: SchemaMode, key: &str) -> Result<SchemaRef> {
    let mut problems = Vec::new();
    let mut fields: Vec<Field> = Vec::with_capacity(table.fields().len());
    for tf in table.fields() {
        match input.field_with_name(tf.name()) {
            Err(_) => {
                if mode == SchemaMode::Merge && tf.is_nullable() {
                    fields.push(tf.as_ref().clone());
                } else {
                    problems.push(format!("{:?} is missing", tf.name()));
                }
            }
            Ok(inf) if inf.data_type() == tf.data_type() => fields.push(tf.as_ref().clone()),
            Ok(inf) => {
                let (t, i) = (tf.data_type(), inf.data_type());
                match mode {
                    SchemaMode::Merge if widens(i, t) => fields.push(tf.as_ref().clone()),
                    SchemaMode::Merge if widens(t, i) => {
                        fields.push(tf.as_ref().clone().with_data_type(i.clone()))
                    }
                    _ if same_logical_type(t, i) => fields.push(tf.as_ref().clone()),
                    _ => problems.push(format!(
                        "{:?} is {i} in the data, {t} in the table",
                        tf.name()
                    )),
                }
            }
        }
    }
    for inf in input.fields() {
        if table.field_with_name(inf.name()).is_err() {
            match mode {
                SchemaMode::Merge => fields.push(inf.as_ref().clone().with_nullable(true)),
                SchemaMode::Strict => {
                    problems.push(format!("{:?} is not in the table", inf.name()))
                }
            }
        }
    }
    if !problems.is_empty() {
        let hint = match mode {
            SchemaMode::Strict => {
                " (schema_mode=\"merge\" adds new columns as nullable and widens types)"
            }
            SchemaMode::Merge => "",
        };
        return Err(Error::SchemaMismatch {
            key: key.to_string(),
            reason: format!("{}{hint}", problems.join("; ")),
        });
    }
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        table.metadata().clone(),
    )))
}

/// Whether a column of type `input` holds values of the table's type
/// `table` under another physical layout, so that an append casts it to
/// `table` (exactly: the same values, nulls and order).
///
/// One logical type each: `Utf8`, `LargeUtf8` and `Utf8View`; `Binary`,
/// `LargeBinary` and `BinaryView`; `List`, `LargeList`, `ListView` and
/// `LargeListView` (of one logical item type); a dictionary of strings or
/// binaries and its plain value type; two dictionaries of one logical value
/// type (whatever their key types). Recursively: list items, struct
/// children (matched by name, any order), map keys and values, and
/// dictionary values. Names of list and map item fields and the nullability
/// of nested fields do not count here: the cast enforces the table's
/// nullability on the values, and fails on a null it does not allow. Every
/// other type must be equal. The pair must also be one `arrow_cast` casts.
pub fn same_logical_type(table: &DataType, input: &DataType) -> bool {
    logically_equal(table, input) && arrow_cast::can_cast_types(input, table)
}

fn logically_equal(t: &DataType, i: &DataType) -> bool {
    use DataType as T;
    let strings = |x: &DataType| matches!(x, T::Utf8 | T::LargeUtf8 | T::Utf8View);
    let binaries = |x: &DataType| matches!(x, T::Binary | T::LargeBinary | T::BinaryView);
    let list_item = |x: &DataType| match x {
        T::List(f) | T::LargeList(f) | T::ListView(f) | T::LargeListView(f) => {
            Some(f.data_type().clone())
        }
        _ => None,
    };
    match (t, i) {
        _ if t == i => true,
        _ if strings(t) && strings(i) => true,
        _ if binaries(t) && binaries(i) => true,
        (T::Dictionary(_, tv), T::Dictionary(_, iv)) => logically_equal(tv, iv),
        (T::Dictionary(_, tv), _) => (strings(tv) || binaries(tv)) && logically_equal(tv, i),
        (_, T::Dictionary(_, iv)) => (strings(iv) || binaries(iv)) && logically_equal(t, iv),
        (T::FixedSizeList(tf, n), T::FixedSizeList(inf, m)) => {
            n == m && logically_equal(tf.data_type(), inf.data_type())
        }
        (T::Struct(tf), T::Struct(inf)) => {
            tf.len() == inf.len()
                && tf.iter().all(|f| {
                    inf.iter()
                        .find(|g| g.name() == f.name())
                        .is_some_and(|g| logically_equal(f.data_type(), g.data_type()))
                })
        }
        (T::Map(tf, ts), T::Map(inf, is)) => {
            let pair = |f: &arrow_schema::FieldRef| match f.data_type() {
                T::Struct(kv) if kv.len() == 2 => {
                    Some((kv[0].data_type().clone(), kv[1].data_type().clone()))
                }
                _ => None,
            };
            match (pair(tf), pair(inf)) {
                (Some((tk, tv)), Some((ik, iv))) => {
                    ts == is && logically_equal(&tk, &ik) && logically_equal(&tv, &iv)
                }
                _ => false,
            }
        }
        _ => match (list_item(t), list_item(i)) {
            (Some(ti), Some(ii)) => logically_equal(&ti, &ii),
            _ => false,
        },
    }
}

/// What changed between two schemas, for the history: added columns and
/// columns whose type changed (`name: old -> new`).
pub fn describe_change(old: &Schema, new: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    for f in new.fields() {
        match old.field_with_name(f.name()) {
            Err(_) => out.push(format!("added {:?} {}", f.name(), f.data_type())),
            Ok(o) if o.data_type() != f.data_type() => out.push(format!(
                "widened {:?} {} -> {}",
                f.name(),
                o.data_type(),
                f.data_type()
            )),
            Ok(_) => {}
        }
    }
    out
}

/// How `other` differs from the table's schema `table`, column by column
/// and readably (`"id" is int32 there, int64 in the table`), for errors;
/// empty if they are equal.
pub fn differences(table: &Schema, other: &Schema) -> Vec<String> {
    let null = |f: &Field| {
        if f.is_nullable() {
            "nullable"
        } else {
            "not null"
        }
    };
    let mut out = Vec::new();
    for f in table.fields() {
        match other.field_with_name(f.name()) {
            Err(_) => out.push(format!(
                "{:?} ({}) is missing there",
                f.name(),
                f.data_type()
            )),
            Ok(o) if o.data_type() != f.data_type() => out.push(format!(
                "{:?} is {} there, {} in the table",
                f.name(),
                o.data_type(),
                f.data_type()
            )),
            Ok(o) if o.is_nullable() != f.is_nullable() => out.push(format!(
                "{:?} is {} there, {} in the table",
                f.name(),
                null(o),
                null(f)
            )),
            Ok(_) => {}
        }
    }
    for o in other.fields() {
        if table.field_with_name(o.name()).is_err() {
            out.push(format!(
                "{:?} ({}) is not in the table",
                o.name(),
                o.data_type()
            ));
        }
    }
    if out.is_empty() && table != other {
        let names = |s: &Schema| {
            s.fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(if table.fields() != other.fields() {
            format!(
                "the columns are in another order: {} there, {} in the table",
                names(other),
                names(table)
            )
        } else {
            "the schema metadata differs".to_string()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_column_readably() {
        let table = schema(&[("id", DataType::Int64, false), ("s", DataType::Utf8, true)]);
        let other = schema(&[
            ("id", DataType::Int32, false),
            ("x", DataType::Float64, true),
        ]);
        assert_eq!(
            differences(&table, &other),
            vec![
                "\"id\" is Int32 there, Int64 in the table",
                "\"s\" (Utf8) is missing there",
                "\"x\" (Float64) is not in the table",
            ]
        );
        let swapped = schema(&[("s", DataType::Utf8, true), ("id", DataType::Int64, false)]);
        assert_eq!(
            differences(&table, &swapped),
            vec!["the columns are in another order: s, id there, id, s in the table"]
        );
        assert!(differences(&table, &table).is_empty());
    }

    fn schema(fields: &[(&str, DataType, bool)]) -> Schema {
        Schema::new(
            fields
                .iter()
                .map(|(n, t, null)| Field::new(*n, t.clone(), *null))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn strict_names_every_difference_and_merge_widens_and_adds() {
        let table = schema(&[("id", DataType::Int32, false), ("s", DataType::Utf8, true)]);
        let same_other_order =
            schema(&[("s", DataType::Utf8, true), ("id", DataType::Int32, false)]);
        assert_eq!(
            reconcile(&table, &same_other_order, SchemaMode::Strict, "t")
                .unwrap()
                .as_ref(),
            &table
        );
        let wider = schema(&[
            ("id", DataType::Int64, false),
            ("x", DataType::Float64, false),
        ]);
        let Err(Error::SchemaMismatch { reason, .. }) =
            reconcile(&table, &wider, SchemaMode::Strict, "t")
        else {
            panic!("strict must refuse")
        };
        for name in ["\"id\"", "\"s\"", "\"x\""] {
            assert!(reason.contains(name), "{reason}");
        }
        let merged = reconcile(&table, &wider, SchemaMode::Merge, "t").unwrap();
        assert_eq!(
            merged.as_ref(),
            &schema(&[
                ("id", DataType::Int64, false),
                ("s", DataType::Utf8, true),
                ("x", DataType::Float64, true),
            ])
        );
        assert_eq!(describe_change(&table, &merged).len(), 2);
        // Narrowing, lossy widening and dropping a not-null column are refused.
        for bad in [
            schema(&[("id", DataType::Utf8, false), ("s", DataType::Utf8, true)]),
            schema(&[
                ("id", DataType::Float32, false),
                ("s", DataType::Utf8, true),
            ]),
            schema(&[("s", DataType::Utf8, true)]),
        ] {
            assert!(matches!(
                reconcile(&table, &bad, SchemaMode::Merge, "t"),
                Err(Error::SchemaMismatch { .. })
            ));
        }
    }

    fn item(t: DataType) -> Arc<Field> {
        Arc::new(Field::new("item", t, true))
    }

    /// One column type in each physical variant producers use for it.
    fn variants() -> Vec<Vec<DataType>> {
        use DataType as T;
        let dict = |k: T, v: T| T::Dictionary(Box::new(k), Box::new(v));
        let lists = |t: T| {
            vec![
                T::List(item(t.clone())),
                T::LargeList(Arc::new(Field::new("element", t.clone(), true))),
                T::ListView(item(t.clone())),
                T::LargeListView(item(t)),
            ]
        };
        let st = |s: T, b: T| {
            T::Struct(
                vec![
                    Field::new("s", s, true),
                    Field::new("b", T::List(item(b)), true),
                ]
                .into(),
            )
        };
        let map = |k: T, v: T| {
            let kv =
                T::Struct(vec![Field::new("key", k, false), Field::new("value", v, true)].into());
            T::Map(Arc::new(Field::new("entries", kv, false)), false)
        };
        vec![
            vec![
                T::Utf8,
                T::LargeUtf8,
                T::Utf8View,
                dict(T::Int32, T::Utf8),
                dict(T::UInt32, T::Utf8View),
                dict(T::Int8, T::LargeUtf8),
            ],
            vec![
                T::Binary,
                T::LargeBinary,
                T::BinaryView,
                dict(T::Int16, T::Binary),
            ],
            lists(T::Utf8)
                .into_iter()
                .chain(lists(T::Utf8View))
                .chain(lists(T::LargeUtf8))
                .collect(),
            vec![st(T::Utf8, T::Binary), st(T::Utf8View, T::BinaryView)],
            vec![map(T::Utf8, T::LargeBinary), map(T::Utf8View, T::Binary)],
            vec![T::Int64],
            vec![T::Int32],
            vec![T::Float64],
        ]
    }

    /// A sample column in `t`, the first type of its group in [`variants`].
    fn sample(t: &DataType) -> arrow_array::ArrayRef {
        use arrow_array::builder::*;
        use arrow_array::*;
        use DataType as T;
        let strings = || StringArray::from(vec![Some("a"), None, Some("bb"), Some("a")]);
        let binaries = || {
            let mut b = ListBuilder::new(BinaryBuilder::new());
            b.append_value([Some(b"x".as_ref())]);
            b.append_null();
            b.append_null();
            b.append_value(Vec::<Option<&[u8]>>::new());
            b.finish()
        };
        match t {
            T::Utf8 => Arc::new(strings()),
            T::Binary => Arc::new(BinaryArray::from(vec![
                Some(b"a".as_ref()),
                None,
                Some(b""),
                Some(b"bb"),
            ])),
            T::List(_) => {
                let mut b = ListBuilder::new(StringBuilder::new());
                b.append_value([Some("a"), None]);
                b.append_null();
                b.append_value(Vec::<Option<&str>>::new());
                b.append_value([Some("bb")]);
                Arc::new(b.finish())
            }
            T::Struct(fields) => Arc::new(
                StructArray::try_new(
                    fields.clone(),
                    vec![Arc::new(strings()), Arc::new(binaries())],
                    Some(vec![true, false, true, true].into()),
                )
                .unwrap(),
            ),
            T::Map(..) => {
                let names = MapFieldNames {
                    entry: "entries".into(),
                    key: "key".into(),
                    value: "value".into(),
                };
                let mut b =
                    MapBuilder::new(Some(names), StringBuilder::new(), LargeBinaryBuilder::new());
                b.keys().append_value("k");
                b.values().append_value(b"v");
                b.append(true).unwrap();
                b.append(false).unwrap();
                b.append(true).unwrap();
                b.keys().append_value("j");
                b.values().append_null();
                b.append(true).unwrap();
                Arc::new(b.finish())
            }
            T::Int64 => Arc::new(Int64Array::from(vec![Some(1), None, Some(2), Some(3)])),
            T::Int32 => Arc::new(Int32Array::from(vec![Some(1), None, Some(2), Some(3)])),
            T::Float64 => Arc::new(Float64Array::from(vec![Some(1.5), None, Some(2.0), None])),
            other => unreachable!("no sample for {other}"),
        }
    }

    #[test]
    fn physical_variants_are_one_logical_type_and_cast_exactly() {
        let groups = variants();
        for (g, group) in groups.iter().enumerate() {
            let base = sample(&group[0]);
            assert_eq!(base.data_type(), &group[0]);
            for t in group {
                let as_t = arrow_cast::cast(&base, t).unwrap();
                for i in group {
                    assert!(same_logical_type(t, i), "{i} should be one type with {t}");
                    // An append of `i` data to a `t` table: cast, then read
                    // back as the first variant, the values are the same.
                    let data = arrow_cast::cast(&base, i).unwrap();
                    let stored = arrow_cast::cast(&data, t).unwrap();
                    assert_eq!(stored.data_type(), t);
                    assert_eq!(&stored, &as_t, "{i} -> {t}");
                    let back = arrow_cast::cast(&stored, &group[0]).unwrap();
                    assert_eq!(&back, &base, "{i} -> {t} -> {}", group[0]);
                }
                for (h, other) in groups.iter().enumerate() {
                    if h != g {
                        for i in other {
                            assert!(!same_logical_type(t, i), "{i} is not {t}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn views_reconcile_to_the_tables_types_in_both_modes() {
        use DataType as T;
        let table = schema(&[
            ("s", T::Utf8, true),
            ("b", T::Binary, true),
            ("l", T::List(item(T::Utf8)), true),
            ("i", T::Int64, false),
        ]);
        // What polars exports for the same columns.
        let polars = schema(&[
            ("s", T::Utf8View, true),
            ("b", T::BinaryView, true),
            ("l", T::LargeList(item(T::Utf8View)), true),
            ("i", T::Int64, true),
        ]);
        for mode in [SchemaMode::Strict, SchemaMode::Merge] {
            let out = reconcile(&table, &polars, mode, "t").unwrap();
            assert_eq!(out.as_ref(), &table, "{mode:?}");
            assert!(describe_change(&table, &out).is_empty());
            // And the reverse: a table created from polars takes pyarrow's.
            let out = reconcile(&polars, &table, mode, "t").unwrap();
            assert_eq!(out.as_ref(), &polars, "{mode:?}");
        }
        // Documented widening stays: merge makes string large_string.
        let large = schema(&[
            ("s", T::LargeUtf8, true),
            ("b", T::Binary, true),
            ("l", T::List(item(T::Utf8)), true),
            ("i", T::Int64, false),
        ]);
        let merged = reconcile(&table, &large, SchemaMode::Merge, "t").unwrap();
        assert_eq!(merged.field(0).data_type(), &T::LargeUtf8);
        let strict = reconcile(&table, &large, SchemaMode::Strict, "t").unwrap();
        assert_eq!(strict.as_ref(), &table);
        // Another logical type is still refused, naming the field.
        let polars_with = |name: &str, t: T| {
            let fields: Vec<Field> = polars
                .fields()
                .iter()
                .map(|f| {
                    let f = f.as_ref().clone();
                    if f.name() == name {
                        f.with_data_type(t.clone())
                    } else {
                        f
                    }
                })
                .collect();
            Schema::new(fields)
        };
        for (name, t) in [
            ("s", T::Int64),
            ("i", T::Utf8View),
            ("l", T::List(item(T::Int64))),
            ("b", T::Utf8View),
        ] {
            let bad = polars_with(name, t.clone());
            for mode in [SchemaMode::Strict, SchemaMode::Merge] {
                let Err(Error::SchemaMismatch { reason, .. }) = reconcile(&table, &bad, mode, "t")
                else {
                    panic!("{name}: {t} must be refused")
                };
                assert!(reason.contains(&format!("{name:?}")), "{reason}");
            }
        }
    }
}
