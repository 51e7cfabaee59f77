//! A rewrite's reader of whole parts: the next part a rewrite reads whole
//! is fetched and decoded on a thread of its own while the rewrite merges
//! and writes the part before it.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use super::{PartSet, RangePart};
use crate::error::{Error, Result};
use crate::producers::patch::Layered;

/// Reads whole parts (with their patches) on a thread of its own, in the
/// order asked, so that a rewrite reads the next part while it merges and
/// writes the one before: two cores busy instead of one. Memory: a rewrite
/// asks one part ahead, so at most one decoded part more than it holds.
///
/// The thread starts at the first [`Reader::ask`] and is joined when the
/// reader is dropped (after the read in progress, if any), so that no read
/// outlives the rewrite.
pub(super) struct Reader<'a> {
    layout: &'a PartSet,
    thread: Option<Thread>,
    /// The parts asked for and not yet taken, in order (indices).
    asked: VecDeque<usize>,
}

struct Thread {
    ask: Sender<RangePart>,
    answers: Receiver<Result<Layered>>,
    handle: JoinHandle<()>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(layout: &'a PartSet) -> Self {
        Reader {
            layout,
            thread: None,
            asked: VecDeque::new(),
        }
    }

    /// Start reading part `j` (`part`) whole on the reader's thread, after
    /// the parts asked for before it.
    pub(super) fn ask(&mut self, j: usize, part: &RangePart) -> Result<()> {
        let thread = match &mut self.thread {
            Some(thread) => thread,
            none => none.insert(Thread::start(self.layout.clone())?),
        };
        thread.ask.send(part.clone()).map_err(|_| stopped())?;
        self.asked.push_back(j);
        Ok(())
    }

    /// Part `j` (`part`) read whole: its answer if it was asked for (the
    /// answers to parts before it, not used, are dropped), else read here.
    pub(super) fn read(&mut self, j: usize, part: &RangePart) -> Result<Layered> {
        while let Some(&first) = self.asked.front() {
            if first > j {
                break;
            }
            self.asked.pop_front();
            let thread = self.thread.as_ref().ok_or_else(stopped)?;
            let answer = thread.answers.recv().map_err(|_| stopped())?;
            if first == j {
                return answer;
            }
        }
        self.layout.read_whole(part)
    }
}

impl Thread {
    fn start(layout: PartSet) -> Result<Self> {
        let (ask, requests) = channel::<RangePart>();
        let (give, answers) = channel();
        let handle = std::thread::Builder::new()
            .name("pds-part-reader".into())
            .spawn(move || {
                for part in requests {
                    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        crate::error::contained(|| layout.read_whole(&part))
                    }))
                    .unwrap_or_else(|_| Err(Error::Task("a part read panicked".into())));
                    if give.send(read).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::Task(format!("the part reader could not start: {e}")))?;
        Ok(Thread {
            ask,
            answers,
            handle,
        })
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(Thread { ask, handle, .. }) = self.thread.take() {
            // No more requests: the thread ends after its current read.
            drop(ask);
            let _ = handle.join();
        }
    }
}

/// The part reader's thread ended before it answered.
fn stopped() -> Error {
    Error::Task("the part reader stopped".into())
}
