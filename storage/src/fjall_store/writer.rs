//! The group commit: drains queued appends into one batch, checks each append's
//! sequence number (and refuses the later appends of a writer once one of its
//! appends was refused: `WriterFences`), keeps the listing indexes and status
//! counts in step with the metadata it writes (`index`), commits with one
//! fdatasync and only then answers every caller of the batch.
//!
//! Two ways in, one [`Committer`]:
//! - the writer thread ([`writer_loop`]) drains the channel and commits what it
//!   finds as one batch: under load, hundreds of appends share one fdatasync;
//! - a lone append commits on its caller's thread ([`Committer::try_inline`]) when
//!   nothing is queued, the last batch held a single append of the same run, and
//!   the ticket of the last append committed inline is no longer held. A run
//!   stepping on its own then pays the fdatasync and nothing else, where the thread
//!   would add two cross-thread wake-ups per commit (to the writer and back: 40-60 %
//!   of a step's time on this project's machines). Under load the queue is never
//!   empty, so appends keep sharing the writer's batches. The last two conditions
//!   keep a burst submitted without waiting in between (one task starting many
//!   runs, a handler whose parallel steps all finish in one poll) from committing
//!   one append, and one fdatasync, at a time: the burst's first append commits
//!   inline, and the rest find its ticket still held (or another run's append last)
//!   and go to the writer, which batches them.
//!
//! Both hold the committer's lock while they build and commit a batch, and the
//! inline path is only taken when no request sent earlier is still uncommitted,
//! so a run's appends land in the order they were submitted either way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use fjall::PersistMode;
use foldhash::{HashMap, HashMapExt};

use super::index::ListingWriter;
use super::{Encoded, Keyspaces, MAX_BATCH, Request, SEQ_CACHE_LIMIT};
use crate::keys::{log_key_into, log_prefix, seq_of};
use crate::store::{CommitListener, Outstanding, Result};
use crate::{RunMeta, StorageError, WriterFences};
use fjall::OwnedWriteBatch;

/// Next sequence numbers of recently written runs, so the CAS check rarely reads disk.
struct SeqCache(HashMap<String, u64>);

impl SeqCache {
    fn next_seq(&mut self, ks: &Keyspaces, run_id: &str) -> Result<u64> {
        if let Some(seq) = self.0.get(run_id) {
            return Ok(*seq);
        }
        let next = match ks.log.prefix(log_prefix(run_id)).next_back() {
            Some(g) => seq_of(run_id, &g.key()?)? + 1,
            None => 0,
        };
        self.0.insert(run_id.to_owned(), next);
        Ok(next)
    }

    /// Records `run_id`'s next sequence number; its key is copied only when new
    /// (every append of a run sets it, and most find it there).
    fn set(&mut self, run_id: &str, next: u64) {
        match self.0.get_mut(run_id) {
            Some(seq) => *seq = next,
            None => {
                self.0.insert(run_id.to_owned(), next);
            }
        }
    }
}

/// Who the writer tells which logs a commit grew.
pub(super) type Listener = Arc<RwLock<Option<Arc<dyn CommitListener>>>>;

/// What a commit needs across batches, behind the committer's lock.
struct CommitState {
    /// `None` once the store is closed: the database's lock must go with it.
    ks: Option<Keyspaces>,
    cache: SeqCache,
    listing: ListingWriter,
    /// Why the store refuses writes (a failed commit, unreadable status counts).
    failed: Option<String>,
    /// Writers refused since one of their appends was.
    fences: WriterFences,
    /// Set by [`Committer::close`]: no more inline commits.
    closed: bool,
    /// The run of the last batch's last append: the run of a lone append when
    /// `last_batch` is 1 (its buffer is reused from batch to batch).
    last_run: String,
}

/// The one place batches are built and committed, shared by the writer thread and
/// callers that commit inline.
pub(super) struct Committer {
    state: Mutex<CommitState>,
    listener: Listener,
    /// Requests sent to the writer thread and not committed yet.
    queued: AtomicUsize,
    /// Appends in the last committed batch.
    last_batch: AtomicUsize,
    /// Tickets of appends committed inline that their callers still hold.
    outstanding: Arc<AtomicUsize>,
}

impl Committer {
    pub(super) fn new(ks: Keyspaces, listener: Listener) -> Committer {
        let (listing, failed) = match ListingWriter::open(&ks) {
            Ok(l) => (l, None),
            // Every append would fail the same way: answer them with the cause.
            Err(e) => (
                ListingWriter::default(),
                Some(format!("reading the status counts: {e}")),
            ),
        };
        Committer {
            state: Mutex::new(CommitState {
                ks: Some(ks),
                cache: SeqCache(HashMap::new()),
                listing,
                failed,
                fences: WriterFences::default(),
                closed: false,
                last_run: String::new(),
            }),
            listener,
            queued: AtomicUsize::new(0),
            last_batch: AtomicUsize::new(0),
            outstanding: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CommitState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a request about to be sent to the writer thread.
    pub(super) fn queue(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// A request counted by [`Committer::queue`] that never reached the thread.
    pub(super) fn unqueue(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    /// Commits `req` on this thread when it is the only write in sight: nothing
    /// queued for the writer thread, the last batch a single append of the same run,
    /// no ticket of an inline commit still held, and no batch being committed right
    /// now (see the module doc). Otherwise hands it back for the writer thread.
    pub(super) fn try_inline(&self, req: Request) -> Inline {
        if self.last_batch.load(Ordering::SeqCst) > 1
            || self.queued.load(Ordering::SeqCst) != 0
            || self.outstanding.load(Ordering::SeqCst) != 0
        {
            return Inline::Refused(req);
        }
        let Ok(mut state) = self.state.try_lock() else {
            return Inline::Refused(req);
        };
        // Checked again under the lock: a request sent before this point and not
        // committed yet must land first, so this one waits its turn in the queue.
        if state.closed
            || self.queued.load(Ordering::SeqCst) != 0
            || self.last_batch.load(Ordering::SeqCst) != 1
            || state.last_run != req.append.run_id
        {
            return Inline::Refused(req);
        }
        let outstanding = Outstanding::new(&self.outstanding);
        let mut pending = vec![req];
        self.commit(&mut state, &mut pending);
        Inline::Committed(outstanding)
    }

    /// No more inline commits; waits for one under way.
    pub(super) fn close(&self) {
        self.lock().closed = true;
    }

    /// Lets go of the database once the writer thread is done, so that closing the
    /// store releases its directory even while handles to the store live on.
    pub(super) fn release(&self) {
        self.lock().ks = None;
    }

    fn commit(&self, state: &mut CommitState, pending: &mut Vec<Request>) {
        let n = pending.len();
        if let Some(last) = pending.last() {
            state.last_run.clear();
            state.last_run.push_str(&last.append.run_id);
        }
        let CommitState {
            ks,
            cache,
            listing,
            failed,
            fences,
            ..
        } = state;
        match ks {
            Some(ks) => commit_batch(ks, cache, listing, fences, pending, failed, &self.listener),
            None => {
                for req in pending.drain(..) {
                    let _ = req.reply.send(Err(StorageError::Closed));
                }
            }
        }
        self.last_batch.store(n, Ordering::SeqCst);
    }
}

/// What [`Committer::try_inline`] did with a request.
// A value returned and matched at once, never stored: boxing the request would
// cost every append a heap allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Inline {
    /// Committed: the ticket holds this until it is dropped.
    Committed(Outstanding),
    /// Not committed here: for the writer thread.
    Refused(Request),
}

/// The writer thread: commits what the channel holds, a batch at a time, until
/// every sender is gone.
pub(super) fn writer_loop(committer: Arc<Committer>, rx: Receiver<Request>) {
    let mut pending: Vec<Request> = Vec::with_capacity(MAX_BATCH);
    while let Ok(first) = rx.recv() {
        pending.push(first);
        while pending.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => pending.push(r),
                Err(_) => break,
            }
        }
        let n = pending.len();
        let mut state = committer.lock();
        committer.commit(&mut state, &mut pending);
        committer.queued.fetch_sub(n, Ordering::SeqCst);
    }
    if let Some(ks) = &committer.lock().ks {
        let _ = ks.db.persist(PersistMode::SyncAll);
    }
}

fn commit_batch(
    ks: &Keyspaces,
    cache: &mut SeqCache,
    listing: &mut ListingWriter,
    fences: &mut WriterFences,
    pending: &mut Vec<Request>,
    failed: &mut Option<String>,
    listeners: &Listener,
) {
    // fjall refuses every write after a failed one (it cannot know what reached the
    // disk): answer with the original failure, which names the cause (disk full),
    // rather than with whatever the refusal looks like from here.
    if let Some(cause) = failed.as_ref() {
        for req in pending.drain(..) {
            let _ = req.reply.send(Err(StorageError::Io(format!(
                "the store refuses writes after an earlier write failed: {cause}"
            ))));
        }
        return;
    }
    // While a batch is being built the cache holds sequence numbers of records not on
    // disk yet, so it may only shrink between batches: clearing it or dropping a run
    // mid-batch would make the next check of that run read the stale on-disk tail and
    // accept a second writer for a sequence number already taken in this batch.
    if cache.0.len() >= SEQ_CACHE_LIMIT {
        cache.0.clear();
    }
    let mut finished_runs = Vec::new();
    // Only collected while someone follows a log. Someone who starts following
    // one after this is told after the commit (`missed`).
    let registered = listeners.read().ok().and_then(|l| l.clone());
    let listener = registered.clone().filter(|l| l.wants());
    let mut grown: Vec<(String, u64)> = Vec::new();
    let durable = pending.iter().any(|r| r.append.durable);
    // Sized up front: a batch of thousands of appends would otherwise grow (and
    // copy) its item list a dozen times. Per append: its records, its timer
    // changes, and with a state change the metadata in `runs` and `active` and up
    // to four listing entries. Not more: most appends are one record, and an
    // oversized list is a fresh allocation the kernel zeroes, batch after batch.
    let items = pending
        .iter()
        .map(|r| {
            let a = &r.append;
            a.records.len()
                + a.add_timers.len()
                + a.remove_timers.len()
                + if a.meta.is_some() { 2 } else { 0 }
                + if a.listed.is_some() { 4 } else { 0 }
        })
        .sum();
    let mut batch =
        OwnedWriteBatch::with_capacity(ks.db.clone(), items).durability(Some(if durable {
            PersistMode::SyncData
        } else {
            PersistMode::Buffer
        }));
    let mut accepted = Vec::with_capacity(pending.len());
    // One buffer for every log key of the batch (the batch copies each).
    let mut key = Vec::new();
    let mut refused = Vec::new();
    for req in in_key_order(pending) {
        let a = &req.append;
        // The sequence check; a writer one of whose appends was refused is
        // refused from then on: this one assumed it landed (`WriterFences`).
        let place = match fences.check(a.writer, a.expected_seq, false, || {
            cache.next_seq(ks, &a.run_id)
        }) {
            Ok(Ok(place)) => place,
            Ok(Err((expected, actual))) => {
                // Answered after the commit: the loser must be able to read what the
                // winner wrote in this very batch.
                refused.push((
                    req.reply,
                    StorageError::Conflict {
                        run_id: a.run_id.clone(),
                        expected,
                        actual,
                    },
                ));
                continue;
            }
            Err(e) => {
                let _ = req.reply.send(Err(e));
                continue;
            }
        };
        if let Some(created_at) = a.delete {
            match delete_run(ks, &mut batch, listing, a, created_at) {
                Ok(()) => {
                    cache.set(&a.run_id, 0);
                    if listener.is_some() {
                        // Wakes its watchers, who then find it gone.
                        grown.push((a.run_id.clone(), 0));
                    }
                    accepted.push(req.reply);
                }
                Err(e) => {
                    fences.fence(a.writer);
                    let _ = req.reply.send(Err(e));
                }
            }
            continue;
        }
        // Before anything of the append is in the batch: the old record is read
        // here, and a failed read must leave the batch without any of it.
        if let Some(listed) = &a.listed
            && let Err(e) = listing.update(ks, &mut batch, &a.run_id, listed.clone())
        {
            fences.fence(a.writer);
            let _ = req.reply.send(Err(e));
            continue;
        }
        if let Some(expected) = place {
            for (i, record) in a.records.iter().enumerate() {
                log_key_into(&mut key, &a.run_id, expected + i as u64);
                batch.insert(&ks.log, key.as_slice(), record.clone());
            }
            let next = expected + a.records.len() as u64;
            cache.set(&a.run_id, next);
            if listener.is_some() && !a.records.is_empty() {
                grown.push((a.run_id.clone(), next));
            }
        }
        if let Some((meta, finished)) = &a.meta {
            batch.insert(&ks.runs, a.run_id.as_str(), meta.clone());
            if *finished {
                batch.remove(&ks.active, a.run_id.as_str());
                finished_runs.push(a.run_id.clone());
            } else {
                batch.insert(&ks.active, a.run_id.as_str(), meta.clone());
            }
        }
        for t in &a.remove_timers {
            batch.remove(&ks.timers, t.as_slice());
        }
        for t in &a.add_timers {
            batch.insert(&ks.timers, t.as_slice(), [].as_slice());
        }
        accepted.push(req.reply);
    }
    listing.finish(ks, &mut batch);
    // fjall skips an empty batch, fdatasync included (every append refused).
    let syncs = durable && !batch.is_empty();
    let started = std::time::Instant::now();
    let result = batch.commit();
    metrics::histogram!(crate::metrics::COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::histogram!(crate::metrics::COMMIT_APPENDS).record(accepted.len() as f64);
    if syncs && result.is_ok() {
        metrics::counter!(crate::metrics::COMMIT_SYNCS).increment(1);
    }
    listing.committed(result.is_ok());
    if let Err(e) = &result {
        *failed = Some(e.to_string());
        tracing::error!(error = %e, "reel: batch commit failed; {} writers get the error", accepted.len());
        // The sequence numbers we advanced were not written: forget them.
        cache.0.clear();
    } else {
        // Finished runs take no more appends: keep the cache small. Only now that
        // their records are on disk can a later check read their tail from there.
        for run_id in &finished_runs {
            cache.0.remove(run_id);
        }
        if let Some(l) = &listener {
            for (run_id, next) in &grown {
                l.grew(run_id, *next);
            }
        } else if let Some(l) = registered.filter(|l| l.wants()) {
            // A watch taken during this batch may have read the log before the
            // commit: what grew was not collected, so it must re-read.
            l.missed();
        }
    }
    for reply in accepted {
        let _ = reply.send(
            result
                .as_ref()
                .map(|_| ())
                .map_err(|e| StorageError::Io(e.to_string())),
        );
    }
    for (reply, conflict) in refused {
        let _ = reply.send(Err(conflict));
    }
}

/// Takes the batch's appends in the order of their runs' ids, each run's appends
/// in the order they were submitted. The memtable's skiplist then takes the keys
/// in ascending order, each insert's search path next to the last one's and
/// still in the cache: in submission order (runs finishing their steps in any
/// order) every insert searched cold memory: about 5% more user CPU in the
/// throughput benchmark. The order between runs means nothing: the batch commits
/// whole. Indices are sorted, not the requests, which are large to move.
fn in_key_order(pending: &mut Vec<Request>) -> Vec<Request> {
    // The index breaks ties: a run's appends keep their order (their sequence
    // checks depend on it), with an unstable sort.
    let mut keyed: Vec<(&str, usize)> = pending
        .iter()
        .enumerate()
        .map(|(i, r)| (r.append.run_id.as_str(), i))
        .collect();
    keyed.sort_unstable();
    let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    let mut taken: Vec<Option<Request>> = pending.drain(..).map(Some).collect();
    let mut ordered = Vec::with_capacity(taken.len());
    ordered.extend(
        order
            .into_iter()
            .filter_map(|i| taken.get_mut(i).and_then(Option::take)),
    );
    ordered
}

/// Adds to `batch` the removal of everything of a run. Reads first (the log's
/// keys, the old metadata), so a failed read leaves the batch without any of it.
/// An unfinished run is never removed, nor a run created at another time: a
/// delete that checked a finished run and finds its id taken by a new one since
/// is refused as a conflict.
fn delete_run(
    ks: &Keyspaces,
    batch: &mut OwnedWriteBatch,
    listing: &mut ListingWriter,
    a: &Encoded,
    created_at: u64,
) -> Result<()> {
    let other_run = match ks.runs.get(a.run_id.as_str())? {
        Some(bytes) => {
            RunMeta::decode("runs", a.run_id.as_bytes(), &bytes)
                .map_err(StorageError::CorruptRecord)?
                .created_at
                != created_at
        }
        None => true,
    };
    if other_run || ks.active.contains_key(a.run_id.as_str())? {
        let seq = a.expected_seq.unwrap_or(0);
        return Err(StorageError::Conflict {
            run_id: a.run_id.clone(),
            expected: seq,
            actual: seq,
        });
    }
    let keys = ks
        .log
        .prefix(log_prefix(&a.run_id))
        .map(|g| g.key())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    listing.remove(ks, batch, &a.run_id)?;
    for k in keys {
        batch.remove(&ks.log, k);
    }
    batch.remove(&ks.runs, a.run_id.as_str());
    batch.remove(&ks.active, a.run_id.as_str());
    for t in &a.remove_timers {
        batch.remove(&ks.timers, t.as_slice());
    }
    Ok(())
}
