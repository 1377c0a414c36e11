//! What the actor does with an execution's outcome ([`ExecReport`]): record the
//! run's end (completed, failed, cancelled; not while paused: a run paused as its
//! handler returned reaches that end again once resumed), continue as new, a
//! suspension, a park; begin again after a pause; crash (the supervisor restarts the run from
//! disk) when the handler panicked or the end could not be recorded; stop quietly
//! when another host owns the run now (waking that host) or once a run handed back
//! has wound down.

use kameo::message::{Context, Message};
use reel_storage::{Event, RunState, StorageError};

use super::{ExecReport, RunActor};
use crate::engine::Outcome;
use crate::error::ActorError;

impl Message<ExecReport> for RunActor {
    type Reply = ();

    async fn handle(&mut self, done: ExecReport, ctx: &mut Context<Self, ()>) {
        if done.generation != self.generation || self.retired {
            return;
        }
        let me = ctx.actor_ref().clone();
        if !matches!(done.outcome, Outcome::Suspended { .. }) {
            self.exec = None;
        }
        // (A run continuing as new while paused writes its new segment and stays
        // paused: `continue_as_new`.)
        let ends = matches!(
            done.outcome,
            Outcome::Completed(_) | Outcome::Failed(_) | Outcome::Cancelled(_)
        );
        if ends && self.is_paused() {
            // Paused after the handler returned but before its end was recorded: a
            // paused run records nothing. Resumed, it executes again from its log
            // and reaches the same end.
            if self.leaving {
                self.retire(ctx).await;
            } else {
                self.settle(&me);
            }
            return;
        }
        let result = match done.outcome {
            Outcome::Completed(output) => {
                self.finish(
                    vec![Event::RunCompleted { output }],
                    RunState::Completed,
                    ctx,
                )
                .await
            }
            Outcome::Failed(error) => {
                self.finish(
                    vec![Event::RunFailed {
                        error: error.clone(),
                    }],
                    RunState::Failed { error },
                    ctx,
                )
                .await
            }
            Outcome::Cancelled(reason) => {
                self.finish(
                    vec![Event::RunCancelled {
                        reason: reason.clone(),
                    }],
                    RunState::Cancelled { reason },
                    ctx,
                )
                .await
            }
            Outcome::ContinuedAsNew {
                version,
                input,
                carried,
                seen,
            } => {
                self.continue_as_new(version, input, &carried, seen, ctx)
                    .await
            }
            Outcome::Suspended {
                waiting_on,
                awaits_child,
                seen,
            } => {
                if self.leaving {
                    // Handed back: it only waits now.
                    self.retire(ctx).await;
                    return;
                }
                // Stale: an event appended since then is on its way to the execution.
                if seen < self.journal.len() {
                    return;
                }
                if self.is_paused() {
                    // Reported before the pause reached the execution: it only
                    // waits, so it is dropped now and the state stays paused.
                    self.abort_execution();
                    self.settle(&me);
                    return;
                }
                self.suspended = true;
                // A run that stays live while its segment grows is warned here,
                // not only when an execution begins.
                self.warn_if_long();
                let state = RunState::Suspended {
                    waiting_on,
                    awaits_child,
                };
                if self.meta.state != state {
                    let meta = self.meta_with(state);
                    *self.meta = meta.clone();
                    // Not fsynced: if this is lost, recovery replays a run that was
                    // only waiting, which is harmless.
                    let written = self
                        .journal
                        .append_with(Vec::new(), Some(meta), Vec::new(), false)
                        .await;
                    if let Err(e) = written {
                        tracing::warn!(run_id = %self.run_id, error = %e, "reel: could not record suspension");
                    }
                    self.host.notify_changed(&self.run_id, Some(&self.meta));
                } else if let Some(landing) = self.journal.write_held() {
                    // No state to record: what the execution held back for the next
                    // write (it reports a suspension instead of writing) goes alone.
                    if let Err(e) = landing.await {
                        tracing::warn!(run_id = %self.run_id, error = %e, "reel: could not record a wait");
                    }
                }
                self.settle(&me);
                Ok(())
            }
            Outcome::Parked(failure) => {
                self.park(failure).await;
                self.retire(ctx).await;
                Ok(())
            }
            Outcome::Paused if self.leaving => {
                // Handed back: what ran here is recorded; the next owner goes on.
                self.retire(ctx).await;
                return;
            }
            Outcome::Paused => {
                // Resumed while the execution was winding down: it starts again.
                self.begin(&me, false).await;
                self.settle(&me);
                Ok(())
            }
            Outcome::Crashed(message) => {
                self.host.record_crash(&self.run_id, message.clone());
                panic!("reel: run `{}` crashed: {message}", self.run_id);
            }
            Outcome::Unstored(message) => {
                self.host
                    .record_store_failure(&self.run_id, message.clone());
                panic!("reel: run `{}` crashed: {message}", self.run_id);
            }
            Outcome::Disowned => Err(ActorError::Storage(StorageError::NotOwner {
                run_id: self.run_id.to_string(),
                partition: reel_storage::partition_of(&self.run_id),
            })),
        };
        if let Err(ActorError::Storage(StorageError::NotOwner { .. })) = result {
            // Another host owns the run now: it runs it from its log, woken by a
            // letter (its scan of the partition may have come before this run
            // existed, or before the change this execution started from).
            tracing::info!(run_id = %self.run_id, "reel: run taken over by another host; stopping it here");
            self.retire(ctx).await;
            self.host.hand_over(&self.run_id);
            return;
        }
        if let Err(e) = result {
            // The final write failed (disk full?): crash so the supervisor restarts the
            // run from what is on disk, and parks it if this keeps happening (or, on
            // a store whose outages pass, resumes it once the store answers).
            if matches!(e, ActorError::Storage(StorageError::Io(_))) {
                self.host.record_store_failure(&self.run_id, e.to_string());
            } else {
                self.host.record_crash(&self.run_id, e.to_string());
            }
            panic!("reel: run `{}` could not record its end: {e}", self.run_id);
        }
        self.track();
    }
}
