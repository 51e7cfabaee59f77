//! What a store's failure says, and what it may not say.
//!
//! object_store puts the URL of a failed request into its errors unless the
//! request was marked sensitive, and not every request that carries a
//! secret is (Azure's batch delete carries the SAS in its query string).
//! [`redact_urls`] takes the query string (and any user info) out of every
//! URL in a message; the Python layer applies it to every error it raises.
//!
//! object_store reports some refusals only as a generic error whose source
//! chain holds the HTTP status (a LIST's 403, a LIST's 404 for a missing
//! bucket): [`http_status`] reads it back.

/// What replaces a URL's query string (and fragment) in a message.
const REDACTED_QUERY: &str = "?REDACTED";

/// `text` with every URL's query string and fragment replaced by
/// `?REDACTED` and its user info (`user:password@`) removed; the scheme,
/// host and path stay. A URL is a `scheme://` run up to the next
/// whitespace or quote (` " ' < > `` ` ``): a query string's values are
/// percent-encoded, so none of these ends one early.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        if scheme_start == at {
            // No scheme before `://`: not a URL; copy it and go on.
            out.push_str(&rest[..at + 3]);
            rest = &rest[at + 3..];
            continue;
        }
        let body_start = at + 3;
        let end = rest[body_start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| body_start + i);
        out.push_str(&rest[..body_start]);
        out.push_str(&redact_one(&rest[body_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A URL's part after `scheme://`, without user info and query string.
fn redact_one(body: &str) -> String {
    let authority_end = body.find(['/', '?', '#']).unwrap_or(body.len());
    let (authority, tail) = body.split_at(authority_end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match tail.find(['?', '#']) {
        Some(q) => format!("{host}{}{REDACTED_QUERY}", &tail[..q]),
        None => format!("{host}{tail}"),
    }
}

/// Whether `value` (a store option) is a URL with user info
/// (`scheme://user:password@host`): a password there would be shown
/// wherever the endpoint is, in every failed request's error.
pub fn has_user_info(value: &str) -> bool {
    let Some(at) = value.find("://") else {
        return false;
    };
    let body = &value[at + 3..];
    let authority_end = body.find(['/', '?', '#']).unwrap_or(body.len());
    body[..authority_end].contains('@')
}

/// The prefix object_store 0.13 gives an HTTP status it did not map to a
/// variant (`RequestError::Status`, in a private module).
const STATUS_PREFIX: &str = "Server returned non-2xx status code: ";

/// The HTTP status a failed request was answered with, if `err`'s source
/// chain records one.
pub fn http_status(err: &(dyn std::error::Error + 'static)) -> Option<u16> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        let text = e.to_string();
        if let Some(code) = text
            .strip_prefix(STATUS_PREFIX)
            .and_then(|rest| rest.get(..3))
            .and_then(|c| c.parse().ok())
        {
            return Some(code);
        }
        cur = e.source();
    }
    None
}

/// Whether the store refused `err`'s request for want of permission: a
/// permission error, or any request answered 401 or 403.
pub fn is_denied(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) || matches!(http_status(err), Some(401 | 403))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_and_user_info_leave_every_url() {
        let msg = "Error performing POST http://127.0.0.1:9/acct/cont?restype=container&comp=batch\
                   &sv=2021&sig=HIDDEN-42 in 2ms - 403 Forbidden";
        let got = redact_urls(msg);
        assert_eq!(
            got,
            "Error performing POST http://127.0.0.1:9/acct/cont?REDACTED in 2ms - 403 Forbidden"
        );
        let got = redact_urls(
            "a https://AKIA:HIDDEN-42@host:1/b#HIDDEN-42 and \"http://h?x=HIDDEN-42\" (s3://b/k)",
        );
        assert_eq!(
            got,
            "a https://host:1/b?REDACTED and \"http://h?REDACTED\" (s3://b/k)"
        );
        // No scheme, no URL: text is kept as it is.
        for plain in ["not found: a/b", "odd :// text", "x://", ""] {
            assert_eq!(redact_urls(plain), plain);
        }
        // Non-ASCII around a URL is kept whole.
        assert_eq!(redact_urls("é http://h/ü?q=1 ü"), "é http://h/ü?REDACTED ü");
    }

    #[test]
    fn user_info_is_found_in_option_values() {
        assert!(has_user_info("http://user:pw@host:9"));
        assert!(has_user_info("https://user@host/p"));
        assert!(!has_user_info("http://host:9/p@x"));
        assert!(!has_user_info("http://host?x=a@b"));
        assert!(!has_user_info("us-east-1"));
    }

    #[test]
    fn statuses_are_read_from_the_source_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Error performing GET REDACTED")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let inner = std::io::Error::other(format!("{STATUS_PREFIX}403 Forbidden: <Error/>"));
        let generic = object_store::Error::Generic {
            store: "S3",
            source: Box::new(Outer(inner)),
        };
        assert_eq!(http_status(&generic), Some(403));
        assert!(is_denied(&generic));
        let other = object_store::Error::Generic {
            store: "S3",
            source: "connection reset".into(),
        };
        assert_eq!(http_status(&other), None);
        assert!(!is_denied(&other));
    }
}
