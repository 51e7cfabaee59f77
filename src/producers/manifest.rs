//! A pipeline's versions: one immutable manifest per version, committed by
//! the table layer's compare-and-swap loop ([`crate::table::commit`]).
//!
//! A manifest holds the stage graph as the user declared it (opaque JSON
//! here; the Python facade compares it with the declared one) and, per
//! node, the key-range parts of its state at that version: `content`,
//! `mappings` (stages only) and the `update` the version made (`rows` with
//! every row of each changed key, `deleted` keys left with none). Part
//! names are relative to the pipeline's key, so a part written by one
//! version is kept by later ones by reference.
//!
//! # Format versions
//!
//! - `pds-pipeline/1`: until 2026-11-23 18:38 UTC its manifests were
//!   unsealed (no `checksum`), written as the pretty JSON of this struct in
//!   declaration order; since then they are sealed (sorted keys, with
//!   `checksum`: see [`crate::table::sealed`]), and parts may carry
//!   `patches` and stages `derived_prefix`. An unsealed manifest is read
//!   only if its bytes are exactly that earlier writer's (a sealed one with
//!   its checksum removed has its keys sorted, so it is
//!   `ManifestCorrupted`).
//! - `pds-pipeline/2` (since 2026-11-29): a patch's deleted values may be a
//!   run of a file shared by the patches of one update (`deleted_rows`, see
//!   [`crate::spec::pipeline::Patch`]), so that a patch is one file. A
//!   reader of `pds-pipeline/1` would take the whole shared file as each
//!   patch's, hence the new name.
//!
//! A pipeline whose latest version is in `pds-pipeline/1` is read-only
//! until upgraded ([`crate::table::upgrade::upgrade_pipeline`]), which
//! commits a version in the current format with the same parts.

use std::collections::BTreeMap;

use serde_json::Value;

use super::parts::RangePart;
use crate::error::{Error, Result};
pub use crate::spec::pipeline::{NodeState, PipelineManifest, UpdateFiles};
use crate::table::vacuum::Collectable;
use crate::table::versions::Versioned;

/// The `format` this pds writes.
pub const FORMAT: &str = "pds-pipeline/2";

/// The first format (see the module docs): read, and upgraded.
pub const FORMAT_1: &str = "pds-pipeline/1";

/// Every format this pds reads, the one it writes first.
const FORMATS: [&str; 2] = [FORMAT, FORMAT_1];

impl UpdateFiles {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.deleted.is_empty()
    }
}

impl NodeState {
    /// Every part this state references.
    pub fn parts(&self) -> impl Iterator<Item = &RangePart> {
        self.content
            .iter()
            .chain(&self.mappings)
            .chain(&self.update.rows)
            .chain(&self.update.deleted)
    }

    /// The same state with an empty update (a version that did not touch it).
    pub fn carried(&self) -> Self {
        Self {
            content: self.content.clone(),
            mappings: self.mappings.clone(),
            derived_prefix: self.derived_prefix,
            update: UpdateFiles::default(),
        }
    }
}

/// A node name is a path segment of its parts: letters, digits, `_`, `-`, `.`.
pub fn check_node_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "node name {name:?} must be 1-128 of [A-Za-z0-9_.-], not starting with '.'"
        )))
    }
}

impl PipelineManifest {
    /// A manifest for the next version (the commit loop sets the number).
    pub fn new(
        operation: &str,
        detail: Value,
        graph: Value,
        nodes: BTreeMap<String, NodeState>,
    ) -> Self {
        Self {
            format: FORMAT.into(),
            version: 0,
            previous: None,
            timestamp_ms: chrono::Utc::now().timestamp_millis(),
            operation: operation.into(),
            detail,
            graph,
            nodes,
            commit_id: None,
            unsealed: false,
        }
    }

    /// Every part any node references.
    pub fn parts(&self) -> impl Iterator<Item = &RangePart> {
        self.nodes.values().flat_map(|n| n.parts())
    }
}

impl Versioned for PipelineManifest {
    fn version(&self) -> u64 {
        self.version
    }

    fn set_version(&mut self, version: u64, previous: Option<u64>) {
        self.version = version;
        self.previous = previous;
    }

    fn commit_id(&self) -> Option<&str> {
        self.commit_id.as_deref()
    }

    fn set_commit_id(&mut self, id: &str) {
        self.commit_id = Some(id.to_string());
    }

    fn earlier_format(&self) -> Option<&'static str> {
        match (self.unsealed, self.format.as_str()) {
            (true, _) => Some("pds-pipeline/1 (from before sealed manifests)"),
            (false, FORMAT_1) => Some(FORMAT_1),
            _ => None,
        }
    }

    fn check_writable(&self, key: &str) -> Result<()> {
        match self.earlier_format() {
            None => Ok(()),
            Some(format) => Err(Error::UpgradeRequired {
                kind: "pipeline",
                key: key.to_string(),
                format,
                how: "Pipeline.upgrade",
            }),
        }
    }

    fn to_json(&self) -> Result<Vec<u8>> {
        let value = serde_json::to_value(self).map_err(|e| {
            Error::InvalidArgument(format!("pipeline manifest is not serialisable: {e}"))
        })?;
        crate::table::sealed::seal(value)
    }

    fn from_json(raw: &[u8], path: &str, version: u64) -> Result<Self> {
        let corrupted = |reason: String| Error::ManifestCorrupted {
            path: path.to_string(),
            reason,
        };
        // The unsealed writer: `to_vec_pretty` of the struct (declaration
        // order), with no field a sealed writer added.
        let old_writer = |map: &serde_json::Map<String, Value>| {
            let m: PipelineManifest = serde_json::from_value(Value::Object(map.clone())).ok()?;
            let later = m.nodes.values().any(|n| {
                n.derived_prefix != 0
                    || n.parts().any(|p| {
                        !p.patches.is_empty() || p.base_rows.is_some() || p.footer.is_some()
                    })
            });
            (!later).then(|| serde_json::to_vec_pretty(&m).ok())?
        };
        let (content, seal) =
            crate::table::sealed::open_any(raw, path, &FORMATS, &[FORMAT_1], old_writer)?;
        let mut m: PipelineManifest =
            serde_json::from_value(Value::Object(content)).map_err(|e| corrupted(e.to_string()))?;
        m.unsealed = seal == crate::table::sealed::Seal::Unsealed;
        if m.version != version {
            return Err(corrupted(format!(
                "it holds version {} under the name of version {version}",
                m.version
            )));
        }
        m.check().map_err(corrupted)?;
        Ok(m)
    }
}

/// One part of node `name` (whose parts live under `home`), checked.
fn check_part(part: &RangePart, home: &str, name: &str) -> std::result::Result<(), String> {
    // A key from a store must stay below the pipeline's key.
    crate::store::keys::object_segments(&part.name)
        .map_err(|e| format!("part name {:?}: {e}", part.name))?;
    if part
        .name
        .split('/')
        .any(|s| s.is_empty() || s == ".." || s == ".")
    {
        return Err(format!("part name {:?} leaves the pipeline", part.name));
    }
    if !part.name.starts_with(home) {
        return Err(format!(
            "node {name:?} lists part {:?}, which is not under {home}",
            part.name
        ));
    }
    if !crate::table::snapshot::is_sha256(&part.sha256) {
        return Err(format!("part {:?} has no valid sha256", part.name));
    }
    if let Some(f) = &part.footer {
        let hex = f.crc32.len() == 8 && f.crc32.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex || !(8..=part.size_bytes).contains(&f.bytes) {
            return Err(format!(
                "part {:?} records a footer of {} bytes (crc32 {:?}) in a file of {}",
                part.name, f.bytes, f.crc32, part.size_bytes
            ));
        }
    }
    if part.first_key.len() != part.last_key.len() {
        return Err(format!(
            "part {:?} has first and last keys of different lengths",
            part.name
        ));
    }
    Ok(())
}

/// The latest time a manifest may carry (9999-12-31T23:59:59.999Z).
const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

impl PipelineManifest {
    /// Everything a reader relies on, checked: contiguous versions, a time,
    /// node names, and parts that stay under their node's key, each listed
    /// once per list, with a SHA-256.
    pub fn check(&self) -> std::result::Result<(), String> {
        if !FORMATS.contains(&self.format.as_str()) {
            return Err(format!(
                "format {:?} is not one of {FORMATS:?}",
                self.format
            ));
        }
        if self.version > crate::table::MAX_VERSION {
            return Err(format!("version {} is beyond any pipeline", self.version));
        }
        match (self.previous, self.version) {
            (None, 0) => {}
            (Some(p), v) if p.checked_add(1) == Some(v) => {}
            (p, v) => {
                return Err(format!(
                    "version {v} cannot follow {p:?}: versions are contiguous"
                ))
            }
        }
        if !(0..=MAX_TIMESTAMP_MS).contains(&self.timestamp_ms) {
            return Err(format!(
                "timestamp_ms {} is not a time pds writes",
                self.timestamp_ms
            ));
        }
        for (name, state) in &self.nodes {
            check_node_name(name).map_err(|e| e.to_string())?;
            let home = format!("nodes/{name}/");
            // A part is listed once in each list (a first build's update is
            // its content: the same parts, in two lists).
            let lists = [
                ("content", &state.content),
                ("mappings", &state.mappings),
                ("update rows", &state.update.rows),
                ("update deletes", &state.update.deleted),
            ];
            for (list, parts) in lists {
                let mut seen = std::collections::HashSet::with_capacity(parts.len());
                for part in parts {
                    check_part(part, &home, name)?;
                    if self.format == FORMAT_1 && part.footer.is_some() {
                        return Err(format!("part {:?}: footer is not in {FORMAT_1}", part.name));
                    }
                    for f in part.patches.iter().flat_map(|p| p.files()) {
                        check_part(f, &home, name)?;
                        if !f.patches.is_empty() {
                            return Err(format!("patch file {:?} has patches", f.name));
                        }
                    }
                    if part.patches.len() > super::patch::MAX_PATCHES {
                        return Err(format!(
                            "part {:?} has {} patches, more than pds writes",
                            part.name,
                            part.patches.len()
                        ));
                    }
                    if !part.patches.is_empty() && !matches!(list, "content" | "mappings") {
                        return Err(format!("part {:?} of the {list} has patches", part.name));
                    }
                    if part
                        .patches
                        .iter()
                        .any(|p| p.rows.is_none() && p.deleted.is_none())
                    {
                        return Err(format!("part {:?} has an empty patch", part.name));
                    }
                    for p in &part.patches {
                        self.check_deleted_rows(p)
                            .map_err(|e| format!("part {:?}: {e}", part.name))?;
                    }
                    if part.patches.is_empty() != part.base_rows.is_none() {
                        return Err(format!(
                            "part {:?}: base_rows goes with patches, and only with them",
                            part.name
                        ));
                    }
                    if !seen.insert(part.name.as_str()) {
                        return Err(format!(
                            "node {name:?} lists part {:?} twice in its {list}",
                            part.name
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl PipelineManifest {
    /// A patch's run of a shared deleted file (`pds-pipeline/2` only): a
    /// non-empty run within the file.
    fn check_deleted_rows(&self, patch: &super::parts::Patch) -> std::result::Result<(), String> {
        let Some([start, end]) = patch.deleted_rows else {
            return Ok(());
        };
        if self.format == FORMAT_1 {
            return Err(format!("deleted_rows is not in {FORMAT_1}"));
        }
        match &patch.deleted {
            Some(f) if start < end && end <= f.rows => Ok(()),
            Some(f) => Err(format!(
                "deleted_rows [{start}, {end}) is not a run of the {} rows of {:?}",
                f.rows, f.name
            )),
            None => Err("deleted_rows without a deleted file".into()),
        }
    }
}

impl Collectable for PipelineManifest {
    /// The pointer, the manifests, and each node's parts (see `run` and
    /// `source`: `nodes/<node>/{content,mappings,update}/<part>`).
    const LAYOUT: &'static [&'static str] = &[
        crate::table::POINTER,
        "manifest/*",
        "nodes/*/content/*",
        "nodes/*/mappings/*",
        "nodes/*/update/*",
    ];

    fn created(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        chrono::DateTime::from_timestamp_millis(self.timestamp_ms)
    }

    fn references<'a>(
        &'a self,
        _store: &'a crate::store::StoreHandle,
        _table: &'a str,
        keep: &'a mut std::collections::BTreeSet<String>,
    ) -> crate::table::versions::BoxFuture<'a, crate::error::Result<()>> {
        keep.insert(crate::table::manifest_name(self.version));
        keep.extend(self.parts().flat_map(|p| p.objects()).map(str::to_string));
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str) -> RangePart {
        RangePart {
            name: name.into(),
            rows: 1,
            size_bytes: 1,
            sha256: "ab".repeat(32),
            first_key: vec![],
            last_key: vec![],
            patches: Vec::new(),
            base_rows: None,
            footer: None,
        }
    }

    #[test]
    fn round_trips_and_refuses_damaged_manifests() {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "a".to_string(),
            NodeState {
                content: vec![part("nodes/a/content/x-00000.parquet")],
                ..Default::default()
            },
        );
        let mut m = PipelineManifest::new("update", Value::Null, Value::Null, nodes);
        m.set_version(3, Some(2));
        let raw = m.to_json().unwrap();
        assert_eq!(PipelineManifest::from_json(&raw, "p", 3).unwrap(), m);
        assert!(matches!(
            PipelineManifest::from_json(&raw, "p", 4),
            Err(Error::ManifestCorrupted { .. })
        ));
        for bad in ["../../etc/passwd", "nodes/../../x", "/abs", ""] {
            let mut m2 = m.clone();
            m2.nodes.get_mut("a").unwrap().content[0].name = bad.into();
            let raw = m2.to_json().unwrap();
            assert!(
                matches!(
                    PipelineManifest::from_json(&raw, "p", 3),
                    Err(Error::ManifestCorrupted { .. })
                ),
                "{bad}"
            );
        }
        // A first build's update is its content: the same part in two lists.
        let mut first = m.clone();
        let a = first.nodes.get_mut("a").unwrap();
        a.update.rows = a.content.clone();
        let raw_first = first.to_json().unwrap();
        assert_eq!(
            PipelineManifest::from_json(&raw_first, "p", 3).unwrap(),
            first
        );
        // Inconsistencies behind a valid checksum (issue #15 S-4).
        let mut twice = m.clone();
        let a = twice.nodes.get_mut("a").unwrap();
        a.content.push(a.content[0].clone());
        let mut other_node = m.clone();
        other_node.nodes.get_mut("a").unwrap().content[0].name =
            "nodes/b/content/x-00000.parquet".into();
        let mut gap = m.clone();
        gap.previous = Some(1);
        let mut time = m.clone();
        time.timestamp_ms = -1;
        let mut sha = m.clone();
        sha.nodes.get_mut("a").unwrap().content[0].sha256 = "00".into();
        let footer = |bytes: u64, crc32: &str| {
            let mut f = m.clone();
            f.nodes.get_mut("a").unwrap().content[0].footer =
                Some(crate::spec::pipeline::FooterCheck {
                    bytes,
                    crc32: crc32.into(),
                });
            f
        };
        let mut fits = footer(1, "0a1b2c3d");
        fits.nodes.get_mut("a").unwrap().content[0].size_bytes = 100;
        fits.nodes.get_mut("a").unwrap().content[0]
            .footer
            .as_mut()
            .unwrap()
            .bytes = 40;
        let back = PipelineManifest::from_json(&fits.to_json().unwrap(), "p", 3).unwrap();
        assert_eq!(
            back.nodes["a"].content[0].footer_check(),
            Some((40, 0x0a1b_2c3d))
        );
        let mut not_hex = fits.clone();
        not_hex.nodes.get_mut("a").unwrap().content[0]
            .footer
            .as_mut()
            .unwrap()
            .crc32 = "0a1b2c3z".into();
        for (bad, why) in [
            (footer(1, "0a1b2c3d"), "records a footer"),
            (not_hex, "records a footer"),
            (
                PipelineManifest {
                    format: FORMAT_1.into(),
                    ..fits.clone()
                },
                "footer is not in pds-pipeline/1",
            ),
            (twice, "twice"),
            (other_node, "not under nodes/a/"),
            (gap, "contiguous"),
            (time, "timestamp_ms"),
            (sha, "sha256"),
        ] {
            match PipelineManifest::from_json(&bad.to_json().unwrap(), "p", 3) {
                Err(Error::ManifestCorrupted { reason, .. }) => {
                    assert!(reason.contains(why), "{why}: {reason}")
                }
                other => panic!("{why}: {other:?}"),
            }
        }
        // Any edited byte is caught by the checksum; a table's manifest says so.
        for at in 0..raw.len() {
            let mut edited = raw.clone();
            edited[at] = if edited[at] == b'7' { b'8' } else { b'7' };
            assert!(matches!(
                PipelineManifest::from_json(&edited, "p", 3),
                Err(Error::ManifestCorrupted { .. })
            ));
        }
        let table = crate::table::snapshot::tests::manifest(3)
            .to_json()
            .unwrap();
        let err = PipelineManifest::from_json(&table, "p", 3).unwrap_err();
        assert!(err.to_string().contains("pds.Table.open"), "{err}");
        // Truncations and garbage are ManifestCorrupted, never a panic.
        for n in 0..raw.len() {
            let _ = PipelineManifest::from_json(&raw[..n], "p", 3);
        }
        assert!(check_node_name("by_email").is_ok());
        assert!(check_node_name("a/b").is_err());
        assert!(check_node_name("..").is_err());
    }

    /// A manifest whose part has one patch, deleting `run` of a shared file
    /// of `rows` rows, in `format`.
    fn shared_run(format: &str, rows: u64, run: Option<[u64; 2]>) -> PipelineManifest {
        let mut p = part("nodes/a/content/x-00000.parquet");
        p.base_rows = Some(1);
        let mut shared = part("nodes/a/content/y-d-00000.parquet");
        shared.rows = rows;
        p.patches.push(super::super::parts::Patch {
            rows: None,
            deleted: Some(shared),
            deleted_rows: run,
        });
        let nodes = BTreeMap::from([(
            "a".to_string(),
            NodeState {
                content: vec![p],
                ..Default::default()
            },
        )]);
        let mut m = PipelineManifest::new("update", Value::Null, Value::Null, nodes);
        m.format = format.into();
        m.set_version(1, Some(0));
        m
    }

    /// `pds-pipeline/2` carries runs of shared deleted files (checked
    /// within the file); `pds-pipeline/1` reads, has none, and is an
    /// earlier format (read-only until upgraded).
    #[test]
    fn runs_of_shared_deleted_files_are_pds_pipeline_2_and_checked() {
        assert_eq!(FORMAT, "pds-pipeline/2");
        let ok = shared_run(FORMAT, 5, Some([1, 3]));
        let back = PipelineManifest::from_json(&ok.to_json().unwrap(), "p", 1).unwrap();
        assert_eq!(back, ok);
        assert_eq!(back.earlier_format(), None);
        assert!(back.check_writable("k").is_ok());
        assert_eq!(
            super::super::patch::patched_rows(&back.nodes["a"].content[0]),
            2
        );
        let old = shared_run(FORMAT_1, 5, None);
        let back = PipelineManifest::from_json(&old.to_json().unwrap(), "p", 1).unwrap();
        assert_eq!(back.earlier_format(), Some("pds-pipeline/1"));
        assert!(matches!(
            back.check_writable("k"),
            Err(Error::UpgradeRequired { .. })
        ));
        assert_eq!(
            super::super::patch::patched_rows(&back.nodes["a"].content[0]),
            5
        );
        for (bad, why) in [
            (
                shared_run(FORMAT_1, 5, Some([1, 3])),
                "not in pds-pipeline/1",
            ),
            (shared_run(FORMAT, 5, Some([3, 3])), "is not a run"),
            (shared_run(FORMAT, 5, Some([4, 6])), "is not a run"),
            (
                shared_run("pds-pipeline/3", 5, None),
                "reads pds-pipeline/2, pds-pipeline/1",
            ),
        ] {
            match PipelineManifest::from_json(&bad.to_json().unwrap(), "p", 1) {
                Err(Error::ManifestCorrupted { reason, .. }) => {
                    assert!(reason.contains(why), "{why}: {reason}")
                }
                other => panic!("{why}: {other:?}"),
            }
        }
    }
}
