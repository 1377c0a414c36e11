//! Queues admitted by the store: what a backend several hosts share adds so that a
//! queue's limits hold across all of them.
//!
//! A host alone keeps its queues in memory (`reel-actors`' `queues` module): the
//! runs it waits for and runs are all the queue's runs. Hosts sharing one store
//! each own some runs, so a limit counted on each host would hold per host. A
//! backend that implements [`Admission`] (handed out by
//! [`Store::admission`](crate::Store::admission)) counts in the store instead: the
//! slots held by admitted, unfinished runs, the admissions inside the rate window,
//! the de-duplication keys held by unfinished runs, and the order numbers of new
//! runs. Each host still chooses which of its own waiting runs to offer, in
//! (priority, order); the store decides how many of them are admitted.

use crate::Result;

/// A queue's limits, as the store enforces them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLimit {
    /// Admitted and unfinished runs of the queue at once; `None`: any number.
    pub concurrency: Option<u32>,
    /// At most `.0` admissions within any window of `.1` ms; `None`: any pace.
    pub rate: Option<(u32, u64)>,
}

/// What [`Admission::reserve`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// The run's order number on its queue (from a counter all hosts share).
    Order(u64),
    /// Another unfinished run of the queue holds the de-duplication key.
    HeldBy(String),
}

/// What [`Admission::acquire`] granted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    /// The candidates admitted (a prefix of them, in the order offered).
    pub admitted: Vec<String>,
    /// When the rate window has room again (ms since the epoch, on the clock the
    /// caller passed), if it held candidates back.
    pub retry_at: Option<u64>,
}

/// Admission to queues counted in the store, for hosts that share it. Every call
/// blocks (call it off the async workers).
pub trait Admission: Send + Sync {
    /// Checks `dedup_key` against the unfinished runs of `queue` and gives a new
    /// run's order number. The run's creation is the final check: a backend
    /// refuses (with [`StorageError::Conflict`](crate::StorageError::Conflict))
    /// to create an unfinished run whose key another unfinished run of the queue
    /// holds.
    ///
    /// # Errors
    /// I/O.
    fn reserve(&self, queue: &str, run_id: &str, dedup_key: Option<&str>) -> Result<Reservation>;

    /// The unfinished run of `queue` that holds `key`, if any.
    ///
    /// # Errors
    /// I/O.
    fn key_holder(&self, queue: &str, key: &str) -> Result<Option<String>>;

    /// Admits, atomically with every other host's admissions to `queue`, as many
    /// of `candidates` (in the order given) as `limit` allows at `now_ms`: each
    /// takes a slot, held until [`Admission::release`] or until the run is found
    /// finished or gone. A candidate that already holds a slot (granted before, its
    /// admission not yet recorded) is granted again without taking another.
    ///
    /// # Errors
    /// I/O; nothing is granted then.
    fn acquire(
        &self,
        queue: &str,
        limit: QueueLimit,
        now_ms: u64,
        candidates: &[String],
    ) -> Result<Grant>;

    /// Gives back the slot of `run_id` (it ended, or its admission was not
    /// recorded) and tells the other hosts that `queue` has room.
    ///
    /// # Errors
    /// I/O (the slot is reclaimed later if the run has ended).
    fn release(&self, queue: &str, run_id: &str) -> Result<()>;
}
