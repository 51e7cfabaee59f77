//! Tombstones: deletes recorded without rewriting any data file.
//!
//! A delete writes one immutable `tombstone/<unique>.del` object, JSON:
//!
//! ```json
//! {"format": "pds-tombstone/1", "created_at": "...", "entries": [
//!   {"kind": "row_group", "file": "data/a.parquet", "row_group": 3, "rows": 1048576},
//!   {"kind": "pk_range", "file": "data/b.parquet", "pk_min": 100, "pk_max": 200},
//!   {"kind": "rows", "file": "data/c.parquet", "bitmap": "<base64>", "rows": 17}
//! ]}
//! ```
//!
//! - `row_group`: every row of that row group is deleted; scans skip it
//!   before fetching anything.
//! - `pk_range`: rows whose primary key lies in `[pk_min, pk_max]` are deleted
//!   (either bound may be absent, or exclusive with `pk_min_exclusive` /
//!   `pk_max_exclusive`). The bounds are values of the file's key type, or
//!   of `pk_type` when the key column has widened since the file was
//!   written (the file's keys are then compared cast up to it, exactly).
//!   Applied while decoding.
//! - `rows`: row positions in the file, as a roaring bitmap in the portable
//!   serialization every roaring implementation reads, base64.
//!
//! The objects come from a store, so they are untrusted: they are parsed
//! and checked (paths, bitmaps) before use, and every failure is
//! `ManifestCorrupted` naming the tombstone. A missing one is reported as
//! a missing segment or data file is (see [`fetch`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use base64::Engine;
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::snapshot::TombstoneRef;
use crate::error::{Error, Result};
pub use crate::spec::table::Entry;
use crate::store::cache::ObjectCache;
use crate::store::StoreHandle;

/// The `format` of every tombstone object.
pub const FORMAT: &str = "pds-tombstone/1";

impl Entry {
    /// The data file the entry applies to.
    pub fn file(&self) -> &str {
        match self {
            Entry::RowGroup { file, .. }
            | Entry::PkRange { file, .. }
            | Entry::Rows { file, .. } => file,
        }
    }

    /// A `rows` entry for `positions`.
    pub fn rows(file: &str, positions: &RoaringBitmap) -> Result<Self> {
        let mut buf = Vec::with_capacity(positions.serialized_size());
        positions.serialize_into(&mut buf)?;
        Ok(Entry::Rows {
            file: file.to_string(),
            bitmap: base64::engine::general_purpose::STANDARD.encode(buf),
            rows: positions.len(),
        })
    }
}

/// A tombstone object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tombstone {
    pub format: String,
    pub created_at: String,
    pub entries: Vec<Entry>,
    /// The bitmap of each `rows` entry, decoded once (when the tombstone is
    /// built or parsed), by entry index; `None` for other entries.
    #[serde(skip)]
    bitmaps: Vec<Option<RoaringBitmap>>,
}

impl Tombstone {
    pub fn new(entries: Vec<Entry>) -> Self {
        let bitmaps = entries
            .iter()
            .map(|e| match e {
                Entry::Rows { bitmap, .. } => decode_bitmap(bitmap).ok(),
                _ => None,
            })
            .collect();
        Self {
            format: FORMAT.into(),
            created_at: crate::dataset::manifest::now_iso8601(),
            entries,
            bitmaps,
        }
    }

    /// The row positions of entry `i` if it is a `rows` entry.
    pub fn rows_of(&self, i: usize) -> Option<&RoaringBitmap> {
        self.bitmaps.get(i).and_then(Option::as_ref)
    }

    /// Write a new tombstone with `entries` for the version after `base`
    /// (create-only, uniquely named); returns its reference (its name under
    /// the table, the files it deletes rows of, and its SHA-256).
    pub async fn put(
        store: &StoreHandle,
        table: &str,
        base: u64,
        entries: Vec<Entry>,
    ) -> Result<TombstoneRef> {
        let name = format!(
            "tombstone/v{:08}-{}.del",
            base.saturating_add(1),
            crate::dataset::unique_token()
        );
        let key = format!("{}/{name}", table.trim_end_matches('/'));
        let mut files: Vec<String> = entries.iter().map(|e| e.file().to_string()).collect();
        files.sort();
        files.dedup();
        let body = bytes::Bytes::from(Self::new(entries).to_json()?);
        let sha256 = crate::parquet::encode::sha256_hex(&body);
        store.put_create_own(&key, body).await?;
        Ok(TombstoneRef {
            path: name,
            files,
            sha256,
        })
    }

    /// Refuse an entry for a file `named` does not list: a delete must
    /// never land on a file its reference (which scans and compaction go
    /// by) does not name.
    ///
    /// With `scope` (the files of the segments a pruned read loaded), only
    /// entries for files in it are checked: `named` then lists only those,
    /// and the others are checked by any read that loads their segments.
    pub fn check_files(
        &self,
        named: &TombstoneRef,
        path: &str,
        scope: Option<&HashSet<String>>,
    ) -> Result<()> {
        let names: HashSet<&str> = named.files.iter().map(String::as_str).collect();
        match self
            .entries
            .iter()
            .find(|e| !names.contains(e.file()) && scope.is_none_or(|s| s.contains(e.file())))
        {
            Some(e) => Err(Error::ManifestCorrupted {
                path: path.to_string(),
                reason: format!(
                    "it deletes rows of {:?}, which the manifest's reference to it does not name",
                    e.file()
                ),
            }),
            None => Ok(()),
        }
    }

    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self)
            .map_err(|e| Error::InvalidArgument(format!("tombstone is not serialisable: {e}")))
    }

    /// Parse and check a tombstone read from `path`.
    pub fn from_json(raw: &[u8], path: &str) -> Result<Self> {
        let corrupted = |reason: String| Error::ManifestCorrupted {
            path: path.to_string(),
            reason,
        };
        let mut t: Tombstone = serde_json::from_slice(raw).map_err(|e| corrupted(e.to_string()))?;
        if t.format != FORMAT {
            return Err(corrupted(format!(
                "format is {:?}, this pds reads {FORMAT:?}",
                t.format
            )));
        }
        let mut bitmaps = Vec::with_capacity(t.entries.len());
        for e in &t.entries {
            bitmaps.push(match e {
                Entry::Rows { bitmap, rows, .. } => {
                    let b = decode_bitmap(bitmap).map_err(&corrupted)?;
                    if b.len() != *rows {
                        return Err(corrupted(format!(
                            "a bitmap holds {} rows but says {rows}",
                            b.len()
                        )));
                    }
                    Some(b)
                }
                _ => None,
            });
        }
        t.bitmaps = bitmaps;
        Ok(t)
    }
}

fn decode_bitmap(text: &str) -> std::result::Result<RoaringBitmap, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("a bitmap is not base64: {e}"))?;
    // The checked deserializer validates container headers and sizes.
    RoaringBitmap::deserialize_from(&raw[..]).map_err(|e| format!("a bitmap is invalid: {e}"))
}

/// A primary-key range deleted from one file.
#[derive(Debug, Clone, PartialEq)]
pub struct PkRange {
    pub min: Option<Value>,
    pub max: Option<Value>,
    pub min_exclusive: bool,
    pub max_exclusive: bool,
    /// The type of the bounds; `None`: the file's key type.
    pub key_type: Option<arrow_schema::DataType>,
}

/// Everything deleted from one data file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileDeletes {
    /// Whole row groups, by index.
    pub row_groups: BTreeSet<u64>,
    /// Rows deleted in whole row groups (counted once per row group).
    pub row_group_rows: u64,
    pub pk_ranges: Vec<PkRange>,
    /// Row positions.
    pub rows: RoaringBitmap,
}

impl FileDeletes {
    /// Rows known to be deleted (whole row groups and positions, counted
    /// once; key ranges are counted only when the file is read).
    pub fn known_rows(&self, group_starts: &[u64], group_rows: &[u64]) -> u64 {
        let mut n = self.row_group_rows;
        let mut overlap = 0;
        for &rg in &self.row_groups {
            let (Some(&start), Some(&len)) =
                (group_starts.get(rg as usize), group_rows.get(rg as usize))
            else {
                continue;
            };
            let (Ok(lo), Ok(hi)) = (
                u32::try_from(start),
                u32::try_from(start.saturating_add(len)),
            ) else {
                continue;
            };
            overlap += self.rows.range_cardinality(lo..hi);
        }
        n = n.saturating_add(self.rows.len().saturating_sub(overlap));
        n
    }
}

/// Deletes of a version, by data file.
pub type Deletes = HashMap<String, FileDeletes>;

/// Fold tombstones into per-file deletes.
pub fn fold(tombstones: &[Arc<Tombstone>]) -> Result<Deletes> {
    let mut out: Deletes = HashMap::new();
    for t in tombstones {
        for (i, e) in t.entries.iter().enumerate() {
            let d = out.entry(e.file().to_string()).or_default();
            match e {
                Entry::RowGroup {
                    row_group, rows, ..
                } => {
                    if d.row_groups.insert(*row_group) {
                        d.row_group_rows = d.row_group_rows.saturating_add(*rows);
                    }
                }
                Entry::PkRange {
                    pk_min,
                    pk_max,
                    pk_min_exclusive,
                    pk_max_exclusive,
                    pk_type,
                    ..
                } => d.pk_ranges.push(PkRange {
                    min: pk_min.clone(),
                    max: pk_max.clone(),
                    min_exclusive: *pk_min_exclusive,
                    max_exclusive: *pk_max_exclusive,
                    key_type: pk_type
                        .as_deref()
                        .map(|t| {
                            t.parse::<arrow_schema::DataType>().map_err(|err| {
                                Error::ManifestCorrupted {
                                    path: e.file().to_string(),
                                    reason: format!(
                                        "a key range's pk_type {t:?} is not a type: {err}"
                                    ),
                                }
                            })
                        })
                        .transpose()?,
                }),
                Entry::Rows { .. } => {
                    // Decoded (and checked) when the tombstone was parsed.
                    let b = t.rows_of(i).ok_or_else(|| Error::ManifestCorrupted {
                        path: e.file().to_string(),
                        reason: "a rows entry holds no valid bitmap".into(),
                    })?;
                    d.rows |= b;
                }
            }
        }
    }
    Ok(out)
}

/// Tombstones are immutable: once read (and their SHA-256 checked), they
/// are kept (per store URL, key and SHA-256) for later scans of this
/// process, up to [`CACHE_BYTES`] (twice their objects' size: the entries
/// and the decoded bitmaps) and [`CACHE_LIMIT`] tombstones; the oldest go
/// first.
fn cache() -> &'static ObjectCache {
    static CACHE: OnceLock<ObjectCache> = OnceLock::new();
    CACHE.get_or_init(|| ObjectCache::with_limits(CACHE_BYTES, CACHE_LIMIT))
}

/// Tombstones the cache holds at most.
pub const CACHE_LIMIT: usize = 4096;

/// Estimated bytes of tombstones the cache holds at most.
pub const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Entries and estimated bytes the tombstone cache holds (for diagnostics).
pub fn cache_usage() -> (usize, usize) {
    cache().usage()
}

/// GET the tombstone `path` (relative to `table`) that `version` lists:
/// its key and bytes, unchecked. A missing one is
/// [`super::missing_object`]'s error: `VersionNotFound` if vacuum removed
/// the version meanwhile, else `ManifestCorrupted` naming the manifest and
/// the tombstone.
///
/// Cost: 1 GET (and a HEAD if the tombstone is missing).
pub async fn fetch(
    store: &StoreHandle,
    table: &str,
    version: u64,
    path: &str,
) -> Result<(String, bytes::Bytes)> {
    let key = format!("{}/{path}", table.trim_end_matches('/'));
    match store.get(&key).await {
        Ok(raw) => Ok((key, raw)),
        Err(Error::NotFound { .. }) => {
            Err(super::missing_object(store, table, version, &format!("tombstone {path:?}")).await)
        }
        Err(e) => Err(e),
    }
}

/// GET (or take from the cache) the tombstones `refs` of `table`, which
/// `version` lists, at once. Each must have the SHA-256 its reference
/// records, and delete rows only of the files its reference names;
/// otherwise `ManifestCorrupted`. A missing one: see [`fetch`].
pub async fn load(
    store: &StoreHandle,
    table: &str,
    version: u64,
    refs: &[TombstoneRef],
) -> Result<Vec<Arc<Tombstone>>> {
    load_scoped(store, table, version, refs, None).await
}

/// [`load`] of every tombstone `m` lists (the deletes of the files it
/// holds, for a writer planning on it).
pub async fn load_version(
    store: &StoreHandle,
    table: &str,
    m: &super::snapshot::TableManifest,
) -> Result<Vec<Arc<Tombstone>>> {
    // A partial view lists each tombstone with the loaded files only.
    let scope = m.loaded_scope();
    load_scoped(store, table, m.version, &m.tombstones, scope.as_ref()).await
}

/// The deletes of the files of `m` that `wanted` accepts: only the
/// tombstones naming one of them are read, scoped to the files `m` loaded.
pub async fn deletes_of(
    store: &StoreHandle,
    table: &str,
    m: &super::snapshot::TableManifest,
    wanted: impl Fn(&str) -> bool,
) -> Result<Deletes> {
    let refs: Vec<_> = m
        .tombstones
        .iter()
        .filter(|t| t.files.iter().any(|f| wanted(f)))
        .cloned()
        .collect();
    if refs.is_empty() {
        return Ok(Deletes::new());
    }
    let scope = m.loaded_scope();
    fold(&load_scoped(store, table, m.version, &refs, scope.as_ref()).await?)
}

/// [`load`] for a pruned read: `scope` holds the files of the segments it
/// loaded (see `Tombstone::check_files`).
pub async fn load_scoped(
    store: &StoreHandle,
    table: &str,
    version: u64,
    refs: &[TombstoneRef],
    scope: Option<&HashSet<String>>,
) -> Result<Vec<Arc<Tombstone>>> {
    let loads = refs.iter().map(|r| async move {
        let key = format!("{}/{}", table.trim_end_matches('/'), r.path);
        let id = format!("{}\0{key}\0{}", store.url(), r.sha256);
        if let Some(t) = cache().get::<Tombstone>(&id) {
            t.check_files(r, &key, scope)?;
            return Ok(t);
        }
        let (key, raw) = fetch(store, table, version, &r.path).await?;
        let sum = crate::parquet::encode::sha256_hex(&raw);
        // An empty SHA-256 only comes from a manifest written before the
        // seal, which recorded none (see `snapshot::Written::Unsealed`).
        if sum != r.sha256 && !r.sha256.is_empty() {
            return Err(Error::ManifestCorrupted {
                path: key,
                reason: format!(
                    "its SHA-256 is {sum}, the manifest records {} (damaged or replaced)",
                    r.sha256
                ),
            });
        }
        let t = Arc::new(Tombstone::from_json(&raw, &key)?);
        t.check_files(r, &key, scope)?;
        cache().insert(id, t.clone(), 2 * raw.len());
        Ok::<_, Error>(t)
    });
    futures::future::try_join_all(loads).await
}

/// Bitmaps per file from sorted positions (the planner's output).
pub fn bitmaps(positions: BTreeMap<String, Vec<u64>>) -> Result<BTreeMap<String, RoaringBitmap>> {
    positions
        .into_iter()
        .map(|(file, rows)| {
            let mut b = RoaringBitmap::new();
            for p in rows {
                let p = u32::try_from(p).map_err(|_| {
                    Error::InvalidArgument(format!(
                        "{file} has more than 2^32 rows; pds tables hold files below that"
                    ))
                })?;
                b.insert(p);
            }
            Ok((file, b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_folds_and_refuses_damage() {
        let mut b = RoaringBitmap::new();
        b.insert_range(10..20);
        b.insert(5);
        let t = Tombstone::new(vec![
            Entry::RowGroup {
                file: "data/a.parquet".into(),
                row_group: 1,
                rows: 100,
            },
            Entry::rows("data/a.parquet", &b).unwrap(),
            Entry::PkRange {
                file: "data/b.parquet".into(),
                pk_min: Some(Value::from(3)),
                pk_max: None,
                pk_min_exclusive: true,
                pk_max_exclusive: false,
                pk_type: None,
            },
            Entry::PkRange {
                file: "data/c.parquet".into(),
                pk_min: None,
                pk_max: Some(Value::from(86_400_000)),
                pk_min_exclusive: false,
                pk_max_exclusive: false,
                pk_type: Some(arrow_schema::DataType::Date64.to_string()),
            },
        ]);
        let raw = t.to_json().unwrap();
        let back = Tombstone::from_json(&raw, "t").unwrap();
        assert_eq!(back, t);
        let d = fold(&[Arc::new(back)]).unwrap();
        assert_eq!(d["data/a.parquet"].rows.len(), 11);
        assert_eq!(d["data/a.parquet"].row_groups.len(), 1);
        assert_eq!(d["data/b.parquet"].pk_ranges.len(), 1);
        assert_eq!(d["data/b.parquet"].pk_ranges[0].key_type, None);
        assert_eq!(
            d["data/c.parquet"].pk_ranges[0].key_type,
            Some(arrow_schema::DataType::Date64)
        );
        let bad = Tombstone::new(vec![Entry::PkRange {
            file: "data/c.parquet".into(),
            pk_min: None,
            pk_max: None,
            pk_min_exclusive: false,
            pk_max_exclusive: false,
            pk_type: Some("NotAType".into()),
        }]);
        assert!(matches!(
            fold(&[Arc::new(bad)]),
            Err(Error::ManifestCorrupted { .. })
        ));
        // Row group 1 covers positions 100..200: no overlap with the bitmap.
        assert_eq!(d["data/a.parquet"].known_rows(&[0, 100], &[100, 100]), 111);
        // Row group 0 covers 0..100, which holds all 11 positions.
        let mut overlap = d["data/a.parquet"].clone();
        overlap.row_groups = [0].into();
        assert_eq!(overlap.known_rows(&[0, 100], &[100, 100]), 100);

        let text = String::from_utf8(raw).unwrap();
        for bad in [
            text.replace(FORMAT, "pds-tombstone/9"),
            text.replace("\"rows\":11", "\"rows\":12"),
            text.replace("\"bitmap\":\"", "\"bitmap\":\"AAAA"),
            "[1, 2]".to_string(),
        ] {
            assert!(matches!(
                Tombstone::from_json(bad.as_bytes(), "t"),
                Err(Error::ManifestCorrupted { .. })
            ));
        }
    }

    /// A tombstone must have the SHA-256 its reference records, and delete
    /// rows only of the files its reference names (issue #15 S-4).
    #[test]
    fn loading_checks_the_sha256_and_the_files_its_reference_names() {
        let store = StoreHandle::open("memory://", &Default::default()).unwrap();
        let rt = crate::runtime::get().unwrap();
        let entries = vec![
            Entry::RowGroup {
                file: "data/a.parquet".into(),
                row_group: 0,
                rows: 5,
            },
            Entry::RowGroup {
                file: "data/b.parquet".into(),
                row_group: 1,
                rows: 5,
            },
        ];
        let r = rt
            .block_on(Tombstone::put(&store, "t", 0, entries))
            .unwrap();
        assert_eq!(r.files, vec!["data/a.parquet", "data/b.parquet"]);
        assert_eq!(
            rt.block_on(load(&store, "t", 0, std::slice::from_ref(&r)))
                .unwrap()[0]
                .entries
                .len(),
            2
        );
        let mut narrower = r.clone();
        narrower.files = vec!["data/a.parquet".into()];
        let mut other_sha = r.clone();
        other_sha.sha256 = "0".repeat(64);
        for (bad, why) in [(narrower, "does not name"), (other_sha, "SHA-256")] {
            match rt.block_on(load(&store, "t", 0, &[bad])) {
                Err(Error::ManifestCorrupted { reason, .. }) => {
                    assert!(reason.contains(why), "{reason}")
                }
                other => panic!("{why}: {other:?}"),
            }
        }
        // Replaced bytes (read afresh under another process's cache) fail too.
        let key = format!("t/{}", r.path);
        rt.block_on(store.put(
            &key,
            bytes::Bytes::from(Tombstone::new(vec![]).to_json().unwrap()),
            crate::store::PutMode::Overwrite,
        ))
        .unwrap();
        cache().clear();
        assert!(matches!(
            rt.block_on(load(&store, "t", 0, &[r])),
            Err(Error::ManifestCorrupted { .. })
        ));
    }

    /// A seeded fuzz loop: damaged tombstones (flipped bytes, truncations,
    /// random bitmaps) parse or fail as `ManifestCorrupted`, never panic.
    #[test]
    fn damaged_tombstones_never_panic() {
        let mut b = RoaringBitmap::new();
        b.insert_range(0..5000);
        b.insert(1 << 20);
        let good = Tombstone::new(vec![
            Entry::rows("data/a.parquet", &b).unwrap(),
            Entry::RowGroup {
                file: "data/a.parquet".into(),
                row_group: 2,
                rows: 9,
            },
        ])
        .to_json()
        .unwrap();
        let mut rng = crate::test_rng::TestRng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.next_u64();
        for _ in 0..2000 {
            let mut damaged = good.clone();
            match next() % 3 {
                0 => {
                    let at = (next() % damaged.len() as u64) as usize;
                    damaged[at] = (next() % 256) as u8;
                }
                1 => damaged.truncate((next() % damaged.len() as u64) as usize),
                _ => {
                    let junk: Vec<u8> = (0..(next() % 64)).map(|_| next() as u8).collect();
                    let text = base64::engine::general_purpose::STANDARD.encode(junk);
                    let bad = format!(
                        "{{\"format\": \"{FORMAT}\", \"created_at\": \"x\", \"entries\": \
                         [{{\"kind\": \"rows\", \"file\": \"data/a\", \"bitmap\": \"{text}\", \"rows\": 1}}]}}"
                    );
                    damaged = bad.into_bytes();
                }
            }
            match Tombstone::from_json(&damaged, "t") {
                Ok(t) => {
                    fold(&[Arc::new(t)]).unwrap();
                }
                Err(Error::ManifestCorrupted { .. }) => {}
                Err(other) => panic!("unexpected error {other}"),
            }
        }
    }
}
