//! How far a long operation has got: a few atomic counters that the
//! operation updates as it goes and that anyone holding the same [`Progress`]
//! reads at any time (the Python side polls it from its own thread to draw a
//! bar; nothing calls back into Python).
//!
//! An operation is handed an `Option<Arc<Progress>>` in its options; `None`
//! (the default) costs one branch per update. What `done` and `total` count
//! depends on the [`Phase`]: rows for a write, parts for a read, rows for a
//! compaction, objects for a vacuum, steps for a pipeline. `parts`, `rows`
//! and `bytes` add detail where the operation knows it.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// What an operation is doing, and so what [`Progress`]'s `done` and
/// `total` count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Nothing started yet.
    Idle = 0,
    /// Writing a dataset: rows written (total: the input's rows, if known).
    Writing = 1,
    /// Reading a dataset: parts decoded of the manifest's parts.
    Reading = 2,
    /// Compacting a table: rows rewritten of the live rows to rewrite.
    Compacting = 3,
    /// Vacuuming: objects deleted of those to delete.
    Vacuuming = 4,
    /// A pipeline's nodes (sources and stages) done of its nodes.
    Steps = 5,
}

impl Phase {
    /// Every phase, by its number.
    const ALL: [Phase; 6] = [
        Phase::Idle,
        Phase::Writing,
        Phase::Reading,
        Phase::Compacting,
        Phase::Vacuuming,
        Phase::Steps,
    ];

    /// The phase's name (what Python sees).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Writing => "writing",
            Phase::Reading => "reading",
            Phase::Compacting => "compacting",
            Phase::Vacuuming => "vacuuming",
            Phase::Steps => "steps",
        }
    }

    /// The phase named `name` (see [`Self::name`]).
    pub fn from_name(name: &str) -> Option<Phase> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// `total` when the operation does not know its total.
const UNKNOWN: u64 = u64::MAX;

/// Counters of one operation's progress, shared between the operation
/// (which adds to them, from any thread) and whoever shows them.
#[derive(Debug)]
pub struct Progress {
    phase: AtomicU8,
    done: AtomicU64,
    total: AtomicU64,
    parts: AtomicU64,
    rows: AtomicU64,
    bytes: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            phase: AtomicU8::new(Phase::Idle as u8),
            done: AtomicU64::new(0),
            total: AtomicU64::new(UNKNOWN),
            parts: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }
}

/// A reading of [`Progress`] (see [`Progress::now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub phase: Phase,
    pub done: u64,
    /// `None`: not known.
    pub total: Option<u64>,
    pub parts: u64,
    pub rows: u64,
    pub bytes: u64,
}

impl Progress {
    /// Enter `phase` with `total` units to do (`None`: not known) and every
    /// count at 0 (an operation that starts over, a read retried say,
    /// starts its counts over).
    pub fn start(&self, phase: Phase, total: Option<u64>) {
        for c in [&self.done, &self.parts, &self.rows, &self.bytes] {
            c.store(0, Ordering::Relaxed);
        }
        self.total.store(
            total.map_or(UNKNOWN, |t| t.min(UNKNOWN - 1)),
            Ordering::Relaxed,
        );
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Set the total once it is known (`None`: not known).
    pub fn set_total(&self, total: Option<u64>) {
        self.total.store(
            total.map_or(UNKNOWN, |t| t.min(UNKNOWN - 1)),
            Ordering::Relaxed,
        );
    }

    /// `done` units more, with the parts, rows and bytes they took.
    pub fn add(&self, done: u64, parts: u64, rows: u64, bytes: u64) {
        for (c, n) in [
            (&self.done, done),
            (&self.parts, parts),
            (&self.rows, rows),
            (&self.bytes, bytes),
        ] {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// The counts now. Each is exact; read while the operation runs, they
    /// may be from instants a few nanoseconds apart.
    pub fn now(&self) -> Reading {
        let phase = self.phase.load(Ordering::Acquire);
        let total = self.total.load(Ordering::Relaxed);
        Reading {
            phase: Phase::ALL
                .get(usize::from(phase))
                .copied()
                .unwrap_or(Phase::Idle),
            done: self.done.load(Ordering::Relaxed),
            total: (total != UNKNOWN).then_some(total),
            parts: self.parts.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// [`Progress::add`] on an optional progress: nothing when `None`.
pub fn add(p: Option<&Progress>, done: u64, parts: u64, rows: u64, bytes: u64) {
    if let Some(p) = p {
        p.add(done, parts, rows, bytes);
    }
}

/// [`Progress::start`] on an optional progress: nothing when `None`.
pub fn start(p: Option<&Progress>, phase: Phase, total: Option<u64>) {
    if let Some(p) = p {
        p.start(phase, total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_new_progress_is_idle_with_no_total() {
        let r = Progress::default().now();
        assert_eq!(r.phase, Phase::Idle);
        assert_eq!(
            (r.done, r.total, r.parts, r.rows, r.bytes),
            (0, None, 0, 0, 0)
        );
    }

    #[test]
    fn start_sets_the_phase_and_total_and_clears_the_counts() {
        let p = Progress::default();
        p.start(Phase::Writing, Some(100));
        p.add(10, 1, 10, 500);
        let r = p.now();
        assert_eq!(r.phase, Phase::Writing);
        assert_eq!(
            (r.done, r.total, r.parts, r.rows, r.bytes),
            (10, Some(100), 1, 10, 500)
        );
        p.start(Phase::Reading, None);
        let r = p.now();
        assert_eq!(r.phase, Phase::Reading);
        assert_eq!(
            (r.done, r.total, r.parts, r.rows, r.bytes),
            (0, None, 0, 0, 0)
        );
        p.set_total(Some(7));
        assert_eq!(p.now().total, Some(7));
        // u64::MAX itself stands for "unknown": a total that large is clamped.
        p.set_total(Some(u64::MAX));
        assert_eq!(p.now().total, Some(u64::MAX - 1));
    }

    #[test]
    fn adds_from_many_threads_all_count() {
        let p = Arc::new(Progress::default());
        p.start(Phase::Vacuuming, Some(8000));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        p.add(1, 0, 2, 3);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let r = p.now();
        assert_eq!(
            (r.done, r.total, r.rows, r.bytes),
            (8000, Some(8000), 16000, 24000)
        );
    }

    #[test]
    fn the_optional_helpers_do_nothing_without_a_progress() {
        start(None, Phase::Writing, Some(1));
        add(None, 1, 1, 1, 1);
        let p = Progress::default();
        start(Some(&p), Phase::Steps, Some(3));
        add(Some(&p), 2, 0, 0, 0);
        assert_eq!((p.now().phase, p.now().done), (Phase::Steps, 2));
    }

    #[test]
    fn phases_round_trip_by_name() {
        for p in Phase::ALL {
            assert_eq!(Phase::from_name(p.name()), Some(p));
        }
        assert_eq!(Phase::from_name("nope"), None);
    }
}
