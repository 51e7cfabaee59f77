//! Delta checkpoints: one version's whole state (protocol, metadata and an
//! `add` per live data file, with its deletion vector) as a Parquet file,
//! `_delta_log/<version:020>.checkpoint.parquet`, and the
//! `_delta_log/_last_checkpoint` hint that points readers at the newest.
//!
//! A reader opens a table from its newest checkpoint and the entries after
//! it, so opening does not grow with the history. A table whose view was
//! enabled after its creation starts with a checkpoint (no entries before).
//!
//! The rows are the actions of [`entry`] for the version alone (without
//! its `commitInfo`), decoded into the checkpoint schema by arrow-json, one
//! action per row. The file is a function of the version, so a checkpoint
//! another process wrote is accepted as it is.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::error::{Error, Result};
use crate::store::{PutMode, StoreHandle};
use crate::table::delta::actions::Action;
use crate::table::delta::entry::{entry_actions, DvFile};
use crate::table::snapshot::TableManifest;

/// A checkpoint's object key, relative to the table key.
pub fn checkpoint_path(version: u64) -> String {
    format!("_delta_log/{version:020}.checkpoint.parquet")
}

/// The hint naming the newest checkpoint, relative to the table key.
pub const LAST_CHECKPOINT: &str = "_delta_log/_last_checkpoint";

/// A checkpoint's Parquet bytes, the deletion-vector files its `add`s name,
/// and its row count (one action per row).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub version: u64,
    pub bytes: Vec<u8>,
    pub dv_files: Vec<DvFile>,
    pub rows: usize,
    pub adds: usize,
}

/// The checkpoint of version `m` of `table` (`at`: its manifest key, for
/// errors). Cost: the segments of `m` not loaded yet, and the tombstones
/// and key columns its deletion vectors need.
pub async fn checkpoint(
    store: &StoreHandle,
    table: &str,
    m: &TableManifest,
    at: &str,
) -> Result<Checkpoint> {
    // The whole file list (a root or a pruned view loads the rest).
    let whole;
    let m = if m.layout.view == crate::table::snapshot::View::Full {
        m
    } else {
        let mut all = m.clone();
        all.load_all(store, table).await?;
        whole = all;
        &whole
    };
    let (mut actions, dv_files) = entry_actions(store, table, None, m, at).await?;
    actions.retain(|a| !matches!(a, Action::CommitInfo(_)));
    let adds = actions
        .iter()
        .filter(|a| matches!(a, Action::Add(_)))
        .count();
    Ok(Checkpoint {
        version: m.version,
        bytes: parquet_bytes(&actions)?,
        dv_files,
        rows: actions.len(),
        adds,
    })
}

/// `actions` as a checkpoint file: one row each, in [`schema`].
pub fn parquet_bytes(actions: &[Action]) -> Result<Vec<u8>> {
    let schema = schema();
    let bad = |e: &dyn std::fmt::Display| Error::Task(format!("a Delta checkpoint: {e}"));
    let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
        .with_batch_size(actions.len().max(1))
        .with_strict_mode(true)
        .build_decoder()
        .map_err(|e| bad(&e))?;
    decoder.serialize(actions).map_err(|e| bad(&e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props)).map_err(|e| bad(&e))?;
    while let Some(batch) = decoder.flush().map_err(|e| bad(&e))? {
        writer.write(&batch).map_err(|e| bad(&e))?;
    }
    writer.close().map_err(|e| bad(&e))?;
    Ok(out)
}

/// Write the checkpoint of version `m` (the vector files first, each
/// create-only, then the checkpoint; either found there already is
/// accepted), then point `_last_checkpoint` at it unless it names a newer
/// one (`newest`: the newest checkpoint the log was listed with).
pub async fn write_checkpoint(
    store: &StoreHandle,
    table: &str,
    m: &TableManifest,
    newest: Option<u64>,
) -> Result<()> {
    let at = crate::table::manifest_key(table, m.version);
    let c = checkpoint(store, table, m, &at).await?;
    let root = table.trim_end_matches('/');
    super::log_objects::own_vectors(store, table, &c.dv_files, m.version).await?;
    let key = format!("{root}/{}", checkpoint_path(m.version));
    let size = c.bytes.len();
    match store.put(&key, Bytes::from(c.bytes), PutMode::Create).await {
        Ok(_) | Err(Error::AlreadyExists { .. }) => {}
        Err(e) => return Err(e),
    }
    if newest.is_some_and(|n| n > m.version) {
        return Ok(());
    }
    let hint = serde_json::json!({
        "version": m.version,
        "size": c.rows,
        "sizeInBytes": size,
        "numOfAddFiles": c.adds,
    });
    store
        .put(
            &format!("{root}/{LAST_CHECKPOINT}"),
            Bytes::from(hint.to_string().into_bytes()),
            PutMode::Overwrite,
        )
        .await?;
    Ok(())
}

/// The checkpoint schema: a struct column per action kind, the one the
/// row holds set and the others null.
pub fn schema() -> SchemaRef {
    let text = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
    let long = |name: &str, nullable: bool| Field::new(name, DataType::Int64, nullable);
    let flag = |name: &str, nullable: bool| Field::new(name, DataType::Boolean, nullable);
    let map = |name: &str, nullable: bool| {
        let entries = Field::new(
            "key_value",
            DataType::Struct(Fields::from(vec![text("key", false), text("value", true)])),
            false,
        );
        Field::new(name, DataType::Map(Arc::new(entries), false), nullable)
    };
    let list = |name: &str, nullable: bool| {
        Field::new(
            name,
            DataType::List(Arc::new(Field::new("element", DataType::Utf8, false))),
            nullable,
        )
    };
    let strukt = |name: &str, fields: Vec<Field>, nullable: bool| {
        Field::new(name, DataType::Struct(Fields::from(fields)), nullable)
    };
    let dv = || {
        strukt(
            "deletionVector",
            vec![
                text("storageType", false),
                text("pathOrInlineDv", false),
                Field::new("offset", DataType::Int32, true),
                Field::new("sizeInBytes", DataType::Int32, false),
                long("cardinality", false),
            ],
            true,
        )
    };
    Arc::new(Schema::new(vec![
        strukt(
            "txn",
            vec![
                text("appId", false),
                long("version", false),
                long("lastUpdated", true),
            ],
            true,
        ),
        strukt(
            "add",
            vec![
                text("path", false),
                map("partitionValues", false),
                long("size", false),
                long("modificationTime", false),
                flag("dataChange", false),
                text("stats", true),
                dv(),
            ],
            true,
        ),
        strukt(
            "remove",
            vec![
                text("path", false),
                long("deletionTimestamp", true),
                flag("dataChange", false),
                flag("extendedFileMetadata", true),
                map("partitionValues", true),
                long("size", true),
                dv(),
            ],
            true,
        ),
        strukt(
            "metaData",
            vec![
                text("id", false),
                text("name", true),
                text("description", true),
                strukt(
                    "format",
                    vec![text("provider", false), map("options", false)],
                    false,
                ),
                text("schemaString", false),
                list("partitionColumns", false),
                long("createdTime", true),
                map("configuration", false),
            ],
            true,
        ),
        strukt(
            "protocol",
            vec![
                Field::new("minReaderVersion", DataType::Int32, false),
                Field::new("minWriterVersion", DataType::Int32, false),
                list("readerFeatures", true),
                list("writerFeatures", true),
            ],
            true,
        ),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::delta::entry::entry;
    use crate::table::scan::{resolve, At};
    use crate::table::tests::{append_ids, counting_store, create_keyed};
    use arrow_array::{Array, StructArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// A checkpoint holds the protocol, the metadata and an `add` per data
    /// file, each with the deletion vector the version's lone entry gives
    /// it, one action per row; twice the same bytes.
    #[test]
    fn a_checkpoint_is_the_versions_whole_state_one_action_per_row() {
        let (store, _) = counting_store();
        create_keyed(&store, 0..1000);
        append_ids(&store, 1000..2000).unwrap();
        crate::table::delta::test_tables::delete_every_kind(&store);
        let m = crate::runtime::block_on(resolve(&store, "t", At::Latest))
            .unwrap()
            .unwrap();
        let c = crate::runtime::block_on(checkpoint(&store, "t", &m, "t/m"))
            .unwrap()
            .unwrap();
        let again = crate::runtime::block_on(checkpoint(&store, "t", &m, "t/m"))
            .unwrap()
            .unwrap();
        assert_eq!(c.bytes, again.bytes);
        let whole = crate::runtime::block_on(entry(&store, "t", None, &m, "t/m"))
            .unwrap()
            .unwrap();
        assert_eq!(c.dv_files, whole.dv_files);
        assert!(!c.dv_files.is_empty());
        assert_eq!(
            (c.rows, c.adds),
            (2 + m.data_files.len(), m.data_files.len())
        );

        let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(c.bytes))
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
        let batch = arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap();
        assert_eq!(batch.num_rows(), c.rows);
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_any()
                .downcast_ref::<StructArray>()
                .unwrap()
                .clone()
        };
        let set = |name: &str| column(name).len() - column(name).null_count();
        assert_eq!(
            (
                set("protocol"),
                set("metaData"),
                set("add"),
                set("remove"),
                set("txn")
            ),
            (1, 1, c.adds, 0, 0)
        );
        // Every row holds exactly one action.
        for row in 0..batch.num_rows() {
            let held = ["txn", "add", "remove", "metaData", "protocol"]
                .iter()
                .filter(|n| column(n).is_valid(row))
                .count();
            assert_eq!(held, 1, "row {row}");
        }
        let add = column("add");
        let dv = add
            .column_by_name("deletionVector")
            .unwrap()
            .as_any()
            .downcast_ref::<StructArray>()
            .unwrap()
            .clone();
        let with_vector = (0..batch.num_rows())
            .filter(|&r| add.is_valid(r) && dv.is_valid(r))
            .count();
        assert_eq!(with_vector, c.dv_files.len());
    }
}
