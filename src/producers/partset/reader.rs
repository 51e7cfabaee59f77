//! A rewrite's reader of whole parts: the next part a rewrite reads whole
//! is fetched and decoded on a thread of its own while the rewrite merges
//! and writes the part before it.

use super::{Layout, RangePart};
use crate::error::{Error, Result};
use crate::producers::patch::Layered;

/// Reads whole parts (with their patches) on a thread of its own, in the
/// order asked, so that a rewrite reads the next part while it merges and
/// writes the one before: two cores busy instead of one. Memory: a rewrite
/// asks one part ahead, so at most one decoded part more than it holds.
pub(super) struct Reader<'scope, 'env> {
    layout: &'env Layout,
    scope: &'scope std::thread::Scope<'scope, 'env>,
    /// The thread's request and answer channels, once started.
    channels: Option<ReaderChannels>,
    /// The parts asked for and not yet taken, in order (indices).
    asked: std::collections::VecDeque<usize>,
}

struct ReaderChannels {
    ask: std::sync::mpsc::Sender<RangePart>,
    answers: std::sync::mpsc::Receiver<Result<Layered>>,
}

impl<'scope, 'env> Reader<'scope, 'env> {
    pub(super) fn new(
        layout: &'env Layout,
        scope: &'scope std::thread::Scope<'scope, 'env>,
    ) -> Self {
        Reader {
            layout,
            scope,
            channels: None,
            asked: Default::default(),
        }
    }

    /// Start reading part `j` (`part`) whole on the reader's thread, after
    /// the parts asked for before it.
    pub(super) fn ask(&mut self, j: usize, part: &RangePart) -> Result<()> {
        if self.channels.is_none() {
            let (ask, requests) = std::sync::mpsc::channel::<RangePart>();
            let (give, answers) = std::sync::mpsc::channel();
            let layout = self.layout;
            std::thread::Builder::new()
                .name("pds-part-reader".into())
                .spawn_scoped(self.scope, move || {
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
            self.channels = Some(ReaderChannels { ask, answers });
        }
        let channels = self.channels.as_ref().ok_or_else(gone)?;
        channels.ask.send(part.clone()).map_err(|_| gone())?;
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
            let channels = self.channels.as_ref().ok_or_else(gone)?;
            let answer = channels.answers.recv().map_err(|_| gone())?;
            if first == j {
                return answer;
            }
        }
        self.layout.read_whole(part)
    }
}

/// The part reader's thread ended before it answered.
fn gone() -> Error {
    Error::Task("the part reader stopped".into())
}
