//! The deleted-key files that the patches of one update share (see
//! [`crate::spec::pipeline::Patch`]'s `deleted_rows`): a part set fetches,
//! checks and decodes each once, however many of the parts it reads name
//! it, and each patch slices its run from that one decode.
//!
//! A part set lives for one operation (a read, a scan, an update's
//! rewrite), so that is how long a file is kept. Decoded files are kept in
//! an [`ObjectCache`] of at most [`KEPT_BYTES`] (the oldest go first; a
//! file larger than that is not kept, which takes keys of about 1 KiB each,
//! since a shared file holds at most [`super::SHARED_DELETED_MAX_ROWS`]
//! keys). A patch's run is a slice of its file's decode, which it keeps
//! alive for as long as the part's decoded rows live, evicted or not: at
//! most one decode per file, where each patch decoded the whole file
//! before.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_array::RecordBatch;
use tokio::sync::OnceCell;

use crate::error::Result;
use crate::producers::parts::RangePart;
use crate::store::cache::ObjectCache;

/// Decoded bytes of shared files a part set keeps.
const KEPT_BYTES: usize = 64 << 20;

/// A shared file's rows, decoded once.
pub(super) type Decoded = Arc<Vec<RecordBatch>>;

/// The shared files a part set has decoded (see the module docs). Clones
/// of a part set share it.
pub struct SharedFiles {
    /// Decoded files by their manifest record (see [`file_key`]).
    kept: ObjectCache,
    /// The decodes under way: requests for a file being decoded wait for
    /// that decode instead of starting their own.
    loading: Mutex<HashMap<String, Arc<OnceCell<Decoded>>>>,
}

impl Default for SharedFiles {
    fn default() -> Self {
        Self {
            kept: ObjectCache::new(KEPT_BYTES),
            loading: Mutex::default(),
        }
    }
}

/// How many files are kept and their bytes, not their rows.
impl std::fmt::Debug for SharedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (files, bytes) = self.kept.usage();
        f.debug_struct("SharedFiles")
            .field("files", &files)
            .field("bytes", &bytes)
            .finish()
    }
}

/// A file as the manifest records it: two records that differ in name,
/// digest, size or rows are two files to the cache, so each decode is
/// checked against the record it is used for.
fn file_key(file: &RangePart) -> String {
    format!(
        "{}\0{}\0{}\0{}",
        file.name, file.sha256, file.size_bytes, file.rows
    )
}

impl SharedFiles {
    /// `file`'s rows: decoded before by this part set, or by `load` now
    /// (once, however many callers ask at the same time; a failed load is
    /// retried by the next caller).
    pub(super) async fn get<F, Fut>(&self, file: &RangePart, load: F) -> Result<Decoded>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<RecordBatch>>>,
    {
        let key = file_key(file);
        if let Some(rows) = self.kept.get::<Vec<RecordBatch>>(&key) {
            return Ok(rows);
        }
        let cell = self.loading().entry(key.clone()).or_default().clone();
        let mut loaded = false;
        let got = cell
            .get_or_try_init(|| async {
                let rows = Arc::new(load().await?);
                loaded = true;
                Ok::<_, crate::error::Error>(rows)
            })
            .await;
        if let (true, Ok(rows)) = (loaded, &got) {
            let size = rows.iter().map(|b| b.get_array_memory_size()).sum();
            self.kept.insert(key.clone(), Arc::clone(rows), size);
        }
        if loaded || got.is_err() {
            // The decode is in the cache now (unless too large to keep),
            // and a failed one leaves nothing for the next caller to wait on.
            let mut loading = self.loading();
            if loading.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                loading.remove(&key);
            }
        }
        Ok(got?.clone())
    }

    /// How many decoded files are kept (for tests).
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.kept.usage().0
    }

    fn loading(&self) -> MutexGuard<'_, HashMap<String, Arc<OnceCell<Decoded>>>> {
        // The map stays consistent across a panic elsewhere: every change
        // to it is made under the lock without unwinding.
        self.loading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn file(name: &str) -> RangePart {
        RangePart {
            name: name.into(),
            rows: 3,
            size_bytes: 10,
            sha256: "00".into(),
            first_key: Vec::new(),
            last_key: Vec::new(),
            patches: Vec::new(),
            base_rows: None,
            footer: None,
        }
    }

    fn rows(n: usize) -> Vec<RecordBatch> {
        let col = Arc::new(Int64Array::from_iter_values(0..n as i64));
        vec![RecordBatch::try_from_iter([("k", col as _)]).expect("a batch")]
    }

    #[test]
    fn each_file_is_loaded_once_by_concurrent_callers_and_a_failure_is_retried() {
        let shared = SharedFiles::default();
        let loads = AtomicUsize::new(0);
        let load = || async {
            loads.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(rows(3))
        };
        let f = file("a");
        let got = crate::runtime::block_on(async {
            futures::future::try_join_all((0..8).map(|_| shared.get(&f, load))).await
        })
        .expect("runtime")
        .expect("loaded");
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert!(got.iter().all(|g| Arc::ptr_eq(g, &got[0])));
        // Another record of the same name is another file.
        let mut g = file("a");
        g.sha256 = "01".into();
        crate::runtime::block_on(shared.get(&g, load))
            .expect("runtime")
            .expect("loaded");
        assert_eq!(loads.load(Ordering::SeqCst), 2);

        let failing = || async { Err(crate::error::Error::Task("lost".into())) };
        let h = file("b");
        assert!(crate::runtime::block_on(shared.get(&h, failing))
            .expect("runtime")
            .is_err());
        crate::runtime::block_on(shared.get(&h, load))
            .expect("runtime")
            .expect("retried");
        assert_eq!(loads.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_oldest_files_go_beyond_the_kept_bytes() {
        let shared = SharedFiles::default();
        // Each a little over a third of the bound (Arrow rounds buffers up).
        let big = KEPT_BYTES / 8 / 3 + 1024;
        for i in 0..4 {
            let f = file(&format!("f{i}"));
            crate::runtime::block_on(shared.get(&f, || async { Ok(rows(big)) }))
                .expect("runtime")
                .expect("loaded");
        }
        assert_eq!(
            shared.kept(),
            2,
            "three at a third of the bound each is over it"
        );
        let loads = AtomicUsize::new(0);
        let count = || async {
            loads.fetch_add(1, Ordering::SeqCst);
            Ok(rows(big))
        };
        crate::runtime::block_on(shared.get(&file("f3"), count))
            .expect("runtime")
            .expect("kept");
        assert_eq!(loads.load(Ordering::SeqCst), 0, "the newest is kept");
        crate::runtime::block_on(shared.get(&file("f0"), count))
            .expect("runtime")
            .expect("loaded again");
        assert_eq!(loads.load(Ordering::SeqCst), 1, "the oldest went");
    }
}
