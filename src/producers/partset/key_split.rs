//! A sorted stream split at key bounds: each part's share of a change.

use arrow_array::RecordBatch;
use arrow_row::{Row, Rows};

use crate::error::Result;
use crate::producers::keys::KeyEncoder;
use crate::producers::BatchIter;

/// Splits a sorted stream at key bounds.
pub struct KeySplitter {
    stream: BatchIter,
    encoder: KeyEncoder,
    head: Option<(RecordBatch, Rows, usize)>,
    /// Rows given back ([`Self::unread`]), read before the stream: the
    /// last is read first.
    front: Vec<RecordBatch>,
}

impl KeySplitter {
    pub fn new(stream: BatchIter, encoder: KeyEncoder) -> Self {
        Self {
            stream,
            encoder,
            head: None,
            front: Vec::new(),
        }
    }

    /// Give back `batches` (the rows just taken, in order): they are read
    /// again next.
    pub fn unread(&mut self, batches: Vec<RecordBatch>) {
        if let Some((b, _, pos)) = self.head.take() {
            if pos < b.num_rows() {
                self.front.push(b.slice(pos, b.num_rows() - pos));
            }
        }
        self.front
            .extend(batches.into_iter().rev().filter(|b| b.num_rows() > 0));
    }

    /// Make sure a batch with unread rows is at the head; `false` at the end.
    fn fill(&mut self) -> Result<bool> {
        while self.head.is_none() {
            let next = match self.front.pop() {
                Some(b) => Some(Ok(b)),
                None => self.stream.next(),
            };
            let Some(b) = next else {
                return Ok(false);
            };
            let b = b?;
            if b.num_rows() > 0 {
                let rows = self.encoder.rows(&b)?;
                self.head = Some((b, rows, 0));
            }
        }
        Ok(true)
    }

    /// The next `n` rows at most.
    pub fn take_rows(&mut self, n: usize) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let mut left = n;
        while left > 0 && self.fill()? {
            let Some((batch, _, pos)) = self.head.as_mut() else {
                break;
            };
            let take = left.min(batch.num_rows() - *pos);
            out.push(batch.slice(*pos, take));
            *pos += take;
            left -= take;
            if *pos == batch.num_rows() {
                self.head = None;
            }
        }
        Ok(out)
    }

    /// The next rows whose key is `<= bound` (all the rest if `None`).
    pub fn take_until(&mut self, bound: Option<Row<'_>>) -> Result<Vec<RecordBatch>> {
        Ok(self.take_until_limit(bound, usize::MAX)?.0)
    }

    /// [`Self::take_until`], but at most `limit` rows, and whether that
    /// was all of them (`false`: rows `<= bound` may remain).
    pub fn take_until_limit(
        &mut self,
        bound: Option<Row<'_>>,
        limit: usize,
    ) -> Result<(Vec<RecordBatch>, bool)> {
        let mut out = Vec::new();
        let mut left = limit;
        loop {
            if left == 0 {
                let more = self.fill()?
                    && match (bound, self.head.as_ref()) {
                        (None, _) => true,
                        (Some(bound), Some((_, rows, pos))) => rows.row(*pos) <= bound,
                        (Some(_), None) => false,
                    };
                return Ok((out, !more));
            }
            if !self.fill()? {
                return Ok((out, true));
            }
            let Some((batch, rows, pos)) = self.head.as_ref() else {
                return Ok((out, true));
            };
            let len = batch.num_rows();
            // The first row past the bound (rows are sorted by the cut key).
            let past = match bound {
                None => len,
                Some(bound) => {
                    let (mut lo, mut hi) = (*pos, len);
                    while lo < hi {
                        let mid = lo + (hi - lo) / 2;
                        if rows.row(mid) <= bound {
                            lo = mid + 1;
                        } else {
                            hi = mid;
                        }
                    }
                    lo
                }
            };
            let end = past.min(pos.saturating_add(left));
            if end > *pos {
                out.push(batch.slice(*pos, end - *pos));
                left -= end - *pos;
            }
            if end < len {
                if let Some(h) = self.head.as_mut() {
                    h.2 = end;
                }
                if end == past {
                    return Ok((out, true));
                }
                continue;
            }
            self.head = None;
        }
    }
}
