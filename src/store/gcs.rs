//! Google Cloud Storage stores: `gs://bucket[/prefix]`.
//!
//! Options (object_store's `google_*` keys work too, and `GOOGLE_*`
//! environment variables, and `SERVICE_ACCOUNT`, are read first; options
//! win, and options that give a credential replace the environment's
//! credentials rather than join them):
//! - `service_account_key`: the key JSON itself; `service_account` (or
//!   `application_credentials`): the path of a key file;
//! - `token`: a ready OAuth bearer token (no refresh);
//! - `anonymous=true`: unsigned requests (public buckets, emulators): no
//!   credential is looked up, and writes carry an empty bearer token;
//! - `endpoint` (`base_url`): another endpoint, e.g. an emulator. object_store
//!   reads no `STORAGE_EMULATOR_HOST`; an emulator also needs a key whose
//!   JSON says `"disable_oauth": true`, or `anonymous=true`;
//! - `max_retries`, `retry_timeout_secs`, and the client keys
//!   (`allow_http`, `timeout`, ...).
//!
//! Conditional writes map to generation preconditions: a create-only PUT
//! is `ifGenerationMatch=0`, a compare-and-swap PUT matches the generation
//! read (object_store's `UpdateVersion.version`).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{CopyMode, RetryConfig, StaticCredentialProvider};

use super::built::{Built, Scheme};
use super::cloud::{built, cannot_configure, env_config, flag, retry_option, unknown_option};
use crate::error::{Error, Result};

const KNOWN: &str = "service_account_key, service_account, token, anonymous, endpoint, \
                     max_retries, retry_timeout_secs, allow_http, timeout or a google_* key";

/// Short option names, mapped to object_store's config keys.
fn alias(key: &str) -> &str {
    match key {
        "endpoint" | "endpoint_url" => "google_base_url",
        "anonymous" => "google_skip_signature",
        other => other,
    }
}

/// The copy mode to ask object_store for, so that a copy (or a rename, which
/// copies) on a store of `scheme` overwrites exactly when `overwrite` says.
///
/// object_store 0.13's GCS client sends the two modes the wrong way round:
/// `CopyMode::Overwrite` goes out with `x-goog-if-generation-match: 0` and
/// `CopyMode::Create` with no precondition (apache/arrow-rs-object-store#712,
/// fixed after 0.13.2, the last 0.13 release; Cargo.toml pins `=0.13.2`
/// so that an upgrade comes with this function's removal). Asked as is, a create-only
/// copy or rename would silently replace the target. Every other store gets
/// the mode it asks for. `tests/stores/test_backend.py::test_move_and_copy` runs on
/// the GCS emulator and fails if either mode ever copies the wrong way.
pub fn copy_mode(scheme: Scheme, overwrite: bool) -> CopyMode {
    let asked_to_overwrite = if scheme == Scheme::Gcs {
        !overwrite
    } else {
        overwrite
    };
    if asked_to_overwrite {
        CopyMode::Overwrite
    } else {
        CopyMode::Create
    }
}

/// Whether `key` is part of a credential (a key file's path, a key's
/// JSON, application default credentials, or unsigned requests).
fn is_credential(key: &GoogleConfigKey) -> bool {
    matches!(
        key,
        GoogleConfigKey::ServiceAccount
            | GoogleConfigKey::ServiceAccountKey
            | GoogleConfigKey::ApplicationCredentials
            | GoogleConfigKey::SkipSignature
    )
}

/// A builder with the environment's settings `env` (and its
/// `SERVICE_ACCOUNT` path, `account`) applied, as
/// `GoogleCloudStorageBuilder::from_env` does, except that when `options`
/// give a credential (or a `token`), the environment's credentials are
/// left out: a key file named by the environment beside a key given as an
/// option would otherwise be refused, or win.
fn from_environment(
    env: Vec<(GoogleConfigKey, String)>,
    account: Option<String>,
    options: &BTreeMap<String, String>,
) -> GoogleCloudStorageBuilder {
    let given = options.iter().any(|(k, v)| {
        let name = alias(k);
        match GoogleConfigKey::from_str(name) {
            // `anonymous=false` gives no credential.
            Ok(GoogleConfigKey::SkipSignature) => flag(k, v).unwrap_or(false),
            Ok(key) => is_credential(&key),
            Err(_) => name == "token",
        }
    });
    let mut builder = GoogleCloudStorageBuilder::new();
    if let (Some(path), false) = (account, given) {
        builder = builder.with_service_account_path(path);
    }
    for (key, value) in env {
        if !(given && is_credential(&key)) {
            builder = builder.with_config(key, value);
        }
    }
    builder
}

/// Build the GCS store `url` names (a `gs://` URL, already parsed).
pub fn build(url: &url::Url, options: &BTreeMap<String, String>) -> Result<Built> {
    let bucket = url.host_str().unwrap_or_default();
    if bucket.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "GCS URLs need a bucket (gs://bucket/prefix), got {:?}",
            url.as_str()
        )));
    }
    let account = std::env::var("SERVICE_ACCOUNT").ok();
    let mut builder =
        from_environment(env_config("GOOGLE_"), account, options).with_bucket_name(bucket);
    let mut retry = RetryConfig::default();
    let (mut token, mut anonymous) = (None, false);
    for (key, value) in options {
        if retry_option(key, value, &mut retry)? {
            continue;
        }
        let name = alias(key);
        if name == "token" {
            token = Some(value.clone());
            continue;
        }
        let parsed =
            GoogleConfigKey::from_str(name).map_err(|_| unknown_option("GCS", key, KNOWN))?;
        if matches!(parsed, GoogleConfigKey::Bucket) {
            return Err(Error::InvalidArgument(
                "the bucket comes from the URL (gs://bucket/prefix), not an option".into(),
            ));
        }
        let value = match parsed {
            GoogleConfigKey::SkipSignature => {
                anonymous = flag(key, value)?;
                anonymous.to_string()
            }
            _ => value.clone(),
        };
        builder = builder.with_config(parsed, value);
    }
    // object_store skips signing reads only: its writes and deletes still ask
    // the credential provider, which without a key would fetch the machine's
    // own token (from the metadata server) and send it to `endpoint`. An
    // anonymous store sends an empty bearer instead.
    if let Some(bearer) = token.or_else(|| anonymous.then(String::new)) {
        let credential = GcpCredential { bearer };
        builder = builder.with_credentials(Arc::new(StaticCredentialProvider::new(credential)));
    }
    let store = builder
        .with_retry(retry)
        .build()
        .map_err(|e| cannot_configure("GCS", e))?;
    built(Scheme::Gcs, Arc::new(store), url)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{open, refused};
    use super::*;

    #[test]
    fn a_credential_given_as_options_replaces_the_environments() {
        let env = || {
            vec![
                (GoogleConfigKey::ServiceAccount, "/env/key.json".to_string()),
                (GoogleConfigKey::BaseUrl, "http://env".to_string()),
            ]
        };
        let one = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        for options in [
            one("service_account_key", "{}"),
            one("token", "t"),
            one("anonymous", "true"),
        ] {
            let b = from_environment(env(), Some("/env/other.json".into()), &options);
            assert_eq!(b.get_config_value(&GoogleConfigKey::ServiceAccount), None);
            // Not a credential: the environment's endpoint still applies.
            assert_eq!(
                b.get_config_value(&GoogleConfigKey::BaseUrl).as_deref(),
                Some("http://env")
            );
        }
        let b = from_environment(env(), None, &one("anonymous", "false"));
        assert_eq!(
            b.get_config_value(&GoogleConfigKey::ServiceAccount)
                .as_deref(),
            Some("/env/key.json")
        );
        let b = from_environment(env(), None, &BTreeMap::new());
        assert_eq!(
            b.get_config_value(&GoogleConfigKey::ServiceAccount)
                .as_deref(),
            Some("/env/key.json")
        );
        let b = from_environment(vec![], Some("/env/other.json".into()), &BTreeMap::new());
        assert_eq!(
            b.get_config_value(&GoogleConfigKey::ServiceAccount)
                .as_deref(),
            Some("/env/other.json")
        );
    }

    #[test]
    fn builds_from_a_url_and_options_without_io() {
        let emulator = [
            ("endpoint", "http://127.0.0.1:1"),
            ("anonymous", "true"),
            ("allow_http", "true"),
            ("max_retries", "1"),
        ];
        let b = open("gs://bucket/lake/my%20t", &emulator).unwrap();
        assert_eq!(b.scheme, Scheme::Gcs);
        assert_eq!(b.prefix, vec!["lake", "my t"]);
        assert!(b.scheme.is_remote());
        assert_eq!(open("gcs://bucket", &emulator).unwrap().scheme, Scheme::Gcs);
        // A ready bearer token, and object_store's own key names.
        let b = open(
            "gs://bucket",
            &[
                ("token", "ya29.x"),
                ("google_base_url", "http://127.0.0.1:1"),
            ],
        );
        assert!(b.is_ok());
    }

    #[test]
    fn refuses_bad_urls_and_options_naming_no_secret() {
        let e = refused;
        assert!(e("gs://", &[]).contains("need a bucket"));
        assert!(e("gs://b", &[("bogus", "1")]).contains("unknown GCS option \"bogus\""));
        assert!(e("gs://b", &[("bucket", "other")]).contains("comes from the URL"));
        assert!(e("gs://b", &[("anonymous", "maybe")]).contains("true or false"));
        // A key that is not a service-account key: refused, without its text.
        let m = e(
            "gs://b",
            &[("service_account_key", "{\"private_key\": \"HIDDEN-42\"}")],
        );
        assert!(m.contains("cannot configure GCS store"), "{m}");
        assert!(!m.contains("HIDDEN-42"), "{m}");
        // Keys whose values serde would quote back: a key JSON passed as a
        // JSON string, a field of the wrong type.
        let key = r#"{"private_key": "HIDDEN-42", "private_key_id": "i", "client_email": "e"}"#;
        for bad in [
            serde_json::to_string(key).unwrap(),
            key.replace("\"i\"", "7142"),
            key.replace("}", r#", "disable_oauth": "HIDDEN-42"}"#),
        ] {
            let m = e("gs://b", &[("service_account_key", bad.as_str())]);
            assert!(m.contains("cannot configure GCS store"), "{m}");
            assert!(!m.contains("HIDDEN-42") && !m.contains("7142"), "{m}");
        }
    }
}
