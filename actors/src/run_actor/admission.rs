//! Admission of a run started on a queue: until its queue admits it, the run is
//! [`RunState::Enqueued`] and executes nothing (its actor, woken by a signal or a
//! timer, records the wake-up and runs no handler, as for a paused run). Admission
//! records the run as running, fsynced, and begins its first execution.

use kameo::message::{Context, Message};
use reel_storage::RunState;

use super::RunActor;
use crate::error::ActorError;
use crate::message::Admit;

impl Message<Admit> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, _: Admit, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        self.check_usable()?;
        if self.meta.state != RunState::Enqueued {
            return Err(self.refuse("admit"));
        }
        self.record_state(RunState::Running).await?;
        let me = ctx.actor_ref().clone();
        self.begin(&me, false).await;
        self.settle(&me);
        Ok(())
    }
}
