//! A table's identity: an id drawn when the table is created, carried by its
//! pointer and by every manifest it commits.
//!
//! A key may hold one table, be dropped, and hold another: their version
//! manifests share names (`manifest/v00000000.json`, ...). The id tells
//! them apart, so that
//!
//! - a store handle's cache of manifest bodies is used only for the table
//!   it came from (a pointer read that shows another id forgets every body
//!   cached under the key; see [`super::versions::latest_at`]);
//! - a commit never builds on another table's state: every attempt of one
//!   commit builds on the table its first attempt read, and a caller that
//!   opened a table (a Python `Table`) commits only to that table
//!   ([`expecting`]). A commit that finds the table dropped, or another one
//!   at its key, fails with `NotFound` saying so, before it writes.
//!
//! Tables created by earlier pds have no id (`None`): they keep working,
//! and a table re-created under their key (which gets an id) is told apart
//! from them; two id-less tables at one key are not. An id-less pointer or
//! manifest is "unknown", never "another table": an earlier pds writing to
//! a table drops its id (it does not know the field), and such a version
//! is taken as the same table (see [`differ`]).

use std::cell::RefCell;

use crate::error::Error;

/// The longest id a pointer or manifest may hold.
const MAX_LEN: usize = 64;

/// A fresh table id.
pub fn new_table_id() -> String {
    crate::dataset::unique_token()
}

/// Whether `id` can be a table id (as read from the store: untrusted).
pub fn check(id: &str) -> std::result::Result<(), String> {
    if id.is_empty()
        || id.len() > MAX_LEN
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!("table_id {id:?} is not a table id"));
    }
    Ok(())
}

/// Whether `a` and `b` are known to be two tables: both have an id, and the
/// ids differ.
pub fn differ(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((a, b), (Some(x), Some(y)) if x != y)
}

thread_local! {
    /// The table the caller on this thread opened (see [`expecting`]).
    static EXPECTED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Run `f` (a table operation, on this thread) committing only to the table
/// whose id is `id` (`None`: to whatever table is at the key). The commit
/// loop checks the table it builds on against it.
pub fn expecting<T>(id: Option<&str>, f: impl FnOnce() -> T) -> T {
    let before = EXPECTED.with(|e| e.replace(id.map(str::to_string)));
    let out = f();
    EXPECTED.with(|e| *e.borrow_mut() = before);
    out
}

/// The id [`expecting`] set for this thread.
pub fn expected() -> Option<String> {
    EXPECTED.with(|e| e.borrow().clone())
}

/// The error of a commit or read whose table is gone from `key`: `found`
/// is the id of the table there now (`Some(None)`: one of earlier pds),
/// `None` if no table is there.
pub fn gone(key: &str, opened: Option<&str>, found: Option<Option<&str>>) -> Error {
    let opened = opened.map_or_else(String::new, |id| format!(" (id {id})"));
    let reason = match found {
        None => format!("the table this handle opened{opened} was dropped; nothing was committed"),
        Some(now) => format!(
            "the table this handle opened{opened} was dropped, and another table{} was \
             created at its key; nothing was committed. Open the table again to use the \
             new one",
            now.map_or_else(String::new, |id| format!(" (id {id})"))
        ),
    };
    Error::OtherKind {
        path: key.trim_end_matches('/').to_string(),
        reason,
    }
}
