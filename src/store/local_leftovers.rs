//! What object_store's `LocalFileSystem` leaves in a folder and never lists:
//! the staging files of writes that were killed (`name#<digits>`), and
//! folders emptied by deletes. A folder delete removes both, so that a
//! deleted dataset leaves nothing behind on `file://`.

use std::path::Path;

use crate::error::Result;
use crate::store::keys::is_staging_name;

/// Remove staging files below `dir`, then every folder left empty, `dir`
/// included. Other files (objects written after the listing) stay.
pub fn remove_leftovers(dir: &Path) -> Result<()> {
    remove_staging(dir, None).map(|_| ())
}

/// Remove the staging files below `dir` last modified before `older_than`
/// (all of them if `None`: a write still running has a young one), then
/// every folder left empty. Returns the files removed.
pub fn remove_staging(
    dir: &Path,
    older_than: Option<std::time::SystemTime>,
) -> Result<Vec<std::path::PathBuf>> {
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            removed.extend(remove_staging(&path, older_than)?);
        } else if entry.file_name().to_str().is_some_and(is_staging_name) {
            let old = match older_than {
                None => true,
                Some(t) => entry.metadata()?.modified()? < t,
            };
            if old {
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                    _ => removed.push(path),
                }
            }
        }
    }
    // Fails harmlessly if something was written meanwhile.
    let _ = std::fs::remove_dir(dir);
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_files_and_empty_folders_go_objects_stay() {
        let root = tempfile::tempdir().unwrap();
        let ds = root.path().join("ds");
        std::fs::create_dir_all(ds.join("sub")).unwrap();
        std::fs::write(ds.join("part-00001.parquet#1"), b"x").unwrap();
        std::fs::write(ds.join("sub").join("a#22"), b"x").unwrap();
        remove_leftovers(&ds).unwrap();
        assert!(!ds.exists());

        std::fs::create_dir_all(&ds).unwrap();
        std::fs::write(ds.join("kept.parquet"), b"x").unwrap();
        std::fs::write(ds.join("x#3"), b"x").unwrap();
        remove_leftovers(&ds).unwrap();
        assert!(ds.join("kept.parquet").exists());
        assert!(!ds.join("x#3").exists());
        remove_leftovers(&root.path().join("missing")).unwrap();
    }
}
