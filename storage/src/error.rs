//! The storage error type.

use crate::Failure;

/// Everything that can go wrong below the replay engine.
///
/// [`StorageError::is_retryable`] tells whether trying again can help; a corrupt or
/// incompatible store is fatal and named as such.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Compare-and-set refused: another writer appended first (a stale writer).
    #[error(
        "append to run `{run_id}` refused: expected next sequence {expected}, log is at {actual}"
    )]
    Conflict {
        /// The run.
        run_id: String,
        /// The sequence number the writer expected next.
        expected: u64,
        /// The log's actual next sequence number.
        actual: u64,
    },
    /// A log record could not be decoded, or one is missing: the store is damaged.
    #[error("corrupt record in keyspace `log` of run `{run_id}` at sequence {seq}: {reason}")]
    Corrupt {
        /// The run.
        run_id: String,
        /// The record's sequence number.
        seq: u64,
        /// The decoder's message.
        reason: String,
    },
    /// A metadata, active-set or timer-index record could not be decoded.
    #[error("{0}")]
    CorruptRecord(crate::CorruptRecord),
    /// The store was written by an incompatible reel format.
    #[error("store format `{found}` is not supported by this reel (expects `{expected}`)")]
    IncompatibleFormat {
        /// What the store says.
        found: String,
        /// What this build reads.
        expected: String,
    },
    /// A run id that cannot be stored (empty, too long or containing NUL), or
    /// given to a new run (`.` or `..`).
    #[error("invalid run id {0:?}: must be 1..=512 bytes without NUL, and not `.` or `..`")]
    InvalidRunId(String),
    /// Serialization failed.
    #[error("encode error: {0}")]
    Encode(String),
    /// The store's directory is held by another live store: another process, or a
    /// store in this process that has not been closed. Retrying helps once that one
    /// closes.
    #[error(
        "the store at `{}` is in use by another host (another process, or a Host in \
         this process that has not shut down)",
        path.display()
    )]
    Locked {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// The underlying store failed (I/O, disk full).
    #[error("storage I/O error: {0}")]
    Io(String),
    /// The store was closed.
    #[error("store is closed")]
    Closed,
    /// Several hosts share the store and this one does not hold the lease of the
    /// run's partition (any more): another host owns the run now.
    #[error("run `{run_id}` is owned by another host now (partition {partition})")]
    NotOwner {
        /// The run.
        run_id: String,
        /// Its partition.
        partition: u16,
    },
}

impl StorageError {
    /// Whether retrying the same operation later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StorageError::Conflict { .. }
                | StorageError::Io(_)
                | StorageError::Locked { .. }
                | StorageError::NotOwner { .. }
        )
    }

    /// The failure a run is parked with when reading it meets this error, if the
    /// error is a damaged record of that run.
    pub fn corruption(&self) -> Option<Failure> {
        match self {
            StorageError::Corrupt {
                run_id,
                seq,
                reason,
            } => Some(Failure::Corrupt {
                keyspace: "log".to_owned(),
                run_id: run_id.clone(),
                seq: Some(*seq),
                key: crate::keys::log_key(run_id, *seq)
                    .escape_ascii()
                    .to_string(),
                reason: reason.clone(),
            }),
            StorageError::CorruptRecord(r) => r.failure(),
            _ => None,
        }
    }
}

impl From<fjall::Error> for StorageError {
    fn from(e: fjall::Error) -> Self {
        StorageError::Io(e.to_string())
    }
}
