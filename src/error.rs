//! The public error type.

use reel_actors::ActorError;
use reel_storage::{Failure, StatusKind, StorageError};

/// Result alias with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything reel reports. The Display text names the problem.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A step failed for good: its attempts are exhausted, or its body returned
    /// [`StepError::non_retryable`](crate::StepError::non_retryable). A handler may
    /// catch it. A run that fails with it records every attempt's error
    /// ([`Failure::Step`]'s `attempts`, in the `RunFailed` event).
    #[error("step `{step}` failed: {message}")]
    Step {
        /// The step id.
        step: String,
        /// The last attempt's error text.
        message: String,
    },
    /// The handler no longer matches the run's log (invariant 3). The run is parked,
    /// its log untouched, and it resumes when a host with fixed code opens the store.
    #[error(
        "replay diverged at event {index}: the log has {expected} there, but the handler {found}"
    )]
    ReplayDivergence {
        /// Sequence number of the first divergent event.
        index: u64,
        /// What the log holds there.
        expected: String,
        /// What the handler did instead, worded to follow "the handler": `called
        /// step `b``, `returned before reaching it`, `did not call it (it waits on
        /// timer `timer#1`)`.
        found: String,
    },
    /// The run's workflow version is not registered.
    #[error("workflow `{workflow}` version {version} is not registered")]
    VersionMismatch {
        /// Workflow name.
        workflow: String,
        /// The version asked for or recorded.
        version: u32,
    },
    /// No run has this id.
    #[error("unknown run `{0}`")]
    UnknownRun(String),
    /// No workflow of this name is registered.
    #[error("unknown workflow `{0}`")]
    UnknownWorkflow(String),
    /// The run id is taken by a run of another workflow.
    #[error("run id `{run_id}` is taken by a run of workflow `{workflow}`")]
    RunExists {
        /// The run id.
        run_id: String,
        /// The workflow that has it.
        workflow: String,
    },
    /// The run has finished and takes no more signals.
    #[error("run `{0}` has finished")]
    RunFinished(String),
    /// The run was cancelled, with the reason.
    #[error("cancelled: {0}")]
    Cancelled(String),
    /// A payload could not be encoded or decoded into the expected type.
    #[error("codec error: {0}")]
    Codec(String),
    /// The store failed (I/O, disk full, corrupt record).
    #[error("storage error: {0}")]
    Storage(String),
    /// The host is shut down.
    #[error("the host is shut down")]
    Shutdown,
    /// An argument is out of range or malformed (a page size of 0, a cursor
    /// string that is not one, a run id that is empty, longer than 512 bytes or
    /// holds a NUL, a new run's id `.` or `..`, which no URL can carry); the
    /// message says which and why.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The run is in a state that does not allow the action (pause a finished run,
    /// delete a running one, fork past the end of a log). Nothing was changed.
    #[error("cannot {action} run `{run_id}`: it is {state}")]
    InvalidState {
        /// The run id.
        run_id: String,
        /// The state it is in.
        state: StatusKind,
        /// What was asked (`"pause"`, `"delete"`, ...).
        action: String,
    },
    /// A fork's cut ([`Host::fork`](crate::Host::fork)) is not at a primitive
    /// boundary of the run's current log segment: before or at its `RunStarted`,
    /// past its last event or its end, between the attempts of a step, after a
    /// child start whose end is not before the cut, or after a cancel request.
    /// Nothing was written.
    #[error("cannot fork run `{run_id}` at sequence number {at_seq}: {reason}")]
    InvalidCut {
        /// The run asked to be forked.
        run_id: String,
        /// The cut asked for.
        at_seq: u64,
        /// Why the cut is refused.
        reason: String,
    },
    /// A start named a queue the host does not configure
    /// ([`HostBuilder::queue`](crate::HostBuilder::queue)). Nothing was written.
    #[error("unknown queue `{0}` (configure it with HostBuilder::queue)")]
    UnknownQueue(String),
    /// A start on a queue carried a de-duplication key
    /// ([`StartOptions::dedup_key`](crate::StartOptions)) that another run, enqueued or
    /// running on that queue, holds. Nothing was written.
    #[error("queue `{queue}` already has run `{run_id}` with de-duplication key `{key}`")]
    Deduplicated {
        /// The queue.
        queue: String,
        /// The key.
        key: String,
        /// The run holding it.
        run_id: String,
    },
    /// The store's directory is held by another live host: another process, or a
    /// [`Host`](crate::Host) in this process that has not shut down. (A host whose
    /// last clone was dropped is waited for: it shuts down in the background.)
    #[error(
        "the store at `{}` is in use by another host (another process, or a Host in \
         this process that has not shut down)",
        path.display()
    )]
    StoreLocked {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// The handler kept crashing (panicking outside steps) and the run was parked.
    #[error("run crashed repeatedly: {0}")]
    Crashed(String),
    /// The handler failed with this message (see [`Error::failed`]).
    #[error("{0}")]
    Failed(String),
    /// A record of the run could not be decoded: the store is damaged there. The run
    /// is parked (reported by [`Host::runs`](crate::Host::runs)); every other run
    /// goes on. It is retried when a host opens the store again.
    #[error("{}", Failure::Corrupt {
        keyspace: keyspace.clone(), run_id: run_id.clone(), seq: *seq, key: key.clone(),
        reason: reason.clone(),
    })]
    Corrupt {
        /// The keyspace holding the record: `log`, `runs`, `active` or `timers`.
        keyspace: String,
        /// The run.
        run_id: String,
        /// The record's sequence number, for a log record.
        seq: Option<u64>,
        /// The record's key, printable ASCII as is and other bytes as `\xNN`.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A [`RunHandle`](crate::RunHandle) of one workflow was used on a run of another.
    #[error("run `{run_id}` is a run of workflow `{found}`, not `{expected}`")]
    WorkflowMismatch {
        /// The run id.
        run_id: String,
        /// The handle's workflow.
        expected: String,
        /// The run's workflow.
        found: String,
    },
    /// A signal name reel reserves for itself (approvals travel as `approval:<name>`).
    #[error(
        "signal name `{0}` is reserved: names starting with `approval:` carry approvals, \
         send those with RunHandle::approve"
    )]
    ReservedName(String),
    /// A child call would make runs wait on each other for ever: the child id is the
    /// caller's own id, or the child (through its own children) waits on the caller.
    #[error("child runs would wait on each other for ever: {}", cycle.join(" → "))]
    ChildCycle {
        /// The runs, each waiting on the next: the caller first and last.
        cycle: Vec<String>,
    },
    /// A schedule's id or spec is not usable (an invalid cron expression, an
    /// unknown time zone, a zero interval, an empty id); nothing was stored.
    #[error("invalid schedule `{id}`: {reason}")]
    InvalidSchedule {
        /// The schedule id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// A schedule with this id exists already; nothing was changed.
    #[error("schedule `{0}` exists already")]
    ScheduleExists(String),
    /// No schedule has this id.
    #[error("unknown schedule `{0}`")]
    UnknownSchedule(String),
}

impl Error {
    /// A handler-defined failure: `return Err(Error::failed("out of stock"))`.
    pub fn failed(message: impl std::fmt::Display) -> Error {
        Error::Failed(message.to_string())
    }

    pub(crate) fn codec(e: impl std::fmt::Display) -> Error {
        Error::Codec(e.to_string())
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Error {
        match f {
            Failure::Step { step, message, .. } => Error::Step { step, message },
            Failure::ReplayDivergence {
                index,
                expected,
                found,
            } => Error::ReplayDivergence {
                index,
                expected,
                found,
            },
            Failure::VersionMismatch { workflow, version } => {
                Error::VersionMismatch { workflow, version }
            }
            Failure::UnknownWorkflow(w) => Error::UnknownWorkflow(w),
            Failure::Cancelled(r) => Error::Cancelled(r),
            Failure::Codec(m) => Error::Codec(m),
            Failure::Crashed(m) => Error::Crashed(m),
            Failure::Other(m) => Error::Failed(m),
            Failure::Corrupt {
                keyspace,
                run_id,
                seq,
                key,
                reason,
            } => Error::Corrupt {
                keyspace,
                run_id,
                seq,
                key,
                reason,
            },
            Failure::ChildCycle { cycle } => Error::ChildCycle { cycle },
            Failure::UnknownRun(r) => Error::UnknownRun(r),
            Failure::RunFinished(r) => Error::RunFinished(r),
            Failure::RunExists { run_id, workflow } => Error::RunExists { run_id, workflow },
            Failure::WorkflowMismatch {
                run_id,
                expected,
                found,
            } => Error::WorkflowMismatch {
                run_id,
                expected,
                found,
            },
            Failure::InvalidArgument(m) => Error::InvalidArgument(m),
            other => Error::Failed(other.to_string()),
        }
    }
}

impl From<&Error> for Failure {
    fn from(e: &Error) -> Failure {
        match e.clone() {
            // The attempts are not in the error: the driver adds them from the log.
            Error::Step { step, message } => Failure::Step {
                step,
                message,
                attempts: Vec::new(),
            },
            Error::ReplayDivergence {
                index,
                expected,
                found,
            } => Failure::ReplayDivergence {
                index,
                expected,
                found,
            },
            Error::VersionMismatch { workflow, version } => {
                Failure::VersionMismatch { workflow, version }
            }
            Error::UnknownWorkflow(w) => Failure::UnknownWorkflow(w),
            Error::Cancelled(r) => Failure::Cancelled(r),
            Error::Codec(m) => Failure::Codec(m),
            Error::Crashed(m) => Failure::Crashed(m),
            Error::Failed(m) => Failure::Other(m),
            Error::Corrupt {
                keyspace,
                run_id,
                seq,
                key,
                reason,
            } => Failure::Corrupt {
                keyspace,
                run_id,
                seq,
                key,
                reason,
            },
            Error::ChildCycle { cycle } => Failure::ChildCycle { cycle },
            Error::UnknownRun(r) => Failure::UnknownRun(r),
            Error::RunFinished(r) => Failure::RunFinished(r),
            Error::RunExists { run_id, workflow } => Failure::RunExists { run_id, workflow },
            Error::WorkflowMismatch {
                run_id,
                expected,
                found,
            } => Failure::WorkflowMismatch {
                run_id,
                expected,
                found,
            },
            Error::InvalidArgument(m) => Failure::InvalidArgument(m),
            other => Failure::Other(other.to_string()),
        }
    }
}

impl From<StorageError> for Error {
    fn from(e: StorageError) -> Error {
        if let Some(corrupt) = e.corruption() {
            return corrupt.into();
        }
        match e {
            StorageError::Locked { path } => Error::StoreLocked { path },
            // Only a host that shut down closes its store.
            StorageError::Closed => Error::Shutdown,
            // A malformed id is the caller's input, not a failure of the store.
            e @ StorageError::InvalidRunId(_) => Error::InvalidArgument(e.to_string()),
            e => Error::Storage(e.to_string()),
        }
    }
}

impl From<ActorError> for Error {
    fn from(e: ActorError) -> Error {
        match e {
            ActorError::UnknownRun(r) => Error::UnknownRun(r),
            ActorError::RunExists { run_id, workflow } => Error::RunExists { run_id, workflow },
            ActorError::RunFinished(r) => Error::RunFinished(r),
            ActorError::NotRegistered(f) => f.into(),
            ActorError::Storage(s) => s.into(),
            ActorError::Shutdown => Error::Shutdown,
            ActorError::InvalidState {
                run_id,
                state,
                action,
            } => Error::InvalidState {
                run_id,
                state,
                action,
            },
            ActorError::InvalidCut {
                run_id,
                at_seq,
                reason,
            } => Error::InvalidCut {
                run_id,
                at_seq,
                reason,
            },
            ActorError::UnknownQueue(q) => Error::UnknownQueue(q),
            ActorError::Deduplicated { queue, key, run_id } => {
                Error::Deduplicated { queue, key, run_id }
            }
            other => Error::Storage(other.to_string()),
        }
    }
}
