//! External sort by key within a memory budget, on several threads.
//!
//! Batches are buffered until they (and what sorting them takes) hold half
//! the budget ([`BUFFER_SIXTEENTHS`]); the buffer is then sorted (by the key's row
//! format, stable) and, if more input follows, spilled as a sorted run to a
//! local Arrow IPC file (with a sample of its keys, one per 512 rows). At
//! the end the runs and the last buffer are merged into one sorted stream.
//!
//! Threads ([`default_threads`]: the cores, or `PDS_THREADS`): a buffer is
//! cut into one contiguous slice per thread; each slice's key rows are
//! computed and sorted on its own thread, and the sorted slices merged
//! (ties: the earlier slice first): [`super::sorted_buffer`]. Spilled
//! chunks are gathered in parallel; the run files and their indexes are
//! [`super::spill`]'s.
//! The final merge runs in parallel by key range ([`super::range_merge`]):
//! each thread merges one range of keys from every run at a time. On one
//! thread, the runs are merged in one k-way merge ([`super::merge`]). Ties
//! keep the input order, and the output (rows and batch boundaries) is the
//! same for any thread count.
//!
//! Memory, with `T` threads and `R` runs: the buffer with its key rows and
//! order while sorting (within half the budget), plus `4 * T` output
//! chunks of [`BATCH_ROWS`] rows while spilling; while merging, the last
//! buffer (not copied: gathered chunk by chunk) with its order, the ranges
//! merged and not yet read (an eighth of the budget in all), and one batch
//! of [`BATCH_ROWS`] rows per run and thread. So at most the budget plus
//! `(4 * T + T * R)` batches of [`BATCH_ROWS`] rows. A spilled buffer's
//! key rows, entries and order are kept for the next buffer's sort, so
//! that memory is not returned to the system and faulted in, zeroed,
//! again: the next buffer counts what is kept in place of its own sort
//! memory, or its own if that is more, and what is kept is dropped when it
//! is more than twice what its buffer was charged (kept from a larger
//! buffer, or long keys) or more than a buffer's share. A row's sort is
//! charged 48 bytes until a buffer has been sorted in fresh memory, then
//! what a row took there (more for long keys). Spill files are removed
//! when the sorter (or its output) is dropped.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
use super::merge::merge_sorted_on;
use super::sorted_buffer::{Scratch, SortedBuffer};
use super::spill::{RunBatch, RunIndex, SpillDir};
use super::BatchIter;
use crate::error::{Error, Result};

pub use super::sorted_buffer::BATCH_ROWS;

/// Memory a buffered row takes to sort besides its data: its key in the
/// row format (about 16 bytes for a one-column key) and its place in the
/// order (32 bytes).
const SORT_BYTES_PER_ROW: usize = 48;

/// The share of the budget, in sixteenths, a buffer (with what sorting it
/// takes) fills before it is sorted and spilled. The rest is for what the
/// budget does not count row by row: the reader's batches in flight, the
/// spill writer's, the parts being encoded, and memory the allocator holds
/// between phases. Measured on the 10M-row sort at 256 MiB
/// (`benches/sort_compare.py`, four runs each, alternated): 12/16 peaked
/// at 513-543 MiB, 9/16 at 500-536 MiB, 8/16 at 470-493 MiB (3 % more
/// time), 7/16 at 457-492 MiB (8 % more time).
const BUFFER_SIXTEENTHS: usize = 8;

/// Sorts batches of one schema by `key` within `budget` bytes.
pub struct ExternalSorter {
    schema: SchemaRef,
    key: Vec<String>,
    encoder: KeyEncoder,
    budget: usize,
    buffer: Vec<RecordBatch>,
    /// The buffered batches' Arrow memory, and their rows.
    buffered: usize,
    buffered_rows: usize,
    runs: Vec<RunIndex>,
    dir: Option<Arc<SpillDir>>,
    spill_root: PathBuf,
    threads: usize,
    /// Memory of the last spilled buffer's sort, reused by the next.
    scratch: Scratch,
    /// What sorting a row is charged while a buffer fills: at first
    /// [`SORT_BYTES_PER_ROW`], then what a row's sort took in the last
    /// buffer sorted in fresh memory, if more (longer keys in the row
    /// format, say).
    sort_bytes_per_row: usize,
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
            buffered_rows: 0,
            runs: Vec::new(),
            dir: None,
            spill_root: spill_root.unwrap_or_else(std::env::temp_dir),
            threads: default_threads(),
            scratch: Scratch::default(),
            sort_bytes_per_row: SORT_BYTES_PER_ROW,
        })
    }

    /// Sort (and merge) on `threads` threads (at least 1) instead of
    /// [`default_threads`]. The output is the same for any count.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
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
        self.buffered += batch.get_array_memory_size();
        self.buffered_rows += batch.num_rows();
        self.buffer.push(batch);
        if self.held() > self.buffer_limit() {
            self.spill()?;
        }
        Ok(())
    }

    /// What a buffer and its sort may hold before it is spilled.
    fn buffer_limit(&self) -> usize {
        self.budget / 16 * BUFFER_SIXTEENTHS
    }

    /// What the buffer holds and sorting it takes: the rows, plus their
    /// keys in the row format and their order (48 bytes a row, or what a
    /// row's sort took when last measured), or the memory kept from the
    /// last sort if that is more.
    fn held(&self) -> usize {
        let sorting = (self.buffered_rows * self.sort_bytes_per_row).max(self.scratch.bytes());
        self.buffered + sorting
    }

    /// The buffered rows sorted (stable), and the buffer emptied. The
    /// batches are not concatenated: rows are gathered from them chunk by
    /// chunk when read, so memory is the buffer, its key rows and entries
    /// while sorting, then its order (4 bytes a row) and a few output chunks
    /// per thread (the key rows and entries of a spilled buffer are kept
    /// for the next one).
    ///
    /// With `threads` > 1 the buffer is cut into that many contiguous
    /// slices, each converted to key rows and sorted on a thread of its own;
    /// the sorted slices are merged (ties: the earlier slice first, so the
    /// order is the stable one whatever the thread count) and the output
    /// chunks gathered in parallel.
    ///
    /// The sort's memory (key rows, entries, the order) comes from the
    /// last spilled buffer's where there is one: freed and allocated again,
    /// it came back as fresh pages that the kernel zeroes, which took a
    /// sixth of a 10M-row sort's time.
    fn sort_buffer(&mut self) -> Result<SortedBuffer> {
        let batches = std::mem::take(&mut self.buffer);
        self.buffered = 0;
        self.buffered_rows = 0;
        let scratch = std::mem::take(&mut self.scratch);
        SortedBuffer::new(&self.encoder, batches, self.threads, scratch)
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
        // An IPC file (not a stream): its batches can be read by index, so
        // a range of keys can be read from the middle of the run.
        let path = dir.0.join(format!("run-{:05}.arrow", self.runs.len()));
        let mut w = FileWriter::try_new(BufWriter::new(File::create(&path)?), &self.schema)?;
        let rows = self.buffered_rows;
        let (charged, fresh) = (self.sort_bytes_per_row, self.scratch.bytes() == 0);
        let sorted = self.sort_buffer()?;
        let mut batches = Vec::new();
        let encoder = &self.encoder;
        sorted.drain_into(self.threads, |b| {
            batches.push(RunBatch::of(encoder, &b)?);
            w.write(&b).map_err(Error::from)
        })?;
        // A sort in fresh memory says what sorting a row takes: the next
        // buffers are charged that. The memory is kept for the next buffer
        // unless it is more than twice what this buffer was charged (kept
        // from an earlier, larger buffer, or longer keys than charged:
        // those sort in fresh memory, and are charged right from then on),
        // or more than a buffer's whole share (which would leave the next
        // no room for rows). What is kept counts against the budget while
        // the next buffer fills.
        let scratch = sorted.into_scratch();
        if fresh && rows > 0 {
            self.sort_bytes_per_row = (scratch.bytes() / rows).max(SORT_BYTES_PER_ROW);
        }
        if scratch.bytes() <= 2 * rows * charged && scratch.bytes() <= self.buffer_limit() {
            self.scratch = scratch;
        }
        w.finish()?;
        self.runs.push(RunIndex::new(path, batches));
        // The buffer is free now, and the next one fills from nothing.
        crate::memory::release_freed();
        Ok(())
    }

    /// The size of a key range the merge takes on one thread: the threads
    /// share an eighth of the budget (see [`super::range_merge`]).
    fn range_bytes(&self) -> usize {
        (self.budget / 8 / self.threads).max(1)
    }

    /// The spilled runs and the last buffer, sorted, for the parallel merge.
    fn into_runs(mut self) -> Result<super::range_merge::Runs> {
        let last = self.sort_buffer()?.lean();
        Ok(super::range_merge::Runs {
            schema: self.schema,
            key: self.key,
            encoder: self.encoder,
            runs: self.runs,
            last,
            dir: self.dir,
        })
    }

    /// Every row pushed, sorted by the key, as one stream. The spill folder
    /// is removed before the stream reports its end (or when it is dropped).
    pub fn finish(self) -> Result<BatchIter> {
        let merged = self.merge()?;
        Ok(Box::new(ReleasedAtEnd(Some(merged))))
    }

    /// [`Self::finish`]'s stream, which holds the spill files until dropped.
    fn merge(mut self) -> Result<BatchIter> {
        // The last buffer is merged in place, gathered chunk by chunk.
        if self.threads > 1 && !self.runs.is_empty() {
            let (range_bytes, threads) = (self.range_bytes(), self.threads);
            return super::range_merge::merge_runs(self.into_runs()?, range_bytes, threads);
        }
        let last = self.sort_buffer()?.lean();
        let mut inputs: Vec<BatchIter> = Vec::with_capacity(self.runs.len() + 1);
        for run in &self.runs {
            let reader =
                FileReader::try_new(std::io::BufReader::new(File::open(&run.path)?), None)?;
            let dir = self.dir.clone(); // Keeps the files until the run is read.
            inputs.push(Box::new(reader.map(move |b| {
                let _keep = &dir;
                b.map_err(Error::from)
            })));
        }
        inputs.push(Box::new(last));
        if inputs.len() == 1 {
            return Ok(inputs.pop().unwrap_or_else(|| Box::new(std::iter::empty())));
        }
        merge_sorted_on(
            self.schema.clone(),
            &self.key,
            inputs,
            BATCH_ROWS,
            self.threads,
        )
    }
}

/// A stream dropped as soon as it ends: what it holds (spill files, merge
/// threads, which are joined) goes before its end is reported.
struct ReleasedAtEnd(Option<BatchIter>);

impl Iterator for ReleasedAtEnd {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.0.as_mut()?.next();
        if next.is_none() {
            self.0 = None;
        }
        next
    }
}

/// Threads the sort, the merge and part encoding use: `PDS_THREADS` if set
/// (≥ 1), else the cores available. Results never depend on it.
pub fn default_threads() -> usize {
    std::env::var("PDS_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
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
        let mut rng = crate::test_rng::TestRng::new(seed | 1);
        let mut next = move || rng.next_u64();
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

    /// The memory a spilled buffer's sort leaves for the next counts
    /// against the budget: many narrow rows, then few rows with long keys.
    /// The buffered batches plus what is kept never pass the buffer's share
    /// of the budget by more than a batch, and what is kept alone never
    /// passes it; a row's sort is charged what it took (more than the first
    /// guess for a string key, far more for long keys); the output is the
    /// stable sort.
    #[test]
    fn memory_kept_between_buffers_counts_against_the_budget() {
        let key = vec!["k".to_string(), "s".to_string()];
        let budget = 256 * 1024;
        let mut sorter = ExternalSorter::new(schema(), &key, budget, None)
            .unwrap()
            .with_threads(2);
        let limit = sorter.buffer_limit();
        let mut input = Vec::new();
        let mut narrow_kept = 0usize;
        let mut narrow_charge = 0;
        for i in 0..160 {
            let mut b = batch(i * 250, 250, 3 + i as u64);
            if i >= 80 {
                // Long keys: each row's `s` is 400 bytes.
                let long: Vec<String> = b
                    .column(1)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| format!("{:>400}", v.unwrap_or_default()))
                    .collect();
                let mut cols = b.columns().to_vec();
                cols[1] = Arc::new(StringArray::from(long));
                b = RecordBatch::try_new(schema(), cols).unwrap();
            }
            let slack = b.get_array_memory_size() + b.num_rows() * sorter.sort_bytes_per_row;
            input.extend(collect(Box::new(std::iter::once(Ok(b.clone())))));
            sorter.push(b).unwrap();
            let kept = sorter.scratch.bytes();
            assert!(kept <= limit, "batch {i}: {kept} kept");
            assert!(
                sorter.buffered + kept <= limit + slack,
                "batch {i}: {} buffered + {kept} kept",
                sorter.buffered
            );
            if i < 80 {
                narrow_kept = narrow_kept.max(kept);
                narrow_charge = sorter.sort_bytes_per_row;
            }
        }
        assert!(sorter.spilled_runs() > 10, "{} runs", sorter.spilled_runs());
        assert!(narrow_kept > 0, "a narrow buffer's sort memory was kept");
        assert!(
            narrow_charge > SORT_BYTES_PER_ROW,
            "a row of a string key is charged {narrow_charge}"
        );
        assert!(
            sorter.sort_bytes_per_row > 400,
            "a row of a long key is charged {}",
            sorter.sort_bytes_per_row
        );
        let got = collect(sorter.finish().unwrap());
        let mut expected = input;
        expected.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        assert_eq!(got, expected);
    }

    #[test]
    fn spills_within_the_budget_and_sorts_stably_by_a_compound_key() {
        let key = vec!["k".to_string(), "s".to_string()];
        // One thread (one k-way merge) and several (merged by key ranges).
        for threads in [1, 2, 4] {
            let mut input = Vec::new();
            // ~64 KiB budget: many runs.
            let mut sorter = ExternalSorter::new(schema(), &key, 64 * 1024, None)
                .unwrap()
                .with_threads(threads);
            for i in 0..40 {
                let b = batch(i * 500, 500, 7 + i as u64);
                input.extend(collect(Box::new(std::iter::once(Ok(b.clone())))));
                sorter.push(b).unwrap();
            }
            assert!(sorter.spilled_runs() > 5, "{} runs", sorter.spilled_runs());
            let dir = sorter.dir.as_ref().map(|d| d.0.clone()).unwrap();
            let mut stream = sorter.finish().unwrap();
            let batches: Vec<_> = stream.by_ref().collect();
            // The merge threads are joined and the runs let go before the
            // output reports its end: the folder is gone by then, with the
            // stream not yet dropped.
            assert!(
                !dir.exists(),
                "{threads} threads: spill files kept after the end"
            );
            drop(stream);
            let got = collect(Box::new(batches.into_iter()));
            // Expected: a stable sort by (k nulls first, s).
            let mut expected = input.clone();
            expected.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            assert_eq!(got, expected, "{threads} threads");
        }
    }

    /// Many duplicates (keys in 0..1000, `s` in 7 values), spills and a
    /// compound key: the same batches, byte for byte, on 1, 2 and 4
    /// threads, and the stable order.
    #[test]
    fn output_is_identical_for_any_thread_count() {
        let key = vec!["k".to_string(), "s".to_string()];
        let mut input = Vec::new();
        let mut outputs = Vec::new();
        for threads in [1, 2, 4] {
            let mut sorter = ExternalSorter::new(schema(), &key, 256 * 1024, None)
                .unwrap()
                .with_threads(threads);
            input.clear();
            for i in 0..30 {
                // Uneven batch sizes, so that slices cut batches.
                let b = batch(i * 10_000, 1000 + 777 * (i % 5), 11 + i as u64);
                input.extend(collect(Box::new(std::iter::once(Ok(b.clone())))));
                sorter.push(b).unwrap();
            }
            assert!(sorter.spilled_runs() > 2, "{} runs", sorter.spilled_runs());
            let got: Vec<RecordBatch> = sorter.finish().unwrap().map(|b| b.unwrap()).collect();
            outputs.push(got);
        }
        assert_eq!(outputs[0], outputs[1], "1 vs 2 threads");
        assert_eq!(outputs[0], outputs[2], "1 vs 4 threads");
        let got = collect(Box::new(outputs.swap_remove(0).into_iter().map(Ok)));
        let mut expected = input.clone();
        expected.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        assert_eq!(got, expected, "stable: ties keep their input order");
    }

    /// Pushes 30 uneven batches of `batch` (keys in 0..1000, or all one
    /// key) into a sorter of `budget` bytes on `threads` threads.
    fn filled(threads: usize, budget: usize, one_key: bool) -> ExternalSorter {
        let key = vec!["k".to_string(), "s".to_string()];
        let mut sorter = ExternalSorter::new(schema(), &key, budget, None)
            .unwrap()
            .with_threads(threads);
        for i in 0..30 {
            let mut b = batch(i * 10_000, 1000 + 777 * (i % 5), 5 + i as u64);
            if one_key {
                let n = b.num_rows();
                let mut cols = b.columns().to_vec();
                cols[0] = Arc::new(Int64Array::from(vec![Some(7); n]));
                cols[1] = Arc::new(StringArray::from(vec!["x"; n]));
                b = RecordBatch::try_new(schema(), cols).unwrap();
            }
            sorter.push(b).unwrap();
        }
        sorter
    }

    /// The merge by key range: many ranges (the plan covers every row once,
    /// in order), and the output is the one-thread merge's, batch for
    /// batch, with keys repeated across ranges' neighbours and with one
    /// key only (one range).
    #[test]
    fn the_parallel_merge_by_key_range_is_the_single_merge() {
        let sorter = filled(4, 128 * 1024, false);
        let (runs, bytes) = (sorter.spilled_runs(), sorter.range_bytes());
        assert!(runs > 3, "{runs} runs");
        let runs_in = sorter.into_runs().unwrap();
        let plan = super::super::range_merge::plan(&runs_in, bytes, 4).unwrap();
        assert!(plan.len() > 8, "{} ranges", plan.len());
        // However small the ranges asked for, about 16 a thread (a cut
        // per sixteenth of the bytes, so at most 17).
        let capped = super::super::range_merge::plan(&runs_in, 1, 1).unwrap();
        assert!((2..=17).contains(&capped.len()), "{} ranges", capped.len());
        assert_eq!(
            capped.iter().map(|r| r.1).sum::<usize>(),
            plan.iter().map(|r| r.1).sum::<usize>()
        );
        let mut at = 0;
        for (offset, rows) in &plan {
            assert_eq!(*offset, at);
            assert!(*rows > 0);
            at += rows;
        }
        assert_eq!(at, (0..30).map(|i| 1000 + 777 * (i % 5)).sum::<usize>());
        for one_key in [false, true] {
            let single: Vec<RecordBatch> = filled(1, 128 * 1024, one_key)
                .finish()
                .unwrap()
                .map(|b| b.unwrap())
                .collect();
            for threads in [2, 3, 4] {
                let got: Vec<RecordBatch> = filled(threads, 128 * 1024, one_key)
                    .finish()
                    .unwrap()
                    .map(|b| b.unwrap())
                    .collect();
                assert_eq!(got, single, "{threads} threads, one key: {one_key}");
            }
        }
    }

    /// Reading stops early: the merge threads stop and the spill files go.
    #[test]
    fn a_parallel_merge_dropped_early_stops_and_removes_its_files() {
        let sorter = filled(2, 64 * 1024, false);
        let dir = sorter.dir.as_ref().map(|d| d.0.clone()).unwrap();
        let mut out = sorter.finish().unwrap();
        assert!(out.next().unwrap().is_ok());
        drop(out);
        let waited = std::time::Instant::now();
        while dir.exists() && waited.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            !dir.exists(),
            "spill files left after the merge was dropped"
        );
    }

    /// A damaged spill file is an error, never a panic or wrong rows.
    #[test]
    fn a_damaged_spill_file_is_an_error() {
        for threads in [1, 2] {
            let sorter = filled(threads, 64 * 1024, false);
            let run = sorter.runs[1].path.clone();
            let len = std::fs::metadata(&run).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&run).unwrap();
            f.set_len(len / 2).unwrap();
            let got: Result<Vec<RecordBatch>> = sorter.finish().and_then(|s| s.collect());
            assert!(got.is_err(), "{threads} threads");
        }
    }

    /// One buffer (no spill), sorted on several threads: the stable order.
    #[test]
    fn an_unspilled_buffer_sorts_stably_on_threads() {
        let key = vec!["k".to_string()];
        let mut input = Vec::new();
        let mut sorter = ExternalSorter::new(schema(), &key, 1 << 30, None)
            .unwrap()
            .with_threads(3);
        for i in 0..7 {
            let b = batch(i * 5000, 5000, 3 + i as u64);
            input.extend(collect(Box::new(std::iter::once(Ok(b.clone())))));
            sorter.push(b).unwrap();
        }
        assert_eq!(sorter.spilled_runs(), 0);
        let got = collect(sorter.finish().unwrap());
        input.sort_by_key(|r| r.0);
        assert_eq!(got, input);
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
