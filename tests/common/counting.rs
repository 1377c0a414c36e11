//! A [`Store`] that counts the operations of each run and delegates every one to a
//! real store: tests of how much work a wake-up costs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use reel::{Event, Store};
use reel_storage::listing::{MetaPage, RunQuery};
use reel_storage::{
    Append, CommitListener, LogReader, LogWriter, MetaReader, Result, RunMeta, Scan, StatusKind,
    Ticket, TimerEntry, TimerReader,
};

/// A counted operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Every append.
    Submit,
    /// An append creating a run (`RunStarted` at sequence 0): a start attempt.
    Start,
    /// `read_log`: one per activation of the run, plus readers of its log.
    ReadLog,
    /// `get_run`.
    GetRun,
    /// `last_event`.
    LastEvent,
}

/// Counts operations by kind and run, and delegates them to the store it wraps.
pub struct CountingStore {
    inner: Arc<dyn Store>,
    counts: Mutex<HashMap<(Op, String), u64>>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> Arc<CountingStore> {
        Arc::new(CountingStore {
            inner,
            counts: Mutex::new(HashMap::new()),
        })
    }

    /// How many operations `op` were made for the runs `runs` accepts.
    pub fn count(&self, op: Op, runs: impl Fn(&str) -> bool) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((o, run), _)| *o == op && runs(run))
            .map(|(_, n)| n)
            .sum()
    }

    /// The due-time index as stored now.
    pub fn timers(&self) -> Result<Vec<TimerEntry>> {
        Ok(self.inner.timers()?.items)
    }

    fn note(&self, op: Op, run_id: &str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((op, run_id.to_owned()))
            .or_default() += 1;
    }
}

impl LogWriter for CountingStore {
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
        self.note(Op::Submit, &append.run_id);
        if append.expected_seq == Some(0)
            && matches!(append.events.first(), Some(Event::RunStarted { .. }))
        {
            self.note(Op::Start, &append.run_id);
        }
        self.inner.submit(append)
    }
}

impl LogReader for CountingStore {
    fn read_log(&self, run_id: &str) -> Result<Vec<Event>> {
        self.note(Op::ReadLog, run_id);
        self.inner.read_log(run_id)
    }

    fn read_log_from(&self, run_id: &str, from: u64) -> Result<Vec<Event>> {
        self.note(Op::ReadLog, run_id);
        self.inner.read_log_from(run_id, from)
    }

    fn read_records(&self, run_id: &str, from: u64) -> Result<Vec<reel::Record>> {
        self.note(Op::ReadLog, run_id);
        self.inner.read_records(run_id, from)
    }

    fn log_size(&self, run_id: &str, from: u64) -> Result<reel::LogSize> {
        self.inner.log_size(run_id, from)
    }

    fn last_event(&self, run_id: &str) -> Result<Option<(u64, Event)>> {
        self.note(Op::LastEvent, run_id);
        self.inner.last_event(run_id)
    }

    fn next_seq(&self, run_id: &str) -> Result<u64> {
        self.inner.next_seq(run_id)
    }
}

impl MetaReader for CountingStore {
    fn get_run(&self, run_id: &str) -> Result<Option<RunMeta>> {
        self.note(Op::GetRun, run_id);
        self.inner.get_run(run_id)
    }

    fn list_runs(&self) -> Result<Scan<RunMeta>> {
        self.inner.list_runs()
    }

    fn unfinished_runs(&self) -> Result<Scan<RunMeta>> {
        self.inner.unfinished_runs()
    }

    fn list_page(&self, query: &RunQuery) -> Result<MetaPage> {
        self.inner.list_page(query)
    }

    fn count_by_status(&self) -> Result<BTreeMap<StatusKind, u64>> {
        self.inner.count_by_status()
    }
}

impl TimerReader for CountingStore {
    fn timers(&self) -> Result<Scan<TimerEntry>> {
        self.inner.timers()
    }
}

impl Store for CountingStore {
    fn reclaim(&self) -> Result<()> {
        self.inner.reclaim()
    }

    fn close(&self) {
        self.inner.close();
    }
}

impl reel_storage::ScheduleStore for CountingStore {
    fn put_schedule(&self, schedule: &reel_storage::ScheduleRecord) -> Result<()> {
        self.inner.put_schedule(schedule)
    }

    fn swap_schedule(
        &self,
        expected: Option<&reel_storage::ScheduleRecord>,
        new: &reel_storage::ScheduleRecord,
    ) -> Result<bool> {
        self.inner.swap_schedule(expected, new)
    }

    fn get_schedule(&self, id: &str) -> Result<Option<reel_storage::ScheduleRecord>> {
        self.inner.get_schedule(id)
    }

    fn delete_schedule(&self, id: &str) -> Result<()> {
        self.inner.delete_schedule(id)
    }

    fn list_schedules(&self) -> Result<Vec<reel_storage::ScheduleRecord>> {
        self.inner.list_schedules()
    }
}
