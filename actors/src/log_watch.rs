//! Following run logs live: [`LogWatch`], told each time a watched run's log grows
//! (after the records are committed and readable), so a reader (`watch`) reads
//! the new records from the store without polling. The store tells
//! [`LogWatchers`] through its [`CommitListener`]; a run nobody watches costs the
//! writer two fenced atomic loads per batch (before the commit, and after it: a
//! watch taken in between is woken to re-read, `missed`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex};

use reel_storage::CommitListener;
use tokio::sync::watch;

use crate::error::ActorError;

/// The watched runs, each with the sequence number its log ends before.
#[derive(Default)]
pub(crate) struct LogWatchers {
    /// How many runs are watched: what `wants` reads without the lock.
    watched: AtomicUsize,
    runs: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl LogWatchers {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A watch on `run_id`'s log.
    pub(crate) fn watch(self: &Arc<Self>, run_id: &str) -> LogWatch {
        let mut runs = self.runs();
        let rx = match runs.get(run_id) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                runs.insert(run_id.to_owned(), tx);
                self.watched.store(runs.len(), Ordering::Release);
                rx
            }
        };
        // Before the caller's first read of the log: a writer that commits and
        // then finds no one watching (`wants`, fenced too) committed before that
        // read, which sees the records; otherwise it tells (`grew`, `missed`).
        fence(Ordering::SeqCst);
        LogWatch {
            run_id: run_id.to_owned(),
            rx,
            watchers: self.clone(),
        }
    }

    /// The runs watched now.
    pub(crate) fn watched_runs(&self) -> Vec<String> {
        self.runs().keys().cloned().collect()
    }

    /// The run's log ends before `next_seq`, as read from the store: tells its
    /// watchers if that is news.
    pub(crate) fn reached(&self, run_id: &str, next_seq: u64) {
        if let Some(tx) = self.runs().get(run_id) {
            tx.send_if_modified(|seen| {
                let news = *seen != next_seq;
                *seen = next_seq;
                news
            });
        }
    }

    /// Ends every watch (the host shuts down): their `changed` answers
    /// [`ActorError::Shutdown`].
    pub(crate) fn close(&self) {
        let mut runs = self.runs();
        runs.clear();
        self.watched.store(0, Ordering::Release);
    }
}

impl CommitListener for LogWatchers {
    fn wants(&self) -> bool {
        // Ordered after the commit the writer just made (see `watch`).
        fence(Ordering::SeqCst);
        self.watched.load(Ordering::Acquire) > 0
    }

    fn grew(&self, run_id: &str, next_seq: u64) {
        if let Some(tx) = self.runs().get(run_id) {
            tx.send_replace(next_seq);
        }
    }

    /// Wakes every watch: each re-reads its log (a watch that finds nothing new
    /// waits again).
    fn missed(&self) {
        for tx in self.runs().values() {
            tx.send_modify(|_| {});
        }
    }
}

/// A watch on one run's log; dropping it stops watching.
pub struct LogWatch {
    run_id: String,
    rx: watch::Receiver<u64>,
    watchers: Arc<LogWatchers>,
}

impl std::fmt::Debug for LogWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWatch")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl LogWatch {
    /// Waits until the run's log grows (at once if it grew since the last call).
    ///
    /// # Errors
    /// [`ActorError::Shutdown`] once the host shuts down.
    pub async fn changed(&mut self) -> Result<(), ActorError> {
        self.rx.changed().await.map_err(|_| ActorError::Shutdown)
    }
}

impl Drop for LogWatch {
    fn drop(&mut self) {
        let mut runs = self.watchers.runs();
        // This watch's receiver still counts.
        if runs
            .get(&self.run_id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            runs.remove(&self.run_id);
            self.watchers.watched.store(runs.len(), Ordering::Release);
        }
    }
}
