//! What vacuum keeps of a table's Delta view.
//!
//! - **Log.** Entries and checkpoints older than the newest checkpoint at
//!   or below the oldest version vacuum retains are removed: that
//!   checkpoint and the entries after it still open every retained
//!   version. Without such a checkpoint, the whole log is kept. The
//!   `_last_checkpoint` hint and any other object in `_delta_log` stay.
//! - **Deletion vectors.** A vector file is kept while a retained version
//!   can name it ([`vector_files`]); others older than the window go, as
//!   data files do.
//! - A table that does not publish the view keeps whatever `_delta_log`
//!   and vector files are there: they are not pds's.

use std::collections::BTreeSet;

use crate::table::delta::deletion_vector::FILE_PREFIX;
use crate::table::delta::entry::vector_files;
use crate::table::delta::publish::log_object;
use crate::table::snapshot::{DataFile, TableManifest, TombstoneRef};

/// Add the vector files version `m` of `table` can name for the data
/// files `files`, whose tombstones are `tombstones` (those `m` lists
/// itself, or a segment's), to `keep`.
pub fn keep_vectors(
    m: &TableManifest,
    table: &str,
    files: &[DataFile],
    tombstones: &[TombstoneRef],
    keep: &mut BTreeSet<String>,
) {
    if m.formats.contains_key("delta") {
        keep.extend(vector_files(m, table, files, tombstones));
    }
}

/// `n`'s name inside `_delta_log`, if it is directly in it.
fn in_log(n: &str) -> Option<&str> {
    n.strip_prefix("_delta_log/").filter(|r| !r.contains('/'))
}

/// Add the log objects to keep to `keep` (see the module docs): `latest`
/// is the table's latest version, `oldest` the oldest version retained,
/// `names` every object under the table key (relative names).
pub fn keep_log<'a>(
    latest: &TableManifest,
    oldest: u64,
    names: impl Iterator<Item = &'a str>,
    keep: &mut BTreeSet<String>,
) {
    let names: Vec<&str> = names.collect();
    let publishing = latest.formats.contains_key("delta");
    let floor = names
        .iter()
        .filter_map(|n| log_object(in_log(n)?))
        .filter(|&(v, checkpoint)| checkpoint && v <= oldest)
        .map(|(v, _)| v)
        .max();
    for n in names {
        let vector = n.starts_with(FILE_PREFIX) && !n.contains('/');
        let Some(rel) = in_log(n) else {
            if vector && !publishing {
                keep.insert(n.to_string());
            }
            continue;
        };
        let old = match (publishing, floor, log_object(rel)) {
            (true, Some(floor), Some((v, _))) => v < floor,
            _ => false,
        };
        if !old {
            keep.insert(n.to_string());
        }
    }
}
