//! The actors layer's error type.

use reel_storage::{Failure, StatusKind, StorageError};

/// Why a host operation was refused.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    /// No run has this id.
    #[error("unknown run `{0}`")]
    UnknownRun(String),
    /// The id is taken by a run of another workflow.
    #[error("run id `{run_id}` is taken by a run of workflow `{workflow}`")]
    RunExists {
        /// The run id.
        run_id: String,
        /// The workflow of the existing run.
        workflow: String,
    },
    /// The run has finished; it takes no more signals.
    #[error("run `{0}` has finished")]
    RunFinished(String),
    /// The workflow (or its version) is not registered.
    #[error("{0}")]
    NotRegistered(Failure),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The host is shutting down.
    #[error("the host is shut down")]
    Shutdown,
    /// The run's actor could not be reached (it keeps stopping or failing to start).
    #[error("run `{run_id}` is unavailable: {reason}")]
    Unavailable {
        /// The run id.
        run_id: String,
        /// What went wrong.
        reason: String,
    },
    /// The run is in a state that does not allow the action (pause a finished run,
    /// delete a running one).
    #[error("cannot {action} run `{run_id}`: it is {state}")]
    InvalidState {
        /// The run id.
        run_id: String,
        /// The state it is in.
        state: StatusKind,
        /// What was asked (`"pause"`, `"delete"`, ...).
        action: String,
    },
    /// A fork's cut is not at a primitive boundary of the run's current log
    /// segment (see [`Core::fork`](crate::Core::fork)). Nothing was written.
    #[error("cannot fork run `{run_id}` at sequence number {at_seq}: {reason}")]
    InvalidCut {
        /// The run asked to be forked.
        run_id: String,
        /// The cut asked for.
        at_seq: u64,
        /// Why the cut is refused.
        reason: String,
    },
    /// A start named a queue the host does not configure.
    #[error("unknown queue `{0}` (configure it with HostBuilder::queue)")]
    UnknownQueue(String),
    /// A start on a queue carried a de-duplication key that another run, enqueued
    /// or running on that queue, holds. Nothing was written.
    #[error("queue `{queue}` already has run `{run_id}` with de-duplication key `{key}`")]
    Deduplicated {
        /// The queue.
        queue: String,
        /// The key.
        key: String,
        /// The run holding it.
        run_id: String,
    },
    /// The run actor was retired while the message was queued; the sender retries.
    #[error("run actor retired")]
    Retired,
}
