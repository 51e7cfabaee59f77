//! Reading only the pages of a part that may hold some values of one
//! column: a lookup seeks instead of scanning.
//!
//! Parts written with page statistics on a column (see
//! [`crate::parquet::encode::EncodeOptions::page_index`]) carry a column
//! index (each page's min and max of that column) and an offset index
//! (where each page starts, and its first row). A lookup reads the footer
//! with both, keeps the pages whose `[min, max]` holds a wanted value, and
//! fetches only those pages of the projected columns (plus their
//! dictionary pages), each checked against the CRC-32 pds recorded for it.
//! A part without a page index for the column is read whole (its column
//! chunks checked as any read checks them).
//!
//! Like a part's footer, its page index is not covered by a checksum: a
//! damaged index that passes the decoder's checks can hide rows from a
//! lookup. `verify=True` reads (the whole file against the manifest's
//! SHA-256) remain the check for that.

use arrow_array::{Array, ArrayRef};
use arrow_row::{RowConverter, SortField};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, RowSelection, RowSelector};

use crate::error::{contain, Error, Result};
use crate::parquet::decode::{
    open_part_with, read_footer_and_page_index, read_footer_and_page_index_checked, Decoded,
    ReadOptions,
};
use crate::store::StoreHandle;

/// Read the rows of the part at `key` (`size` bytes) that lie in pages
/// whose values of `column` may include one of `values` (any order,
/// repeats allowed), as `opts` asks (its projection and schema check; no
/// positions or row groups). Every row equal to a wanted value is among
/// them, in file order; others of the same pages come too. `file_rows` is
/// the whole file's. `None` (nothing read but the footer) where the part
/// has no page index for `column`, or where those pages hold more than
/// half of its rows: the caller reads it whole, in one request. With
/// `tail` (the length and CRC-32 of the part's page index and footer, as
/// its manifest records them), those bytes are checked before they are
/// parsed: the pages read are chosen by them, and no whole-file checksum
/// covers a read of some pages.
pub async fn read_pages_holding(
    store: &StoreHandle,
    key: &str,
    size: u64,
    tail: Option<(u64, u32)>,
    opts: &ReadOptions,
    column: &str,
    values: &ArrayRef,
) -> Result<Option<Decoded>> {
    let footer = match tail {
        Some(tail) => read_footer_and_page_index_checked(store, key, size, tail).await?,
        None => read_footer_and_page_index(store, key, size, None).await?,
    };
    let selection = contain(
        |msg| Error::PartCorrupted {
            path: key.to_string(),
            reason: format!("its page index could not be read ({msg})"),
        },
        || pages_holding(footer.metadata(), column, values, key),
    )?;
    let total: u64 = footer
        .metadata()
        .metadata()
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.num_rows()).unwrap_or_default())
        .sum();
    let Some(selection) = selection.filter(|s| s.row_count() as u64 * 2 <= total) else {
        return Ok(None);
    };
    let mut opts = opts.clone();
    opts.selection = Some(selection);
    let got = open_part_with(store, key, &footer, &opts)
        .await?
        .read_all()
        .await?;
    Ok(Some(got))
}

/// The rows of the pages whose `[min, max]` of `column` holds one of
/// `values`, over every row group; `None` (every row) where the part has
/// no page index for the column. A page index inconsistent with the
/// footer's row counts is `PartCorrupted`.
pub fn pages_holding(
    metadata: &ArrowReaderMetadata,
    column: &str,
    values: &ArrayRef,
    path: &str,
) -> Result<Option<RowSelection>> {
    let md = metadata.metadata();
    let (Some(columns), Some(offsets)) = (md.column_index(), md.offset_index()) else {
        return Ok(None);
    };
    let corrupted = |reason: String| Error::PartCorrupted {
        path: path.to_string(),
        reason,
    };
    let groups: Vec<usize> = (0..md.num_row_groups()).collect();
    let conv =
        StatisticsConverter::try_new(column, metadata.schema(), md.file_metadata().schema_descr())
            .map_err(|e| corrupted(format!("its page index: {e}")))?;
    let stats = |e: parquet::errors::ParquetError| corrupted(format!("its page index: {e}"));
    let mins = conv
        .data_page_mins(columns, offsets, &groups)
        .map_err(stats)?;
    let maxes = conv
        .data_page_maxes(columns, offsets, &groups)
        .map_err(stats)?;
    let Some(counts) = conv
        .data_page_row_counts(offsets, md.row_groups(), &groups)
        .map_err(stats)?
    else {
        return Ok(None);
    };
    let total: u64 = md
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.num_rows()).unwrap_or(u64::MAX))
        .sum();
    let counted: u64 = counts
        .iter()
        .map(|c| c.unwrap_or(u64::MAX))
        .fold(0, u64::saturating_add);
    if mins.len() != counts.len() || maxes.len() != counts.len() || counted != total {
        return Err(corrupted(format!(
            "its page index lists {} pages of {counted} rows; its footer has {total} rows",
            counts.len()
        )));
    }
    // Compare in one row format: the wanted values as the file stores them.
    let wanted = arrow_cast::cast(values, mins.data_type())?;
    let converter = RowConverter::new(vec![SortField::new(mins.data_type().clone())])?;
    let (lo, hi) = (
        converter.convert_columns(std::slice::from_ref(&mins))?,
        converter.convert_columns(std::slice::from_ref(&maxes))?,
    );
    let w = converter.convert_columns(std::slice::from_ref(&wanted))?;
    let mut keys: Vec<&[u8]> = (0..wanted.len())
        .filter(|&i| wanted.is_valid(i))
        .map(|i| w.row(i).data())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut selectors: Vec<RowSelector> = Vec::with_capacity(counts.len());
    for p in 0..counts.len() {
        let rows = usize::try_from(counts.value(p)).unwrap_or(usize::MAX);
        // A page without both bounds may hold anything.
        let keep = !mins.is_valid(p) || !maxes.is_valid(p) || {
            let (l, h) = (lo.row(p), hi.row(p));
            let i = keys.partition_point(|k| *k < l.data());
            i < keys.len() && keys[i] <= h.data()
        };
        selectors.push(match keep {
            true => RowSelector::select(rows),
            false => RowSelector::skip(rows),
        });
    }
    Ok(Some(RowSelection::from(selectors)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::decode::read_footer_and_page_index;
    use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
    use crate::runtime::block_on;
    use crate::store::PutMode;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    const ROWS: i64 = 100_000;

    /// 100,000 rows of `k` (sorted, each twice) and `v`: several pages each.
    fn file(page_index: bool) -> (Arc<StoreHandle>, u64, Arc<Schema>) {
        let (store, size, schema, _) = file_and_tail(page_index);
        (store, size, schema)
    }

    /// [`file`], and the length and CRC-32 of its tail (see `PartSummary`).
    fn file_and_tail(page_index: bool) -> (Arc<StoreHandle>, u64, Arc<Schema>, (u64, u32)) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values((0..ROWS).map(|i| i / 2))),
                Arc::new(Int64Array::from_iter_values(
                    (0..ROWS).map(|i| i * 7 % 1000),
                )),
            ],
        )
        .unwrap();
        let mut opts = EncodeOptions::new("zstd", None, None).unwrap();
        if page_index {
            opts = opts.with_page_index(&["k".to_string()]);
        }
        let (bytes, summary) = encode_to_bytes(&[batch], schema.clone(), &opts).unwrap();
        let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
        block_on(store.put("f.parquet", bytes, PutMode::Overwrite))
            .unwrap()
            .unwrap();
        let tail = (summary.footer_bytes, summary.footer_crc32);
        (store, summary.size_bytes, schema, tail)
    }

    fn read(store: &StoreHandle, size: u64, schema: &Arc<Schema>, ks: &[i64]) -> Result<Vec<i64>> {
        read_checked(store, size, None, schema, ks)
    }

    fn read_checked(
        store: &StoreHandle,
        size: u64,
        tail: Option<(u64, u32)>,
        schema: &Arc<Schema>,
        ks: &[i64],
    ) -> Result<Vec<i64>> {
        let opts = ReadOptions {
            expected: Some(schema.clone()),
            ..Default::default()
        };
        let values: ArrayRef = Arc::new(Int64Array::from(ks.to_vec()));
        let got = block_on(read_pages_holding(
            store,
            "f.parquet",
            size,
            tail,
            &opts,
            "k",
            &values,
        ))??;
        let Some(got) = got else {
            return Ok(vec![-1]); // left to the caller to read whole
        };
        if got.file_rows != ROWS as u64 {
            // As the pipeline's reader checks it against the manifest.
            return Err(Error::PartCorrupted {
                path: "f.parquet".into(),
                reason: format!("{} rows", got.file_rows),
            });
        }
        Ok(got
            .batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect())
    }

    /// Byte ranges of the data pages of column `k`, and their first rows.
    fn pages(store: &StoreHandle, size: u64) -> Vec<(u64, u64, i64)> {
        let footer = block_on(read_footer_and_page_index(store, "f.parquet", size, None))
            .unwrap()
            .unwrap();
        let md = footer.metadata().metadata();
        let index = md.offset_index().unwrap();
        index
            .iter()
            .flat_map(|rg| rg[0].page_locations.iter())
            .map(|p| {
                (
                    p.offset as u64,
                    p.compressed_page_size as u64,
                    p.first_row_index,
                )
            })
            .collect()
    }

    fn damaged(store: &StoreHandle, at: u64) {
        let mut bytes = block_on(store.get("f.parquet")).unwrap().unwrap().to_vec();
        bytes[at as usize] ^= 0x55;
        block_on(store.put("f.parquet", bytes.into(), PutMode::Overwrite))
            .unwrap()
            .unwrap();
    }

    #[test]
    fn a_lookup_reads_only_the_pages_holding_its_values() {
        let (store, size, schema) = file(true);
        let pages = pages(&store, size);
        assert!(pages.len() >= 4, "{} pages", pages.len());
        let got = read(&store, size, &schema, &[3, 30_000]).unwrap();
        // Every row of the wanted values, fewer than half the rows.
        assert_eq!(got.iter().filter(|&&k| k == 3 || k == 30_000).count(), 4);
        assert!(got.len() < ROWS as usize / 2, "{} rows read", got.len());
        assert!(got.windows(2).all(|w| w[0] <= w[1]));
        // A value no page holds reads nothing; values out of order are fine.
        assert!(read(&store, size, &schema, &[ROWS]).unwrap().is_empty());
        assert_eq!(read(&store, size, &schema, &[30_000, 3, 3]).unwrap(), got);
        // A damaged page the lookup does not need is not even fetched; a
        // damaged page it needs is refused by its checksum.
        let last = pages.last().unwrap();
        damaged(&store, last.0 + last.1 - 1);
        assert_eq!(read(&store, size, &schema, &[3, 30_000]).unwrap(), got);
        let err = read(&store, size, &schema, &[ROWS / 2 - 1]).unwrap_err();
        assert!(
            matches!(&err, Error::PartCorrupted { reason, .. } if reason.contains("checksum")),
            "{err:?}"
        );
    }

    #[test]
    fn a_part_without_a_page_index_or_most_of_its_pages_wanted_is_left_to_read_whole() {
        let (store, size, schema) = file(false);
        assert_eq!(read(&store, size, &schema, &[3]).unwrap(), vec![-1]);
        let (store, size, schema) = file(true);
        let most: Vec<i64> = (0..ROWS / 2).step_by(5_000).collect();
        assert_eq!(read(&store, size, &schema, &most).unwrap(), vec![-1]);
    }

    /// A damaged byte in the page index can move or hide the pages a lookup
    /// reads (a bound of the column index changed, and a page holding a
    /// wanted value is skipped) with no chunk or page checksum to catch it;
    /// with the tail's length and CRC-32 its manifest records, every such
    /// byte is `PartCorrupted`, and the undamaged file reads as before.
    #[test]
    fn a_lookup_checks_the_page_index_against_the_recorded_tail() {
        let (store, size, schema, tail) = file_and_tail(true);
        let clean = block_on(store.get("f.parquet")).unwrap().unwrap();
        let wanted = [3, 30_000];
        let want = read(&store, size, &schema, &wanted).unwrap();
        assert_eq!(
            read_checked(&store, size, Some(tail), &schema, &wanted).unwrap(),
            want
        );
        let data_end = size - tail.0;
        let mut silent = 0;
        for at in data_end..(data_end + 400).min(size - 8) {
            damaged(&store, at);
            match read(&store, size, &schema, &wanted) {
                // (`[-1]`: left to a whole read, checked against its SHA-256.)
                Ok(got)
                    if got != [-1]
                        && got.iter().filter(|&&k| k == 3 || k == 30_000).count() != 4 =>
                {
                    silent += 1
                }
                _ => {}
            }
            let err = read_checked(&store, size, Some(tail), &schema, &wanted).unwrap_err();
            assert!(matches!(err, Error::PartCorrupted { .. }), "{at}: {err:?}");
            block_on(store.put("f.parquet", clean.clone(), PutMode::Overwrite))
                .unwrap()
                .unwrap();
        }
        assert!(
            silent > 0,
            "some damaged byte went unseen without the check"
        );
        // A wrong record is refused, never trusted for a read.
        for bad in [(tail.0, tail.1 ^ 1), (size + 1, tail.1), (4, tail.1)] {
            let err = read_checked(&store, size, Some(bad), &schema, &wanted).unwrap_err();
            assert!(
                matches!(err, Error::PartCorrupted { .. }),
                "{bad:?}: {err:?}"
            );
        }
    }
}
