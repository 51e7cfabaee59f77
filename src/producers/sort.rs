//! External sort by key within a memory budget.
//!
//! Batches are buffered until they (and what sorting them takes) hold three
//! quarters of the budget; the buffer is then
//! sorted (by the key's row format, stable) and, if more input follows,
//! spilled as a sorted run to a local Arrow IPC file. At the end the runs
//! and the last buffer are merged ([`super::merge`]) into one sorted stream.
//! Memory: the buffer with its sort keys while sorting (within the budget),
//! then one batch per run and the last buffer while merging. Spill files are removed when the sorter (or its
//! output) is dropped.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
use super::merge::merge_sorted;
use super::BatchIter;
use crate::error::{Error, Result};

/// Rows per output batch.
pub const BATCH_ROWS: usize = 8192;

/// Memory a buffered row takes to sort besides its data: its key in the
/// row format (about 16 bytes for a one-column key) and its place in the
/// order (32 bytes).
const SORT_BYTES_PER_ROW: usize = 48;

/// A folder of spill files, removed with everything in it on drop.
#[derive(Debug)]
struct SpillDir(PathBuf);

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sorts batches of one schema by `key` within `budget` bytes.
pub struct ExternalSorter {
    schema: SchemaRef,
    key: Vec<String>,
    encoder: KeyEncoder,
    budget: usize,
    buffer: Vec<RecordBatch>,
    buffered: usize,
    runs: Vec<PathBuf>,
    dir: Option<Arc<SpillDir>>,
    spill_root: PathBuf,
}

impl ExternalSorter {
    /// `InvalidArgument` for a bad key or a zero budget. Spill files go to
    /// a fresh folder below `spill_root` (the system's temp dir if `None`).
    pub fn new(
        schema: SchemaRef,
        key: &[String],
        budget: usize,
        spill_root: Option<PathBuf>,
    ) -> Result<Self> {
        if budget == 0 {
            return Err(Error::InvalidArgument(
                "the sort budget must be > 0 bytes".into(),
            ));
        }
        Ok(Self {
            encoder: KeyEncoder::new(&schema, key)?,
            key: key.to_vec(),
            schema,
            budget,
            buffer: Vec::new(),
            buffered: 0,
            runs: Vec::new(),
            dir: None,
            spill_root: spill_root.unwrap_or_else(std::env::temp_dir),
        })
    }

    /// Runs spilled so far.
    pub fn spilled_runs(&self) -> usize {
        self.runs.len()
    }

    /// Add a batch (its schema must be the sorter's).
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(Error::InvalidArgument(format!(
                "batch schema {:?} is not the sort's {:?}",
                batch.schema(),
                self.schema
            )));
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        // The rows, plus what sorting them takes (their keys in the row
        // format and the order: about 48 bytes a row).
        self.buffered += batch.get_array_memory_size() + batch.num_rows() * SORT_BYTES_PER_ROW;
        self.buffer.push(batch);
        if self.buffered > self.budget / 4 * 3 {
            self.spill()?;
        }
        Ok(())
    }

    /// Hand the buffered rows to `sink` sorted (stable), in batches of
    /// [`BATCH_ROWS`], and empty the buffer. The batches are not
    /// concatenated: rows are gathered from them chunk by chunk, so memory
    /// is the buffer, its key rows and one output chunk.
    fn sort_buffer_into(&mut self, mut sink: impl FnMut(RecordBatch) -> Result<()>) -> Result<()> {
        let batches = std::mem::take(&mut self.buffer);
        self.buffered = 0;
        if batches.is_empty() {
            return Ok(());
        }
        let rows = self.encoder.rows_of_all(&batches)?;
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(rows.num_rows());
        for (b, batch) in batches.iter().enumerate() {
            at.extend((0..batch.num_rows()).map(|i| (b, i)));
        }
        // By a fixed-size prefix first, the whole key on a tie, then the
        // input position: a total order, so the unstable sort is stable.
        let mut order: Vec<((u64, u64, u32), u32)> = (0..rows.num_rows())
            .map(|i| (super::keys::prefix(rows.row(i)), i as u32))
            .collect();
        order.sort_unstable_by(|a, b| {
            super::keys::cmp_prefixed(a.0, b.0, || {
                rows.row(a.1 as usize).cmp(&rows.row(b.1 as usize))
            })
            .then(a.1.cmp(&b.1))
        });
        drop(rows);
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        for chunk in order.chunks(BATCH_ROWS) {
            let idx: Vec<(usize, usize)> = chunk.iter().map(|&(_, i)| at[i as usize]).collect();
            sink(arrow_select::interleave::interleave_record_batch(
                &refs, &idx,
            )?)?;
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<()> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let path = self
                    .spill_root
                    .join(format!("pds-sort-{}", crate::dataset::unique_token()));
                std::fs::create_dir_all(&path)?;
                let d = Arc::new(SpillDir(path));
                self.dir = Some(d.clone());
                d
            }
        };
        let path = dir.0.join(format!("run-{:05}.arrows", self.runs.len()));
        let mut w = StreamWriter::try_new(BufWriter::new(File::create(&path)?), &self.schema)?;
        self.sort_buffer_into(|b| w.write(&b).map_err(Error::from))?;
        w.finish()?;
        self.runs.push(path);
        Ok(())
    }

    /// Every row pushed, sorted by the key, as one stream.
    pub fn finish(mut self) -> Result<BatchIter> {
        let mut last = Vec::new();
        self.sort_buffer_into(|b| {
            last.push(b);
            Ok(())
        })?;
        let mut inputs: Vec<BatchIter> = Vec::with_capacity(self.runs.len() + 1);
        for path in &self.runs {
            let reader = StreamReader::try_new(std::io::BufReader::new(File::open(path)?), None)?;
            let dir = self.dir.clone(); // Keeps the files until the run is read.
            inputs.push(Box::new(reader.map(move |b| {
                let _keep = &dir;
                b.map_err(Error::from)
            })));
        }
        inputs.push(Box::new(last.into_iter().map(Ok)));
        if inputs.len() == 1 {
            return Ok(inputs.pop().unwrap_or_else(|| Box::new(std::iter::empty())));
        }
        merge_sorted(self.schema.clone(), &self.key, inputs, BATCH_ROWS)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    pub(crate) fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]))
    }

    /// Rows with pseudo-random keys (some null), `v` = input position.
    pub(crate) fn batch(start: i64, n: i64, seed: u64) -> RecordBatch {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let k: Vec<Option<i64>> = (0..n)
            .map(|_| {
                let r = next();
                (r % 50 != 0).then_some((r % 1000) as i64)
            })
            .collect();
        let s: Vec<String> = (0..n).map(|_| format!("s{}", next() % 7)).collect();
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(k)),
                Arc::new(StringArray::from(s)),
                Arc::new(Int64Array::from_iter_values(start..start + n)),
            ],
        )
        .unwrap()
    }

    pub(crate) fn collect(stream: BatchIter) -> Vec<(Option<i64>, String, i64)> {
        let mut out = Vec::new();
        for b in stream {
            let b = b.unwrap();
            let k = b.column(0).as_primitive::<Int64Type>();
            let s = b.column(1).as_string::<i32>();
            let v = b.column(2).as_primitive::<Int64Type>();
            for i in 0..b.num_rows() {
                out.push((
                    k.is_valid(i).then(|| k.value(i)),
                    s.value(i).to_string(),
                    v.value(i),
                ));
            }
        }
        out
    }

    #[test]
    fn spills_within_the_budget_and_sorts_stably_by_a_compound_key() {
        let key = vec!["k".to_string(), "s".to_string()];
        let mut input = Vec::new();
        // ~64 KiB budget: many runs.
        let mut sorter = ExternalSorter::new(schema(), &key, 64 * 1024, None).unwrap();
        for i in 0..40 {
            let b = batch(i * 500, 500, 7 + i as u64);
            input.extend(collect(Box::new(std::iter::once(Ok(b.clone())))));
            sorter.push(b).unwrap();
        }
        assert!(sorter.spilled_runs() > 5, "{} runs", sorter.spilled_runs());
        let dir = sorter.dir.as_ref().map(|d| d.0.clone()).unwrap();
        let got = collect(sorter.finish().unwrap());
        // Expected: a stable sort by (k nulls first, s).
        let mut expected = input.clone();
        expected.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        assert_eq!(got, expected);
        assert!(!dir.exists(), "spill files removed once read");
    }

    #[test]
    fn small_and_empty_inputs_and_bad_keys() {
        let key = vec!["v".to_string()];
        let sorter = ExternalSorter::new(schema(), &key, 1 << 20, None).unwrap();
        assert!(collect(sorter.finish().unwrap()).is_empty());
        let mut sorter = ExternalSorter::new(schema(), &key, 1 << 20, None).unwrap();
        sorter.push(batch(0, 10, 3)).unwrap();
        assert_eq!(sorter.spilled_runs(), 0);
        let got: Vec<i64> = collect(sorter.finish().unwrap())
            .iter()
            .map(|r| r.2)
            .collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(ExternalSorter::new(schema(), &["nope".into()], 1, None).is_err());
        assert!(ExternalSorter::new(schema(), &[], 1, None).is_err());
        assert!(ExternalSorter::new(schema(), &key, 0, None).is_err());
    }
}

#[cfg(test)]
mod long_keys {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    /// Keys longer than the 16-byte prefix, sharing it, of several lengths
    /// (one a prefix of another): sorted as their bytes, stably.
    #[test]
    fn keys_sharing_their_prefix_sort_by_their_bytes() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, false),
            Field::new("i", DataType::Int64, false),
        ]));
        let base = "a-long-common-prefix";
        let keys: Vec<String> = (0..3000)
            .map(|i| match i % 4 {
                0 => format!("{base}{}", (i * 7919) % 97),
                1 => base[..(i % 19)].to_string(),
                2 => format!("{base}{}x", (i * 31) % 13),
                _ => format!("{}", i % 11),
            })
            .collect();
        let mut sorter =
            ExternalSorter::new(schema.clone(), &["s".to_string()], 64 * 1024, None).unwrap();
        for (c, chunk) in keys.chunks(500).enumerate() {
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(chunk.to_vec())),
                    Arc::new(Int64Array::from_iter_values(
                        (0..chunk.len() as i64).map(|j| c as i64 * 500 + j),
                    )),
                ],
            )
            .unwrap();
            sorter.push(b).unwrap();
        }
        assert!(sorter.spilled_runs() > 1);
        let got: Vec<(String, i64)> = sorter
            .finish()
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let s = b.column(0).as_string::<i32>().clone();
                let i = b
                    .column(1)
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .clone();
                (0..b.num_rows())
                    .map(|r| (s.value(r).to_string(), i.value(r)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut want: Vec<(String, i64)> = keys.iter().cloned().zip(0..).collect();
        want.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes())); // stable: input order on ties
        assert_eq!(got, want);
    }
}
