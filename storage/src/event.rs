//! The event model: one MessagePack-encoded [`Event`] per log record.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::StorageError;

/// How deep the records' MessagePack may nest. Events and run metadata nest less
/// than ten levels; the decoders' default (1,024) lets a damaged record of nested
/// one-byte array headers recurse deep enough to overflow a 2 MiB thread stack (the
/// blocking pool's), which aborts the process instead of reporting one bad record.
const MAX_RECORD_DEPTH: usize = 32;

/// Decodes one record, nesting at most [`MAX_RECORD_DEPTH`] levels.
pub(crate) fn from_msgpack<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, rmp_serde::decode::Error> {
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(MAX_RECORD_DEPTH);
    T::deserialize(&mut de)
}

/// An opaque MessagePack value written by the layer above (workflow input, step
/// output, signal payload, recorded value).
///
/// Stored as a MessagePack `bin`, so the bytes are never re-encoded. `Debug` renders
/// the decoded value, which makes a printed log readable.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Payload(#[serde(with = "serde_bytes")] pub Vec<u8>);

impl Payload {
    /// The raw MessagePack bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut slice = self.0.as_slice();
        match rmpv::decode::read_value_with_max_depth(&mut slice, MAX_RECORD_DEPTH) {
            Ok(value) if slice.is_empty() => write!(f, "{value}"),
            _ => write!(f, "<{} bytes>", self.0.len()),
        }
    }
}

/// One failed attempt of a step, as kept in [`Failure::Step`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// The 1-based attempt number.
    pub attempt: u32,
    /// The attempt's error text (for a panicking body, `panicked: <message>`).
    pub error: String,
}

/// Why a run, a step or a child ended in error, as recorded in the log.
///
/// The layer above maps its own error type onto these variants and back, so that a
/// failed run reports the same error after a restart as before it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// A step failed for good (its retries are exhausted, or its body said a retry
    /// cannot help).
    Step {
        /// The step id.
        step: String,
        /// The last attempt's error text.
        message: String,
        /// Every failed attempt, in order (the last one's error is `message`). Empty
        /// in records written before reel kept them, and when the step's failure
        /// reached this run from elsewhere (a child run's error passed on).
        #[serde(default)]
        attempts: Vec<AttemptError>,
    },
    /// The handler no longer matches the recorded log.
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
    VersionMismatch {
        /// Workflow name.
        workflow: String,
        /// The version the run started with.
        version: u32,
    },
    /// The run's workflow name is not registered.
    UnknownWorkflow(String),
    /// The run was cancelled, with the reason.
    Cancelled(String),
    /// A payload could not be encoded or decoded.
    Codec(String),
    /// The handler crashed (panicked) too often and was parked.
    Crashed(String),
    /// Any other error returned by the handler, as its display text.
    Other(String),
    /// A record of the run could not be decoded: the store is damaged there. The run
    /// is parked; every other run goes on.
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
    /// Waiting on this child would close a cycle of runs waiting on each other (a
    /// run whose child id is its own, or a chain of children back to an ancestor).
    ChildCycle {
        /// The runs, each waiting on the next: the caller first and last.
        cycle: Vec<String>,
    },
    /// A run the handler named (a signal's receiver) does not exist.
    UnknownRun(String),
    /// A run the handler signalled had finished.
    RunFinished(String),
    /// A run id the handler gave a new run is taken by a run of another workflow.
    RunExists {
        /// The run id.
        run_id: String,
        /// The workflow of the run that has it.
        workflow: String,
    },
    /// A run the handler reached as a run of one workflow is a run of another.
    WorkflowMismatch {
        /// The run id.
        run_id: String,
        /// The workflow the handler expected.
        expected: String,
        /// The run's workflow.
        found: String,
    },
    /// An argument the handler passed was refused (a malformed run id, ...).
    InvalidArgument(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Step { step, message, .. } => write!(f, "step `{step}` failed: {message}"),
            Failure::ReplayDivergence {
                index,
                expected,
                found,
            } => write!(
                f,
                "replay diverged at event {index}: the log has {expected} there, but the handler {found}"
            ),
            Failure::VersionMismatch { workflow, version } => {
                write!(
                    f,
                    "workflow `{workflow}` version {version} is not registered"
                )
            }
            Failure::UnknownWorkflow(w) => write!(f, "workflow `{w}` is not registered"),
            Failure::Cancelled(reason) => write!(f, "cancelled: {reason}"),
            Failure::Codec(m) => write!(f, "codec error: {m}"),
            Failure::Crashed(m) => write!(f, "handler crashed repeatedly: {m}"),
            Failure::Other(m) => f.write_str(m),
            Failure::Corrupt {
                keyspace,
                run_id,
                seq,
                key,
                reason,
            } => {
                write!(
                    f,
                    "corrupt record in keyspace `{keyspace}` of run `{run_id}`"
                )?;
                match seq {
                    Some(seq) => write!(f, " at sequence {seq}")?,
                    None => write!(f, " (key `{key}`)")?,
                }
                write!(f, ": {reason}")
            }
            Failure::ChildCycle { cycle } => write!(
                f,
                "child runs would wait on each other for ever: {}",
                cycle.join(" → ")
            ),
            Failure::UnknownRun(r) => write!(f, "unknown run `{r}`"),
            Failure::RunFinished(r) => write!(f, "run `{r}` has finished"),
            Failure::RunExists { run_id, workflow } => {
                write!(
                    f,
                    "run id `{run_id}` is taken by a run of workflow `{workflow}`"
                )
            }
            Failure::WorkflowMismatch {
                run_id,
                expected,
                found,
            } => write!(
                f,
                "run `{run_id}` is a run of workflow `{found}`, not `{expected}`"
            ),
            Failure::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
        }
    }
}

/// One record of a run's append-only log.
///
/// Times are milliseconds since the Unix epoch. Ids are the durable primitive ids
/// assigned by the replay engine (`charge`, `charge#2`, `timer#1`, `signal#1`, ...).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// First event of every run.
    RunStarted {
        /// Workflow name.
        workflow: String,
        /// Workflow version the run is bound to.
        version: u32,
        /// The encoded input.
        input: Payload,
    },
    /// An attempt of a step begins.
    StepStarted {
        /// Step id.
        id: String,
        /// 1-based attempt number.
        attempt: u32,
    },
    /// A step's result; once recorded the body never runs again.
    StepCompleted {
        /// Step id.
        id: String,
        /// The encoded output.
        output: Payload,
    },
    /// An attempt failed; `retry_at` is `None` when the attempts are exhausted.
    StepFailed {
        /// Step id.
        id: String,
        /// The failed attempt.
        attempt: u32,
        /// The error text.
        error: String,
        /// When the next attempt is due, if any.
        retry_at: Option<u64>,
    },
    /// A durable timer was created.
    TimerScheduled {
        /// Timer id.
        id: String,
        /// Due time.
        fire_at: u64,
    },
    /// A timer (sleep, retry backoff or signal deadline) came due.
    TimerFired {
        /// The timer id (for a retry backoff `step-id/retry<n>`, for a deadline the wait id).
        id: String,
    },
    /// A pending timer (sleep or signal-wait deadline) was dropped by the handler
    /// (it lost a race, or its wait was satisfied first): it will not wake the run.
    TimerCancelled {
        /// The timer id.
        id: String,
    },
    /// The handler waits for a signal of this name.
    SignalAwaited {
        /// Wait id.
        id: String,
        /// Signal name.
        name: String,
        /// Deadline of a timed wait.
        deadline: Option<u64>,
    },
    /// A signal was delivered to the run (buffered until a wait consumes it).
    SignalReceived {
        /// Signal name.
        name: String,
        /// The sender's id; a second delivery with the same id is dropped.
        signal_id: String,
        /// The encoded payload.
        payload: Payload,
    },
    /// A non-deterministic value (time, uuid, random) recorded once.
    Recorded {
        /// Primitive id.
        id: String,
        /// `now`, `uuid` or `random`.
        kind: String,
        /// The encoded value.
        value: Payload,
    },
    /// A child run was started from this run.
    ChildStarted {
        /// Wait id in the parent.
        id: String,
        /// Child workflow name.
        workflow: String,
        /// Child workflow version.
        version: u32,
        /// The child's run id.
        run_id: String,
    },
    /// A child run ended.
    ChildCompleted {
        /// Wait id in the parent.
        id: String,
        /// The child's encoded output, or why it failed.
        result: Result<Payload, Failure>,
    },
    /// Someone asked for the run to stop. The handler learns it where the walk of
    /// the log reaches this event: `ctx.cancelled()` resolves and its pending waits
    /// end with a cancellation error, so it can clean up.
    CancelRequested {
        /// Why.
        reason: String,
    },
    /// The handler returned a value.
    RunCompleted {
        /// The encoded output.
        output: Payload,
    },
    /// The handler returned an error.
    RunFailed {
        /// The recorded error.
        error: Failure,
    },
    /// The run was cancelled.
    RunCancelled {
        /// Why.
        reason: String,
    },
    /// A deadline the host enforces on the run: `@run-deadline` (the run's timeout
    /// from its start options: past it the run is asked to cancel) or
    /// `@cancel-deadline` (the grace given to a cancelled run's cleanup: past it the
    /// run is cancelled hard). It is a timer of the run; `TimerFired` settles it.
    Deadline {
        /// `@run-deadline` or `@cancel-deadline`.
        id: String,
        /// Due time.
        fire_at: u64,
    },
    /// A detached child run (started with `ctx.start_child`, not waited for) was
    /// created, or could not be. Its wait id is `detached#<n>`.
    ChildDetached {
        /// Wait id in the parent.
        id: String,
        /// Why the child could not be started, if it could not.
        error: Option<Failure>,
    },
    /// The handler took the new branch of a patch (`ctx.patched(id)` answered true
    /// for the first time). An opening with no result: replay answers true again
    /// when it finds this marker at the same position.
    Patched {
        /// The patch id.
        id: String,
    },
    /// The handler published a value under a key (`ctx.publish`); readers get the
    /// latest one with `AnyRun::published`.
    Published {
        /// The key.
        key: String,
        /// The encoded value.
        value: Payload,
    },
    /// The handler continued as new (`ctx.continue_as_new`): this event ends the
    /// run's current log segment, and the next event, a `RunStarted` with the new
    /// input, begins the next one. The signals the ended segment had received but
    /// not consumed are copied into the new segment right after its `RunStarted`.
    ContinuedAsNew {
        /// How many signals were carried over into the new segment.
        carried: u32,
    },
    /// The ids of the signals the previous log segment received and consumed,
    /// right after a new segment's `RunStarted` (a run that continued as new): a
    /// signal sent again under one of them is not delivered again, as within the
    /// segment that received it. Only one segment back: a segment's own ids, not
    /// those it was handed, go to the next one. Replay passes over it.
    SignalIdsSeen {
        /// The signal ids, in the order received.
        ids: Vec<String>,
    },
}

impl Event {
    /// The variant name, used in messages and traces.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "RunStarted",
            Event::StepStarted { .. } => "StepStarted",
            Event::StepCompleted { .. } => "StepCompleted",
            Event::StepFailed { .. } => "StepFailed",
            Event::TimerScheduled { .. } => "TimerScheduled",
            Event::TimerFired { .. } => "TimerFired",
            Event::TimerCancelled { .. } => "TimerCancelled",
            Event::SignalAwaited { .. } => "SignalAwaited",
            Event::SignalReceived { .. } => "SignalReceived",
            Event::Recorded { .. } => "Recorded",
            Event::ChildStarted { .. } => "ChildStarted",
            Event::ChildCompleted { .. } => "ChildCompleted",
            Event::CancelRequested { .. } => "CancelRequested",
            Event::RunCompleted { .. } => "RunCompleted",
            Event::RunFailed { .. } => "RunFailed",
            Event::RunCancelled { .. } => "RunCancelled",
            Event::Deadline { .. } => "Deadline",
            Event::ChildDetached { .. } => "ChildDetached",
            Event::Patched { .. } => "Patched",
            Event::Published { .. } => "Published",
            Event::ContinuedAsNew { .. } => "ContinuedAsNew",
            Event::SignalIdsSeen { .. } => "SignalIdsSeen",
        }
    }

    /// Whether this event ends the run.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Event::RunCompleted { .. } | Event::RunFailed { .. } | Event::RunCancelled { .. }
        )
    }

    /// Encodes the event as MessagePack, appending to `buf`.
    ///
    /// # Errors
    /// [`StorageError::Encode`] if serialization fails (it cannot for these types,
    /// but the encoder's contract allows it).
    pub fn encode_into(&self, buf: &mut Vec<u8>) -> Result<(), StorageError> {
        rmp_serde::encode::write(buf, self).map_err(|e| StorageError::Encode(e.to_string()))
    }

    /// Encodes the event into a new buffer.
    ///
    /// # Errors
    /// See [`Event::encode_into`].
    pub fn encode(&self) -> Result<Vec<u8>, StorageError> {
        let mut buf = Vec::with_capacity(64);
        self.encode_into(&mut buf)?;
        Ok(buf)
    }

    /// Decodes one event; `run_id` and `seq` only label the error.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] naming the run and sequence number.
    pub fn decode(bytes: &[u8], run_id: &str, seq: u64) -> Result<Event, StorageError> {
        crate::Record::decode(bytes, run_id, seq).map(|r| r.event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Failure::Step` as reel wrote it before it kept every attempt.
    #[derive(Serialize)]
    enum OldFailure {
        Step { step: String, message: String },
    }

    #[test]
    fn step_failure_without_attempts_still_decodes() {
        let mut old = Vec::new();
        rmp_serde::encode::write(
            &mut old,
            &OldFailure::Step {
                step: "charge".into(),
                message: "declined".into(),
            },
        )
        .expect("encode");
        let decoded: Failure = from_msgpack(&old).expect("decode");
        assert_eq!(
            decoded,
            Failure::Step {
                step: "charge".into(),
                message: "declined".into(),
                attempts: Vec::new(),
            }
        );
    }
}
