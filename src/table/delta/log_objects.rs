//! Objects of a table's Delta log (entries, checkpoints' deletion
//! vectors) written create-only: one that exists already is accepted only
//! if it holds exactly the bytes pds would write, else it is a commit pds
//! did not make.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::store::StoreHandle;

/// How many deletion-vector PUTs run at once.
const VECTOR_PUTS: usize = 16;

/// Write `files` (relative to `table`), create-only and a few at once,
/// each accepted if it holds exactly its bytes already (see [`own`]).
pub(crate) async fn own_vectors(
    store: &StoreHandle,
    table: &str,
    files: &[super::entry::DvFile],
    v: u64,
) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let root = table.trim_end_matches('/');
    futures::stream::iter(files.iter().map(|f| {
        let key = format!("{root}/{}", f.path);
        async move { own(store, &key, &f.bytes, table, v).await }
    }))
    .buffer_unordered(VECTOR_PUTS)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// Create `key` with `bytes`, or accept it holding exactly them.
pub(crate) async fn own(
    store: &StoreHandle,
    key: &str,
    bytes: &[u8],
    table: &str,
    v: u64,
) -> Result<()> {
    match store
        .put_create_own(key, Bytes::copy_from_slice(bytes))
        .await
    {
        Ok(_) => Ok(()),
        Err(Error::AlreadyExists { .. }) => {
            let rel = key
                .strip_prefix(table.trim_end_matches('/'))
                .map_or(key, |r| r.trim_start_matches('/'));
            Err(foreign(
                table,
                rel,
                &format!("that differs from pds's version {v}"),
            ))
        }
        Err(e) => Err(e),
    }
}

/// A log object pds did not write (`path`: relative to the table).
pub(crate) fn foreign(table: &str, path: &str, what: &str) -> Error {
    Error::ManifestCorrupted {
        path: format!("{}/{path}", table.trim_end_matches('/')),
        reason: format!(
            "a Delta log object {what}: a commit pds did not make (other writers must not write to a pds table's Delta view)"
        ),
    }
}
