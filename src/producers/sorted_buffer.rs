//! A sort buffer, sorted in memory on several threads: cut into one
//! contiguous slice per thread, each slice's key rows computed and sorted
//! on its own thread, and the sorted slices merged (ties: the earlier slice
//! first). The rows are not copied: they are gathered in key order, chunk
//! by chunk, as the sorted buffer is read. What sorting allocates is kept
//! for the next buffer ([`Scratch`]).

use arrow_array::RecordBatch;
use arrow_row::{OwnedRow, Rows};

use super::keys::KeyEncoder;
use crate::error::{Error, Result};

/// Rows per output batch.
pub const BATCH_ROWS: usize = 8192;

/// Output chunks each thread gathers at a time when a buffer is written out.
const GATHER_CHUNKS_PER_THREAD: usize = 4;

/// A key's sort prefix (see [`super::keys::prefix`]) and the row's index
/// in the buffer.
type Entry = ((u64, u64, u32), u32);

/// One contiguous slice of a buffer, sorted: its key rows and its entries
/// (indices are the buffer's; `base` is the slice's first).
struct SortedSlice {
    rows: Rows,
    order: Vec<Entry>,
    base: u32,
}

impl SortedSlice {
    fn row(&self, e: &Entry) -> arrow_row::Row<'_> {
        self.rows.row((e.1 - self.base) as usize)
    }
}

/// `batches` cut into at most `n` contiguous slices of about equal rows,
/// each with the buffer index of its first row.
fn split_rows(batches: &[RecordBatch], n: usize) -> Vec<(u32, Vec<RecordBatch>)> {
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    let per = total.div_ceil(n.max(1)).max(1);
    let mut out: Vec<(u32, Vec<RecordBatch>)> = Vec::new();
    let (mut base, mut room) = (0usize, 0usize);
    for b in batches {
        let mut at = 0;
        while at < b.num_rows() {
            if room == 0 {
                out.push((base as u32, Vec::new()));
                room = per;
            }
            let take = room.min(b.num_rows() - at);
            if let Some(last) = out.last_mut() {
                last.1.push(b.slice(at, take));
            }
            at += take;
            base += take;
            room -= take;
        }
    }
    out
}

/// Sort one slice by (key prefix, key bytes, index): a total order, so the
/// unstable sort is stable.
fn sort_slice(
    encoder: &KeyEncoder,
    base: u32,
    batches: &[RecordBatch],
    reuse: SliceScratch,
) -> Result<SortedSlice> {
    let rows = match reuse.rows {
        Some(mut rows) => {
            rows.clear();
            encoder.append_rows(&mut rows, batches)?;
            rows
        }
        None => encoder.rows_of_all(batches)?,
    };
    let mut order = reuse.order;
    order.clear();
    order.extend((0..rows.num_rows()).map(|i| (super::keys::prefix(rows.row(i)), base + i as u32)));
    order.sort_unstable_by(|a, b| {
        super::keys::cmp_prefixed(a.0, b.0, || {
            rows.row((a.1 - base) as usize)
                .cmp(&rows.row((b.1 - base) as usize))
        })
        .then(a.1.cmp(&b.1))
    });
    Ok(SortedSlice { rows, order, base })
}

/// Whether the head of slice `a` (at `pa`) goes before that of `b`: by key,
/// then by buffer index (slices are contiguous, so the earlier slice).
fn before(slices: &[SortedSlice], a: (usize, usize), b: (usize, usize)) -> bool {
    let (x, y) = (&slices[a.0].order[a.1], &slices[b.0].order[b.1]);
    super::keys::cmp_prefixed(x.0, y.0, || slices[a.0].row(x).cmp(&slices[b.0].row(y)))
        .then(x.1.cmp(&y.1))
        == std::cmp::Ordering::Less
}

/// The buffer indices of `batches`' rows sorted by `encoder`'s key
/// (stable), the buffer cut into `threads` slices sorted in parallel and
/// merged. The result does not depend on `threads`.
fn sorted_order(
    encoder: &KeyEncoder,
    batches: &[RecordBatch],
    threads: usize,
    scratch: &mut Scratch,
) -> Result<Vec<u32>> {
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    if u32::try_from(total).is_err() {
        return Err(Error::InvalidArgument(format!(
            "a sort buffer of {total} rows is too large (at most 2^32 - 1)"
        )));
    }
    // Small buffers are not worth a thread.
    let threads = threads.clamp(1, total.div_ceil(BATCH_ROWS).max(1));
    let parts: Vec<_> = split_rows(batches, threads)
        .into_iter()
        .map(|(base, part)| (base, part, scratch.slices.pop().unwrap_or_default()))
        .collect();
    scratch.slices.clear();
    let slices = par_map(parts, |(base, part, reuse)| {
        sort_slice(encoder, base, &part, reuse)
    })?;
    let mut out = std::mem::take(&mut scratch.order);
    out.clear();
    out.reserve(total);
    if slices.len() == 1 {
        out.extend(slices.iter().flat_map(|s| s.order.iter().map(|e| e.1)));
        scratch.keep(slices);
        return Ok(out);
    }
    // Merge the slices' orders: a heap of slice heads.
    let mut pos = vec![0usize; slices.len()];
    let mut heap: Vec<usize> = (0..slices.len())
        .filter(|&s| !slices[s].order.is_empty())
        .collect();
    let less = |pos: &[usize], a: usize, b: usize| before(&slices, (a, pos[a]), (b, pos[b]));
    let sift_down = |heap: &mut Vec<usize>, pos: &[usize], mut i: usize| loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut m = i;
        if l < heap.len() && less(pos, heap[l], heap[m]) {
            m = l;
        }
        if r < heap.len() && less(pos, heap[r], heap[m]) {
            m = r;
        }
        if m == i {
            return;
        }
        heap.swap(i, m);
        i = m;
    };
    for i in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, &pos, i);
    }
    while let Some(&top) = heap.first() {
        out.push(slices[top].order[pos[top]].1);
        pos[top] += 1;
        if pos[top] == slices[top].order.len() {
            let last = heap.len() - 1;
            heap.swap(0, last);
            heap.pop();
        }
        if !heap.is_empty() {
            sift_down(&mut heap, &pos, 0);
        }
    }
    scratch.keep(slices);
    Ok(out)
}

/// What sorting a buffer allocates, kept for the next buffer: each slice's
/// key rows and entries, and the buffer's order.
#[derive(Default)]
pub(super) struct Scratch {
    slices: Vec<SliceScratch>,
    order: Vec<u32>,
}

/// One slice's key rows and entries.
#[derive(Default)]
struct SliceScratch {
    rows: Option<Rows>,
    order: Vec<Entry>,
}

impl Scratch {
    /// The memory held (capacities, not lengths).
    pub(super) fn bytes(&self) -> usize {
        let slices: usize = self
            .slices
            .iter()
            .map(|s| {
                s.rows.as_ref().map_or(0, |r| r.size())
                    + s.order.capacity() * std::mem::size_of::<Entry>()
            })
            .sum();
        slices + self.order.capacity() * std::mem::size_of::<u32>()
    }

    fn keep(&mut self, slices: Vec<SortedSlice>) {
        self.slices = slices
            .into_iter()
            .map(|s| SliceScratch {
                rows: Some(s.rows),
                order: s.order,
            })
            .collect();
    }
}

/// A sorted buffer: its batches and the order of their rows, gathered into
/// output batches of [`BATCH_ROWS`] rows on demand (no copy of the buffer).
pub(super) struct SortedBuffer {
    batches: Vec<RecordBatch>,
    /// Where each batch starts, in buffer indices.
    starts: Vec<u32>,
    order: Vec<u32>,
    /// The next chunk the iterator yields.
    next: usize,
    /// The slices' memory, kept for the next buffer's sort (empty for the
    /// last buffer, which the merge reads).
    spare: Vec<SliceScratch>,
}

impl SortedBuffer {
    pub(super) fn new(
        encoder: &KeyEncoder,
        batches: Vec<RecordBatch>,
        threads: usize,
        mut scratch: Scratch,
    ) -> Result<Self> {
        let order = sorted_order(encoder, &batches, threads, &mut scratch)?;
        let spare = std::mem::take(&mut scratch.slices);
        let mut starts = Vec::with_capacity(batches.len());
        let mut n = 0u32;
        for b in &batches {
            starts.push(n);
            n += b.num_rows() as u32;
        }
        Ok(Self {
            batches,
            starts,
            order,
            next: 0,
            spare,
        })
    }

    /// The memory of this buffer's sort, for the next: its slices' and its
    /// order.
    pub(super) fn into_scratch(self) -> Scratch {
        Scratch {
            slices: self.spare,
            order: self.order,
        }
    }

    /// Without the slices' memory (the last buffer, held while merging).
    pub(super) fn lean(mut self) -> Self {
        self.spare = Vec::new();
        // An order kept from a larger buffer: only this one's is needed.
        if self.order.capacity() > 2 * self.order.len() {
            self.order.shrink_to_fit();
        }
        self
    }

    pub(super) fn chunks(&self) -> usize {
        self.order.len().div_ceil(BATCH_ROWS)
    }

    /// Rows in the buffer.
    pub(super) fn len(&self) -> usize {
        self.order.len()
    }

    /// Memory of the buffered batches.
    pub(super) fn bytes(&self) -> usize {
        self.batches.iter().map(|b| b.get_array_memory_size()).sum()
    }

    /// (batch, row) of buffer index `i`.
    fn locate(&self, i: u32) -> (usize, usize) {
        let b = self.starts.partition_point(|&s| s <= i) - 1;
        (b, (i - self.starts[b]) as usize)
    }

    /// The key of the row at sorted position `p` (< [`Self::len`]).
    pub(super) fn key_at(&self, encoder: &KeyEncoder, p: usize) -> Result<OwnedRow> {
        let (b, r) = self.locate(self.order[p]);
        encoder.key_of(&self.batches[b], r)
    }

    /// The first sorted position whose key is not below `key` (binary
    /// search, one key converted per probe).
    pub(super) fn position(&self, encoder: &KeyEncoder, key: &OwnedRow) -> Result<usize> {
        super::keys::lower_bound(self.order.len(), |p| Ok(self.key_at(encoder, p)? < *key))
    }

    /// The rows at sorted positions `range`, as one batch.
    pub(super) fn gather(&self, range: std::ops::Range<usize>) -> Result<RecordBatch> {
        let idx: Vec<(usize, usize)> = self.order[range].iter().map(|&i| self.locate(i)).collect();
        let refs: Vec<&RecordBatch> = self.batches.iter().collect();
        Ok(arrow_select::interleave::interleave_record_batch(
            &refs, &idx,
        )?)
    }

    /// Output chunk `c`.
    fn chunk(&self, c: usize) -> Result<RecordBatch> {
        let end = ((c + 1) * BATCH_ROWS).min(self.order.len());
        self.gather(c * BATCH_ROWS..end)
    }

    /// Every chunk to `sink` in order, gathered a window at a time on
    /// `threads` threads.
    pub(super) fn drain_into(
        &self,
        threads: usize,
        mut sink: impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let per = GATHER_CHUNKS_PER_THREAD;
        let window = threads.max(1) * per;
        let mut c = 0;
        while c < self.chunks() {
            let end = (c + window).min(self.chunks());
            let groups: Vec<std::ops::Range<usize>> = (c..end)
                .step_by(per)
                .map(|g| g..(g + per).min(end))
                .collect();
            let gathered = par_map(groups, |g| {
                g.map(|i| self.chunk(i)).collect::<Result<Vec<_>>>()
            })?;
            for b in gathered.into_iter().flatten() {
                sink(b)?;
            }
            c = end;
        }
        Ok(())
    }
}

impl Iterator for SortedBuffer {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.chunks() {
            return None;
        }
        let out = self.chunk(self.next);
        self.next = if out.is_ok() {
            self.next + 1
        } else {
            usize::MAX
        };
        Some(out)
    }
}

/// `f` applied to each of `items` on the process's CPU pool (see
/// [`crate::runtime::cpu_pool`]), results in order. A panic in
/// `f` becomes the typed internal error; the first error (in item order)
/// is returned.
pub fn par_map<T: Send, R: Send>(
    items: Vec<T>,
    f: impl Fn(T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    use rayon::prelude::*;
    let f = &f;
    let run = move |item: T| -> Result<R> {
        crate::error::contain(crate::error::internal_panic, || f(item))
    };
    if items.len() <= 1 {
        return items.into_iter().map(run).collect();
    }
    let done: Vec<Result<R>> =
        crate::runtime::cpu_pool()?.install(|| items.into_par_iter().map(run).collect());
    done.into_iter().collect()
}
