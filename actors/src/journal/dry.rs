//! A dry journal: one that keeps its appends instead of writing them, for a new
//! run's first execution, run before the run's first write (`core::eager`). What
//! it kept goes into that write; then it goes live (the execution goes on under
//! the run's actor, appending to the store) or is abandoned.
//!
//! While dry, the execution reaches nothing outside it: no step body starts (its
//! lease never holds) and no service is called ([`Services`](crate::Services)
//! waits for the journal to go live): what it started waits for the write.

use std::sync::{Arc, Weak};

use reel_storage::{Clock, Event, Store};

use super::Journal;
use crate::host::RunHost;

impl Journal {
    /// A journal whose appends are kept, not written, and land at once.
    pub(crate) fn dry(
        run_id: Arc<str>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        host: Weak<dyn RunHost>,
        history: Vec<Event>,
    ) -> Journal {
        let journal = Journal::new(run_id, store, clock, host, history, 0);
        journal.0.live.get_or_init(tokio::sync::Notify::new);
        journal.lock().dry = true;
        journal
    }

    /// Whether the journal is dry: it keeps its appends.
    pub(crate) fn is_dry(&self) -> bool {
        self.0.live.get().is_some() && self.lock().dry
    }

    /// Takes what a dry journal was given so far, in log order (held events last:
    /// they came last).
    pub(crate) fn take_dry(&self) -> Vec<Event> {
        let mut state = self.lock();
        state.held_from = None;
        // What it was given is its log past the `RunStarted` it was made with.
        let given = state.history.iter().skip(1).chain(&state.tail);
        given.cloned().collect()
    }

    /// What it kept is on disk now: it appends to the store from here on, and
    /// what waited for that goes on.
    pub(crate) fn go_live(&self) {
        let waker = {
            let mut state = self.lock();
            state.dry = false;
            state.durable = state.next_seq;
            state.waker.clone()
        };
        if let Some(live) = self.0.live.get() {
            live.notify_waiters();
        }
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// What it kept was not written: nothing waiting for that ever goes on.
    pub(crate) fn abandon(&self) {
        self.close();
        if let Some(live) = self.0.live.get() {
            live.notify_waiters();
        }
    }

    /// Waits until the journal is not dry; false if it was abandoned instead.
    pub async fn until_live(&self) -> bool {
        let Some(live) = self.0.live.get() else {
            return true;
        };
        loop {
            let notified = live.notified();
            {
                let state = self.lock();
                if !state.dry {
                    return true;
                }
                if state.closed {
                    return false;
                }
            }
            notified.await;
        }
    }
}
