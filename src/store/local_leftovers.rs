//! What object_store's `LocalFileSystem` leaves in a folder and never lists:
//! the staging files of writes that were killed (`name#<digits>`), and
//! folders emptied by deletes. A folder delete removes both, so that a
//! deleted dataset leaves nothing behind on `file://`.
//!
//! Writers rename their staging files into place at any moment, so a file
//! (or folder) that vanishes between being listed and being looked at is
//! not an error here: it is simply no longer a leftover.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::store::keys::is_staging_name;

/// Which names below the swept folder a sweep may touch, relative to it
/// with `/` separators. For a file, `rel` is the object name its staging
/// file stands for (the `#<digits>` suffix removed); for a folder, `rel` is
/// the folder's name, and `true` lets the sweep look inside it and remove
/// it once empty.
pub trait Owns: Fn(&str, bool) -> bool + Send + 'static {}
impl<F: Fn(&str, bool) -> bool + Send + 'static> Owns for F {}

/// Remove staging files below `dir`, then every folder left empty, `dir`
/// included. Other files (objects written after the listing) stay.
pub fn remove_leftovers(dir: &Path) -> Result<()> {
    sweep(dir, "", None, &|_: &str, _: bool| true).map(|_| ())
}

/// Remove the staging files below `dir` last modified before `older_than`
/// (all of them if `None`) whose names `owns` accepts, then every folder it
/// accepts that is left empty; `dir` itself too with `remove_dir`. Returns
/// the files removed, relative to `dir` with `/` separators and their
/// `#<digits>` suffix.
pub fn remove_staging(
    dir: &Path,
    older_than: Option<std::time::SystemTime>,
    owns: impl Owns,
    remove_dir: bool,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in read_dir(dir)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        removed.extend(sweep_entry(&entry, &name, older_than, &owns)?);
    }
    if remove_dir {
        // Fails harmlessly if something is still there.
        let _ = std::fs::remove_dir(dir);
    }
    Ok(removed)
}

/// The entries of `dir`; none if it vanished.
fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => out.push(e),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Sweep the folder `dir` (named `rel`, `""` for the top): staging files
/// older than `older_than` (all if `None`), then the folder if empty.
fn sweep(
    dir: &Path,
    rel: &str,
    older_than: Option<std::time::SystemTime>,
    owns: &dyn Fn(&str, bool) -> bool,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in read_dir(dir)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        removed.extend(sweep_entry(&entry, &child, older_than, owns)?);
    }
    // Fails harmlessly if something was written meanwhile.
    let _ = std::fs::remove_dir(dir);
    Ok(removed)
}

/// One entry named `rel`: a folder `owns` accepts is swept, a staging file
/// it accepts is removed if old enough. An entry that vanished is skipped.
fn sweep_entry(
    entry: &std::fs::DirEntry,
    rel: &str,
    older_than: Option<std::time::SystemTime>,
    owns: &dyn Fn(&str, bool) -> bool,
) -> Result<Vec<String>> {
    let path = entry.path();
    let kind = match entry.file_type() {
        Ok(k) => k,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    if kind.is_dir() {
        return if owns(rel, true) {
            sweep(&path, rel, older_than, owns)
        } else {
            Ok(Vec::new())
        };
    }
    let object = match rel.rsplit_once('#') {
        Some((object, _)) if is_staging_name(rel) => object,
        _ => return Ok(Vec::new()),
    };
    if !owns(object, false) || !older(&path, older_than)? {
        return Ok(Vec::new());
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(vec![rel.to_string()]),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Whether the file at `path` was last modified before `older_than`
/// (always, if `None`); `false` if it vanished (it was renamed into place).
fn older(path: &PathBuf, older_than: Option<std::time::SystemTime>) -> Result<bool> {
    let Some(t) = older_than else {
        return Ok(true);
    };
    match std::fs::metadata(path).and_then(|m| m.modified()) {
        Ok(modified) => Ok(modified < t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
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

    #[test]
    fn a_sweep_touches_only_what_it_owns_and_old_enough() {
        let root = tempfile::tempdir().unwrap();
        let t = root.path();
        for dir in ["data", "data/nested", "other", "empty"] {
            std::fs::create_dir_all(t.join(dir)).unwrap();
        }
        for f in ["data/a.parquet#1", "data/nested/b#2", "other/c#3", "d#4"] {
            std::fs::write(t.join(f), b"x").unwrap();
        }
        let owns = |rel: &str, folder: bool| match folder {
            true => rel == "data" || rel == "empty",
            false => rel.starts_with("data/") && rel.matches('/').count() == 1,
        };
        let past = std::time::SystemTime::UNIX_EPOCH;
        let young = remove_staging(t, Some(past), owns, false).unwrap();
        assert!(young.is_empty(), "too young");
        let future = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        assert_eq!(
            remove_staging(t, Some(future), owns, true).unwrap(),
            ["data/a.parquet#1"]
        );
        assert!(
            t.join("data/nested/b#2").exists(),
            "a nested key is left alone"
        );
        assert!(t.join("other/c#3").exists() && t.join("d#4").exists());
        assert!(!t.join("empty").exists(), "an owned empty folder goes");
        assert!(t.join("data").exists() && t.exists());
    }

    #[test]
    fn a_file_that_vanishes_is_no_error() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("x#1"), b"x").unwrap();
        let entry = read_dir(root.path()).unwrap().pop().unwrap();
        // The writer renames its staging file into place meanwhile.
        std::fs::rename(root.path().join("x#1"), root.path().join("x")).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        let owns = |_: &str, _: bool| true;
        assert!(sweep_entry(&entry, "x#1", Some(later), &owns)
            .unwrap()
            .is_empty());
        assert!(older(&root.path().join("x#1"), Some(later)).is_ok_and(|o| !o));
        assert!(read_dir(&root.path().join("gone")).unwrap().is_empty());
    }
}
