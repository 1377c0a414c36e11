//! What a run actor does with each thing that wakes its run: a signal, a timer, a
//! child's end or start, a cancel request. Each is appended to the log (once: a
//! redelivery whose first answer was lost appends nothing) and reaches the live
//! execution through the journal. The handler's timers that are due by then are
//! recorded first, in due order: a signal, a child's end or a timer delivered now
//! comes after every timer that came due before it, whichever order the timer
//! service's deliveries arrive in, and also when the timers came due while no
//! host ran.

use kameo::message::Context;
use reel_storage::{Event, TimerEntry};

use super::RunActor;
use crate::error::ActorError;
use crate::journal::is_host_timer;
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
                if self.journal.with_index(|i| i.has_signal(&signal_id)) {
                    // Already recorded (a retried send whose first answer was lost):
                    // make sure an execution will see it. Also once the run has
                    // finished since (that signal may have ended it): one delivery.
                    self.begin(&me, false).await;
                    return Ok(());
                }
                if finished {
                    return Err(ActorError::RunFinished(self.run_id.to_string()));
                }
                self.append_after_due(Event::SignalReceived {
                    name,
                    signal_id,
                    payload,
                })
                .await?;
            }
            Delivery::Timer(entry) if is_host_timer(&entry.timer_id) => {
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
                    if fired || !created {
                        // Recorded by a delivery whose answer was lost: make sure an
                        // execution sees it. Not created: scheduled by an append
                        // that never landed (the store failed under it), whose
                        // execution stopped with its actor; this actor may be a
                        // fresh one with none under way, and the run would wait for
                        // nothing. A new execution schedules the timer again. A
                        // cancelled timer wakes nothing.
                        self.begin(&me, false).await;
                    }
                    return Ok(());
                }
                let (events, remove) = self.due_timers(Some(entry));
                self.append_wake(events, remove).await?;
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
                self.append_after_due(event).await?;
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
                self.append_after_due(event).await?;
            }
            Delivery::Cancel {
                reason,
                hard,
                from_parent,
            } => {
                if from_parent.is_some() && from_parent.as_deref() != self.cancelling_parent() {
                    tracing::debug!(run_id = %self.run_id, from = ?from_parent, "reel: cancel from a run that did not start this one to wait on it; ignored");
                    return Ok(());
                }
                return self.cancel(reason, hard, ctx).await;
            }
        }
        // A live execution sees the new event through the journal.
        self.suspended = false;
        self.begin(&me, false).await;
        Ok(())
    }

    /// Appends `event` after the handler's timers due by now ([`Self::due_timers`]).
    async fn append_after_due(&mut self, event: Event) -> Result<(), ActorError> {
        let (mut events, remove) = self.due_timers(None);
        events.push(event);
        self.append_wake(events, remove).await
    }

    /// `TimerFired` for each of the handler's timers due by now (and `firing`, the
    /// timer being delivered, due or not), in due order (ties in creation order),
    /// with their timer-index entries to remove in the same append. The host's
    /// deadlines are left to their own deliveries (they cancel, not fire), and
    /// the sweep stops at the first one due.
    fn due_timers(&self, firing: Option<TimerEntry>) -> (Vec<Event>, Vec<TimerEntry>) {
        let now = self.options.clock.now_ms();
        let mut due: Vec<TimerEntry> = self.journal.with_index(|i| {
            // Up to the first due host deadline: what came due after it waits for
            // the deadline's own delivery (which cancels the run).
            i.due_timers(now)
                .take_while(|(_, id)| !is_host_timer(id))
                .map(|(fire_at, id)| TimerEntry {
                    fire_at,
                    run_id: self.run_id.to_string(),
                    timer_id: id.to_owned(),
                })
                .collect()
        });
        if let Some(t) = firing
            && !due.iter().any(|d| d.timer_id == t.timer_id)
        {
            due.push(t);
        }
        let fired = due
            .iter()
            .map(|t| Event::TimerFired {
                id: t.timer_id.clone(),
            })
            .collect();
        (fired, due)
    }

    /// Whether the log already holds news of a child for this wait id (a child's
    /// end, or a detached child's start, of the same kind as `event`): a
    /// redelivery whose first answer was lost appends nothing.
    fn has_child_news(&self, event: &Event) -> bool {
        self.journal.with_index(|i| i.has_child_news(event))
    }
}
