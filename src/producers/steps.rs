//! The steps of a stage update (see [`super::run`]), as functions that the
//! single-process [`super::run::StageRun::finish`] and the range phases of
//! [`super::split_stage`] both call: each works on whatever part list it is
//! given (a stage's whole list, or the parts of one key range).

use arrow_array::RecordBatch;

use super::keys::{KeyEncoder, KeySet};
use super::merge::dedup_sorted;
use super::node::{Env, NodeView};
use super::parts::RangePart;
use super::partset::{key_set, Change, Derived, PartsRewritten, Remove};
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

/// The source-key columns (`stage.source_key`) of key-mappings rows.
pub fn source_keys(stage: &NodeView, rows: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    rows.iter()
        .map(|b| {
            let idx = crate::parquet::decode::column_indices(&b.schema(), &stage.source_key)?;
            Ok(b.project(&idx)?)
        })
        .collect()
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
) -> Result<PartsRewritten> {
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
            derived: None,
        },
    )
}

/// Of key-mappings rows `(K_s, K_t)` (the mappings layout's columns), the
/// ones a stage whose mappings are derived from `mode` shared key columns
/// stores (see [`super::manifest::NodeState::derived_prefix`]): those
/// whose `K_t` does not begin with their `K_s`'s values there. All of them
/// where `mode` is 0.
pub fn stored_mappings(stage: &NodeView, rows: RecordBatch, mode: usize) -> Result<RecordBatch> {
    if mode == 0 || rows.num_rows() == 0 {
        return Ok(rows);
    }
    let column = |name: &str| {
        rows.column_by_name(name)
            .ok_or_else(|| Error::Task(format!("key-mappings rows lack {name:?}")))
    };
    let mut differ: Option<arrow_array::BooleanArray> = None;
    for (k, s) in stage.key.iter().zip(&stage.source_key).take(mode) {
        let d = arrow_ord::cmp::distinct(column(k)?, column(s)?)?;
        differ = Some(match differ {
            None => d,
            Some(acc) => arrow_arith::boolean::or(&acc, &d)?,
        });
    }
    match differ {
        Some(mask) if mask.true_count() < rows.num_rows() => {
            Ok(arrow_select::filter::filter_record_batch(&rows, &mask)?)
        }
        _ => Ok(rows),
    }
}

/// What the content rewrite of a stage whose mappings are derived from
/// `mode` shared key columns finds itself (see [`Derived`]): the rows of
/// the `changed` source keys that no stored pair points to. `None` where
/// `mode` is 0 or nothing is stored.
pub fn derived_change(changed: &ChangedKeys, mode: usize) -> Result<Option<Derived>> {
    if mode == 0 || !changed.stored || changed.set.is_empty() {
        return Ok(None);
    }
    let lead = lead_values(changed, mode)?;
    let prefixes = super::partset::lead_prefixes(&lead)?;
    let firsts: Vec<&dyn arrow_array::Array> = lead.iter().map(|b| b.column(0).as_ref()).collect();
    let first = arrow_select::concat::concat(&firsts)?;
    Ok(Some(Derived {
        prefixes,
        m: mode,
        first,
    }))
}

/// The changed keys' first `mode` columns (the content's cut key's
/// leading types: see `NodeView::shared_prefix`).
fn lead_values(changed: &ChangedKeys, mode: usize) -> Result<Vec<RecordBatch>> {
    changed
        .keys
        .iter()
        .map(|b| {
            b.project(&(0..mode).collect::<Vec<_>>())
                .map_err(Error::from)
        })
        .collect()
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
/// key (`old_targets`, those `derived` finds, and the added ones) is
/// selected for the update, the touched keys left with no row listed as
/// deleted.
pub fn rewrite_content(
    env: &Env,
    stage: &NodeView,
    parts: &[RangePart],
    remove: Remove,
    old_targets: Vec<RecordBatch>,
    adds: BatchIter,
    (prefix, derived): (String, Option<Derived>),
) -> Result<PartsRewritten> {
    stage.content_layout(env).rewrite(
        parts,
        Change {
            remove,
            touch: Box::new(old_targets.into_iter().map(Ok)),
            adds,
            collect_removed: false,
            select: true,
            prefix,
            derived,
        },
    )
}

#[cfg(test)]
mod tests {
    //! Key-mappings derived from the content (a target key that begins
    //! with the source key) against stored ones: the same content and the
    //! same updates, over random upserts and deletes.
    use super::*;
    use crate::producers::manifest::NodeState;
    use crate::producers::node::Kind;
    use crate::producers::run::tests::{env, it, pairs, source_view};
    use crate::producers::run::StageRun;
    use crate::producers::source;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    /// A stage keyed `(ks, x)` from a source keyed `ks`: one shared column.
    fn stage(state: NodeState) -> NodeView {
        NodeView {
            name: "st".into(),
            kind: Kind::Stage,
            key: vec!["ks".into(), "x".into()],
            values: vec!["v".into()],
            source_key: vec!["__pds_src.ks".into()],
            schema: Arc::new(Schema::new(vec![
                Field::new("ks", DataType::Int64, false),
                Field::new("x", DataType::Int64, false),
                Field::new("__pds_src.ks", DataType::Int64, false),
                Field::new("v", DataType::Utf8, true),
            ])),
            state,
            feeders: vec![],
        }
    }

    /// Source key `k` with value `"v<n>"` emits `(k, n % 5)`, `(k, 50 + n %
    /// 4)` when `n` is a multiple of 3, and, when `n` is a multiple of 7,
    /// `(k + 1, 99)` and `(k / 10, 7)`: targets that do not begin with their
    /// source key, whose pairs are stored; several source keys share the
    /// last.
    fn produce(run: &mut StageRun) {
        while let Some(chunk) = run.next_chunk(false, 5).unwrap() {
            let (rows, _) = &chunk.sources[0];
            let k = rows.column(0).as_primitive::<Int64Type>();
            let v = rows.column(1).as_string::<i32>();
            let (mut t, mut x, mut s, mut vs) = (vec![], vec![], vec![], vec![]);
            for i in 0..rows.num_rows() {
                let (k, val) = (k.value(i), v.value(i));
                let n: i64 = val[1..].parse().unwrap();
                let mut out = vec![(k, n % 5)];
                if n % 3 == 0 {
                    out.push((k, 50 + n % 4));
                }
                if n % 7 == 0 {
                    out.extend([(k + 1, 99), (k / 10, 7)]);
                }
                for (a, b) in out {
                    t.push(a);
                    x.push(b);
                    s.push(k);
                    vs.push(val.to_string());
                }
            }
            let batch = RecordBatch::try_new(
                run.schema(),
                vec![
                    Arc::new(Int64Array::from(t)),
                    Arc::new(Int64Array::from(x)),
                    Arc::new(Int64Array::from(s)),
                    Arc::new(StringArray::from(vs)),
                ],
            )
            .unwrap();
            run.push(batch).unwrap();
        }
    }

    fn update(env: &Env, st: NodeState, src: NodeState, rebuild: bool) -> NodeState {
        let mut run =
            StageRun::new(env.clone(), stage(st), vec![source_view(src)], rebuild).unwrap();
        produce(&mut run);
        run.finish().unwrap().0
    }

    /// The same update split into tasks (see [`crate::producers::split_stage`]):
    /// a map task per range of the source's parts, a shuffle into `k`
    /// target ranges (emitted rows and stored pairs by their target key,
    /// the derived keys to every range their leading values span), a
    /// reduce task per target range (each finding its derived keys' rows
    /// in its own parts), stitched.
    fn split(env: &Env, st: NodeState, src: NodeState, k: usize) -> NodeState {
        use crate::producers::key_range::{assign, plan, prefix_spans, push_by_span};
        use crate::producers::split_stage::{reduce_range, stitch_stage};
        // Ranges as the drivers plan them: at the stored pairs' parts, else
        // at the source's.
        let ranges = match st.mappings.is_empty() {
            true => plan(&src.content, 3),
            false => plan(&st.mappings, 3),
        };
        let targets = plan(&st.content, k);
        let view = stage(st);
        let ks = view.key_schema().unwrap();
        let n = targets.len();
        let (mut emitted, mut removed, mut derived) =
            (vec![vec![]; n], vec![vec![]; n], vec![vec![]; n]);
        let pick = |b: &RecordBatch, into: &mut Vec<Vec<RecordBatch>>, spans: Vec<(u32, u32)>| {
            push_by_span(b, &spans, into)
        };
        let at = |b: &RecordBatch| -> Vec<(u32, u32)> {
            let ids = assign(&targets, ks.clone(), b, &view.key).unwrap();
            ids.into_iter().map(|i| (i, i)).collect()
        };
        let mut maps = vec![];
        for r in ranges {
            let mut run = StageRun::for_range(
                env.clone(),
                view.clone(),
                vec![source_view(src.clone())],
                false,
                &r,
            )
            .unwrap();
            produce(&mut run);
            let out = run.finish_map().unwrap();
            for b in out.emitted {
                let b = b.unwrap();
                pick(&b, &mut emitted, at(&b));
            }
            for b in &out.removed {
                pick(b, &mut removed, at(b));
            }
            for b in &out.derived {
                let lead = &view.source_key[..1];
                pick(
                    b,
                    &mut derived,
                    prefix_spans(&targets, &ks, b, lead).unwrap(),
                );
            }
            maps.push(out.mappings);
        }
        let mut reduced = vec![];
        for (i, r) in targets.iter().enumerate() {
            let (e, rm, d) = (
                std::mem::take(&mut emitted[i]),
                std::mem::take(&mut removed[i]),
                std::mem::take(&mut derived[i]),
            );
            reduced.push(reduce_range(env, &view, r, it(e), rm, d, false).unwrap());
        }
        stitch_stage(env, &view, &maps, &reduced).unwrap()
    }

    type Row = (i64, i64, i64, String);

    fn rows(env: &Env, parts: &[RangePart]) -> Vec<Row> {
        let view = stage(NodeState::default());
        let mut out = Vec::new();
        for b in view.content_layout(env).scan(parts.to_vec(), None) {
            let b = b.unwrap();
            let c = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
            let (t, x, s) = (c(0), c(1), c(2));
            let v = b.column(3).as_string::<i32>();
            for i in 0..b.num_rows() {
                out.push((t.value(i), x.value(i), s.value(i), v.value(i).to_string()));
            }
        }
        out
    }

    /// The update's deleted keys.
    fn deleted(env: &Env, st: &NodeState) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        for b in stage(st.clone()).update_deleted(env).unwrap() {
            let c = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
            let (t, x) = (c(0), c(1));
            out.extend((0..b.num_rows()).map(|i| (t.value(i), x.value(i))));
        }
        out.sort();
        out
    }

    fn pair_count(env: &Env, st: &NodeState) -> usize {
        let layout = stage(st.clone()).mappings_layout(env).unwrap();
        layout
            .scan(st.mappings.clone(), None)
            .map(|b| b.unwrap().num_rows())
            .sum()
    }

    #[test]
    fn derived_mappings_update_like_stored_ones() {
        let derived = env(4);
        let stored = Env {
            derive_mappings: false,
            ..derived.clone()
        };
        assert_eq!(stage(NodeState::default()).shared_prefix(), 1);
        let view = source_view(NodeState::default());
        let ks: Vec<i64> = (0..300).collect();
        let vs: Vec<String> = ks.iter().map(|k| format!("v{}", k * 3 + 1)).collect();
        let vr: Vec<&str> = vs.iter().map(|s| s.as_str()).collect();
        let mut src = source::apply(&derived, &view, it(vec![pairs(&ks, &vr)]), vec![])
            .unwrap()
            .0;
        let mut a = update(&derived, NodeState::default(), src.clone(), false);
        let mut b = update(&stored, NodeState::default(), src.clone(), false);
        assert_eq!((a.derived_prefix, b.derived_prefix), (1, 0));
        let mut rng = crate::test_rng::TestRng::new(0x9E37_79B9_7F4A_7C15);
        let mut next = |n: u64| rng.below(n);
        for round in 0..12 {
            // A few upserts (new keys too) and deletes, scattered.
            let mut up: Vec<i64> = (0..8).map(|_| next(340) as i64).collect();
            up.sort();
            up.dedup();
            let dels: Vec<i64> = (0..3)
                .map(|_| next(340) as i64)
                .filter(|k| !up.contains(k))
                .collect();
            let vs: Vec<String> = up.iter().map(|_| format!("v{}", next(1000))).collect();
            let vr: Vec<&str> = vs.iter().map(|s| s.as_str()).collect();
            let del = RecordBatch::try_new(
                Arc::new(Schema::new(vec![Field::new("ks", DataType::Int64, false)])),
                vec![Arc::new(Int64Array::from(dels))],
            )
            .unwrap();
            src = source::apply(
                &derived,
                &source_view(src),
                it(vec![pairs(&up, &vr)]),
                vec![del],
            )
            .unwrap()
            .0;
            let splits: Vec<NodeState> = [1, 3, 5]
                .into_iter()
                .map(|k| split(&derived, a.clone(), src.clone(), k))
                .collect();
            a = update(&derived, a, src.clone(), false);
            b = update(&stored, b, src.clone(), false);
            for split_state in splits {
                assert_eq!(
                    rows(&derived, &split_state.content),
                    rows(&derived, &a.content)
                );
                assert_eq!(
                    rows(&derived, &split_state.update.rows),
                    rows(&derived, &a.update.rows)
                );
                assert_eq!(deleted(&derived, &split_state), deleted(&derived, &a));
                assert_eq!(split_state.derived_prefix, 1);
            }
            assert_eq!(
                rows(&derived, &a.content),
                rows(&derived, &b.content),
                "round {round}"
            );
            assert_eq!(
                rows(&derived, &a.update.rows),
                rows(&derived, &b.update.rows),
                "round {round}: the update's rows"
            );
            assert_eq!(
                deleted(&derived, &a),
                deleted(&derived, &b),
                "round {round}"
            );
            // Only the pairs whose target does not begin with their source
            // key are stored: two per source key with a multiple of 7.
            let exceptions = rows(&derived, &a.content)
                .iter()
                .filter(|(t, _, s, _)| t != s)
                .map(|(t, x, s, _)| (*t, *x, *s))
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            assert!(exceptions > 0);
            assert_eq!(pair_count(&derived, &a), exceptions, "round {round}");
            assert!(pair_count(&derived, &b) > 2 * exceptions);
        }
        // A rebuild from the source gives the same content.
        let rebuilt = update(&derived, NodeState::default(), src.clone(), true);
        assert_eq!(rows(&derived, &rebuilt.content), rows(&derived, &a.content));
        // A stored stage keeps its mode; a manifest claiming another is refused.
        assert_eq!(stage(b.clone()).mappings_mode(true), 0);
        let mut bad = stage(a.clone());
        bad.state.derived_prefix = 2;
        let json = serde_json::json!({
            "name": "st", "kind": "stage", "key": ["ks", "x"], "values": ["v"],
            "schema": crate::dataset::manifest::schema_to_ipc_base64(&bad.schema).unwrap(),
            "state": bad.state,
        });
        assert!(matches!(
            NodeView::from_json(&json.to_string()),
            Err(Error::ManifestCorrupted { .. })
        ));
        let mut good = json.clone();
        good["state"]["derived_prefix"] = 1.into();
        assert_eq!(NodeView::from_json(&good.to_string()).unwrap().state, a);
    }
}
