//! The dataset protocol of RFC-0008 on an object store:
//! parts, then `manifest.json`, then `_SUCCESS`; and the checked read.
//!
//! Writing streams: each part is encoded on a blocking thread while it fills,
//! and its bytes are uploaded as they are produced (a single PUT for small
//! parts, a multipart upload for large ones; both complete atomically). At
//! most `parallelism` parts are in flight, so memory is bounded by row group
//! size x parallelism, not by dataset size. If anything fails, no manifest and
//! no `_SUCCESS` are written, and the parts that did land are removed.
//!
//! **One writer per key.** RFC-0008's part names are fixed (`data.parquet`,
//! `part-NNNNN.parquet`), so two writers of one key would write the same
//! objects. The protocol below keeps them for a first write and still
//! guarantees: a writer told ok keeps exactly its rows until a later write
//! replaces them whole; of writers racing on one key (with or without
//! `overwrite`), one commits its rows or none does; a reader never gets a
//! mix; and an overwrite of a committed dataset is atomic: readers see the
//! old dataset until the new one is committed, never none, and an
//! overwrite that fails or is killed leaves the old one as it was.
//!
//! 1. **Claim.** A writer creates `_WRITING` under the key holding a token
//!    of its own: create-only (If-None-Match) without `overwrite`, so a
//!    second writer gets `AlreadyExists` before it writes anything; an
//!    overwrite replaces it, so the writer it took the key from fails at
//!    its next check. A create whose reply was lost reads the claim back
//!    and recognises its own token.
//! 2. **Clear**, where no dataset is committed (no `_SUCCESS`; an overwrite
//!    reads the committed manifest first, and skips this step if there is
//!    one: see **Replace** below). Holding the claim, the writer removes
//!    every object of the dataset layout under the key but the claim: what
//!    a failed or killed writer left (parts, a manifest).
//! 3. **Parts** are created create-only: a late part of a writer that lost
//!    the key can never replace a part of the holder. A part larger than
//!    one chunk goes up as a multipart upload, which object stores cannot
//!    make create-only: it is completed only after the claim is checked and
//!    its name found free.
//! 4. **Commit.** With the claim checked once more, `manifest.json` and then
//!    the empty `_SUCCESS` are created create-only. A create refused after a
//!    lost reply is recognised as the writer's own: the manifest by its
//!    bytes, `_SUCCESS` by the manifest under it being the writer's.
//! 5. **Check.** One LIST then confirms that every part and the manifest
//!    are still the objects this writer created (size and ETag as their
//!    PUTs reported them). If another writer's request landed in between,
//!    the writer withdraws its `_SUCCESS` and fails with `ClaimLost`:
//!    it is told ok only for a dataset that is exactly its own.
//!
//! **Replace.** An overwrite that finds a committed dataset (its manifest
//! read as a reader reads it, below, with the manifest's ETag / version)
//! removes nothing before it commits (`commit::write_replacing`):
//!
//! - its parts are named for this write alone,
//!   `part-<12 random hex>-NNNNN.parquet` (as Spark writes name theirs), so
//!   they never collide with the committed dataset's or another writer's;
//! - the commit is one compare-and-swap of `manifest.json` (If-Match the
//!   ETag read; every store pds supports decides it, `file://` through
//!   `store::local_cas`), after a claim check; `_SUCCESS` is there before and
//!   after. A swap refused after a lost reply is recognised as the writer's
//!   own by the manifest's bytes; refused otherwise, another writer committed
//!   first: this write removes its parts and fails with `AlreadyExists`;
//! - one LIST then confirms that the parts are still this writer's objects
//!   (if the manifest there is no longer this writer's, a later write
//!   replaced it whole, and this one committed); if one was replaced, the
//!   manifest is swapped back and the write fails with `ClaimLost`;
//! - then the claim is checked and the objects of the dataset layout that
//!   LIST found, but the new parts, the manifest, `_SUCCESS` and the claim,
//!   are deleted: the replaced dataset's parts and debris of killed
//!   writers. A writer that took the key after that check wrote its parts
//!   after the LIST, so none of them is deleted. Without the claim the
//!   cleanup is skipped (a later overwrite removes what is left).
//!
//! A killed overwrite leaves its parts and its claim beside the committed
//! dataset, which is unchanged. Old pds versions and remote-store read a
//! dataset written this way: the manifest's format is the same, and parts
//! are read by the names it lists.
//!
//! **Reading.** A dataset is committed while `_SUCCESS` is there: the
//! manifest under it then is the committed one. A reader needs a moment at
//! which both held, and two requests sent together cannot give one: a HEAD
//! of `_SUCCESS` answered before a delete withdrew it and a GET of
//! `manifest.json` answered after a new write created its own (but not
//! yet its `_SUCCESS`, which may never come: the writer fails or is killed)
//! would pair the old marker with a manifest never committed. So
//! [`read_committed_manifest`] asks in sequence: GET `manifest.json` (at
//! t1), HEAD `_SUCCESS` (t2), HEAD `manifest.json` (t3), and takes the
//! manifest if `_SUCCESS` was there at t2 and the manifest at t3 is the
//! object read at t1. Then the manifest was there throughout [t1, t3]: it
//! changes only by being created anew (after a delete) or swapped in place
//! by an overwrite, and either way the new one is another object (another
//! ETag; where a store gives no ETag, other bytes: every manifest records
//! its write's time to the microsecond). So at t2 both were there, and a
//! manifest swapped in place is committed the moment it lands, `_SUCCESS`
//! being there already. (A swap back to the old bytes, after a failed
//! check, may give the old ETag again: the manifest read is then the old
//! committed one, whose parts are untouched until a cleanup.) Comparing
//! `_SUCCESS` instead cannot work: it is empty, so its ETag is the same for
//! every commit, and its Last-Modified has a resolution of one second on
//! S3, where several commits fit. Anything else is asked again, a few
//! times with a pause: no `_SUCCESS` at t2 is `DatasetIncomplete` (no
//! dataset is committed at t2: a first write in progress, or one deleted);
//! `_SUCCESS` without a manifest at t1, or a manifest replaced by t3, is a
//! commit meanwhile.
//!
//! A reader that took the replaced manifest may find its parts deleted by
//! the overwrite's cleanup: [`read_dataset`] then reads the manifest again
//! and starts over once from the new one; a streamed read ([`scan`]) that
//! already handed out batches fails with `DatasetIncomplete` instead of
//! repeating rows.
//!
//! A writer killed mid-write leaves its claim: later `overwrite=False`
//! writes refuse the key until `delete_dataset` or an `overwrite=True`
//! write clears it. A writer that lost the key never deletes anything
//! there but the parts it named for itself (the other names may now be
//! the new holder's).

// The files: `claim` (the writer's `_WRITING`), `parts` (parts encoded and
// uploaded, not committed), `commit` (the write: steps 1 to 5 and
// **Replace**), `open` (the committed manifest a reader takes), `read` (a
// whole read), `scan` (a streamed read), `manifest` (its format), `chunks`
// (upload buffers).
mod chunks;
mod claim;
mod commit;
pub mod manifest;
mod open;
mod parts;
mod read;
pub mod scan;
#[cfg(test)]
mod tests;

pub use claim::{unique_token, Claim};
use commit::own_objects;
pub use commit::{commit_parts, write_dataset};
pub use open::{
    expected_schema, missing_parts, open_dataset, part_missing, read_committed_manifest,
    read_manifest, vanished,
};
pub use parts::{
    build_manifest, manifest_of, uploads_per_part, write_parts, WriteRequest, WrittenParts,
};
pub use read::{read_dataset, read_schema, verify_bytes};

use crate::error::Result;
use crate::store::occupancy;
use crate::store::StoreHandle;

/// The commit marker, written last.
pub const SUCCESS: &str = occupancy::SUCCESS;
/// The manifest, written after every part.
pub const MANIFEST: &str = occupancy::DATASET_MANIFEST;
/// The writer's claim on a key, present while a write runs (see the module docs).
pub const WRITING: &str = occupancy::WRITING;

/// Join a dataset key and a file name.
pub fn child_key(dataset_key: &str, name: &str) -> String {
    format!("{}/{}", dataset_key.trim_end_matches('/'), name)
}

/// The keys of parts `names` under `location`.
fn part_keys(location: &str, names: &[String]) -> Vec<String> {
    names.iter().map(|n| child_key(location, n)).collect()
}

/// An ETag without its weak prefix and quotes (stores differ in both).
fn normal_e_tag(tag: &str) -> &str {
    tag.trim_start_matches("W/").trim_matches('"')
}

/// Whether `name`, directly under a dataset key, is one of the dataset's
/// own objects: the commit marker, the manifest, the writer's claim, and
/// the parts (`data.parquet`, `part-*.parquet`). Anything else, and
/// anything in a sub-folder (another dataset, table or pipeline), is not.
pub fn is_own_object(name: &str) -> bool {
    matches!(name, SUCCESS | MANIFEST | WRITING | "data.parquet")
        || (name.starts_with("part-") && name.ends_with(".parquet") && !name.contains('/'))
}

/// Delete the dataset at `dataset_key`: its own objects only (see
/// [`is_own_object`]), never a key nested below it. `_SUCCESS` goes first,
/// so that a reader racing the delete sees `DatasetIncomplete`, never a
/// dataset with parts missing, and again last, in case a writer committed
/// meanwhile. On `file://`, the staging files of its killed uploads go too,
/// and the folder if it is left empty.
///
/// Cost: 1 LIST (one level), 1 DELETE per object (batched where the store
/// can), 2 more for `_SUCCESS`.
pub async fn delete_own(store: &StoreHandle, dataset_key: &str) -> Result<()> {
    crate::store::keys::object_segments(dataset_key)?;
    let marker = child_key(dataset_key, SUCCESS);
    store.delete(&marker).await?;
    let own = own_objects(store, dataset_key, &[SUCCESS]).await?;
    store.delete_many(&own).await?;
    store.delete(&marker).await?;
    let owns = |rel: &str, folder: bool| !folder && is_own_object(rel);
    store.remove_staging(dataset_key, None, owns, true).await?;
    Ok(())
}
