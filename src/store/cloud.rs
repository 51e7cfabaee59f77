//! Options shared by the remote stores (S3, GCS, Azure): retries, and the
//! error for an option no store knows.

use std::sync::Arc;

use object_store::{ObjectStore, RetryConfig};

use super::built::{url_prefix, Built, Scheme};
use crate::error::{Error, Result};

/// A remote store built from `url`, rooted at its path.
pub fn built(scheme: Scheme, store: Arc<dyn ObjectStore>, url: &url::Url) -> Result<Built> {
    Ok(Built {
        scheme,
        store,
        prefix: url_prefix(url)?,
        local: None,
    })
}

/// Apply `name = value` to `retry` if it is one of pds's retry options
/// (`max_retries`, `retry_timeout_secs`); `Ok(false)` if it is not.
pub fn retry_option(name: &str, value: &str, retry: &mut RetryConfig) -> Result<bool> {
    match name {
        "max_retries" => {
            retry.max_retries = value.parse().map_err(|_| {
                Error::InvalidArgument(format!("max_retries must be an integer, got {value:?}"))
            })?;
            Ok(true)
        }
        "retry_timeout_secs" => {
            let secs: f64 = value.parse().map_err(|_| {
                Error::InvalidArgument(format!(
                    "retry_timeout_secs must be a number, got {value:?}"
                ))
            })?;
            let timeout = secs
                .is_finite()
                .then(|| std::time::Duration::try_from_secs_f64(secs.max(0.0)).ok())
                .flatten();
            retry.retry_timeout = timeout.ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "retry_timeout_secs must be a finite number of seconds, got {value:?}"
                ))
            })?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `InvalidArgument` for an option `store` does not take, naming the ones it does.
pub fn unknown_option(store: &str, key: &str, known: &str) -> Error {
    Error::InvalidArgument(format!("unknown {store} option {key:?}; use {known}"))
}

/// `InvalidArgument` for a store object_store refuses to configure. Its
/// message may quote what it could not decode (serde quotes a value of the
/// wrong type: a key file's field, a whole key JSON passed as a string), so
/// every quoted span is replaced by `"***"`; the rest (what was expected,
/// where) is kept.
pub fn cannot_configure(store: &str, e: impl std::fmt::Display) -> Error {
    let message = redact_quoted(&e.to_string());
    Error::InvalidArgument(format!("cannot configure {store} store: {message}"))
}

/// `text` with each `"..."` span (backslash escapes honoured) and each
/// `` `...` `` span replaced by `"***"`; an unterminated span runs to the end.
fn redact_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' && c != '`' {
            out.push(c);
            continue;
        }
        out.push_str("\"***\"");
        let mut escaped = false;
        for inner in chars.by_ref() {
            match inner {
                _ if escaped => escaped = false,
                '\\' if c == '"' => escaped = true,
                _ if inner == c => break,
                _ => {}
            }
        }
    }
    out
}

/// `value` as a boolean option (`true`/`false`, `1`/`0`, `yes`/`no`).
pub fn flag(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(Error::InvalidArgument(format!(
            "{key} must be true or false, got {value:?}"
        ))),
    }
}

/// The environment variables whose names start with `prefix` (`AZURE_`,
/// `GOOGLE_`), as object_store's `from_env` reads them: each name,
/// lower-cased, parsed as a config key of `K`; names that are no key are
/// skipped.
pub fn env_config<K: std::str::FromStr>(prefix: &str) -> Vec<(K, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let (name, value) = (name.to_str()?, value.to_str()?);
            let key = name
                .starts_with(prefix)
                .then(|| name.to_ascii_lowercase().parse().ok())??;
            Some((key, value.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::redact_quoted;

    #[test]
    fn quoted_spans_are_redacted() {
        let msg =
            r#"invalid type: string "{\"private_key\": \"SECRET\"}", expected struct X at line 1"#;
        assert_eq!(
            redact_quoted(msg),
            r#"invalid type: string "***", expected struct X at line 1"#
        );
        assert_eq!(
            redact_quoted("invalid type: integer `42`, expected a string"),
            r#"invalid type: integer "***", expected a string"#
        );
        assert_eq!(redact_quoted(r#"cut "SECRET"#), r#"cut "***""#);
        assert_eq!(redact_quoted("nothing quoted"), "nothing quoted");
    }
}
