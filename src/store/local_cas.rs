//! Compare-and-swap puts on a local folder.
//!
//! object_store's `LocalFileSystem` offers create-only puts but not
//! `PutMode::Update`. Table commits need both on `file://` too, so this module
//! provides the update: lock the current file, check its ETag (the same
//! `inode-mtime-size` scheme object_store reports from `head`), write a staged
//! copy beside it and rename it into place. Renames are atomic on POSIX, and
//! the lock is held on the inode that was checked, so two writers that read the
//! same ETag cannot both win, even from different processes.

use std::fs::{File, Metadata};
use std::io::Write;
use std::path::{Path as FsPath, PathBuf};

use crate::error::{Error, Result};

/// The ETag object_store's local store reports for this file.
#[cfg(unix)]
pub fn etag(meta: &Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    format!("{:x}-{:x}-{:x}", meta.ino(), mtime, meta.len())
}

/// Replace `target` with `data` if its current ETag is `expected`.
///
/// Returns the new ETag. Fails with [`Error::Precondition`] when the file is
/// gone or its ETag differs.
#[cfg(unix)]
pub fn put_if_match(target: &FsPath, key: &str, expected: &str, data: &[u8]) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let lost = || Error::Precondition {
        path: key.to_string(),
    };
    loop {
        let file = match File::open(target) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(lost()),
            Err(e) => return Err(e.into()),
        };
        file.lock()?;
        let locked = file.metadata()?;
        let current = match std::fs::metadata(target) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(lost()),
            Err(e) => return Err(e.into()),
        };
        if locked.ino() != current.ino() {
            // Someone swapped the file between our open and our lock: retry on the new one.
            continue;
        }
        if etag(&current) != expected {
            return Err(lost());
        }
        let staged = staging_path(target);
        let written = write_staged(&staged, data).and_then(|_| {
            std::fs::rename(&staged, target)?;
            Ok(())
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&staged);
            return Err(e);
        }
        let after = std::fs::metadata(target)?;
        drop(file);
        return Ok(etag(&after));
    }
}

#[cfg(not(unix))]
pub fn put_if_match(_: &FsPath, _: &str, _: &str, _: &[u8]) -> Result<String> {
    Err(Error::NotSupported(
        "compare-and-swap on file:// needs a POSIX filesystem".into(),
    ))
}

/// A sibling name that object_store's local listing hides (`name#<digits>`).
fn staging_path(target: &FsPath) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let mut s = target.as_os_str().to_owned();
    s.push(format!("#{}{:09}", std::process::id(), nanos));
    s.into()
}

fn write_staged(path: &FsPath, data: &[u8]) -> Result<()> {
    let mut f = File::create(path)?;
    f.write_all(data)?;
    f.sync_all()?;
    Ok(())
}
