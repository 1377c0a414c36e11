//! [`RunHost`]: the narrow interface that run actors, journals, the timer service,
//! supervisors and [`Services`](crate::Services) hold (weakly) instead of the whole
//! [`Core`](crate::Core). The core implements it; nothing below the core names the
//! core, so the modules form no circle.

use std::any::Any;
use std::sync::Arc;

use futures::future::BoxFuture;
use kameo::actor::ActorId;
use kameo::error::ActorStopReason;
use reel_storage::{Failure, Payload, RunMeta, TimerEntry};

use crate::error::ActorError;
use crate::message::{ChildCall, Delivery};

/// What the parts of a host ask of the host that owns them.
pub(crate) trait RunHost: Send + Sync + 'static {
    /// The host itself, to recover its concrete type (`Services::core`).
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;

    // ---- journals: the due-time index and published values ----

    /// Hands new timers to the timer service.
    fn schedule_timers(&self, timers: Vec<TimerEntry>);
    /// Forgets timers removed from the index, so they never wake their run.
    fn unschedule_timers(&self, timers: Vec<TimerEntry>);
    /// A `Published` event of the run landed: wake the callers waiting for a value.
    fn notify_published(&self, run_id: &str);

    // ---- the timer service and supervisors ----

    /// Marks work in flight (a busy execution) until the guard is dropped.
    fn busy(&self) -> reel_storage::Busy;
    /// Whether step bodies of the run may start now: on a store shared by several
    /// hosts, only while this host surely holds the lease of the run's partition.
    fn lease_holds(&self, run_id: &str) -> bool;
    /// A timer came due: wake its run.
    fn fire_timer(&self, timer: TimerEntry);
    /// A run actor stopped for good (normally, or crashing past its restart limit).
    fn run_actor_stopped(&self, id: ActorId, reason: ActorStopReason);

    // ---- run actors ----

    /// Delivers `delivery` to the run in the background.
    fn spawn_delivery(&self, run_id: String, delivery: Delivery);
    /// The run's state changed: wake its waiters (with the new state when written).
    fn notify_changed(&self, run_id: &str, meta: Option<&RunMeta>);
    /// The run finished: wake its waiters and deliver its result to its parents.
    /// `output` is a completed run's output when the caller has it at hand (it
    /// spares each waiter and parent a read of the log's last event).
    fn run_finished(&self, meta: &RunMeta, output: Option<&Payload>);
    /// Remembers a park the store refused, so it is still reported.
    fn record_unwritten_park(&self, run_id: &str, error: Failure);
    /// Remembers why the run's actor crashed, for the park after too many crashes.
    fn record_crash(&self, run_id: &Arc<str>, message: String);
    /// As `record_crash`, for a crash of the store's making (an I/O error): on a
    /// store whose outages pass, the run is resumed later instead of parked.
    fn record_store_failure(&self, run_id: &Arc<str>, message: String);
    /// Parks a run whose log could not be loaded.
    fn park_unreadable_log<'a>(
        &'a self,
        run_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), ActorError>>;
    /// Removes the run's live entry if it is still the actor `actor`.
    fn retire<'a>(&'a self, run_id: &'a str, actor: ActorId) -> BoxFuture<'a, ()>;
    /// Whether another host owns the run (this host does not lease its
    /// partition, or is giving it back).
    fn owned_elsewhere(&self, run_id: &str) -> bool;
    /// Another host owns the run now (a write of its actor was refused): wake the
    /// owner with a letter, in the background, in case its scan of the partition
    /// came before the run's last change here.
    fn hand_over(&self, run_id: &str);
    /// The signal letters for the run in this host's inbox: (letter id, signal id).
    fn inbox_signals<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(i64, String)>, ActorError>>;
    /// Acknowledges letters of the run whose signals are in its current log
    /// segment, before the segment ends: applied again after it, in a segment that
    /// does not know their signal ids, they would deliver their signals twice.
    fn ack_letters<'a>(
        &'a self,
        run_id: &'a str,
        ids: Vec<i64>,
    ) -> BoxFuture<'a, Result<(), ActorError>>;
    /// Whether the run of letter `id` acknowledged it (`ack_letters`).
    fn letter_gone(&self, id: i64) -> bool;

    // ---- handlers, through `Services` ----

    /// Starts a child run: a waited-for child's result reaches its parent, a
    /// detached child's parent learns only whether it started.
    fn start_child(&self, call: ChildCall) -> BoxFuture<'_, ()>;
    /// Delivers a signal to a run.
    fn signal<'a>(
        &'a self,
        run_id: &'a str,
        name: &'a str,
        signal_id: &'a str,
        payload: Payload,
    ) -> BoxFuture<'a, Result<(), ActorError>>;
}
