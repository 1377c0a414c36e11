//! Callers waiting on runs, by run id: the one-shot senders that a run's next change
//! (of state, or a published value) answers. A leaf; the core keeps two of them.

use std::sync::Mutex;

use foldhash::{HashMap, HashMapExt};
use tokio::sync::oneshot;

/// Callers waiting on runs, by run id: each a one-shot sender the run's next
/// change (of state, or a published value) answers. Shared by `result()`-style
/// waiters and `wait_published()`.
pub(crate) struct Waiters<T>(Mutex<HashMap<String, Vec<oneshot::Sender<T>>>>);

impl<T> Default for Waiters<T> {
    fn default() -> Self {
        Waiters(Mutex::new(HashMap::new()))
    }
}

impl<T> Waiters<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<oneshot::Sender<T>>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a waiter on the run; the receiver errors if it is dropped unanswered.
    pub(crate) fn register(&self, run_id: &str) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        self.lock().entry(run_id.to_owned()).or_default().push(tx);
        rx
    }

    /// Takes the run's waiters, to answer them.
    pub(crate) fn take(&self, run_id: &str) -> Vec<oneshot::Sender<T>> {
        self.lock().remove(run_id).unwrap_or_default()
    }

    /// Drops every waiter: they learn the host shut down.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    /// The runs someone waits on.
    pub(crate) fn runs(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// How many callers wait, over all runs.
    pub(crate) fn count(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// Drops the senders of waiters that went away (returned, or were dropped by
    /// their caller), so the map does not grow with finished, unknown or idle runs.
    fn prune(&self, run_id: &str) {
        let mut waiters = self.lock();
        if let Some(list) = waiters.get_mut(run_id) {
            list.retain(|w| !w.is_closed());
            if list.is_empty() {
                waiters.remove(run_id);
            }
        }
    }
}

/// Prunes a run's waiters when a wait ends (its receiver is dropped first: locals
/// drop in reverse order, and this guard is created before the receiver).
pub(crate) struct PruneOnDrop<'a, T>(pub(crate) &'a Waiters<T>, pub(crate) &'a str);

impl<T> Drop for PruneOnDrop<'_, T> {
    fn drop(&mut self) {
        self.0.prune(self.1);
    }
}
