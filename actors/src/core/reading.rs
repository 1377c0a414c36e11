//! Reading a run's log: its events and records (also while it runs), its size,
//! its last event, and watches told when it grows.

use reel_storage::{Event, LogSize, Record};

use super::Core;
use crate::blocking::blocking;
use crate::error::ActorError;
use crate::log_watch::LogWatch;

impl Core {
    /// A run's durable log, readable while the run runs.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`], storage errors (a corrupt record names its run and
    /// sequence).
    pub async fn events(&self, run_id: &str) -> Result<Vec<Event>, ActorError> {
        Ok(self
            .records(run_id)
            .await?
            .into_iter()
            .map(|r| r.event)
            .collect())
    }

    /// A watch on `run_id`'s log: [`LogWatch::changed`] returns each time records
    /// land. Take it before reading what is there, so nothing lands unseen between.
    ///
    /// # Errors
    /// [`ActorError::Shutdown`].
    pub fn watch_log(&self, run_id: &str) -> Result<LogWatch, ActorError> {
        self.check_open()?;
        Ok(self.log_watchers.watch(run_id))
    }

    /// A run's records from sequence number `from` on (none for an unknown run).
    ///
    /// # Errors
    /// Storage errors (a corrupt record names its run and sequence number).
    pub async fn records_from(&self, run_id: &str, from: u64) -> Result<Vec<Record>, ActorError> {
        let store = self.store.clone();
        let id = run_id.to_owned();
        Ok(blocking(move || store.read_records(&id, from)).await?)
    }

    /// A run's durable log with each record's sequence number and the time it was
    /// appended, readable while the run runs.
    ///
    /// # Errors
    /// As [`Core::events`].
    pub async fn records(&self, run_id: &str) -> Result<Vec<Record>, ActorError> {
        self.known(run_id).await?;
        self.known_records(run_id, 0).await
    }

    /// The records from `from` on (a segment's start) of a run just found to
    /// exist. Every segment holds its `RunStarted` from its first write on, so
    /// none means the run was deleted since it was found: [`ActorError::UnknownRun`].
    pub(super) async fn known_records(
        &self,
        run_id: &str,
        from: u64,
    ) -> Result<Vec<Record>, ActorError> {
        let records = self.records_from(run_id, from).await?;
        if records.is_empty() {
            return Err(ActorError::UnknownRun(run_id.to_owned()));
        }
        Ok(records)
    }

    /// How many events and bytes a run's log holds from sequence number `from` on.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn log_size(&self, run_id: &str, from: u64) -> Result<LogSize, ActorError> {
        let store = self.store.clone();
        let id = run_id.to_owned();
        Ok(blocking(move || store.log_size(&id, from)).await?)
    }

    /// The last event of a run's log.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn last_event(&self, run_id: &str) -> Result<Option<Event>, ActorError> {
        // A point read, inline: a memtable or cached-block lookup costs less than a
        // hop to the blocking pool and back. Logs and scans go to the pool.
        Ok(self.store.last_event(run_id)?.map(|(_, e)| e))
    }
}
