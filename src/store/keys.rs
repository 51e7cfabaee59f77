//! Store-relative keys: validation and mapping onto object_store paths.
//!
//! The rules match remote-store's `RemotePath`: backslashes are separators,
//! empty and `.` segments collapse, and any `..` segment, NUL byte or control
//! character is refused. After that, a key can only name objects below the
//! store's root prefix, whatever the backend.

use object_store::path::{Path, PathPart};

use crate::error::{Error, Result};

/// The longest key accepted, in UTF-8 bytes (S3's limit, applied everywhere
/// so that a dataset can move between stores).
pub const MAX_KEY_BYTES: usize = 1024;
/// The longest name a local filesystem holds (ext4, xfs, APFS, NTFS).
pub const MAX_LOCAL_NAME_BYTES: usize = 255;

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
    if key.len() > MAX_KEY_BYTES {
        return Err(invalid(&format!(
            "is {} bytes long; keys hold at most {MAX_KEY_BYTES} (S3's limit)",
            key.len()
        )));
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

/// Refuse a key that a local filesystem store cannot hold, in any of its
/// segments (a folder name too, or the objects below it could be written
/// but never listed or deleted): object_store's `LocalFileSystem` reserves
/// names ending in `#<digits>` for its in-progress writes, and filesystems
/// cap a name at 255 bytes.
pub fn check_local_name(key: &str, segments: &[String]) -> Result<()> {
    for name in segments {
        if is_staging_name(name) {
            return Err(Error::InvalidPath {
                path: key.to_string(),
                reason: format!(
                    "file:// stores cannot hold the name {name:?}: names ending in '#' and \
                     digits are reserved for in-progress writes"
                ),
            });
        }
        if name.len() > MAX_LOCAL_NAME_BYTES {
            return Err(Error::InvalidPath {
                path: key.to_string(),
                reason: format!(
                    "a name in it is {} bytes long; file:// stores hold names of at most \
                     {MAX_LOCAL_NAME_BYTES} bytes",
                    name.len()
                ),
            });
        }
    }
    Ok(())
}

/// Whether `name` is one of object_store's `LocalFileSystem` staging files
/// (`<name>#<digits>`), which its listings hide.
pub fn is_staging_name(name: &str) -> bool {
    name.rsplit_once('#')
        .is_some_and(|(_, suffix)| !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()))
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
        // A folder name too: objects below it could be written but not listed.
        let long = "n".repeat(256);
        for bad in ["a#1", "d/x#99", "a#1/b", long.as_str()] {
            let segs = object_segments(bad).unwrap();
            assert!(matches!(
                check_local_name(bad, &segs),
                Err(Error::InvalidPath { .. })
            ));
        }
        assert!(matches!(
            segments(&"k".repeat(MAX_KEY_BYTES + 1)),
            Err(Error::InvalidPath { .. })
        ));
        for ok in ["a#b", "a#", "a#1x", "b/a#x1"] {
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
