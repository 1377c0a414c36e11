//! The host core: the state of one host and its public calls (start, signal,
//! cancel, reads, shutdown). The rest of `impl Core` is split by job: `recovery`
//! (opening: what start-up does), `activation` (the live-run map, spawning run
//! actors under rotating supervisors, what happens when one stops for good),
//! `routing` (delivering messages to runs, background deliveries of wake-ups),
//! `parking`, `waiters` (result waiters), `published` (readers of published
//! values), `children` (child-run links, child cycles), `cluster` (leases,
//! inbox and notices of a host that shares its store), `listing`, `operate`
//! (pause, resume, retry), `fork`, `deletion` (delete, retention), `queueing`
//! (starting runs on queues, admitting them), `signal_start` (signal-with-start),
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
use kameo::error::{ActorStopReason, SendError};
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
mod listing;
mod operate;
mod parking;
mod published;
mod queueing;
mod reading;
mod recovery;
mod routing;
mod run_host;
mod signal_start;
mod waiters;

pub use queueing::QueuePlace;
use waiters::Changed;

/// A live run's actor, or the place it is being spawned into.
type LiveCell = Arc<OnceCell<ActorRef<RunActor>>>;

/// What [`Core::start`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// A new run was created.
    Created,
    /// A run of the same workflow already had this id; nothing changed.
    Existing,
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
    fresh: Mutex<HashMap<Arc<str>, Preload>>,
    /// Passivates idle run actors after `passivate_after`.
    passivator: Passivator,
    actor_runs: Mutex<HashMap<ActorId, Arc<str>>>,
    crash_messages: Mutex<HashMap<Arc<str>, String>>,
    /// Parks known only in memory: the store refused to write them (a full disk), or
    /// the run's index records are damaged. Reported by `meta` and `list` so waiters,
    /// `status()` and `runs()` still learn why the run stopped; forgotten once a new
    /// state of the run is written.
    unrecorded_parks: Mutex<HashMap<String, Failure>>,
    supervisors: tokio::sync::Mutex<(ActorRef<RunSupervisor>, usize)>,
    retired_supervisors: Mutex<Vec<ActorRef<RunSupervisor>>>,
    timers: ActorRef<TimerService>,
    waiters: Waiters<Option<Changed>>,
    /// Callers of `wait_published`, by run: woken when a value lands or the run ends.
    publish_waiters: Waiters<()>,
    child_subscribers: children::Subscriptions,
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
    inbox: cluster::InboxTurn,
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

    /// Creates a run (idempotent on `run_id` for the same workflow) and starts it.
    /// A `deadline` (ms since the epoch) asks the run to cancel when it passes.
    ///
    /// # Errors
    /// [`ActorError::NotRegistered`] for an unknown workflow or version of a run that
    /// does not exist yet,
    /// [`ActorError::RunExists`] when another workflow has the id, storage errors.
    pub async fn start(
        &self,
        workflow: &str,
        version: u32,
        run_id: &str,
        input: Payload,
        parent: Option<ParentLink>,
        deadline: Option<u64>,
    ) -> Result<Started, ActorError> {
        self.check_open()?;
        check_new_run_id(run_id)?;
        if let Err(e) = self.check_registered(workflow, version) {
            // A run that exists is answered as such whatever this host registers (a
            // parent replaying its call of a child whose version is gone: the child
            // parks on activation, and the parent keeps waiting for it).
            if self.meta(run_id).await?.is_none() {
                return Err(e);
            }
            return Box::pin(self.start_existing(run_id, workflow)).await;
        }
        let (meta, events) = self.new_run(workflow, version, run_id, input, parent, deadline);
        self.create(meta, events).await
    }

    /// A new run's metadata (running, not queued) and first events.
    fn new_run(
        &self,
        workflow: &str,
        version: u32,
        run_id: &str,
        input: Payload,
        parent: Option<ParentLink>,
        deadline: Option<u64>,
    ) -> (RunMeta, Vec<Event>) {
        let now = self.options.clock.now_ms();
        let meta = RunMeta {
            run_id: run_id.to_owned(),
            workflow: workflow.to_owned(),
            version,
            state: RunState::Running,
            created_at: now,
            updated_at: now,
            parent,
            segment_start: 0,
            segment: 0,
            queue: None,
        };
        let started = Event::RunStarted {
            workflow: workflow.to_owned(),
            version,
            input,
        };
        let mut events = vec![started];
        events.extend(deadline.map(|fire_at| Event::Deadline {
            id: RUN_DEADLINE.to_owned(),
            fire_at,
        }));
        (meta, events)
    }

    /// Writes a new run (its first write is the existence check) and activates it,
    /// or, for an enqueued run, hands it to its queue.
    async fn create(&self, meta: RunMeta, events: Vec<Event>) -> Result<Started, ActorError> {
        self.create_with(meta, events, None).await
    }

    /// [`Core::create`], with the timers to arm for the run (by default, those
    /// its events schedule: a fork's prefix may hold timers already settled).
    async fn create_with(
        &self,
        mut meta: RunMeta,
        mut events: Vec<Event>,
        timers: Option<Vec<TimerEntry>>,
    ) -> Result<Started, ActorError> {
        // The compare-and-set on sequence 0 is the existence check (the first
        // execution's read of the run only spares an existing run an execution).
        let elsewhere = self.owned_elsewhere(&meta.run_id);
        // Its first execution goes first; a run that only comes to wait is written
        // waiting, and not activated (`eager`).
        let first = match (&timers, elsewhere) {
            (None, false) => self.execute_first(&meta, &events),
            _ => None,
        };
        let mut handed = None;
        if let Some(first) = first {
            events.extend(first.events);
            if let Some(state) = first.waiting {
                meta.state = state;
            }
            handed = first.handed;
        }
        let waits = matches!(meta.state, RunState::Suspended { .. });
        let run_id = meta.run_id.clone();
        let workflow = meta.workflow.clone();
        let now = meta.created_at;
        let add_timers: Vec<TimerEntry> =
            timers.unwrap_or_else(|| events.iter().filter_map(|e| timer_of(&run_id, e)).collect());
        let (meta_copy, events_copy) = (meta.clone(), events.clone());
        let enqueued = meta.state == RunState::Enqueued;
        // The permit for the activation is taken before the write, so a caller that
        // stops waiting can no longer leave a written run without its activation.
        let busy = self.activity.enter();
        let core = self.me.upgrade().ok_or(ActorError::Shutdown)?;
        let permit = if enqueued || waits {
            None
        } else {
            let permit = self.new_runs.clone().acquire_owned().await;
            Some(permit.map_err(|_| ActorError::Shutdown)?)
        };
        // Created on a host that does not own it: its owner learns of it, and of its
        // timers, by mail posted with the run's first write.
        let mail = elsewhere.then(|| reel_storage::Mail::Wake {
            timers: add_timers
                .iter()
                .map(|t| (t.fire_at, t.timer_id.clone()))
                .collect(),
        });
        let created = self
            .store
            .submit(Append {
                run_id: run_id.clone(),
                expected_seq: Some(0),
                events,
                meta: Some(meta),
                add_timers: add_timers.clone(),
                durable: true,
                at: Some(now),
                mail,
                ..Append::default()
            })
            .await;
        match created {
            Ok(()) => {
                if let Some(h) = &handed {
                    h.journal.go_live();
                }
            }
            // Someone created it first: answer as for an existing run. Boxed, as a
            // rare path: its future would make every start's several KB larger.
            Err(StorageError::Conflict { .. }) => {
                return Box::pin(self.start_existing(&run_id, &workflow)).await;
            }
            Err(e) => return Err(e.into()),
        }
        metrics::counter!(reel_storage::metrics::RUNS_STARTED).increment(1);
        if elsewhere {
            return Ok(Started::Created);
        }
        if let Some(entry) = &meta_copy.queue
            && enqueued
        {
            self.schedule_timers(add_timers);
            self.queues.enqueued(&run_id, entry);
            self.admit_later(entry.name.clone(), busy);
            return Ok(Started::Created);
        }
        if waits {
            // Like a passivated run: what wakes it activates it from disk.
            self.schedule_timers(add_timers);
            self.notify_changed(&run_id, Some(&meta_copy));
            return Ok(Started::Created);
        }
        // Stashed before the run's timers can reach it (see below).
        self.stash_fresh(
            &run_id,
            Box::new(Fresh {
                meta: meta_copy,
                log: events_copy,
                handed,
            }),
        );
        self.schedule_timers(add_timers);
        // The run exists once its first write has landed: its activation goes on in
        // a task of its own, which the caller does not wait for (a message sent to
        // the run meanwhile waits for the same actor). The actor that activates the
        // run first, this one or a message's that came first, gets the run as just
        // written instead of reading it back; one activated after that actor stopped
        // reads the store. An activation refused because the host is closing leaves
        // the run to recovery by the next host.
        tokio::spawn(async move {
            let _permit = permit;
            let _busy = busy;
            let activated = core.deliver(&run_id, Resume).await;
            core.drop_fresh(&run_id);
            match activated {
                Ok(()) | Err(ActorError::Shutdown) => {}
                Err(e) => {
                    tracing::warn!(run_id, error = %e, "reel: a new run's activation failed; it resumes with its next message or the next host");
                }
            }
        });
        Ok(Started::Created)
    }

    /// A start of a run that exists already: the same workflow's is answered as
    /// such, another workflow's is refused.
    async fn start_existing(&self, run_id: &str, workflow: &str) -> Result<Started, ActorError> {
        let existing = self
            .meta(run_id)
            .await?
            .ok_or_else(|| ActorError::UnknownRun(run_id.to_owned()))?;
        let started = Core::existing(&existing, workflow)?;
        // An earlier start landed but its caller heard it failed (a lost answer, a
        // failed activation): nobody runs it yet, so this one does.
        if existing.state == RunState::Running && !self.is_live(run_id) {
            self.deliver(run_id, Resume).await?;
        }
        Ok(started)
    }

    fn existing(existing: &RunMeta, workflow: &str) -> Result<Started, ActorError> {
        if existing.workflow == workflow {
            Ok(Started::Existing)
        } else {
            Err(ActorError::RunExists {
                run_id: existing.run_id.clone(),
                workflow: existing.workflow.clone(),
            })
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
        for actor in &live {
            let _ = ask(actor, StopRun).await;
        }
        for actor in &live {
            actor.wait_for_shutdown().await;
        }
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
        let subscribers = self.child_subscribers.take(&meta.run_id);
        let parents = meta.parent.iter().cloned().chain(subscribers);
        self.notify_parents(meta, output, parents);
    }
}
