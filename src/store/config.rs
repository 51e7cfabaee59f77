//! Building an object_store from a URL plus options.
//!
//! Supported URLs: `memory://`, `file:///abs/path`, `s3://bucket[/prefix]`,
//! `gs://bucket[/prefix]` (see [`super::gcs`]) and `az://container[/prefix]`
//! (also `abfs://`, `abfss://`; see [`super::azure`]).
//! S3 options: `endpoint`, `region`, `access_key_id`, `secret_access_key`,
//! `session_token`, `allow_http`, `max_retries`, `retry_timeout_secs`, and any
//! of object_store's own `aws_*` keys and client keys (`timeout`, ...).
//! Transient failures are retried with exponential backoff (object_store's
//! `RetryConfig`: 10 retries within 3 minutes unless set).
//! Environment variables (`AWS_*`) are read first; explicit options win.
//! A credential provider given to [`build`] (the Python binding's, for an
//! AWS profile resolved by botocore) replaces every other S3 credential.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredentialProvider};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::RetryConfig;

use super::built::{url_prefix, Built, Scheme};
use crate::error::{Error, Result};
use crate::store::keys;

/// Short option names accepted for S3, mapped to object_store's config keys.
fn s3_alias(key: &str) -> &str {
    match key {
        "endpoint" | "endpoint_url" => "aws_endpoint",
        "region" => "aws_region",
        "access_key_id" => "aws_access_key_id",
        "secret_access_key" => "aws_secret_access_key",
        "session_token" => "aws_session_token",
        other => other,
    }
}

/// Keys whose values are secrets: never printed, never logged. Besides
/// secrets, tokens and passwords: Azure's account key, SAS and connection
/// string, and GCS's service-account key JSON (any `*key` but an `*_id`).
pub fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "secret",
        "token",
        "password",
        "sas",
        "connection_string",
        "credential",
    ]
    .iter()
    .any(|w| k.contains(w))
        || (k.contains("key") && !k.ends_with("_id"))
}

/// Keys whose values are credentials: the secrets ([`is_secret`]) and S3's
/// access key id, the other half of a key pair. A store opened with
/// `pickle_secrets=False` leaves them all out of its pickle, so that the
/// unpickled copy takes its credentials from its own environment as a whole
/// (a pickled key id next to the environment's secret would sign with a
/// pair that does not match).
///
/// Also left out: the options that pick *which* identity signs (Azure's
/// client and tenant ids, a federated token file; GCS's service-account
/// file path), so that they never pair with another environment's secret.
/// Not credentials, though their names contain "key": S3's server-side
/// encryption settings (`*sse_bucket_key_enabled`, `*sse_kms_key_id`),
/// which must stay as the driver's so every writer encrypts alike.
pub fn is_credential(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    if k.contains("sse_bucket_key") || k.contains("sse_kms_key") {
        return false;
    }
    let bare = ["azure_storage_", "azure_", "google_"]
        .iter()
        .find_map(|p| k.strip_prefix(p))
        .unwrap_or(&k);
    let selector = [
        "client_id",
        "tenant_id",
        "authority_id",
        "federated_token_file",
        "service_account",
        "service_account_path",
        "application_credentials",
    ]
    .contains(&bare);
    selector
        || is_secret(key)
        || AmazonS3ConfigKey::from_str(s3_alias(&k))
            .is_ok_and(|k| k == AmazonS3ConfigKey::AccessKeyId)
}

/// Parse `url` and build the store it names.
pub fn build(url: &str, options: &BTreeMap<String, String>) -> Result<Built> {
    build_with_credentials(url, options, None)
}

/// [`build`], with `credentials` (for `s3://` only) signing every request
/// instead of the options' or the environment's keys; see
/// [`super::aws_credentials`].
pub fn build_with_credentials(
    url: &str,
    options: &BTreeMap<String, String>,
    credentials: Option<AwsCredentialProvider>,
) -> Result<Built> {
    let parsed = url::Url::parse(url)
        .map_err(|e| Error::InvalidArgument(format!("invalid store URL {url:?}: {e}")))?;
    refuse_url_extras(&parsed)?;
    refuse_user_info_in_options(options)?;
    if credentials.is_some() && !matches!(parsed.scheme(), "s3" | "s3a") {
        return Err(Error::InvalidArgument(format!(
            "AWS credentials were given for a {}:// store; they are for s3:// only",
            parsed.scheme()
        )));
    }
    match parsed.scheme() {
        "memory" => {
            reject_options("memory://", options)?;
            let prefix = keys::segments(&format!("{}{}", host(&parsed), parsed.path()))?;
            Ok(Built {
                scheme: Scheme::Memory,
                store: Arc::new(InMemory::new()),
                prefix,
                local: None,
            })
        }
        "file" => {
            reject_options("file://", options)?;
            if parsed
                .host_str()
                .is_some_and(|h| !h.is_empty() && h != "localhost")
            {
                return Err(Error::InvalidArgument(format!(
                    "file URLs must be absolute (file:///abs/path), got {url:?}"
                )));
            }
            let root = parsed.to_file_path().map_err(|_| {
                Error::InvalidArgument(format!("file URL {url:?} is not an absolute path"))
            })?;
            std::fs::create_dir_all(&root)?;
            let fs =
                Arc::new(LocalFileSystem::new_with_prefix(&root)?.with_automatic_cleanup(true));
            Ok(Built {
                scheme: Scheme::File,
                store: fs.clone(),
                prefix: Vec::new(),
                local: Some(fs),
            })
        }
        "s3" | "s3a" => {
            let bucket = host(&parsed);
            if bucket.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "S3 URLs need a bucket (s3://bucket/prefix), got {url:?}"
                )));
            }
            let mut builder = s3_from_env(options).with_bucket_name(bucket);
            let mut retry = RetryConfig::default();
            for (key, value) in options {
                if super::cloud::retry_option(key, value, &mut retry)? {
                    continue;
                }
                // AmazonS3ConfigKey also parses the client keys (allow_http, timeout, ...).
                let k = AmazonS3ConfigKey::from_str(s3_alias(key)).map_err(|_| {
                    super::cloud::unknown_option(
                        "S3",
                        key,
                        "endpoint, region, access_key_id, secret_access_key, session_token, \
                         allow_http, max_retries, retry_timeout_secs or an aws_* key",
                    )
                })?;
                builder = builder.with_config(k, value);
            }
            if let Some(credentials) = credentials {
                builder = builder.with_credentials(credentials);
            }
            let store = builder
                .with_retry(retry)
                .build()
                .map_err(|e| super::cloud::cannot_configure("S3", e))?;
            Ok(Built {
                scheme: Scheme::S3,
                store: Arc::new(store),
                prefix: url_prefix(&parsed)?,
                local: None,
            })
        }
        "gs" | "gcs" => super::gcs::build(&parsed, options),
        "az" | "abfs" | "abfss" | "azure" | "adl" => super::azure::build(&parsed, options),
        other => Err(Error::InvalidArgument(format!(
            "unsupported store URL scheme {other:?}; use memory://, file:///abs/path, \
             s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"
        ))),
    }
}

/// A store URL names a place: a query string, a fragment or a password
/// would be ignored (or, as a SAS or a key, shown wherever the URL is), and
/// so would a user name, except the container of `abfs[s]://container@account...`.
/// Refused without echoing the URL.
fn refuse_url_extras(url: &url::Url) -> Result<()> {
    let container_as_user = matches!(url.scheme(), "abfs" | "abfss");
    let extra = if url.query().is_some() {
        Some("query string")
    } else if url.fragment().is_some() {
        Some("fragment")
    } else if url.password().is_some() || (!url.username().is_empty() && !container_as_user) {
        Some("user info")
    } else {
        None
    };
    match extra {
        Some(what) => Err(Error::InvalidArgument(format!(
            "a {}:// store URL takes no {what} (give credentials and settings as options)",
            url.scheme()
        ))),
        None => Ok(()),
    }
}

/// An option whose value is a URL with user info (an endpoint given as
/// `http://user:password@host`) is refused, on every store: the password
/// would be shown wherever the endpoint is (in every failed request's
/// error). Refused without echoing the value.
fn refuse_user_info_in_options(options: &BTreeMap<String, String>) -> Result<()> {
    match options
        .iter()
        .find(|(_, v)| super::failure::has_user_info(v))
    {
        Some((key, _)) => Err(Error::InvalidArgument(format!(
            "the {key} option takes a URL without user info (user:password@); give \
             credentials as their own options"
        ))),
        None => Ok(()),
    }
}

/// An S3 builder with the `AWS_*` environment variables applied, as
/// `AmazonS3Builder::from_env` does, except that a key pair given in
/// `options` (access key id and secret both) is not mixed with the
/// environment's credentials: its `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` are left out (a session
/// token given as an option still applies). A stale session token in the
/// environment would otherwise be sent with the given keys, and refused.
fn s3_from_env(options: &BTreeMap<String, String>) -> AmazonS3Builder {
    let given = |wanted: AmazonS3ConfigKey| {
        options
            .keys()
            .any(|k| AmazonS3ConfigKey::from_str(s3_alias(k)).ok() == Some(wanted))
    };
    let own_pair =
        given(AmazonS3ConfigKey::AccessKeyId) && given(AmazonS3ConfigKey::SecretAccessKey);
    let mut builder = AmazonS3Builder::new();
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        if !name.starts_with("AWS_") {
            continue;
        }
        let Ok(key) = AmazonS3ConfigKey::from_str(&name.to_ascii_lowercase()) else {
            continue;
        };
        let credential_part = matches!(
            key,
            AmazonS3ConfigKey::AccessKeyId
                | AmazonS3ConfigKey::SecretAccessKey
                | AmazonS3ConfigKey::Token
        );
        if !(own_pair && credential_part) {
            builder = builder.with_config(key, value);
        }
    }
    builder
}

fn host(url: &url::Url) -> String {
    url.host_str().unwrap_or_default().to_string()
}

fn reject_options(kind: &str, options: &BTreeMap<String, String>) -> Result<()> {
    match options.keys().next() {
        None => Ok(()),
        Some(k) => Err(Error::InvalidArgument(format!(
            "{kind} stores take no options, got {k:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_each_scheme() {
        let none = BTreeMap::new();
        assert_eq!(build("memory://", &none).unwrap().scheme, Scheme::Memory);
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        assert_eq!(build(&url, &none).unwrap().scheme, Scheme::File);
        let mut opts = BTreeMap::new();
        opts.insert("endpoint".into(), "http://127.0.0.1:1".into());
        opts.insert("region".into(), "us-east-1".into());
        opts.insert("allow_http".into(), "true".into());
        let b = build("s3://bucket/a/b", &opts).unwrap();
        assert_eq!(b.prefix, vec!["a", "b"]);
        let b = build("s3://bucket/my%20lake/x%5B1%5D", &opts).unwrap();
        assert_eq!(b.prefix, vec!["my lake", "x[1]"]);
        // The URL parser resolves dot segments (encoded or not) within the bucket.
        let b = build("s3://bucket/a/%2E%2E/b", &opts).unwrap();
        assert_eq!(b.prefix, vec!["b"]);
    }

    #[test]
    fn rejects_bad_urls_and_options() {
        let none = BTreeMap::new();
        assert!(build("ftp://x", &none).is_err());
        assert!(build("s3://", &none).is_err());
        let mut opts = BTreeMap::new();
        opts.insert("bogus".into(), "1".into());
        assert!(build("s3://b", &opts).is_err());
        assert!(build("memory://", &opts).is_err());
        // Query strings, fragments and user info: refused, never echoed.
        for url in [
            "gs://b/x?token=HIDDEN-42",
            "az://c/x?sv=1&sig=HIDDEN-42",
            "s3://AKIA:HIDDEN-42@b/x",
            "s3://b/x#HIDDEN-42",
            "file:///tmp/x?HIDDEN-42",
            "abfss://c:HIDDEN-42@acct.dfs.core.windows.net/x",
        ] {
            let m = match build(url, &none) {
                Err(Error::InvalidArgument(m)) => m,
                Err(other) => panic!("{url}: {other}"),
                Ok(_) => panic!("{url}: accepted"),
            };
            assert!(m.contains("takes no") && !m.contains("HIDDEN-42"), "{m}");
        }
    }

    #[test]
    fn aws_credentials_are_for_s3_only() {
        let refresh: crate::store::aws_credentials::Refresh =
            Arc::new(|| Err("never called".to_string()));
        let provider: AwsCredentialProvider = Arc::new(
            crate::store::aws_credentials::CachingCredentials::new(refresh),
        );
        let mut opts = BTreeMap::new();
        opts.insert("endpoint".into(), "http://127.0.0.1:1".into());
        assert!(build_with_credentials("s3://b/x", &opts, Some(provider.clone())).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        for url in ["memory://", url.as_str()] {
            match build_with_credentials(url, &BTreeMap::new(), Some(provider.clone())) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("s3:// only"), "{m}"),
                Err(other) => panic!("{url}: {other}"),
                Ok(_) => panic!("{url}: accepted"),
            }
        }
    }

    #[test]
    fn endpoints_with_user_info_are_refused_unechoed() {
        for (url, key) in [
            ("s3://b", "endpoint"),
            ("s3://b", "aws_endpoint_url_sts"),
            ("gs://b", "endpoint"),
            ("az://c", "endpoint"),
        ] {
            let mut opts = BTreeMap::new();
            opts.insert("account".to_string(), "a".to_string());
            opts.retain(|_, _| url.starts_with("az"));
            opts.insert(key.into(), "http://user:HIDDEN-42@127.0.0.1:1".into());
            let m = match build(url, &opts) {
                Err(Error::InvalidArgument(m)) => m,
                Err(other) => panic!("{url} {key}: {other}"),
                Ok(_) => panic!("{url} {key}: accepted"),
            };
            assert!(m.contains("user info") && m.contains(key), "{m}");
            assert!(!m.contains("HIDDEN-42"), "{m}");
        }
    }

    #[test]
    fn credentials_are_the_secrets_and_the_s3_key_id() {
        for k in [
            "access_key_id",
            "aws_access_key_id",
            "AWS_ACCESS_KEY_ID",
            "secret_access_key",
            "aws_secret_access_key",
            "session_token",
            "service_account_key",
            "account_key",
            "sas",
            "connection_string",
            "client_secret",
            "client_id",
            "azure_storage_client_id",
            "tenant_id",
            "azure_federated_token_file",
            "service_account",
            "google_service_account",
            "google_application_credentials",
        ] {
            assert!(is_credential(k), "{k}");
        }
        for k in [
            "endpoint",
            "region",
            "allow_http",
            "profile",
            "account",
            "aws_sse_bucket_key_enabled",
            "sse_bucket_key_enabled",
            "aws_sse_kms_key_id",
            "metadata_endpoint",
            "skip_signature",
        ] {
            assert!(!is_credential(k), "{k}");
        }
    }

    #[test]
    fn secrets_are_told_apart_from_names() {
        for k in [
            "secret_access_key",
            "session_token",
            "aws_secret_access_key",
            "service_account_key",
            "google_service_account_key",
            "key",
            "account_key",
            "azure_storage_account_key",
            "access_key",
            "master_key",
            "sas",
            "sas_token",
            "azure_storage_sas_key",
            "connection_string",
            "token",
            "client_secret",
            "password",
            "application_credentials",
        ] {
            assert!(is_secret(k), "{k}");
        }
        for k in [
            "access_key_id",
            "aws_access_key_id",
            "account",
            "client_id",
            "endpoint",
            "region",
            "service_account",
            "anonymous",
            "allow_http",
        ] {
            assert!(!is_secret(k), "{k}");
        }
    }
}
