//! A bounded cache of parsed immutable objects, kept for the life of a store
//! handle (the Python `ObjectStoreBackend`).
//!
//! Only what cannot change under its key goes in: a part's footer keyed by
//! the part's path *and* the SHA-256 its manifest records (a rewritten part
//! has another digest, so it misses). Entries are weighed in bytes; the
//! oldest go first once the cache holds more than its limit.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// What the cache holds by default: footers are a few KiB each, so this
/// keeps those of thousands of parts.
pub const DEFAULT_LIMIT: usize = 64 * 1024 * 1024;

type Value = Arc<dyn Any + Send + Sync>;

#[derive(Default)]
struct Inner {
    map: HashMap<String, (Value, usize)>,
    order: VecDeque<String>,
    bytes: usize,
}

/// Parsed immutable objects by key, at most `limit` bytes of them.
pub struct ObjectCache {
    inner: Mutex<Inner>,
    limit: usize,
}

impl Default for ObjectCache {
    fn default() -> Self {
        Self::new(DEFAULT_LIMIT)
    }
}

impl ObjectCache {
    pub fn new(limit: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            limit,
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
        if bytes > self.limit {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if let Some((_, old)) = inner.map.insert(key.clone(), (value, bytes)) {
            inner.bytes -= old;
        } else {
            inner.order.push_back(key);
        }
        inner.bytes += bytes;
        while inner.bytes > self.limit {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some((_, size)) = inner.map.remove(&oldest) {
                inner.bytes -= size;
            }
        }
    }

    /// Entries and bytes held (for tests and diagnostics).
    pub fn usage(&self) -> (usize, usize) {
        self.inner
            .lock()
            .map(|i| (i.map.len(), i.bytes))
            .unwrap_or_default()
    }
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
}
