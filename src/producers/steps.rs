//! The steps of a stage update (see [`super::run`]), as functions that the
//! single-process [`super::run::StageRun::finish`] and the range phases of
//! [`super::phases`] both call: each works on whatever part list it is
//! given (a stage's whole list, or the parts of one key range).

use arrow_array::RecordBatch;

use super::keys::{KeyEncoder, KeySet};
use super::merge::dedup_sorted;
use super::node::{Env, NodeView};
use super::parts::RangePart;
use super::partset::{key_set, Change, Remove, Rewritten};
use super::BatchIter;
use crate::error::{Error, Result};

/// What a stage update removes from the parts it rewrites: the rows of the
/// source keys in `set` (nothing when nothing is stored).
pub fn remove_source_keys(stage: &NodeView, set: &KeySet, stored: bool) -> Remove {
    if stored {
        Remove::Keys {
            key: stage.source_key.clone(),
            set: set.clone(),
        }
    } else {
        Remove::Nothing
    }
}

/// The distinct source keys (`stage.source_key` columns) of `batches`.
pub fn source_key_set(stage: &NodeView, batches: &[RecordBatch]) -> Result<KeySet> {
    match batches.first() {
        None => Ok(super::keys::key_set_new()),
        Some(b) => key_set(batches, &KeyEncoder::new(&b.schema(), &stage.source_key)?),
    }
}

/// The source keys an update changed, as the key-mappings rewrite needs them.
#[derive(Debug, Default)]
pub struct ChangedKeys {
    /// Sorted, distinct (`stage.source_key` columns); empty if nothing is stored.
    pub keys: Vec<RecordBatch>,
    /// The same keys as a set.
    pub set: KeySet,
    /// Whether the stage stores anything (else nothing is removed).
    pub stored: bool,
}

impl ChangedKeys {
    /// From the changed keys' sorted runs (`schema`: the source key
    /// columns). Where nothing is stored, no key is needed.
    pub fn new(
        env: &Env,
        stage: &NodeView,
        schema: &arrow_schema::SchemaRef,
        runs: Vec<RecordBatch>,
        stored: bool,
    ) -> Result<Self> {
        if !stored {
            return Ok(Self::default());
        }
        let keys = env.sorted_distinct(schema, &stage.source_key, runs)?;
        let set = key_set(&keys, &KeyEncoder::new(schema, &stage.source_key)?)?;
        Ok(Self { keys, set, stored })
    }
}

/// Step 1: rewrite the key-mappings `parts`: the rows of the `changed`
/// source keys go, and are returned in `removed` when something is stored;
/// `adds` (sorted `(K_s, K_t)`, repeats allowed) come in. New parts are
/// named `prefix`-*.
pub fn rewrite_mappings(
    env: &Env,
    stage: &NodeView,
    parts: &[RangePart],
    changed: &ChangedKeys,
    adds: BatchIter,
    prefix: String,
) -> Result<Rewritten> {
    let ml = stage.mappings_layout(env)?;
    let adds = dedup_sorted(ml.schema.clone(), &ml.sort_key, adds)?;
    ml.rewrite(
        parts,
        Change {
            remove: remove_source_keys(stage, &changed.set, changed.stored),
            touch: Box::new(changed.keys.clone().into_iter().map(Ok)),
            adds,
            collect_removed: changed.stored,
            select: false,
            prefix,
        },
    )
}

/// The old targets of removed key-mappings rows (`(K_s, K_t)`): their
/// target keys, sorted and distinct.
pub fn old_targets(
    env: &Env,
    stage: &NodeView,
    removed: &[RecordBatch],
) -> Result<Vec<RecordBatch>> {
    let ml = stage.mappings_layout(env)?;
    let kidx = crate::parquet::decode::column_indices(&ml.schema, &stage.key)?;
    let old: Vec<RecordBatch> = removed
        .iter()
        .map(|b| b.project(&kidx).map_err(Error::from))
        .collect::<Result<_>>()?;
    env.sorted_distinct(&stage.key_schema()?, &stage.key, old)
}

/// Steps 2 and 3: rewrite the content `parts`: `remove`d rows go, `adds`
/// (sorted by `(K_t, K_s)`) come in, and every row of each touched target
/// key (`old_targets` and the added ones) is selected for the update, the
/// touched keys left with no row listed as deleted.
pub fn rewrite_content(
    env: &Env,
    stage: &NodeView,
    parts: &[RangePart],
    remove: Remove,
    old_targets: Vec<RecordBatch>,
    adds: BatchIter,
    prefix: String,
) -> Result<Rewritten> {
    stage.content_layout(env).rewrite(
        parts,
        Change {
            remove,
            touch: Box::new(old_targets.into_iter().map(Ok)),
            adds,
            collect_removed: false,
            select: true,
            prefix,
        },
    )
}
