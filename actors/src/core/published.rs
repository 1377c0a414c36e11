//! Published values (`ctx.publish`): readers of a run's latest value under a key,
//! and callers waiting for one. A waiter registers before it reads the log, and is
//! woken when a `Published` event of the run lands durably (the journal reports
//! it) or when the run ends or is parked, so no value can slip past it and nobody
//! polls.

use super::*;

/// The latest value published under `key` in `log`.
fn latest(log: &[Event], key: &str) -> Option<Payload> {
    log.iter().rev().find_map(|e| match e {
        Event::Published { key: k, value } if k == key => Some(value.clone()),
        _ => None,
    })
}

impl Core {
    /// The latest value the run published under `key`, from its durable log.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`], storage errors.
    pub async fn published(&self, run_id: &str, key: &str) -> Result<Option<Payload>, ActorError> {
        Ok(latest(&self.events(run_id).await?, key))
    }

    /// Waits until the run has published a value under `key` and returns the latest
    /// one (at once if there is one).
    ///
    /// # Errors
    /// [`ActorError::RunFinished`] when the run ends without publishing it (a parked
    /// run may still go on, so its callers keep waiting), [`ActorError::UnknownRun`],
    /// [`ActorError::Shutdown`], storage errors.
    pub async fn wait_published(&self, run_id: &str, key: &str) -> Result<Payload, ActorError> {
        let _prune = PruneOnDrop(&self.publish_waiters, run_id);
        loop {
            let rx = self.publish_waiters.register(run_id);
            self.check_open()?;
            // The state first: if it says finished, the log read after it is whole
            // (the last events and the final state land in one batch).
            let meta = self.known(run_id).await?;
            let store = self.store.clone();
            let id = run_id.to_owned();
            let log = blocking(move || store.read_log(&id)).await?;
            if let Some(value) = latest(&log, key) {
                return Ok(value);
            }
            if meta.state.is_finished() {
                return Err(ActorError::RunFinished(run_id.to_owned()));
            }
            if rx.await.is_err() {
                return Err(ActorError::Shutdown);
            }
        }
    }

    /// Wakes the callers waiting for a value of the run: a `Published` event landed,
    /// or the run ended or was parked.
    pub(crate) fn notify_published(&self, run_id: &str) {
        for w in self.publish_waiters.take(run_id) {
            let _ = w.send(());
        }
    }

    /// How many callers wait for a published value, over all runs. For tests.
    pub fn waiting_for_published(&self) -> usize {
        self.publish_waiters.count()
    }
}
