//! Operating runs from outside: pause, resume and retry. Each checks the run's
//! state first (an unknown run or a wrong state changes nothing) and then asks the
//! run's actor, which checks again against its own state and records the change.

use super::*;
use crate::message::{Pause, Retry, Unpause};

impl Core {
    fn invalid(meta: &RunMeta, action: &str) -> ActorError {
        ActorError::InvalidState {
            run_id: meta.run_id.clone(),
            state: meta.state.kind(),
            action: action.to_owned(),
        }
    }

    /// Pauses a running or suspended run: its handler stops at its next quiescent
    /// point (step bodies under way finish and record their results first) and no
    /// execution begins until [`Core::resume`]. Signals, timers, child results are
    /// still recorded; recovery does not activate a paused run. Pausing a paused
    /// run does nothing.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`]; [`ActorError::InvalidState`] for a finished or
    /// parked run and for a run asked to cancel (the actor checks); storage errors.
    pub async fn pause(&self, run_id: &str, reason: &str) -> Result<(), ActorError> {
        self.check_open()?;
        let meta = self.known(run_id).await?;
        match meta.state {
            RunState::Paused { .. } => return Ok(()),
            RunState::Running | RunState::Suspended { .. } => {}
            _ => return Err(Core::invalid(&meta, "pause")),
        }
        self.deliver(
            run_id,
            Pause {
                reason: reason.to_owned(),
            },
        )
        .await
    }

    /// Resumes a paused run: it becomes running and a new execution replays its
    /// log, including what arrived while it was paused, in log order.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`]; [`ActorError::InvalidState`] for a run that is
    /// not paused; storage errors.
    pub async fn resume(&self, run_id: &str) -> Result<(), ActorError> {
        self.check_open()?;
        let meta = self.known(run_id).await?;
        if !matches!(meta.state, RunState::Paused { .. }) {
            return Err(Core::invalid(&meta, "resume"));
        }
        self.deliver(run_id, Unpause).await
    }

    /// Activates a parked run again now, with the code registered now, as a host
    /// opening the store would. If the cause persists, it parks again.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`]; [`ActorError::InvalidState`] for a run that is
    /// not parked; storage errors.
    pub async fn retry(&self, run_id: &str) -> Result<(), ActorError> {
        self.check_open()?;
        let meta = self.known(run_id).await?;
        if !matches!(meta.state, RunState::Parked { .. }) {
            return Err(Core::invalid(&meta, "retry"));
        }
        let held = self
            .unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id)
            .is_some();
        if held {
            // Parked in memory only (a damaged record, a park the store refused):
            // the stored state is not parked; activating the run tries again.
            return self.deliver(run_id, Resume).await;
        }
        self.deliver(run_id, Retry).await
    }
}
