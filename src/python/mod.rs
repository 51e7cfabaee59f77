//! PyO3 bindings for `pds._core`: they convert types, release the GIL around
//! all I/O and encoding, and map errors. No logic lives here.

mod alloc;
mod dataset;
mod env;
mod errors;
mod logs;
mod occupancy;
mod parts;
mod producers;
mod progress;
mod py_store;
mod split_source;
mod split_stage;
mod store;
mod stream;
mod table;
mod table_version;
mod upgrade;

use std::future::Future;

use pyo3::prelude::*;

use errors::IntoPy;

/// Run a core future on the process runtime with the GIL released (see
/// [`detach`]).
pub(crate) fn run<T, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    T: Send,
    F: Future<Output = crate::error::Result<T>> + Send,
{
    detach(py, || crate::runtime::block_on(fut).and_then(|r| r))
}

/// Run core work with the GIL released. A panic in it (a pds bug) is
/// caught and raised as the typed internal error, never as a
/// `PanicException`, and the panic hook keeps its message off stderr.
pub(crate) fn detach<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> crate::error::Result<T> + Send,
{
    py.detach(|| crate::error::contain(crate::error::internal_panic, f))
        .py_err()
}

/// [`detach`] for work that already yields Python errors.
pub(crate) fn detach_py<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> PyResult<T> + Send,
{
    py.detach(|| crate::error::catch(f))
        .unwrap_or_else(|msg| Err(errors::to_py(crate::error::internal_panic(msg))))
}

/// Register every class and function of `pds._core`, after installing the
/// panic hook that keeps contained panics quiet and the bridge of log events
/// to Python's `logging` (once per process).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::error::install_panic_hook();
    alloc::install();
    logs::install(m.py())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(logs::reset_log_cache, m)?)?;
    m.add_class::<store::PyRustStore>()?;
    m.add_class::<progress::PyProgress>()?;
    m.add_function(wrap_pyfunction!(store::is_secret_option, m)?)?;
    m.add_function(wrap_pyfunction!(store::is_credential_option, m)?)?;
    m.add_class::<store::PyObjectMeta>()?;
    m.add_class::<store::PyPutResult>()?;
    m.add_class::<stream::PyBatchStream>()?;
    m.add_function(wrap_pyfunction!(dataset::write_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::write_parts, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::committed_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::read_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::read_schema, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::read_part, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::scan_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::scan_part, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::part_row_groups, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::delete_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(parts::decode_parts, m)?)?;
    m.add_function(wrap_pyfunction!(parts::codecs, m)?)?;
    m.add_function(wrap_pyfunction!(parts::part_schema, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::check_schema, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::dataset_claim, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::dataset_claim_check, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::dataset_claim_release, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::dataset_commit_parts, m)?)?;
    m.add_function(wrap_pyfunction!(occupancy::check_key_free, m)?)?;
    m.add_function(wrap_pyfunction!(occupancy::describe_key, m)?)?;
    m.add_function(wrap_pyfunction!(occupancy::kind_at, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::schema_from_ipc, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_create, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_sync_formats, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_enable_format, m)?)?;
    m.add_function(wrap_pyfunction!(table::same_logical_type, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_merge_schema, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_append, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_delete, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_upsert, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_replace, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_upsert_files, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_update, m)?)?;
    m.add_class::<table_version::PyTableVersion>()?;
    m.add_function(wrap_pyfunction!(table::table_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_manifest_dict, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_versions, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_files, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_scan, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_changes, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_compact, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_vacuum, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_drop, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_write_files, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_commit_files, m)?)?;
    m.add_class::<producers::PyStageRun>()?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_stage_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_assign, m)?)?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_prefix_spans, m)?)?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_key_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_range_lows, m)?)?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_reduce_range, m)?)?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_stitch_stage, m)?)?;
    m.add_function(wrap_pyfunction!(split_stage::pipeline_key_samples, m)?)?;
    m.add_function(wrap_pyfunction!(
        split_stage::pipeline_ranges_from_samples,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(split_source::pipeline_source_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(
        split_source::pipeline_apply_source_range,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(split_source::pipeline_stitch_source, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_check_changes, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_apply_source, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_merge_update, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_compact_node, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_read, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_read_batches, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_update, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_latest, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_version, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_commit, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_create, m)?)?;
    m.add_function(wrap_pyfunction!(producers::pipeline_vacuum, m)?)?;
    upgrade::register(m)?;
    Ok(())
}
