//! A source's update split by key range (Spark), like a stage's in
//! [`super::split_stage`]: the user's changes are shuffled by key to the ranges
//! of the source's stored content parts ([`super::key_range::plan`],
//! [`super::key_range::assign`]); each range's task applies its share with
//! [`apply_range`], rewriting only the content parts of its range; the
//! driver stitches the results with [`stitch_source`]. The rows are those
//! [`super::source::apply`] gives in one process.

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

use super::key_range::{KeyRange, RangeFilter};
use super::manifest::{NodeState, UpdateFiles};
use super::node::{Env, NodeView};
use super::source::apply_to;
use super::split_stage::{stitch_parts, stitch_updates, RangeParts};
use super::BatchIter;
use crate::error::Result;

/// What a source range's task hands the driver: plain data (serde).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceRangeOutput {
    /// The range's new content parts.
    pub content: RangeParts,
    /// The range's update: every row of each upserted key, the deleted keys.
    pub update: UpdateFiles,
    /// Every object this task wrote (to remove if the update is given up).
    pub created: Vec<String>,
}

/// Apply the changes whose keys lie in `range` (bounds: values of the
/// source's key columns) to the source `node`: `upserts` (public columns,
/// any order) and `deletes` (key columns) as [`super::source::apply`]
/// takes them. Only the content parts of the range are rewritten. A key
/// outside the range, or a range that cuts a stored part, is
/// `InvalidArgument` before anything is written; a failure removes what
/// this call wrote. Nothing is committed.
pub fn apply_range(
    env: &Env,
    node: &NodeView,
    range: &KeyRange,
    upserts: BatchIter,
    deletes: Vec<RecordBatch>,
) -> Result<SourceRangeOutput> {
    let scope = RangeFilter::new(range, node.key_schema()?)?;
    let parts = scope.parts_in(&node.state.content)?;
    let (content, update, created) = apply_to(env, node, &parts, upserts, deletes, Some(&scope))?;
    Ok(SourceRangeOutput {
        content: RangeParts {
            range: range.clone(),
            parts: content,
        },
        update,
        created,
    })
}

/// The source's new state from its ranges' results (the driver's part; no
/// I/O): the stored parts outside every processed range kept by
/// reference, each range's new parts in their place, the update the
/// ranges' updates in key order.
pub fn stitch_source(node: &NodeView, done: &[SourceRangeOutput]) -> Result<NodeState> {
    let key_schema = node.key_schema()?;
    let contents: Vec<RangeParts> = done.iter().map(|d| d.content.clone()).collect();
    let updates: Vec<(&KeyRange, &UpdateFiles)> =
        done.iter().map(|d| (&d.content.range, &d.update)).collect();
    Ok(NodeState {
        content: stitch_parts(&node.state.content, &key_schema, &contents)?,
        mappings: Vec::new(),
        derived_prefix: 0,
        update: stitch_updates(&key_schema, &updates)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producers::key_range::{assign, plan};
    use crate::producers::run::tests::{env, it, keys, pairs, source_view};
    use crate::producers::source::apply;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    type Rows = Vec<(i64, String)>;

    /// Every row of a source's content, or of its update, and its deleted keys.
    fn rows(env: &Env, state: &NodeState) -> (Rows, Rows, Vec<i64>) {
        let v = source_view(state.clone());
        let decode = |it: BatchIter| -> Rows {
            it.flat_map(|b| {
                let b = b.unwrap();
                let k = b.column(0).as_primitive::<Int64Type>().clone();
                let s = b.column(1).as_string::<i32>().clone();
                (0..b.num_rows())
                    .map(|i| (k.value(i), s.value(i).to_string()))
                    .collect::<Vec<_>>()
            })
            .collect()
        };
        let deleted: Vec<i64> = v
            .update_deleted(env)
            .unwrap()
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        (
            decode(v.full_scan(env).unwrap()),
            decode(v.update_rows(env)),
            deleted,
        )
    }

    fn strings(ks: &[i64], tag: &str) -> RecordBatch {
        let vs: Vec<String> = ks.iter().map(|k| format!("{tag}{k}")).collect();
        let vr: Vec<&str> = vs.iter().map(|s| s.as_str()).collect();
        pairs(ks, &vr)
    }

    /// Changes shuffled to 1, 2, 3 or 5 ranges give the rows the
    /// single-process update gives; untouched ranges write nothing.
    #[test]
    fn split_source_updates_equal_the_single_process_update() {
        let env = env(4);
        let ks: Vec<i64> = (0..200).step_by(2).collect();
        let (s1, _) = apply(
            &env,
            &source_view(NodeState::default()),
            it(vec![strings(&ks, "a")]),
            vec![],
        )
        .unwrap();
        let node = source_view(s1.clone());
        // Upserts of stored and new keys (in the lower half only); deletes.
        let ups = strings(&[3, 4, 10, 11, 50, 51, 52, 98], "b");
        let dels = keys(&[0, 20, 40]);
        let (want, _) = apply(&env, &node, it(vec![ups.clone()]), vec![dels.clone()]).unwrap();
        let want = rows(&env, &want);
        let ks_schema = node.key_schema().unwrap();
        for k in [1, 2, 3, 5] {
            let ranges = plan(&s1.content, k);
            let ui = assign(&ranges, ks_schema.clone(), &ups, &node.key).unwrap();
            let di = assign(&ranges, ks_schema.clone(), &dels, &node.key).unwrap();
            let mut done = Vec::new();
            for (r, range) in ranges.iter().enumerate() {
                let pick = |b: &RecordBatch, ids: &[u32]| {
                    let mask: arrow_array::BooleanArray =
                        ids.iter().map(|&i| Some(i as usize == r)).collect();
                    arrow_select::filter::filter_record_batch(b, &mask).unwrap()
                };
                let out = apply_range(
                    &env,
                    &node,
                    range,
                    it(vec![pick(&ups, &ui)]),
                    vec![pick(&dels, &di)],
                )
                .unwrap();
                if r > 0
                    && k == 5
                    && range.lo.as_ref().and_then(|l| l[0].as_ref()?.as_i64()) > Some(98)
                {
                    assert!(out.created.is_empty(), "range {r} is untouched");
                }
                done.push(out);
            }
            let got = stitch_source(&node, &done).unwrap();
            assert_eq!(rows(&env, &got), want, "k = {k}");
        }
        // A key outside the task's range is refused, before any write.
        let ranges = plan(&s1.content, 3);
        let err = apply_range(&env, &node, &ranges[2], it(vec![ups]), vec![]).unwrap_err();
        assert!(
            matches!(err, crate::error::Error::InvalidArgument(_)),
            "{err}"
        );
    }
}
