//! A pipeline's on-disk records: its manifest (graph and node states), and
//! each node's key-range parts with their patches.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What one version changed in a node (see [`crate::producers::manifest`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateFiles {
    #[serde(default)]
    pub rows: Vec<RangePart>,
    #[serde(default)]
    pub deleted: Vec<RangePart>,
}

/// A node's state at one version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    /// Sources and stages: the content, sorted, cut by the (target) key.
    #[serde(default)]
    pub content: Vec<RangePart>,
    /// Stages: `(K_s, K_t)`, sorted, cut by the source key. Where
    /// `derived_prefix` is above 0, only the pairs whose `K_t` does not
    /// begin with their `K_s`'s first `derived_prefix` values (see
    /// [`crate::producers::node::NodeView::shared_prefix`]).
    #[serde(default)]
    pub mappings: Vec<RangePart>,
    /// Stages: the leading key columns shared by `K_s` and `K_t` (0:
    /// `mappings` holds every pair, as manifests written before this field
    /// did). A pair whose `K_t` begins with its `K_s`'s values there is not
    /// stored: it is found in the content, which is cut by `K_t`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub derived_prefix: usize,
    /// What this version changed.
    #[serde(default)]
    pub update: UpdateFiles,
}

/// One version of a pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineManifest {
    pub format: String,
    pub version: u64,
    #[serde(default)]
    pub previous: Option<u64>,
    pub timestamp_ms: i64,
    /// `create`, `update`, `rebuild`.
    pub operation: String,
    /// What the operation was given (sources updated, stage rebuilt, ...).
    #[serde(default)]
    pub detail: Value,
    /// The declared stage graph (names, kinds, sources, schemas).
    pub graph: Value,
    pub nodes: BTreeMap<String, NodeState>,
    /// The id of the commit that wrote this version (see the table
    /// manifest's `commit_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_id: Option<String>,
    /// Read from an unsealed manifest of an earlier pds (in memory only).
    #[serde(skip)]
    pub unsealed: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One key-range part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangePart {
    /// Relative to the location written to.
    pub name: String,
    pub rows: u64,
    pub size_bytes: u64,
    pub sha256: String,
    /// The key of the first and of the last row (one value per key column).
    pub first_key: Vec<Option<Value>>,
    pub last_key: Vec<Option<Value>>,
    /// Changes layered over the part's file, oldest first (see
    /// [`crate::producers::patch`]). With patches, `rows` counts the rows after them
    /// and [`Self::file_rows`] the file's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Patch>,
    /// The rows of the part's file, when it has patches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_rows: Option<u64>,
    /// The bytes of the file after its data (page index, footer, trailer)
    /// and their CRC-32 (8 hex digits), recorded since `pds-pipeline/2`: a
    /// lookup that reads only some pages by the page index checks them,
    /// since it does not read the whole file against `sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<FooterCheck>,
}

/// See [`RangePart::footer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FooterCheck {
    pub bytes: u64,
    pub crc32: String,
}

/// One change layered over a part (see [`crate::producers::patch`]). At least one of
/// the two files is present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Patch {
    /// Every row, after the change, of each cut-key value the patch
    /// covers; the layout's schema, sorted by its sort key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<RangePart>,
    /// Cut-key values the change leaves with no row (the cut key's columns):
    /// every row of the file, or with [`Self::deleted_rows`] some of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<RangePart>,
    /// `[start, end)`: the rows of `deleted` that are this patch's
    /// (`pds-pipeline/2`). The file is then shared by the patches one
    /// update wrote in a node's layout (for the content, it is the update's
    /// deleted keys), each patch owning a run of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_rows: Option<[u64; 2]>,
}
