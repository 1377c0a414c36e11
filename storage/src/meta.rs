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
}

impl RunState {
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
}

impl RunMeta {
    /// Encodes the record as MessagePack.
    ///
    /// # Errors
    /// [`StorageError::Encode`] if serialization fails (it cannot for this type, but
    /// the encoder's contract allows it).
    pub fn encode(&self) -> Result<Vec<u8>, StorageError> {
        rmp_serde::to_vec(self).map_err(|e| StorageError::Encode(e.to_string()))
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
