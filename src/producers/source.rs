//! A source's update: the user's changes applied to its stored content.
//!
//! The changes are upserts (rows, in any order) and deleted keys. Every key
//! upserted or deleted loses all of its earlier rows; upserted keys get the
//! new rows. Only the upserts and the changed keys are sorted; the content
//! parts holding a changed key are rewritten, the others kept by reference.
//! The update handed downstream is every row of each upserted key and the
//! deleted keys.

use arrow_array::{Array, RecordBatch};
use arrow_schema::Schema;

use super::keys::KeyEncoder;
use super::manifest::{NodeState, UpdateFiles};
use super::merge::merge_sorted;
use super::node::{Env, Kind, NodeView};
use super::partset::{key_set, Change, Remove};
use super::run::write_deleted;
use super::sort::BATCH_ROWS;
use super::BatchIter;
use crate::error::{Error, Result};

/// The deleted keys as a set, for [`check_batch`].
fn deleted_set(key: &[String], deletes: &[RecordBatch]) -> Result<super::keys::KeySet> {
    match deletes.iter().find(|b| b.num_rows() > 0) {
        None => Ok(super::keys::key_set_new()),
        Some(first) => key_set(deletes, &KeyEncoder::new(&first.schema(), key)?),
    }
}

/// The distinct rows of `keys` (a batch of key columns), copied: a
/// column taken from a batch that came through the C Data Interface
/// keeps every column of that batch alive, and a change's keys are kept
/// until the change is applied.
fn distinct_copy(keys: &RecordBatch, encoder: &KeyEncoder) -> Result<RecordBatch> {
    let rows = encoder.rows(keys)?;
    let mut seen = super::keys::key_set_new();
    let mut at = Vec::new();
    for i in 0..rows.num_rows() {
        let r = rows.row(i);
        let new = match i {
            0 => true,
            _ => rows.row(i - 1) != r,
        };
        if new && seen.insert(Box::from(r.as_ref())) {
            at.push(i as u32);
        }
    }
    let at = arrow_array::UInt32Array::from(at);
    Ok(arrow_select::take::take_record_batch(keys, &at)?)
}

/// `InvalidArgument` if a key of `batch` is in `deleted` (the seed allows
/// a deletion or upserts per key, not both).
fn check_batch(key: &[String], batch: &RecordBatch, deleted: &super::keys::KeySet) -> Result<()> {
    if deleted.is_empty() || batch.num_rows() == 0 {
        return Ok(());
    }
    let enc = KeyEncoder::new(&batch.schema(), key)?;
    let rows = enc.rows(batch)?;
    for i in 0..batch.num_rows() {
        if deleted.contains(rows.row(i).as_ref()) {
            let shown = crate::parquet::stats::to_json(batch.column(enc.indices()[0]).as_ref(), i);
            return Err(Error::InvalidArgument(format!(
                "key {} is both upserted and deleted in one update: send either a \
                 deletion or its new rows (upserts replace every earlier row of a key)",
                shown.map_or("null".into(), |v| v.to_string())
            )));
        }
    }
    Ok(())
}

/// `InvalidArgument` if a key is both upserted and deleted. Pure
/// computation: callers run it before any I/O.
pub fn check_changes(
    key: &[String],
    upserts: &[RecordBatch],
    deletes: &[RecordBatch],
) -> Result<()> {
    let deleted = deleted_set(key, deletes)?;
    upserts
        .iter()
        .try_for_each(|b| check_batch(key, b, &deleted))
}

/// `SchemaMismatch` if `batch` holds a null in a column `schema` declares
/// not null (a key column: keys are never null).
fn check_not_null(node: &NodeView, schema: &Schema, batch: &RecordBatch, what: &str) -> Result<()> {
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        if !f.is_nullable() && c.null_count() > 0 {
            return Err(Error::SchemaMismatch {
                key: node.name.clone(),
                reason: format!(
                    "source {:?} {what}: column {:?} holds {} null(s); keys are never null",
                    node.name,
                    f.name(),
                    c.null_count()
                ),
            });
        }
    }
    Ok(())
}

/// Apply `upserts` (public columns, any order, streamed: sorted within the
/// sort budget) and `deletes` (key columns) to the source `node`. A key
/// both upserted and deleted fails before anything is written. Returns its
/// new state and every object written; nothing is committed here, and a
/// failure removes what it wrote.
pub fn apply(
    env: &Env,
    node: &NodeView,
    upserts: BatchIter,
    deletes: Vec<RecordBatch>,
) -> Result<(NodeState, Vec<String>)> {
    let (content, update, created) =
        apply_to(env, node, &node.state.content, upserts, deletes, None)?;
    Ok((
        NodeState {
            content,
            mappings: Vec::new(),
            derived_prefix: 0,
            update,
        },
        created,
    ))
}

/// [`apply`] to `parts` (the node's content parts, or those of one key
/// range); with `scope`, a changed key outside it is `InvalidArgument`
/// (before anything is written). Returns the new parts in place of
/// `parts`, the update, and every object written.
pub(super) fn apply_to(
    env: &Env,
    node: &NodeView,
    parts: &[super::parts::RangePart],
    upserts: BatchIter,
    deletes: Vec<RecordBatch>,
    scope: Option<&super::key_range::RangeFilter>,
) -> Result<(Vec<super::parts::RangePart>, UpdateFiles, Vec<String>)> {
    if node.kind != Kind::Source {
        return Err(Error::InvalidArgument(format!(
            "{:?} is not a source",
            node.name
        )));
    }
    let schema = node.public_schema()?;
    let ks = node.key_schema()?;
    let kidx = crate::parquet::decode::column_indices(&schema, &node.key)?;
    let deletes = deletes
        .into_iter()
        .map(|d| {
            check_not_null(node, &ks, &d, "deletes")?;
            if let Some(f) = scope {
                f.check(&d, &node.key, "deletes")?;
            }
            RecordBatch::try_new(ks.clone(), d.columns().to_vec()).map_err(Error::from)
        })
        .collect::<Result<Vec<_>>>()?;
    let deleted = deleted_set(&node.key, &deletes)?;
    let stored = !node.state.content.is_empty();
    let mut sorter = env.sorter(schema.clone(), &node.key)?;
    // The changed keys matter only where rows are stored (to find them).
    let mut keys = Vec::new();
    let key_enc = KeyEncoder::new(&ks, &node.key)?;
    for b in upserts {
        let b = b?;
        check_not_null(node, &schema, &b, "upserts")?;
        let b = RecordBatch::try_new(schema.clone(), b.columns().to_vec())?;
        check_batch(&node.key, &b, &deleted)?;
        if let Some(f) = scope {
            f.check(&b, &node.key, "upserts")?;
        }
        if stored {
            let k = RecordBatch::try_new(ks.clone(), b.project(&kidx)?.columns().to_vec())?;
            keys.push(distinct_copy(&k, &key_enc)?);
        }
        sorter.push(b)?;
    }
    keys.extend(deletes);
    let changed = env.sorted_distinct(&ks, &node.key, keys)?;
    let remove = if stored {
        Remove::Keys {
            key: node.key.clone(),
            set: key_set(&changed, &KeyEncoder::new(&ks, &node.key)?)?,
        }
    } else {
        Remove::Nothing
    };
    let token = env.token();
    let base = format!("nodes/{}", node.name);
    let layout = node.content_layout(env);
    let c = layout.rewrite(
        parts,
        Change {
            remove,
            touch: Box::new(changed.into_iter().map(Ok)),
            adds: sorter.finish()?,
            collect_removed: false,
            select: true,
            prefix: format!("{base}/content/{token}"),
            derived: None,
        },
    )?;
    let mut created = c.created.clone();
    match write_deleted(
        env,
        node,
        &format!("{base}/update/{token}"),
        (c.deleted, c.deleted_file),
        &mut created,
    ) {
        Ok(deleted) => Ok((
            c.parts,
            UpdateFiles {
                rows: c.selected,
                deleted,
            },
            created,
        )),
        Err(e) => {
            let _ = crate::runtime::block_on(env.store.delete_many(&created));
            Err(e)
        }
    }
}

/// A merge's update (the seed's three layers): the keys any feeder's update
/// changed; for each feeder, its *augmented update* over those keys (its
/// update's rows where it changed the key, else its content's); merged by
/// key, each key with every feeder's rows, or deleted if none has any.
/// Written as the merge's update (a merge stores no content).
pub fn merge_update(env: &Env, node: &NodeView) -> Result<(NodeState, Vec<String>)> {
    if node.kind != Kind::Merge {
        return Err(Error::InvalidArgument(format!(
            "{:?} is not a merge",
            node.name
        )));
    }
    let feeders: Vec<&NodeView> = node.feeders.iter().collect();
    let schema = node.public_schema()?;
    let keys = super::node::union_of_update_keys(env, &feeders, &node.key)?;
    if keys.is_empty() {
        return Ok((NodeState::default(), Vec::new()));
    }
    let mut inputs: Vec<BatchIter> = Vec::new();
    for f in &feeders {
        inputs.push(f.augmented(env, &keys)?);
    }
    let wrap = schema.clone();
    let inputs: Vec<BatchIter> = inputs
        .into_iter()
        .map(|i| -> BatchIter {
            let s = wrap.clone();
            Box::new(i.map(move |b| {
                RecordBatch::try_new(s.clone(), b?.columns().to_vec()).map_err(Error::from)
            }))
        })
        .collect();
    let merged = merge_sorted(schema.clone(), &node.key, inputs, BATCH_ROWS)?;
    let token = env.token();
    let base = format!("nodes/{}", node.name);
    let layout = node.content_layout(env);
    let u = layout.rewrite(
        &[],
        Change {
            remove: Remove::Nothing,
            touch: Box::new(keys.into_iter().map(Ok)),
            adds: merged,
            collect_removed: false,
            select: true,
            prefix: format!("{base}/update/{token}"),
            derived: None,
        },
    )?;
    let mut created = u.created.clone();
    match write_deleted(
        env,
        node,
        &format!("{base}/update/{token}-d"),
        (u.deleted, u.deleted_file),
        &mut created,
    ) {
        Ok(deleted) => Ok((
            NodeState {
                content: Vec::new(),
                mappings: Vec::new(),
                derived_prefix: 0,
                update: UpdateFiles {
                    rows: u.selected,
                    deleted,
                },
            },
            created,
        )),
        Err(e) => {
            let _ = crate::runtime::block_on(env.store.delete_many(&created));
            Err(e)
        }
    }
}
