//! The Parquet machinery every layer shares: Arrow to Parquet and back, range
//! reads from an object store, row filters, cutting streams into parts, the
//! column-chunk checksums, and the checks a part's schema must pass.
//!
//! Nothing here knows about datasets, manifests or commits.

pub mod chunk_crc;
pub mod decode;
pub mod dictionary_choice;
pub mod encode;
pub mod filter;
pub mod part_ref;
pub mod part_schema;
pub mod parts;
pub mod range_reader;
pub mod read_ahead;
pub mod scan;
pub mod seek;
pub mod split;
pub mod stats;
pub mod storage_types;
pub mod value_set;
