//! The on-disk formats, as plain serde types: what each JSON object pds
//! writes holds, in one place (as iceberg-rust's `spec`). Their behaviour
//! (reading, checking, building) lives with each layer, which re-exports
//! them; the format documents are `docs/concepts/format-*.md`.

pub mod dataset;
pub mod pipeline;
pub mod table;
