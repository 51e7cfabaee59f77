//! Manifests that carry the SHA-256 of their own bytes.
//!
//! A table or pipeline manifest names everything a version holds: a byte
//! changed in a statistic, a row count, a time or a tombstone reference
//! would change what a reader sees while still parsing. So every manifest
//! is *sealed*: it is written as pretty JSON (2-space indent) whose
//! top-level `checksum` field holds the SHA-256 (hex) of the manifest's
//! bytes as written with that field's 64 hex digits all `0`. A reader
//! recomputes it over the bytes it read before trusting any field, and a
//! manifest whose checksum is absent or differs is `ManifestCorrupted`.
//! (Hashing the bytes, not re-serialised JSON, keeps the check exact
//! whatever the numbers: no float has to round-trip.)
//!
//! The top-level field is found as the one line `\n  "checksum": "`: pretty
//! JSON indents every nested key deeper, and strings hold no raw newline.
//!
//! The check also tells what else lives at a key: a pipeline's manifest
//! read as a table's (or the reverse) names what is there and how to open it.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The top-level field holding the checksum.
pub const FIELD: &str = "checksum";

/// How the checksum's line starts in a sealed manifest.
const MARKER: &[u8] = b"\n  \"checksum\": \"";

/// The hex digits of a SHA-256.
const DIGITS: usize = 64;

/// The kinds of versioned objects pds stores, by `format` prefix: what the
/// thing is called, and how a user opens it.
const KINDS: &[(&str, &str, &str)] = &[
    ("pds-table/", "table", "pds.Table.open"),
    ("pds-pipeline/", "pipeline", "pds.Pipeline.open"),
];

fn kind_of(format: &str) -> Option<(&'static str, &'static str)> {
    KINDS
        .iter()
        .find(|(prefix, _, _)| format.starts_with(prefix))
        .map(|(_, kind, how)| (*kind, *how))
}

/// Where the checksum's digits start, if the bytes hold exactly one
/// top-level checksum line.
fn digits_at(raw: &[u8]) -> Option<usize> {
    let mut found = raw
        .windows(MARKER.len())
        .enumerate()
        .filter(|(_, w)| *w == MARKER)
        .map(|(i, _)| i + MARKER.len());
    let at = found.next()?;
    if found.next().is_some() || raw.get(at + DIGITS) != Some(&b'"') {
        return None;
    }
    Some(at)
}

/// The SHA-256 of `raw` with the digits at `at` taken as all `0`.
fn digest(raw: &[u8], at: usize) -> String {
    let mut zeroed = raw.to_vec();
    zeroed[at..at + DIGITS].fill(b'0');
    crate::parquet::encode::sha256_hex(&zeroed)
}

/// The pretty JSON of `value` (an object) with its checksum field set.
pub fn seal(mut value: Value) -> Result<Vec<u8>> {
    let Value::Object(map) = &mut value else {
        return Err(Error::InvalidArgument(
            "a manifest must serialise to a JSON object".into(),
        ));
    };
    map.insert(FIELD.to_string(), Value::String("0".repeat(DIGITS)));
    let mut raw = serde_json::to_vec_pretty(&value)
        .map_err(|e| Error::InvalidArgument(format!("manifest is not serialisable: {e}")))?;
    let at = digits_at(&raw)
        .ok_or_else(|| Error::Task("a sealed manifest lacks its checksum line".into()))?;
    let sum = digest(&raw, at);
    raw[at..at + DIGITS].copy_from_slice(sum.as_bytes());
    Ok(raw)
}

/// Parse `raw` (read from `path`) as a sealed manifest of one of `formats`
/// (the first is the one this pds writes): a JSON object whose format is
/// one of them and whose checksum matches its bytes.
/// Returns its fields but the checksum. Every failure is
/// `ManifestCorrupted` naming `path`.
pub fn open(raw: &[u8], path: &str, formats: &[&str]) -> Result<Map<String, Value>> {
    let format = formats.first().copied().unwrap_or_default();
    let corrupted = |reason: String| Error::ManifestCorrupted {
        path: path.to_string(),
        reason,
    };
    let value: Value = serde_json::from_slice(raw).map_err(|e| corrupted(e.to_string()))?;
    let Value::Object(mut map) = value else {
        return Err(corrupted("it is not a JSON object".into()));
    };
    match map.get("format") {
        Some(Value::String(f)) if formats.contains(&f.as_str()) => {}
        Some(Value::String(f)) => {
            let wanted = kind_of(format).map_or("manifest", |(k, _)| k);
            return Err(corrupted(match kind_of(f) {
                Some((kind, how)) if kind != wanted => format!(
                    "it is the manifest of a {kind} (format {f:?}), not of a {wanted}: a {kind} \
                     lives at this key; open it with {how}"
                ),
                _ => format!("format is {f:?}, this pds reads {format:?}"),
            }));
        }
        _ => return Err(corrupted("it has no format".into())),
    }
    let stated = match map.remove(FIELD) {
        Some(Value::String(s)) => s,
        _ => return Err(corrupted("it has no checksum".into())),
    };
    let at = digits_at(raw)
        .filter(|at| raw[*at..*at + DIGITS] == *stated.as_bytes())
        .ok_or_else(|| corrupted("its checksum is not where pds writes it".into()))?;
    let actual = digest(raw, at);
    if stated != actual {
        return Err(corrupted(format!(
            "its bytes do not match its checksum (it was damaged or edited): it says \
             {stated:?}, the bytes hash to {actual:?}"
        )));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_round_trips_and_any_edit_is_caught() {
        let value = serde_json::json!({
            "format": "pds-table/1",
            "x": 0.1, "y": [1, 2.5e-300, -0.0, 18446744073709551615u64], "z": "é"
        });
        let raw = seal(value.clone()).unwrap();
        let back = open(&raw, "p", &["pds-table/1"]).unwrap();
        assert_eq!(Value::Object(back), value);
        // A changed digit, a changed space, a dropped checksum, another kind.
        let text = String::from_utf8(raw).unwrap();
        for edited in [
            text.replace("2.5e-300", "2.6e-300"),
            text.replacen("  ", "   ", 2),
        ] {
            assert_ne!(edited, text);
            let err = open(edited.as_bytes(), "p", &["pds-table/1"]).unwrap_err();
            assert!(err.to_string().contains("checksum"), "{err}");
        }
        let mut map: Map<String, Value> = serde_json::from_str(&text).unwrap();
        map.remove(FIELD);
        let unsealed = serde_json::to_vec(&map).unwrap();
        assert!(open(&unsealed, "p", &["pds-table/1"])
            .unwrap_err()
            .to_string()
            .contains("no checksum"));
        let err = open(text.as_bytes(), "p", &["pds-pipeline/1"]).unwrap_err();
        assert!(
            matches!(&err, Error::ManifestCorrupted { reason, .. }
                if reason.contains("a table lives at this key") && reason.contains("pds.Table.open")),
            "{err}"
        );
        for bad in ["", "[]", "1", "{\"format\": 3}"] {
            assert!(matches!(
                open(bad.as_bytes(), "p", &["pds-table/1"]),
                Err(Error::ManifestCorrupted { .. })
            ));
        }
    }
}
