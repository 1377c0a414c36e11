//! Parking: marking a run that cannot go on (divergence, crash loop, unreadable
//! log) as parked, with a compare-and-set, or holding the park in memory when the
//! store refuses the write.

use super::*;

impl Core {
    /// Marks a run parked (metadata only) and wakes its result waiters.
    ///
    /// The write is a compare-and-set on the log's next sequence number, read before
    /// the run's state: a run that finished (or appended anything) in between is left
    /// as it is, rather than put back into the active set to run again.
    pub(crate) async fn park(&self, run_id: &str, error: Failure) -> Result<(), ActorError> {
        // A point read (keys only), inline.
        let next_seq = match self.store.next_seq(run_id) {
            Ok(seq) => seq,
            Err(e) => {
                self.record_unwritten_park(run_id, error);
                self.notify_changed(run_id, None);
                return Err(e.into());
            }
        };
        let Some(mut meta) = self.meta(run_id).await? else {
            return Ok(());
        };
        if meta.state.is_finished() {
            return Ok(());
        }
        meta.state = RunState::Parked {
            error: error.clone(),
        };
        meta.updated_at = self.options.clock.now_ms();
        let written = self
            .store
            .submit(Append {
                run_id: run_id.to_owned(),
                expected_seq: Some(next_seq),
                meta: Some(meta.clone()),
                durable: true,
                ..Append::default()
            })
            .await;
        match written {
            Ok(()) => {
                self.notify_changed(run_id, Some(&meta));
                Ok(())
            }
            Err(StorageError::Conflict { .. }) => {
                tracing::info!(
                    run_id,
                    "reel: run moved on while being parked; left as it is"
                );
                Ok(())
            }
            // Another host owns the run now: it decides.
            Err(StorageError::NotOwner { .. }) => Ok(()),
            Err(e) => {
                self.record_unwritten_park(run_id, error);
                self.notify_changed(run_id, None);
                Err(e.into())
            }
        }
    }

    /// Parks a run whose log could not be loaded (`reason`): with `Failure::Corrupt`
    /// naming the damaged record when the log is damaged, else with the reason.
    pub(crate) async fn park_unreadable_log(
        &self,
        run_id: &str,
        reason: &str,
    ) -> Result<(), ActorError> {
        let store = self.store.clone();
        let id = run_id.to_owned();
        let damage = match blocking(move || Ok(store.read_log(&id))).await? {
            Err(e) => e.corruption(),
            Ok(log) if !matches!(log.first(), Some(Event::RunStarted { .. })) => {
                StorageError::Corrupt {
                    run_id: run_id.to_owned(),
                    seq: 0,
                    reason: reason.to_owned(),
                }
                .corruption()
            }
            Ok(_) => None,
        };
        let failure = damage.unwrap_or_else(|| Failure::Other(format!("unreadable log: {reason}")));
        self.park(run_id, failure).await
    }

    /// Remembers a park the store refused, so it is still reported.
    pub(crate) fn record_unwritten_park(&self, run_id: &str, error: Failure) {
        self.unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.to_owned(), error);
    }

    /// Reports an unfinished run as parked if a park of it is held in memory.
    /// The runs whose park the store refused, held parked in memory.
    pub(super) fn held_parks(&self) -> Vec<String> {
        self.unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub(super) fn apply_held_park(&self, meta: &mut RunMeta) {
        if meta.state.is_finished() {
            return;
        }
        if let Some(error) = self
            .unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&meta.run_id)
        {
            meta.state = RunState::Parked {
                error: error.clone(),
            };
        }
    }
}
