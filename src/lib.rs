//! pds: Parquet datasets on any object store.
//!
//! The core is plain Rust (no PyO3): `cargo test` and `cargo bench` need no
//! Python. The `python` feature adds the `pds._core` extension module, whose
//! bindings live in `python/` and only convert types, release the GIL and map
//! errors.

pub mod chunk_crc;
pub mod dataset;
pub mod decode;
pub mod encode;
pub mod error;
pub mod filter;
pub mod manifest;
pub mod part_schema;
pub mod parts;
pub mod range_reader;
pub mod runtime;
pub mod scan;
pub mod split;
pub mod storage_types;
pub mod store;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, Result};

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _core(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    python::register(m)
}
