//! Pruning by statistics: which segments of a version, and which data
//! files, can hold rows matching a predicate, from the statistics the
//! manifest records (no I/O), each unit read under the schema it was
//! written with.

use std::collections::BTreeMap;

use arrow_schema::{Schema, SchemaRef};

use super::manifest_key;
use super::snapshot::{DataFile, TableManifest};
use crate::error::{Error, Result};
use crate::parquet::filter::{Predicate, UnitStats};
use crate::parquet::stats;

/// The schema each data file of a version was written with, decoded once
/// per schema (a version holds its own and those of files older than its
/// last schema change).
pub struct FileSchemas {
    current: SchemaRef,
    older: BTreeMap<String, SchemaRef>,
}

impl FileSchemas {
    /// The schemas of `manifest` (read from `path`).
    pub fn of(manifest: &TableManifest, path: &str) -> Result<Self> {
        let mut older = BTreeMap::new();
        for id in manifest.file_schemas.keys() {
            older.insert(id.clone(), manifest.schema_named(Some(id), path)?);
        }
        Ok(Self {
            current: manifest.arrow_schema(path)?,
            older,
        })
    }

    /// The schema `file` was written with.
    pub fn get(&self, file: &DataFile) -> Result<&SchemaRef> {
        self.named(file.schema.as_deref())
            .map_err(|_| Error::ManifestCorrupted {
                path: file.path.clone(),
                reason: format!(
                    "it names schema {:?}, which the manifest lacks",
                    file.schema
                ),
            })
    }

    /// The schema with id `id` (the version's own for `None`).
    pub fn named(&self, id: Option<&str>) -> Result<&SchemaRef> {
        match id {
            None => Ok(&self.current),
            Some(id) => self.older.get(id).ok_or_else(|| Error::ManifestCorrupted {
                path: id.to_string(),
                reason: format!("schema {id:?} is named but the manifest lacks it"),
            }),
        }
    }
}

/// Whether the manifest's statistics let `file` hold rows matching `pred`
/// (bound to the version's schema); `file_schema` is the file's own.
pub fn file_may_match(file: &DataFile, file_schema: &Schema, pred: &Predicate) -> Result<bool> {
    stats_may_match(file.total_rows, &file.columns, file_schema, pred)
}

/// Whether `rows` rows with statistics `columns` (a file's, or a segment's
/// merged over its files) can hold rows matching `pred`.
pub fn stats_may_match(
    rows: u64,
    columns: &BTreeMap<String, stats::ColumnStats>,
    file_schema: &Schema,
    pred: &Predicate,
) -> Result<bool> {
    let keep = units_may_match(&[rows], &[columns], file_schema, pred)?;
    Ok(keep.first().copied().unwrap_or(true))
}

/// [`stats_may_match`] for many units at once (files or segments written
/// with one schema), as arrays of one entry per unit: one comparison per
/// condition for all of them. The manifest records statistics as JSON
/// values of the unit's own type (a day count for a `date32` file,
/// milliseconds for `date64`), so they are read under `file_schema`: a
/// predicate in a wider type then compares them cast up, exactly (see
/// [`Predicate::bind`]).
pub fn units_may_match(
    rows: &[u64],
    columns: &[&BTreeMap<String, stats::ColumnStats>],
    file_schema: &Schema,
    pred: &Predicate,
) -> Result<Vec<bool>> {
    pred.may_match(rows, |c| {
        let Ok(field) = file_schema.field_with_name(c) else {
            return Ok(UnitStats::default());
        };
        let of: Vec<Option<&stats::ColumnStats>> = columns.iter().map(|m| m.get(c)).collect();
        let mins: Vec<_> = of.iter().map(|s| s.and_then(|s| s.min.as_ref())).collect();
        let maxs: Vec<_> = of.iter().map(|s| s.and_then(|s| s.max.as_ref())).collect();
        let nulls: Vec<Option<u64>> = of.iter().map(|s| s.and_then(|s| s.null_count)).collect();
        Ok(UnitStats {
            mins: stats::from_json(&mins, field.data_type()),
            maxs: stats::from_json(&maxs, field.data_type()),
            null_counts: Some(arrow_array::UInt64Array::from(nulls)),
        })
    })
}

/// Which segments of `m` (a root) can hold rows matching `predicate`, by
/// their statistics. No I/O.
pub fn segments_may_match(
    m: &TableManifest,
    table: &str,
    predicate: &Predicate,
) -> Result<Vec<bool>> {
    let path = manifest_key(table, m.version);
    let schema = m.arrow_schema(&path)?;
    let bound = predicate.clone().bind(&schema)?;
    let schemas = FileSchemas::of(m, &path)?;
    which_may_match(
        m.segments
            .iter()
            .map(|r| (r.schema.as_deref(), r.total_rows, &r.columns)),
        &schemas,
        &bound,
    )
}

/// The statistics of one unit: its schema id, rows and per-column stats.
type Unit<'a> = (
    Option<&'a str>,
    u64,
    &'a BTreeMap<String, stats::ColumnStats>,
);

/// Which of `units` can hold rows matching `pred`, grouped by schema so
/// that each group is compared at once.
pub(super) fn which_may_match<'a>(
    units: impl Iterator<Item = Unit<'a>>,
    schemas: &FileSchemas,
    pred: &Predicate,
) -> Result<Vec<bool>> {
    type Group<'a> = (
        Vec<usize>,
        Vec<u64>,
        Vec<&'a BTreeMap<String, stats::ColumnStats>>,
    );
    let mut groups: BTreeMap<Option<&'a str>, Group<'a>> = BTreeMap::new();
    let mut n = 0;
    for (i, (schema, rows, columns)) in units.enumerate() {
        let g = groups.entry(schema).or_default();
        g.0.push(i);
        g.1.push(rows);
        g.2.push(columns);
        n = i + 1;
    }
    let mut keep = vec![true; n];
    for (schema, (at, rows, columns)) in groups {
        let file_schema = schemas.named(schema)?;
        let may = units_may_match(&rows, &columns, file_schema, pred)?;
        for (i, k) in at.into_iter().zip(may) {
            keep[i] = k;
        }
    }
    Ok(keep)
}
