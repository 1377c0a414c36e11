//! Fault injection, for tests: [`FaultStore`] wraps any [`Store`] and fails, delays,
//! holds or reorders the answers of chosen operations, and checks afterwards that no
//! acknowledged append was lost.
//!
//! What it guarantees, so that a test that fails over it points at the layer above:
//! - An injected failure of [`Op::Submit`] happens *before* the append reaches the
//!   wrapped store: nothing of it lands, as with a refused batch.
//!   [`Fault::lose_answer`] is the other case: the append lands and the caller is told
//!   it failed (an I/O error after the write, a lost reply).
//! - Delayed, held and reordered answers are released only after the wrapped store
//!   has answered. Appends still reach the wrapped store in submission order, so a
//!   success still means the append, and every append of the same run submitted
//!   before it, landed; only *when* (and in which order) callers learn it changes.
//! - Reads run against the wrapped store first; a delay or hold then postpones the
//!   answer, so the caller gets a snapshot that may be stale by the time it arrives
//!   (the race a slow read opens in real life). Reads block: a hold or delay of a read
//!   blocks the calling thread, which is the blocking pool in reel.
//!
//! Delayed, held, lost and reordered answers of appends are delivered by a tokio task
//! (on a thread of its own when no runtime is running).
//!
//! Layout: this file is the [`FaultStore`] itself; `fault` the faults ([`Op`],
//! [`Fault`], [`Gate`], [`FaultId`]); `schedules` its pass-through schedule store.
//!
//! # Examples
//! ```
//! use std::sync::Arc;
//! use reel_storage::testing::{Fault, FaultStore, Op};
//! use reel_storage::{Append, Event, LogWriter, MemStore, Payload};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let store = FaultStore::new(Arc::new(MemStore::new()));
//! store.inject(Fault::fail(Op::Submit).for_run("a"));
//! let append = |seq| Append {
//!     run_id: "a".into(),
//!     expected_seq: Some(seq),
//!     events: vec![Event::RunCompleted { output: Payload::default() }],
//!     ..Append::default()
//! };
//! assert!(store.submit(append(0)).await.is_err()); // failed once, nothing landed
//! assert!(store.submit(append(0)).await.is_ok());
//! assert_eq!(store.injected(), 1);
//! assert_eq!(store.check_acknowledged(), Ok(1));
//! # }
//! ```

mod fault;
mod schedules;

use fault::Action;
pub use fault::{Fault, FaultId, Gate, Op};

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::listing::{MetaPage, RunQuery};
use crate::store::{
    Append, CommitListener, LogReader, LogSize, LogWriter, MetaReader, Result, Store, Ticket,
    TimerReader,
};
use crate::{Event, Record, RunMeta, Scan, StatusKind, StorageError, TimerEntry};

struct Reorder {
    window: usize,
    hold: Duration,
    held: Vec<(oneshot::Sender<Result<()>>, Result<()>)>,
}

/// What an acknowledged append wrote, to check later that it is still there.
struct Acked {
    run_id: String,
    first_seq: u64,
    events: Vec<Event>,
}

#[derive(Default)]
struct Shared {
    faults: Mutex<Vec<(FaultId, Fault)>>,
    next_id: AtomicU64,
    injected: AtomicU64,
    calls: Mutex<HashMap<Op, u64>>,
    reorder: Mutex<Option<Reorder>>,
    acked: Mutex<Vec<Acked>>,
}

/// A [`Store`] that wraps another and injects [`Fault`]s. For tests: it records every
/// acknowledged append so that [`FaultStore::check_acknowledged`] can prove none was
/// lost.
pub struct FaultStore {
    inner: Arc<dyn Store>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultStore")
            .field("injected", &self.injected())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FaultStore {
    /// Wraps `inner`; no fault is injected until [`FaultStore::inject`].
    pub fn new(inner: Arc<dyn Store>) -> Arc<FaultStore> {
        Arc::new(FaultStore {
            inner,
            shared: Arc::default(),
        })
    }

    /// Adds a fault. Faults are matched in the order they were injected; a call gets
    /// at most one.
    pub fn inject(&self, fault: Fault) -> FaultId {
        let id = FaultId(self.shared.next_id.fetch_add(1, Ordering::Relaxed));
        lock(&self.shared.faults).push((id, fault));
        id
    }

    /// Removes every fault (held answers stay held until their gate is released).
    pub fn heal(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Removes one fault.
    pub fn heal_one(&self, id: FaultId) {
        lock(&self.shared.faults).retain(|(i, _)| *i != id);
    }

    /// From now on, answers of appends are collected until `window` of them are
    /// waiting (or `hold` has passed since one was collected) and then delivered in
    /// reverse order. `window` 0 or 1 turns reordering off.
    pub fn reorder_answers(&self, window: usize, hold: Duration) {
        *lock(&self.shared.reorder) = (window > 1).then(|| Reorder {
            window,
            hold,
            held: Vec::new(),
        });
    }

    /// How many faults took effect so far (a lost answer counts once the append it
    /// belongs to has landed).
    pub fn injected(&self) -> u64 {
        self.shared.injected.load(Ordering::Relaxed)
    }

    /// How many calls of `op` reached this store.
    pub fn calls(&self, op: Op) -> u64 {
        lock(&self.shared.calls).get(&op).copied().unwrap_or(0)
    }

    /// Checks that every append whose success was reported is still in the wrapped
    /// store, event for event, and returns how many events were checked.
    ///
    /// # Errors
    /// The first acknowledged event that is missing or different, or a read error
    /// (the wrapped store is closed once a host shut down: then check a reopened
    /// store with [`FaultStore::check_acknowledged_in`]).
    pub fn check_acknowledged(&self) -> std::result::Result<usize, String> {
        self.check_acknowledged_in(&*self.inner)
    }

    /// [`FaultStore::check_acknowledged`] against another store, typically the same
    /// directory opened again after a shutdown or a crash.
    ///
    /// # Errors
    /// As [`FaultStore::check_acknowledged`].
    pub fn check_acknowledged_in(
        &self,
        store: &dyn LogReader,
    ) -> std::result::Result<usize, String> {
        let acked = lock(&self.shared.acked);
        let mut logs: HashMap<&str, Vec<Event>> = HashMap::new();
        let mut checked = 0;
        for a in acked.iter() {
            if !logs.contains_key(a.run_id.as_str()) {
                let log = store
                    .read_log(&a.run_id)
                    .map_err(|e| format!("reading run `{}`: {e}", a.run_id))?;
                logs.insert(&a.run_id, log);
            }
            let log = &logs[a.run_id.as_str()];
            for (i, event) in a.events.iter().enumerate() {
                let seq = a.first_seq + i as u64;
                let found = usize::try_from(seq).ok().and_then(|s| log.get(s));
                if found != Some(event) {
                    return Err(format!(
                        "acknowledged event {seq} of run `{}` is lost: wrote {event:?}, found {found:?}",
                        a.run_id
                    ));
                }
                checked += 1;
            }
        }
        Ok(checked)
    }

    /// The action for this call, if a fault matches; consumes one use of it.
    fn take(&self, op: Op, run: Option<&str>) -> Option<Action> {
        *lock(&self.shared.calls).entry(op).or_default() += 1;
        let mut faults = lock(&self.shared.faults);
        let mut found = None;
        for (i, (_, f)) in faults.iter_mut().enumerate() {
            if f.op != op || (f.run.is_some() && f.run.as_deref() != run) {
                continue;
            }
            if f.skip > 0 {
                f.skip -= 1;
                continue;
            }
            if let Some(t) = f.times.as_mut() {
                *t -= 1;
            }
            found = Some((i, f.action.clone(), f.times == Some(0)));
            break;
        }
        let (i, action, used_up) = found?;
        if used_up {
            drop(faults.remove(i));
        }
        Some(action)
    }

    fn note_injected(shared: &Shared) {
        shared.injected.fetch_add(1, Ordering::Relaxed);
    }

    fn read<T>(
        &self,
        op: Op,
        run: Option<&str>,
        f: impl FnOnce(&dyn Store) -> Result<T>,
    ) -> Result<T> {
        let action = self.take(op, run);
        if let Some(Action::Fail(m)) = &action {
            FaultStore::note_injected(&self.shared);
            return Err(StorageError::Io(m.clone()));
        }
        let result = f(&*self.inner);
        match action {
            Some(Action::LoseAnswer) => {
                FaultStore::note_injected(&self.shared);
                Err(StorageError::Io(format!(
                    "injected fault: {op:?} answer lost"
                )))
            }
            Some(Action::Delay(d)) => {
                FaultStore::note_injected(&self.shared);
                std::thread::sleep(d);
                result
            }
            Some(Action::Hold(gate)) => {
                FaultStore::note_injected(&self.shared);
                gate.arrive();
                gate.wait_released_blocking();
                result
            }
            _ => result,
        }
    }

    /// Hands `result` to the caller, through the reorder buffer when it is on.
    fn answer(shared: &Arc<Shared>, tx: oneshot::Sender<Result<()>>, result: Result<()>) {
        let mut reorder = lock(&shared.reorder);
        let Some(r) = reorder.as_mut() else {
            let _ = tx.send(result);
            return;
        };
        r.held.push((tx, result));
        if r.held.len() >= r.window {
            let held = std::mem::take(&mut r.held);
            drop(reorder);
            FaultStore::release_reversed(shared, held);
            return;
        }
        let hold = r.hold;
        drop(reorder);
        let shared = shared.clone();
        spawn(async move {
            tokio::time::sleep(hold).await;
            let held = lock(&shared.reorder)
                .as_mut()
                .map(|r| std::mem::take(&mut r.held))
                .unwrap_or_default();
            FaultStore::release_reversed(&shared, held);
        });
    }

    fn release_reversed(shared: &Shared, held: Vec<(oneshot::Sender<Result<()>>, Result<()>)>) {
        if held.len() > 1 {
            FaultStore::note_injected(shared);
        }
        for (tx, result) in held.into_iter().rev() {
            let _ = tx.send(result);
        }
    }
}

/// Runs `fut` on the current tokio runtime, or on a thread of its own without one.
fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(fut);
        }
        Err(_) => {
            std::thread::spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt.block_on(fut),
                    Err(e) => tracing::error!(error = %e, "FaultStore: no runtime for an answer"),
                }
            });
        }
    }
}

impl LogWriter for FaultStore {
    fn set_commit_listener(&self, listener: Arc<dyn CommitListener>) {
        self.inner.set_commit_listener(listener);
    }

    fn delete(
        &self,
        run_id: &str,
        expected_seq: u64,
        created_at: u64,
        remove_timers: Vec<TimerEntry>,
    ) -> Ticket {
        self.inner
            .delete(run_id, expected_seq, created_at, remove_timers)
    }

    fn submit(&self, append: Append) -> Ticket {
        let action = self.take(Op::Submit, Some(&append.run_id));
        if let Some(Action::Fail(m)) = &action {
            FaultStore::note_injected(&self.shared);
            return Ticket::ready(Err(StorageError::Io(m.clone())));
        }
        let acked = append.expected_seq.map(|first_seq| Acked {
            run_id: append.run_id.clone(),
            first_seq,
            events: append.events.clone(),
        });
        let inner = self.inner.submit(append);
        let shared = self.shared.clone();
        let (tx, rx) = oneshot::channel();
        spawn(async move {
            let mut result = inner.await;
            match action {
                Some(Action::LoseAnswer) if result.is_ok() => {
                    FaultStore::note_injected(&shared);
                    result = Err(StorageError::Io(
                        "injected fault: the append landed but its answer was lost".into(),
                    ));
                }
                Some(Action::Delay(d)) => {
                    FaultStore::note_injected(&shared);
                    tokio::time::sleep(d).await;
                }
                Some(Action::Hold(gate)) => {
                    FaultStore::note_injected(&shared);
                    gate.arrive();
                    gate.wait_released().await;
                }
                _ => {}
            }
            if result.is_ok()
                && let Some(a) = acked
            {
                lock(&shared.acked).push(a);
            }
            FaultStore::answer(&shared, tx, result);
        });
        Ticket::pending(rx)
    }
}

impl LogReader for FaultStore {
    fn read_log(&self, run_id: &str) -> Result<Vec<Event>> {
        self.read(Op::ReadLog, Some(run_id), |s| s.read_log(run_id))
    }

    fn read_log_from(&self, run_id: &str, from: u64) -> Result<Vec<Event>> {
        self.read(Op::ReadLog, Some(run_id), |s| s.read_log_from(run_id, from))
    }

    fn read_records(&self, run_id: &str, from: u64) -> Result<Vec<Record>> {
        self.read(Op::ReadLog, Some(run_id), |s| s.read_records(run_id, from))
    }

    fn log_size(&self, run_id: &str, from: u64) -> Result<LogSize> {
        self.read(Op::ReadLog, Some(run_id), |s| s.log_size(run_id, from))
    }

    fn last_event(&self, run_id: &str) -> Result<Option<(u64, Event)>> {
        self.read(Op::LastEvent, Some(run_id), |s| s.last_event(run_id))
    }

    fn next_seq(&self, run_id: &str) -> Result<u64> {
        self.read(Op::NextSeq, Some(run_id), |s| s.next_seq(run_id))
    }
}

impl MetaReader for FaultStore {
    fn get_run(&self, run_id: &str) -> Result<Option<RunMeta>> {
        self.read(Op::GetRun, Some(run_id), |s| s.get_run(run_id))
    }

    fn list_runs(&self) -> Result<Scan<RunMeta>> {
        self.read(Op::ListRuns, None, |s| s.list_runs())
    }

    fn unfinished_runs(&self) -> Result<Scan<RunMeta>> {
        self.read(Op::UnfinishedRuns, None, |s| s.unfinished_runs())
    }

    fn list_page(&self, query: &RunQuery) -> Result<MetaPage> {
        self.read(Op::ListRuns, None, |s| s.list_page(query))
    }

    fn count_by_status(&self) -> Result<BTreeMap<StatusKind, u64>> {
        self.read(Op::ListRuns, None, |s| s.count_by_status())
    }
}

impl TimerReader for FaultStore {
    fn timers(&self) -> Result<Scan<TimerEntry>> {
        self.read(Op::Timers, None, |s| s.timers())
    }
}

impl Store for FaultStore {
    fn reclaim(&self) -> Result<()> {
        self.inner.reclaim()
    }

    /// The wrapped store's: a host sharing it stays a member of its cluster (the
    /// faults apply to the store's reads and writes, not to leases and mail).
    fn cluster(&self) -> Option<&dyn crate::Cluster> {
        self.inner.cluster()
    }

    /// The wrapped store's.
    fn admission(&self) -> Option<&dyn crate::Admission> {
        self.inner.admission()
    }

    fn close(&self) {
        let action = self.take(Op::Close, None);
        self.inner.close();
        match action {
            Some(Action::Delay(d)) => {
                FaultStore::note_injected(&self.shared);
                std::thread::sleep(d);
            }
            Some(Action::Hold(gate)) => {
                FaultStore::note_injected(&self.shared);
                gate.arrive();
                gate.wait_released_blocking();
            }
            _ => {}
        }
    }
}
