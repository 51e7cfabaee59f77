//! Spilled runs of the external sort: the folder that holds them, and each
//! run file's index (its batches' rows and memory, and a key every
//! [`SAMPLE_ROWS`] rows) by which the merge finds key ranges in it.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;
use arrow_row::OwnedRow;

use super::keys::lower_bound;
use super::keys::KeyEncoder;
use super::BatchIter;
use crate::error::{Error, Result};

/// A folder of spill files, removed with everything in it on drop.
#[derive(Debug)]
pub(super) struct SpillDir(pub(super) PathBuf);

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Rows between the keys sampled to cut ranges.
pub(super) const SAMPLE_ROWS: usize = 512;

/// One batch of a spilled run.
#[derive(Debug)]
pub(super) struct RunBatch {
    /// The keys of rows 0, [`SAMPLE_ROWS`], 2 * [`SAMPLE_ROWS`], ...
    pub keys: Vec<OwnedRow>,
    pub rows: usize,
    /// Its memory in Arrow (a range's size is estimated from it).
    pub bytes: usize,
}

impl RunBatch {
    /// `batch`'s sampled keys, rows and memory.
    pub fn of(encoder: &KeyEncoder, batch: &RecordBatch) -> Result<Self> {
        let keys = (0..batch.num_rows())
            .step_by(SAMPLE_ROWS)
            .map(|p| encoder.key_of(batch, p))
            .collect::<Result<_>>()?;
        Ok(Self {
            keys,
            rows: batch.num_rows(),
            bytes: batch.get_array_memory_size(),
        })
    }

    pub(super) fn first(&self) -> Option<&OwnedRow> {
        self.keys.first()
    }
}

/// A spilled run: its IPC file and its batches, in order.
#[derive(Debug)]
pub(super) struct RunIndex {
    pub path: PathBuf,
    pub(super) batches: Vec<RunBatch>,
    /// Where each batch starts, in rows of the run.
    starts: Vec<usize>,
}

impl RunIndex {
    pub fn new(path: PathBuf, batches: Vec<RunBatch>) -> Self {
        let mut starts = Vec::with_capacity(batches.len());
        let mut n = 0;
        for b in &batches {
            starts.push(n);
            n += b.rows;
        }
        Self {
            path,
            batches,
            starts,
        }
    }

    pub(super) fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.rows).sum()
    }

    fn reader(&self) -> Result<FileReader<BufReader<File>>> {
        Ok(FileReader::try_new(
            BufReader::new(File::open(&self.path)?),
            None,
        )?)
    }

    /// The first row (of the run) whose key is not below `key`.
    pub(super) fn position(&self, encoder: &KeyEncoder, key: &OwnedRow) -> Result<usize> {
        // Batches whose first key is below `key`: the row is in the last of
        // them, or is the first row of the next.
        let b = self
            .batches
            .partition_point(|x| x.first().is_some_and(|f| f < key));
        if b == 0 {
            return Ok(0);
        }
        let mut reader = self.reader()?;
        reader.set_index(b - 1)?;
        let batch = reader
            .next()
            .transpose()?
            .ok_or_else(|| damaged(&self.path, b - 1))?;
        if batch.num_rows() != self.batches[b - 1].rows {
            return Err(damaged(&self.path, b - 1));
        }
        let rows = encoder.rows(&batch)?;
        let key = key.row();
        let within = lower_bound(rows.num_rows(), |i| Ok(rows.row(i) < key))?;
        Ok(self.starts[b - 1] + within)
    }

    /// Rows `range` of the run, as batches (the first and last sliced).
    pub(super) fn read(
        &self,
        range: std::ops::Range<usize>,
        dir: Arc<SpillDir>,
    ) -> Result<BatchIter> {
        if range.is_empty() {
            return Ok(Box::new(std::iter::empty()));
        }
        let first = self.starts.partition_point(|&s| s <= range.start) - 1;
        let mut reader = self.reader()?;
        reader.set_index(first)?;
        let mut at = self.starts[first];
        let end = range.end;
        let mut skip = Some(range.start - at);
        let mut index = first;
        let expected: Vec<usize> = self.batches.iter().map(|b| b.rows).collect();
        let path = self.path.clone();
        Ok(Box::new(
            reader
                .map_while(move |b| {
                    let _keep = &dir; // The files stay until read.
                    if at >= end {
                        return None;
                    }
                    let b = match b {
                        Ok(b) if expected.get(index) == Some(&b.num_rows()) => b,
                        Ok(_) => return Some(Err(damaged(&path, index))),
                        Err(e) => return Some(Err(e.into())),
                    };
                    let n = b.num_rows();
                    let from = skip.take().unwrap_or(0);
                    let to = n.min(end - at);
                    at += n;
                    index += 1;
                    Some(Ok(b.slice(from, to - from)))
                })
                .filter(|b| !matches!(b, Ok(b) if b.num_rows() == 0)),
        ))
    }
}

/// Batch `batch` of spill file `path` is missing or not what was written.
fn damaged(path: &std::path::Path, batch: usize) -> Error {
    Error::Task(format!(
        "spill file {path:?}: batch {batch} is missing or changed since it was written"
    ))
}
