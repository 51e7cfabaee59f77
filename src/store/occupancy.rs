//! What occupies a key. Keys are exclusive: datasets, tables and pipelines
//! never nest, so none may be created at, inside or around the key of
//! another.
//!
//! Each kind is recognised by its marker objects, named here so that every
//! layer shares one list (the dataset, table and producers layers take
//! their names from this module):
//!
//! - a dataset: `_SUCCESS` (committed), `manifest.json` or `_WRITING` (a
//!   write in progress, or one that was killed);
//! - a table or a pipeline: `_latest_manifest` (the pointer) or
//!   `manifest/v00000000.json` (a first version whose pointer is not there
//!   yet). Both share this layout; the `format` of a manifest tells them
//!   apart (`pds-table/...`, `pds-pipeline/...`).
//!
//! [`occupancy`] looks at the key and every ancestor by HEAD, and below the
//! key by one bounded LIST. It runs over any [`Probe`]: a [`StoreHandle`]
//! (the fast path) or, through the bindings, a Python `remote_store.Store`.
//!
//! The check is not atomic with the creation that follows it: two creators
//! of different kinds racing for overlapping keys in the same instant can
//! both pass it. Dataset writers check after taking their `_WRITING` claim,
//! which narrows that window to the moment between a table's check and its
//! first manifest.

use std::future::Future;

use bytes::Bytes;
use futures::TryStreamExt;

use super::StoreHandle;
use crate::error::{Error, Result};

/// A committed dataset's marker.
pub const SUCCESS: &str = "_SUCCESS";
/// A dataset's manifest (written just before `_SUCCESS`).
pub const DATASET_MANIFEST: &str = "manifest.json";
/// A dataset writer's claim on its key.
pub const WRITING: &str = "_WRITING";
/// The commit pointer of a table or pipeline.
pub const POINTER: &str = "_latest_manifest";
/// The first version of a table or pipeline (present before the pointer is).
pub const FIRST_VERSION: &str = "manifest/v00000000.json";
/// The `format` prefix of table manifests.
pub const TABLE_FORMAT: &str = "pds-table/";
/// The `format` prefix of pipeline manifests.
pub const PIPELINE_FORMAT: &str = "pds-pipeline/";
/// Objects the LIST below a key looks at, at most: one LIST request on S3.
/// Markers further down a key that holds more objects are not seen.
pub const LIST_LIMIT: usize = 1000;

/// The markers HEADed at the key and at each ancestor.
const MARKERS: [&str; 5] = [SUCCESS, DATASET_MANIFEST, WRITING, POINTER, FIRST_VERSION];

/// What lives at a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `manifest.json` or `_WRITING` without `_SUCCESS`.
    UnfinishedDataset,
    Dataset,
    /// A pointer or manifest whose `format` could not be read.
    Versioned,
    Table,
    Pipeline,
}

impl Kind {
    /// The thing ("table").
    pub fn name(self) -> &'static str {
        match self {
            Kind::UnfinishedDataset => "unfinished dataset",
            Kind::Dataset => "dataset",
            Kind::Versioned => "table or pipeline",
            Kind::Table => "table",
            Kind::Pipeline => "pipeline",
        }
    }

    /// The thing, with its article ("a table").
    pub fn noun(self) -> String {
        match self {
            Kind::UnfinishedDataset => {
                "an unfinished dataset (a write in progress, or one that was killed)".into()
            }
            other => format!("a {}", other.name()),
        }
    }

    /// Parse `"dataset"`, `"table"` or `"pipeline"` (what a caller creates).
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "dataset" => Ok(Kind::Dataset),
            "table" => Ok(Kind::Table),
            "pipeline" => Ok(Kind::Pipeline),
            other => Err(Error::InvalidArgument(format!(
                "kind must be 'dataset', 'table' or 'pipeline', got {other:?}"
            ))),
        }
    }

    /// Whether creating `self` may proceed over `there` at the same key:
    /// the creator's own logic then decides (a dataset overwrite, a
    /// table's `exist_ok`, a damaged manifest reported as such).
    fn may_meet(self, there: Kind) -> bool {
        match self {
            Kind::Dataset | Kind::UnfinishedDataset => {
                matches!(there, Kind::Dataset | Kind::UnfinishedDataset)
            }
            Kind::Table => matches!(there, Kind::Table | Kind::Versioned),
            Kind::Pipeline => matches!(there, Kind::Pipeline | Kind::Versioned),
            Kind::Versioned => false,
        }
    }
}

/// Where an occupant lies relative to the key asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// At the key itself.
    At,
    /// At an ancestor: the key lies inside it.
    Above,
    /// Below the key: it lies inside the key.
    Below,
}

/// A dataset, table or pipeline found at `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant {
    pub kind: Kind,
    pub key: String,
    pub relation: Relation,
}

/// What occupies a key, its ancestors and what lies below it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub at: Option<Occupant>,
    /// The nearest ancestor that holds something.
    pub above: Option<Occupant>,
    /// The first occupant found below the key (in key order).
    pub below: Option<Occupant>,
}

impl Occupancy {
    /// `Ok` if `creating` may be created at `key`; otherwise
    /// [`Error::KeyOccupied`] naming what is there and its key. Something
    /// above or below always refuses; something at the key refuses unless
    /// it is of the creator's own kind (see [`Kind::may_meet`]).
    pub fn allow(&self, key: &str, creating: Kind) -> Result<()> {
        let refuse = |reason: String| Error::KeyOccupied {
            key: key.to_string(),
            creating: creating.noun(),
            reason,
        };
        if let Some(o) = &self.at {
            if !creating.may_meet(o.kind) {
                return Err(refuse(format!("{} is stored there", o.kind.noun())));
            }
        }
        if let Some(o) = &self.above {
            return Err(refuse(format!(
                "it would lie inside the {} at {:?}",
                o.kind.name(),
                o.key
            )));
        }
        if let Some(o) = &self.below {
            return Err(refuse(format!(
                "the {} at {:?} lies inside it",
                o.kind.name(),
                o.key
            )));
        }
        Ok(())
    }
}

impl Occupancy {
    /// What a reader that looked for a `wanted` at `key` finds instead, in
    /// words ("a table is stored at \"events\", not a dataset: open it with
    /// pds.Table.open"), or `None` when nothing else is there (an
    /// unfinished dataset is left to the dataset reader's own message).
    pub fn describe_for(&self, key: &str, wanted: Kind) -> Option<String> {
        let key = key.trim_matches('/');
        if let Some(o) = &self.at {
            let same = o.kind == wanted
                || (wanted == Kind::Dataset && o.kind == Kind::UnfinishedDataset)
                || (o.kind == Kind::Versioned && matches!(wanted, Kind::Table | Kind::Pipeline));
            if same {
                return None;
            }
            return Some(format!(
                "{} is stored at {key:?}, not a {}: {}",
                o.kind.noun(),
                wanted.name(),
                o.kind.how_to_read()
            ));
        }
        if let Some(o) = &self.above {
            return Some(format!(
                "no {} is stored at {key:?}: it lies inside the {} at {:?} ({})",
                wanted.name(),
                o.kind.name(),
                o.key,
                o.kind.how_to_read()
            ));
        }
        self.below.as_ref().map(|o| {
            format!(
                "no {} is stored at {key:?}; the {} at {:?} lies below it",
                wanted.name(),
                o.kind.name(),
                o.key
            )
        })
    }
}

impl Kind {
    /// How to read a thing of this kind from Python.
    pub fn how_to_read(self) -> &'static str {
        match self {
            Kind::UnfinishedDataset => "its write never committed",
            Kind::Dataset => "read it with pds.ParquetDatasetStore(store).read_dataset",
            Kind::Versioned => "open it with pds.Table.open or pds.Pipeline.open",
            Kind::Table => "open it with pds.Table.open",
            Kind::Pipeline => "open it with pds.Pipeline.open",
        }
    }
}

/// The I/O [`occupancy`] needs. Keys are relative to the probe's root.
pub trait Probe {
    /// Whether an object exists at `key`.
    fn exists(&self, key: &str) -> impl Future<Output = Result<bool>>;
    /// The keys of at most `limit` objects below the folder `key`.
    fn list_below(&self, key: &str, limit: usize) -> impl Future<Output = Result<Vec<String>>>;
    /// The object at `key`, `None` if absent.
    fn read(&self, key: &str) -> impl Future<Output = Result<Option<Bytes>>>;
}

impl Probe for StoreHandle {
    async fn exists(&self, key: &str) -> Result<bool> {
        Ok(self.try_head(key).await?.is_some())
    }

    async fn list_below(&self, key: &str, limit: usize) -> Result<Vec<String>> {
        let prefix = self.prefix_path(key)?;
        let mut stream = self.built.store.list(prefix.as_ref());
        let mut out = Vec::new();
        while out.len() < limit {
            match stream.try_next().await {
                Ok(Some(m)) => out.extend(self.meta(m).map(|m| m.key)),
                Ok(None) => break,
                // An object removed while it was listed (file://) is no marker.
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.list_failed(e)),
            }
        }
        Ok(out)
    }

    async fn read(&self, key: &str) -> Result<Option<Bytes>> {
        match self.get(key).await {
            Ok(b) => Ok(Some(b)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// `key` normalised (`/a//b/` is `a/b`); `InvalidPath` for the root or a bad key.
fn normal(key: &str) -> Result<String> {
    Ok(super::keys::object_segments(key)?.join("/"))
}

/// The marker keys to HEAD: each of [`MARKERS`] at `key`, then at each
/// ancestor, nearest first (5 per level of the key).
pub fn probes(key: &str) -> Result<Vec<String>> {
    let segments = super::keys::object_segments(key)?;
    let mut out = Vec::with_capacity(segments.len() * MARKERS.len());
    for depth in (1..=segments.len()).rev() {
        let owner = segments[..depth].join("/");
        out.extend(MARKERS.iter().map(|m| format!("{owner}/{m}")));
    }
    Ok(out)
}

/// The owner key and kind a marker object names, if `object` is a marker.
pub fn marker_owner(object: &str) -> Option<(&str, Kind)> {
    let (parent, name) = object.rsplit_once('/')?;
    match name {
        SUCCESS => return Some((parent, Kind::Dataset)),
        DATASET_MANIFEST | WRITING => return Some((parent, Kind::UnfinishedDataset)),
        POINTER => return Some((parent, Kind::Versioned)),
        _ => {}
    }
    let (owner, folder) = parent.rsplit_once('/')?;
    let digits = name.strip_prefix('v')?.strip_suffix(".json")?;
    (folder == "manifest" && digits.len() >= 8 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then_some((owner, Kind::Versioned))
}

/// Keep the more telling of two findings for one key.
fn merge(slot: &mut Option<Occupant>, found: Occupant) {
    match slot {
        Some(o) if o.key == found.key => o.kind = o.kind.max(found.kind),
        Some(_) => {}
        None => *slot = Some(found),
    }
}

/// Classify the markers found: `present` (the [`probes`] that exist) and
/// `listed` (objects below `key`). Tables and pipelines come out as
/// [`Kind::Versioned`]; [`occupancy`] tells them apart.
pub fn classify(key: &str, present: &[String], listed: &[String]) -> Result<Occupancy> {
    let key = normal(key)?;
    let mut at = None;
    let mut above: Vec<Occupant> = Vec::new();
    let mut below: Vec<Occupant> = Vec::new();
    for object in present.iter().chain(listed) {
        let Some((owner, kind)) = marker_owner(object) else {
            continue;
        };
        let occupant = |relation| Occupant {
            kind,
            key: owner.to_string(),
            relation,
        };
        if owner == key {
            merge(&mut at, occupant(Relation::At));
        } else if key.starts_with(owner) && key.as_bytes().get(owner.len()) == Some(&b'/') {
            above.push(occupant(Relation::Above));
        } else if owner.starts_with(&key) && owner.as_bytes().get(key.len()) == Some(&b'/') {
            below.push(occupant(Relation::Below));
        }
    }
    // The nearest ancestor; the first key below. Markers of one key merge.
    above.sort_by_key(|o| std::cmp::Reverse(o.key.len()));
    below.sort_by(|a, b| a.key.cmp(&b.key));
    let mut out = Occupancy {
        at,
        ..Default::default()
    };
    for o in above {
        merge(&mut out.above, o);
    }
    for o in below {
        merge(&mut out.below, o);
    }
    Ok(out)
}

/// The kind a table or pipeline manifest declares in its `format`.
pub fn manifest_kind(raw: &[u8]) -> Kind {
    let format = serde_json::from_slice::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| v.get("format")?.as_str().map(str::to_string));
    match format {
        Some(f) if f.starts_with(TABLE_FORMAT) => Kind::Table,
        Some(f) if f.starts_with(PIPELINE_FORMAT) => Kind::Pipeline,
        _ => Kind::Versioned,
    }
}

/// Whether the table or pipeline at `owner` is a table or a pipeline: its
/// first manifest's `format`, or, if vacuum removed that or its format
/// cannot be read, the one the pointer names (1 GET, or 3).
async fn versioned_kind<P: Probe>(probe: &P, owner: &str) -> Result<Kind> {
    if let Some(raw) = probe.read(&format!("{owner}/{FIRST_VERSION}")).await? {
        let kind = manifest_kind(&raw);
        if kind != Kind::Versioned {
            return Ok(kind);
        }
    }
    let Some(pointer) = probe.read(&format!("{owner}/{POINTER}")).await? else {
        return Ok(Kind::Versioned);
    };
    let version = serde_json::from_slice::<serde_json::Value>(&pointer)
        .ok()
        .and_then(|v| v.get("version")?.as_u64());
    let Some(version) = version else {
        return Ok(Kind::Versioned);
    };
    Ok(
        match probe
            .read(&format!("{owner}/manifest/v{version:08}.json"))
            .await?
        {
            Some(raw) => manifest_kind(&raw),
            None => Kind::Versioned,
        },
    )
}

/// What occupies `key`: the markers at the key and each ancestor (HEADs,
/// all at once), and the first [`LIST_LIMIT`] objects below it (one LIST).
///
/// Cost: 5 HEADs per level of the key (`a/b/c`: 15), 1 LIST request, and,
/// for each table or pipeline found, 1 GET (3 if its first version was
/// vacuumed or is unreadable) to tell which it is.
pub async fn occupancy<P: Probe>(probe: &P, key: &str) -> Result<Occupancy> {
    let markers = probes(key)?;
    let heads = futures::future::join_all(markers.iter().map(|m| probe.exists(m))).await;
    let mut present = Vec::new();
    for (marker, found) in markers.into_iter().zip(heads) {
        if found? {
            present.push(marker);
        }
    }
    let listed = probe.list_below(&normal(key)?, LIST_LIMIT).await?;
    let mut out = classify(key, &present, &listed)?;
    for slot in [&mut out.at, &mut out.above, &mut out.below] {
        if let Some(o) = slot.as_mut() {
            if o.kind == Kind::Versioned {
                o.kind = versioned_kind(probe, &o.key).await?;
            }
        }
    }
    Ok(out)
}

/// What lives at `key` itself, not around it (for a tool that lists or
/// opens what it finds). An unfinished dataset is reported as such; a table
/// or pipeline whose manifests cannot tell which is [`Kind::Versioned`].
///
/// Cost: 5 HEADs (at once) and, for a table or pipeline, 1 GET (3 if its
/// first version was vacuumed or is unreadable).
pub async fn kind_at<P: Probe>(probe: &P, key: &str) -> Result<Option<Kind>> {
    let mut markers = probes(key)?;
    markers.truncate(MARKERS.len());
    let heads = futures::future::join_all(markers.iter().map(|m| probe.exists(m))).await;
    let mut present = Vec::new();
    for (marker, found) in markers.into_iter().zip(heads) {
        if found? {
            present.push(marker);
        }
    }
    match classify(key, &present, &[])?.at {
        None => Ok(None),
        Some(o) if o.kind == Kind::Versioned => versioned_kind(probe, &o.key).await.map(Some),
        Some(o) => Ok(Some(o.kind)),
    }
}

/// [`occupancy`], then [`Occupancy::allow`]: `KeyOccupied` unless
/// `creating` may be created at `key`. Returns what is at the key.
pub async fn check_free<P: Probe>(
    probe: &P,
    key: &str,
    creating: Kind,
) -> Result<Option<Occupant>> {
    let found = occupancy(probe, key).await?;
    found.allow(key, creating)?;
    Ok(found.at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PutMode;
    use std::collections::BTreeMap;

    fn memory() -> StoreHandle {
        StoreHandle::open("memory://", &BTreeMap::new()).unwrap()
    }

    fn put(s: &StoreHandle, key: &str, body: &str) {
        crate::runtime::block_on(s.put(key, Bytes::from(body.to_string()), PutMode::Overwrite))
            .unwrap()
            .unwrap();
    }

    fn occ(s: &StoreHandle, key: &str) -> Occupancy {
        crate::runtime::block_on(occupancy(s, key))
            .unwrap()
            .unwrap()
    }

    const TABLE_V0: &str = r#"{"format": "pds-table/1", "version": 0}"#;
    const PIPELINE_V0: &str = r#"{"format": "pds-pipeline/1", "version": 0}"#;

    #[test]
    fn kind_at_looks_at_the_key_alone() {
        let s = memory();
        let kind = |key: &str| crate::runtime::block_on(kind_at(&s, key)).unwrap().unwrap();
        assert_eq!(kind("a"), None);
        put(&s, "a/b/_SUCCESS", "");
        put(&s, "t/manifest/v00000000.json", TABLE_V0);
        put(
            &s,
            "p/_latest_manifest",
            r#"{"version":0,"manifest":"manifest/v00000000.json"}"#,
        );
        put(&s, "p/manifest/v00000000.json", PIPELINE_V0);
        put(&s, "w/_WRITING", "");
        put(&s, "x/_latest_manifest", "not json");
        // A damaged first version: the pointer's version tells.
        put(&s, "q/manifest/v00000000.json", "{\"format\": \"pds-pipe");
        put(
            &s,
            "q/manifest/v00000001.json",
            r#"{"format": "pds-pipeline/2", "version": 1}"#,
        );
        put(
            &s,
            "q/_latest_manifest",
            r#"{"version":1,"manifest":"manifest/v00000001.json"}"#,
        );
        // Neither an ancestor nor what lies below counts.
        assert_eq!(kind("a"), None);
        assert_eq!(kind("a/b/c"), None);
        assert_eq!(kind("a/b"), Some(Kind::Dataset));
        assert_eq!(kind("t"), Some(Kind::Table));
        assert_eq!(kind("p"), Some(Kind::Pipeline));
        assert_eq!(kind("w"), Some(Kind::UnfinishedDataset));
        assert_eq!(kind("x"), Some(Kind::Versioned));
        assert_eq!(kind("q"), Some(Kind::Pipeline));
        assert!(matches!(
            crate::runtime::block_on(kind_at(&s, "../a")).unwrap(),
            Err(Error::InvalidPath { .. })
        ));
    }

    #[test]
    fn markers_name_their_owner() {
        assert_eq!(marker_owner("a/b/_SUCCESS"), Some(("a/b", Kind::Dataset)));
        assert_eq!(
            marker_owner("a/_WRITING"),
            Some(("a", Kind::UnfinishedDataset))
        );
        assert_eq!(
            marker_owner("a/manifest.json"),
            Some(("a", Kind::UnfinishedDataset))
        );
        assert_eq!(
            marker_owner("t/_latest_manifest"),
            Some(("t", Kind::Versioned))
        );
        assert_eq!(
            marker_owner("t/x/manifest/v00000012.json"),
            Some(("t/x", Kind::Versioned))
        );
        for other in [
            "t/data/part-1.parquet",
            "t/manifest/v12.json",
            "t/manifest/vabcdefgh.json",
            "t/tombstone/v00000001-x.del",
            "_SUCCESS",
            "manifest/v00000000.json",
        ] {
            assert_eq!(marker_owner(other), None, "{other}");
        }
    }

    #[test]
    fn probes_cover_the_key_and_every_ancestor() {
        let p = probes("/a//b/").unwrap();
        assert_eq!(p.len(), 10);
        assert_eq!(p[0], "a/b/_SUCCESS");
        assert_eq!(p[5], "a/_SUCCESS");
        assert!(p.contains(&"a/manifest/v00000000.json".to_string()));
        assert!(matches!(probes(""), Err(Error::InvalidPath { .. })));
    }

    #[test]
    fn classify_at_above_below() {
        let present = vec!["a/_SUCCESS".to_string(), "a/b/_WRITING".to_string()];
        let listed = vec![
            "a/b/part-0.parquet".to_string(),
            "a/b/z/_latest_manifest".to_string(),
            "a/b/c/_SUCCESS".to_string(),
            "a/b/c/manifest.json".to_string(),
            "a/bb/_SUCCESS".to_string(),
        ];
        let o = classify("a/b", &present, &listed).unwrap();
        assert_eq!(o.at.as_ref().map(|o| o.kind), Some(Kind::UnfinishedDataset));
        assert_eq!(o.above.as_ref().map(|o| o.key.as_str()), Some("a"));
        let below = o.below.unwrap();
        assert_eq!((below.key.as_str(), below.kind), ("a/b/c", Kind::Dataset));
        // "a/bb" is a sibling, not below "a/b".
        let o = classify("a/b", &[], &["a/bb/_SUCCESS".to_string()]).unwrap();
        assert_eq!(o, Occupancy::default());
    }

    #[test]
    fn the_nearest_ancestor_is_reported() {
        let present = vec!["a/_latest_manifest".to_string(), "a/b/_SUCCESS".to_string()];
        let o = classify("a/b/c", &present, &[]).unwrap();
        assert_eq!(o.above.unwrap().key, "a/b");
    }

    #[test]
    fn finds_each_kind_at_inside_and_around() {
        let s = memory();
        put(&s, "ds/_SUCCESS", "");
        put(&s, "ds/manifest.json", "{}");
        put(&s, "tb/_latest_manifest", r#"{"version": 0}"#);
        put(&s, "tb/manifest/v00000000.json", TABLE_V0);
        put(&s, "pl/manifest/v00000000.json", PIPELINE_V0);
        put(&s, "outer/inner/_SUCCESS", "");

        let at = |k: &str| occ(&s, k).at.map(|o| o.kind);
        assert_eq!(at("ds"), Some(Kind::Dataset));
        assert_eq!(at("tb"), Some(Kind::Table));
        assert_eq!(at("pl"), Some(Kind::Pipeline));
        assert_eq!(at("free"), None);

        let inside = occ(&s, "tb/archive/x").above.unwrap();
        assert_eq!((inside.kind, inside.key.as_str()), (Kind::Table, "tb"));
        assert_eq!(occ(&s, "pl/x").above.unwrap().kind, Kind::Pipeline);
        assert_eq!(occ(&s, "ds/x").above.unwrap().kind, Kind::Dataset);

        let around = occ(&s, "outer").below.unwrap();
        assert_eq!(
            (around.kind, around.key.as_str()),
            (Kind::Dataset, "outer/inner")
        );
        assert_eq!(occ(&s, "outer").at, None);
    }

    #[test]
    fn a_vacuumed_first_version_is_found_through_the_pointer() {
        let s = memory();
        put(
            &s,
            "p/_latest_manifest",
            r#"{"version": 3, "manifest": "manifest/v00000003.json"}"#,
        );
        put(&s, "p/manifest/v00000003.json", PIPELINE_V0);
        assert_eq!(occ(&s, "p").at.unwrap().kind, Kind::Pipeline);
        put(&s, "q/_latest_manifest", "not json");
        assert_eq!(occ(&s, "q").at.unwrap().kind, Kind::Versioned);
    }

    #[test]
    fn allow_refuses_other_kinds_and_any_nesting() {
        let s = memory();
        put(&s, "ds/_SUCCESS", "");
        put(&s, "tb/manifest/v00000000.json", TABLE_V0);
        put(&s, "outer/deep/er/_latest_manifest", "{}");

        let allow = |k: &str, kind| occ(&s, k).allow(k, kind);
        // A dataset over a dataset: the dataset writer decides (overwrite).
        allow("ds", Kind::Dataset).unwrap();
        allow("tb", Kind::Table).unwrap();
        allow("new", Kind::Pipeline).unwrap();

        let msg = |r: Result<()>| match r {
            Err(e @ Error::KeyOccupied { .. }) => e.to_string(),
            other => panic!("expected KeyOccupied, got {other:?}"),
        };
        let m = msg(allow("ds", Kind::Table));
        assert!(m.contains("a dataset is stored there"), "{m}");
        let m = msg(allow("tb", Kind::Dataset));
        assert!(m.contains("a table is stored there"), "{m}");
        let m = msg(allow("tb", Kind::Pipeline));
        assert!(m.contains("a table is stored there"), "{m}");
        let m = msg(allow("tb/x", Kind::Dataset));
        assert!(m.contains("inside the table at \"tb\""), "{m}");
        let m = msg(allow("ds/x/y", Kind::Table));
        assert!(m.contains("inside the dataset at \"ds\""), "{m}");
        let m = msg(allow("outer", Kind::Dataset));
        assert!(
            m.contains("the table or pipeline at \"outer/deep/er\" lies inside it"),
            "{m}"
        );
    }

    #[test]
    fn the_listing_is_bounded() {
        let s = memory();
        for i in 0..(LIST_LIMIT + 5) {
            put(&s, &format!("big/a{i:05}"), "");
        }
        put(&s, "big/zz/_SUCCESS", "");
        let listed = crate::runtime::block_on(s.list_below("big", LIST_LIMIT))
            .unwrap()
            .unwrap();
        assert_eq!(listed.len(), LIST_LIMIT);
        // The marker past the bound is not seen: the documented limit.
        assert_eq!(occ(&s, "big").below, None);
    }

    #[test]
    fn marker_names_match_the_layers() {
        assert_eq!(crate::table::manifest_name(0), FIRST_VERSION);
        assert_eq!(crate::table::POINTER, POINTER);
        assert!(crate::table::snapshot::FORMAT.starts_with(TABLE_FORMAT));
        assert!(crate::producers::manifest::FORMAT.starts_with(PIPELINE_FORMAT));
        assert_eq!(crate::dataset::SUCCESS, SUCCESS);
        assert_eq!(crate::dataset::MANIFEST, DATASET_MANIFEST);
        assert_eq!(crate::dataset::WRITING, WRITING);
    }
}
