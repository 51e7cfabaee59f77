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
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            remove_leftovers(&path)?;
        } else if entry.file_name().to_str().is_some_and(is_staging_name) {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
    }
    // Fails harmlessly if something was written meanwhile.
    let _ = std::fs::remove_dir(dir);
    Ok(())
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
