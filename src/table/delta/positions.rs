//! A data file's deleted rows as row positions, whichever tombstone kinds
//! removed them: what a Delta deletion vector carries.
//!
//! - `rows` entries are positions already.
//! - `row_group` entries become every position of the row group, from the
//!   file's footer (its row groups' row counts).
//! - `pk_range` entries become the positions whose key lies in the range:
//!   the file's key column is read and each range's predicate (the one a
//!   scan excludes rows by) evaluated on it, so the positions are the rows a
//!   scan drops.
//!
//! Positions count from 0 over the whole file, in the file's row order.

use std::collections::{BTreeMap, BTreeSet};

use roaring::RoaringBitmap;

use crate::error::{Error, Result};
use crate::parquet::decode::{self, ReadOptions};
use crate::parquet::part_ref;
use crate::store::StoreHandle;
use crate::table::scan::pk_predicate;
use crate::table::snapshot::{DataFile, TableManifest};
use crate::table::tombstone::{self, FileDeletes};

/// The positions of `file`'s rows that `deletes` removes. Cost: nothing
/// for positions alone; the file's footer (cached, or one GET) for whole
/// row groups or key ranges; and for key ranges, the key column's chunks.
/// `at`: the manifest's key, for errors. Positions past `u32::MAX` (a file
/// of more than 4 billion rows, which pds's tombstones cannot hold either)
/// are `ManifestCorrupted`.
pub async fn deleted_positions(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    file: &DataFile,
    deletes: &FileDeletes,
    at: &str,
) -> Result<RoaringBitmap> {
    let too_many = || Error::ManifestCorrupted {
        path: at.to_string(),
        reason: format!("{} has more rows than deletion vectors address", file.path),
    };
    let mut out = deletes.rows.clone();
    if deletes.row_groups.is_empty() && deletes.pk_ranges.is_empty() {
        return Ok(out);
    }
    let part = file.part_ref(table);
    let footer = part_ref::footer(store, &part).await?;
    let group_rows = footer.row_group_rows();
    let starts = decode::group_starts(&group_rows);
    for &rg in &deletes.row_groups {
        let found = usize::try_from(rg)
            .ok()
            .and_then(|i| Some((*starts.get(i)?, *group_rows.get(i)?)));
        let Some((start, rows)) = found else {
            return Err(Error::ManifestCorrupted {
                path: at.to_string(),
                reason: format!(
                    "a tombstone deletes row group {rg} of {}, which has {} row groups",
                    file.path,
                    group_rows.len()
                ),
            });
        };
        let lo = u32::try_from(start).map_err(|_| too_many())?;
        let hi = u32::try_from(start.saturating_add(rows)).map_err(|_| too_many())?;
        out.insert_range(lo..hi);
    }
    if deletes.pk_ranges.is_empty() {
        return Ok(out);
    }
    let Some(pk) = &manifest.properties.primary_key else {
        return Err(Error::ManifestCorrupted {
            path: at.to_string(),
            reason: format!(
                "a tombstone deletes a key range of {}, but the table has no primary key",
                file.path
            ),
        });
    };
    let file_schema = manifest.file_schema(file, at)?;
    let mut excluded = Vec::new();
    for range in &deletes.pk_ranges {
        if let Some(p) = pk_predicate(pk, range, &file_schema)? {
            excluded.push(p.bind(&file_schema)?);
        }
    }
    if excluded.is_empty() {
        return Ok(out); // the file has no key column: no key lies in a range
    }
    let opts = ReadOptions {
        columns: Some(vec![pk.clone()]),
        expected: Some(file_schema.clone()),
        ..Default::default()
    };
    let mut rows = part_ref::open(store, &part, &opts).await?;
    let mut offset = 0u32;
    while let Some(batch) = rows.next_batch().await {
        let batch = batch?;
        for p in &excluded {
            let mask = p.evaluate(&batch).map_err(|e| Error::Task(e.to_string()))?;
            for (i, hit) in mask.iter().enumerate() {
                if hit == Some(true) {
                    let i = u32::try_from(i).map_err(|_| too_many())?;
                    out.insert(offset.checked_add(i).ok_or_else(too_many)?);
                }
            }
        }
        let n = u32::try_from(batch.num_rows()).map_err(|_| too_many())?;
        offset = offset.checked_add(n).ok_or_else(too_many)?;
    }
    Ok(out)
}

/// Those of `files` (data files of `manifest`'s version, a full view)
/// that have deleted rows, with their positions, by path. Cost: the
/// tombstones that apply to them (cached, or one GET each), then
/// [`deleted_positions`] per file.
pub async fn version_positions(
    store: &StoreHandle,
    table: &str,
    manifest: &TableManifest,
    files: &[&DataFile],
    at: &str,
) -> Result<BTreeMap<String, RoaringBitmap>> {
    let wanted: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let deletes = tombstone::deletes_of(store, table, manifest, |f| wanted.contains(f)).await?;
    let mut out = BTreeMap::new();
    for file in files {
        let Some(d) = deletes.get(&file.path) else {
            continue;
        };
        let positions = deleted_positions(store, table, manifest, file, d, at).await?;
        if !positions.is_empty() {
            out.insert(file.path.clone(), positions);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::scan::{resolve, At};
    use crate::table::tests::{append_ids, counting_store, create_keyed, ids};
    use crate::table::tombstone::Entry;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    /// After deletes of every tombstone kind, the rows of each data file
    /// outside its deleted positions are exactly the rows a scan returns.
    #[test]
    fn positions_drop_what_a_scan_drops_for_every_tombstone_kind() {
        let (store, _) = counting_store();
        create_keyed(&store, 0..1000); // row groups of 100 rows
        append_ids(&store, 1000..2000).unwrap();
        crate::table::delta::test_tables::delete_every_kind(&store);
        let m = crate::runtime::block_on(resolve(&store, "t", At::Latest))
            .unwrap()
            .unwrap();
        // Every kind is there to convert.
        let tombstones = crate::runtime::block_on(tombstone::load_scoped(
            &store,
            "t",
            m.version,
            &m.tombstones,
            None,
        ))
        .unwrap()
        .unwrap();
        let kinds: std::collections::BTreeSet<&str> = tombstones
            .iter()
            .flat_map(|t| t.entries.iter())
            .map(|e| match e {
                Entry::RowGroup { .. } => "row_group",
                Entry::PkRange { .. } => "pk_range",
                Entry::Rows { .. } => "rows",
            })
            .collect();
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            ["pk_range", "row_group", "rows"]
        );
        let all: Vec<&DataFile> = m.data_files.iter().collect();
        let deleted =
            crate::runtime::block_on(version_positions(&store, "t", &m, &all, "t/manifest"))
                .unwrap()
                .unwrap();
        let mut kept = Vec::new();
        for file in &m.data_files {
            let opts = ReadOptions {
                columns: Some(vec!["id".into()]),
                ..Default::default()
            };
            let read = crate::runtime::block_on(part_ref::read(&store, &file.part_ref("t"), &opts))
                .unwrap()
                .unwrap();
            let all: Vec<i64> = read
                .batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            let gone = deleted.get(&file.path).cloned().unwrap_or_default();
            assert!(
                gone.max().is_none_or(|p| (p as usize) < all.len()),
                "{}",
                file.path
            );
            kept.extend(
                all.iter()
                    .enumerate()
                    .filter(|(i, _)| !gone.contains(*i as u32))
                    .map(|(_, id)| *id),
            );
        }
        kept.sort_unstable();
        assert_eq!(kept, ids(&store, At::Latest, None));
        assert!(kept.len() < 2000 && !kept.is_empty());
    }
}
