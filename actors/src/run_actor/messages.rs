//! The messages a run actor takes from outside it: a resume, a delivery (signal,
//! timer, child end, cancel; or one from a letter, skipped if the run has
//! acknowledged the letter itself), a passivation tick, a hand-back of its partition,
//! and a stop. Each checks the actor is usable first (a run whose log cannot be
//! read takes only a cancel), and settles it afterwards.

use kameo::message::{Context, Message};

use super::{Passivate, RunActor};
use crate::error::ActorError;
use crate::message::{Delivery, HandBack, Lettered, Resume, StopFinished, StopRun};

impl Message<Resume> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, _: Resume, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        self.check_usable()?;
        let me = ctx.actor_ref().clone();
        self.begin(&me, true).await;
        self.settle(&me);
        self.track();
        Ok(())
    }
}

impl Message<Lettered> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, l: Lettered, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        if self.host.letter_gone(l.letter) {
            // Acknowledged by this run before it ended the segment the letter's
            // signal landed in: applied now, it would be a second delivery.
            return Ok(());
        }
        <Self as Message<Delivery>>::handle(self, l.delivery, ctx).await
    }
}

impl Message<Delivery> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, d: Delivery, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        let result = match self.cancel_while_unreadable(&d) {
            Some(reason) => self.cancel_unreadable(reason, ctx).await,
            None => {
                self.check_usable()?;
                self.deliver(d, ctx).await
            }
        };
        if let Err(ActorError::Storage(e)) = &result {
            // The journal may now hold events that never reached the disk: retire, so
            // the next message activates a fresh actor from what is really stored.
            tracing::warn!(run_id = %self.run_id, error = %e, "reel: append failed; reloading the run from disk");
            if !self.retired {
                self.retire(ctx).await;
            }
        } else if !self.retired {
            self.settle(ctx.actor_ref());
        }
        self.track();
        result
    }
}

impl Message<Passivate> for RunActor {
    type Reply = ();

    async fn handle(&mut self, Passivate(idle): Passivate, ctx: &mut Context<Self, ()>) {
        let busy = self.exec.is_some() && !self.suspended;
        if idle != self.idle_generation || busy || self.retired {
            return;
        }
        tracing::debug!(run_id = %self.run_id, "reel: passivating run");
        self.retire(ctx).await;
    }
}

impl Message<HandBack> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: HandBack, ctx: &mut Context<Self, ()>) {
        if self.retired {
            return;
        }
        self.leaving = true;
        if self.exec.is_none() || self.suspended {
            // It only waits: nothing to let finish.
            self.retire(ctx).await;
            return;
        }
        // As for a pause, but in memory only: the execution walks no more of the
        // log, lets the step bodies under way record their results, and reports
        // `Outcome::Paused`, on which the actor stops.
        self.journal.set_paused(true);
    }
}

impl Message<StopRun> for RunActor {
    type Reply = Result<(), ActorError>;

    async fn handle(&mut self, _: StopRun, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        self.abort_execution();
        self.retired = true;
        ctx.stop();
        Ok(())
    }
}

impl Message<StopFinished> for RunActor {
    type Reply = bool;

    async fn handle(
        &mut self,
        stop: StopFinished,
        ctx: &mut Context<Self, Self::Reply>,
    ) -> Self::Reply {
        if self.meta.created_at != stop.created_at || !self.meta.state.is_finished() {
            return false;
        }
        self.abort_execution();
        self.retired = true;
        ctx.stop();
        true
    }
}
