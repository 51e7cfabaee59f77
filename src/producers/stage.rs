//! One stage's incremental update (the seed's Implementation 2), as
//! streaming steps over sorted data.
//!
//! A stage's state is its **content** `(K_t, K_s, V_t)`, sorted by
//! `(K_t, K_s)`, and its **key-mappings** `(K_s, K_t)`, sorted by
//! `(K_s, K_t)`. An update names the source keys that changed (deleted, or
//! upserted with new values) and carries what `Produce` emitted for the
//! upserted ones. Then:
//!
//! 1. [`old_targets`]: one forward scan of the key-mappings beside the
//!    changed source keys finds every `(K_s, K_t)` they produced before;
//! 2. [`new_content`]: the old content without the rows of changed source
//!    keys, merged with the new rows (only those are sorted);
//! 3. [`new_key_mappings`]: the same for the key-mappings;
//! 4. [`update_rows`]: for every target key touched (old or new), all of its
//!    rows in the new content, or one null-valued row if none is left: the
//!    `(K_t, V_t?)` the stages downstream consume.
//!
//! Sorting touches only the instructions (the new rows and the touched
//! target keys), never the content; every other step is a forward scan.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::{new_null_array, BooleanArray, RecordBatch};
use arrow_row::OwnedRow;
use arrow_schema::{Field, Schema, SchemaRef};

use super::keys::KeyEncoder;
use super::merge::merge_sorted;
use super::sort::{ExternalSorter, BATCH_ROWS};
use super::BatchIter;
use crate::error::{Error, Result};

/// The key columns of a stage's content.
#[derive(Debug, Clone)]
pub struct StageKeys {
    /// `K_t`: the target key columns.
    pub target: Vec<String>,
    /// `K_s`: the source key columns.
    pub source: Vec<String>,
}

impl StageKeys {
    /// `(K_t, K_s)`: the content's sort key.
    pub fn content_key(&self) -> Vec<String> {
        self.target.iter().chain(&self.source).cloned().collect()
    }

    /// `(K_s, K_t)`: the key-mappings' columns and sort key.
    pub fn mapping_key(&self) -> Vec<String> {
        self.source.iter().chain(&self.target).cloned().collect()
    }

    /// The key-mappings' schema, from the content's.
    pub fn mapping_schema(&self, content: &Schema) -> Result<SchemaRef> {
        let idx = crate::parquet::decode::column_indices(content, &self.mapping_key())?;
        Ok(Arc::new(content.project(&idx)?))
    }
}

/// The rows of `batch` whose `key` columns are not in `drop`.
fn without(
    batch: &RecordBatch,
    encoder: &KeyEncoder,
    drop: &HashSet<OwnedRow>,
) -> Result<RecordBatch> {
    if drop.is_empty() {
        return Ok(batch.clone());
    }
    let rows = encoder.rows(batch)?;
    let keep: BooleanArray = (0..batch.num_rows())
        .map(|i| Some(!drop.contains(&rows.row(i).owned())))
        .collect();
    Ok(arrow_select::filter::filter_record_batch(batch, &keep)?)
}

/// The source keys of `changed` (batches of at least the source columns) as rows.
fn source_set(
    schema: &Schema,
    keys: &StageKeys,
    changed: &[RecordBatch],
) -> Result<HashSet<OwnedRow>> {
    let enc = KeyEncoder::new(schema, &keys.source)?;
    let mut set = HashSet::new();
    for b in changed {
        let rows = enc.rows(b)?;
        for i in 0..b.num_rows() {
            set.insert(rows.row(i).owned());
        }
    }
    Ok(set)
}

/// Step 1: the `(K_s, K_t)` rows the changed source keys produced before,
/// by one forward scan of the key-mappings (sorted by `K_s`). `changed`
/// holds (at least) the source key columns.
pub fn old_targets(
    mapping_schema: &SchemaRef,
    keys: &StageKeys,
    key_mappings: BatchIter,
    changed: &[RecordBatch],
) -> Result<Vec<RecordBatch>> {
    let set = source_set(mapping_schema, keys, changed)?;
    let enc = KeyEncoder::new(mapping_schema, &keys.source)?;
    let mut out = Vec::new();
    for b in key_mappings {
        let b = b?;
        let rows = enc.rows(&b)?;
        let hit: BooleanArray = (0..b.num_rows())
            .map(|i| Some(set.contains(&rows.row(i).owned())))
            .collect();
        let kept = arrow_select::filter::filter_record_batch(&b, &hit)?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}

/// Sort `rows` (batches of `schema`) by `key` within `budget`.
fn sorted(
    schema: &SchemaRef,
    key: &[String],
    rows: Vec<RecordBatch>,
    budget: usize,
) -> Result<BatchIter> {
    let mut s = ExternalSorter::new(schema.clone(), key, budget, None)?;
    for b in rows {
        s.push(b)?;
    }
    s.finish()
}

/// Step 2: the new content: the old content (sorted by `(K_t, K_s)`)
/// without the rows of `changed` source keys, merged with `produced` (the
/// new rows of the upserted source keys, any order; only they are sorted).
pub fn new_content(
    schema: &SchemaRef,
    keys: &StageKeys,
    content: BatchIter,
    changed: &[RecordBatch],
    produced: Vec<RecordBatch>,
    budget: usize,
) -> Result<BatchIter> {
    let set = source_set(schema, keys, changed)?;
    let enc = KeyEncoder::new(schema, &keys.source)?;
    let kept: BatchIter = Box::new(content.map(move |b| without(&b?, &enc, &set)));
    let fresh = sorted(schema, &keys.content_key(), produced, budget)?;
    merge_sorted(
        schema.clone(),
        &keys.content_key(),
        vec![kept, fresh],
        BATCH_ROWS,
    )
}

/// Step 3: the new key-mappings, from the old ones and the new content rows.
pub fn new_key_mappings(
    content_schema: &SchemaRef,
    keys: &StageKeys,
    key_mappings: BatchIter,
    changed: &[RecordBatch],
    produced: &[RecordBatch],
    budget: usize,
) -> Result<BatchIter> {
    let mapping_schema = keys.mapping_schema(content_schema)?;
    let idx = crate::parquet::decode::column_indices(content_schema, &keys.mapping_key())?;
    let fresh_rows = produced
        .iter()
        .map(|b| b.project(&idx).map_err(Error::from))
        .collect::<Result<Vec<_>>>()?;
    let set = source_set(&mapping_schema, keys, changed)?;
    let enc = KeyEncoder::new(&mapping_schema, &keys.source)?;
    let kept: BatchIter = Box::new(key_mappings.map(move |b| without(&b?, &enc, &set)));
    let fresh = sorted(&mapping_schema, &keys.mapping_key(), fresh_rows, budget)?;
    merge_sorted(
        mapping_schema,
        &keys.mapping_key(),
        vec![kept, fresh],
        BATCH_ROWS,
    )
}

/// Step 4: the update the stages downstream consume, `(K_t, V_t...)` with
/// nullable values: for every target key in `touched` (batches holding the
/// target key columns: the old targets and the new rows), all of its rows
/// in `content` (the new content, sorted), or one row of nulls if it has
/// none left. Sorted by `K_t`; a forward scan of the content.
pub fn update_rows(
    schema: &SchemaRef,
    keys: &StageKeys,
    content: BatchIter,
    touched: &[RecordBatch],
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    // The update's columns: the target key, then the values (nullable).
    let source: HashSet<&String> = keys.source.iter().collect();
    let mut fields: Vec<Field> = Vec::new();
    let mut cols = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        if !source.contains(f.name()) {
            let nullable = !keys.target.contains(f.name());
            fields.push(
                f.as_ref()
                    .clone()
                    .with_nullable(nullable || f.is_nullable()),
            );
            cols.push(i);
        }
    }
    let out_schema = Arc::new(Schema::new(fields));
    // The touched target keys, as rows, and one key batch per distinct key.
    let target_schema = {
        let idx = crate::parquet::decode::column_indices(schema, &keys.target)?;
        Arc::new(schema.project(&idx)?)
    };
    let tenc = KeyEncoder::new(&target_schema, &keys.target)?;
    let mut wanted: Vec<(OwnedRow, RecordBatch)> = Vec::new();
    let mut seen = HashSet::new();
    for b in touched {
        let idx = crate::parquet::decode::column_indices(&b.schema(), &keys.target)?;
        let kb = b.project(&idx)?;
        let rows = tenc.rows(&kb)?;
        for i in 0..kb.num_rows() {
            let r = rows.row(i).owned();
            if seen.insert(r.clone()) {
                wanted.push((r, kb.slice(i, 1)));
            }
        }
    }
    wanted.sort_by(|a, b| a.0.row().cmp(&b.0.row()));
    let cenc = KeyEncoder::new(schema, &keys.target)?;
    let mut out = Vec::new();
    let mut next = 0;
    let mut found = vec![false; wanted.len()];
    for b in content {
        let b = b?;
        if next >= wanted.len() {
            break;
        }
        let rows = cenc.rows(&b)?;
        let mut take = Vec::new();
        for i in 0..b.num_rows() {
            let r = rows.row(i);
            while next < wanted.len() && wanted[next].0.row() < r {
                next += 1;
            }
            if next < wanted.len() && wanted[next].0.row() == r {
                found[next] = true;
                take.push(i as u32);
            }
        }
        if !take.is_empty() {
            let picked = arrow_select::take::take_record_batch(
                &b.project(&cols)?,
                &arrow_array::UInt32Array::from(take),
            )?;
            out.push(RecordBatch::try_new(
                out_schema.clone(),
                picked.columns().to_vec(),
            )?);
        }
    }
    // Keys with no rows left: one deletion row each (values null).
    let mut deletions = Vec::new();
    for (i, (_, key)) in wanted.iter().enumerate() {
        if !found[i] {
            let columns = out_schema
                .fields()
                .iter()
                .map(|f| match key.column_by_name(f.name()) {
                    Some(c) => c.clone(),
                    None => new_null_array(f.data_type(), 1),
                })
                .collect();
            deletions.push(RecordBatch::try_new(out_schema.clone(), columns)?);
        }
    }
    if !deletions.is_empty() {
        // Both are sorted by the target key already: merge, do not sort.
        let found: BatchIter = Box::new(out.into_iter().map(Ok));
        let gone: BatchIter = Box::new(deletions.into_iter().map(Ok));
        out = merge_sorted(
            out_schema.clone(),
            &keys.target,
            vec![found, gone],
            BATCH_ROWS,
        )?
        .collect::<Result<Vec<_>>>()?;
    }
    Ok((out_schema, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, Int64Array, StringArray};
    use arrow_schema::DataType;

    fn keys() -> StageKeys {
        StageKeys {
            target: vec!["kt".into()],
            source: vec!["ks".into()],
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("kt", DataType::Int64, false),
            Field::new("ks", DataType::Int64, false),
            Field::new("v", DataType::Utf8, false),
        ]))
    }

    fn content(rows: &[(i64, i64, &str)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    }

    fn triples(stream: impl Iterator<Item = Result<RecordBatch>>) -> Vec<(i64, i64, String)> {
        let mut out = Vec::new();
        for b in stream {
            let b = b.unwrap();
            let (a, c) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
            );
            for i in 0..b.num_rows() {
                let v = match b.schema().field(2).data_type() {
                    DataType::Utf8 => b.column(2).as_string::<i32>().value(i).to_string(),
                    _ => String::new(),
                };
                out.push((a.value(i), c.value(i), v));
            }
        }
        out
    }

    /// The two Int64 columns of key-mapping batches, as pairs.
    fn pairs(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
        batches
            .iter()
            .flat_map(|b| {
                let (s, t) = (
                    b.column(0).as_primitive::<Int64Type>(),
                    b.column(1).as_primitive::<Int64Type>(),
                );
                (0..b.num_rows())
                    .map(|i| (s.value(i), t.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The seed's worked example: content (105, 6, apple), (105, 9, banana),
    /// (108, 4, mango); source key 6 is updated to produce (107, 6, cherry).
    #[test]
    fn the_seeds_worked_example() {
        let k = keys();
        let old = content(&[(105, 6, "apple"), (105, 9, "banana"), (108, 4, "mango")]);
        let ms = k.mapping_schema(&schema()).unwrap();
        let old_maps = {
            let idx = crate::parquet::decode::column_indices(&schema(), &k.mapping_key()).unwrap();
            let m = old.project(&idx).unwrap();
            let mut s = ExternalSorter::new(ms.clone(), &k.mapping_key(), 1 << 20, None).unwrap();
            s.push(m).unwrap();
            s.finish().unwrap().collect::<Result<Vec<_>>>().unwrap()
        };
        let changed = vec![RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("ks", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![6]))],
        )
        .unwrap()];
        let produced = vec![content(&[(107, 6, "cherry")])];
        // Step 1: 6 produced 105 before: (6, 105) goes; (9, 105) is untouched.
        let gone = old_targets(
            &ms,
            &k,
            Box::new(old_maps.clone().into_iter().map(Ok)),
            &changed,
        )
        .unwrap();
        assert_eq!(pairs(&gone), [(6, 105)]);
        // Step 2: the new content.
        let c = new_content(
            &schema(),
            &k,
            Box::new(std::iter::once(Ok(old))),
            &changed,
            produced.clone(),
            1 << 20,
        )
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap();
        assert_eq!(
            triples(c.clone().into_iter().map(Ok)),
            [
                (105, 9, "banana".into()),
                (107, 6, "cherry".into()),
                (108, 4, "mango".into())
            ]
        );
        // Step 3: the new key-mappings, sorted by (K_s, K_t).
        let m = new_key_mappings(
            &schema(),
            &k,
            Box::new(old_maps.into_iter().map(Ok)),
            &changed,
            &produced,
            1 << 20,
        )
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap();
        assert_eq!(pairs(&m), [(4, 108), (6, 107), (9, 105)]);
        // Step 4: the update: every row of 105 (not only 6's), and 107's.
        let mut touched = gone;
        touched.extend(produced);
        let (us, u) =
            update_rows(&schema(), &k, Box::new(c.into_iter().map(Ok)), &touched).unwrap();
        assert_eq!(us.field(0).name(), "kt");
        let got: Vec<(i64, Option<String>)> = u
            .iter()
            .flat_map(|b| {
                let t = b.column(0).as_primitive::<Int64Type>();
                let v = b.column(1).as_string::<i32>();
                (0..b.num_rows())
                    .map(|i| (t.value(i), v.is_valid(i).then(|| v.value(i).to_string())))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            got,
            [(105, Some("banana".into())), (107, Some("cherry".into()))]
        );

        // Deleting source key 4 leaves 108 with no rows: a null-valued row.
        let only4 = vec![RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("ks", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![4]))],
        )
        .unwrap()];
        let before = content(&[(105, 9, "banana"), (108, 4, "mango")]);
        let after: Vec<RecordBatch> = new_content(
            &schema(),
            &k,
            Box::new(std::iter::once(Ok(before.clone()))),
            &only4,
            vec![],
            1 << 20,
        )
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap();
        let touched = vec![content(&[(108, 4, "mango")])];
        let (_, u) =
            update_rows(&schema(), &k, Box::new(after.into_iter().map(Ok)), &touched).unwrap();
        assert_eq!(u.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert!(u[0].column(1).is_null(0));
    }
}
