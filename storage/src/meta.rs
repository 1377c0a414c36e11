//! Run metadata and timer index entries.

use serde::{Deserialize, Serialize};

use crate::{CorruptRecord, Failure, StorageError};

/// Where a run stands, as kept in the metadata keyspace.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunState {
    /// Started or woken and not yet suspended: recovery re-activates it.
    Running,
    /// Waiting for a timer, signal or child; nothing to do until woken.
    Suspended {
        /// Human-readable description of the waits.
        waiting_on: String,
        /// Whether one of the waits is a child run (recovery re-activates those to
        /// re-subscribe to their children).
        awaits_child: bool,
    },
    /// The handler returned a value.
    Completed,
    /// The handler returned an error.
    Failed {
        /// The recorded error.
        error: Failure,
    },
    /// The run was cancelled.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// The run cannot make progress with the registered code (divergence, missing
    /// version, crash loop). It is retried when a host opens the store again.
    Parked {
        /// Why.
        error: Failure,
    },
    /// Paused by an operator: the handler is not run; wake-ups are recorded and
    /// applied when the run is resumed (it then becomes [`RunState::Running`]).
    /// Recovery does not activate a paused run.
    Paused {
        /// Why, as the operator gave it.
        reason: String,
    },
    /// Started on a queue ([`RunMeta::queue`]) and waiting for the queue to admit
    /// it: the handler has not run. Wake-ups are recorded; admission makes it
    /// [`RunState::Running`]. Recovery does not activate it; the queue does.
    Enqueued,
}

/// A run state without its data: what listings filter on and counts group by.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StatusKind {
    /// [`RunState::Running`].
    Running,
    /// [`RunState::Suspended`].
    Suspended,
    /// [`RunState::Completed`].
    Completed,
    /// [`RunState::Failed`].
    Failed,
    /// [`RunState::Cancelled`].
    Cancelled,
    /// [`RunState::Parked`].
    Parked,
    /// Paused by an operator: executes nothing until resumed.
    Paused,
    /// [`RunState::Enqueued`]: waiting for its queue to admit it.
    Enqueued,
}

impl StatusKind {
    /// Every kind, in declaration order.
    pub const ALL: [StatusKind; 8] = [
        StatusKind::Running,
        StatusKind::Suspended,
        StatusKind::Completed,
        StatusKind::Failed,
        StatusKind::Cancelled,
        StatusKind::Parked,
        StatusKind::Paused,
        StatusKind::Enqueued,
    ];

    /// The lower-case name (`"running"`, `"suspended"`, ...), as tools print it.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusKind::Running => "running",
            StatusKind::Suspended => "suspended",
            StatusKind::Completed => "completed",
            StatusKind::Failed => "failed",
            StatusKind::Cancelled => "cancelled",
            StatusKind::Parked => "parked",
            StatusKind::Paused => "paused",
            StatusKind::Enqueued => "enqueued",
        }
    }
}

impl std::fmt::Display for StatusKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for StatusKind {
    type Err = String;

    fn from_str(s: &str) -> Result<StatusKind, String> {
        StatusKind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown status `{s}` (one of: running, suspended, completed, failed, cancelled, parked, paused, enqueued)"))
    }
}

impl RunState {
    /// The state without its data.
    pub fn kind(&self) -> StatusKind {
        match self {
            RunState::Running => StatusKind::Running,
            RunState::Suspended { .. } => StatusKind::Suspended,
            RunState::Completed => StatusKind::Completed,
            RunState::Failed { .. } => StatusKind::Failed,
            RunState::Cancelled { .. } => StatusKind::Cancelled,
            RunState::Parked { .. } => StatusKind::Parked,
            RunState::Paused { .. } => StatusKind::Paused,
            RunState::Enqueued => StatusKind::Enqueued,
        }
    }

    /// Whether the run has ended for good.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Failed { .. } | RunState::Cancelled { .. }
        )
    }
}

/// A child run's link to the parent wait that consumes its result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent's run id.
    pub run_id: String,
    /// The wait id in the parent's log.
    pub wait_id: String,
}

/// One run's metadata record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The run id.
    pub run_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version the run is bound to.
    pub version: u32,
    /// Current state.
    pub state: RunState,
    /// Creation time, Unix milliseconds.
    pub created_at: u64,
    /// Last change, Unix milliseconds.
    pub updated_at: u64,
    /// Set when the run was started as a child of another run.
    pub parent: Option<ParentLink>,
    /// Sequence number of the `RunStarted` that begins the run's current log
    /// segment: 0 until the run continues as new.
    #[serde(default)]
    pub segment_start: u64,
    /// How many times the run has continued as new (its current segment's number).
    #[serde(default)]
    pub segment: u32,
    /// The queue the run was started on, if any: it stays set after admission, so
    /// the queue counts the run against its limit until it ends.
    #[serde(default)]
    pub queue: Option<QueueEntry>,
}

/// A queued run's place in its queue ([`RunMeta::queue`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// The queue's name.
    pub name: String,
    /// Admission priority: lower values are admitted first.
    pub priority: i32,
    /// Position in the queue among runs of the same priority (assigned at enqueue,
    /// increasing), so admission keeps the order of `start` across restarts.
    pub order: u64,
    /// While a run with this key is enqueued or running on the queue, another
    /// start with the same key is refused.
    pub dedup_key: Option<String>,
}

impl RunMeta {
    /// Encodes the record as MessagePack.
    ///
    /// # Errors
    /// [`StorageError::Encode`] if serialization fails (it cannot for this type, but
    /// the encoder's contract allows it).
    pub fn encode(&self) -> Result<Vec<u8>, StorageError> {
        let mut buf = Vec::with_capacity(128);
        self.encode_into(&mut buf)?;
        Ok(buf)
    }

    /// Encodes the record as MessagePack, appending to `buf`.
    ///
    /// # Errors
    /// See [`RunMeta::encode`].
    pub fn encode_into(&self, buf: &mut Vec<u8>) -> Result<(), StorageError> {
        rmp_serde::encode::write(buf, self).map_err(|e| StorageError::Encode(e.to_string()))
    }

    /// Decodes a record stored in `keyspace` (`runs` or `active`) under `key`, which
    /// must be the run id the record names.
    ///
    /// # Errors
    /// A [`CorruptRecord`] naming the keyspace, the run (when the key is a readable
    /// run id) and what is wrong: bytes that do not decode, or a record filed under
    /// another run's key.
    pub fn decode(keyspace: &str, key: &[u8], bytes: &[u8]) -> Result<RunMeta, CorruptRecord> {
        let corrupt = |reason: String| CorruptRecord {
            keyspace: keyspace.to_owned(),
            run_id: std::str::from_utf8(key)
                .ok()
                .filter(|k| crate::check_run_id(k).is_ok())
                .map(str::to_owned),
            seq: None,
            key: key.to_vec(),
            reason,
        };
        let meta: RunMeta =
            crate::event::from_msgpack(bytes).map_err(|e| corrupt(format!("run metadata: {e}")))?;
        if meta.run_id.as_bytes() != key {
            return Err(corrupt(format!(
                "record of run `{}` filed under another key",
                meta.run_id
            )));
        }
        Ok(meta)
    }
}

/// One entry of the due-time index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerEntry {
    /// Due time, Unix milliseconds (first, so entries sort by due time).
    pub fire_at: u64,
    /// The run the timer belongs to.
    pub run_id: String,
    /// The timer id within the run.
    pub timer_id: String,
}
