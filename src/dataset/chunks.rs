//! The bytes of a part on their way from its encoder to its uploader: a
//! `Write` sink that cuts them into chunks, and the pool that lends the
//! chunks' buffers again once their uploads drop them.
//!
//! Reusing the buffers matters for speed, not only for memory: a new 8 MiB
//! buffer per chunk is fresh memory from the allocator (which returns freed
//! memory to the OS after its purge delay), and the kernel zeroes every
//! page of it again on first touch.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

/// Chunk buffers lent out and given back, shared by the parts of one write.
/// It keeps at most `keep` idle buffers; the rest are freed when dropped.
#[derive(Clone)]
pub struct ChunkPool {
    idle: Arc<Mutex<Vec<Vec<u8>>>>,
    capacity: usize,
    keep: usize,
}

impl ChunkPool {
    /// A pool of buffers of `capacity` bytes, keeping up to `keep` idle.
    pub fn new(capacity: usize, keep: usize) -> Self {
        ChunkPool {
            idle: Arc::new(Mutex::new(Vec::new())),
            capacity,
            keep,
        }
    }

    /// An empty buffer of the pool's capacity: an idle one, else a new one.
    pub fn take(&self) -> Vec<u8> {
        let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
        idle.unwrap_or_else(|| Vec::with_capacity(self.capacity))
    }

    /// Give `buf` back (emptied), unless the pool holds enough idle ones or
    /// it grew past the pool's capacity.
    fn give(&self, mut buf: Vec<u8>) {
        if buf.capacity() != self.capacity {
            return;
        }
        buf.clear();
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.keep {
                idle.push(buf);
            }
        }
    }

    /// `buf` as `Bytes` that give the buffer back to the pool when the last
    /// reference to them drops.
    fn lend(&self, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Lent {
            buf,
            pool: self.clone(),
        })
    }
}

/// A buffer of the pool, on loan as `Bytes`.
struct Lent {
    buf: Vec<u8>,
    pool: ChunkPool,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

/// A `Write` sink that hands each full chunk (the pool's capacity) to the
/// uploader task.
pub struct ChunkSink {
    buf: Vec<u8>,
    tx: mpsc::Sender<Bytes>,
    pool: ChunkPool,
}

impl ChunkSink {
    pub fn new(tx: mpsc::Sender<Bytes>, pool: ChunkPool) -> Self {
        ChunkSink {
            buf: pool.take(),
            tx,
            pool,
        }
    }

    /// Whether bytes are buffered that were not handed on yet.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Hand the buffer on (`last`: no new buffer after it). A chunk is kept
    /// as long as the upload holds it (a memory store keeps it for good), so
    /// a short one is copied into an allocation of its size and its buffer
    /// goes back to the pool: a 1 KiB part must not hold 8 MiB.
    pub fn send(&mut self, last: bool) -> std::io::Result<()> {
        let next = if last { Vec::new() } else { self.pool.take() };
        let buf = std::mem::replace(&mut self.buf, next);
        let chunk = if buf.capacity() > 2 * buf.len() {
            let short = Bytes::copy_from_slice(&buf);
            self.pool.give(buf);
            short
        } else {
            self.pool.lend(buf)
        };
        self.tx
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::other("upload stopped"))
    }
}

impl std::io::Write for ChunkSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        // Fill the buffer to its capacity and no further, so that it never
        // reallocates and every full chunk can go back to the pool.
        let room = self.pool.capacity.saturating_sub(self.buf.len());
        let take = data.len().min(room.max(1));
        self.buf.extend_from_slice(&data[..take]);
        if self.buf.len() >= self.pool.capacity {
            self.send(false)?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn chunks_are_cut_at_capacity_and_their_buffers_come_back() {
        let pool = ChunkPool::new(8, 2);
        let (tx, mut rx) = mpsc::channel(16);
        let mut sink = ChunkSink::new(tx, pool.clone());
        sink.write_all(b"0123456789abcdefXYZ").unwrap();
        sink.send(true).unwrap();
        drop(sink);
        let mut got = Vec::new();
        while let Ok(c) = rx.try_recv() {
            got.push(c);
        }
        assert_eq!(got, [&b"01234567"[..], b"89abcdef", b"XYZ"]);
        assert!(pool.idle.lock().unwrap().len() <= 2);
        let before = pool.idle.lock().unwrap().len();
        drop(got);
        // The two full chunks come back (the short one was copied out and
        // its buffer given back at once); at most `keep` stay idle.
        assert_eq!(pool.idle.lock().unwrap().len(), 2.min(before + 2));
        let again = pool.take();
        assert!(again.is_empty() && again.capacity() == 8);
    }
}
