//! S3 credentials from a refresh function, cached until near their expiry.
//!
//! [`CachingCredentials`] is an object_store `CredentialProvider` over a
//! caller's function that returns credentials and how long they stay valid
//! (`None`: for good). It calls the function on first use and again when the
//! cached credentials are within a margin of their expiry, so temporary
//! credentials (SSO, assumed roles, `credential_process`) are renewed
//! instead of frozen. The Python binding's function asks botocore for an
//! AWS profile's credentials (see `pds.backend`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use object_store::aws::AwsCredential;
use object_store::CredentialProvider;

/// What a refresh returns: the credentials and how long they stay valid
/// from now (`None`: they do not expire).
pub struct Fetched {
    pub credential: AwsCredential,
    pub ttl: Option<Duration>,
}

/// The refresh function: credentials, or why there are none (a message
/// without secrets; it becomes an `Unauthenticated` store error). It may
/// block (it runs on a blocking thread).
pub type Refresh = Arc<dyn Fn() -> Result<Fetched, String> + Send + Sync>;

/// Credentials are renewed this long before they expire (at most half
/// their lifetime, so short-lived ones are still reused for a while).
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(300);

/// A caching `CredentialProvider` over a [`Refresh`] function.
pub struct CachingCredentials {
    refresh: Refresh,
    margin: Duration,
    /// Held while refreshing, so that concurrent requests wait for one
    /// refresh instead of each calling the function.
    cached: tokio::sync::Mutex<Option<Cached>>,
}

struct Cached {
    credential: Arc<AwsCredential>,
    /// When to call the refresh function again (`None`: never).
    renew_at: Option<Instant>,
}

impl CachingCredentials {
    /// A provider calling `refresh` when needed, renewing
    /// [`DEFAULT_MARGIN`] before expiry.
    pub fn new(refresh: Refresh) -> Self {
        Self::with_margin(refresh, DEFAULT_MARGIN)
    }

    /// A provider renewing `margin` before expiry (at most half the
    /// credentials' lifetime).
    pub fn with_margin(refresh: Refresh, margin: Duration) -> Self {
        Self {
            refresh,
            margin,
            cached: tokio::sync::Mutex::new(None),
        }
    }
}

/// When credentials fetched at `now`, valid for `ttl`, are renewed.
fn renew_at(now: Instant, ttl: Option<Duration>, margin: Duration) -> Option<Instant> {
    ttl.map(|ttl| now + ttl.saturating_sub(margin.min(ttl / 2)))
}

fn unauthenticated(message: String) -> object_store::Error {
    object_store::Error::Unauthenticated {
        path: String::new(),
        source: message.into(),
    }
}

// Never shows the credentials.
impl fmt::Debug for CachingCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingCredentials")
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl CredentialProvider for CachingCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            if c.renew_at.is_none_or(|at| Instant::now() < at) {
                return Ok(c.credential.clone());
            }
        }
        let refresh = self.refresh.clone();
        let fetched = tokio::task::spawn_blocking(move || refresh())
            .await
            .map_err(|e| unauthenticated(format!("the credential refresh failed: {e}")))?
            .map_err(unauthenticated)?;
        let credential = Arc::new(fetched.credential);
        *cached = Some(Cached {
            credential: credential.clone(),
            renew_at: renew_at(Instant::now(), fetched.ttl, self.margin),
        });
        log::debug!(
            "S3 credentials refreshed (valid for {})",
            fetched
                .ttl
                .map_or("good".to_string(), |t| format!("{:.0} s", t.as_secs_f64()))
        );
        Ok(credential)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A provider whose refresh counts its calls and returns key ids
    /// `k1`, `k2`, ... valid for `ttl`.
    fn counting(ttl: Option<Duration>, margin: Duration) -> (CachingCredentials, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let refresh: Refresh = Arc::new(move || {
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Fetched {
                credential: AwsCredential {
                    key_id: format!("k{n}"),
                    secret_key: "SECRET-42".into(),
                    token: None,
                },
                ttl,
            })
        });
        (CachingCredentials::with_margin(refresh, margin), calls)
    }

    #[tokio::test]
    async fn reuses_credentials_until_near_expiry() {
        let (p, calls) = counting(Some(Duration::from_secs(2)), Duration::from_secs(60));
        assert_eq!(p.get_credential().await.unwrap().key_id, "k1");
        // Renewed at half the lifetime (the margin is longer than it).
        assert_eq!(p.get_credential().await.unwrap().key_id, "k1");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(p.get_credential().await.unwrap().key_id, "k2");
        assert_eq!(p.get_credential().await.unwrap().key_id, "k2");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn no_refresh_well_before_expiry_or_without_one() {
        let (p, calls) = counting(Some(Duration::from_secs(3600)), Duration::from_secs(300));
        for _ in 0..5 {
            assert_eq!(p.get_credential().await.unwrap().key_id, "k1");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let (p, calls) = counting(None, Duration::from_secs(300));
        for _ in 0..5 {
            assert_eq!(p.get_credential().await.unwrap().key_id, "k1");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Credentials already expired are fetched again on every use.
        let (p, calls) = counting(Some(Duration::ZERO), Duration::from_secs(300));
        p.get_credential().await.unwrap();
        assert_eq!(p.get_credential().await.unwrap().key_id, "k2");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn renewal_time_keeps_the_margin() {
        let now = Instant::now();
        let m = Duration::from_secs(300);
        assert_eq!(renew_at(now, None, m), None);
        assert_eq!(
            renew_at(now, Some(Duration::from_secs(3600)), m),
            Some(now + Duration::from_secs(3300))
        );
        assert_eq!(
            renew_at(now, Some(Duration::from_secs(10)), m),
            Some(now + Duration::from_secs(5))
        );
    }

    #[tokio::test]
    async fn failures_are_unauthenticated_and_not_cached() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let refresh: Refresh = Arc::new(move || match seen.fetch_add(1, Ordering::SeqCst) {
            0 => Err("the SSO session has expired; run aws sso login".into()),
            1 => panic!("a bug in the refresh"),
            _ => Ok(Fetched {
                credential: AwsCredential {
                    key_id: "ok".into(),
                    secret_key: "SECRET-42".into(),
                    token: Some("TOKEN-42".into()),
                },
                ttl: None,
            }),
        });
        let p = CachingCredentials::new(refresh);
        match p.get_credential().await {
            Err(e @ object_store::Error::Unauthenticated { .. }) => {
                assert!(e.to_string().contains("aws sso login"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        // A panic in the refresh is an error too, not a panic here.
        assert!(matches!(
            p.get_credential().await,
            Err(object_store::Error::Unauthenticated { .. })
        ));
        assert_eq!(p.get_credential().await.unwrap().key_id, "ok");
        let shown = format!("{p:?}");
        assert!(
            !shown.contains("SECRET-42") && !shown.contains("TOKEN-42"),
            "{shown}"
        );
        // And pds maps it to a denied request (PermissionDenied in Python).
        assert!(crate::store::failure::is_denied(&unauthenticated(
            "x".into()
        )));
    }
}
