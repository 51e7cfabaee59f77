//! Store-relative keys: validation and mapping onto object_store paths.
//!
//! The rules match remote-store's `RemotePath`: backslashes are separators,
//! empty and `.` segments collapse, and any `..` segment, NUL byte or control
//! character is refused. After that, a key can only name objects below the
//! store's root prefix, whatever the backend.

use object_store::path::{Path, PathPart};

use crate::error::{Error, Result};

/// Validate `key` and return its normalised segments.
///
/// An empty key (after normalisation) is the store root and yields no segments.
pub fn segments(key: &str) -> Result<Vec<String>> {
    let invalid = |reason: &str| Error::InvalidPath {
        path: key.to_string(),
        reason: reason.to_string(),
    };
    if key.contains('\0') {
        return Err(invalid("contains a NUL byte"));
    }
    if key.chars().any(|c| c.is_control()) {
        return Err(invalid("contains a control character"));
    }
    let mut out = Vec::new();
    for seg in key.split(['/', '\\']) {
        match seg {
            "" | "." => continue,
            ".." => return Err(invalid("contains a '..' segment")),
            s => out.push(s.to_string()),
        }
    }
    Ok(out)
}

/// Validate a key that must name an object (not the root).
pub fn object_segments(key: &str) -> Result<Vec<String>> {
    let segs = segments(key)?;
    if segs.is_empty() {
        return Err(Error::InvalidPath {
            path: key.to_string(),
            reason: "names the store root, not an object".into(),
        });
    }
    Ok(segs)
}

/// Refuse an object name that a local filesystem store cannot hold:
/// object_store's `LocalFileSystem` reserves file names ending in `#<digits>`
/// for its in-progress writes.
pub fn check_local_name(key: &str, segments: &[String]) -> Result<()> {
    let Some(name) = segments.last() else {
        return Ok(());
    };
    if let Some((_, suffix)) = name.rsplit_once('#') {
        if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::InvalidPath {
                path: key.to_string(),
                reason: "file:// stores cannot hold a name ending in '#' and digits \
                         (reserved for in-progress writes)"
                    .into(),
            });
        }
    }
    Ok(())
}

/// Join a validated root prefix and a key into an object_store [`Path`].
///
/// Segments are kept verbatim (`PathPart::parse`), not percent-encoded as
/// `Path::from` would do for `[`, `#`, `%`, `*`, ...: the object is named by
/// the key itself on every store, as remote-store and boto3 name it, and a
/// listing gives the same key back.
pub fn join(prefix: &[String], key_segments: &[String]) -> Result<Path> {
    let parts = prefix
        .iter()
        .chain(key_segments.iter())
        .map(|s| {
            PathPart::parse(s).map_err(|e| Error::InvalidPath {
                path: key_segments.join("/"),
                reason: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Path::from_iter(parts))
}

/// The store-relative key of an object path below `prefix`, or `None` if it
/// lies outside (which listing never returns, but we do not trust it).
pub fn relative(prefix: &[String], path: &Path) -> Option<String> {
    let parts: Vec<String> = path.parts().map(|p| p.as_ref().to_string()).collect();
    if parts.len() < prefix.len() || parts[..prefix.len()] != *prefix {
        return None;
    }
    Some(parts[prefix.len()..].join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_remote_path() {
        assert_eq!(segments("a//b/./c/").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(segments("a\\b").unwrap(), vec!["a", "b"]);
        assert!(segments("").unwrap().is_empty());
    }

    #[test]
    fn refuses_escapes() {
        for bad in ["..", "a/../b", "a\\..\\..\\etc", "x\0y", "a/\n/b"] {
            assert!(
                matches!(segments(bad), Err(Error::InvalidPath { .. })),
                "{bad:?} was accepted"
            );
        }
        assert!(object_segments("./").is_err());
    }

    #[test]
    fn local_names_reserved_for_staging_are_refused() {
        for bad in ["a#1", "d/x#99"] {
            let segs = object_segments(bad).unwrap();
            assert!(matches!(
                check_local_name(bad, &segs),
                Err(Error::InvalidPath { .. })
            ));
        }
        for ok in ["a#b", "a#", "a#1/b", "a#1x"] {
            check_local_name(ok, &object_segments(ok).unwrap()).unwrap();
        }
    }

    #[test]
    fn join_and_relative_round_trip() {
        let prefix = vec!["root".to_string(), "sub".to_string()];
        let p = join(&prefix, &segments("ds/part-00000.parquet").unwrap()).unwrap();
        assert_eq!(p.as_ref(), "root/sub/ds/part-00000.parquet");
        assert_eq!(relative(&prefix, &p).unwrap(), "ds/part-00000.parquet");
        // Characters Path::from would percent-encode stay as they are, both ways.
        let odd = "x[1]/a#b %41{c}*?.parquet";
        let p = join(&prefix, &segments(odd).unwrap()).unwrap();
        assert_eq!(p.as_ref(), format!("root/sub/{odd}"));
        assert_eq!(relative(&prefix, &p).unwrap(), odd);
        assert!(relative(&prefix, &Path::from("other/x")).is_none());
    }
}
