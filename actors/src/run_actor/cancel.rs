//! Cancellation and the host's deadlines.
//!
//! A cancel is graceful by default: `CancelRequested` is appended with a
//! `@cancel-deadline` timer, the handler sees the request where the walk reaches it
//! (its waits end with a cancellation error, `ctx.cancelled()` resolves) and may run
//! cleanup steps; when it ends, the run is cancelled. If it is still going when the
//! grace has passed, or the cancel is hard, or the run cannot execute (parked,
//! paused, its workflow no longer registered), the execution is dropped and `RunCancelled`
//! appended at once. A run's own deadline (`@run-deadline`, from its start options)
//! asks for a graceful cancel when it passes, or, for a run that cannot execute
//! (still waiting on its queue, parked, paused), cancels it at once. Unfinished children that the run waits
//! on are cancelled the same way; detached children are not.

use std::sync::Arc;
use std::time::Duration;

use kameo::message::Context;
use reel_storage::{Event, RunState, TimerEntry};

use super::RunActor;
use crate::blocking::blocking;
use crate::error::ActorError;
use crate::journal::{CANCEL_DEADLINE, Journal, RUN_DEADLINE};
use crate::message::{Delivery, is_detached, parent_cancelled};

impl RunActor {
    /// A cancel request from outside, a parent, or a deadline.
    pub(super) async fn cancel(
        &mut self,
        reason: String,
        hard: bool,
        ctx: &mut Context<Self, Result<(), ActorError>>,
    ) -> Result<(), ActorError> {
        if matches!(self.meta.state, RunState::Cancelled { .. }) {
            return Ok(());
        }
        if self.meta.state.is_finished() {
            return Err(ActorError::RunFinished(self.run_id.to_string()));
        }
        if hard || !self.runnable() || self.options.cancel_grace.is_zero() {
            return self.cancel_hard(reason, ctx).await;
        }
        if self.cancel_requested().is_some() {
            // Already cancelling: the first request's reason and grace stand.
            let me = ctx.actor_ref().clone();
            self.begin(&me, false).await;
            return Ok(());
        }
        self.request_cancel(reason, Vec::new(), Vec::new(), ctx)
            .await
    }

    /// The run whose cancel (its parent-close policy, or its own cancel passed on)
    /// this run takes: the parent that started it and waits on it. A run started
    /// detached (`ctx.start_child`) has none, whatever later waits on it: its
    /// parent-close policy was fixed when it started.
    pub(super) fn cancelling_parent(&self) -> Option<&str> {
        self.meta
            .parent
            .as_ref()
            .filter(|p| !is_detached(&p.wait_id))
            .map(|p| p.run_id.as_str())
    }

    /// The reason of `d` if it is a cancel that a run whose log cannot be read
    /// takes (it takes no other message): from outside, or from its own parent.
    pub(super) fn cancel_while_unreadable(&self, d: &Delivery) -> Option<String> {
        let Delivery::Cancel {
            reason,
            from_parent,
            ..
        } = d
        else {
            return None;
        };
        let from_own = from_parent.is_none() || from_parent.as_deref() == self.cancelling_parent();
        (self.broken.is_some() && !self.retired && !self.leaving && from_own)
            .then(|| reason.clone())
    }

    /// A cancel of a run parked because its log cannot be read: nothing of it can
    /// execute, so it ends cancelled at once, its `CancelRequested` and
    /// `RunCancelled` appended after the records there are (their keys still tell
    /// where the log ends), and it can then be deleted. What its log held (its
    /// children, its timers) is not known: children are not cancelled, and a
    /// timer of the finished run is dropped when it fires. A log whose end cannot
    /// be read either refuses the cancel, as every other message.
    pub(super) async fn cancel_unreadable(
        &mut self,
        reason: String,
        ctx: &mut Context<Self, Result<(), ActorError>>,
    ) -> Result<(), ActorError> {
        let Some(broken) = self.broken.clone() else {
            return Ok(());
        };
        let store = self.store.clone();
        let id = self.run_id.to_string();
        let next =
            blocking(move || store.next_seq(&id))
                .await
                .map_err(|e| ActorError::Unavailable {
                    run_id: self.run_id.to_string(),
                    reason: format!("{broken}; where its log ends cannot be read either: {e}"),
                })?;
        self.journal = Journal::new(
            self.run_id.clone(),
            self.store.clone(),
            self.options.clock.clone(),
            Arc::downgrade(&self.host),
            Vec::new(),
            next,
        );
        self.broken = None;
        tracing::warn!(run_id = %self.run_id, %reason, "reel: run with an unreadable log cancelled");
        self.cancel_hard(reason, ctx).await
    }

    /// Whether the run can execute a graceful cancel's cleanup: not parked, paused
    /// or waiting on its queue, and its workflow registered.
    fn runnable(&self) -> bool {
        self.engine.is_ok()
            && !matches!(
                self.meta.state,
                RunState::Parked { .. } | RunState::Paused { .. } | RunState::Enqueued
            )
    }

    /// The reason of the cancel request in the log, if there is one.
    pub(super) fn cancel_requested(&self) -> Option<String> {
        self.journal
            .with_index(|i| i.cancel_reason().map(str::to_owned))
    }

    /// Appends the request (after `events`) with its grace deadline, wakes the
    /// execution and passes the request on to the children the run waits on.
    async fn request_cancel(
        &mut self,
        reason: String,
        mut events: Vec<Event>,
        remove: Vec<TimerEntry>,
        ctx: &mut Context<Self, Result<(), ActorError>>,
    ) -> Result<(), ActorError> {
        let grace = self.options.cancel_grace;
        let fire_at = self
            .options
            .clock
            .now_ms()
            .saturating_add(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX));
        events.push(Event::CancelRequested {
            reason: reason.clone(),
        });
        events.push(Event::Deadline {
            id: CANCEL_DEADLINE.to_owned(),
            fire_at,
        });
        let children = self.unfinished_children();
        let reason = parent_cancelled(&reason);
        let letters = self.cancel_letters(&children, &reason, false);
        self.append_wake_posting(events, remove, letters).await?;
        self.cancel_children(children, &reason, false);
        self.suspended = false;
        let me = ctx.actor_ref().clone();
        self.begin(&me, false).await;
        Ok(())
    }

    /// Drops the execution and ends the run cancelled now.
    async fn cancel_hard(
        &mut self,
        reason: String,
        ctx: &mut Context<Self, Result<(), ActorError>>,
    ) -> Result<(), ActorError> {
        self.abort_execution();
        let children = self.unfinished_children();
        let mut events = Vec::new();
        if self.cancel_requested().is_none() {
            events.push(Event::CancelRequested {
                reason: reason.clone(),
            });
        }
        events.push(Event::RunCancelled {
            reason: reason.clone(),
        });
        let close = (children, parent_cancelled(&reason), true);
        self.finish_with(
            events,
            RunState::Cancelled {
                reason: reason.clone(),
            },
            Some(close),
            ctx,
        )
        .await
    }

    /// Asks each of `children` to cancel, with `reason`. A run the handler only
    /// attached to (`ctx.child` on the id of a run someone else started) is not
    /// this run's child, nor is one it started detached and later waited on: each
    /// ignores the request ([`RunActor::cancelling_parent`]).
    pub(super) fn cancel_children(&self, children: Vec<String>, reason: &str, hard: bool) {
        let request = self.children_cancel(reason, hard);
        for child in children {
            self.host.spawn_delivery(child, request.clone());
        }
    }

    /// The cancel request this run sends its children, naming it their parent.
    pub(super) fn children_cancel(&self, reason: &str, hard: bool) -> Delivery {
        Delivery::Cancel {
            reason: reason.to_owned(),
            hard,
            from_parent: Some(self.run_id.to_string()),
        }
    }

    /// One of the host's deadlines came due.
    pub(super) async fn deadline_due(
        &mut self,
        entry: TimerEntry,
        ctx: &mut Context<Self, Result<(), ActorError>>,
    ) -> Result<(), ActorError> {
        let id = entry.timer_id.clone();
        let fired = self.journal.with_index(|i| i.fired(&id));
        if self.meta.state.is_finished() || fired {
            self.journal
                .append_with(Vec::new(), None, vec![entry], false)
                .await?;
            return Ok(());
        }
        match id.as_str() {
            RUN_DEADLINE => {
                let fired = vec![Event::TimerFired { id: id.clone() }];
                if self.cancel_requested().is_some() {
                    self.journal
                        .append_with(fired, None, vec![entry], true)
                        .await?;
                    return Ok(());
                }
                let timeout =
                    Duration::from_millis(entry.fire_at.saturating_sub(self.meta.created_at));
                let reason =
                    format!("deadline exceeded: the run did not finish within {timeout:?}");
                tracing::info!(run_id = %self.run_id, %reason, "reel: run deadline passed");
                if !self.runnable() {
                    // A run that cannot execute (paused, parked, still waiting on
                    // its queue) cannot clean up: it ends now, as for any cancel.
                    return self.cancel_hard(reason, ctx).await;
                }
                self.request_cancel(reason, fired, vec![entry], ctx).await
            }
            CANCEL_DEADLINE => {
                let reason = self
                    .cancel_requested()
                    .unwrap_or_else(|| "cancelled".to_owned());
                tracing::warn!(run_id = %self.run_id, %reason,
                    "reel: cancelled run did not end within its grace period; cancelling it hard");
                self.cancel_hard(reason, ctx).await
            }
            other => {
                tracing::warn!(run_id = %self.run_id, timer = other, "reel: unknown host timer; dropped");
                self.journal
                    .append_with(Vec::new(), None, vec![entry], false)
                    .await?;
                Ok(())
            }
        }
    }
}
