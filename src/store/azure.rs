//! Azure Blob Storage stores: `az://container[/prefix]`, `abfs://` and
//! `abfss://` (also `abfss://container@account.dfs.core.windows.net/prefix`),
//! `azure://` and `adl://`.
//!
//! Options (object_store's `azure_*` keys work too, and `AZURE_*`
//! environment variables are read first; options win, and options that
//! give a whole credential replace the environment's credentials rather
//! than join them, while a part of one, such as `client_id` alone, joins
//! the environment's):
//! - `account` (`account_name`), with `account_key` (`access_key`), `sas`
//!   (`sas_token`), `token` (a bearer token), or the service principal keys
//!   (`client_id`, `client_secret`, `tenant_id`). There is no bare `key`:
//!   pds's calls take a `key` argument (the dataset's or table's), and a
//!   storage option of that name could not be passed beside it;
//! - `connection_string`: Azure's `AccountName=...;AccountKey=...` form
//!   (also `SharedAccessSignature`, `BlobEndpoint`, `UseDevelopmentStorage`);
//! - `endpoint`: another endpoint, e.g. an Azurite emulator; `use_emulator`;
//! - `anonymous=true`: unsigned requests;
//! - `max_retries`, `retry_timeout_secs`, and the client keys.
//!
//! Conditional writes map to ETag preconditions: a create-only PUT is
//! `If-None-Match: *`, a compare-and-swap PUT `If-Match` on the ETag read.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::RetryConfig;

use super::built::{Built, Scheme};
use super::cloud::{built, cannot_configure, env_config, flag, retry_option, unknown_option};
use crate::error::{Error, Result};

const KNOWN: &str = "account, account_key, sas, token, connection_string, endpoint, use_emulator, \
                     anonymous, client_id, client_secret, tenant_id, max_retries, \
                     retry_timeout_secs, allow_http, timeout or an azure_* key";

/// Short option names, mapped to object_store's config keys.
fn alias(key: &str) -> &str {
    match key {
        "account" => "azure_storage_account_name",
        "sas" => "azure_storage_sas_token",
        "anonymous" => "azure_skip_signature",
        other => other,
    }
}

/// The object_store settings a connection string stands for, in order.
/// Parts other stores use (`QueueEndpoint`, ...) are ignored.
pub fn connection_string(text: &str) -> Result<Vec<(AzureConfigKey, String)>> {
    let bad = |why: &str| {
        // Never echo the string: it holds the account key.
        Error::InvalidArgument(format!(
            "connection_string is not an Azure connection string: {why}"
        ))
    };
    let mut out = Vec::new();
    let mut protocol_http = false;
    let mut account = None;
    let mut suffix = None;
    let mut endpoint = None;
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| bad("a part has no '='"))?;
        let value = value.trim().to_string();
        match name.trim() {
            "AccountName" => {
                account = Some(value.clone());
                out.push((AzureConfigKey::AccountName, value));
            }
            "AccountKey" => out.push((AzureConfigKey::AccessKey, value)),
            "SharedAccessSignature" => out.push((AzureConfigKey::SasKey, value)),
            "BlobEndpoint" if super::failure::has_user_info(&value) => {
                return Err(bad("BlobEndpoint holds user info (user:password@)"))
            }
            "BlobEndpoint" => endpoint = Some(value),
            "EndpointSuffix" => suffix = Some(value),
            "DefaultEndpointsProtocol" => protocol_http = value.eq_ignore_ascii_case("http"),
            "UseDevelopmentStorage" => {
                if flag("UseDevelopmentStorage", &value)? {
                    out.push((AzureConfigKey::UseEmulator, "true".into()));
                }
            }
            "QueueEndpoint" | "TableEndpoint" | "FileEndpoint" | "DfsEndpoint" => {}
            // Never echo the name either: a bare key splits at its first '='.
            _ => {
                return Err(bad(
                    "a part is none of AccountName, AccountKey, SharedAccessSignature, \
                     BlobEndpoint, EndpointSuffix, DefaultEndpointsProtocol, \
                     UseDevelopmentStorage",
                ))
            }
        }
    }
    let scheme = if protocol_http { "http" } else { "https" };
    let endpoint = match (endpoint, suffix, &account) {
        (Some(e), _, _) => Some(e),
        (None, Some(s), Some(a)) if s != "core.windows.net" => {
            Some(format!("{scheme}://{a}.blob.{s}"))
        }
        (None, Some(_), None) => return Err(bad("EndpointSuffix needs AccountName")),
        _ => None,
    };
    if let Some(e) = endpoint {
        if e.starts_with("http://") {
            out.push((
                AzureConfigKey::Client(object_store::ClientConfigKey::AllowHttp),
                "true".into(),
            ));
        }
        out.push((AzureConfigKey::Endpoint, e));
    }
    if out.is_empty() {
        return Err(bad("it names no account, key, signature or endpoint"));
    }
    Ok(out)
}

/// Whether `key` is part of a credential: object_store picks one kind
/// (bearer token, account key, service principal, SAS, managed identity,
/// CLI) by a fixed order, so an environment's credential would win over,
/// or be sent with, the one given as options.
fn is_credential(key: &AzureConfigKey) -> bool {
    matches!(
        key,
        AzureConfigKey::AccessKey
            | AzureConfigKey::SasKey
            | AzureConfigKey::Token
            | AzureConfigKey::ClientId
            | AzureConfigKey::ClientSecret
            | AzureConfigKey::AuthorityId
            | AzureConfigKey::FederatedTokenFile
            | AzureConfigKey::UseAzureCli
            | AzureConfigKey::MsiEndpoint
            | AzureConfigKey::ObjectId
            | AzureConfigKey::MsiResourceId
            | AzureConfigKey::SkipSignature
    )
}

/// Whether the credential parts `given` make a whole credential of a kind
/// object_store can use on their own: a key, a SAS, a bearer token, the
/// CLI, anonymous requests, a managed identity named by its endpoint,
/// object id or resource id, or a service principal with its secret
/// (`client_id`, `client_secret`, `tenant_id`) or its federated token file
/// (`client_id`, `tenant_id`, `federated_token_file`). A part alone
/// (`client_id`, `tenant_id`, ...) is not: it may complete the
/// environment's.
fn is_whole_credential(given: &[AzureConfigKey]) -> bool {
    use AzureConfigKey as K;
    let has = |k: K| given.contains(&k);
    let alone = [
        K::AccessKey,
        K::SasKey,
        K::Token,
        K::UseAzureCli,
        K::SkipSignature,
        K::MsiEndpoint,
        K::ObjectId,
        K::MsiResourceId,
    ];
    alone.into_iter().any(has)
        || (has(K::ClientId) && has(K::AuthorityId) && has(K::ClientSecret))
        || (has(K::ClientId) && has(K::AuthorityId) && has(K::FederatedTokenFile))
}

/// A builder with the environment's settings `env` (and its managed
/// identity endpoint `msi`) applied, as `MicrosoftAzureBuilder::from_env`
/// does, except that when `options` (or their connection string) give a
/// whole credential ([`is_whole_credential`]), the environment's
/// credentials are left out. Parts of one (`client_id` alone) join the
/// environment's, and win over the same parts there.
fn from_environment(
    env: Vec<(AzureConfigKey, String)>,
    msi: Option<String>,
    options: &BTreeMap<String, String>,
) -> Result<MicrosoftAzureBuilder> {
    let mut parts = Vec::new();
    for (key, value) in options {
        if key == "connection_string" {
            parts.extend(
                connection_string(value)?
                    .into_iter()
                    .map(|(k, _)| k)
                    .filter(is_credential),
            );
        } else if let Ok(k) = AzureConfigKey::from_str(alias(key)) {
            // A flag set to false (`use_azure_cli=false`) gives no credential.
            let flag_off = matches!(
                k,
                AzureConfigKey::UseAzureCli | AzureConfigKey::SkipSignature
            ) && !flag(key, value).unwrap_or(true);
            if is_credential(&k) && !flag_off {
                parts.push(k);
            }
        }
    }
    let given = is_whole_credential(&parts);
    let mut builder = MicrosoftAzureBuilder::new();
    for (key, value) in env {
        if !(given && is_credential(&key)) {
            builder = builder.with_config(key, value);
        }
    }
    if let (Some(endpoint), false) = (msi, given) {
        builder = builder.with_msi_endpoint(endpoint);
    }
    Ok(builder)
}

/// Build the Azure store `url` names (already parsed).
pub fn build(url: &url::Url, options: &BTreeMap<String, String>) -> Result<Built> {
    let container_given = !url.host_str().unwrap_or_default().is_empty();
    if !container_given {
        return Err(Error::InvalidArgument(format!(
            "Azure URLs need a container (az://container/prefix), got {:?}",
            url.as_str()
        )));
    }
    // object_store reads the container (and, in the account form, the
    // account) from the URL itself.
    let msi = std::env::var("MSI_ENDPOINT").ok();
    let mut builder = from_environment(env_config("AZURE_"), msi, options)?.with_url(url.as_str());
    // A connection string first: the options given one by one win over it.
    if let Some(text) = options.get("connection_string") {
        for (k, v) in connection_string(text)? {
            builder = builder.with_config(k, v);
        }
    }
    let mut retry = RetryConfig::default();
    for (key, value) in options {
        if key == "connection_string" || retry_option(key, value, &mut retry)? {
            continue;
        }
        let parsed = AzureConfigKey::from_str(alias(key))
            .map_err(|_| unknown_option("Azure", key, KNOWN))?;
        if matches!(parsed, AzureConfigKey::ContainerName) {
            return Err(Error::InvalidArgument(
                "the container comes from the URL (az://container/prefix), not an option".into(),
            ));
        }
        let value = match parsed {
            AzureConfigKey::SkipSignature | AzureConfigKey::UseEmulator => {
                flag(key, value)?.to_string()
            }
            _ => value.clone(),
        };
        builder = builder.with_config(parsed, value);
    }
    let store = builder
        .with_retry(retry)
        .build()
        .map_err(|e| cannot_configure("Azure", e))?;
    built(Scheme::Azure, Arc::new(store), url)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{open, refused};
    use super::*;

    /// Azurite's published development account (not a secret).
    const DEV_KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    #[test]
    fn a_credential_given_as_options_replaces_the_environments() {
        let env = || {
            vec![
                (AzureConfigKey::AccessKey, "env-key".to_string()),
                (AzureConfigKey::ClientId, "env-client".to_string()),
                (AzureConfigKey::AccountName, "envaccount".to_string()),
            ]
        };
        let options = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let b = from_environment(
            env(),
            Some("http://msi".into()),
            &options(&[("sas", "sv=1")]),
        )
        .unwrap();
        assert_eq!(b.get_config_value(&AzureConfigKey::AccessKey), None);
        assert_eq!(b.get_config_value(&AzureConfigKey::ClientId), None);
        assert_eq!(b.get_config_value(&AzureConfigKey::MsiEndpoint), None);
        // Not a credential: the environment's account still applies.
        assert_eq!(
            b.get_config_value(&AzureConfigKey::AccountName).as_deref(),
            Some("envaccount")
        );
        // A flag set to false gives none.
        let b = from_environment(env(), None, &options(&[("use_azure_cli", "false")])).unwrap();
        assert_eq!(
            b.get_config_value(&AzureConfigKey::AccessKey).as_deref(),
            Some("env-key")
        );
        // A connection string's key is a credential too.
        let text = format!("AccountName=a;AccountKey={DEV_KEY}");
        let b = from_environment(env(), None, &options(&[("connection_string", &text)])).unwrap();
        assert_eq!(b.get_config_value(&AzureConfigKey::AccessKey), None);
        // A part of a credential alone (a service principal's client or
        // tenant id) completes the environment's, and replaces nothing.
        for part in [
            &[("client_id", "mine")][..],
            &[("tenant_id", "t")],
            &[("client_id", "mine"), ("tenant_id", "t")],
            &[("client_secret", "s"), ("tenant_id", "t")],
        ] {
            let b = from_environment(env(), Some("http://msi".into()), &options(part)).unwrap();
            assert_eq!(
                b.get_config_value(&AzureConfigKey::AccessKey).as_deref(),
                Some("env-key"),
                "{part:?}"
            );
            assert_eq!(
                b.get_config_value(&AzureConfigKey::MsiEndpoint).as_deref(),
                Some("http://msi"),
                "{part:?}"
            );
        }
        // A whole service principal (secret or federated token) replaces them.
        for whole in [
            &[
                ("client_id", "c"),
                ("client_secret", "s"),
                ("tenant_id", "t"),
            ][..],
            &[
                ("client_id", "c"),
                ("federated_token_file", "/f"),
                ("tenant_id", "t"),
            ],
            &[("msi_resource_id", "r")],
        ] {
            let b = from_environment(env(), Some("http://msi".into()), &options(whole)).unwrap();
            assert_eq!(
                b.get_config_value(&AzureConfigKey::AccessKey),
                None,
                "{whole:?}"
            );
            assert_eq!(
                b.get_config_value(&AzureConfigKey::MsiEndpoint),
                None,
                "{whole:?}"
            );
        }
        // Without a credential in the options, the environment's stand.
        let b = from_environment(env(), Some("http://msi".into()), &options(&[])).unwrap();
        assert_eq!(
            b.get_config_value(&AzureConfigKey::AccessKey).as_deref(),
            Some("env-key")
        );
        assert_eq!(
            b.get_config_value(&AzureConfigKey::MsiEndpoint).as_deref(),
            Some("http://msi")
        );
    }

    #[test]
    fn builds_from_a_url_and_options_without_io() {
        let account = [("account", "devstoreaccount1"), ("account_key", DEV_KEY)];
        let b = open("az://container/lake/t", &account).unwrap();
        assert_eq!(b.scheme, Scheme::Azure);
        assert_eq!(b.prefix, vec!["lake", "t"]);
        assert!(b.scheme.is_remote());
        for url in [
            "abfs://container/lake",
            "abfss://container/lake",
            "azure://container/lake",
        ] {
            assert_eq!(open(url, &account).unwrap().prefix, vec!["lake"], "{url}");
        }
        // The Hadoop form names the account in the URL.
        let b = open(
            "abfss://fs@devstoreaccount1.dfs.core.windows.net/a/b",
            &[("account_key", DEV_KEY)],
        )
        .unwrap();
        assert_eq!(b.prefix, vec!["a", "b"]);
        // A SAS, a bearer token, an emulator endpoint, anonymous reads.
        for extra in [
            ("sas", "sv=2021-01-01&sig=abc"),
            ("token", "eyJ0"),
            ("anonymous", "true"),
        ] {
            let pairs = [("account", "a"), extra];
            assert!(open("az://c", &pairs).is_ok(), "{extra:?}");
        }
        let azurite = [
            ("account", "devstoreaccount1"),
            ("account_key", DEV_KEY),
            ("endpoint", "http://127.0.0.1:10000/devstoreaccount1"),
            ("allow_http", "true"),
        ];
        assert!(open("az://c", &azurite).is_ok());
    }

    #[test]
    fn reads_connection_strings() {
        let text = format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};\
             BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;QueueEndpoint=http://x;"
        );
        let got = connection_string(&text).unwrap();
        let find = |k: AzureConfigKey| got.iter().find(|(x, _)| *x == k).map(|(_, v)| v.clone());
        assert_eq!(
            find(AzureConfigKey::AccountName).as_deref(),
            Some("devstoreaccount1")
        );
        assert_eq!(find(AzureConfigKey::AccessKey).as_deref(), Some(DEV_KEY));
        assert_eq!(
            find(AzureConfigKey::Endpoint).as_deref(),
            Some("http://127.0.0.1:10000/devstoreaccount1")
        );
        assert!(open("az://c", &[("connection_string", &text)]).is_ok());
        // Another cloud's suffix makes the endpoint; a SAS stands for the key.
        let got = connection_string(
            "AccountName=a;SharedAccessSignature=sv=1&sig=2;EndpointSuffix=core.chinacloudapi.cn",
        )
        .unwrap();
        assert!(got.contains(&(AzureConfigKey::SasKey, "sv=1&sig=2".into())));
        assert!(got.contains(&(
            AzureConfigKey::Endpoint,
            "https://a.blob.core.chinacloudapi.cn".into()
        )));
        let dev = connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev, vec![(AzureConfigKey::UseEmulator, "true".into())]);
        // Malformed strings are refused without echoing them.
        for bad in [
            "AccountKey",
            "Bogus=1;AccountKey=HIDDEN-42",
            ";;",
            "UseDevelopmentStorage=false",
            "HIDDEN-42abc=",
            "EndpointSuffix=core.chinacloudapi.cn",
        ] {
            match connection_string(bad) {
                Err(Error::InvalidArgument(m)) => assert!(!m.contains("HIDDEN-42"), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn refuses_bad_urls_and_options_naming_no_secret() {
        let e = refused;
        assert!(e("az://", &[("account", "a")]).contains("need a container"));
        assert!(e("az://c", &[("account", "a"), ("bogus", "1")]).contains("unknown Azure option"));
        assert!(e("az://c", &[("account", "a"), ("container_name", "d")]).contains("from the URL"));
        // No account at all: object_store cannot build it.
        assert!(e("az://c", &[]).contains("cannot configure Azure store"));
        // A key that is not base64: refused, without its text.
        let m = e("az://c", &[("account", "a"), ("account_key", "HIDDEN-42!")]);
        assert!(!m.contains("HIDDEN-42"), "{m}");
        // No bare `key` (it would collide with the calls' own `key`): named, not echoed.
        let m = e("az://c", &[("account", "a"), ("key", "HIDDEN-42")]);
        assert!(m.contains("unknown Azure option \"key\""), "{m}");
        assert!(m.contains("account_key") && !m.contains("HIDDEN-42"), "{m}");
    }
}
