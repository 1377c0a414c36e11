//! [`ScheduleRecord`] and [`ScheduleStore`]: durable schedules (runs started on a
//! cron expression or a fixed interval), stored beside the runs.
//!
//! The store keeps a schedule as one record under its id; the facade (`reel`) owns
//! what the spec means (it is opaque bytes here) and decides when to fire. A
//! backend only needs a key-value map of schedule ids with durable writes.

use serde::{Deserialize, Serialize};

use crate::store::Result;
use crate::{Payload, StorageError};

/// One schedule as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// The schedule's id; its runs are named `<id>/<fire time in ms>`.
    pub id: String,
    /// The workflow each firing starts (its newest version registered then).
    pub workflow: String,
    /// The version registered when the schedule was created or last updated: a
    /// record of that moment, not what firings start.
    pub version: u32,
    /// The input each firing's run gets.
    pub input: Payload,
    /// The spec (when, overlap, catch-up, jitter) as the facade encodes it.
    #[serde(with = "serde_bytes")]
    pub spec: Vec<u8>,
    /// Paused schedules do not fire.
    pub paused: bool,
    /// The next fire time not yet handled (ms since the epoch, before jitter).
    pub next_fire: u64,
    /// The run of the last firing started, if any (what the overlap policy looks at).
    pub last_run: Option<String>,
    /// A firing held back by the overlap policy `BufferOne` (its fire time in ms),
    /// started once `last_run` ends.
    pub buffered: Option<u64>,
}

impl ScheduleRecord {
    /// The record's bytes.
    ///
    /// # Errors
    /// [`StorageError::Encode`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec(self).map_err(|e| StorageError::Encode(e.to_string()))
    }

    /// Reads a record back.
    ///
    /// # Errors
    /// [`StorageError::CorruptRecord`] in keyspace `schedules`, keyed by the
    /// schedule's id, when the bytes do not decode.
    pub fn decode(id: &str, bytes: &[u8]) -> Result<ScheduleRecord> {
        rmp_serde::from_slice(bytes).map_err(|e| {
            StorageError::CorruptRecord(crate::CorruptRecord {
                keyspace: "schedules".to_owned(),
                run_id: None,
                seq: None,
                key: id.as_bytes().to_vec(),
                reason: format!("schedule `{id}` does not decode: {e}"),
            })
        })
    }

    /// Decodes the records of a listing, leaving out (and logging) those that do
    /// not decode: one damaged schedule must not hide or stop the others.
    pub fn decode_listed<'a>(
        records: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Vec<ScheduleRecord> {
        records
            .into_iter()
            .filter_map(|(id, bytes)| match ScheduleRecord::decode(id, bytes) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::error!(schedule = id, error = %e, "reel: unreadable schedule left out");
                    None
                }
            })
            .collect()
    }
}

/// Durable schedules. Writes are durable (fsynced) when they return. Calls block
/// on disk I/O: call them off the async workers.
pub trait ScheduleStore: Send + Sync {
    /// Stores `schedule` under its id, replacing any record there.
    ///
    /// # Errors
    /// I/O, [`StorageError::Closed`].
    fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<()>;

    /// Stores `new` only if the schedule stored under its id is still `expected`
    /// (`None`: only if there is none), atomically, as one check for every host
    /// sharing the store. `Ok(false)` when the stored schedule is something else:
    /// another host or caller changed, created or deleted it since it was read.
    ///
    /// # Errors
    /// I/O, [`StorageError::Closed`](crate::StorageError::Closed), or a stored
    /// record that does not decode.
    fn swap_schedule(
        &self,
        expected: Option<&ScheduleRecord>,
        new: &ScheduleRecord,
    ) -> Result<bool>;

    /// One schedule.
    ///
    /// # Errors
    /// I/O, or a record that does not decode.
    fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>>;

    /// Removes a schedule (nothing for an unknown id).
    ///
    /// # Errors
    /// I/O, [`StorageError::Closed`].
    fn delete_schedule(&self, id: &str) -> Result<()>;

    /// Every schedule, ordered by id. A record that does not decode is left out
    /// (and logged, [`ScheduleRecord::decode_listed`]): it harms only its own
    /// schedule, which [`ScheduleStore::get_schedule`] reports and
    /// [`ScheduleStore::delete_schedule`] removes.
    ///
    /// # Errors
    /// I/O, [`StorageError::Closed`].
    fn list_schedules(&self) -> Result<Vec<ScheduleRecord>>;
}
