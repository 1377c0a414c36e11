//! Result waiters: callers of `result()` and `wait_until_suspended()` wait here for
//! a run to change state; the run actor notifies them.

use super::*;

impl Core {
    /// Waits until the run has finished or is parked, and returns its metadata.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`], [`ActorError::Shutdown`], storage errors.
    pub async fn wait_settled(&self, run_id: &str) -> Result<RunMeta, ActorError> {
        self.wait_for(run_id, |s| {
            s.is_finished() || matches!(s, RunState::Parked { .. })
        })
        .await
    }

    /// Waits until the run's state satisfies `pred` (checked on every state change).
    ///
    /// # Errors
    /// As [`Core::wait_settled`].
    pub async fn wait_for(
        &self,
        run_id: &str,
        pred: impl Fn(&RunState) -> bool,
    ) -> Result<RunMeta, ActorError> {
        // The state that came with the last notification. It only short-cuts a
        // match; otherwise the store is read after registering, which is the point
        // no later change can slip past.
        let mut notified: Option<RunMeta> = None;
        // However this ends (returned, or dropped by a caller who stopped waiting),
        // the sender registered for it goes, so abandoned waits do not pile up on a
        // run that may never change state.
        let _prune = PruneOnDrop(&self.waiters, run_id);
        loop {
            if let Some(meta) = notified.take().filter(|m| pred(&m.state)) {
                return Ok(meta);
            }
            let rx = self.waiters.register(run_id);
            let checked = match self.check_open() {
                Ok(()) => self.known(run_id).await,
                Err(e) => Err(e),
            };
            let settled = match checked {
                Ok(meta) if pred(&meta.state) => Some(Ok(meta)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            };
            if let Some(result) = settled {
                return result;
            }
            match rx.await {
                Ok(meta) => notified = meta,
                Err(_) => return Err(ActorError::Shutdown),
            }
        }
    }

    /// How many callers wait for a run's state to change (`result()`,
    /// `wait_until_suspended()`), over all runs. For tests and metrics.
    pub fn waiting_callers(&self) -> usize {
        self.waiters.count()
    }

    /// Wakes the run's waiters, handing them the new state when the caller knows it
    /// was written.
    pub(crate) fn notify_changed(&self, run_id: &str, meta: Option<&RunMeta>) {
        // A run that ends (or is parked) tells those waiting for a value it may never
        // publish; a park found the log as it was, so they read it once more too.
        if meta.is_none_or(|m| m.state.is_finished() || matches!(m.state, RunState::Parked { .. }))
        {
            self.notify_published(run_id);
        }
        if meta.is_some() {
            // A new state of the run is on disk: a park held in memory is stale.
            self.unrecorded_parks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(run_id);
        }
        for w in self.waiters.take(run_id) {
            let _ = w.send(meta.cloned());
        }
    }
}
