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
//!
//! **Manifests from before the seal.** pds wrote table and pipeline
//! manifests without a checksum until 2026-11-23 (formats `pds-table/1`
//! and `pds-pipeline/1`). [`open_any`] accepts such a manifest only where
//! that format lacked the seal: its format is one the caller names as
//! once unsealed (never `pds-table/2` or later, sealed from their first
//! byte), the `checksum` field is absent, and the bytes are exactly what
//! that earlier pds wrote (its pretty JSON, key for key and space for
//! space: the caller re-serialises what it parsed the way the old writer
//! did and compares). A caller also refuses fields the old writer never
//! wrote (a table's tombstone SHA-256s, say). A manifest read so is
//! marked [`Seal::Unsealed`]: it is readable and read-only until upgraded.
//!
//! Residual risk, stated: a sealed manifest of one of those two formats
//! whose checksum line is cut out *exactly* (the line and nothing else),
//! holding none of the fields only sealed writers wrote, is then read as
//! an unsealed one of the earlier pds, with no check of its bytes; it
//! opens read-only, as a table or pipeline of the earlier pds would. The
//! data files it names are still checked against their SHA-256 when read.
//! Any other damage (an edited byte, a changed space, a truncation, a
//! reordered key) is still `ManifestCorrupted`.

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

/// Whether a manifest carried a checksum (see [`open_any`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// Its checksum matched its bytes.
    Sealed,
    /// A manifest of an earlier pds, from before the seal.
    Unsealed,
}

/// [`open`], also accepting a manifest without `checksum` if its format is
/// one of `unsealed` (formats an earlier pds wrote without the seal) and
/// `canonical` (the old writer's serialisation of what was parsed) gives
/// back exactly `raw`. A manifest with a checksum is checked as [`open`]
/// does, whatever its format.
pub fn open_any(
    raw: &[u8],
    path: &str,
    formats: &[&str],
    unsealed: &[&str],
    canonical: impl FnOnce(&Map<String, Value>) -> Option<Vec<u8>>,
) -> Result<(Map<String, Value>, Seal)> {
    let corrupted = |reason: String| Error::ManifestCorrupted {
        path: path.to_string(),
        reason,
    };
    let map = match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Object(map)) if !map.contains_key(FIELD) => map,
        // Sealed, or not a manifest at all: what `open` says.
        _ => return open(raw, path, formats).map(|m| (m, Seal::Sealed)),
    };
    let format = map
        .get("format")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !formats.contains(&format) {
        // Wrong kind, or no format: what `open` says.
        return open(raw, path, formats).map(|m| (m, Seal::Sealed));
    }
    if !unsealed.contains(&format) {
        return Err(corrupted(format!(
            "it has no checksum, and every {format} manifest pds writes has one \
             (it was damaged or edited)"
        )));
    }
    if canonical(&map).as_deref() != Some(raw) {
        return Err(corrupted(format!(
            "it has no checksum and its bytes are not laid out as the pds that wrote \
             unsealed {format} manifests wrote them (it was damaged or edited)"
        )));
    }
    Ok((map, Seal::Unsealed))
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
                _ => format!("format is {f:?}, this pds reads {}", formats.join(", ")),
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
                open_any(
                    bad.as_bytes(),
                    "p",
                    &["pds-table/1"],
                    &["pds-table/1"],
                    |_| None
                ),
                Err(Error::ManifestCorrupted { .. })
            ));
            assert!(matches!(
                open(bad.as_bytes(), "p", &["pds-table/1"]),
                Err(Error::ManifestCorrupted { .. })
            ));
        }
    }

    /// An unsealed manifest opens only in a format that once lacked the
    /// seal, laid out byte for byte as its writer wrote it; a sealed one
    /// is checked whatever is passed for the unsealed formats.
    #[test]
    fn unsealed_manifests_open_only_where_the_format_lacked_the_seal() {
        let pretty = |m: &Map<String, Value>| serde_json::to_vec_pretty(m).ok();
        let old = serde_json::json!({"format": "pds-table/1", "version": 0, "a": [1, 2]});
        let raw = serde_json::to_vec_pretty(&old).unwrap();
        let (map, how) = open_any(
            &raw,
            "p",
            &["pds-table/2", "pds-table/1"],
            &["pds-table/1"],
            pretty,
        )
        .unwrap();
        assert_eq!((Value::Object(map), how), (old.clone(), Seal::Unsealed));
        // Another layout of the same JSON (compact, or an added space).
        let compact = serde_json::to_vec(&old).unwrap();
        let spaced = String::from_utf8(raw.clone())
            .unwrap()
            .replacen(": ", ":  ", 1);
        for other in [compact, spaced.into_bytes()] {
            let err =
                open_any(&other, "p", &["pds-table/1"], &["pds-table/1"], pretty).unwrap_err();
            assert!(err.to_string().contains("not laid out"), "{err}");
        }
        // A format that was always sealed, with its checksum stripped.
        let current = serde_json::json!({"format": "pds-table/2", "version": 0});
        let sealed = seal(current).unwrap();
        let mut map: Map<String, Value> = serde_json::from_slice(&sealed).unwrap();
        map.remove(FIELD);
        let stripped = serde_json::to_vec_pretty(&map).unwrap();
        let err = open_any(
            &stripped,
            "p",
            &["pds-table/2", "pds-table/1"],
            &["pds-table/1"],
            pretty,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("every pds-table/2 manifest"),
            "{err}"
        );
        // Sealed ones still check their bytes, in any format.
        let (_, how) = open_any(&sealed, "p", &["pds-table/2"], &["pds-table/1"], pretty).unwrap();
        assert_eq!(how, Seal::Sealed);
        let edited = String::from_utf8(sealed)
            .unwrap()
            .replace("\"version\": 0", "\"version\": 1");
        assert!(open_any(
            edited.as_bytes(),
            "p",
            &["pds-table/2"],
            &["pds-table/1"],
            pretty
        )
        .is_err());
        // An unsealed manifest of another kind names that kind.
        let pipeline =
            serde_json::to_vec_pretty(&serde_json::json!({"format": "pds-pipeline/1"})).unwrap();
        let err = open_any(&pipeline, "p", &["pds-table/1"], &["pds-table/1"], pretty).unwrap_err();
        assert!(err.to_string().contains("pds.Pipeline.open"), "{err}");
    }
}
