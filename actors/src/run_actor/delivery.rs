//! What a run actor does with each thing that wakes its run: a signal, a timer, a
//! child's end or start, a cancel request. Each is appended to the log (once: a
//! redelivery whose first answer was lost appends nothing) and reaches the live
//! execution through the journal.

use kameo::message::Context;
use reel_storage::Event;

use super::RunActor;
use crate::error::ActorError;
use crate::message::Delivery;

impl RunActor {
    pub(super) async fn deliver(
        &mut self,
        d: Delivery,
        ctx: &mut Context<Self, Result<(), ActorError>>,
    ) -> Result<(), ActorError> {
        let finished = self.meta.state.is_finished();
        let me = ctx.actor_ref().clone();
        match d {
            Delivery::Signal {
                name,
                signal_id,
                payload,
            } => {
                if finished {
                    return Err(ActorError::RunFinished(self.run_id.to_string()));
                }
                if self.journal.with_index(|i| i.has_signal(&signal_id)) {
                    // Already recorded (a retried send whose first answer was lost):
                    // make sure an execution will see it.
                    self.begin(&me, false).await;
                    return Ok(());
                }
                self.append_wake(
                    vec![Event::SignalReceived {
                        name,
                        signal_id,
                        payload,
                    }],
                    Vec::new(),
                )
                .await?;
            }
            Delivery::Timer(entry) if entry.timer_id.starts_with('@') => {
                return self.deadline_due(entry, ctx).await;
            }
            Delivery::Timer(entry) => {
                // Was this timer created in this segment (a timer of an earlier
                // segment of a run that continued as new is dropped), and has it
                // fired, or been cancelled?
                let (created, fired, cancelled) = self.journal.with_index(|i| {
                    (
                        i.created(&entry.timer_id, entry.fire_at),
                        i.fired(&entry.timer_id),
                        i.cancelled(&entry.timer_id),
                    )
                });
                if finished || fired || cancelled || !created {
                    self.journal
                        .append_with(Vec::new(), None, vec![entry], false)
                        .await?;
                    if fired {
                        // Recorded by a delivery whose answer was lost: make sure an
                        // execution sees it. A cancelled timer wakes nothing.
                        self.begin(&me, false).await;
                    }
                    return Ok(());
                }
                let id = entry.timer_id.clone();
                self.append_wake(vec![Event::TimerFired { id }], vec![entry])
                    .await?;
            }
            Delivery::ChildDone {
                wait_id,
                child,
                result,
            } => {
                if !self.called_child(&wait_id, &child) {
                    tracing::debug!(run_id = %self.run_id, wait_id, child, "reel: news of a child of an earlier segment; dropped");
                    return Ok(());
                }
                let event = Event::ChildCompleted {
                    id: wait_id,
                    result,
                };
                if finished || self.has_child_news(&event) {
                    self.begin(&me, false).await;
                    return Ok(());
                }
                self.append_wake(vec![event], Vec::new()).await?;
            }
            Delivery::ChildDetached {
                wait_id,
                child,
                error,
            } => {
                if !self.called_child(&wait_id, &child) {
                    tracing::debug!(run_id = %self.run_id, wait_id, child, "reel: news of a child of an earlier segment; dropped");
                    return Ok(());
                }
                let event = Event::ChildDetached { id: wait_id, error };
                if finished || self.has_child_news(&event) {
                    self.begin(&me, false).await;
                    return Ok(());
                }
                self.append_wake(vec![event], Vec::new()).await?;
            }
            Delivery::Cancel { reason, hard } => {
                return self.cancel(reason, hard, ctx).await;
            }
        }
        // A live execution sees the new event through the journal.
        self.suspended = false;
        self.begin(&me, false).await;
        Ok(())
    }

    /// Whether the log already holds news of a child for this wait id (a child's
    /// end, or a detached child's start, of the same kind as `event`): a
    /// redelivery whose first answer was lost appends nothing.
    fn has_child_news(&self, event: &Event) -> bool {
        self.journal.with_index(|i| i.has_child_news(event))
    }
}
