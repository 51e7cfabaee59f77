//! A table's schema against an append's: the strict check, and the merge
//! that `schema_mode="merge"` allows (ODF's schema-in-metadata: every
//! version carries its full schema, and a change is an explicit new one).
//!
//! Merging adds the input's new columns as nullable, and widens a column to
//! a type that holds every value of the old one (int32 to int64, float32 to
//! float64, string to large_string, ...). Files written before keep their
//! schema (the manifest records it) and are read with nulls for the columns
//! they lack and their values cast to the wider types.

use std::sync::Arc;

use arrow_schema::{Field, Schema, SchemaRef};

use crate::error::{Error, Result};

/// How an append's schema may differ from the table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaMode {
    /// The same columns with the same types (any order).
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
/// the table's schema unchanged when the columns match (in any order).
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::DataType;

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
}
