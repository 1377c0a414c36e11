//! The fjall backend: one database, seven keyspaces, one group-commit writer thread.
//!
//! Keyspaces: `log` (run id, NUL, big-endian sequence → event), `runs` (run id →
//! [`RunMeta`]), `active` (run id → [`RunMeta`] of unfinished runs only, so recovery
//! never reads finished runs), `timers` (big-endian due time, run id, NUL, timer id →
//! empty), `listing` (the listing indexes and status counts, see `index`),
//! `schedules` (schedule id → [`ScheduleRecord`](crate::ScheduleRecord)) and `reel`
//! (format version, and the marker that the listing indexes are complete). Keyspaces
//! an older store lacks are created on open.
//!
//! # Layout
//! - this file: opening (and upgrading) the store; reads.
//! - `create`: opening fjall, and creating a new store in place so that it keeps
//!   the journal fjall preallocated for it.
//! - `writer`: the group commit: the writer thread, and lone appends committed on
//!   their caller's thread.
//! - `index`: the listing indexes and status counts, kept by the writer.
//! - `schedules`: the schedules keyspace.
//!
//! fjall's journal holds one mutex across write and fsync, so concurrent committers
//! would each pay an fsync. Instead every append goes through a channel to one
//! writer thread that drains what is queued into one batch, commits it with one
//! fdatasync and only then answers every caller of that batch.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use fjall::{Database, Keyspace, PersistMode, Readable, Slice};
use tokio::sync::oneshot;

use crate::keys::{encode_timer_key, log_end, log_key, log_prefix, seq_of};
use crate::listing::{MetaPage, RunQuery};
use crate::store::{
    Append, CommitListener, LogReader, LogSize, LogWriter, MetaReader, Result, Store, Ticket,
    TimerReader,
};
use crate::{Event, Record, RunMeta, Scan, StatusKind, StorageError, TimerEntry, decode_timer_key};

mod create;
mod index;
mod writer;

use writer::{Committer, Inline};

use index::Listed;

/// The on-disk format this build writes and reads.
///
/// `reel-log/2` added `TimerCancelled` and the rule that recorded results become
/// visible to the handler one at a time, in log order. `reel-log/3` added
/// `Deadline`, `ChildDetached`, `Patched` and `Published`, and the attempts of a
/// failed step (`Failure::Step::attempts`): an older build would report those
/// records as corrupt, so it is refused by the marker instead. `reel-log/4` added
/// `ContinuedAsNew` and log segments (`RunMeta::segment_start`). `reel-log/5`
/// stores each record with the time it was appended (`Record`); records written
/// before read back as appended at the epoch. `reel-log/6` added the paused state
/// (`RunState::Paused`, which an older build would report as a corrupt record),
/// the `listing` and `schedules` keyspaces (built or created when an older store
/// opens). `reel-log/7` added queues: the enqueued state (`RunState::Enqueued`)
/// and a run's place in its queue (`RunMeta::queue`). `reel-log/8` added
/// `SignalIdsSeen`, which an older build would report as a corrupt record.
pub const FORMAT_VERSION: &str = "reel-log/8";

/// Older formats this build opens, upgrading the marker: their records decode the
/// same way (fields added since default when absent). Runs recorded by
/// `reel-log/1` replay under the `reel-log/2` visibility rule; a concurrent handler
/// whose old log does not match it is parked with a replay divergence (never
/// misread), and sequential handlers resume as they were.
pub const UPGRADABLE_FORMATS: [&str; 7] = [
    "reel-log/1",
    "reel-log/2",
    "reel-log/3",
    "reel-log/4",
    "reel-log/5",
    "reel-log/6",
    "reel-log/7",
];

mod schedules;

const MAX_BATCH: usize = 8192;
/// Runs whose next sequence number is cached; a miss costs one reverse key lookup.
const SEQ_CACHE_LIMIT: usize = 16_384;

/// Tuning for [`FjallStore::open_with`].
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Upper bound of the unflushed journal; bounds reopen time after a crash.
    pub max_journal_bytes: u64,
    /// Block cache size.
    pub cache_bytes: u64,
    /// Size at which a keyspace's memtable is flushed to disk (the log's aside).
    pub max_memtable_bytes: u64,
    /// Size at which the log's memtable is flushed to disk. Larger than the
    /// others': the log takes most writes, and each flush of a small memtable
    /// costs a table write and, soon after, a compaction.
    pub max_log_memtable_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_journal_bytes: 64 * 1024 * 1024,
            cache_bytes: 32 * 1024 * 1024,
            max_memtable_bytes: 8 * 1024 * 1024,
            max_log_memtable_bytes: 32 * 1024 * 1024,
        }
    }
}

#[derive(Clone)]
struct Keyspaces {
    db: Database,
    log: Keyspace,
    runs: Keyspace,
    active: Keyspace,
    timers: Keyspace,
    listing: Keyspace,
    schedules: Keyspace,
}

struct Request {
    append: Encoded,
    reply: oneshot::Sender<Result<()>>,
}

struct Encoded {
    run_id: String,
    expected_seq: Option<u64>,
    /// [`Append::writer`].
    writer: Option<u64>,
    /// Encoded once into a buffer the thread keeps, then copied into values of
    /// their exact size, which the batch takes without another copy.
    records: Vec<Slice>,
    meta: Option<(Slice, bool)>,
    listed: Option<Listed>,
    /// Removes the run created at this time (ms) instead (`LogWriter::delete`).
    delete: Option<u64>,
    add_timers: Vec<Vec<u8>>,
    remove_timers: Vec<Vec<u8>>,
    durable: bool,
}

/// The fjall implementation of [`Store`].
pub struct FjallStore {
    ks: RwLock<Option<Keyspaces>>,
    /// Told by the writer which logs each commit grew.
    listener: Arc<RwLock<Option<Arc<dyn CommitListener>>>>,
    /// Builds and commits batches, for the writer thread and inline callers.
    committer: Arc<Committer>,
    tx: Mutex<Option<Sender<Request>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Held across a schedule's check and write (`schedules`).
    schedule_lock: Mutex<()>,
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore").finish_non_exhaustive()
    }
}

/// Validates a run id for use as a key prefix.
///
/// # Errors
/// [`StorageError::InvalidRunId`] for an empty id, one over 512 bytes or one with NUL.
pub fn check_run_id(run_id: &str) -> Result<()> {
    if run_id.is_empty() || run_id.len() > 512 || run_id.contains('\0') {
        return Err(StorageError::InvalidRunId(run_id.to_owned()));
    }
    Ok(())
}

/// Validates the id of a run about to be created: [`check_run_id`], and not `.`
/// or `..`, which no URL path can carry (a client resolves them as dot segments),
/// so the inspector and the CLI could not reach the run.
///
/// # Errors
/// [`StorageError::InvalidRunId`].
pub fn check_new_run_id(run_id: &str) -> Result<()> {
    check_run_id(run_id)?;
    if run_id == "." || run_id == ".." {
        return Err(StorageError::InvalidRunId(run_id.to_owned()));
    }
    Ok(())
}

fn decode_meta(keyspace: &str, run_id: &[u8], bytes: &[u8]) -> Result<RunMeta> {
    RunMeta::decode(keyspace, run_id, bytes).map_err(StorageError::CorruptRecord)
}

impl FjallStore {
    /// Opens (or creates) the store in `path` with default options.
    ///
    /// # Errors
    /// [`StorageError::Locked`] if another open store (in this process or another)
    /// holds the directory, [`StorageError::Io`] if fjall cannot open it,
    /// [`StorageError::IncompatibleFormat`] for a store written by another format.
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<FjallStore>> {
        FjallStore::open_with(path, StoreOptions::default())
    }

    /// Whether `path` holds a store (one [`FjallStore::open`] would open rather
    /// than create): for tools that must only read an existing store.
    pub fn exists(path: impl AsRef<Path>) -> bool {
        create::holds_store(path.as_ref())
    }

    /// Opens (or creates) the store in `path`.
    ///
    /// # Errors
    /// As [`FjallStore::open`].
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Arc<FjallStore>> {
        let (db, keyspaces, format) = create::open_or_create(path.as_ref(), &options)?;
        match format.get("format")? {
            Some(found) if *found == *FORMAT_VERSION.as_bytes() => {}
            Some(found) if UPGRADABLE_FORMATS.iter().any(|f| *found == *f.as_bytes()) => {
                tracing::info!(
                    from = %String::from_utf8_lossy(&found),
                    to = FORMAT_VERSION,
                    "reel: upgrading the store's format marker"
                );
                format.insert("format", FORMAT_VERSION)?;
                db.persist(PersistMode::SyncAll)?;
            }
            Some(found) => {
                return Err(StorageError::IncompatibleFormat {
                    found: String::from_utf8_lossy(&found).into_owned(),
                    expected: FORMAT_VERSION.to_owned(),
                });
            }
            None if !keyspaces.log.is_empty()? || !keyspaces.runs.is_empty()? => {
                return Err(StorageError::IncompatibleFormat {
                    found: "<no format marker>".to_owned(),
                    expected: FORMAT_VERSION.to_owned(),
                });
            }
            None => {
                format.insert("format", FORMAT_VERSION)?;
                db.persist(PersistMode::SyncAll)?;
            }
        }
        index::build_if_missing(&keyspaces, &format)?;
        let (tx, rx) = mpsc::channel();
        let listener: Arc<RwLock<Option<Arc<dyn CommitListener>>>> = Arc::default();
        let committer = Arc::new(Committer::new(keyspaces.clone(), listener.clone()));
        let writer_committer = committer.clone();
        let writer = std::thread::Builder::new()
            .name("reel-writer".into())
            .spawn(move || writer::writer_loop(writer_committer, rx))
            .map_err(|e| StorageError::Io(e.to_string()))?;
        Ok(Arc::new(FjallStore {
            ks: RwLock::new(Some(keyspaces)),
            listener,
            committer,
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            schedule_lock: Mutex::new(()),
        }))
    }

    fn keyspaces(&self) -> Result<Keyspaces> {
        self.ks
            .read()
            .map_err(|_| StorageError::Closed)?
            .clone()
            .ok_or(StorageError::Closed)
    }

    fn encode(append: &Append) -> Result<Encoded> {
        append.validate()?;
        // Every record of an append carries the time it was submitted.
        let at = append.at.unwrap_or_else(crate::record::now_ms);
        let records = append
            .events
            .iter()
            .map(|e| encoded(|buf| Record::encode_into(e, at, buf)))
            .collect::<Result<Vec<_>>>()?;
        let meta = match &append.meta {
            Some(m) => Some((encoded(|buf| m.encode_into(buf))?, m.state.is_finished())),
            None => None,
        };
        Ok(Encoded {
            delete: None,
            listed: append.meta.as_ref().map(Listed::of),
            records,
            meta,
            add_timers: append.add_timers.iter().map(encode_timer_key).collect(),
            remove_timers: append.remove_timers.iter().map(encode_timer_key).collect(),
            expected_seq: append.expected_seq,
            writer: append.writer,
            durable: append.durable,
            run_id: append.run_id.clone(),
        })
    }
}

/// A value encoded by `encode` into this thread's scratch buffer, copied into a
/// value of its exact size: one allocation, where encoding into a fresh vector
/// grows it several times and the batch then copies it once more.
fn encoded(encode: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<Slice> {
    thread_local! {
        static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| {
        // Taken, not borrowed: an encoder that encoded a value itself (none does)
        // would get a fresh buffer.
        let mut buf = scratch.take();
        buf.clear();
        let value = encode(&mut buf).map(|()| Slice::from(buf.as_slice()));
        // A rare huge value's buffer does not stay resident with the thread.
        if buf.capacity() <= 64 * 1024 {
            scratch.set(buf);
        }
        value
    })
}

impl LogWriter for FjallStore {
    fn set_commit_listener(&self, listener: Arc<dyn CommitListener>) {
        if let Ok(mut l) = self.listener.write() {
            *l = Some(listener);
        }
    }

    fn delete(
        &self,
        run_id: &str,
        expected_seq: u64,
        created_at: u64,
        remove_timers: Vec<TimerEntry>,
    ) -> Ticket {
        if let Err(e) = check_run_id(run_id) {
            return Ticket::ready(Err(e));
        }
        self.send(Encoded {
            run_id: run_id.to_owned(),
            expected_seq: Some(expected_seq),
            writer: None,
            records: Vec::new(),
            meta: None,
            listed: None,
            add_timers: Vec::new(),
            remove_timers: remove_timers.iter().map(encode_timer_key).collect(),
            durable: true,
            delete: Some(created_at),
        })
    }

    fn submit(&self, append: Append) -> Ticket {
        self.submit_ref(&append)
    }

    fn submit_ref(&self, append: &Append) -> Ticket {
        let append = match FjallStore::encode(append) {
            Ok(a) => a,
            Err(e) => return Ticket::ready(Err(e)),
        };
        self.send(append)
    }
}

impl FjallStore {
    fn send(&self, append: Encoded) -> Ticket {
        let (reply, rx) = oneshot::channel();
        // A lone append commits here and its ticket is answered on return.
        let req = match self.committer.try_inline(Request { append, reply }) {
            Inline::Committed(outstanding) => return Ticket::pending(rx).outstanding(outstanding),
            Inline::Refused(req) => req,
        };
        let guard = match self.tx.lock() {
            Ok(g) => g,
            Err(_) => return Ticket::ready(Err(StorageError::Closed)),
        };
        let Some(tx) = guard.as_ref() else {
            return Ticket::ready(Err(StorageError::Closed));
        };
        self.committer.queue();
        if tx.send(req).is_err() {
            self.committer.unqueue();
            return Ticket::ready(Err(StorageError::Closed));
        }
        Ticket::pending(rx)
    }
}

impl LogReader for FjallStore {
    fn read_log(&self, run_id: &str) -> Result<Vec<Event>> {
        self.read_log_from(run_id, 0)
    }

    fn read_log_from(&self, run_id: &str, from: u64) -> Result<Vec<Event>> {
        Ok(self
            .read_records(run_id, from)?
            .into_iter()
            .map(|r| r.event)
            .collect())
    }

    fn read_records(&self, run_id: &str, from: u64) -> Result<Vec<Record>> {
        let ks = self.keyspaces()?;
        let mut events = Vec::new();
        // Read in a snapshot: a keyspace's own range sees a batch committing
        // meanwhile (a delete, an append of several records) key by key, as a gap
        // that would read as a damaged log.
        let snapshot = ks.db.snapshot();
        let records = snapshot.range(&ks.log, log_key(run_id, from)..log_end(run_id));
        for (next, guard) in (from..).zip(records) {
            let (key, value) = guard.into_inner()?;
            let seq = seq_of(run_id, &key)?;
            if seq != next {
                return Err(StorageError::Corrupt {
                    run_id: run_id.to_owned(),
                    seq: next,
                    reason: format!("missing record (next present is {seq})"),
                });
            }
            events.push(Record::decode(&value, run_id, seq)?);
        }
        Ok(events)
    }

    fn log_size(&self, run_id: &str, from: u64) -> Result<LogSize> {
        let ks = self.keyspaces()?;
        let mut size = LogSize::default();
        // In a snapshot, as `read_records`: a committing batch whole or not at all.
        let snapshot = ks.db.snapshot();
        for guard in snapshot.range(&ks.log, log_key(run_id, from)..log_end(run_id)) {
            let (key, value) = guard.into_inner()?;
            size.events += 1;
            size.bytes += (key.len() + value.len()) as u64;
        }
        Ok(size)
    }

    fn last_event(&self, run_id: &str) -> Result<Option<(u64, Event)>> {
        let ks = self.keyspaces()?;
        // In a snapshot, as `read_records`: a committing batch whole or not at all.
        let snapshot = ks.db.snapshot();
        let Some(guard) = snapshot.prefix(&ks.log, log_prefix(run_id)).next_back() else {
            return Ok(None);
        };
        let (key, value) = guard.into_inner()?;
        let seq = seq_of(run_id, &key)?;
        Ok(Some((seq, Event::decode(&value, run_id, seq)?)))
    }

    fn next_seq(&self, run_id: &str) -> Result<u64> {
        let ks = self.keyspaces()?;
        match ks.log.prefix(log_prefix(run_id)).next_back() {
            Some(g) => Ok(seq_of(run_id, &g.key()?)? + 1),
            None => Ok(0),
        }
    }
}

impl MetaReader for FjallStore {
    fn get_run(&self, run_id: &str) -> Result<Option<RunMeta>> {
        let ks = self.keyspaces()?;
        // In a snapshot, as the log's reads: a batch under way is seen whole or
        // not at all, so a run's metadata is never newer than the log read after it.
        ks.db
            .snapshot()
            .get(&ks.runs, run_id)?
            .map(|v| decode_meta("runs", run_id.as_bytes(), &v))
            .transpose()
    }

    fn list_runs(&self) -> Result<Scan<RunMeta>> {
        let ks = self.keyspaces()?;
        scan_meta("runs", &ks.runs)
    }

    fn unfinished_runs(&self) -> Result<Scan<RunMeta>> {
        let ks = self.keyspaces()?;
        scan_meta("active", &ks.active)
    }

    fn list_page(&self, query: &RunQuery) -> Result<MetaPage> {
        index::page(&self.keyspaces()?, query)
    }

    fn count_by_status(&self) -> Result<BTreeMap<StatusKind, u64>> {
        index::counts(&self.keyspaces()?)
    }
}

/// Decodes every record of a metadata keyspace; one that does not decode is reported,
/// not fatal (an I/O error still is: the scan cannot say what it missed).
fn scan_meta(name: &str, ks: &Keyspace) -> Result<Scan<RunMeta>> {
    let mut scan = Scan::default();
    for g in ks.iter() {
        let (k, v) = g.into_inner()?;
        match RunMeta::decode(name, &k, &v) {
            Ok(meta) => scan.items.push(meta),
            Err(bad) => {
                tracing::error!(record = %bad, "reel: skipping a corrupt metadata record");
                scan.corrupt.push(bad);
            }
        }
    }
    Ok(scan)
}

impl TimerReader for FjallStore {
    fn timers(&self) -> Result<Scan<TimerEntry>> {
        let ks = self.keyspaces()?;
        let mut scan = Scan::default();
        for g in ks.timers.iter() {
            match decode_timer_key(&g.key()?) {
                Ok(t) => scan.items.push(t),
                Err(bad) => {
                    tracing::error!(record = %bad, "reel: skipping a corrupt timer key");
                    scan.corrupt.push(bad);
                }
            }
        }
        Ok(scan)
    }
}

impl Store for FjallStore {
    fn reclaim(&self) -> Result<()> {
        let ks = self.keyspaces()?;
        // Deleted records leave tombstones; a flush and a major compaction drop
        // them together with what they cover.
        for keyspace in [&ks.log, &ks.runs, &ks.active, &ks.timers, &ks.listing] {
            keyspace.rotate_memtable_and_wait()?;
            keyspace.major_compact()?;
        }
        ks.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn close(&self) {
        self.committer.close();
        // Dropping the sender ends the writer loop once the queue is drained.
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Ok(mut writer) = self.writer.lock()
            && let Some(handle) = writer.take()
        {
            let _ = handle.join();
        }
        self.committer.release();
        if let Ok(mut ks) = self.ks.write()
            && let Some(ks) = ks.take()
        {
            let _ = ks.db.persist(PersistMode::SyncAll);
        }
    }
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        self.close();
    }
}
