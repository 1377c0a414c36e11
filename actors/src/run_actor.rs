//! One kameo actor per live run: the run's only writer.
//!
//! When the actor starts (start, recovery, activation of a passivated run, restart)
//! it hands the run's log to the replay engine, which re-runs the handler from the
//! top. The execution runs in its own task and stays alive while the run waits: a
//! signal, timer or child result is appended by the actor and reaches the running
//! execution through the journal, at the next point where the handler has done all
//! it can (so a timer can win a race against a step that is still running). A run
//! that stays suspended for `passivate_after` is passivated: the actor stops, the
//! execution and the decoded log are dropped, and the next message activates a
//! fresh actor from disk, which replays.

use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Weak};

use futures::{FutureExt, StreamExt};
use kameo::actor::{Actor, ActorRef, WeakActorRef};
use kameo::error::{ActorStopReason, PanicError};
use kameo::message::Context;
use reel_storage::{Append, Event, Failure, RunMeta, RunState, StorageError, Store, TimerEntry};
use tokio::task::AbortHandle;
use tracing::Instrument;

use crate::blocking::blocking;
use crate::engine::{Engine, Execution, Outcome, Registry};
use crate::error::ActorError;
use crate::host::RunHost;
use crate::journal::Journal;
use crate::message::{HandBack, Resume, closing_reason};
use crate::options::CoreOptions;
use crate::passivation::Passivator;
use crate::services::Services;

mod admission;
mod cancel;
mod delivery;
mod fresh;
mod generation;
mod letters;
mod messages;
mod outcome;
mod pause;
mod segment;

/// What a run actor starts from: its host (held through the narrow [`RunHost`]), the
/// store and registry, and the run.
pub(crate) struct RunArgs {
    pub(crate) host: Weak<dyn RunHost>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) registry: Arc<dyn Registry>,
    pub(crate) options: Arc<CoreOptions>,
    pub(crate) passivator: Passivator,
    pub(crate) run_id: Arc<str>,
    pub(crate) resume: bool,
    /// The run as just created: spares the first start a read of what was written.
    pub(crate) preload: Option<Preload>,
}

pub(crate) use fresh::{Fresh, Handed};

/// A run as just written: its metadata and log, and its first execution when it
/// ran before the write. Boxed, like the actor's metadata and options, to keep
/// small what kameo holds inline in every run actor's task for its whole life (7
/// KB a run with them inline, where a host may keep tens of thousands of run
/// actors live).
pub(crate) type Preload = Box<Fresh>;

pub(crate) struct RunActor {
    host: Arc<dyn RunHost>,
    store: Arc<dyn Store>,
    registry: Arc<dyn Registry>,
    options: Arc<CoreOptions>,
    passivator: Passivator,
    run_id: Arc<str>,
    meta: Box<RunMeta>,
    journal: Journal,
    engine: Result<Arc<dyn Engine>, Failure>,
    broken: Option<String>,
    exec: Option<AbortHandle>,
    /// The live execution has reported that every branch waits.
    suspended: bool,
    generation: u64,
    idle_generation: u64,
    retired: bool,
    /// Handed back to balance the hosts ([`HandBack`]): it takes no more messages
    /// and stops once the step bodies under way have recorded their results.
    leaving: bool,
    /// The segment's length has been warned about (`CoreOptions::long_log_events`).
    log_warned: bool,
    /// Held while the execution runs and does not only wait (see [`RunActor::track`]).
    busy: Option<reel_storage::Busy>,
    /// The run's first execution, run before its first write: the first
    /// [`RunActor::begin`] goes on with it.
    handed: Option<Box<Handed>>,
}

/// An outcome reported by the execution task: a suspension (the execution stays
/// alive) or its final outcome (`outcome`).
struct ExecReport {
    generation: u64,
    outcome: Outcome,
}

struct Passivate(u64);

/// The text of a caught panic (its `&str` or `String` payload).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic with a non-string payload".to_owned())
}

impl Actor for RunActor {
    type Args = RunArgs;
    type Error = ActorError;

    async fn on_start(args: RunArgs, me: ActorRef<Self>) -> Result<Self, ActorError> {
        // Boxed: kameo keeps this future inline in the actor's task for its life.
        Box::pin(RunActor::start(args, me)).await
    }

    async fn on_stop(
        &mut self,
        _: WeakActorRef<Self>,
        _: ActorStopReason,
    ) -> Result<(), ActorError> {
        self.abort_execution();
        Ok(())
    }

    /// Says so (kameo is built without its own logging), then stops: the
    /// supervisor restarts the run from disk, or parks it past the restart limit.
    async fn on_panic(
        &mut self,
        _: WeakActorRef<Self>,
        err: PanicError,
    ) -> Result<ControlFlow<ActorStopReason>, ActorError> {
        tracing::error!(run_id = %self.run_id, error = %err, "reel: run actor crashed; restarting it from disk");
        Ok(ControlFlow::Break(ActorStopReason::Panicked(err)))
    }
}

/// The crash message of an actor that found no run to load: its host parks
/// nothing for it (`Core::run_actor_stopped`).
pub(crate) const RUN_MISSING: &str = "the run does not exist (deleted before its actor started)";

impl RunActor {
    /// Loads the run (or takes it as just written) and builds the actor.
    async fn start(args: RunArgs, me: ActorRef<Self>) -> Result<Self, ActorError> {
        let host = args.host.upgrade().ok_or(ActorError::Shutdown)?;
        let (meta, log, handed) = match args.preload {
            Some(preload) => {
                let Fresh { meta, log, handed } = *preload;
                (Some(meta), Ok(log), handed)
            }
            None => {
                if args.resume {
                    // A supervisor restart: the last appends of the execution that
                    // crashed may still wait in the store's writer. Read past them,
                    // the log would lack them, and this actor's execution would run
                    // a step body again before its own append was refused. An
                    // append of nothing goes after them, and lands once they have.
                    // Refused (the store failing, the run's partition owned by
                    // another host now), it has waited for them all the same; what
                    // this actor reads and appends next meets the refusal itself.
                    let barrier = Append {
                        run_id: args.run_id.to_string(),
                        ..Append::default()
                    };
                    let _ = args.store.submit(barrier).await;
                }
                let store = args.store.clone();
                let id = args.run_id.clone();
                let read = blocking(move || {
                    let mut tries = 0;
                    loop {
                        tries += 1;
                        let meta = store.get_run(&id)?;
                        let from = meta.as_ref().map_or(0, |m| m.segment_start);
                        let log = match store.read_log_from(&id, from) {
                            // The store could not be reached: not an unreadable log.
                            Err(e @ StorageError::Io(_)) if store.outages_pass() => {
                                return Err(e);
                            }
                            log => log,
                        };
                        // The two reads share no snapshot: a delete landing between
                        // them (of a finished run only) gives the deleted run's
                        // record with no log, or with the log of a new run under
                        // the id. An actor built from that would refuse every
                        // message as unreadable, or take the new run for the
                        // finished one, for as long as it lives. Such a read is
                        // made again: the record must be the same after the log.
                        let suspect = meta.as_ref().is_some_and(|m| {
                            m.state.is_finished()
                                || !matches!(&log, Ok(l) if matches!(l.first(), Some(Event::RunStarted { .. })))
                        });
                        if !suspect || tries == 3 || store.get_run(&id)? == meta {
                            return Ok((meta, log));
                        }
                    }
                })
                .await;
                let (meta, log) = match read {
                    Ok(read) => read,
                    Err(e) => {
                        if matches!(e, StorageError::Io(_)) {
                            host.record_store_failure(&args.run_id, e.to_string());
                        }
                        return Err(e.into());
                    }
                };
                (meta, log, None)
            }
        };
        let Some(meta) = meta else {
            // Deleted before this actor started (a child's end for a deleted
            // parent): not a crash of any run, and a run started under the id
            // since must not be parked for it.
            host.record_crash(&args.run_id, RUN_MISSING.to_owned());
            return Err(ActorError::UnknownRun(args.run_id.to_string()));
        };
        let (log, broken) = match log {
            Ok(log) if matches!(log.first(), Some(Event::RunStarted { .. })) => (log, None),
            Ok(_) => (
                Vec::new(),
                Some("log does not begin with RunStarted".to_owned()),
            ),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        if let Some(reason) = &broken {
            tracing::error!(run_id = %args.run_id, %reason, "reel: run log unreadable; parked");
            host.park_unreadable_log(&args.run_id, reason).await?;
        }
        if meta.state.is_finished() {
            // The run's last append landed but its writer never heard so (a lost
            // answer, a crash right after): its result waiters and parent may still
            // be waiting. Telling them again is harmless.
            host.run_finished(&meta, None);
        }
        let engine = args.registry.lookup(&meta.workflow, meta.version);
        let journal = match &handed {
            Some(handed) => handed.journal.clone(),
            None => Journal::new(
                args.run_id.clone(),
                args.store.clone(),
                args.options.clock.clone(),
                Arc::downgrade(&host),
                log,
                meta.segment_start,
            ),
        };
        // Restarted while its partition is being given back (or is another
        // host's now): it runs nothing more here (messages queued for it are
        // refused, to go to the next owner) and stops as it would have on the
        // hand-back, which waits for it.
        let leaving = args.resume && host.owned_elsewhere(&args.run_id);
        if leaving {
            let _ = me.tell(HandBack).try_send();
        } else if args.resume && broken.is_none() {
            let _ = me.tell(Resume).try_send();
        }
        Ok(RunActor {
            host,
            store: args.store,
            registry: args.registry,
            options: args.options,
            passivator: args.passivator,
            run_id: args.run_id,
            meta: Box::new(meta),
            journal,
            engine,
            broken,
            exec: None,
            suspended: false,
            generation: 0,
            idle_generation: 0,
            retired: false,
            leaving,
            log_warned: false,
            busy: None,
            handed: handed.map(Box::new),
        })
    }
}

impl Drop for RunActor {
    fn drop(&mut self) {
        self.abort_execution();
    }
}

impl RunActor {
    /// Stops the execution (passivation, shutdown, parking, cancel). The journal
    /// stays open: a step body that completed in the poll under way still records
    /// its result rather than running again after a restart (a stale append is
    /// refused by the sequence check anyway). Dropping the handler cancels no timer:
    /// the driver marks the execution closing first. The run's last append closes
    /// the journal itself (`finish`).
    fn abort_execution(&mut self) {
        if let Some(exec) = self.exec.take() {
            exec.abort();
        }
        self.suspended = false;
        self.generation = generation::next();
        self.busy = None;
    }

    /// Counts the run as work in flight on the host's activity gauge while its
    /// execution runs and does not only wait, so a clock that skips ahead when
    /// the host is idle never skips past a running step.
    fn track(&mut self) {
        let busy = self.exec.is_some() && !self.suspended && !self.retired;
        if !busy {
            self.busy = None;
        } else if self.busy.is_none() {
            self.busy = Some(self.host.busy());
        }
    }

    fn check_usable(&self) -> Result<(), ActorError> {
        // A run being handed back takes nothing more: the sender, seeing it
        // retired, posts the message to the partition's next owner.
        if self.retired || self.leaving {
            return Err(ActorError::Retired);
        }
        if let Some(reason) = &self.broken {
            return Err(ActorError::Unavailable {
                run_id: self.run_id.to_string(),
                reason: reason.clone(),
            });
        }
        Ok(())
    }

    /// Starts an execution unless one is alive (it sees new events by itself).
    async fn begin(&mut self, me: &ActorRef<Self>, force: bool) {
        if self.meta.state.is_finished()
            || self.broken.is_some()
            || self.retired
            || self.leaving
            || (!force && matches!(self.meta.state, RunState::Parked { .. }))
            || self.is_paused()
            || self.meta.state == RunState::Enqueued
        {
            return;
        }
        if self.exec.is_some() {
            return;
        }
        let engine = match &self.engine {
            Ok(engine) => engine.clone(),
            Err(failure) => {
                let failure = failure.clone();
                self.park(failure).await;
                return;
            }
        };
        self.generation = generation::next();
        self.idle_generation = generation::next();
        self.suspended = false;
        self.warn_if_long();
        let generation = self.generation;
        let handed = self.handed.take().map(|h| *h);
        let span = tracing::info_span!(
            "reel.run",
            run_id = %self.run_id,
            workflow = %self.meta.workflow,
            version = self.meta.version,
            generation
        );
        let mut outcomes = match handed {
            Some(handed) => handed.into_outcomes(),
            None => engine.execute(Execution {
                run_id: self.run_id.clone(),
                history: self.journal.snapshot(),
                journal: self.journal.clone(),
                services: Services(Arc::downgrade(&self.host), None),
                parent: self.meta.parent.as_ref().map(|p| p.run_id.clone()),
                segment: self.meta.segment,
            }),
        };
        let me = me.clone();
        // Aborted by the actor when it stops; ends by itself after the final outcome.
        let task = tokio::spawn(
            async move {
                loop {
                    let next = AssertUnwindSafe(outcomes.next()).catch_unwind().await;
                    let (outcome, last) = match next {
                        Ok(Some(o @ Outcome::Suspended { .. })) => (o, false),
                        Ok(Some(o)) => (o, true),
                        Ok(None) => return,
                        Err(p) => (Outcome::Crashed(panic_message(&*p)), true),
                    };
                    let report = ExecReport {
                        generation,
                        outcome,
                    };
                    if me.tell(report).await.is_err() || last {
                        return;
                    }
                }
            }
            .instrument(span),
        );
        self.exec = Some(task.abort_handle());
    }

    fn meta_with(&self, state: RunState) -> RunMeta {
        RunMeta {
            state,
            updated_at: self.options.clock.now_ms(),
            ..(*self.meta).clone()
        }
    }

    async fn park(&mut self, failure: Failure) {
        if matches!(&self.meta.state, RunState::Parked { error } if *error == failure) {
            self.host.notify_changed(&self.run_id, Some(&self.meta));
            return;
        }
        tracing::warn!(run_id = %self.run_id, error = %failure, "reel: run parked");
        metrics::counter!(reel_storage::metrics::RUNS_PARKED).increment(1);
        let meta = self.meta_with(RunState::Parked {
            error: failure.clone(),
        });
        match self
            .journal
            .append_with(Vec::new(), Some(meta.clone()), Vec::new(), true)
            .await
        {
            Ok(()) => {
                *self.meta = meta;
                self.host.notify_changed(&self.run_id, Some(&self.meta));
            }
            Err(e) => {
                tracing::error!(run_id = %self.run_id, error = %e, "reel: could not park run");
                self.host.record_unwritten_park(&self.run_id, failure);
                self.host.notify_changed(&self.run_id, None);
            }
        }
    }

    /// Appends the events that wake the run, flipping a suspended run back to running
    /// in the same batch so that recovery resumes it if the process dies now.
    async fn append_wake(
        &mut self,
        events: Vec<Event>,
        remove: Vec<TimerEntry>,
    ) -> Result<(), ActorError> {
        self.append_wake_posting(events, remove, Vec::new()).await
    }

    /// [`RunActor::append_wake`], posting `letters` to other runs' owners in the
    /// same write ([`reel_storage::Append::letters`]).
    async fn append_wake_posting(
        &mut self,
        events: Vec<Event>,
        remove: Vec<TimerEntry>,
        letters: Vec<(String, reel_storage::Mail)>,
    ) -> Result<(), ActorError> {
        let meta = matches!(self.meta.state, RunState::Suspended { .. })
            .then(|| self.meta_with(RunState::Running));
        self.journal
            .append_posting(events, meta.clone(), remove, letters)
            .await?;
        if let Some(meta) = meta {
            *self.meta = meta;
        }
        Ok(())
    }

    /// Appends the run's last events with its final state, clears its timers, tells
    /// waiters and parents, and stops the actor. The journal is closed first, so no
    /// event of the execution can follow the last one. A run that completes or
    /// fails asks the children it waits on and that have not ended to cancel
    /// (Temporal's default parent-close policy); detached children go on. A run
    /// that was asked to cancel and then ends (cancelled, or completed or failed:
    /// its handler handled the request) asks them again with the words of its
    /// first request, which they then ignore as already received: it reaches a
    /// child started during the cleanup, and a child that missed the first (the
    /// host died between the request's write and its delivery, and the run ends
    /// after the restart); a child the first reached ends with that reason,
    /// whichever of the two lands first.
    async fn finish(
        &mut self,
        events: Vec<Event>,
        state: RunState,
        ctx: &mut Context<Self, impl kameo::reply::Reply>,
    ) -> Result<(), ActorError> {
        let closing = closing_reason(&state, self.cancel_requested().as_deref());
        let close = closing.map(|reason| (self.unfinished_children(), reason, false));
        self.finish_with(events, state, close, ctx).await
    }

    /// [`RunActor::finish`], asking `close.0`, the children it waits on, to cancel
    /// with reason `close.1` (hard when `close.2`). When hosts share the store, the
    /// news the end owes other runs (the parent's child result, the children's
    /// cancels) is also posted as mail in the run's last write, so a host that
    /// dies right after it loses none of it.
    async fn finish_with(
        &mut self,
        events: Vec<Event>,
        state: RunState,
        close: Option<(Vec<String>, String, bool)>,
        ctx: &mut Context<Self, impl kameo::reply::Reply>,
    ) -> Result<(), ActorError> {
        self.journal.close();
        let timers = self.journal.with_index(|i| i.pending_timers(&self.run_id));
        // Handed to waiters and parents, who would otherwise read it back.
        let output = events.iter().find_map(|e| match e {
            Event::RunCompleted { output } => Some(output.clone()),
            _ => None,
        });
        let mut letters = match &close {
            Some((children, reason, hard)) => self.cancel_letters(children, reason, *hard),
            None => Vec::new(),
        };
        letters.extend(self.end_letter(&state, output.as_ref()));
        let meta = self.meta_with(state);
        self.journal
            .append_final(events, meta.clone(), timers, letters)
            .await?;
        *self.meta = meta;
        self.host.run_finished(&self.meta, output.as_ref());
        if let Some((children, reason, hard)) = close {
            self.cancel_children(children, &reason, hard);
        }
        self.retire(ctx).await;
        Ok(())
    }

    async fn retire(&mut self, ctx: &mut Context<Self, impl kameo::reply::Reply>) {
        self.abort_execution();
        self.host.retire(&self.run_id, ctx.actor_ref().id()).await;
        self.retired = true;
        ctx.stop();
    }

    /// With no execution under way, or one that only waits, the actor only costs
    /// memory: passivate it after the idle period (whatever woke it: a suspension, or
    /// a message that needed no execution, such as a late timer of a finished run).
    fn settle(&mut self, me: &ActorRef<Self>) {
        if (self.exec.is_some() && !self.suspended) || self.retired {
            return;
        }
        self.idle_generation = generation::next();
        let idle = self.idle_generation;
        let me = me.downgrade();
        // One message, which a stopped or busy actor ignores (the generation no
        // longer matches); past a full mailbox it is sent from a task.
        let passivate = move || {
            let Some(me) = me.upgrade() else { return };
            if let Err(kameo::error::SendError::MailboxFull(msg)) =
                me.tell(Passivate(idle)).try_send()
            {
                tokio::spawn(async move {
                    let _ = me.tell(msg).await;
                });
            }
        };
        if self.meta.state.is_finished() {
            // Activated for a late message to a finished run: it has nothing to
            // wait for, and must not outlive that run. Deleted (by another host)
            // and its id started again, a lingering actor of the old run would
            // take the new run's wake-ups and do nothing with them.
            passivate();
        } else {
            self.passivator.later(passivate);
        }
    }

    /// Warns once per actor when the segment has grown past
    /// `CoreOptions::long_log_events`: every wake-up replays all of it.
    pub(super) fn warn_if_long(&mut self) {
        let events = self.journal.len();
        if self.log_warned || events <= self.options.long_log_events {
            return;
        }
        self.log_warned = true;
        tracing::warn!(
            run_id = %self.run_id,
            events,
            "reel: the run's log segment is long and every wake-up replays it; \
             a run that loops for ever should use ctx.continue_as_new"
        );
    }

    /// Whether the segment has a `ChildStarted` for `wait_id` naming `child`.
    fn called_child(&self, wait_id: &str, child: &str) -> bool {
        self.journal.with_index(|i| i.called_child(wait_id, child))
    }

    /// The children the run waits on that have not ended (detached ones excluded).
    fn unfinished_children(&self) -> Vec<String> {
        self.journal.with_index(|i| i.unfinished_children())
    }
}
