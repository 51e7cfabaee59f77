//! A node of a pipeline as the engine sees it: a source, a stage or a
//! merge, with its schema, its keys and its state at one version, and the
//! reads every update needs from it: its update, its whole content, and
//! its content for some keys only.
//!
//! Physical columns: a source stores `(K, V)`; a stage `(K_t, K_s, V)`,
//! with its source key columns named `__pds_src.<name>`; a merge stores
//! only its update, `(K, V)`. The *public* columns of every node are its
//! key then its values (`K, V`): what `Produce`, `read` and `changes` see.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use serde::Deserialize;

use super::keys::KeyEncoder;
use super::manifest::{check_node_name, NodeState};
use super::merge::{dedup_sorted, merge_sorted};
use super::partset::{filter_by_keys, key_set, PartSet};
use super::sort::{ExternalSorter, BATCH_ROWS};
use super::BatchIter;
use crate::error::{Error, Result};
use crate::parquet::encode::EncodeOptions;
use crate::store::StoreHandle;

/// The prefix of a stage's source key columns.
pub const SOURCE_PREFIX: &str = "__pds_src.";

/// Where and how a pipeline's parts are written and sorted.
#[derive(Debug, Clone)]
pub struct Env {
    pub store: Arc<StoreHandle>,
    /// The pipeline's key.
    pub root: String,
    pub opts: EncodeOptions,
    /// Rows per key-range part.
    pub target_rows: usize,
    /// Memory for each external sort, in bytes.
    pub sort_budget: usize,
    /// Where sorts spill (the system's temp dir if `None`).
    pub spill: Option<PathBuf>,
    /// Objects written are named starting with this (a Spark job's id), so
    /// that the job can find and remove what its failed tasks wrote.
    pub job: Option<String>,
    /// Whether a stage's first build derives the key-mappings its content
    /// holds (see [`NodeView::mappings_mode`]); off only to test stages
    /// stored before that.
    pub derive_mappings: bool,
}

impl Env {
    /// A fresh token to name a write's objects by (the job's id first).
    pub fn token(&self) -> String {
        let token = crate::dataset::unique_token();
        match &self.job {
            Some(job) => format!("{job}{token}"),
            None => token,
        }
    }

    /// A sorter of `schema` by `key` within the sort budget.
    pub fn sorter(&self, schema: SchemaRef, key: &[String]) -> Result<ExternalSorter> {
        ExternalSorter::new(schema, key, self.sort_budget, self.spill.clone())
    }

    /// `batches` sorted by `key` and without repeated rows (all columns).
    pub fn sorted_distinct(
        &self,
        schema: &SchemaRef,
        key: &[String],
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        let mut s = self.sorter(schema.clone(), key)?;
        for b in batches {
            // Same columns, perhaps other names or nullability: take ours.
            s.push(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?)?;
        }
        dedup_sorted(schema.clone(), key, s.finish()?)?.collect()
    }
}

/// Source, stage or merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Source,
    Stage,
    Merge,
}

/// A node and its state, as the Python facade describes it (JSON).
#[derive(Debug, Clone, Deserialize)]
struct NodeSpec {
    name: String,
    kind: Kind,
    key: Vec<String>,
    values: Vec<String>,
    /// The physical schema (Arrow IPC, base64).
    schema: String,
    #[serde(default)]
    state: NodeState,
    #[serde(default)]
    feeders: Vec<NodeSpec>,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub name: String,
    pub kind: Kind,
    /// The (target) key's column names.
    pub key: Vec<String>,
    /// The value columns (not key columns).
    pub values: Vec<String>,
    /// A stage's physical source key columns (`__pds_src.*`); empty otherwise.
    pub source_key: Vec<String>,
    /// The physical schema of its content (a merge's: of its update).
    pub schema: SchemaRef,
    pub state: NodeState,
    /// A merge's feeders.
    pub feeders: Vec<NodeView>,
}

/// `batch` with its columns renamed to `names` (same types, same order).
pub fn renamed(batch: &RecordBatch, names: &[String]) -> Result<RecordBatch> {
    if names.len() != batch.num_columns() {
        return Err(Error::InvalidArgument(format!(
            "{} key columns where {} are expected",
            batch.num_columns(),
            names.len()
        )));
    }
    let fields: Vec<_> = batch
        .schema()
        .fields()
        .iter()
        .zip(names)
        .map(|(f, n)| f.as_ref().clone().with_name(n))
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        batch.columns().to_vec(),
    )?)
}

impl NodeView {
    /// Parse the facade's JSON description (untrusted as any input: names,
    /// schemas and columns are checked).
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: NodeSpec = serde_json::from_str(text)
            .map_err(|e| Error::InvalidArgument(format!("node description: {e}")))?;
        Self::from_spec(spec)
    }

    fn from_spec(spec: NodeSpec) -> Result<Self> {
        check_node_name(&spec.name)?;
        let schema = crate::dataset::manifest::schema_from_ipc_base64(&spec.schema)?;
        let source_key: Vec<String> = schema
            .fields()
            .iter()
            .filter(|f| f.name().starts_with(SOURCE_PREFIX))
            .map(|f| f.name().clone())
            .collect();
        if (spec.kind == Kind::Stage) == source_key.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "node {:?}: only a stage has source key columns",
                spec.name
            )));
        }
        let feeders = spec
            .feeders
            .into_iter()
            .map(Self::from_spec)
            .collect::<Result<Vec<_>>>()?;
        let view = Self {
            name: spec.name,
            kind: spec.kind,
            key: spec.key,
            values: spec.values,
            source_key,
            schema,
            state: spec.state,
            feeders,
        };
        let expected: Vec<String> = view
            .key
            .iter()
            .chain(&view.source_key)
            .chain(&view.values)
            .cloned()
            .collect();
        let have: Vec<String> = view
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        if expected != have || view.key.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "node {:?}: schema columns {have:?} are not key, source key, values {expected:?}",
                view.name
            )));
        }
        let derived = view.state.derived_prefix;
        if derived != 0 && (view.kind != Kind::Stage || derived != view.shared_prefix()) {
            return Err(Error::ManifestCorrupted {
                path: view.name.clone(),
                reason: format!(
                    "its key-mappings are recorded as derived from {derived} key columns, \
                     its keys share {}",
                    view.shared_prefix()
                ),
            });
        }
        if view.kind == Kind::Merge && view.feeders.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "merge {:?} has no feeders",
                view.name
            )));
        }
        Ok(view)
    }

    /// A stage's leading key columns that its source key has too (same
    /// names and types, in the same places): `K_t` of `(user, day)` from
    /// `K_s` of `(user, session_start)` share 1. Rows whose `K_t` begins
    /// with their `K_s`'s values there need no stored key-mapping (see
    /// [`super::manifest::NodeState::derived_prefix`]).
    pub fn shared_prefix(&self) -> usize {
        let ty = |name: &str| {
            self.schema
                .field_with_name(name)
                .ok()
                .map(|f| f.data_type())
        };
        self.key
            .iter()
            .zip(&self.source_key)
            .take_while(|(k, s)| {
                s.strip_prefix(SOURCE_PREFIX) == Some(k.as_str())
                    && ty(k).is_some()
                    && ty(k) == ty(s)
            })
            .count()
    }

    /// The key-mappings an update of this stage writes: those of its
    /// stored state where it stores rows; else (a first build) derived
    /// from [`Self::shared_prefix`] columns where `derive` allows.
    pub fn mappings_mode(&self, derive: bool) -> usize {
        let stored = !self.state.content.is_empty() || !self.state.mappings.is_empty();
        if stored {
            self.state.derived_prefix
        } else if derive {
            self.shared_prefix()
        } else {
            0
        }
    }

    /// Key then values.
    pub fn public(&self) -> Vec<String> {
        self.key.iter().chain(&self.values).cloned().collect()
    }

    /// The schema of [`Self::public`].
    pub fn public_schema(&self) -> Result<SchemaRef> {
        let idx = crate::parquet::decode::column_indices(&self.schema, &self.public())?;
        Ok(Arc::new(self.schema.project(&idx)?))
    }

    /// The schema of the key columns.
    pub fn key_schema(&self) -> Result<SchemaRef> {
        let idx = crate::parquet::decode::column_indices(&self.schema, &self.key)?;
        Ok(Arc::new(self.schema.project(&idx)?))
    }

    fn layout(
        &self,
        env: &Env,
        schema: SchemaRef,
        sort_key: Vec<String>,
        cut_key: Vec<String>,
    ) -> Arc<PartSet> {
        // Page statistics on the cut key: lookups seek (see
        // `crate::parquet::seek`). Sorted keys go without a dictionary.
        let opts = env
            .opts
            .clone()
            .with_page_index(&cut_key)
            .without_dictionary(&sort_key);
        Arc::new(PartSet {
            store: env.store.clone(),
            root: env.root.clone(),
            schema,
            sort_key,
            opts,
            cut_key,
            target_rows: env.target_rows,
            shared_files: Default::default(),
        })
    }

    /// The content's (a merge's: the update's) layout: sorted by the key
    /// (then a stage's source key), cut by the key.
    pub fn content_layout(&self, env: &Env) -> Arc<PartSet> {
        let sort = self.key.iter().chain(&self.source_key).cloned().collect();
        self.layout(env, self.schema.clone(), sort, self.key.clone())
    }

    /// A stage's key-mappings: `(K_s, K_t)`, sorted so, cut by `K_s`.
    pub fn mappings_layout(&self, env: &Env) -> Result<Arc<PartSet>> {
        let cols: Vec<String> = self.source_key.iter().chain(&self.key).cloned().collect();
        let idx = crate::parquet::decode::column_indices(&self.schema, &cols)?;
        let schema = Arc::new(self.schema.project(&idx)?);
        Ok(self.layout(env, schema, cols, self.source_key.clone()))
    }

    /// Deleted keys: the key columns, sorted.
    pub fn deleted_layout(&self, env: &Env) -> Result<Arc<PartSet>> {
        Ok(self.layout(env, self.key_schema()?, self.key.clone(), self.key.clone()))
    }

    /// The rows this version's update holds for its keys (public columns, sorted).
    pub fn update_rows(&self, env: &Env) -> BatchIter {
        self.content_layout(env)
            .scan(self.state.update.rows.clone(), Some(self.public()))
    }

    /// The keys this version's update deleted (key columns, sorted).
    pub fn update_deleted(&self, env: &Env) -> Result<Vec<RecordBatch>> {
        self.deleted_layout(env)?
            .scan(self.state.update.deleted.clone(), None)
            .collect()
    }

    /// Every key this version's update changed (upserted or deleted), sorted, distinct.
    pub fn update_keys(&self, env: &Env) -> Result<Vec<RecordBatch>> {
        let ks = self.key_schema()?;
        let upserted = dedup_sorted(
            ks.clone(),
            &self.key,
            self.content_layout(env)
                .scan(self.state.update.rows.clone(), Some(self.key.clone())),
        )?;
        let deleted: BatchIter = Box::new(self.update_deleted(env)?.into_iter().map(Ok));
        merge_sorted(ks, &self.key, vec![upserted, deleted], BATCH_ROWS)?.collect()
    }

    /// The whole content (public columns, sorted by key). A merge's is the
    /// merge of its feeders'.
    pub fn full_scan(&self, env: &Env) -> Result<BatchIter> {
        match self.kind {
            Kind::Merge => {
                let inputs = self
                    .feeders
                    .iter()
                    .map(|f| f.full_scan(env))
                    .collect::<Result<Vec<_>>>()?;
                merge_sorted(self.public_schema()?, &self.key, inputs, BATCH_ROWS)
            }
            _ => Ok(self
                .content_layout(env)
                .scan(self.state.content.clone(), Some(self.public()))),
        }
    }

    /// The content rows (public columns, sorted) of `keys` (batches of key
    /// columns, any names). Reads only the parts holding them.
    pub fn lookup(&self, env: &Env, keys: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
        let keys = keys
            .iter()
            .map(|k| renamed(k, &self.key))
            .collect::<Result<Vec<_>>>()?;
        match self.kind {
            Kind::Merge => {
                let mut inputs: Vec<BatchIter> = Vec::new();
                for f in &self.feeders {
                    inputs.push(Box::new(f.lookup(env, &keys)?.into_iter().map(Ok)));
                }
                merge_sorted(self.public_schema()?, &self.key, inputs, BATCH_ROWS)?.collect()
            }
            _ => self
                .content_layout(env)
                .lookup(&self.state.content, &keys, &self.public()),
        }
    }

    /// The seed's *augmented update* for `keys` (sorted, distinct, key
    /// columns of any names): for each key, the rows this version's update
    /// holds for it if the update changed it (none if deleted), else its
    /// content rows. Public columns, sorted by key, streamed: the update's
    /// rows are scanned part by part (a first build's update is the whole
    /// content), only the unchanged keys' rows are looked up at once.
    pub fn augmented(&self, env: &Env, keys: &[RecordBatch]) -> Result<BatchIter> {
        let ks = self.key_schema()?;
        let enc = KeyEncoder::new(&ks, &self.key)?;
        let keys = keys
            .iter()
            .map(|k| renamed(k, &self.key))
            .collect::<Result<Vec<_>>>()?;
        let changed = key_set(&self.update_keys(env)?, &enc)?;
        let (_, unchanged) = filter_by_keys(&keys, &enc, &changed, true, None)?;
        let rows: BatchIter = self.update_rows(env);
        let looked: BatchIter = Box::new(self.lookup(env, &unchanged)?.into_iter().map(Ok));
        merge_sorted(
            self.public_schema()?,
            &self.key,
            vec![rows, looked],
            BATCH_ROWS,
        )
    }
}

/// The distinct keys of several nodes' updates, sorted, named as `names`.
pub fn union_of_update_keys(
    env: &Env,
    nodes: &[&NodeView],
    names: &[String],
) -> Result<Vec<RecordBatch>> {
    let mut inputs: Vec<BatchIter> = Vec::new();
    let mut schema = None;
    for n in nodes {
        let keys = n
            .update_keys(env)?
            .iter()
            .map(|k| renamed(k, names))
            .collect::<Result<Vec<_>>>()?;
        if let Some(k) = keys.first() {
            schema.get_or_insert_with(|| k.schema());
        }
        inputs.push(Box::new(keys.into_iter().map(Ok)));
    }
    let Some(schema) = schema else {
        return Ok(Vec::new());
    };
    let merged = merge_sorted(schema.clone(), names, inputs, BATCH_ROWS)?;
    dedup_sorted(schema, names, merged)?.collect()
}
