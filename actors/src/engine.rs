//! The seam between the actors and the replay engine in `reel`.
//!
//! `reel-actors` does not know workflow types: `reel` registers one [`Engine`] per
//! workflow name and version, and the run actor hands it an [`Execution`] on every
//! wake-up. The engine replays the handler against [`Execution::history`], appends
//! what is new through [`Execution::journal`] and reports [`Outcome`]s: zero or more
//! [`Outcome::Suspended`] while the execution stays alive (new events reach it
//! through the journal), then one final outcome.

use std::sync::Arc;

use futures::stream::BoxStream;
use reel_storage::{Event, Failure, Payload};

use crate::journal::Journal;
use crate::services::Services;

/// How one execution of a handler ended.
#[derive(Debug)]
pub enum Outcome {
    /// The handler returned a value: the run completes.
    Completed(Payload),
    /// The handler returned an error: the run fails with it.
    Failed(Failure),
    /// The handler ended (with an error) after it was asked to cancel: the run is
    /// cancelled, with the reason it was given.
    Cancelled(String),
    /// The handler continued as new: the run's current log segment ends and a new
    /// one begins with `input`, run by `version` of the same workflow.
    ContinuedAsNew {
        /// The workflow version the new segment runs.
        version: u32,
        /// The new segment's input.
        input: Payload,
        /// Positions (in the segment) of the signals the execution walked and did
        /// not consume; every signal past `seen` is unconsumed too. They carry over.
        carried: Vec<u64>,
        /// How many events of the segment the execution had walked.
        seen: u64,
    },
    /// Every branch of the handler waits on something durable (timer, signal, child).
    /// Not final: the execution stays alive and goes on when the journal reports new
    /// durable events.
    Suspended {
        /// Human-readable description of the waits.
        waiting_on: String,
        /// Whether one of the waits is a child run.
        awaits_child: bool,
        /// How many events of the log the execution had seen: a suspension older
        /// than the log's current length is stale.
        seen: u64,
    },
    /// The handler cannot go on with this code (replay divergence). Only metadata
    /// records this; the log is left as it was so fixed code can resume the run.
    Parked(Failure),
    /// The handler panicked outside a step: the actor crashes and the supervisor
    /// restarts it from disk.
    Crashed(String),
    /// An append of the execution failed with an I/O error: as `Crashed`, except
    /// that on a store whose outages pass (`Store::outages_pass`) the run is not
    /// parked for crashing repeatedly but resumed once the store answers again.
    Unstored(String),
    /// The run was paused ([`Journal::is_paused`]): the execution stopped making
    /// results visible, let the step bodies under way finish and record their
    /// results, and ends here. Its handler is dropped; resuming the run starts a
    /// new execution, which replays.
    Paused,
    /// The store refused a write because another host owns the run now (its
    /// partition was taken over): the execution stops here, records nothing, and
    /// the owner runs the run from its log.
    Disowned,
}

/// One wake-up's worth of work for an [`Engine`].
pub struct Execution {
    /// The run.
    pub run_id: Arc<str>,
    /// The log as recorded when the execution began (the first event is `RunStarted`).
    pub history: Arc<Vec<Event>>,
    /// Appends new events to the run's log (the run's only writer).
    pub journal: Journal,
    /// Host services (child runs).
    pub services: Services,
    /// The run that started this one as its child, if any.
    pub parent: Option<String>,
    /// How many times the run has continued as new (the history is the segment
    /// that began then).
    pub segment: u32,
}

/// One registered workflow definition (one name and version), type-erased.
pub trait Engine: Send + Sync + 'static {
    /// Replays the handler from the top against `execution.history` and runs it:
    /// the stream yields a suspension each time every branch waits, and ends after
    /// the final outcome (completed, failed, parked or crashed).
    fn execute(&self, execution: Execution) -> BoxStream<'static, Outcome>;
}

/// Finds the engine for a run's workflow name and version.
pub trait Registry: Send + Sync + 'static {
    /// # Errors
    /// [`Failure::UnknownWorkflow`] or [`Failure::VersionMismatch`].
    fn lookup(&self, workflow: &str, version: u32) -> Result<Arc<dyn Engine>, Failure>;

    /// The newest version of `workflow` registered, or `None` if no version is
    /// (what a new run of the name, such as a schedule's firing, starts on).
    fn newest(&self, workflow: &str) -> Option<u32>;
}
