//! The merge at the end of an external sort, in parallel by key range.
//!
//! Spilled runs are Arrow IPC files, whose batches can be read by index;
//! the sort records each batch's rows, memory and a key every
//! [`SAMPLE_ROWS`] rows, the first included ([`RunIndex`]). The key space
//! is cut at some of those keys (and at keys of the last, in-memory buffer,
//! sampled alike) into ranges of about `range_bytes` (about 16 per thread
//! at most). Where each range begins in each run is found by binary search
//! over the batches' first keys and then within one batch; in the last
//! buffer, by binary search over its sorted order.
//!
//! Each range is merged on a thread of its own from the slices of every run
//! and of the last buffer that fall in it, and the ranges are yielded in
//! key order. The output is the single merge's, batch for batch:
//! - a range starts at a key, so every row of one key is in one range, and
//!   a range's inputs are in the single merge's order (runs in spill order,
//!   then the last buffer), whose ties it keeps;
//! - a range's rows are counted before it is merged, so its output is cut
//!   at the same multiples of [`BATCH_ROWS`] as the whole output, and the
//!   short batches at the two sides of a range boundary are joined.
//!
//! Memory: at most `threads` ranges are being merged or held unread at
//! once, each holding at most about `range_bytes` of merged batches unread
//! (a larger range, such as many rows of one key, waits for its reader),
//! plus each merging thread's current batch per run. A range's threads are plain
//! threads; reading stops them when dropped. A panic in one becomes the
//! typed internal error.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use arrow_array::RecordBatch;
use arrow_row::OwnedRow;
use arrow_schema::SchemaRef;

use super::keys::KeyEncoder;
use super::merge::merge_sorted_from;
use super::sorted_buffer::{SortedBuffer, BATCH_ROWS};
use super::spill::{RunIndex, SpillDir, SAMPLE_ROWS};
use super::BatchIter;
use crate::error::{Error, Result};

/// Key ranges a merging thread takes (about, at most), whatever the sort's
/// size.
const RANGES_PER_THREAD: usize = 16;

/// What a sort hands to [`merge_runs`].
pub(super) struct Runs {
    pub schema: SchemaRef,
    pub key: Vec<String>,
    pub encoder: KeyEncoder,
    pub runs: Vec<RunIndex>,
    pub last: SortedBuffer,
    pub dir: Option<Arc<SpillDir>>,
}

/// One key range: where it begins in each run and in the last buffer, and
/// its first row in the whole output.
#[derive(Clone, Debug)]
struct Range {
    runs: Vec<std::ops::Range<usize>>,
    last: std::ops::Range<usize>,
    offset: usize,
}

impl Range {
    fn rows(&self) -> usize {
        self.runs.iter().map(|r| r.len()).sum::<usize>() + self.last.len()
    }
}

/// The keys cutting the key space into ranges of about `range_bytes`:
/// distinct, ascending, none at the smallest key.
fn splitters(
    encoder: &KeyEncoder,
    runs: &[RunIndex],
    last: &SortedBuffer,
    range_bytes: usize,
) -> Result<Vec<OwnedRow>> {
    let mut keys: Vec<(OwnedRow, usize)> = Vec::new();
    for b in runs.iter().flat_map(|r| &r.batches) {
        let per_key = b.bytes / b.keys.len().max(1);
        keys.extend(b.keys.iter().map(|k| (k.clone(), per_key)));
    }
    if last.len() > 0 {
        let per_row = last.bytes() / last.len();
        for p in (0..last.len()).step_by(SAMPLE_ROWS) {
            let rows = SAMPLE_ROWS.min(last.len() - p);
            keys.push((last.key_at(encoder, p)?, per_row * rows));
        }
    }
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<OwnedRow> = Vec::new();
    let mut held = 0usize;
    let smallest = keys.first().map(|k| k.0.clone());
    for (key, bytes) in keys {
        if held >= range_bytes
            && Some(&key) != smallest.as_ref()
            && out.last().is_none_or(|s| *s < key)
        {
            out.push(key);
            held = 0;
        }
        held += bytes;
    }
    Ok(out)
}

/// The ranges the splitters cut, with their slices and output offsets.
fn ranges(input: &Runs, splitters: &[OwnedRow]) -> Result<Vec<Range>> {
    // Cut points per input: 0, each splitter's position, the end.
    let mut cuts: Vec<Vec<usize>> = Vec::with_capacity(input.runs.len() + 1);
    for run in &input.runs {
        let mut c = vec![0];
        for s in splitters {
            c.push(run.position(&input.encoder, s)?);
        }
        c.push(run.rows());
        cuts.push(c);
    }
    let mut c = vec![0];
    for s in splitters {
        c.push(input.last.position(&input.encoder, s)?);
    }
    c.push(input.last.len());
    let last_cuts = c;
    let mut out = Vec::with_capacity(splitters.len() + 1);
    let mut offset = 0;
    for j in 0..=splitters.len() {
        let r = Range {
            runs: cuts.iter().map(|c| c[j]..c[j + 1]).collect(),
            last: last_cuts[j]..last_cuts[j + 1],
            offset,
        };
        offset += r.rows();
        if r.rows() > 0 {
            out.push(r);
        }
    }
    Ok(out)
}

/// Rows and memory of `input`'s runs and last buffer.
fn size(input: &Runs) -> (usize, usize) {
    let rows = input.runs.iter().map(|r| r.rows()).sum::<usize>() + input.last.len();
    let bytes = input
        .runs
        .iter()
        .flat_map(|r| &r.batches)
        .map(|b| b.bytes)
        .sum::<usize>()
        + input.last.bytes();
    (rows, bytes)
}

/// The ranges `input` is cut into: of about `range_bytes`, but about
/// [`RANGES_PER_THREAD`] a thread at most (one cut per that share of the
/// bytes; finding where a range begins reads a batch of every run).
fn cut(input: &Runs, range_bytes: usize, threads: usize) -> Result<Vec<Range>> {
    let (_, bytes) = size(input);
    let cut_bytes = range_bytes.max(bytes / (RANGES_PER_THREAD * threads.max(1)));
    let cut = splitters(&input.encoder, &input.runs, &input.last, cut_bytes)?;
    ranges(input, &cut)
}

/// (output offset, rows) of each range `input` is cut into.
#[cfg(test)]
pub(super) fn plan(
    input: &Runs,
    range_bytes: usize,
    threads: usize,
) -> Result<Vec<(usize, usize)>> {
    Ok(cut(input, range_bytes, threads)?
        .iter()
        .map(|r| (r.offset, r.rows()))
        .collect())
}

/// Which ranges run: the next to start, how many were read, and whether
/// the reader is gone.
struct Flow {
    next: usize,
    read: usize,
    stopped: bool,
}

struct Shared {
    input: Runs,
    ranges: Vec<Range>,
    senders: Vec<Mutex<Option<SyncSender<Result<RecordBatch>>>>>,
    flow: Mutex<Flow>,
    wake: Condvar,
    threads: usize,
}

impl Shared {
    fn flow(&self) -> MutexGuard<'_, Flow> {
        // A thread panicking while holding it is contained elsewhere; the
        // flow's counters stay consistent (plain assignments).
        self.flow.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next range this thread merges, once fewer than `threads` ranges
    /// are started and unread; `None` when all are started or the reader
    /// is gone.
    fn take(&self) -> Option<usize> {
        let mut flow = self.flow();
        loop {
            if flow.stopped || flow.next >= self.ranges.len() {
                return None;
            }
            if flow.next < flow.read + self.threads {
                flow.next += 1;
                return Some(flow.next - 1);
            }
            flow = self.wake.wait(flow).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn stopped(&self) -> bool {
        self.flow().stopped
    }

    /// Range `j`'s merged batches, cut where the whole output's are; each
    /// input read ahead on a thread of its own if `threads` > 1.
    fn merge(self: &Arc<Self>, j: usize, threads: usize) -> Result<BatchIter> {
        let r = &self.ranges[j];
        let input = &self.input;
        let mut inputs: Vec<BatchIter> = Vec::with_capacity(input.runs.len() + 1);
        for (run, rows) in input.runs.iter().zip(&r.runs) {
            if !rows.is_empty() {
                let dir = input.dir.clone().ok_or_else(|| {
                    Error::Task("a sort with spilled runs has no spill folder".into())
                })?;
                inputs.push(run.read(rows.clone(), dir)?);
            }
        }
        if !r.last.is_empty() {
            // Gathered a batch at a time as the merge reads it.
            let end = r.last.end;
            let me = self.clone();
            inputs.push(Box::new(
                r.last
                    .clone()
                    .step_by(BATCH_ROWS)
                    .map(move |s| me.input.last.gather(s..(s + BATCH_ROWS).min(end))),
            ));
        }
        let first_rows = BATCH_ROWS - r.offset % BATCH_ROWS;
        merge_sorted_from(
            input.schema.clone(),
            &input.key,
            inputs,
            BATCH_ROWS,
            first_rows,
            threads,
        )
    }

    /// Merge range `j` into its channel.
    fn run(self: &Arc<Self>, j: usize) {
        let Some(tx) = self.senders[j]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let got = crate::error::catch(|| -> Result<()> {
            for b in self.merge(j, 1)? {
                if self.stopped() || tx.send(Ok(b?)).is_err() {
                    return Ok(());
                }
            }
            Ok(())
        })
        .unwrap_or_else(|msg| Err(crate::error::internal_panic(msg)));
        if let Err(e) = got {
            let _ = tx.send(Err(e));
        }
    }
}

/// The sorted output of `input`'s runs and last buffer, merged by key
/// ranges of about `range_bytes` on `threads` threads.
pub(super) fn merge_runs(input: Runs, range_bytes: usize, threads: usize) -> Result<BatchIter> {
    let ranges = cut(&input, range_bytes, threads)?;
    let (rows, bytes) = size(&input);
    // Each range holds at most `range_bytes` of merged batches unread (at
    // least two): a larger range (many rows of one key, which no cut can
    // split, or a sort cut into few ranges) waits for its reader.
    let batch_bytes = (bytes / rows.max(1)).max(1) * BATCH_ROWS;
    let held = (range_bytes / batch_bytes).max(2);
    let mut senders = Vec::with_capacity(ranges.len());
    let mut receivers = VecDeque::with_capacity(ranges.len());
    for _ in &ranges {
        let (tx, rx) = sync_channel(held);
        senders.push(Mutex::new(Some(tx)));
        receivers.push_back(rx);
    }
    if ranges.is_empty() {
        return Ok(Box::new(std::iter::empty()));
    }
    let one = ranges.len() == 1;
    let workers = threads.min(ranges.len());
    let shared = Arc::new(Shared {
        input,
        ranges,
        senders,
        flow: Mutex::new(Flow {
            next: 0,
            read: 0,
            stopped: false,
        }),
        wake: Condvar::new(),
        threads,
    });
    if one {
        // One range (all rows one key, say): merged as it is read, its
        // runs read ahead on threads, as the one-thread merge does.
        return shared.merge(0, threads);
    }
    let mut output = Output {
        shared: Some(shared),
        workers: Vec::with_capacity(workers),
        receivers,
        pending: None,
        failed: false,
    };
    for _ in 0..workers {
        let Some(worker) = output.shared.clone() else {
            break;
        };
        let spawned = std::thread::Builder::new()
            .name("pds-merge".into())
            .spawn(move || {
                while let Some(j) = worker.take() {
                    worker.run(j);
                    // The range's batches are read and freed by other
                    // threads into this thread's blocks: returned here, or
                    // held until this thread next allocates in them.
                    crate::memory::release_freed_here();
                }
            });
        match spawned {
            Ok(handle) => output.workers.push(handle),
            // The threads started stop (dropping the output joins them).
            Err(e) => return Err(Error::Task(format!("a merge thread could not start: {e}"))),
        }
    }
    Ok(Box::new(output))
}

/// The ranges' batches in order, the short batches at range boundaries
/// joined.
///
/// The merge threads hold the runs (and so the spill folder): once the last
/// range is read, or on the first error, or when the output is dropped, the
/// threads are stopped and joined and the runs let go, so the spill folder
/// is gone before the output reports its end.
struct Output {
    /// `None` once the merge is over.
    shared: Option<Arc<Shared>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    receivers: VecDeque<Receiver<Result<RecordBatch>>>,
    /// A batch of fewer than [`BATCH_ROWS`] rows that ended a range.
    pending: Option<RecordBatch>,
    failed: bool,
}

impl Output {
    fn step(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let Some(rx) = self.receivers.front() else {
                self.end();
                return Ok(self.pending.take());
            };
            match rx.recv() {
                Ok(b) => {
                    let b = b?;
                    let b = match self.pending.take() {
                        Some(p) => arrow_select::concat::concat_batches(&p.schema(), [&p, &b])?,
                        None => b,
                    };
                    if b.num_rows() < BATCH_ROWS {
                        self.pending = Some(b);
                        continue;
                    }
                    return Ok(Some(b));
                }
                Err(_) => {
                    // The range is done: let another start.
                    self.receivers.pop_front();
                    if let Some(shared) = &self.shared {
                        shared.flow().read += 1;
                        shared.wake.notify_all();
                    }
                }
            }
        }
    }

    /// Stop the merge threads, join them, and let go of the runs (the
    /// spill folder goes with the last hold on it). Threads blocked on a
    /// full channel are freed by dropping the receivers first.
    fn end(&mut self) {
        self.receivers.clear();
        if let Some(shared) = &self.shared {
            shared.flow().stopped = true;
            shared.wake.notify_all();
        }
        for handle in self.workers.drain(..) {
            // A panic in a thread was caught in it and sent as an error.
            let _ = handle.join();
        }
        self.shared = None;
    }
}

impl Iterator for Output {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(b) => b.map(Ok),
            Err(e) => {
                self.failed = true;
                self.end();
                Some(Err(e))
            }
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.end();
    }
}
