//! A writer's claim on a dataset key (`_WRITING`): taken, checked before
//! each step, released (see the protocol in [`super`]).

use bytes::Bytes;

use super::manifest;
use super::{child_key, WRITING};
use crate::error::{Error, Result};
use crate::parquet::encode::sha256_hex;
use crate::store::{PutMode, StoreHandle};

/// A writer's hold on a dataset key: the `_WRITING` object it created.
#[derive(Clone)]
pub struct Claim {
    key: String,
    token: Bytes,
}

impl Claim {
    /// Create `location/_WRITING` create-only. `AlreadyExists` (as
    /// [`Error::WriteInProgress`]) if another writer holds the key, or a
    /// killed one left its claim.
    pub async fn take(store: &StoreHandle, location: &str) -> Result<Self> {
        let key = child_key(location, WRITING);
        let token = new_token();
        // A create whose reply was lost and that was tried again finds the
        // claim it made itself: that is this writer's claim, not another's.
        let mut created = store.put_create_own(&key, token.clone()).await;
        for _ in 0..2 {
            // Released between the refused create and its read-back: try again.
            if !matches!(created, Err(Error::NotFound { .. })) {
                break;
            }
            created = store.put_create_own(&key, token.clone()).await;
        }
        match created {
            Ok(_) => Ok(Self { key, token }),
            Err(Error::AlreadyExists { .. }) => {
                let since = store.try_head(&key).await.ok().flatten().map(|m| {
                    m.last_modified
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                });
                Err(Error::WriteInProgress {
                    key: location.to_string(),
                    since,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Take the key from whoever holds it (an overwrite that keeps the old
    /// dataset until it commits): `_WRITING` is replaced unconditionally, so
    /// a writer that held it fails at its next check.
    pub async fn take_over(store: &StoreHandle, location: &str) -> Result<Self> {
        let key = child_key(location, WRITING);
        let token = new_token();
        store.put(&key, token.clone(), PutMode::Overwrite).await?;
        Ok(Self { key, token })
    }

    /// The claim on `location` that holds `token` (taken earlier, possibly
    /// by another process of the same writer: a Spark driver).
    pub fn resume(location: &str, token: Bytes) -> Self {
        Self {
            key: child_key(location, WRITING),
            token,
        }
    }

    /// What `_WRITING` holds while the claim is this writer's.
    pub fn token(&self) -> &Bytes {
        &self.token
    }

    /// `Ok` while the claim is still this writer's.
    pub async fn check(&self, store: &StoreHandle) -> Result<()> {
        match store.get(&self.key).await {
            Ok(b) if b == self.token => Ok(()),
            Ok(_) | Err(Error::NotFound { .. }) => Err(self.lost()),
            Err(e) => Err(e),
        }
    }

    /// The error of a writer whose claim another writer took.
    pub(super) fn lost(&self) -> Error {
        Error::ClaimLost {
            key: self
                .key
                .trim_end_matches(WRITING)
                .trim_end_matches('/')
                .to_string(),
        }
    }

    /// Remove the claim if it is still this writer's (best effort).
    pub async fn release(&self, store: &StoreHandle) {
        if self.check(store).await.is_ok() {
            let _ = store.delete(&self.key).await;
        }
    }
}

/// The content of a new claim: a token no other writer holds, the process
/// and the time.
fn new_token() -> Bytes {
    Bytes::from(format!(
        "{{\"writer\": \"{}\", \"pid\": {}, \"started_at\": \"{}\"}}\n",
        unique_token(),
        std::process::id(),
        manifest::now_iso8601()
    ))
}

/// A token no other writer holds: time, process, a counter and a hash of them.
pub fn unique_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seed = format!(
        "{nanos}-{}-{}-{:?}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        std::thread::current().id()
    );
    sha256_hex(seed.as_bytes())[..32].to_string()
}
