//! Result waiters: callers of `result()` and `wait_until_suspended()` wait here for
//! a run to change state; the run actor notifies them.

use super::*;

/// What a run's waiters are told when its new state has been written: the state,
/// and a completed run's output when whoever wrote it had it at hand.
#[derive(Clone)]
pub(crate) struct Changed {
    meta: RunMeta,
    output: Option<Payload>,
}

impl Core {
    /// Waits until the run has finished or is parked, and returns its metadata.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`], [`ActorError::Shutdown`], storage errors.
    pub async fn wait_settled(&self, run_id: &str) -> Result<RunMeta, ActorError> {
        self.wait_for(run_id, is_settled).await
    }

    /// Waits until the run has finished or is parked, or `stop` holds for its
    /// metadata, and returns the metadata with a completed run's output (read from
    /// its log unless the run's end brought it along; none when `stop` held).
    ///
    /// # Errors
    /// As [`Core::wait_settled`], and storage errors reading the output.
    pub async fn wait_settled_output(
        &self,
        run_id: &str,
        stop: impl Fn(&RunMeta) -> bool,
    ) -> Result<(RunMeta, Option<Payload>), ActorError> {
        let Changed { meta, output } = self
            .wait_changed(run_id, |m| stop(m) || is_settled(&m.state))
            .await?;
        if stop(&meta) {
            return Ok((meta, None));
        }
        let output = match (&meta.state, output) {
            (RunState::Completed, Some(output)) => Some(output),
            // Boxed: the rarer way (the run ended before this wait began, or
            // on another host), kept out of every waiter's future.
            (RunState::Completed, None) => Some(Box::pin(self.read_output(&meta)).await?),
            _ => None,
        };
        Ok((meta, output))
    }

    /// A completed run's output, read from the end of its log.
    async fn read_output(&self, meta: &RunMeta) -> Result<Payload, ActorError> {
        let run_id = &meta.run_id;
        let last = self.last_event(run_id).await?;
        // The log read is this run's only if the run is still there: one
        // deleted meanwhile may have left its id to a new run.
        self.still_the_run(meta).await?;
        match last {
            Some(Event::RunCompleted { output }) => Ok(output),
            other => Err(ActorError::Storage(reel_storage::StorageError::Io(
                format!("run `{run_id}` is completed but its log ends with {other:?}"),
            ))),
        }
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
        Ok(self.wait_changed(run_id, |m| pred(&m.state)).await?.meta)
    }

    async fn wait_changed(
        &self,
        run_id: &str,
        pred: impl Fn(&RunMeta) -> bool,
    ) -> Result<Changed, ActorError> {
        // The state that came with the last notification. It only short-cuts a
        // match; otherwise the store is read after registering, which is the point
        // no later change can slip past.
        let mut notified: Option<Changed> = None;
        // However this ends (returned, or dropped by a caller who stopped waiting),
        // the sender registered for it goes, so abandoned waits do not pile up on a
        // run that may never change state.
        let _prune = PruneOnDrop(&self.waiters, run_id);
        // The run first read: a wait keeps to it. Deleted, its id may be taken
        // by a new run, whose states are no answer to this wait (`UnknownRun`).
        let mut created_at: Option<u64> = None;
        let gone = || ActorError::UnknownRun(run_id.to_owned());
        loop {
            if let Some(changed) = notified.take() {
                if created_at.is_some_and(|c| c != changed.meta.created_at) {
                    return Err(gone());
                }
                if pred(&changed.meta) {
                    return Ok(changed);
                }
            }
            let rx = self.waiters.register(run_id);
            // Read even while the host closes: a run that has already settled
            // answers with its state; only a wait that would begin now is refused.
            let read = self.known(run_id).await;
            if let Ok(meta) = &read
                && *created_at.get_or_insert(meta.created_at) != meta.created_at
            {
                return Err(gone());
            }
            let settled = match read {
                Ok(meta) if pred(&meta) => Some(Ok(Changed { meta, output: None })),
                Ok(_) => self.check_open().err().map(Err),
                Err(_) if self.is_closing() => Some(Err(ActorError::Shutdown)),
                Err(e) => Some(Err(e)),
            };
            if let Some(result) = settled {
                return result;
            }
            match rx.await {
                Ok(changed) => notified = changed,
                Err(_) => return Err(ActorError::Shutdown),
            }
        }
    }

    /// `UnknownRun` unless the run `meta` was read of is still there (not
    /// deleted, its id not taken by a new run since).
    async fn still_the_run(&self, meta: &RunMeta) -> Result<(), ActorError> {
        match self.meta(&meta.run_id).await? {
            Some(now) if now.created_at == meta.created_at => Ok(()),
            _ => Err(ActorError::UnknownRun(meta.run_id.clone())),
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
        match meta {
            Some(meta) => self.notify_settled(run_id, meta, None),
            None => {
                self.notify_published(run_id);
                for w in self.waiters.take(run_id) {
                    let _ = w.send(None);
                }
            }
        }
    }

    /// [`Core::notify_changed`] with a written state, and the output of a completed
    /// run when the caller has it.
    pub(crate) fn notify_settled(&self, run_id: &str, meta: &RunMeta, output: Option<&Payload>) {
        // A run that ends (or is parked) tells those waiting for a value it may never
        // publish; a park found the log as it was, so they read it once more too.
        if is_settled(&meta.state) {
            self.notify_published(run_id);
        }
        // A new state of the run is on disk: a park held in memory is stale.
        self.unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id);
        let waiters = self.waiters.take(run_id);
        if waiters.is_empty() {
            return;
        }
        let changed = Changed {
            meta: meta.clone(),
            output: output.cloned(),
        };
        for w in waiters {
            let _ = w.send(Some(changed.clone()));
        }
    }
}

/// Finished or parked: nothing will change the run's state on its own.
fn is_settled(state: &RunState) -> bool {
    state.is_finished() || matches!(state, RunState::Parked { .. })
}
