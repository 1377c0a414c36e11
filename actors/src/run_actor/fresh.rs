//! A new run as its first write left it, for the actor that activates it first:
//! its metadata and log, and the execution that ran before that write
//! (`core::eager`), which the actor goes on with instead of starting another.

use futures::stream::BoxStream;
use reel_storage::{Event, RunMeta};

use crate::engine::Outcome;
use crate::journal::Journal;

/// A run as just written. Boxed ([`Preload`](super::Preload)), like the actor's
/// metadata, to keep small what kameo holds inline in every run actor's task.
pub(crate) struct Fresh {
    pub(crate) meta: RunMeta,
    pub(crate) log: Vec<Event>,
    pub(crate) handed: Option<Handed>,
}

/// A new run's first execution, handed to its actor: its journal (live once the
/// run's first write has landed) and its outcomes, the one its first poll gave
/// first.
pub(crate) struct Handed {
    pub(crate) journal: Journal,
    pub(crate) outcomes: BoxStream<'static, Outcome>,
}

impl Handed {
    /// The execution's outcomes, for the actor that goes on with it.
    pub(crate) fn into_outcomes(mut self) -> BoxStream<'static, Outcome> {
        // Taken out of a value that has a `Drop`; its journal is live by now.
        std::mem::replace(&mut self.outcomes, Box::pin(futures::stream::empty()))
    }
}

impl Drop for Handed {
    /// Never handed over while its journal is still dry (its run's first write
    /// failed): what its execution started waits for nothing more.
    fn drop(&mut self) {
        if self.journal.is_dry() {
            self.journal.abandon();
        }
    }
}
