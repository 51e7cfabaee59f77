//! A table's versions as stored: which version is the latest (the pointer,
//! and the committed versions past it that readers and writers roll
//! forward to), reading a version to a chosen depth, and what a manifest
//! type must provide to be versioned ([`Versioned`]). The commit loop that
//! creates versions is [`super::commit`]'s.

use std::sync::Arc;

use super::snapshot::TableManifest;
use super::{manifest_key, pointer_key, Pointer};
use crate::error::{Error, Result};
use crate::store::StoreHandle;

/// Commits that found versions a dead writer left unpointed are rolled
/// forward at most this many versions at a time.
const MAX_ROLL_FORWARD: u64 = 64;

/// A manifest the commit loop can version: tables' and pipelines' alike.
pub trait Versioned: Sized {
    /// The version this manifest holds.
    fn version(&self) -> u64;
    /// Set when the commit loop picks the version this attempt tries.
    fn set_version(&mut self, version: u64, previous: Option<u64>);
    /// The bytes stored at `manifest/vNNNNNNNN.json`.
    fn to_json(&self) -> Result<Vec<u8>>;
    /// Parse and validate bytes read from `path` (untrusted); `version` is
    /// the one the name promises. Every failure is `ManifestCorrupted`.
    fn from_json(raw: &[u8], path: &str, version: u64) -> Result<Self>;
    /// The id of the commit that wrote this manifest, if it recorded one.
    fn commit_id(&self) -> Option<&str>;
    /// Set by the commit loop before the manifest is written.
    fn set_commit_id(&mut self, id: &str);
    /// The id of the table this version belongs to (see
    /// [`super::identity`]); `None` for other kinds and older tables.
    fn table_id(&self) -> Option<&str> {
        None
    }
    /// The earlier on-disk format this manifest was read in (`None`: the
    /// current one, writable).
    fn earlier_format(&self) -> Option<&'static str> {
        None
    }
    /// `UpgradeRequired` if this manifest, the latest version of `key`, is
    /// in an earlier format: no commit but an upgrade builds on it.
    fn check_writable(&self, _key: &str) -> Result<()> {
        Ok(())
    }
    /// Read what a manifest references beyond its own object, as far as
    /// `depth` asks (a table's segments); nothing for other kinds.
    fn load<'a>(
        &'a mut self,
        _store: &'a StoreHandle,
        _table: &'a str,
        _depth: Depth,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// Write what the manifest will reference beyond its own object (a
    /// table's new segments), before the manifest itself; nothing for other
    /// kinds. Returns the keys written: a lost race removes them.
    fn lay_out<'a>(
        &'a mut self,
        _store: &'a StoreHandle,
        _table: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// How much of a version a read loads.
#[derive(Debug, Clone, Default)]
pub enum Depth {
    /// Everything it references: a table's whole file list.
    #[default]
    Full,
    /// The manifest object alone (a table's root, with its segment list).
    Root,
    /// A table's segments whose statistics can hold rows the predicate
    /// matches (and a small last one): a [`View::Partial`](super::snapshot::View::Partial)
    /// manifest a rewrite commits on.
    Where(Arc<crate::parquet::filter::Predicate>),
    /// A table's segments a compaction works on (see
    /// [`SegmentChoice`](super::segment::SegmentChoice)), and a small last
    /// one: a [`View::Partial`](super::snapshot::View::Partial) manifest.
    Segments(Arc<super::segment::SegmentChoice>),
    /// What a write that also changes the schema needs: the inner depth
    /// in the current format, where each segment reference of the root
    /// records the old schema (see [`TableManifest::record_schema_change`]);
    /// the whole file list in `pds-table/2`, where every file entry does.
    ChangingSchema(Box<Depth>),
}

pub(crate) type BoxFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

impl Versioned for TableManifest {
    fn version(&self) -> u64 {
        self.version
    }
    fn set_version(&mut self, version: u64, previous: Option<u64>) {
        self.version = version;
        self.previous = previous;
    }
    fn to_json(&self) -> Result<Vec<u8>> {
        TableManifest::to_json(self)
    }
    fn from_json(raw: &[u8], path: &str, version: u64) -> Result<Self> {
        TableManifest::from_json(raw, path, version)
    }
    fn commit_id(&self) -> Option<&str> {
        self.commit_id.as_deref()
    }
    fn set_commit_id(&mut self, id: &str) {
        self.commit_id = Some(id.to_string());
    }
    fn table_id(&self) -> Option<&str> {
        self.table_id.as_deref()
    }
    fn earlier_format(&self) -> Option<&'static str> {
        self.layout.written.earlier()
    }
    fn check_writable(&self, key: &str) -> Result<()> {
        match self.earlier_format() {
            None => Ok(()),
            Some(format) => Err(Error::UpgradeRequired {
                kind: "table",
                key: key.to_string(),
                format,
                how: "Table.upgrade",
            }),
        }
    }
    fn load<'a>(
        &'a mut self,
        store: &'a StoreHandle,
        table: &'a str,
        depth: Depth,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match depth {
                Depth::Root => Ok(()),
                Depth::Full => self.load_all(store, table).await,
                Depth::ChangingSchema(_) if !self.layout.written.schema_per_segment() => {
                    self.load_all(store, table).await
                }
                Depth::ChangingSchema(inner) => self.load(store, table, *inner).await,
                Depth::Where(predicate) => {
                    let keep = super::prune::segments_may_match(self, table, &predicate)?;
                    self.load_partial(store, table, |i, _| {
                        Ok(keep.get(i).copied().unwrap_or(true))
                    })
                    .await
                }
                Depth::Segments(choice) => {
                    self.load_partial(store, table, |_, r| Ok(choice.wants(r)))
                        .await
                }
            }
        })
    }
    fn lay_out<'a>(
        &'a mut self,
        store: &'a StoreHandle,
        table: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move { self.lay_out_segments(store, table).await })
    }
}

/// The latest committed version and what a pointer update needs.
#[derive(Debug, Clone)]
pub struct Latest<M = TableManifest> {
    pub manifest: M,
    /// The pointer object's ETag/version as read (`None`: no pointer yet).
    pub(crate) pointer: Option<(Option<String>, Option<String>)>,
    /// The version the pointer names (it may lag `manifest.version`).
    pub(crate) pointed: Option<u64>,
    /// When this was read: a base older than
    /// [`MAX_BASE_AGE`](super::commit::MAX_BASE_AGE) is read again before a
    /// commit builds on it.
    pub(crate) read_at: std::time::Instant,
}

impl<M> Latest<M> {
    /// The version the pointer named when it was read (`None`: no pointer
    /// yet); it may lag `manifest`'s.
    pub fn pointed(&self) -> Option<u64> {
        self.pointed
    }
}

/// Read the pointer (with its ETag) and GET the manifest it names.
///
/// A version is committed the moment its manifest exists, so the pointer
/// may lag (its writer died, or its PUT failed). Readers (`roll_forward`
/// false) HEAD the name after the pointed version together with the GET of
/// the pointed manifest: 2 round trips (3 requests) when the pointer is
/// current, and a HEAD per version more when it lags. Writers
/// (`roll_forward`, after a lost race) HEAD forward before reading.
///
/// `Ok(None)` if the table has no version at all.
pub async fn latest_with(
    store: &StoreHandle,
    table: &str,
    roll_forward: bool,
) -> Result<Option<Latest>> {
    latest_of(store, table, roll_forward).await
}

/// [`latest_with`] for any [`Versioned`] manifest.
pub async fn latest_of<M: Versioned>(
    store: &StoreHandle,
    table: &str,
    roll_forward: bool,
) -> Result<Option<Latest<M>>> {
    latest_at::<M>(store, table, roll_forward, Depth::Full).await
}

/// [`latest_of`], loading the manifest to `depth`.
pub async fn latest_at<M: Versioned>(
    store: &StoreHandle,
    table: &str,
    roll_forward: bool,
    depth: Depth,
) -> Result<Option<Latest<M>>> {
    let (pointed, pointer, id) = match store.get_with_meta(&pointer_key(table)).await {
        Ok((raw, meta)) => {
            let p = Pointer::from_json(&raw, &pointer_key(table))?;
            // Bodies cached from another table once at this key are not
            // this table's (their names are the same).
            store.cache().identify(table, p.table_id.as_deref());
            (
                Some(p.version),
                Some((meta.e_tag, meta.version)),
                Some(p.table_id),
            )
        }
        Err(Error::NotFound { .. }) => (None, None, None),
        Err(e) => return Err(e),
    };
    // With a pointer, the versions read must be of the table it names.
    let id = id.as_ref().map(|i| i.as_deref());
    let mut version = pointed;
    if let (Some(v), false) = (pointed, roll_forward) {
        // A reader: the pointed manifest, and at the same time a HEAD of
        // the next name, since a version is committed the moment its
        // manifest exists (its writer may have failed to move the pointer).
        if let Some(next) = v.checked_add(1) {
            let next_key = manifest_key(table, next);
            let (got, ahead) = futures::join!(
                read_version_of_table::<M>(store, table, v, depth.clone(), id),
                store.try_head(&next_key)
            );
            if ahead?.is_none() {
                return Ok(Some(Latest {
                    manifest: pointed_manifest(got, table, v)?,
                    pointer,
                    pointed,
                    read_at: std::time::Instant::now(),
                }));
            }
            version = Some(next);
        }
    }
    if version.is_none() || version != pointed || roll_forward {
        // A version exists from the moment its manifest does. (Without a
        // pointer, a first writer may have died before creating it.)
        for _ in 0..MAX_ROLL_FORWARD {
            let Some(next) = version.map_or(Some(0), |v| v.checked_add(1)) else {
                break;
            };
            if store.try_head(&manifest_key(table, next)).await?.is_none() {
                break;
            }
            version = Some(next);
        }
    }
    let Some(version) = version else {
        return Ok(None);
    };
    let got = read_version_of_table::<M>(store, table, version, depth, id).await;
    let manifest = if Some(version) == pointed {
        pointed_manifest(got, table, version)?
    } else {
        got?
    };
    Ok(Some(Latest {
        manifest,
        pointer,
        pointed,
        read_at: std::time::Instant::now(),
    }))
}

/// The manifest the pointer names, as read: a missing one means the table
/// is damaged (`NotFound` would say there is no table).
fn pointed_manifest<M>(got: Result<M>, table: &str, version: u64) -> Result<M> {
    match got {
        Err(Error::NotFound { .. }) => Err(Error::ManifestCorrupted {
            path: pointer_key(table),
            reason: format!(
                "it names version {version}, whose manifest {} does not exist",
                manifest_key(table, version)
            ),
        }),
        other => other,
    }
}

/// [`latest`] of a table that must exist (`NotFound` otherwise), from a
/// thread outside the runtime.
pub fn latest_existing(store: &StoreHandle, table: &str) -> Result<Latest> {
    opened(table, latest_existing_at(store, table, Depth::Full))
}

/// [`latest_existing`], loading the manifest to `depth`.
pub fn latest_existing_at(store: &StoreHandle, table: &str, depth: Depth) -> Result<Latest> {
    crate::runtime::block_on(async {
        match latest_at(store, table, false, depth).await? {
            Some(l) => Ok(l),
            None => Err(super::not_found(store, table, "table").await),
        }
    })?
}

/// `got`, the latest version of `table`, if it is of the table the caller
/// opened (see [`super::identity::expecting`]); else `NotFound` saying
/// that table was dropped (and replaced), before anything is planned on it.
fn opened(table: &str, got: Result<Latest>) -> Result<Latest> {
    // A writer's first read: a table in an earlier format is refused
    // before anything is written.
    let got = got.and_then(|l| l.manifest.check_writable(table).map(|()| l));
    let Some(id) = super::identity::expected() else {
        return got;
    };
    match got {
        Ok(l) if super::identity::differ(l.manifest.table_id(), Some(&id)) => Err(
            super::identity::gone(table, Some(&id), Some(l.manifest.table_id())),
        ),
        Err(Error::NotFound { .. }) => Err(super::identity::gone(table, Some(&id), None)),
        other => other,
    }
}

/// [`latest_with`] as a reader: the pointer, its manifest and a HEAD of the
/// next version name (2 GETs + 1 HEAD, in 2 round trips).
pub async fn latest(store: &StoreHandle, table: &str) -> Result<Option<Latest>> {
    latest_with(store, table, false).await
}

/// The manifest of `version` (a GET; no pointer involved).
pub async fn read_version(store: &StoreHandle, table: &str, version: u64) -> Result<TableManifest> {
    read_version_of(store, table, version).await
}

/// [`read_version`] for any [`Versioned`] manifest.
pub async fn read_version_of<M: Versioned>(
    store: &StoreHandle,
    table: &str,
    version: u64,
) -> Result<M> {
    read_version_at(store, table, version, Depth::Full).await
}

/// [`read_version_of`], loading the manifest to `depth` (a table's root
/// alone is 1 GET, none if this handle has read it; its whole file list a
/// GET per segment not cached).
pub async fn read_version_at<M: Versioned>(
    store: &StoreHandle,
    table: &str,
    version: u64,
    depth: Depth,
) -> Result<M> {
    let key = manifest_key(table, version);
    // A version's manifest is created once and never replaced: a body this
    // handle has read and parsed is kept for its life (see `store::cache`),
    // or until a pointer shows another table at the key.
    let cached = store.cache().object(&key);
    let mark = store.cache().mark();
    let raw = match &cached {
        Some(body) => body.clone(),
        None => store.get(&key).await?,
    };
    let mut m = M::from_json(&raw, &key, version)?;
    if cached.is_none() {
        store.cache().keep_object(&key, raw, mark);
    }
    m.load(store, table, depth).await?;
    Ok(m)
}

/// [`read_version_at`] of a version of the table whose pointer says its id
/// is `id` (`None`: no pointer to check against): a version of another
/// table (a body cached before the table was dropped and created again, or
/// a manifest a dropped table left behind) is not taken for it.
async fn read_version_of_table<M: Versioned>(
    store: &StoreHandle,
    table: &str,
    version: u64,
    depth: Depth,
    id: Option<Option<&str>>,
) -> Result<M> {
    let m = read_version_at::<M>(store, table, version, depth.clone()).await?;
    let Some(id) = id else {
        return Ok(m);
    };
    if m.table_id() == id {
        return Ok(m);
    }
    // Perhaps a body of the table that was here before: read it again.
    store
        .cache()
        .forget_object(&manifest_key(table, version), false);
    let m = read_version_at::<M>(store, table, version, depth).await?;
    if super::identity::differ(m.table_id(), id) {
        return Err(Error::ManifestCorrupted {
            path: manifest_key(table, version),
            reason: format!(
                "it belongs to table {:?}, but the pointer names table {:?} (a version a \
                 dropped table left behind?)",
                m.table_id().unwrap_or("(no id)"),
                id.unwrap_or("(no id)")
            ),
        });
    }
    Ok(m)
}

/// [`latest_existing`] with the root alone loaded (see [`Depth::Root`]).
pub fn latest_existing_root(store: &StoreHandle, table: &str) -> Result<Latest> {
    opened(table, latest_existing_at(store, table, Depth::Root))
}
