//! The host core: the state of one host and its public calls (start, signal,
//! cancel, reads, shutdown). The rest of `impl Core` is split by job: `recovery`
//! (opening: what start-up does), `activation` (the live-run map, spawning run
//! actors under rotating supervisors, what happens when one stops for good),
//! `routing` (delivering messages to runs, background deliveries of wake-ups),
//! `parking`, `waiters` (result waiters), `published` (readers of published
//! values), `children` (child-run links, child cycles), `cluster` (leases and
//! notices of a host that shares its store), `inbox` (the mail other hosts post
//! for its runs), `listing`, `operate`
//! (pause, resume, retry), `orphans` (children of parents that ended while their
//! cancel was lost, asked again at recovery), `fork`, `deletion` (delete, retention), `queueing`
//! (starting runs on queues, admitting them), `starting` (a start and a new run's
//! first write), `signal_start` (signal-with-start),
//! `reading` (a run's log and records, and watches on it), and `run_host`
//! (the core as the [`RunHost`] of its parts). The submodules depend on this file;
//! it depends on none of them, and nothing below the core names it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use futures::StreamExt;
use kameo::actor::{ActorId, ActorRef, Spawn};
use kameo::error::{ActorStopReason, HookError, SendError};
use kameo::message::Message;
use kameo::supervision::RestartPolicy;
use reel_storage::{
    Append, CorruptRecord, Event, Failure, ParentLink, Payload, RunMeta, RunState, Scan,
    StorageError, Store, TimerEntry, check_new_run_id,
};
use tokio::sync::{OnceCell, Semaphore};

use crate::asking::ask;
use crate::blocking::blocking;
use crate::engine::Registry;
use crate::error::ActorError;
use crate::fresh_runs::FreshRuns;
use crate::host::RunHost;
use crate::journal::{RUN_DEADLINE, timer_of};
use crate::log_watch::LogWatchers;
use crate::message::{Delivery, Mailable, Resume, StopRun};
use crate::options::CoreOptions;
use crate::passivation::Passivator;
use crate::run_actor::{Fresh, Preload, RunActor, RunArgs};
use crate::supervisor::{CHILDREN_PER_SUPERVISOR, Retire, RunSupervisor};
use crate::timers::{AddTimers, RemoveTimers, TimerArgs, TimerService};
use crate::waiters::{PruneOnDrop, Waiters};

mod activation;
mod children;
mod cluster;
mod deletion;
mod eager;
mod fork;
mod inbox;
mod listing;
mod operate;
mod orphans;
mod parking;
mod published;
mod queueing;
mod reading;
mod recovery;
mod routing;
mod run_host;
mod signal_start;
mod starting;
mod subscriptions;
mod waiters;

pub use queueing::QueuePlace;
use waiters::Changed;

/// A live run's actor, or the place it is being spawned into.
type LiveCell = Arc<OnceCell<ActorRef<RunActor>>>;

/// What [`Core::start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// A new run was created.
    Created,
    /// A run of the same workflow already had this id; nothing changed. Its
    /// record as the start found it: a caller that goes on with the run (a child
    /// call waiting on it) keeps to that run by its creation time, should it be
    /// deleted and its id used again meanwhile.
    Existing(Box<RunMeta>),
}

/// The shared state of one host. Runs, the timer service and the supervisors hold
/// weak references to it; the host holds the strong one.
pub struct Core {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) registry: Arc<dyn Registry>,
    pub(crate) options: Arc<CoreOptions>,
    /// The live runs' actors. A cell is published under the (short) lock before its
    /// actor is spawned outside it, so deliveries to other runs never wait on a spawn
    /// and concurrent deliveries to one run spawn one actor.
    live: Mutex<HashMap<Arc<str>, LiveCell>>,
    /// A new run's state as its first write left it, for the actor that activates
    /// it first: taken by whichever activation comes first (the run's own, or a
    /// message that reached it before), so a later one reads what is on disk.
    fresh: FreshRuns,
    /// Passivates idle run actors after `passivate_after`.
    passivator: Passivator,
    actor_runs: Mutex<HashMap<ActorId, Arc<str>>>,
    crash_messages: Mutex<HashMap<Arc<str>, String>>,
    /// Runs whose actor last crashed because the store failed (an I/O error).
    store_crashes: Mutex<std::collections::HashSet<Arc<str>>>,
    /// Runs a task resumes once the store answers again (`Core::resume_later`).
    resuming: Mutex<std::collections::HashSet<Arc<str>>>,
    /// Parks known only in memory: the store refused to write them (a full disk), or
    /// the run's index records are damaged. Reported by `meta` and `list` so waiters,
    /// `status()` and `runs()` still learn why the run stopped; forgotten once a new
    /// state of the run is written.
    unrecorded_parks: Mutex<HashMap<String, Failure>>,
    /// Creation times of runs this host deleted lately, by id (`deletion`): a new
    /// run under one of those ids is created at least a millisecond after the
    /// deleted one, so the two differ by creation time, which tells runs of one id
    /// apart, even when the clock has not moved since (a frozen test clock, or a
    /// delete and a start within one millisecond).
    deleted_creations: Mutex<deletion::DeletedCreations>,
    supervisors: tokio::sync::Mutex<(ActorRef<RunSupervisor>, usize)>,
    retired_supervisors: Mutex<Vec<ActorRef<RunSupervisor>>>,
    timers: ActorRef<TimerService>,
    waiters: Waiters<Option<Changed>>,
    /// Callers of `wait_published`, by run: woken when a value lands or the run ends.
    publish_waiters: Waiters<()>,
    child_subscribers: subscriptions::Subscriptions,
    activations: Semaphore,
    /// Activations of new runs under way (`activation_concurrency` of them):
    /// `start` returns once the run's first write has landed and a permit is held,
    /// so a burst of starts cannot pile up activations (and their memory).
    new_runs: Arc<Semaphore>,
    /// Readers following run logs live, told by the store after each commit.
    log_watchers: Arc<LogWatchers>,
    /// The queues' admission state (`queueing`).
    queues: crate::queues::Queues,
    /// Where each kind of end's retention pass goes on from (`deletion`), so runs
    /// that ended late but started early cannot keep a pass from the ones after.
    retention_cursors: Mutex<HashMap<reel_storage::StatusKind, reel_storage::listing::ListCursor>>,
    closing: AtomicBool,
    /// Whose turn it is to read the inbox (`cluster`): one reader at a time, told
    /// to read again when asked meanwhile.
    inbox: inbox::InboxTurn,
    /// Partitions being given back (`cluster`): still leased, but what would wake
    /// their runs goes to the inbox, for the next owner.
    leaving: Mutex<BTreeSet<u16>>,
    /// Until when this host's leases surely hold, by its own clock (`cluster`):
    /// past it, another host may own its runs, and no step body starts here.
    lease_until: Mutex<Option<std::time::Instant>>,
    /// Work in flight (busy executions, deliveries, firing timers), watched by a
    /// clock that moves when the host is idle.
    pub(crate) activity: Arc<reel_storage::Activity>,
    me: Weak<Core>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").finish_non_exhaustive()
    }
}

/// Supervisors get an unbounded mailbox: their only senders are kameo's link
/// notifications and `Retire`, and a full mailbox must never make an activation
/// (which holds the live-run lock) wait on a supervisor.
fn spawn_supervisor(core: Weak<Core>) -> ActorRef<RunSupervisor> {
    let host: Weak<dyn RunHost> = core;
    RunSupervisor::spawn_with_mailbox(host, kameo::mailbox::unbounded())
}

impl Core {
    fn check_open(&self) -> Result<(), ActorError> {
        if self.closing.load(Ordering::Acquire) {
            Err(ActorError::Shutdown)
        } else {
            Ok(())
        }
    }

    fn is_live(&self, run_id: &str) -> bool {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .and_then(|cell| cell.get())
            .is_some_and(|a| a.is_alive())
    }

    /// Whether `workflow` at `version` is registered.
    ///
    /// # Errors
    /// [`ActorError::NotRegistered`] with the reason.
    pub fn check_registered(&self, workflow: &str, version: u32) -> Result<(), ActorError> {
        self.registry
            .lookup(workflow, version)
            .map(|_| ())
            .map_err(ActorError::NotRegistered)
    }

    /// The newest registered version of `workflow`, or `None` if no version is
    /// registered.
    pub fn newest_version(&self, workflow: &str) -> Option<u32> {
        self.registry.newest(workflow)
    }

    /// Marks work in flight on the host's activity gauge (see
    /// [`Clock::watch`](reel_storage::Clock::watch)) until the guard is dropped.
    pub fn busy(&self) -> reel_storage::Busy {
        self.activity.enter()
    }

    /// The host's store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The host's clock.
    pub fn clock(&self) -> &Arc<dyn reel_storage::Clock> {
        &self.options.clock
    }

    /// Number of runs with a live actor (not passivated).
    pub async fn live_runs(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// A run's metadata.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn meta(&self, run_id: &str) -> Result<Option<RunMeta>, ActorError> {
        // A point read, inline (see `point_read`).
        let mut meta = self.store.get_run(run_id)?;
        if let Some(m) = meta.as_mut() {
            self.apply_held_park(m);
        }
        Ok(meta)
    }

    async fn known(&self, run_id: &str) -> Result<RunMeta, ActorError> {
        self.meta(run_id)
            .await?
            .ok_or_else(|| ActorError::UnknownRun(run_id.to_owned()))
    }

    /// Delivers a signal (deduplicated by `signal_id`) and wakes the run.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`], [`ActorError::RunFinished`], storage errors.
    pub async fn signal(
        &self,
        run_id: &str,
        name: &str,
        signal_id: &str,
        payload: Payload,
    ) -> Result<(), ActorError> {
        self.check_open()?;
        let meta = self.known(run_id).await?;
        self.signal_known(&meta, name, signal_id, payload).await
    }

    /// [`Core::signal`] to a run whose record the caller has just read.
    pub(crate) async fn signal_known(
        &self,
        meta: &RunMeta,
        name: &str,
        signal_id: &str,
        payload: Payload,
    ) -> Result<(), ActorError> {
        let run_id = meta.run_id.as_str();
        if meta.state.is_finished() {
            return Err(ActorError::RunFinished(run_id.to_owned()));
        }
        self.settle_inbox_for(run_id).await;
        self.deliver(
            run_id,
            Delivery::Signal {
                name: name.to_owned(),
                signal_id: signal_id.to_owned(),
                payload,
            },
        )
        .await
    }

    /// Cancels a run (and its unfinished children). A graceful cancel records the
    /// request, which the handler sees, and cancels hard after
    /// [`CoreOptions::cancel_grace`]; a `hard` one ends the run at once.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`], [`ActorError::RunFinished`] for a completed or
    /// failed run (cancelling a cancelled run is a no-op), storage errors.
    pub async fn cancel(&self, run_id: &str, reason: &str, hard: bool) -> Result<(), ActorError> {
        self.check_open()?;
        let meta = self.known(run_id).await?;
        match meta.state {
            RunState::Cancelled { .. } => return Ok(()),
            s if s.is_finished() => return Err(ActorError::RunFinished(run_id.to_owned())),
            _ => {}
        }
        self.deliver(
            run_id,
            Delivery::Cancel {
                reason: reason.to_owned(),
                hard,
                from_parent: None,
            },
        )
        .await
    }

    /// Stops every run actor, the timer service and the supervisors, then closes the
    /// store. Unfinished runs stay resumable by the next host on the same path.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::Release);
        self.log_watchers.close();
        let _ = self.timers.stop_gracefully().await;
        self.timers.wait_for_shutdown().await;
        let cells: Vec<LiveCell> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, cell)| cell)
            .collect();
        metrics::gauge!(reel_storage::metrics::LIVE_RUNS).set(0.0);
        // An actor still being spawned is waited for, and stopped like the others.
        let mut live: Vec<ActorRef<RunActor>> = Vec::with_capacity(cells.len());
        for cell in cells {
            let spawned = cell
                .get_or_try_init(|| async { Err::<ActorRef<RunActor>, ()>(()) })
                .await;
            if let Ok(actor) = spawned {
                live.push(actor.clone());
            }
        }
        // All at once: an actor in the middle of a slow write holds up only itself.
        futures::future::join_all(live.iter().map(|actor| async move {
            let _ = ask(actor, StopRun).await;
            actor.wait_for_shutdown().await;
        }))
        .await;
        let mut supervisors = vec![self.supervisors.lock().await.0.clone()];
        supervisors.extend(
            self.retired_supervisors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..),
        );
        for sup in supervisors {
            let _ = sup.stop_gracefully().await;
            sup.wait_for_shutdown().await;
        }
        // Wake every result() and wait_published() waiter: they get `Shutdown`.
        self.waiters.clear();
        self.publish_waiters.clear();
        // Closing joins the writer thread and fsyncs: on the blocking pool, so the
        // async workers (a single one, on a current-thread runtime) keep running.
        let store = self.store.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || store.close()).await {
            tracing::error!(error = %e, "reel: closing the store failed");
        }
    }

    // ---- inside the crate ----

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub(crate) fn schedule_timers(&self, timers: Vec<TimerEntry>) {
        // Most starts and appends add none: no message, no wake of the service.
        if timers.is_empty() {
            return;
        }
        let busy = self.activity.enter();
        let _ = self.timers.tell(AddTimers(timers, busy)).try_send();
    }

    /// Forgets timers removed from the index, so they never wake their run.
    pub(crate) fn unschedule_timers(&self, timers: Vec<TimerEntry>) {
        let _ = self.timers.tell(RemoveTimers(timers)).try_send();
    }

    /// A run finished: wake result waiters and deliver the result to parents
    /// (`output`: a completed run's output, when the caller has it).
    pub(crate) fn run_finished(&self, meta: &RunMeta, output: Option<&Payload>) {
        metrics::counter!(reel_storage::metrics::RUNS_ENDED, "status" => meta.state.kind().as_str())
            .increment(1);
        // The queue lets go of the run (its slot and de-duplication key) before
        // anyone learns it ended: a caller whose `result()` returned may start
        // another run with that key at once.
        if let Some(entry) = &meta.queue {
            self.queue_ended(&entry.name, &meta.run_id);
        }
        self.notify_settled(&meta.run_id, meta, output);
        // It waits on no child any more (see `Subscriptions::forget_parent`).
        self.child_subscribers.forget_parent(&meta.run_id);
        let taken =
            self.child_subscribers
                .take(&meta.run_id, meta.created_at, meta.parent.as_ref(), false);
        self.runs_gone(&meta.run_id, taken.gone);
        let parents = meta.parent.iter().cloned().chain(taken.ended);
        self.notify_parents(meta, output, parents);
    }
}
