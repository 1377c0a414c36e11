//! An in-memory [`Store`]: the same contract as the fjall backend (compare-and-set
//! appends, atomic batches, ordered reads), no durability. For tests of workflows
//! and of the layers above storage; nothing above the traits changes for it. Nothing
//! is encoded, so its scans never report corrupt records.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::listing::{ListCursor, MetaPage, RunQuery, page_of_sorted};
use crate::store::{
    Append, CommitListener, LogReader, LogSize, LogWriter, MetaReader, Result, Store, Ticket,
    TimerReader,
};
use crate::{Event, Record, RunMeta, Scan, StatusKind, StorageError, TimerEntry, check_run_id};

#[derive(Default)]
struct State {
    logs: BTreeMap<String, Vec<Event>>,
    /// When each event of `logs` was appended (ms since the epoch).
    times: BTreeMap<String, Vec<u64>>,
    runs: BTreeMap<String, RunMeta>,
    timers: BTreeSet<TimerEntry>,
    schedules: BTreeMap<String, crate::ScheduleRecord>,
    /// Writers refused since one of their appends was.
    fences: crate::WriterFences,
    closed: bool,
}

/// A [`Store`] kept in memory; lost when dropped.
#[derive(Default)]
pub struct MemStore {
    state: Mutex<State>,
    listener: Mutex<Option<Arc<dyn CommitListener>>>,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore").finish_non_exhaustive()
    }
}

impl MemStore {
    /// An empty store.
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn apply(&self, a: Append) -> Result<()> {
        a.validate()?;
        let mut st = self.state.lock().map_err(|_| StorageError::Closed)?;
        if st.closed {
            return Err(StorageError::Closed);
        }
        let len = st.logs.get(&a.run_id).map_or(0, |l| l.len() as u64);
        // Its writer's later appends assumed a refused one (`WriterFences`).
        let checked = st.fences.check(a.writer, a.expected_seq, false, || {
            Ok::<_, StorageError>(len)
        })?;
        let place = checked.map_err(|(expected, actual)| StorageError::Conflict {
            run_id: a.run_id.clone(),
            expected,
            actual,
        })?;
        if place.is_some() {
            let at = a.at.unwrap_or_else(crate::record::now_ms);
            st.times
                .entry(a.run_id.clone())
                .or_default()
                .extend(a.events.iter().map(|_| at));
            st.logs
                .entry(a.run_id.clone())
                .or_default()
                .extend(a.events);
        }
        if let Some(meta) = a.meta {
            st.runs.insert(a.run_id.clone(), meta);
        }
        for t in &a.remove_timers {
            st.timers.remove(t);
        }
        st.timers.extend(a.add_timers);
        Ok(())
    }

    fn read<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T> {
        let st = self.state.lock().map_err(|_| StorageError::Closed)?;
        if st.closed {
            return Err(StorageError::Closed);
        }
        Ok(f(&st))
    }

    /// [`MemStore::read`] for a change.
    fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> Result<T> {
        let mut st = self.state.lock().map_err(|_| StorageError::Closed)?;
        if st.closed {
            return Err(StorageError::Closed);
        }
        Ok(f(&mut st))
    }
}

impl LogWriter for MemStore {
    fn submit(&self, append: Append) -> Ticket {
        let run_id = append.run_id.clone();
        let grows = !append.events.is_empty();
        let result = self.apply(append);
        if result.is_ok() && grows {
            let listener = self.listener.lock().ok().and_then(|l| l.clone());
            if let Some(l) = listener.filter(|l| l.wants()) {
                let next = self.next_seq(&run_id).unwrap_or(0);
                l.grew(&run_id, next);
            }
        }
        Ticket::ready(result)
    }

    fn delete(
        &self,
        run_id: &str,
        expected_seq: u64,
        created_at: u64,
        remove_timers: Vec<TimerEntry>,
    ) -> Ticket {
        let result = (|| {
            check_run_id(run_id)?;
            let mut st = self.state.lock().map_err(|_| StorageError::Closed)?;
            if st.closed {
                return Err(StorageError::Closed);
            }
            let actual = st.logs.get(run_id).map_or(0, |l| l.len() as u64);
            // Not an unfinished run, nor a run created at another time.
            let same_run = st
                .runs
                .get(run_id)
                .is_some_and(|m| m.created_at == created_at && m.state.is_finished());
            if actual != expected_seq || !same_run {
                return Err(StorageError::Conflict {
                    run_id: run_id.to_owned(),
                    expected: expected_seq,
                    actual,
                });
            }
            st.logs.remove(run_id);
            st.times.remove(run_id);
            st.runs.remove(run_id);
            for t in &remove_timers {
                st.timers.remove(t);
            }
            Ok(())
        })();
        Ticket::ready(result)
    }

    fn set_commit_listener(&self, listener: Arc<dyn CommitListener>) {
        if let Ok(mut l) = self.listener.lock() {
            *l = Some(listener);
        }
    }
}

impl LogReader for MemStore {
    fn read_log(&self, run_id: &str) -> Result<Vec<Event>> {
        self.read(|st| st.logs.get(run_id).cloned().unwrap_or_default())
    }

    fn read_log_from(&self, run_id: &str, from: u64) -> Result<Vec<Event>> {
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        self.read(|st| {
            st.logs
                .get(run_id)
                .map(|l| l.get(from..).unwrap_or_default().to_vec())
                .unwrap_or_default()
        })
    }

    fn read_records(&self, run_id: &str, from: u64) -> Result<Vec<Record>> {
        let start = usize::try_from(from).unwrap_or(usize::MAX);
        self.read(|st| {
            let (Some(log), Some(times)) = (st.logs.get(run_id), st.times.get(run_id)) else {
                return Vec::new();
            };
            (from..)
                .zip(log.iter().zip(times).skip(start))
                .map(|(seq, (event, at))| Record {
                    seq,
                    at: std::time::UNIX_EPOCH + std::time::Duration::from_millis(*at),
                    event: event.clone(),
                })
                .collect()
        })
    }

    fn log_size(&self, run_id: &str, from: u64) -> Result<LogSize> {
        let events = self.read_log_from(run_id, from)?;
        let mut bytes = 0;
        for e in &events {
            bytes += e.encode()?.len() as u64;
        }
        Ok(LogSize {
            events: events.len() as u64,
            bytes,
        })
    }

    fn last_event(&self, run_id: &str) -> Result<Option<(u64, Event)>> {
        self.read(|st| {
            st.logs
                .get(run_id)
                .and_then(|l| l.last().map(|e| (l.len() as u64 - 1, e.clone())))
        })
    }

    fn next_seq(&self, run_id: &str) -> Result<u64> {
        self.read(|st| st.logs.get(run_id).map_or(0, |l| l.len() as u64))
    }
}

impl MetaReader for MemStore {
    fn get_run(&self, run_id: &str) -> Result<Option<RunMeta>> {
        self.read(|st| st.runs.get(run_id).cloned())
    }

    fn list_runs(&self) -> Result<Scan<RunMeta>> {
        self.read(|st| Scan::clean(st.runs.values().cloned().collect()))
    }

    fn unfinished_runs(&self) -> Result<Scan<RunMeta>> {
        self.read(|st| {
            Scan::clean(
                st.runs
                    .values()
                    .filter(|m| !m.state.is_finished())
                    .cloned()
                    .collect(),
            )
        })
    }

    /// Sorts every run: the in-memory store keeps no index (it is for tests).
    fn list_page(&self, query: &RunQuery) -> Result<MetaPage> {
        self.read(|st| {
            let mut rows: Vec<RunMeta> = st
                .runs
                .values()
                .filter(|m| query.is_past_cursor(&ListCursor::of(m)))
                .cloned()
                .collect();
            rows.sort_by(|a, b| query.order(&ListCursor::of(a), &ListCursor::of(b)));
            page_of_sorted(query, rows.into_iter())
        })
    }

    /// Counts by a scan: the in-memory store keeps no counters (it is for tests).
    fn count_by_status(&self) -> Result<BTreeMap<StatusKind, u64>> {
        self.read(|st| {
            let mut counts: BTreeMap<StatusKind, u64> =
                StatusKind::ALL.into_iter().map(|k| (k, 0)).collect();
            for m in st.runs.values() {
                *counts.entry(m.state.kind()).or_default() += 1;
            }
            counts
        })
    }
}

impl TimerReader for MemStore {
    fn timers(&self) -> Result<Scan<TimerEntry>> {
        self.read(|st| Scan::clean(st.timers.iter().cloned().collect()))
    }
}

impl Store for MemStore {
    fn reclaim(&self) -> Result<()> {
        Ok(())
    }

    fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.closed = true;
        }
    }
}

impl crate::ScheduleStore for MemStore {
    fn put_schedule(&self, schedule: &crate::ScheduleRecord) -> Result<()> {
        self.write(|st| {
            st.schedules.insert(schedule.id.clone(), schedule.clone());
        })
    }

    fn swap_schedule(
        &self,
        expected: Option<&crate::ScheduleRecord>,
        new: &crate::ScheduleRecord,
    ) -> Result<bool> {
        self.write(|st| {
            let swaps = st.schedules.get(&new.id) == expected;
            if swaps {
                st.schedules.insert(new.id.clone(), new.clone());
            }
            swaps
        })
    }

    fn get_schedule(&self, id: &str) -> Result<Option<crate::ScheduleRecord>> {
        self.read(|st| st.schedules.get(id).cloned())
    }

    fn delete_schedule(&self, id: &str) -> Result<()> {
        self.write(|st| {
            st.schedules.remove(id);
        })
    }

    fn list_schedules(&self) -> Result<Vec<crate::ScheduleRecord>> {
        self.read(|st| st.schedules.values().cloned().collect())
    }
}
