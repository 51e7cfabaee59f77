//! Read-ahead of the next row group's column chunks.
//!
//! The Parquet stream fetches a file one row group at a time, and asks for
//! the next only once it has decoded the last: a file of N row groups costs
//! N sequential round trips. Where the read takes whole column chunks (no
//! row filter, no row selection), the ranges of every row group it will ask
//! for are known from the footer: when it asks for row group k, the chunks
//! of the next `window` row groups are requested at once too, so a file's
//! chunks cost one round trip when `window` covers it. A request that is
//! not one planned is served directly, and unused read-aheads are cancelled
//! when the reader is dropped. At most `window` row groups of the projected
//! columns are held ahead of the decoder, and a read of many parts can share
//! one bound on the read-aheads in flight over all of them ([`IoPermits`]).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;

use tokio::sync::Semaphore;
use tokio_util::task::AbortOnDropHandle;

/// A fetch started ahead; cancelled when dropped unused.
type Fetch = AbortOnDropHandle<object_store::Result<Vec<Bytes>>>;

/// Requests a read may have in flight ahead of its decoders, over all the
/// parts it reads at once (a permit per row group fetch).
pub type IoPermits = Arc<Semaphore>;

/// The planned requests of one read, and those in flight ahead of it.
#[derive(Debug)]
pub struct ReadAhead {
    /// The ranges of each row group read, in read order.
    plan: OnceLock<Vec<Vec<Range<u64>>>>,
    /// Row groups fetched ahead, by their place in the plan.
    pending: Mutex<BTreeMap<usize, Fetch>>,
    window: usize,
    permits: Option<IoPermits>,
}

impl ReadAhead {
    /// A read-ahead of up to `window` row groups (0: none), each fetch
    /// holding one of `permits` (if given) while it is in flight.
    pub fn new(window: usize, permits: Option<IoPermits>) -> Self {
        Self {
            plan: OnceLock::new(),
            pending: Mutex::new(BTreeMap::new()),
            window,
            permits,
        }
    }

    /// Plan the read of `row_groups` (`None`: all, in file order), the leaf
    /// columns of `mask`, whole chunks each. Set once; later calls are ignored.
    pub fn plan(
        &self,
        metadata: &ParquetMetaData,
        row_groups: Option<&[usize]>,
        mask: &ProjectionMask,
    ) {
        let all: Vec<usize>;
        let groups = match row_groups {
            Some(g) => g,
            None => {
                all = (0..metadata.num_row_groups()).collect();
                &all
            }
        };
        let plan = groups
            .iter()
            .filter_map(|&rg| {
                let group = metadata.row_groups().get(rg)?;
                Some(
                    group
                        .columns()
                        .iter()
                        .enumerate()
                        .filter(|(leaf, _)| mask.leaf_included(*leaf))
                        .map(|(_, c)| {
                            let (start, len) = c.byte_range();
                            start..start.saturating_add(len)
                        })
                        .collect(),
                )
            })
            .collect();
        let _ = self.plan.set(plan);
    }

    /// `ranges` are requested: start fetching the row groups planned after
    /// them (up to the window), and return their own fetch if it was started
    /// ahead. Read-aheads planned before them, now skipped, are cancelled.
    pub fn request(
        &self,
        ranges: &[Range<u64>],
        store: &Arc<dyn ObjectStore>,
        path: &Path,
    ) -> Option<Fetch> {
        let plan = self.plan.get()?;
        let at = plan.iter().position(|p| p.as_slice() == ranges)?;
        let mut pending = self.pending.lock().ok()?;
        let mine = pending.remove(&at);
        let later = pending.split_off(&at);
        drop(std::mem::replace(&mut *pending, later)); // skipped: cancelled
        if self.window > 0 {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let ahead = plan.iter().enumerate().skip(at + 1).take(self.window);
                for (next, planned) in ahead {
                    if pending.contains_key(&next) || planned.is_empty() {
                        continue;
                    }
                    let (store, path, ranges) = (store.clone(), path.clone(), planned.clone());
                    let permits = self.permits.clone();
                    let fetch = runtime.spawn(async move {
                        // A closed semaphore (never closed here) only drops the bound.
                        let _permit = match permits {
                            Some(p) => p.acquire_owned().await.ok(),
                            None => None,
                        };
                        store.get_ranges(&path, &ranges).await
                    });
                    pending.insert(next, AbortOnDropHandle::new(fetch));
                }
            }
        }
        mine
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};

    use crate::parquet::decode::ReadOptions;
    use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
    use crate::parquet::filter::predicate;
    use crate::parquet::part_ref::{self, PartRef};
    use crate::store::{PutMode, StoreHandle};

    fn values(d: &crate::parquet::decode::Decoded, column: usize) -> Vec<i64> {
        d.batches
            .iter()
            .flat_map(|b| {
                let a = b
                    .column(column)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                a.values().to_vec()
            })
            .collect()
    }

    /// Reads with any window, with and without a filter or a projection, and
    /// a read dropped after its first batch, give what a plain read gives.
    #[test]
    fn any_window_reads_the_same_rows() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..10_000)),
                Arc::new(Int64Array::from_iter_values((0..10_000).map(|v| v * 3))),
            ],
        )
        .unwrap();
        let opts = EncodeOptions::new("zstd", Some(1_000), None).unwrap();
        let (bytes, summary) = encode_to_bytes(&[batch], schema, &opts).unwrap();
        let store = StoreHandle::open("memory://", &BTreeMap::new()).unwrap();
        let rt = crate::runtime::get().unwrap();
        rt.block_on(store.put("f.parquet", bytes.clone(), PutMode::Overwrite))
            .unwrap();
        let part = PartRef {
            key: "f.parquet".into(),
            size: bytes.len() as u64,
            footer_hint: Some(summary.footer_bytes),
            sha256: None,
        };
        let filter = predicate(vec![(
            "a".into(),
            ">=".into(),
            Some(Arc::new(Int64Array::from(vec![4_500])) as arrow_array::ArrayRef),
        )])
        .unwrap();
        for window in [0, 1, 2, 100, usize::MAX] {
            let read = |o: ReadOptions| rt.block_on(part_ref::read(&store, &part, &o)).unwrap();
            let all = read(ReadOptions {
                read_ahead: Some(window),
                ..Default::default()
            });
            assert_eq!(
                values(&all, 0),
                (0..10_000).collect::<Vec<_>>(),
                "window {window}"
            );
            // One permit shared for every read-ahead: the same rows.
            let bounded = read(ReadOptions {
                read_ahead: Some(window),
                io_permits: Some(Arc::new(tokio::sync::Semaphore::new(1))),
                ..Default::default()
            });
            assert_eq!(values(&bounded, 0), values(&all, 0));
            let b = read(ReadOptions {
                columns: Some(vec!["b".into()]),
                read_ahead: Some(window),
                ..Default::default()
            });
            assert_eq!(
                values(&b, 0),
                (0..10_000).map(|v| v * 3).collect::<Vec<_>>()
            );
            let some = read(ReadOptions {
                predicate: Some(Arc::new(filter.clone())),
                row_groups: Some(vec![7, 2, 5]),
                read_ahead: Some(window),
                ..Default::default()
            });
            let mut got = values(&some, 0);
            got.sort_unstable();
            assert_eq!(got, (5_000..6_000).chain(7_000..8_000).collect::<Vec<_>>());
            let mut stream = rt
                .block_on(part_ref::open(
                    &store,
                    &part,
                    &ReadOptions {
                        batch_size: Some(100),
                        read_ahead: Some(window),
                        ..Default::default()
                    },
                ))
                .unwrap();
            let first = rt.block_on(stream.next_batch()).unwrap().unwrap();
            assert_eq!(first.num_rows(), 100);
            drop(stream); // the read-aheads in flight are cancelled
        }
    }
}
