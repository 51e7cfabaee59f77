//! One stage's incremental update (the seed's Implementation 2) over its
//! stored key-range parts.
//!
//! A [`StageRun`] hands the caller (the Python facade, which calls the
//! user's `Produce`) the groups of every changed source key, takes back what
//! `Produce` emitted as `(K_t, K_s, V)` rows, and then, in [`StageRun::finish`]:
//!
//! 1. rewrites the key-mappings parts that hold the changed source keys:
//!    their old rows go (and are returned: the *old targets*), the new
//!    `(K_s, K_t)` rows come in;
//! 2. rewrites the content parts that hold an old target or a new row:
//!    rows of changed source keys go, the new rows come in;
//! 3. selects, from the rewritten content parts, every row of each touched
//!    target key, and lists the touched target keys left with no row: the
//!    update the stages downstream consume.
//!
//! Only the emitted rows and the touched keys are sorted; the stored parts
//! are read and written only where the change lands, the others are kept
//! by reference. So an update costs in proportion to the change.
//!
//! The same update split into tasks by key range (Spark) is in
//! [`super::split_stage`]; both call the steps of [`super::steps`].

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::chunks::{Chunk, JoinChunker, SingleChunker};
use std::sync::Arc;

use super::key_range::RangeFilter;
use super::manifest::{NodeState, UpdateFiles};
use super::merge::{dedup_sorted, merge_sorted};
use super::node::{renamed, union_of_update_keys, Env, Kind, NodeView};
use super::sort::{ExternalSorter, BATCH_ROWS};
use super::steps::{self, ChangedKeys};
use super::BatchIter;
use crate::error::{Error, Result};

enum Input {
    Single(SingleChunker),
    Join(JoinChunker),
}

/// Rows [`StageRun::push`] queues for the sorts at once (larger batches
/// are copied into pieces of this size).
const PUSH_PIECE_ROWS: usize = 65_536;

/// See the module docs.
pub struct StageRun {
    env: Env,
    stage: NodeView,
    input: Input,
    /// The changed source keys, sorted runs (physical `__pds_src.*` names).
    changed: Vec<RecordBatch>,
    changed_schema: SchemaRef,
    sorting: SortWorker,
    mapping_idx: Vec<usize>,
    /// The key-mappings' mode: see [`NodeView::mappings_mode`].
    mode: usize,
    /// The source-key range the input is restricted to (a map task's).
    scope: Option<Arc<RangeFilter>>,
    /// Rows handed out / taken back.
    pub rows_in: u64,
    pub rows_out: u64,
}

impl StageRun {
    /// Start updating `stage` from `sources` (in the stage's order) at the
    /// versions they were just updated to. With `rebuild`, every source key
    /// counts as changed and its whole content is handed out again.
    pub fn new(env: Env, stage: NodeView, sources: Vec<NodeView>, rebuild: bool) -> Result<Self> {
        Self::start(env, stage, sources, rebuild, None)
    }

    /// [`Self::new`], with the input restricted to the source keys in
    /// `scope` (see [`super::split_stage`]); the sources are read only where
    /// their parts may hold such keys.
    pub(super) fn start(
        env: Env,
        stage: NodeView,
        sources: Vec<NodeView>,
        rebuild: bool,
        scope: Option<Arc<RangeFilter>>,
    ) -> Result<Self> {
        if stage.kind != Kind::Stage || sources.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{:?} is not a stage with sources",
                stage.name
            )));
        }
        let changed_schema = {
            let idx = crate::parquet::decode::column_indices(&stage.schema, &stage.source_key)?;
            std::sync::Arc::new(stage.schema.project(&idx)?)
        };
        for s in &sources {
            let types: Vec<_> = s
                .key_schema()?
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            let want: Vec<_> = changed_schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            if types != want {
                return Err(Error::InvalidArgument(format!(
                    "stage {:?}: source {:?} has key types {types:?}, the stage's source key is {want:?}",
                    stage.name, s.name
                )));
            }
        }
        let sources = match &scope {
            Some(f) => sources.iter().map(|s| f.prune(s)).collect::<Result<_>>()?,
            None => sources,
        };
        // Only the rows of the source keys in scope (any key names).
        let keep = |stream: BatchIter, key: &[String]| -> BatchIter {
            match &scope {
                Some(f) => f.filtered(stream, key),
                None => stream,
            }
        };
        let keep_all = |batches: Vec<RecordBatch>, key: &[String]| -> Result<Vec<RecordBatch>> {
            keep(Box::new(batches.into_iter().map(Ok)), key).collect()
        };
        let mut changed = Vec::new();
        let input = if sources.len() == 1 {
            let s = &sources[0];
            let stream = if rebuild {
                keep(s.full_scan(&env)?, &s.key)
            } else {
                for d in keep_all(s.update_deleted(&env)?, &s.key)? {
                    changed.push(renamed(&d, &stage.source_key)?);
                }
                keep(s.update_rows(&env), &s.key)
            };
            Input::Single(SingleChunker::new(s.public_schema()?, &s.key, stream)?)
        } else {
            let names = sources[0].key.clone();
            let keys = if rebuild {
                let mut all: Vec<BatchIter> = Vec::new();
                for s in &sources {
                    let ks = s.key_schema()?;
                    let key = s.key.clone();
                    let scan = keep(s.full_scan(&env)?, &key);
                    let idx = crate::parquet::decode::column_indices(&*s.public_schema()?, &key)?;
                    let names = names.clone();
                    all.push(dedup_sorted(
                        ks,
                        &key,
                        Box::new(scan.map(move |b| renamed(&b?.project(&idx)?, &names))),
                    )?);
                }
                let ks = renamed_schema(&sources[0].key_schema()?, &names);
                let merged = merge_sorted(ks.clone(), &names, all, BATCH_ROWS)?;
                dedup_sorted(ks, &names, merged)?.collect::<Result<Vec<_>>>()?
            } else {
                let refs: Vec<&NodeView> = sources.iter().collect();
                keep_all(union_of_update_keys(&env, &refs, &names)?, &names)?
            };
            let mut inputs = Vec::new();
            // Each side streams (scanned part by part as the chunks need it).
            for s in &sources {
                let rows = if rebuild {
                    keep(s.full_scan(&env)?, &s.key)
                } else {
                    keep(s.augmented(&env, &keys)?, &s.key)
                };
                inputs.push((s.public_schema()?, s.key.clone(), rows));
            }
            for k in &keys {
                changed.push(renamed(k, &stage.source_key)?);
            }
            let ks = keys
                .first()
                .map(|k| k.schema())
                .unwrap_or_else(|| renamed_schema(&changed_schema, &names));
            Input::Join(JoinChunker::new(
                ks,
                Box::new(keys.into_iter().map(Ok)),
                inputs,
            )?)
        };
        let mapping_cols: Vec<String> =
            stage.source_key.iter().chain(&stage.key).cloned().collect();
        let mapping_idx = crate::parquet::decode::column_indices(&stage.schema, &mapping_cols)?;
        let mapping_schema = std::sync::Arc::new(stage.schema.project(&mapping_idx)?);
        let half = Env {
            sort_budget: (env.sort_budget / 2).max(1),
            ..env.clone()
        };
        let content_key: Vec<String> = stage.key.iter().chain(&stage.source_key).cloned().collect();
        let mode = stage.mappings_mode(env.derive_mappings);
        Ok(Self {
            mode,
            sorting: SortWorker::start(
                half.sorter(stage.schema.clone(), &content_key)?,
                half.sorter(mapping_schema, &mapping_cols)?,
            ),
            mapping_idx,
            scope,
            changed,
            changed_schema,
            input,
            stage,
            env,
            rows_in: 0,
            rows_out: 0,
        })
    }

    /// The store the run writes to.
    pub fn store(&self) -> std::sync::Arc<crate::store::StoreHandle> {
        self.env.store.clone()
    }

    /// The stage's physical schema: what [`Self::push`] takes.
    pub fn schema(&self) -> SchemaRef {
        self.stage.schema.clone()
    }

    /// The next chunk of groups (see [`Chunk`]); `whole` for the batched
    /// form; about `max_rows` rows (a join: that many keys at most).
    pub fn next_chunk(&mut self, whole: bool, max_rows: usize) -> Result<Option<Chunk>> {
        self.next_chunk_limited(whole, max_rows, usize::MAX)
    }

    /// [`Self::next_chunk`]; a join's chunk holds at most `side_rows` rows
    /// of each source, and may end with an open key (see
    /// [`super::chunks::JoinChunker`], [`Self::open_sources`]).
    pub fn next_chunk_limited(
        &mut self,
        whole: bool,
        max_rows: usize,
        side_rows: usize,
    ) -> Result<Option<Chunk>> {
        let chunk = match &mut self.input {
            Input::Single(c) => c.next(whole, max_rows)?,
            Input::Join(c) => c.next(max_rows, side_rows)?,
        };
        if let Some(c) = &chunk {
            // The changed keys matter only where rows are stored (to find them).
            let stored =
                !self.stage.state.content.is_empty() || !self.stage.state.mappings.is_empty();
            if stored && matches!(self.input, Input::Single(_)) {
                self.changed.push(renamed(&c.keys, &self.stage.source_key)?);
            }
            self.rows_in += c.sources.iter().map(|s| s.0.num_rows() as u64).sum::<u64>();
        }
        Ok(chunk)
    }

    /// A join: the sources that may have more rows of the last chunk's
    /// last key (pull them with [`Self::pull_open`]); empty otherwise.
    pub fn open_sources(&self) -> Vec<usize> {
        match &self.input {
            Input::Join(c) => c.open_sources(),
            Input::Single(_) => Vec::new(),
        }
    }

    /// A join: up to `max_rows` more rows (public columns) of the open key
    /// from source `source`; `None` once it has no more.
    pub fn pull_open(&mut self, source: usize, max_rows: usize) -> Result<Option<RecordBatch>> {
        let got = match &mut self.input {
            Input::Join(c) => c.pull_open(source, max_rows)?,
            Input::Single(_) => None,
        };
        if let Some(b) = &got {
            self.rows_in += b.num_rows() as u64;
        }
        Ok(got)
    }

    /// Rows `Produce` emitted: the stage's physical schema exactly.
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.schema().fields() != self.stage.schema.fields() {
            return Err(Error::SchemaMismatch {
                key: self.stage.name.clone(),
                reason: format!(
                    "emitted rows have schema {:?}, the stage's is {:?}",
                    batch.schema(),
                    self.stage.schema
                ),
            });
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.rows_out += batch.num_rows() as u64;
        // A large batch (a batched Produce's output for a large chunk) is
        // queued in pieces copied out of it: the queue holds a few pieces,
        // not a few large batches, and the sorts account each piece's own
        // buffers (a slice's size would count the whole batch's).
        if batch.num_rows() <= PUSH_PIECE_ROWS {
            let mapping = self.mapping_rows(&batch, true)?;
            return self.sorting.send(batch, mapping);
        }
        for start in (0..batch.num_rows()).step_by(PUSH_PIECE_ROWS) {
            let len = PUSH_PIECE_ROWS.min(batch.num_rows() - start);
            let piece = crate::owned::batch_slice(&batch, start, len)?;
            let mapping = self.mapping_rows(&piece, false)?;
            self.sorting.send(piece, mapping)?;
        }
        Ok(())
    }

    /// The key-mappings rows `(K_s, K_t)` of emitted rows that are stored
    /// (see [`steps::stored_mappings`]); copied if `batch` may be one
    /// imported from Python, which they would otherwise keep whole in the
    /// mappings' sort (see [`crate::owned`]).
    ///
    /// A filtered result is already a copy (an all-false or partial
    /// filter builds new buffers), so only an unfiltered one is copied.
    fn mapping_rows(&self, batch: &RecordBatch, copy: bool) -> Result<RecordBatch> {
        let rows = batch.project(&self.mapping_idx)?;
        let all = rows.num_rows();
        let kept = steps::stored_mappings(&self.stage, rows, self.mode)?;
        if copy && kept.num_rows() == all {
            return crate::owned::batch(&kept);
        }
        Ok(kept)
    }

    /// What both [`Self::finish`] and a map task's finish start from: the
    /// sorts joined, the changed source keys sorted.
    pub(super) fn finishing(self) -> Result<Finishing> {
        let Self {
            env,
            stage,
            changed,
            changed_schema,
            sorting,
            scope,
            rows_in,
            rows_out,
            mode,
            ..
        } = self;
        let (content, mappings) = sorting.join()?;
        let stored = !stage.state.content.is_empty() || !stage.state.mappings.is_empty();
        // The changed source keys, sorted and distinct (runs are sorted each).
        let changed = ChangedKeys::new(&env, &stage, &changed_schema, changed, stored)?;
        Ok(Finishing {
            env,
            stage,
            changed,
            content,
            mappings,
            scope,
            rows_in,
            rows_out,
            mode,
        })
    }

    /// Apply what was emitted (see the module docs); returns the stage's
    /// new state and every object written. Nothing is committed here; a
    /// failure removes what this call wrote.
    pub fn finish(self) -> Result<(NodeState, Vec<String>)> {
        let Finishing {
            env,
            stage,
            changed,
            content,
            mappings,
            mode,
            ..
        } = self.finishing()?;
        let token = env.token();
        let base = format!("nodes/{}", stage.name);
        let stored = changed.stored;
        let mut created = Vec::new();
        let result = (|| {
            // 1. Key-mappings: the old targets of the changed keys go.
            let rewrite_mappings = || -> Result<super::partset::PartsRewritten> {
                steps::rewrite_mappings(
                    &env,
                    &stage,
                    &stage.state.mappings,
                    &changed,
                    mappings.finish()?,
                    format!("{base}/mappings/{token}"),
                )
            };
            // The content rewrite finds the rows no stored pair points to.
            let derived = steps::derived_change(&changed, mode)?;
            let rewrite_content = |old_targets: Vec<RecordBatch>| {
                steps::rewrite_content(
                    &env,
                    &stage,
                    &stage.state.content,
                    steps::remove_source_keys(&stage, &changed.set, stored),
                    old_targets,
                    content.finish()?,
                    (format!("{base}/content/{token}"), derived),
                )
            };
            let (m, c) = if stored {
                let m = rewrite_mappings()?;
                created.extend(m.created.iter().cloned());
                // The old targets of the stored pairs, sorted by target key.
                let old_targets = steps::old_targets(&env, &stage, &m.removed)?;
                let c = rewrite_content(old_targets)?;
                (m, c)
            } else {
                // Nothing stored, no old targets: both are written at once.
                let (m, c) = std::thread::scope(|scope| {
                    let m = scope.spawn(|| crate::error::contained(rewrite_mappings));
                    let c = rewrite_content(Vec::new());
                    let m = m.join().unwrap_or_else(|_| {
                        Err(Error::Task("a key-mappings write panicked".into()))
                    });
                    (m, c)
                });
                for done in [&m, &c].into_iter().flatten() {
                    created.extend(done.created.iter().cloned());
                }
                (m?, c?)
            };
            // 2. Content, and 3. the update: written above.
            if stored {
                created.extend(c.created.iter().cloned());
            }
            let deleted = write_deleted(
                &env,
                &stage,
                &format!("{base}/update/{token}"),
                (c.deleted, c.deleted_file),
                &mut created,
            )?;
            Ok(NodeState {
                content: c.parts,
                mappings: m.parts,
                derived_prefix: mode,
                update: UpdateFiles {
                    rows: c.selected,
                    deleted,
                },
            })
        })();
        match result {
            Ok(state) => Ok((state, created)),
            Err(e) => {
                let _ = crate::runtime::block_on(env.store.delete_many(&created));
                Err(e)
            }
        }
    }
}

/// The two sorts of what `Produce` emits (content, key-mappings), fed on a
/// thread of their own, so that sorting overlaps the caller's `Produce`.
struct SortWorker {
    tx: Option<std::sync::mpsc::SyncSender<(RecordBatch, RecordBatch)>>,
    handle: Option<std::thread::JoinHandle<Result<(ExternalSorter, ExternalSorter)>>>,
}

impl SortWorker {
    fn start(mut content: ExternalSorter, mut mappings: ExternalSorter) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(RecordBatch, RecordBatch)>(4);
        let handle = std::thread::Builder::new()
            .name("pds-sort".into())
            .spawn(move || {
                for (c, m) in rx {
                    content.push(c)?;
                    mappings.push(m)?;
                }
                Ok((content, mappings))
            })
            .ok();
        Self {
            tx: Some(tx),
            handle,
        }
    }

    /// Queue rows (blocks while the sorts are 4 batches behind).
    fn send(&mut self, content: RecordBatch, mapping: RecordBatch) -> Result<()> {
        let sent = self
            .tx
            .as_ref()
            .map(|tx| tx.send((content, mapping)).is_ok());
        if sent == Some(true) {
            return Ok(());
        }
        // The worker stopped: its error says why.
        self.tx = None;
        match self.join_inner() {
            Err(e) => Err(e),
            Ok(_) => Err(Error::Task("the sort stopped".into())),
        }
    }

    fn join_inner(&mut self) -> Result<(ExternalSorter, ExternalSorter)> {
        self.tx = None;
        match self.handle.take() {
            None => Err(Error::Task(
                "the sort thread could not start or was joined".into(),
            )),
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(Error::Task("the sort thread panicked".into()))),
        }
    }

    /// Every row queued, in the two sorters.
    fn join(mut self) -> Result<(ExternalSorter, ExternalSorter)> {
        self.join_inner()
    }
}

impl Drop for SortWorker {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// See [`StageRun::finishing`].
pub(super) struct Finishing {
    /// The run's environment and stage.
    pub env: Env,
    pub stage: NodeView,
    /// The changed source keys, sorted, distinct.
    pub changed: ChangedKeys,
    /// The emitted rows, by `(K_t, K_s)`.
    pub content: ExternalSorter,
    /// The emitted `(K_s, K_t)` pairs, by `(K_s, K_t)`.
    pub mappings: ExternalSorter,
    /// The source-key range of a map task.
    pub scope: Option<Arc<RangeFilter>>,
    /// Rows handed out / taken back.
    pub rows_in: u64,
    pub rows_out: u64,
    /// The key-mappings' mode: see [`NodeView::mappings_mode`].
    pub mode: usize,
}

/// `schema` with its fields renamed to `names`.
fn renamed_schema(schema: &SchemaRef, names: &[String]) -> SchemaRef {
    std::sync::Arc::new(arrow_schema::Schema::new(
        schema
            .fields()
            .iter()
            .zip(names)
            .map(|(f, n)| f.as_ref().clone().with_name(n))
            .collect::<Vec<_>>(),
    ))
}

/// Write an update's deleted keys (sorted key columns) as parts; if the
/// rewrite already wrote them (`written`, the file its patches share), that
/// file.
pub fn write_deleted(
    env: &Env,
    node: &NodeView,
    prefix: &str,
    (deleted, written): (Vec<RecordBatch>, Option<super::parts::RangePart>),
    created: &mut Vec<String>,
) -> Result<Vec<super::parts::RangePart>> {
    if let Some(file) = written {
        // The rewrite wrote them, for its patches to share.
        return Ok(vec![file]);
    }
    if deleted.iter().all(|b| b.num_rows() == 0) {
        return Ok(Vec::new());
    }
    let layout = node.deleted_layout(env)?;
    let ks = layout.schema.clone();
    let batches = deleted
        .iter()
        .map(|b| RecordBatch::try_new(ks.clone(), b.columns().to_vec()).map_err(Error::from))
        .collect::<Result<Vec<_>>>()?;
    let spec = super::parts::PartSpec {
        location: &env.root,
        prefix,
        target_rows: env.target_rows,
        opts: &env.opts,
    };
    let parts = super::parts::write_range_parts(
        env.store.clone(),
        &spec,
        ks,
        &node.key,
        Box::new(batches.into_iter().map(Ok)),
    )?;
    created.extend(parts.iter().map(|p| layout.object(p)));
    Ok(parts)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::parquet::encode::EncodeOptions;
    use crate::producers::parts::RangePart;
    use crate::producers::source;
    use crate::store::StoreHandle;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    pub(crate) fn it(batches: Vec<RecordBatch>) -> BatchIter {
        Box::new(batches.into_iter().map(Ok))
    }

    pub(crate) fn env(target_rows: usize) -> Env {
        Env {
            store: Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap()),
            root: "p".into(),
            opts: EncodeOptions::new("zstd", None, None).unwrap(),
            target_rows,
            sort_budget: 1 << 20,
            spill: None,
            job: None,
            derive_mappings: true,
        }
    }

    pub(crate) fn source_view(state: NodeState) -> NodeView {
        NodeView {
            name: "src".into(),
            kind: Kind::Source,
            key: vec!["ks".into()],
            values: vec!["v".into()],
            source_key: vec![],
            schema: Arc::new(Schema::new(vec![
                Field::new("ks", DataType::Int64, false),
                Field::new("v", DataType::Utf8, true),
            ])),
            state,
            feeders: vec![],
        }
    }

    pub(crate) fn stage_view(state: NodeState) -> NodeView {
        NodeView {
            name: "st".into(),
            kind: Kind::Stage,
            key: vec!["kt".into()],
            values: vec!["v".into()],
            source_key: vec!["__pds_src.ks".into()],
            schema: Arc::new(Schema::new(vec![
                Field::new("kt", DataType::Int64, false),
                Field::new("__pds_src.ks", DataType::Int64, false),
                Field::new("v", DataType::Utf8, true),
            ])),
            state,
            feeders: vec![],
        }
    }

    pub(crate) fn pairs(ks: &[i64], vs: &[&str]) -> RecordBatch {
        RecordBatch::try_new(
            source_view(NodeState::default()).schema,
            vec![
                Arc::new(Int64Array::from(ks.to_vec())),
                Arc::new(StringArray::from(vs.to_vec())),
            ],
        )
        .unwrap()
    }

    /// The first column (an `Int64`) of every batch of `batches`.
    pub(crate) fn first_i64s(batches: BatchIter) -> Vec<i64> {
        batches
            .flat_map(|b| {
                b.unwrap()
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    /// A source state's content (through its patches), key -> value.
    pub(crate) fn source_rows(env: &Env, state: &NodeState) -> BTreeMap<i64, String> {
        let mut out = BTreeMap::new();
        for b in source_view(state.clone()).full_scan(env).unwrap() {
            let b = b.unwrap();
            let (k, v) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_string::<i32>(),
            );
            for i in 0..b.num_rows() {
                assert!(
                    out.insert(k.value(i), v.value(i).to_string()).is_none(),
                    "a key twice"
                );
            }
        }
        out
    }

    /// A source's first version: `ks` with values `v<k>`.
    pub(crate) fn source_of(env: &Env, ks: &[i64]) -> NodeState {
        let vs: Vec<String> = ks.iter().map(|k| format!("v{k}")).collect();
        let vr: Vec<&str> = vs.iter().map(|s| s.as_str()).collect();
        let view = source_view(NodeState::default());
        source::apply(env, &view, it(vec![pairs(ks, &vr)]), vec![])
            .unwrap()
            .0
    }

    pub(crate) fn keys(ks: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("ks", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(ks.to_vec()))],
        )
        .unwrap()
    }

    /// `Produce` for the seed's example: source key 4 -> 108, 6 -> 105 or
    /// 107 (by value), 9 -> 105; the value passes through.
    fn produce(run: &mut StageRun) {
        while let Some(chunk) = run.next_chunk(false, 2).unwrap() {
            let (rows, _) = &chunk.sources[0];
            let k = rows.column(0).as_primitive::<Int64Type>();
            let v = rows.column(1).as_string::<i32>();
            let target: Vec<i64> = (0..rows.num_rows())
                .map(|i| match (k.value(i), v.value(i)) {
                    (4, _) => 108,
                    (6, "cherry") => 107,
                    (6, _) | (9, _) => 105,
                    (other, _) => other * 100,
                })
                .collect();
            let out = RecordBatch::try_new(
                run.schema(),
                vec![
                    Arc::new(Int64Array::from(target)),
                    rows.column(0).clone(),
                    rows.column(1).clone(),
                ],
            )
            .unwrap();
            run.push(out).unwrap();
        }
    }

    pub(crate) fn triples(
        env: &Env,
        view: &NodeView,
        parts: &[super::super::parts::RangePart],
    ) -> Vec<(i64, i64, String)> {
        let layout = view.content_layout(env);
        layout
            .scan(parts.to_vec(), None)
            .flat_map(|b| {
                let b = b.unwrap();
                let (t, s, v) = (
                    b.column(0).as_primitive::<Int64Type>().clone(),
                    b.column(1).as_primitive::<Int64Type>().clone(),
                    b.column(2).as_string::<i32>().clone(),
                );
                (0..b.num_rows())
                    .map(|i| (t.value(i), s.value(i), v.value(i).to_string()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    pub(crate) fn mapping_pairs(env: &Env, view: &NodeView) -> Vec<(i64, i64)> {
        let layout = view.mappings_layout(env).unwrap();
        layout
            .scan(view.state.mappings.clone(), None)
            .flat_map(|b| {
                let b = b.unwrap();
                let (s, t) = (
                    b.column(0).as_primitive::<Int64Type>().clone(),
                    b.column(1).as_primitive::<Int64Type>().clone(),
                );
                (0..b.num_rows())
                    .map(|i| (s.value(i), t.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    pub(crate) fn deleted(env: &Env, view: &NodeView) -> Vec<i64> {
        view.update_deleted(env)
            .unwrap()
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    /// The seed's worked example, through stored key-range parts: content
    /// (105, 6, apple), (105, 9, banana), (108, 4, mango); source key 6 is
    /// updated; then source key 4 is deleted.
    #[test]
    fn the_seeds_worked_example() {
        let env = env(1);
        // v1: the first build.
        let (s1, _) = source::apply(
            &env,
            &source_view(NodeState::default()),
            it(vec![pairs(&[9, 4, 6], &["banana", "mango", "apple"])]),
            vec![],
        )
        .unwrap();
        let mut run = StageRun::new(
            env.clone(),
            stage_view(NodeState::default()),
            vec![source_view(s1.clone())],
            false,
        )
        .unwrap();
        produce(&mut run);
        let (t1, _) = run.finish().unwrap();
        let st1 = stage_view(t1.clone());
        assert_eq!(
            triples(&env, &st1, &t1.content),
            [
                (105, 6, "apple".into()),
                (105, 9, "banana".into()),
                (108, 4, "mango".into())
            ]
        );
        assert_eq!(mapping_pairs(&env, &st1), [(4, 108), (6, 105), (9, 105)]);
        assert_eq!(
            t1.update.rows, t1.content,
            "a first build's update is its content"
        );
        // Parts are cut at target keys: 105's two rows share one part.
        assert_eq!(t1.content.len(), 2);

        // v2: source key 6 now holds 'cherry' (its Produce emits 107).
        let (s2, _) = source::apply(
            &env,
            &source_view(s1),
            it(vec![pairs(&[6], &["cherry"])]),
            vec![],
        )
        .unwrap();
        let mut run = StageRun::new(
            env.clone(),
            st1.clone(),
            vec![source_view(s2.clone())],
            false,
        )
        .unwrap();
        produce(&mut run);
        assert_eq!(run.rows_in, 1, "only the changed source key is handed out");
        let (t2, _) = run.finish().unwrap();
        let st2 = stage_view(t2.clone());
        assert_eq!(
            triples(&env, &st2, &t2.content),
            [
                (105, 9, "banana".into()),
                (107, 6, "cherry".into()),
                (108, 4, "mango".into())
            ]
        );
        assert_eq!(mapping_pairs(&env, &st2), [(4, 108), (6, 107), (9, 105)]);
        // The update: every row of 105 (not only 6's), and 107's.
        let upd: Vec<(i64, String)> = triples(&env, &st2, &t2.update.rows)
            .into_iter()
            .filter(|r| r.0 == 105 || r.0 == 107)
            .map(|r| (r.0, r.2))
            .collect();
        assert_eq!(upd, [(105, "banana".into()), (107, "cherry".into())]);
        assert!(deleted(&env, &st2).is_empty());

        // v3: source key 4 is deleted: 108 is left with no row.
        let (s3, _) = source::apply(&env, &source_view(s2), it(vec![]), vec![keys(&[4])]).unwrap();
        let mut run = StageRun::new(env.clone(), st2, vec![source_view(s3)], false).unwrap();
        produce(&mut run);
        let (t3, _) = run.finish().unwrap();
        let st3 = stage_view(t3.clone());
        assert_eq!(
            triples(&env, &st3, &t3.content),
            [(105, 9, "banana".into()), (107, 6, "cherry".into())]
        );
        assert_eq!(deleted(&env, &st3), [108]);
        assert!(triples(&env, &st3, &t3.update.rows).is_empty());
    }

    /// A null key, streamed or deleted, is a `SchemaMismatch` before
    /// anything is written.
    #[test]
    fn a_null_key_is_a_schema_mismatch() {
        let env = env(10);
        let loose = Arc::new(Schema::new(vec![
            Field::new("ks", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ]));
        let bad = RecordBatch::try_new(
            loose,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec!["a", "b"])),
            ],
        )
        .unwrap();
        let err = source::apply(
            &env,
            &source_view(NodeState::default()),
            it(vec![pairs(&[5], &["x"]), bad]),
            vec![],
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::SchemaMismatch { reason, .. } if reason.contains("null")),
            "{err}"
        );
        let null_key = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("ks", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![None]))],
        )
        .unwrap();
        let err = source::apply(
            &env,
            &source_view(NodeState::default()),
            it(vec![]),
            vec![null_key],
        )
        .unwrap_err();
        assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
        match crate::runtime::block_on(env.store.list("p", true)).and_then(|r| r) {
            Ok(l) => assert!(l.objects.is_empty(), "nothing written: {:?}", l.objects),
            Err(Error::NotFound { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn an_update_rewrites_only_the_parts_it_lands_in() {
        let env = env(10);
        let n = 1000;
        let ks: Vec<i64> = (0..n).collect();
        let vs: Vec<String> = ks.iter().map(|k| format!("v{k}")).collect();
        let vr: Vec<&str> = vs.iter().map(|s| s.as_str()).collect();
        let (s1, _) = source::apply(
            &env,
            &source_view(NodeState::default()),
            it(vec![pairs(&ks, &vr)]),
            vec![],
        )
        .unwrap();
        assert!(s1.content.len() >= 90, "{} parts", s1.content.len());
        let (s2, created) = source::apply(
            &env,
            &source_view(s1.clone()),
            it(vec![pairs(&[500], &["new"])]),
            vec![keys(&[10])],
        )
        .unwrap();
        // Two parts patched, not rewritten (see `patch`): 500's patch holds
        // its new row (and is the update's rows); 10's patch is its run of
        // the update's deleted keys, the one file the patches share.
        assert_eq!(created.len(), 2, "{created:?}");
        assert_eq!(s2.update.deleted.len(), 1);
        let shared = &s2.update.deleted[0];
        let runs: Vec<_> = s2
            .content
            .iter()
            .flat_map(|p| &p.patches)
            .filter_map(|p| Some((p.deleted.as_ref()?, p.deleted_rows?)))
            .collect();
        assert_eq!(runs, vec![(shared, [0, 1])]);
        let kept = s2.content.iter().filter(|p| s1.content.contains(p)).count();
        assert_eq!(kept, s1.content.len() - 2);
        let patched: Vec<&RangePart> = s2
            .content
            .iter()
            .filter(|p| !p.patches.is_empty())
            .collect();
        assert_eq!(patched.len(), 2);
        for p in &patched {
            assert!(s1.content.iter().any(|q| q.name == p.name), "same file");
        }
        assert_eq!(patched[0].rows + 1, patched[0].file_rows(), "10 deleted");
        assert_eq!(patched[1].rows, patched[1].file_rows(), "500 replaced");
        assert_eq!(
            s2.update.rows,
            vec![patched[1].patches[0].rows.clone().unwrap()]
        );
        let all = first_i64s(source_view(s2.clone()).full_scan(&env).unwrap());
        assert_eq!(all, (0..n).filter(|k| *k != 10).collect::<Vec<_>>());
        assert_eq!(first_i64s(source_view(s2.clone()).update_rows(&env)), [500]);
        assert_eq!(
            source_view(s2.clone())
                .update_keys(&env)
                .unwrap()
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>(),
            2
        );
        // Mixing a deletion and an upsert of one key is refused.
        let err = source::apply(
            &env,
            &source_view(s2),
            it(vec![pairs(&[7], &["x"])]),
            vec![keys(&[7])],
        )
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        let _ = Array::len(&Int64Array::from(vec![1]));
    }
}
