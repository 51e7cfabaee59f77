//! The formats a table publishes beside its own (see [`super::delta`]):
//! which exist, and what a table's schema must allow. Enabling one on an
//! existing table is [`super::enable_format`]'s.

use crate::error::{Error, Result};
use crate::table::snapshot::TableManifest;

/// The formats pds can publish beside a table's own.
pub const FORMATS: &[&str] = &["delta"];

/// `InvalidArgument` for a format pds does not publish; for `delta`,
/// `UnsupportedType` naming a column of `schema` with no exact Delta type.
/// No I/O.
pub fn check(formats: &[String], schema: &arrow_schema::Schema) -> Result<()> {
    for f in formats {
        known(f)?;
    }
    if formats.iter().any(|f| f == "delta") {
        super::delta::schema::delta_schema(schema)?;
    }
    Ok(())
}

/// `InvalidArgument` unless pds publishes `format`.
pub(super) fn known(format: &str) -> Result<()> {
    if FORMATS.contains(&format) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "unknown format {format:?}; pds publishes {FORMATS:?}"
    )))
}

/// [`check`] for the formats a table's version `m` publishes, against the
/// schema a commit is about to give it (a schema-merge append).
pub fn check_publishable(m: &TableManifest, schema: &arrow_schema::Schema) -> Result<()> {
    let names: Vec<String> = m.formats.keys().cloned().collect();
    check(&names, schema)
}
