//! The vocabulary of fault injection: which operation ([`Op`]), what happens
//! ([`Fault`]: fail, lose the answer, delay, hold behind a [`Gate`]) and the id of
//! an injected fault ([`FaultId`]).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// An operation of the [`Store`] traits that a [`Fault`] can target.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`LogWriter::submit`].
    Submit,
    /// [`LogReader::read_log`].
    ReadLog,
    /// [`LogReader::last_event`].
    LastEvent,
    /// [`LogReader::next_seq`].
    NextSeq,
    /// [`MetaReader::get_run`].
    GetRun,
    /// [`MetaReader::list_runs`].
    ListRuns,
    /// [`MetaReader::unfinished_runs`].
    UnfinishedRuns,
    /// [`TimerReader::timers`].
    Timers,
    /// [`Store::close`]: only delays and holds apply (it cannot fail).
    Close,
}

#[derive(Clone, Debug)]
pub(super) enum Action {
    Fail(String),
    LoseAnswer,
    Delay(Duration),
    Hold(Gate),
}

/// One fault to inject: which operation, for which run, how often, and what happens.
///
/// By default a fault applies to every run, to the first matching call, once.
#[must_use = "a fault does nothing until it is injected"]
#[derive(Clone, Debug)]
pub struct Fault {
    pub(super) op: Op,
    pub(super) run: Option<String>,
    pub(super) skip: u64,
    /// `None`: until healed.
    pub(super) times: Option<u64>,
    pub(super) action: Action,
}

impl Fault {
    fn new(op: Op, action: Action) -> Fault {
        Fault {
            op,
            run: None,
            skip: 0,
            times: Some(1),
            action,
        }
    }

    /// The operation fails with a retryable [`StorageError::Io`]. A failed submit
    /// never reaches the wrapped store.
    pub fn fail(op: Op) -> Fault {
        Fault::new(op, Action::Fail(format!("injected fault: {op:?} failed")))
    }

    /// An append lands in the wrapped store but its caller is told it failed (a
    /// retryable [`StorageError::Io`]). For reads it is the same as [`Fault::fail`].
    pub fn lose_answer() -> Fault {
        Fault::new(Op::Submit, Action::LoseAnswer)
    }

    /// The answer comes `by` later than the wrapped store gave it.
    pub fn delay(op: Op, by: Duration) -> Fault {
        Fault::new(op, Action::Delay(by))
    }

    /// The answer is held until the returned [`Gate`] is released (for races that
    /// need an exact order of events).
    pub fn hold(op: Op) -> (Fault, Gate) {
        let gate = Gate::default();
        (Fault::new(op, Action::Hold(gate.clone())), gate)
    }

    /// Only calls for this run match (scans and `close` never do).
    pub fn for_run(mut self, run_id: &str) -> Fault {
        self.run = Some(run_id.to_owned());
        self
    }

    /// The first `n` matching calls pass untouched.
    pub fn after(mut self, n: u64) -> Fault {
        self.skip = n;
        self
    }

    /// Applies to `n` matching calls (after those skipped by [`Fault::after`]).
    pub fn times(mut self, n: u64) -> Fault {
        self.times = Some(n);
        self
    }

    /// Applies to every matching call until [`FaultStore::heal`].
    pub fn until_healed(mut self) -> Fault {
        self.times = None;
        self
    }

    /// The message of the injected I/O error, e.g. `"No space left on device"`.
    pub fn message(mut self, text: &str) -> Fault {
        if let Action::Fail(m) = &mut self.action {
            *m = text.to_owned();
        }
        self
    }
}

/// Identifies an injected fault, to heal it alone with [`FaultStore::heal_one`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultId(pub(super) u64);

/// Holds the answers of a [`Fault::hold`] until released.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<GateInner>);

#[derive(Default)]
struct GateInner {
    /// Calls that reached the gate, and whether it is released.
    state: Mutex<(u64, bool)>,
    cv: Condvar,
    notify: Notify,
}

impl std::fmt::Debug for GateInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").finish_non_exhaustive()
    }
}

impl Gate {
    fn state(&self) -> std::sync::MutexGuard<'_, (u64, bool)> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many calls have reached the gate so far.
    pub fn arrived(&self) -> u64 {
        self.state().0
    }

    /// Lets every held answer (and every later one) through.
    pub fn release(&self) {
        self.state().1 = true;
        self.0.cv.notify_all();
        self.0.notify.notify_waiters();
    }

    /// Waits until at least one call is held at the gate (or it is released).
    pub async fn wait_arrived(&self) {
        self.wait_until(|(arrived, released)| arrived > 0 || released)
            .await;
    }

    pub(super) async fn wait_released(&self) {
        self.wait_until(|(_, released)| released).await;
    }

    async fn wait_until(&self, cond: impl Fn((u64, bool)) -> bool) {
        loop {
            let notified = self.0.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if cond(*self.state()) {
                return;
            }
            notified.await;
        }
    }

    pub(super) fn arrive(&self) {
        self.state().0 += 1;
        self.0.notify.notify_waiters();
    }

    pub(super) fn wait_released_blocking(&self) {
        let mut st = self.state();
        while !st.1 {
            st = self.0.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}
