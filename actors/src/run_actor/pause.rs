//! Operating a run from outside: pause, resume, and retry of a parked run.
//!
//! A paused run executes nothing: the pause is recorded in its metadata
//! ([`RunState::Paused`]), the live execution is told through the journal (it walks
//! no more of the log, lets the step bodies under way finish and record their
//! results, and ends with [`Outcome::Paused`](crate::Outcome::Paused)), and no new
//! execution begins until the run is resumed. Wake-ups are appended as usual
//! (`append_wake` leaves a paused run paused); the execution that begins on resume
//! replays them in log order. A cancel of a paused run ends it at once (it cannot
//! run cleanup), as for a parked run; a run already asked to cancel cannot be
//! paused (its cleanup goes on).

use kameo::message::{Context, Message};
use reel_storage::RunState;

use super::RunActor;
use crate::error::ActorError;
use crate::message::{Pause, Retry, Unpause};

impl RunActor {
    /// Whether the run is paused.
    pub(super) fn is_paused(&self) -> bool {
        matches!(self.meta.state, RunState::Paused { .. })
    }

    pub(super) fn refuse(&self, action: &str) -> ActorError {
        ActorError::InvalidState {
            run_id: self.run_id.to_string(),
            state: self.meta.state.kind(),
            action: action.to_owned(),
        }
    }

    /// Records `state` (metadata only, fsynced) and tells waiters.
    pub(super) async fn record_state(&mut self, state: RunState) -> Result<(), ActorError> {
        let meta = self.meta_with(state);
        self.journal
            .append_with(Vec::new(), Some(meta.clone()), Vec::new(), true)
            .await?;
        *self.meta = meta;
        self.host.notify_changed(&self.run_id, Some(&self.meta));
        Ok(())
    }
}

impl Message<Pause> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, p: Pause, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        self.check_usable()?;
        match &self.meta.state {
            RunState::Paused { .. } => return Ok(()),
            RunState::Running | RunState::Suspended { .. } => {}
            _ => return Err(self.refuse("pause")),
        }
        if self.cancel_requested().is_some() {
            // Asked to cancel, it is ending: paused, it would neither clean up nor
            // end, and `cancel` callers would wait for the whole grace.
            return Err(self.refuse("pause"));
        }
        self.record_state(RunState::Paused { reason: p.reason })
            .await?;
        self.journal.set_paused(true);
        if self.suspended {
            // It only waits: nothing to let finish.
            self.abort_execution();
        }
        self.settle(ctx.actor_ref());
        Ok(())
    }
}

impl Message<Unpause> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, _: Unpause, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        self.check_usable()?;
        if !self.is_paused() {
            return Err(self.refuse("resume"));
        }
        self.record_state(RunState::Running).await?;
        self.journal.set_paused(false);
        let me = ctx.actor_ref().clone();
        // An execution still winding down from the pause goes on by itself.
        self.begin(&me, false).await;
        self.settle(&me);
        Ok(())
    }
}

impl Message<Retry> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, _: Retry, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        self.check_usable()?;
        if !matches!(self.meta.state, RunState::Parked { .. }) {
            return Err(self.refuse("retry"));
        }
        self.engine = self.registry.lookup(&self.meta.workflow, self.meta.version);
        self.record_state(RunState::Running).await?;
        let me = ctx.actor_ref().clone();
        self.begin(&me, true).await;
        self.settle(&me);
        Ok(())
    }
}
