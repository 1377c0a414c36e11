//! The narrow traits everything above storage is written against.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::listing::{MetaPage, RunQuery};
use crate::{Event, Record, RunMeta, Scan, StatusKind, StorageError, TimerEntry, check_run_id};

/// Result alias of this crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// One atomic write: events for one run plus the metadata and timer-index changes
/// that go with them. All of it lands in one batch, or none of it does.
#[derive(Clone, Debug, Default)]
pub struct Append {
    /// The run whose log is appended to.
    pub run_id: String,
    /// Compare-and-set: the sequence number the first event must get. `None` only for
    /// writes without events (metadata or timer changes alone).
    pub expected_seq: Option<u64>,
    /// Events, in order; they get `expected_seq`, `expected_seq + 1`, ...
    pub events: Vec<Event>,
    /// New metadata for the run, if it changes.
    pub meta: Option<RunMeta>,
    /// Timer-index entries to add.
    pub add_timers: Vec<TimerEntry>,
    /// Timer-index entries to remove.
    pub remove_timers: Vec<TimerEntry>,
    /// Whether the caller needs the write fsynced before it is answered. Non-durable
    /// writes still reach the OS before the answer (they survive a process kill) and
    /// become durable with the next durable write, which is ordered after them.
    pub durable: bool,
    /// Mail for the run's owner, posted in the same transaction, when several hosts
    /// share the store and the writer does not own the run (a run created on
    /// another host than its owner: the owner learns of it with its first write,
    /// or not at all). A store one host owns ignores it.
    pub mail: Option<crate::Mail>,
    /// Mail for other runs' owners (run id, mail), posted in the same
    /// transaction when several hosts share the store: what a run's end or
    /// cancel request owes other runs (its parent, its children), so a host that
    /// dies right after the write loses none of it. A store one host owns
    /// ignores them (its own recovery and the runs' own re-checks cover a crash).
    pub letters: Vec<(String, crate::Mail)>,
    /// The writer this append comes from, when its appends build on each other (a
    /// run actor's journal submits the next before the last has landed, with
    /// sequence numbers that assume it lands). Once a backend refuses one of the
    /// writer's appends, it refuses each later one ([`StorageError::Conflict`]),
    /// whatever its sequence number: see [`WriterFences`](crate::WriterFences).
    /// `None` for a write that stands alone. Ids are unique within a process.
    pub writer: Option<u64>,
    /// When the events were appended (ms since the epoch), stamped on their records;
    /// `None` stamps the system clock's time of submission. A host stamps its
    /// [`Clock`](crate::Clock)'s time, so a test clock's virtual times show in logs.
    pub at: Option<u64>,
}

impl Append {
    /// Checks what every backend refuses before writing anything.
    ///
    /// # Errors
    /// [`StorageError::InvalidRunId`] for the run or a timer entry (a timer key is
    /// due time ++ run id ++ NUL ++ timer id: a run id with a NUL would read back as
    /// another run's timer); [`StorageError::Encode`] for events without an expected
    /// sequence number or for metadata of another run.
    pub fn validate(&self) -> Result<()> {
        check_run_id(&self.run_id)?;
        if let Some(meta) = &self.meta
            && meta.run_id != self.run_id
        {
            // It would be filed under this run's key and read back as corrupt.
            return Err(StorageError::Encode(format!(
                "metadata of run `{}` in an append to run `{}`",
                meta.run_id, self.run_id
            )));
        }
        for t in self.add_timers.iter().chain(&self.remove_timers) {
            check_run_id(&t.run_id)?;
            // A timer id is part of an index key, which the store bounds.
            if t.timer_id.len() > MAX_TIMER_ID_BYTES {
                return Err(StorageError::Encode(format!(
                    "timer id of {} bytes in run `{}`: at most {MAX_TIMER_ID_BYTES}",
                    t.timer_id.len(),
                    t.run_id
                )));
            }
        }
        for (run_id, _) in &self.letters {
            check_run_id(run_id)?;
        }
        if !self.events.is_empty() && self.expected_seq.is_none() {
            return Err(StorageError::Encode(
                "an append with events needs an expected sequence".into(),
            ));
        }
        Ok(())
    }
}

/// The longest timer id an append may carry (a timer id is part of the timer
/// index's keys, which the store bounds; a step's retry timers take its id).
pub const MAX_TIMER_ID_BYTES: usize = 32 * 1024;

/// The answer to a submitted [`Append`]: resolves once the write is done (and
/// fsynced, for a durable one).
#[must_use = "a ticket tells whether the write landed"]
#[derive(Debug)]
pub struct Ticket {
    inner: TicketInner,
    /// Held only to be dropped with the ticket.
    _outstanding: Option<Outstanding>,
}

#[derive(Debug)]
enum TicketInner {
    Pending(oneshot::Receiver<Result<()>>),
    Ready(Option<Result<()>>),
}

/// Counts a ticket as outstanding until it is dropped (a backend's own bookkeeping:
/// the fjall writer commits a lone append on its caller's thread only while no such
/// ticket is still held, see `fjall_store::writer`).
#[derive(Debug)]
pub(crate) struct Outstanding(Arc<std::sync::atomic::AtomicUsize>);

impl Outstanding {
    pub(crate) fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Outstanding {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Outstanding(count.clone())
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Ticket {
    /// A ticket with its answer known up front.
    pub fn ready(result: Result<()>) -> Ticket {
        Ticket {
            inner: TicketInner::Ready(Some(result)),
            _outstanding: None,
        }
    }

    /// A ticket answered through a channel; a dropped sender reads as [`StorageError::Closed`].
    pub fn pending(rx: oneshot::Receiver<Result<()>>) -> Ticket {
        Ticket {
            inner: TicketInner::Pending(rx),
            _outstanding: None,
        }
    }

    /// The same ticket, counted as outstanding until dropped.
    pub(crate) fn outstanding(self, counted: Outstanding) -> Ticket {
        Ticket {
            inner: self.inner,
            _outstanding: Some(counted),
        }
    }
}

impl Future for Ticket {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().inner {
            TicketInner::Pending(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(StorageError::Closed))),
            TicketInner::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(StorageError::Closed))),
        }
    }
}

/// The size of (part of) a run's log, as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogSize {
    /// Number of events.
    pub events: u64,
    /// Bytes of their records (keys and encoded values).
    pub bytes: u64,
}

/// Told which run logs grew, once the records are readable: what lets a reader
/// follow a log live (`watch`) without polling.
pub trait CommitListener: Send + Sync {
    /// Whether anyone listens now; a backend skips collecting what grew when not.
    fn wants(&self) -> bool;

    /// `run_id`'s log now ends before `next_seq`: its records up to there are
    /// committed and readable. Called from the backend's writer: must not block.
    fn grew(&self, run_id: &str, next_seq: u64);

    /// Someone began listening while a commit was under way that the backend
    /// collected nothing for (`wants` said no before it): any log listened to now
    /// may have grown in it. A backend that asks `wants` before a commit asks it
    /// again after the commit and calls this when the answer turned to yes, so a
    /// listener that read the log before the commit landed still hears of it.
    /// Called from the backend's writer: must not block. The default does
    /// nothing.
    fn missed(&self) {}
}

/// Appends to run logs.
pub trait LogWriter: Send + Sync {
    /// Queues `append`; it is ordered after every append submitted before it.
    /// Never blocks: the answer comes through the [`Ticket`].
    fn submit(&self, append: Append) -> Ticket;

    /// [`submit`](LogWriter::submit) that leaves `append` with the caller, who
    /// keeps its events (a run's journal keeps them in memory for its execution).
    /// A backend that encodes on the caller's thread takes nothing from it; the
    /// default clones it for [`submit`](LogWriter::submit).
    fn submit_ref(&self, append: &Append) -> Ticket {
        self.submit(append.clone())
    }

    /// Sets who is told, after each commit, which logs grew (replacing any earlier
    /// listener). Every append with events that lands must be reported, after its
    /// records are readable.
    fn set_commit_listener(&self, listener: Arc<dyn CommitListener>);

    /// Removes a run entirely, in one atomic write: every record of its log (every
    /// segment), its metadata, its listing index entries and count, and the timer
    /// entries named in `remove_timers`. Compare-and-set like an append: refused
    /// with [`StorageError::Conflict`] unless the log's next sequence number is
    /// `expected_seq` (the log has not moved since the caller checked the run), and
    /// refused the same way when the run is unfinished, or when the run under the
    /// id is not the one created at `created_at` (ms, [`RunMeta::created_at`](crate::RunMeta)):
    /// its id was taken by a new run since the caller checked a finished one,
    /// which may even have ended with a log as long. The space comes back as the
    /// backend compacts ([`Store::reclaim`]).
    fn delete(
        &self,
        run_id: &str,
        expected_seq: u64,
        created_at: u64,
        remove_timers: Vec<TimerEntry>,
    ) -> Ticket;
}

/// Reads run logs. Calls block on disk I/O: call them off the async workers.
pub trait LogReader: Send + Sync {
    /// The whole log of one run, in order (empty for an unknown run).
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] naming the first record that does not decode, or a
    /// gap in the sequence.
    fn read_log(&self, run_id: &str) -> Result<Vec<Event>>;

    /// The log of one run from sequence number `from` on, in order: the current
    /// segment of a run that continued as new starts at
    /// [`RunMeta::segment_start`](crate::RunMeta::segment_start).
    ///
    /// # Errors
    /// As [`LogReader::read_log`].
    fn read_log_from(&self, run_id: &str, from: u64) -> Result<Vec<Event>>;

    /// [`LogReader::read_log_from`] with each event's sequence number and the time
    /// it was appended.
    ///
    /// # Errors
    /// As [`LogReader::read_log`].
    fn read_records(&self, run_id: &str, from: u64) -> Result<Vec<Record>>;

    /// How many events, and how many stored bytes (keys and values), the run's log
    /// holds from sequence number `from` on. Reads no event into memory beyond
    /// its record.
    ///
    /// # Errors
    /// I/O.
    fn log_size(&self, run_id: &str, from: u64) -> Result<LogSize>;

    /// The last event of a run and its sequence number.
    ///
    /// # Errors
    /// As [`LogReader::read_log`].
    fn last_event(&self, run_id: &str) -> Result<Option<(u64, Event)>>;

    /// The sequence number the run's next event gets (0 for an unknown run). Reads
    /// keys only, so it answers for a run whose records do not decode: a
    /// compare-and-set on it (an [`Append`] with `expected_seq` and no events) is how
    /// a metadata change is made conditional on the log not having moved.
    ///
    /// # Errors
    /// I/O, or [`StorageError::Corrupt`] for a malformed key.
    fn next_seq(&self, run_id: &str) -> Result<u64>;
}

/// Reads run metadata.
pub trait MetaReader: Send + Sync {
    /// One run's metadata.
    ///
    /// # Errors
    /// I/O, or [`StorageError::CorruptRecord`] when the record does not decode.
    fn get_run(&self, run_id: &str) -> Result<Option<RunMeta>>;

    /// Every run's metadata, ordered by run id. A record that does not decode is
    /// reported in [`Scan::corrupt`] (keyspace `runs`), not an error.
    ///
    /// # Errors
    /// I/O.
    fn list_runs(&self) -> Result<Scan<RunMeta>>;

    /// The runs that have not finished, without touching finished ones or any log. A
    /// record that does not decode is reported in [`Scan::corrupt`] (keyspace
    /// `active`), not an error.
    ///
    /// # Errors
    /// I/O.
    fn unfinished_runs(&self) -> Result<Scan<RunMeta>>;

    /// One page of runs: those passing the query's filters, ordered by creation
    /// time then run id (newest or oldest first), after the query's cursor. Reads
    /// no log. A backend with indexes examines at most the page plus
    /// [`SCAN_BUDGET`](crate::listing::SCAN_BUDGET) index entries: a selective
    /// filter can leave a page short, with a `next` cursor to go on from; `next`
    /// is `None` only when nothing is left. A record that does not decode is
    /// reported in [`MetaPage::corrupt`], not an error.
    ///
    /// # Errors
    /// I/O.
    fn list_page(&self, query: &RunQuery) -> Result<MetaPage>;

    /// How many runs are in each state (every state present, zeros included),
    /// without a scan: the backend keeps the counts as it writes metadata.
    ///
    /// # Errors
    /// I/O.
    fn count_by_status(&self) -> Result<BTreeMap<StatusKind, u64>>;
}

/// Reads the due-time index.
pub trait TimerReader: Send + Sync {
    /// Every pending timer, in due-time order. A malformed key is reported in
    /// [`Scan::corrupt`] (keyspace `timers`, with its run when the key names one),
    /// not an error.
    ///
    /// # Errors
    /// I/O.
    fn timers(&self) -> Result<Scan<TimerEntry>>;
}

/// A complete backend: what the actors layer needs.
pub trait Store:
    LogWriter + LogReader + MetaReader + TimerReader + crate::ScheduleStore + 'static
{
    /// Stops accepting writes, waits for queued ones and releases the store (its
    /// directory can be opened again afterwards). Idempotent.
    fn close(&self);

    /// Gives the space of deleted runs back to the file system now, as far as the
    /// backend can (fjall: flushes and compacts every keyspace, which rewrites
    /// them: its cost grows with the store). Blocks.
    ///
    /// # Errors
    /// I/O.
    fn reclaim(&self) -> Result<()>;

    /// The store's [`Cluster`](crate::Cluster) when several hosts share it; `None`
    /// (the default) for a store one host owns entirely.
    fn cluster(&self) -> Option<&dyn crate::Cluster> {
        None
    }

    /// The store's [`Admission`](crate::Admission) when queues are admitted by the
    /// store (hosts sharing it); `None` (the default) when the host admits alone,
    /// in memory.
    fn admission(&self) -> Option<&dyn crate::Admission> {
        None
    }

    /// Whether the store's [`StorageError::Io`](crate::StorageError::Io) failures
    /// may pass on their own: a database server that can be unreachable for a
    /// while. A run that meets one then waits for the store and resumes, rather
    /// than counting a crash; `false` (the default) for a store whose write
    /// failures last (a full disk), where a run that keeps failing is parked.
    fn outages_pass(&self) -> bool {
        false
    }
}
