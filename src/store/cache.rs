//! A bounded cache of parsed immutable objects, kept for the life of a store
//! handle (the Python `ObjectStoreBackend`).
//!
//! Only what cannot change under its key goes in: a part's footer keyed by
//! the part's path *and* the SHA-256 its manifest records (a rewritten part
//! has another digest, so it misses), and the bodies of objects that are
//! only ever created, never replaced (a table's version manifests; see
//! `table::versions::read_version_at`). Entries are weighed in bytes; the
//! oldest go first once the cache holds more than its limit.
//!
//! A write or delete through the same handle forgets the body cached under
//! that key, so a handle never reads back a body it has itself replaced or
//! removed. Another process's delete is not seen: a version vacuumed there
//! still reads from here (its data files may then be missing).

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// What the cache holds by default: footers are a few KiB each, so this
/// keeps those of thousands of parts.
pub const DEFAULT_LIMIT: usize = 64 * 1024 * 1024;

/// Entries the cache holds at most by default, whatever they weigh (each
/// costs its key and the map's bookkeeping besides its weight).
pub const DEFAULT_ENTRIES: usize = 100_000;

type Value = Arc<dyn Any + Send + Sync>;

#[derive(Default)]
struct Inner {
    map: HashMap<String, (Value, usize)>,
    order: VecDeque<String>,
    bytes: usize,
    /// Counts forgets: a body read before one may be stale, and is not kept.
    forgets: u64,
    /// The identity last seen of each table key (see [`ObjectCache::identify`]).
    identities: HashMap<String, Option<String>>,
}

/// Parsed immutable objects by key, at most `limit` bytes and `entries`
/// entries of them.
pub struct ObjectCache {
    inner: Mutex<Inner>,
    limit: usize,
    entries: usize,
}

impl Default for ObjectCache {
    fn default() -> Self {
        Self::new(DEFAULT_LIMIT)
    }
}

impl ObjectCache {
    /// A cache of at most `limit` bytes and [`DEFAULT_ENTRIES`] entries.
    pub fn new(limit: usize) -> Self {
        Self::with_limits(limit, DEFAULT_ENTRIES)
    }

    /// A cache of at most `limit` bytes and `entries` entries (at least 1).
    pub fn with_limits(limit: usize, entries: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            limit,
            entries: entries.max(1),
        }
    }

    /// The value cached under `key`, if it is a `T`.
    pub fn get<T: Any + Send + Sync>(&self, key: &str) -> Option<Arc<T>> {
        let inner = self.inner.lock().ok()?;
        let (value, _) = inner.map.get(key)?;
        value.clone().downcast::<T>().ok()
    }

    /// Keep `value` (about `bytes` in memory) under `key`. A value larger
    /// than the whole cache is not kept.
    pub fn insert<T: Any + Send + Sync>(&self, key: String, value: Arc<T>, bytes: usize) {
        if let Ok(mut inner) = self.inner.lock() {
            self.insert_locked(&mut inner, key, value, bytes);
        }
    }

    fn insert_locked<T: Any + Send + Sync>(
        &self,
        inner: &mut Inner,
        key: String,
        value: Arc<T>,
        bytes: usize,
    ) {
        if bytes > self.limit {
            return;
        }
        if let Some((_, old)) = inner.map.insert(key.clone(), (value, bytes)) {
            inner.bytes -= old;
        } else {
            inner.order.push_back(key);
        }
        inner.bytes += bytes;
        while inner.bytes > self.limit || inner.map.len() > self.entries {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some((_, size)) = inner.map.remove(&oldest) {
                inner.bytes -= size;
            }
        }
    }

    /// Forget the value cached under `key`, if any.
    pub fn remove(&self, key: &str) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if let Some((_, size)) = inner.map.remove(key) {
            inner.bytes -= size;
            inner.order.retain(|k| k != key);
        }
    }

    /// Forget every entry.
    pub fn clear(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.map.clear();
            inner.order.clear();
            inner.bytes = 0;
        }
    }

    /// The body of the object `key`, if cached (see [`Self::keep_object`]).
    pub fn object(&self, key: &str) -> Option<bytes::Bytes> {
        self.get::<bytes::Bytes>(&object_key(key))
            .map(|b| (*b).clone())
    }

    /// A mark to take before reading an object's body, for
    /// [`Self::keep_object`].
    pub fn mark(&self) -> u64 {
        self.inner.lock().map(|i| i.forgets).unwrap_or(u64::MAX)
    }

    /// Keep the body of the object `key`, which is never replaced once
    /// written, read after [`Self::mark`] returned `mark`: unless a write or
    /// delete through this handle forgot anything since (the body may then
    /// be older than it).
    pub fn keep_object(&self, key: &str, body: bytes::Bytes, mark: u64) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if inner.forgets != mark {
            return;
        }
        let bytes = body.len();
        self.insert_locked(&mut inner, object_key(key), Arc::new(body), bytes);
    }

    /// Forget the body of `key` (written or deleted through this handle), or
    /// with `under`, of every object whose key starts with `key`. Bodies read
    /// before this are not kept afterwards (see [`Self::keep_object`]).
    pub fn forget_object(&self, key: &str, under: bool) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.forgets = inner.forgets.wrapping_add(1);
        let wanted = object_key(key);
        let gone: Vec<String> = if under {
            inner
                .map
                .keys()
                .filter(|k| k.starts_with(&wanted))
                .cloned()
                .collect()
        } else if inner.map.contains_key(&wanted) {
            vec![wanted]
        } else {
            return;
        };
        for k in &gone {
            if let Some((_, size)) = inner.map.remove(k) {
                inner.bytes -= size;
            }
        }
        if !gone.is_empty() {
            inner.order.retain(|k| !gone.contains(k));
        }
    }

    /// Record that the table at `key` has the identity `id` (as its pointer
    /// says; `None` for a table of earlier pds). If the key was last seen
    /// with another identity (the table was dropped and another created
    /// there), every body cached under the key is forgotten: its version
    /// manifests share their names with the old table's. One entry per
    /// table key seen, a few dozen bytes each.
    pub fn identify(&self, key: &str, id: Option<&str>) {
        let table = object_key(key).trim_start_matches("object\0").to_string();
        let changed = match self.inner.lock() {
            Ok(mut inner) => match inner.identities.get(&table) {
                Some(seen) if seen.as_deref() == id => false,
                seen => {
                    let changed = seen.is_some();
                    inner
                        .identities
                        .insert(table.clone(), id.map(str::to_string));
                    changed
                }
            },
            Err(_) => return,
        };
        if !changed {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.forgets = inner.forgets.wrapping_add(1);
        // The bodies under `table/` only (not those of a key `table2`).
        let under = format!("{}/", object_key(&table));
        let gone: Vec<String> = inner
            .map
            .keys()
            .filter(|k| k.starts_with(&under))
            .cloned()
            .collect();
        for k in &gone {
            if let Some((_, size)) = inner.map.remove(k) {
                inner.bytes -= size;
            }
        }
        inner.order.retain(|k| !gone.contains(k));
    }

    /// Entries and bytes held (for tests and diagnostics).
    pub fn usage(&self) -> (usize, usize) {
        self.inner
            .lock()
            .map(|i| (i.map.len(), i.bytes))
            .unwrap_or_default()
    }
}

/// The cache key of object `key`, normalised as the store normalises keys
/// (`a//b/` and `a/b` are one object).
fn object_key(key: &str) -> String {
    let key = super::keys::segments(key)
        .map(|s| s.join("/"))
        .unwrap_or_else(|_| key.to_string());
    format!("object\0{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_oldest_beyond_the_limit_and_checks_types() {
        let cache = ObjectCache::new(100);
        cache.insert("a".into(), Arc::new(1u32), 40);
        cache.insert("b".into(), Arc::new(2u32), 40);
        assert_eq!(cache.get::<u32>("a").as_deref(), Some(&1));
        assert!(cache.get::<u64>("a").is_none(), "another type is a miss");
        cache.insert("c".into(), Arc::new(3u32), 40);
        assert!(cache.get::<u32>("a").is_none(), "the oldest went first");
        assert_eq!(cache.get::<u32>("b").as_deref(), Some(&2));
        assert_eq!(cache.usage(), (2, 80));
        cache.insert("b".into(), Arc::new(5u32), 10);
        assert_eq!(cache.usage(), (2, 50), "a replaced entry is weighed anew");
        cache.insert("huge".into(), Arc::new(0u32), 101);
        assert!(cache.get::<u32>("huge").is_none());
        assert_eq!(cache.usage(), (2, 50));
    }

    #[test]
    fn holds_at_most_its_entries_however_light_they_are() {
        let cache = ObjectCache::with_limits(1_000_000, 3);
        for i in 0..10u32 {
            cache.insert(format!("k{i}"), Arc::new(i), 1);
            assert!(cache.usage().0 <= 3);
        }
        assert_eq!(cache.usage(), (3, 3));
        assert!(cache.get::<u32>("k6").is_none(), "the oldest went first");
        assert_eq!(cache.get::<u32>("k9").as_deref(), Some(&9));
        cache.remove("k8");
        assert_eq!(cache.usage(), (2, 2));
        assert!(cache.get::<u32>("k8").is_none());
        // The removed key's place in the order is gone too: two more
        // entries evict only k7.
        cache.insert("a".into(), Arc::new(0u32), 1);
        cache.insert("b".into(), Arc::new(0u32), 1);
        assert!(cache.get::<u32>("k7").is_none());
        assert_eq!(cache.get::<u32>("k9").as_deref(), Some(&9));
        cache.clear();
        assert_eq!(cache.usage(), (0, 0));
        assert!(cache.get::<u32>("k9").is_none());
    }

    #[test]
    fn forgets_objects_by_key_and_under_a_prefix() {
        let cache = ObjectCache::new(1_000);
        for k in ["t/_manifest/v1.json", "t/_manifest/v2.json", "u/v1.json"] {
            cache.keep_object(k, bytes::Bytes::from(k.to_string()), cache.mark());
        }
        cache.insert("footer".into(), Arc::new(1u32), 10);
        assert_eq!(
            cache.object("u/v1.json").as_deref(),
            Some(&b"u/v1.json"[..])
        );
        cache.forget_object("t/_manifest/v1.json", false);
        assert!(cache.object("t/_manifest/v1.json").is_none());
        assert!(cache.object("t/_manifest/v2.json").is_some());
        cache.forget_object("t/", true);
        assert!(cache.object("t/_manifest/v2.json").is_none());
        assert!(cache.object("u/v1.json").is_some());
        assert_eq!(cache.get::<u32>("footer").as_deref(), Some(&1));
        assert_eq!(
            cache.usage(),
            (2, 19),
            "the forgotten bodies are no longer weighed"
        );
        // Forgetting an absent key changes nothing held.
        cache.forget_object("nothing", false);
        assert_eq!(cache.usage(), (2, 19));
        // A key is one object however it is spelled.
        cache.forget_object("u//v1.json/", false);
        assert!(cache.object("u/v1.json").is_none());
        // A body read before a forget is not kept: it may be the old one.
        let mark = cache.mark();
        cache.forget_object("elsewhere", false);
        cache.keep_object("t/v3.json", bytes::Bytes::from_static(b"old"), mark);
        assert!(cache.object("t/v3.json").is_none());
        cache.keep_object("t/v3.json", bytes::Bytes::from_static(b"new"), cache.mark());
        assert_eq!(cache.object("t/v3.json").as_deref(), Some(&b"new"[..]));
    }

    #[test]
    fn another_identity_at_a_key_forgets_the_bodies_under_it() {
        let cache = ObjectCache::new(1_000);
        let keep = |k: &str| cache.keep_object(k, bytes::Bytes::from(k.to_string()), cache.mark());
        keep("t/manifest/v0.json");
        keep("tt/manifest/v0.json");
        cache.identify("t", Some("a"));
        cache.identify("t/", Some("a"));
        assert!(
            cache.object("t/manifest/v0.json").is_some(),
            "seen first, or again"
        );
        cache.identify("t", Some("b"));
        assert!(
            cache.object("t/manifest/v0.json").is_none(),
            "another table at t"
        );
        assert!(
            cache.object("tt/manifest/v0.json").is_some(),
            "another key is kept"
        );
        keep("t/manifest/v0.json");
        cache.identify("t", None);
        assert!(
            cache.object("t/manifest/v0.json").is_none(),
            "an id-less table too"
        );
    }
}
