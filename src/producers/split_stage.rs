//! A stage update split into tasks by key range (Spark), in two phases with
//! a shuffle between them, then stitched by the driver. The result is the
//! one [`StageRun::finish`] gives in one process (the same rows; part
//! boundaries may differ).
//!
//! - **Phase A (map)**, one task per *source*-key range, aligned with the
//!   stage's stored key-mappings parts ([`super::key_range::plan`]):
//!   [`StageRun::for_range`] hands out only the groups of changed source
//!   keys in the range; `next_chunk`/`push` run as usual (`Produce`); then
//!   [`StageRun::finish_map`] rewrites only the key-mappings parts of the
//!   range (step 1 of `finish`) and returns a [`MapOutput`]: the range's new
//!   key-mappings parts, the emitted rows, the removed `(K_s, K_t)` pairs.
//! - **Shuffle**: emitted rows and removed pairs go to the target-key range
//!   that holds their `K_t` ([`super::key_range::assign`]).
//! - **Phase B (reduce)**, one task per *target*-key range, aligned with the
//!   stage's stored content parts: [`reduce_range`] rewrites only the content
//!   parts of the range and writes the range's update (steps 2 and 3).
//!   Content rows of the range whose `K_s` changed are exactly those whose
//!   `(K_s, K_t)` pair phase A removed, so the removed pairs with `K_t` in
//!   the range are all it needs to know of the change.
//! - **Stitching** ([`stitch_stage`]): the stored parts outside every
//!   processed range are kept by reference, each range's new parts take
//!   the place of its old ones, in key order; nothing is committed here.
//!
//! Every task's objects are named with a fresh token, so tasks never
//! collide; a failed task removes what it wrote, and the driver removes
//! the `created` objects of the others if it gives up.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde::{Deserialize, Serialize};

use super::key_range::{KeyRange, Place, RangeFilter};
use super::manifest::{NodeState, UpdateFiles};
use super::node::{Env, Kind, NodeView};
use super::parts::RangePart;
use super::run::{write_deleted, StageRun};
use super::steps;
use super::BatchIter;
use crate::error::{Error, Result};

/// A range's new parts (of one list: content or key-mappings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RangeParts {
    /// The range the task processed.
    pub range: KeyRange,
    /// The parts now holding the range's rows, in key order (kept ones by
    /// reference, new ones written by the task). Only the range's.
    pub parts: Vec<RangePart>,
}

/// What a map task hands on (see the module docs).
pub struct MapOutput {
    /// The source-key range's new key-mappings parts.
    pub mappings: RangeParts,
    /// The emitted rows `(K_t, K_s, V)` (the stage's physical schema),
    /// sorted by `(K_t, K_s)`, streamed from the external sort: memory
    /// stays within the sort budget, and the sort's spill files go when
    /// the stream is dropped. To be shuffled by `K_t` (the stage's key).
    pub emitted: BatchIter,
    /// The removed key-mappings rows `(K_s, K_t)` (physical names: the
    /// stage's source key, then its key), sorted so; in memory (they are
    /// as many as the change's old targets). To be shuffled by `K_t`.
    /// Only the stored pairs: see [`Self::derived`].
    pub removed: Vec<RecordBatch>,
    /// For a stage whose key-mappings are derived from its first `m` key
    /// columns (see [`super::manifest::NodeState::derived_prefix`]): the
    /// range's changed source keys (`K_s`, sorted, distinct), whose pairs
    /// the key-mappings do not store. Their content rows are the rows whose
    /// `K_t` begins with the key's first `m` values: to be shuffled to every
    /// target range those values span, where [`reduce_range`] finds them as
    /// it rewrites the range (the content is read once). Empty otherwise.
    pub derived: Vec<RecordBatch>,
    /// Source rows handed to `Produce`.
    pub rows_in: u64,
    /// Rows `Produce` emitted.
    pub rows_out: u64,
    /// Distinct changed source keys in the range (0 where nothing is stored).
    pub changed_keys: u64,
    /// Every object this task wrote (to remove if the update is given up).
    pub created: Vec<String>,
}

/// What a reduce task hands the driver: plain data (serde), to send back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReduceOutput {
    /// The target-key range's new content parts.
    pub content: RangeParts,
    /// The range's update: every row of each touched target key, and the
    /// touched keys left with no row.
    pub update: UpdateFiles,
    /// Emitted rows the task was given.
    pub emitted_rows: u64,
    /// Removed `(K_s, K_t)` pairs the task was given.
    pub removed_pairs: u64,
    /// Every object this task wrote (to remove if the update is given up).
    pub created: Vec<String>,
}

/// Remove `created` (best effort), then return `e`.
fn undo<T>(env: &Env, created: &[String], e: Error) -> Result<T> {
    let _ = crate::runtime::block_on(env.store.delete_many(created));
    Err(e)
}

impl StageRun {
    /// A map task (phase A): [`StageRun::new`] with the input restricted
    /// to the source keys in `range` (bounds: values of the stage's source
    /// key columns). Sources are read only where their parts may hold such
    /// keys. `InvalidArgument` for bounds that do not fit the source key.
    pub fn for_range(
        env: Env,
        stage: NodeView,
        sources: Vec<NodeView>,
        rebuild: bool,
        range: &KeyRange,
    ) -> Result<Self> {
        let key_schema = stage.mappings_layout(&env)?.cut_schema()?;
        let scope = Arc::new(RangeFilter::new(range, key_schema)?);
        Self::start(env, stage, sources, rebuild, Some(scope))
    }

    /// Finish a map task (see the module docs): rewrite only the
    /// key-mappings parts in the task's range. An emitted row whose source
    /// key lies outside the range is `InvalidArgument`. Nothing is
    /// committed; a failure removes what this call wrote.
    pub fn finish_map(self) -> Result<MapOutput> {
        let f = self.finishing()?;
        let (env, stage, changed) = (f.env, f.stage, f.changed);
        let scope = match f.scope {
            Some(s) => s,
            None => Arc::new(RangeFilter::new(
                &KeyRange::all(),
                stage.mappings_layout(&env)?.cut_schema()?,
            )?),
        };
        let parts = scope.parts_in(&stage.state.mappings)?;
        let token = env.token();
        let adds = scope.checked(f.mappings.finish()?, &stage.source_key, "emitted rows");
        let m = steps::rewrite_mappings(
            &env,
            &stage,
            &parts,
            &changed,
            adds,
            format!("nodes/{}/mappings/{token}", stage.name),
        )?;
        // The keys whose pairs are not stored: the reduce tasks find their rows.
        let derived = if f.mode != 0 && changed.stored {
            changed.keys.clone()
        } else {
            Vec::new()
        };
        let emitted = match f.content.finish() {
            Ok(e) => e,
            Err(e) => return undo(&env, &m.created, e),
        };
        Ok(MapOutput {
            mappings: RangeParts {
                range: scope.range().clone(),
                parts: m.parts,
            },
            emitted,
            removed: m.removed,
            derived,
            rows_in: f.rows_in,
            rows_out: f.rows_out,
            changed_keys: changed.keys.iter().map(|b| b.num_rows() as u64).sum(),
            created: m.created,
        })
    }
}

/// A reduce task (phase B) over the target keys in `range` (bounds: values
/// of the stage's key columns): `emitted` holds the emitted rows with `K_t`
/// in the range (the stage's physical schema, any order: sorted here within
/// the sort budget), `removed` the removed `(K_s, K_t)` pairs with `K_t` in
/// the range, and `derived` the changed source keys whose pairs are not
/// stored, whose leading values may fall in the range (see [`MapOutput`]).
/// Rewrites only the content parts of the range; writes the range's update.
/// A row outside the range, or a range that cuts a stored part, is
/// `InvalidArgument`; with `clip`, rows outside the range are dropped
/// instead (batches shuffled whole to every range they span). Nothing is
/// committed; a failure removes what this call wrote.
pub fn reduce_range(
    env: &Env,
    stage: &NodeView,
    range: &KeyRange,
    emitted: BatchIter,
    removed: Vec<RecordBatch>,
    derived: Vec<RecordBatch>,
    clip: bool,
) -> Result<ReduceOutput> {
    if stage.kind != Kind::Stage {
        return Err(Error::InvalidArgument(format!(
            "{:?} is not a stage",
            stage.name
        )));
    }
    let scope = Arc::new(RangeFilter::new(range, stage.key_schema()?)?);
    let parts = scope.parts_in(&stage.state.content)?;
    let (emitted, removed) = if clip {
        let kept = removed
            .iter()
            .map(|r| scope.keep(r, &stage.key))
            .collect::<Result<Vec<_>>>()?;
        (scope.filtered(emitted, &stage.key), kept)
    } else {
        for r in &removed {
            scope.check(r, &stage.key, "removed key-mappings pairs")?;
        }
        (scope.checked(emitted, &stage.key, "emitted rows"), removed)
    };
    // The source keys whose rows go: those of the removed pairs, and the
    // derived ones (their rows found by the content rewrite).
    let changed = match derived.first() {
        Some(b) => {
            let schema = b.schema();
            let mut runs = derived;
            runs.extend(steps::source_keys(stage, &removed)?);
            steps::ChangedKeys::new(env, stage, &schema, runs, true)?
        }
        None => steps::ChangedKeys {
            set: steps::source_key_set(stage, &removed)?,
            ..Default::default()
        },
    };
    let found = steps::derived_change(&changed, stage.mappings_mode(env.derive_mappings))?;
    let set = changed.set;
    let old_targets = steps::old_targets(env, stage, &removed)?;
    let content_key: Vec<String> = stage.key.iter().chain(&stage.source_key).cloned().collect();
    let mut sorter = env.sorter(stage.schema.clone(), &content_key)?;
    let mut emitted_rows = 0u64;
    for b in emitted {
        let b = b?;
        emitted_rows += b.num_rows() as u64;
        sorter.push(RecordBatch::try_new(
            stage.schema.clone(),
            b.columns().to_vec(),
        )?)?;
    }
    let token = env.token();
    let base = format!("nodes/{}", stage.name);
    let c = steps::rewrite_content(
        env,
        stage,
        &parts,
        steps::remove_source_keys(stage, &set, true),
        old_targets,
        sorter.finish()?,
        (format!("{base}/content/{token}"), found),
    )?;
    let mut created = c.created.clone();
    match write_deleted(
        env,
        stage,
        &format!("{base}/update/{token}"),
        (c.deleted, c.deleted_file),
        &mut created,
    ) {
        Ok(deleted) => Ok(ReduceOutput {
            content: RangeParts {
                range: range.clone(),
                parts: c.parts,
            },
            update: UpdateFiles {
                rows: c.selected,
                deleted,
            },
            emitted_rows,
            removed_pairs: removed.iter().map(|b| b.num_rows() as u64).sum(),
            created,
        }),
        Err(e) => undo(env, &created, e),
    }
}

/// The order of `ranges` by key (indices), checked disjoint.
fn ordered(key_schema: &SchemaRef, ranges: &[&KeyRange]) -> Result<Vec<Arc<RangeFilter>>> {
    let filters = ranges
        .iter()
        .map(|r| RangeFilter::new(r, key_schema.clone()).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    let mut order: Vec<Arc<RangeFilter>> = filters;
    order.sort_by(|a, b| a.cmp_lo(b));
    for w in order.windows(2) {
        if !w[0].ends_before(&w[1]) {
            return Err(Error::InvalidArgument(format!(
                "key ranges {:?} and {:?} overlap",
                w[0].range(),
                w[1].range()
            )));
        }
    }
    Ok(order)
}

/// One part list after some of its ranges were rewritten: the `stored`
/// parts outside every range of `done` (kept by reference), and each
/// range's new parts in its place, in key order. `key_schema`: the types
/// of the key the parts were cut at. `InvalidArgument` for overlapping
/// ranges, a range that cuts a stored part, or new parts outside their range.
pub fn stitch_parts(
    stored: &[RangePart],
    key_schema: &SchemaRef,
    done: &[RangeParts],
) -> Result<Vec<RangePart>> {
    let ranges: Vec<&KeyRange> = done.iter().map(|d| &d.range).collect();
    let order = ordered(key_schema, &ranges)?;
    let by_range = |f: &RangeFilter| done.iter().find(|d| &d.range == f.range());
    let mut out = Vec::with_capacity(stored.len());
    let mut j = 0;
    for f in &order {
        let places = f.places(stored)?;
        while j < stored.len() && places[j].0 == Place::Before {
            out.push(stored[j].clone());
            j += 1;
        }
        // The range's stored parts are replaced (checked whole).
        f.parts_in(&stored[j..])?;
        while j < stored.len() && places[j].0 == Place::Inside {
            j += 1;
        }
        let Some(d) = by_range(f) else { continue };
        if f.parts_in(&d.parts)?.len() != d.parts.len() {
            return Err(Error::InvalidArgument(format!(
                "new parts lie outside their range {:?}",
                d.range
            )));
        }
        out.extend(d.parts.iter().cloned());
    }
    out.extend(stored[j..].iter().cloned());
    Ok(out)
}

/// The stage's new state from the per-range results (the driver's part):
/// content and key-mappings as [`stitch_parts`] gives them, the update the
/// ranges' updates in key order. `maps`: the map tasks'
/// [`MapOutput::mappings`]; `reduces`: the reduce tasks' outputs. Pure: no I/O.
pub fn stitch_stage(
    env: &Env,
    stage: &NodeView,
    maps: &[RangeParts],
    reduces: &[ReduceOutput],
) -> Result<NodeState> {
    let key_schema = stage.key_schema()?;
    let contents: Vec<RangeParts> = reduces.iter().map(|r| r.content.clone()).collect();
    let content = stitch_parts(&stage.state.content, &key_schema, &contents)?;
    let source_schema = stage.mappings_layout(env)?.cut_schema()?;
    let mappings = stitch_parts(&stage.state.mappings, &source_schema, maps)?;
    let updates: Vec<(&KeyRange, &UpdateFiles)> = reduces
        .iter()
        .map(|r| (&r.content.range, &r.update))
        .collect();
    Ok(NodeState {
        content,
        mappings,
        derived_prefix: stage.mappings_mode(env.derive_mappings),
        update: stitch_updates(&key_schema, &updates)?,
    })
}

/// The ranges' updates as one, in key order (`key_schema`: the types of
/// the key the ranges bound). `InvalidArgument` for overlapping ranges.
pub fn stitch_updates(
    key_schema: &SchemaRef,
    updates: &[(&KeyRange, &UpdateFiles)],
) -> Result<UpdateFiles> {
    let ranges: Vec<&KeyRange> = updates.iter().map(|u| u.0).collect();
    let mut update = UpdateFiles::default();
    for f in ordered(key_schema, &ranges)? {
        if let Some((_, u)) = updates.iter().find(|u| u.0 == f.range()) {
            update.rows.extend(u.rows.iter().cloned());
            update.deleted.extend(u.deleted.iter().cloned());
        }
    }
    Ok(update)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producers::key_range::{plan, plan_from_bounds};
    use crate::producers::run::tests::{
        deleted, env, it, keys, mapping_pairs, pairs, source_view, stage_view, triples,
    };
    use crate::producers::source;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Int64Array;
    use serde_json::Value;

    /// A deterministic stand-in for `Produce`: source key `k` with value
    /// `"v<n>"` emits `(n % 37, k, v)`, and also `(100 + n / 3 % 11, k, v)`
    /// when `n` is a multiple of 3 (a source key with two targets).
    fn produce(run: &mut StageRun) {
        while let Some(chunk) = run.next_chunk(false, 7).unwrap() {
            let (rows, _) = &chunk.sources[0];
            let k = rows.column(0).as_primitive::<Int64Type>();
            let v = rows.column(1).as_string::<i32>();
            let (mut t, mut s, mut vs) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..rows.num_rows() {
                let n: i64 = v.value(i)[1..].parse().unwrap();
                t.push(n % 37);
                s.push(k.value(i));
                vs.push(v.value(i).to_string());
                if n % 3 == 0 {
                    t.push(100 + n / 3 % 11);
                    s.push(k.value(i));
                    vs.push(v.value(i).to_string());
                }
            }
            emit(run, t, s, vs);
        }
    }

    /// Push emitted rows `(K_t, K_s, V)` as `Produce` would.
    fn emit(run: &mut StageRun, t: Vec<i64>, s: Vec<i64>, vs: Vec<String>) {
        let out = RecordBatch::try_new(
            run.schema(),
            vec![
                Arc::new(Int64Array::from(t)),
                Arc::new(Int64Array::from(s)),
                Arc::new(arrow_array::StringArray::from(vs)),
            ],
        )
        .unwrap();
        run.push(out).unwrap();
    }

    use crate::test_rng::TestRng as Rng;

    fn upserts(ks: &[i64], ns: &[u64]) -> RecordBatch {
        let vs: Vec<String> = ns.iter().map(|n| format!("v{n}")).collect();
        let vr: Vec<&str> = vs.iter().map(|s| s.as_str()).collect();
        pairs(ks, &vr)
    }

    /// The single-process update.
    fn single(env: &Env, stage: NodeState, src: NodeState, rebuild: bool) -> NodeState {
        let mut run = StageRun::new(
            env.clone(),
            stage_view(stage),
            vec![source_view(src)],
            rebuild,
        )
        .unwrap();
        produce(&mut run);
        run.finish().unwrap().0
    }

    /// What the tasks of a split update did: the new state, and per map
    /// and per reduce task the objects it wrote.
    struct Split {
        state: NodeState,
        map_created: Vec<Vec<String>>,
        reduce_created: Vec<Vec<String>>,
        reduced: Vec<ReduceOutput>,
    }

    /// Phase A per source range, a shuffle by target range (as Spark's
    /// would: by [`super::super::key_range::assign`]), phase B per target
    /// range, then stitching.
    fn split(
        env: &Env,
        stage: NodeState,
        src: NodeState,
        rebuild: bool,
        map_ranges: &[KeyRange],
        reduce_ranges: &[KeyRange],
    ) -> Split {
        let view = stage_view(stage);
        let mut emitted: Vec<Vec<RecordBatch>> = vec![Vec::new(); reduce_ranges.len()];
        let mut removed: Vec<Vec<RecordBatch>> = vec![Vec::new(); reduce_ranges.len()];
        let ks = view.key_schema().unwrap();
        let shuffle = |b: &RecordBatch, into: &mut Vec<Vec<RecordBatch>>| {
            let ids =
                super::super::key_range::assign(reduce_ranges, ks.clone(), b, &view.key).unwrap();
            let spans: Vec<(u32, u32)> = ids.into_iter().map(|i| (i, i)).collect();
            super::super::key_range::push_by_span(b, &spans, into);
        };
        let mut derived: Vec<Vec<RecordBatch>> = vec![Vec::new(); reduce_ranges.len()];
        // A derived key goes to every range its leading values span.
        let mode = view.mappings_mode(env.derive_mappings);
        let spread = |b: &RecordBatch, into: &mut Vec<Vec<RecordBatch>>| {
            let lead = &view.source_key[..mode];
            let spans = super::super::key_range::prefix_spans(reduce_ranges, &ks, b, lead).unwrap();
            super::super::key_range::push_by_span(b, &spans, into);
        };
        let (mut maps, mut map_created) = (Vec::new(), Vec::new());
        for r in map_ranges {
            let mut run = StageRun::for_range(
                env.clone(),
                view.clone(),
                vec![source_view(src.clone())],
                rebuild,
                r,
            )
            .unwrap();
            produce(&mut run);
            let out = run.finish_map().unwrap();
            for b in out.emitted {
                shuffle(&b.unwrap(), &mut emitted);
            }
            for b in &out.removed {
                shuffle(b, &mut removed);
            }
            for b in &out.derived {
                spread(b, &mut derived);
            }
            maps.push(out.mappings);
            map_created.push(out.created);
        }
        let mut reduced = Vec::new();
        for (i, r) in reduce_ranges.iter().enumerate() {
            // Any order: phase B sorts.
            let mut e = std::mem::take(&mut emitted[i]);
            e.reverse();
            let (rm, d) = (
                std::mem::take(&mut removed[i]),
                std::mem::take(&mut derived[i]),
            );
            let out = reduce_range(env, &view, r, it(e), rm, d, false).unwrap();
            reduced.push(out);
        }
        let state = stitch_stage(env, &view, &maps, &reduced).unwrap();
        Split {
            state,
            map_created,
            reduce_created: reduced.iter().map(|r| r.created.clone()).collect(),
            reduced,
        }
    }

    type Decoded = (
        Vec<(i64, i64, String)>,
        Vec<(i64, i64)>,
        Vec<(i64, i64, String)>,
        Vec<i64>,
    );

    /// Content, key-mappings, update rows and deleted keys, decoded.
    fn decoded(env: &Env, state: &NodeState) -> Decoded {
        let v = stage_view(state.clone());
        let mut c = triples(env, &v, &state.content);
        let mut m = mapping_pairs(env, &v);
        let mut u = triples(env, &v, &state.update.rows);
        let mut d = deleted(env, &v);
        c.sort();
        m.sort();
        u.sort();
        d.sort();
        (c, m, u, d)
    }

    /// Parts stay in key order with no key in two parts.
    fn check_order(env: &Env, state: &NodeState) {
        let v = stage_view(state.clone());
        let c = triples(env, &v, &state.content);
        assert!(c.windows(2).all(|w| (w[0].0, w[0].1) <= (w[1].0, w[1].1)));
        let m = mapping_pairs(env, &v);
        assert!(m.windows(2).all(|w| w[0] < w[1]));
    }

    fn bound(k: i64) -> Option<Vec<Option<Value>>> {
        Some(vec![Some(Value::from(k))])
    }

    /// Random source changes: upserts (new keys and new values) and
    /// deletions of stored keys, never both for one key.
    fn changes(rng: &mut Rng, present: &[i64], n: usize) -> (RecordBatch, Vec<RecordBatch>) {
        let mut actions = std::collections::BTreeMap::new();
        for _ in 0..n {
            let k = rng.below(300) as i64;
            let delete = present.contains(&k) && rng.below(3) == 0;
            actions.insert(k, delete);
        }
        let ups: Vec<i64> = actions.iter().filter(|a| !*a.1).map(|a| *a.0).collect();
        let dels: Vec<i64> = actions.iter().filter(|a| *a.1).map(|a| *a.0).collect();
        let ns: Vec<u64> = ups.iter().map(|_| rng.below(1000)).collect();
        (upserts(&ups, &ns), vec![keys(&dels)])
    }

    /// For random pipelines and changes, any split into 1, 2, 3 or 5
    /// ranges gives the rows the single-process update gives.
    #[test]
    fn split_updates_equal_the_single_process_update() {
        // Parts of 3 rows are rewritten by every change; of 24, they take
        // patches (see `patch`).
        for (seed, target) in (1..=4u64).zip([3, 24, 3, 24]) {
            let env = env(target);
            let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let ks: Vec<i64> = (0..300).filter(|_| rng.below(2) == 0).collect();
            let ns: Vec<u64> = ks.iter().map(|_| rng.below(1000)).collect();
            let s1 = first_source(&env, &ks, &ns);
            // The first build, single and split (any ranges: nothing is stored).
            let t1 = single(&env, NodeState::default(), s1.clone(), false);
            let want = decoded(&env, &t1);
            assert!(
                t1.content.len() >= 30 / target,
                "{} content parts",
                t1.content.len()
            );
            for (maps, reduces) in [
                (vec![KeyRange::all()], vec![KeyRange::all()]),
                (
                    plan_from_bounds(&view_src_key(), vec![vec![Some(Value::from(120))]]).unwrap(),
                    plan_from_bounds(
                        &view_key(),
                        vec![
                            vec![Some(Value::from(30))],
                            vec![Some(Value::from(5))],
                            vec![Some(Value::from(104))],
                        ],
                    )
                    .unwrap(),
                ),
            ] {
                let got = split(
                    &env,
                    NodeState::default(),
                    s1.clone(),
                    false,
                    &maps,
                    &reduces,
                );
                assert_eq!(decoded(&env, &got.state), want, "seed {seed}: first build");
                check_order(&env, &got.state);
            }
            // Updates of the stored state.
            let (ups, dels) = changes(&mut rng, &ks, 40);
            let (s2, _) =
                source::apply(&env, &source_view(s1.clone()), it(vec![ups]), dels).unwrap();
            let t2 = single(&env, t1.clone(), s2.clone(), false);
            let want = decoded(&env, &t2);
            assert!(!want.2.is_empty() || !want.3.is_empty(), "a change");
            for k in [1, 2, 3, 5] {
                let got = split(
                    &env,
                    t1.clone(),
                    s2.clone(),
                    false,
                    &plan(&t1.mappings, k),
                    &plan(&t1.content, k),
                );
                assert_eq!(decoded(&env, &got.state), want, "seed {seed}, k = {k}");
                check_order(&env, &got.state);
                // And on from there: the split state updates like the single one.
                let (ups, dels) = changes(
                    &mut Rng::new((seed + k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                    &ks,
                    10,
                );
                let (s3, _) =
                    source::apply(&env, &source_view(s2.clone()), it(vec![ups]), dels).unwrap();
                let want3 = decoded(&env, &single(&env, t2.clone(), s3.clone(), false));
                let got3 = split(
                    &env,
                    got.state.clone(),
                    s3,
                    false,
                    &plan(&got.state.mappings, k),
                    &plan(&got.state.content, k),
                );
                assert_eq!(
                    decoded(&env, &got3.state),
                    want3,
                    "seed {seed}, k = {k}, v3"
                );
            }
            // A rebuild: every source key counts as changed.
            let want = decoded(&env, &single(&env, t2.clone(), s2.clone(), true));
            let got = split(
                &env,
                t2.clone(),
                s2,
                true,
                &plan(&t2.mappings, 3),
                &plan(&t2.content, 3),
            );
            assert_eq!(decoded(&env, &got.state), want, "seed {seed}: rebuild");
        }
    }

    fn view_key() -> arrow_schema::Schema {
        stage_view(NodeState::default())
            .key_schema()
            .unwrap()
            .as_ref()
            .clone()
    }

    fn view_src_key() -> arrow_schema::Schema {
        let v = stage_view(NodeState::default());
        v.mappings_layout(&env(3))
            .unwrap()
            .cut_schema()
            .unwrap()
            .as_ref()
            .clone()
    }

    /// `Produce` of a join of two sources: each key with rows on either
    /// side emits one row, `(sum % 37, k, "v<sum>")`, `sum` over both sides'
    /// values.
    fn produce_join(run: &mut StageRun) {
        while let Some(chunk) = run.next_chunk(true, 5).unwrap() {
            let keys = chunk.keys.column(0).as_primitive::<Int64Type>();
            let (mut t, mut s, mut vs) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..chunk.keys.num_rows() {
                let mut sum = 0i64;
                for (rows, offsets) in &chunk.sources {
                    let v = rows.column(1).as_string::<i32>();
                    for r in offsets[i]..offsets[i + 1] {
                        sum += v.value(r as usize)[1..].parse::<i64>().unwrap();
                    }
                }
                t.push(sum % 37);
                s.push(keys.value(i));
                vs.push(format!("v{sum}"));
            }
            emit(run, t, s, vs);
        }
    }

    fn sources(a: &NodeState, b: &NodeState) -> Vec<NodeView> {
        vec![
            NodeView {
                name: "a".into(),
                ..source_view(a.clone())
            },
            NodeView {
                name: "b".into(),
                ..source_view(b.clone())
            },
        ]
    }

    /// A join's update, single and split by 1, 2, 3 or 5 ranges.
    fn join_update(env: &Env, stage: &NodeState, a: &NodeState, b: &NodeState) -> NodeState {
        let mut run =
            StageRun::new(env.clone(), stage_view(stage.clone()), sources(a, b), false).unwrap();
        produce_join(&mut run);
        let want = run.finish().unwrap().0;
        for k in [1, 2, 3, 5] {
            let view = stage_view(stage.clone());
            let mut maps = Vec::new();
            let (mut emitted, mut removed, mut derived) = (Vec::new(), Vec::new(), Vec::new());
            for r in plan(&stage.mappings, k) {
                let mut run =
                    StageRun::for_range(env.clone(), view.clone(), sources(a, b), false, &r)
                        .unwrap();
                produce_join(&mut run);
                let out = run.finish_map().unwrap();
                emitted.extend(out.emitted.map(|b| b.unwrap()));
                removed.extend(out.removed);
                derived.extend(out.derived);
                maps.push(out.mappings);
            }
            let mut reduced = Vec::new();
            for r in plan(&stage.content, k) {
                let f = RangeFilter::new(&r, view.key_schema().unwrap()).unwrap();
                let pick = |v: &[RecordBatch]| -> Vec<RecordBatch> {
                    v.iter().map(|b| f.keep(b, &view.key).unwrap()).collect()
                };
                let (e, rm) = (it(pick(&emitted)), pick(&removed));
                let out = reduce_range(env, &view, &r, e, rm, derived.clone(), false).unwrap();
                reduced.push(out);
            }
            let got = stitch_stage(env, &view, &maps, &reduced).unwrap();
            assert_eq!(decoded(env, &got), decoded(env, &want), "join, k = {k}");
        }
        want
    }

    /// A join of two sources with random changes on either side.
    #[test]
    fn split_join_updates_equal_the_single_process_update() {
        for seed in 1..=3u64 {
            let env = env(3);
            let mut rng = Rng::new(seed * 0x2545_F491_4F6C_DD1D + 7);
            let side = |rng: &mut Rng| {
                let ks: Vec<i64> = (0..200).filter(|_| rng.below(2) == 0).collect();
                let ns: Vec<u64> = ks.iter().map(|_| rng.below(1000)).collect();
                let s = first_source(&env, &ks, &ns);
                (ks, s)
            };
            let (ka, a1) = side(&mut rng);
            let (kb, b1) = side(&mut rng);
            let t1 = join_update(&env, &NodeState::default(), &a1, &b1);
            assert!(
                t1.mappings.len() >= 10,
                "{} mapping parts",
                t1.mappings.len()
            );
            let (ups, dels) = changes(&mut rng, &ka, 30);
            let (a2, _) = source::apply(&env, &source_view(a1), it(vec![ups]), dels).unwrap();
            let (ups, dels) = changes(&mut rng, &kb, 30);
            let (b2, _) = source::apply(&env, &source_view(b1), it(vec![ups]), dels).unwrap();
            join_update(&env, &t1, &a2, &b2);
        }
    }

    /// A source's first version: `ks` upserted with values `ns`.
    fn first_source(env: &Env, ks: &[i64], ns: &[u64]) -> NodeState {
        let empty = source_view(NodeState::default());
        source::apply(env, &empty, it(vec![upserts(ks, ns)]), vec![])
            .unwrap()
            .0
    }

    /// A source of keys `0..n` (key `k` holding `"v<value(k)>"`) and the
    /// stage built from it in one process.
    fn built(env: &Env, n: u64, value: impl Fn(u64) -> u64) -> (NodeState, NodeState) {
        let ks: Vec<i64> = (0..n as i64).collect();
        let ns: Vec<u64> = (0..n).map(value).collect();
        let s1 = first_source(env, &ks, &ns);
        let t1 = single(env, NodeState::default(), s1.clone(), false);
        (s1, t1)
    }

    fn objects(env: &Env) -> Vec<String> {
        let mut o: Vec<String> = crate::runtime::block_on(env.store.list("p", true))
            .unwrap()
            .unwrap()
            .objects
            .into_iter()
            .map(|m| m.key)
            .collect();
        o.sort();
        o
    }

    /// A change to one source key: the map tasks of the other source
    /// ranges and the reduce tasks of the untouched target ranges write
    /// nothing and keep their parts by reference.
    #[test]
    fn a_range_no_change_touches_writes_nothing() {
        let env = env(3);
        let (s1, t1) = built(&env, 120, |k| (k * 7) % 1000);
        // Key 0 held "v0" (targets 0 and 100); now "v1" (target 1).
        let (s2, _) = source::apply(
            &env,
            &source_view(s1),
            it(vec![upserts(&[0], &[1])]),
            vec![],
        )
        .unwrap();
        let (maps, reduces) = (plan(&t1.mappings, 3), plan(&t1.content, 5));
        let got = split(&env, t1.clone(), s2.clone(), false, &maps, &reduces);
        assert_eq!(
            decoded(&env, &got.state),
            decoded(&env, &single(&env, t1.clone(), s2, false))
        );
        assert!(!got.map_created[0].is_empty());
        assert!(
            got.map_created[1..].iter().all(|c| c.is_empty()),
            "{:?}",
            got.map_created
        );
        let view = stage_view(t1.clone());
        for (i, (r, out)) in reduces.iter().zip(&got.reduced).enumerate() {
            let f = RangeFilter::new(r, view.key_schema().unwrap()).unwrap();
            let stored = f.parts_in(&t1.content).unwrap();
            let touched = [0, 1, 100]
                .iter()
                .any(|k| f.keep(&keys(&[*k]), &["ks".into()]).unwrap().num_rows() > 0);
            if touched {
                assert!(!got.reduce_created[i].is_empty(), "range {i}");
            } else {
                assert!(
                    got.reduce_created[i].is_empty(),
                    "range {i}: {:?}",
                    out.created
                );
                assert_eq!(out.content.parts, stored, "range {i}: kept by reference");
                assert!(out.update.is_empty());
            }
        }
    }

    /// A reduce task that fails after it wrote parts removes them; so does
    /// one given a row outside its range (before writing anything).
    #[test]
    fn a_failed_reduce_removes_what_it_wrote() {
        let env = env(3);
        let (_, t1) = built(&env, 120, |k| k);
        let before = objects(&env);
        // New rows for every target key, so every part is rewritten; the
        // last part is damaged: its read fails after the others were written.
        let mut damaged = t1.clone();
        let last = damaged.content.len() - 1;
        damaged.content[last].sha256 = "00".repeat(32);
        let view = stage_view(damaged);
        let targets: Vec<i64> = (0..37).chain(100..111).collect();
        let rows = RecordBatch::try_new(
            view.schema.clone(),
            vec![
                Arc::new(Int64Array::from(targets.clone())),
                Arc::new(Int64Array::from(vec![1000i64; targets.len()])),
                Arc::new(arrow_array::StringArray::from(vec!["x"; targets.len()])),
            ],
        )
        .unwrap();
        let err = reduce_range(
            &env,
            &view,
            &KeyRange::all(),
            it(vec![rows.clone()]),
            vec![],
            vec![],
            false,
        )
        .unwrap_err();
        assert!(matches!(err, Error::PartCorrupted { .. }), "{err}");
        assert_eq!(objects(&env), before, "what the task wrote is removed");
        // Rows outside the task's range.
        let r = plan(&t1.content, 3)[1].clone();
        let view = stage_view(t1);
        let err = reduce_range(
            &env,
            &view,
            &r,
            it(vec![rows.clone()]),
            vec![],
            vec![],
            false,
        )
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert_eq!(objects(&env), before);
        // Clipped: only the range's rows are merged.
        let inside = RangeFilter::new(&r, view.key_schema().unwrap())
            .unwrap()
            .keep(&rows, &view.key)
            .unwrap()
            .num_rows();
        assert!(inside < rows.num_rows());
        let out = reduce_range(&env, &view, &r, it(vec![rows]), vec![], vec![], true).unwrap();
        assert_eq!(out.emitted_rows, inside as u64);
    }

    /// Stitching refuses overlapping ranges and ranges that cut a part.
    #[test]
    fn stitching_checks_its_ranges() {
        let env = env(3);
        let (_, t1) = built(&env, 60, |k| k);
        let view = stage_view(t1.clone());
        let ks = view.key_schema().unwrap();
        let keep = |range: KeyRange| {
            let parts = RangeFilter::new(&range, ks.clone())
                .and_then(|f| f.parts_in(&t1.content))
                .unwrap_or_default();
            RangeParts { range, parts }
        };
        // Nothing rewritten: the stored list comes back.
        let ranges = plan(&t1.content, 3);
        let all: Vec<RangeParts> = ranges.iter().cloned().map(keep).collect();
        assert_eq!(stitch_parts(&t1.content, &ks, &all).unwrap(), t1.content);
        assert_eq!(
            stitch_parts(&t1.content, &ks, &all[1..2]).unwrap(),
            t1.content
        );
        let overlap = vec![
            keep(KeyRange::all()),
            RangeParts {
                range: KeyRange {
                    lo: bound(3),
                    hi: None,
                },
                parts: vec![],
            },
        ];
        assert!(stitch_parts(&t1.content, &ks, &overlap).is_err());
        let mid = t1.content[1].first_key[0]
            .as_ref()
            .and_then(|v| v.as_i64())
            .unwrap();
        let last = t1.content[1].last_key[0]
            .as_ref()
            .and_then(|v| v.as_i64())
            .unwrap();
        if last > mid {
            let cut = vec![RangeParts {
                range: KeyRange {
                    lo: bound(mid + 1),
                    hi: None,
                },
                parts: vec![],
            }];
            assert!(stitch_parts(&t1.content, &ks, &cut).is_err());
        }
    }

    /// The source's rows `(k, v)`, in order.
    fn source_rows(env: &Env, s: &NodeState) -> Vec<(i64, String)> {
        source_view(s.clone())
            .full_scan(env)
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let (k, v) = (
                    b.column(0).as_primitive::<Int64Type>().clone(),
                    b.column(1).as_string::<i32>().clone(),
                );
                (0..b.num_rows())
                    .map(|i| (k.value(i), v.value(i).to_string()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The longest run of parts sharing one key (see `parts::units`).
    fn widest_unit(parts: &[RangePart], schema: &SchemaRef, key: &[String]) -> usize {
        crate::producers::parts::units(parts, schema, key)
            .unwrap()
            .iter()
            .map(|u| u.len())
            .max()
            .unwrap_or(0)
    }

    /// A source key with many rows spans 5+ parts (and so do target keys
    /// and key-mappings): a full build, updates of that key, of its
    /// neighbours, its deletion, and a join with it on one side, each
    /// single and split by key range, all equal a rebuild from scratch.
    #[test]
    fn a_key_spanning_parts_updates_like_any_other() {
        let env = env(3);
        let heavy = |k: i64, n: u64, base: u64| -> (Vec<i64>, Vec<u64>) {
            (vec![k; n as usize], (base..base + n).collect())
        };
        let (mut ks, mut ns): (Vec<i64>, Vec<u64>) = ((0..40).collect(), (0..40).collect());
        let (hk, hn) = heavy(20, 40, 500);
        ks.extend(hk);
        ns.extend(hn);
        let s1 = first_source(&env, &ks, &ns);
        let sv = source_view(s1.clone());
        let layout = sv.content_layout(&env);
        assert!(
            widest_unit(&s1.content, &layout.schema, &sv.key) >= 5,
            "key 20 spans 5+ parts"
        );
        assert!(s1.content.iter().all(|p| p.rows <= 6), "parts are capped");
        assert_eq!(source_rows(&env, &s1).len(), 80);
        let t1 = single(&env, NodeState::default(), s1.clone(), false);
        let sv1 = stage_view(t1.clone());
        let ml = sv1.mappings_layout(&env).unwrap();
        assert!(widest_unit(&t1.mappings, &ml.schema, &sv1.source_key) >= 5);
        let check = |t: &NodeState, s: &NodeState, what: &str| {
            let scratch = single(&env, NodeState::default(), s.clone(), true);
            let (got, want) = (decoded(&env, t), decoded(&env, &scratch));
            assert_eq!((&got.0, &got.1), (&want.0, &want.1), "{what}");
            check_order(&env, t);
        };
        check(&t1, &s1, "first build");
        let mut s = s1;
        let mut t = t1;
        let steps: Vec<(&str, RecordBatch, Vec<RecordBatch>)> = vec![
            (
                "the spanning key upserted",
                {
                    let (k, n) = heavy(20, 33, 700);
                    upserts(&k, &n)
                },
                vec![],
            ),
            ("a neighbour upserted", upserts(&[19, 21], &[3, 6]), vec![]),
            ("a neighbour deleted", upserts(&[], &[]), vec![keys(&[21])]),
            (
                "the spanning key deleted",
                upserts(&[], &[]),
                vec![keys(&[20])],
            ),
        ];
        for (what, ups, dels) in steps {
            let (s2, _) =
                source::apply(&env, &source_view(s.clone()), it(vec![ups]), dels).unwrap();
            // The source itself: key 20's rows are all replaced or gone.
            let rows = source_rows(&env, &s2);
            assert!(rows.windows(2).all(|w| w[0].0 <= w[1].0), "{what}: sorted");
            let t2 = single(&env, t.clone(), s2.clone(), false);
            check(&t2, &s2, what);
            // The change feed: every row of each touched target key.
            let (c, _, u, _) = decoded(&env, &t2);
            let touched: std::collections::BTreeSet<i64> = u.iter().map(|r| r.0).collect();
            let all: Vec<_> = c
                .iter()
                .filter(|r| touched.contains(&r.0))
                .cloned()
                .collect();
            assert_eq!(u, all, "{what}: the update holds whole target keys");
            for k in [2, 3, 5] {
                let got = split(
                    &env,
                    t.clone(),
                    s2.clone(),
                    false,
                    &plan(&t.mappings, k),
                    &plan(&t.content, k),
                );
                assert_eq!(
                    decoded(&env, &got.state),
                    decoded(&env, &t2),
                    "{what}, k = {k}"
                );
            }
            (s, t) = (s2, t2);
        }
        assert!(source_rows(&env, &s).iter().all(|r| r.0 != 20));
        // A join with the spanning key on one side only.
        let (hk, hn) = heavy(20, 40, 100);
        let a1 = first_source(&env, &hk, &hn);
        let b1 = first_source(&env, &[19, 20, 21], &[1, 2, 3]);
        let j1 = join_update(&env, &NodeState::default(), &a1, &b1);
        let sum: u64 = (100..140).sum::<u64>() + 2;
        assert!(
            triples(&env, &stage_view(j1.clone()), &j1.content).contains(&(
                (sum % 37) as i64,
                20,
                format!("v{sum}")
            )),
            "key 20 joined whole"
        );
        let (a2, _) = source::apply(
            &env,
            &source_view(a1),
            it(vec![upserts(&[20, 20], &[1, 1])]),
            vec![],
        )
        .unwrap();
        let j2 = join_update(&env, &j1, &a2, &b1);
        assert!(
            triples(&env, &stage_view(j2.clone()), &j2.content).contains(&(
                4,
                20,
                "v4".to_string()
            ))
        );
    }
}
