//! Operating runs: [`AnyRun::pause`], [`AnyRun::resume`], [`AnyRun::retry`] and
//! [`Host::fork`]. Each refuses an unknown run ([`Error::UnknownRun`]) or a run in
//! the wrong state ([`Error::InvalidState`], naming the run and its state) and then
//! changes nothing.

use crate::{AnyRun, Error, Host, Result};

/// The reason recorded for a pause ([`RunState::Paused`](crate::RunState)).
const PAUSED_BY_OPERATOR: &str = "paused by an operator";

impl AnyRun {
    /// Pauses the run: it executes nothing until [`AnyRun::resume`]. A step body
    /// already running finishes and its result is recorded (once), then the
    /// handler stops where it is; no new result reaches it. Signals, timers coming
    /// due and child results are recorded as usual and reach the handler, in log
    /// order, when the run is resumed. The pause is durable: a host opening the
    /// store does not run a paused run's handler (its timers that came due are
    /// recorded, and applied on resume). The status reads
    /// [`RunStatus::Paused`](crate::RunStatus::Paused).
    ///
    /// Pausing a paused run does nothing. A paused run that is cancelled (or
    /// terminated, or whose timeout passes) ends cancelled at once: it cannot run
    /// cleanup, as for a parked run.
    ///
    /// # Errors
    /// [`Error::InvalidState`] for a finished or parked run (retry a parked run
    /// with [`AnyRun::retry`]) and for a run asked to cancel (it is ending: its
    /// cleanup goes on; [`AnyRun::terminate`] ends it at once),
    /// [`Error::UnknownRun`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn pause(&self) -> Result<()> {
        Ok(self.core()?.pause(&self.run_id, PAUSED_BY_OPERATOR).await?)
    }

    /// Resumes a paused run: it becomes running, its handler replays from the top
    /// and goes on, seeing what arrived while it was paused in the order it was
    /// recorded.
    ///
    /// # Errors
    /// [`Error::InvalidState`] for a run that is not paused, [`Error::UnknownRun`],
    /// [`Error::Storage`], [`Error::Shutdown`].
    pub async fn resume(&self) -> Result<()> {
        Ok(self.core()?.resume(&self.run_id).await?)
    }

    /// Activates a parked run (replay divergence, crash loop, version no longer
    /// registered, input that no longer decodes) again now, with the code this
    /// host registered, as a host opening the store would; returns once it is
    /// activated (its status reads running). If the cause persists, it parks
    /// again with the same error.
    ///
    /// # Errors
    /// [`Error::InvalidState`] for a run that is not parked, [`Error::UnknownRun`],
    /// [`Error::Storage`], [`Error::Shutdown`].
    pub async fn retry(&self) -> Result<()> {
        Ok(self.core()?.retry(&self.run_id).await?)
    }
}

impl Host {
    /// Creates run `new_run_id` from a prefix of run `run_id`'s current log
    /// segment and starts it: re-run a failed run from the step that failed, after
    /// fixing the bug. The original run is not touched.
    ///
    /// The fork's log is the events of the current segment with sequence numbers
    /// (as in [`AnyRun::records`]) **below** `at_seq`: the event at `at_seq` and
    /// everything after it are left out. To re-run a step, pass the sequence number
    /// of its first `StepStarted`. The fork replays that prefix strictly (a handler
    /// that no longer matches it parks) and then goes on live with the registered
    /// code of the segment's workflow and version. It carries the signals received
    /// before the cut (consumed or buffered as in the original), the timers pending
    /// at the cut (armed for the fork, due when they were due, the run's own
    /// timeout included), and the children that ended before the cut (their results
    /// replay; they are not started again). It has no parent, and its steps get
    /// their own idempotency keys (they name the run). A fork of a run started on
    /// a queue is enqueued on that queue (same priority, no de-duplication key)
    /// and starts when the queue admits it, so the queue's limits hold.
    ///
    /// The cut must be at a primitive boundary: after the segment's `RunStarted`
    /// (earlier segments cannot be forked), at most at the end of the log (the
    /// position of its `RunCompleted`/`RunFailed`/`RunCancelled`), not between the
    /// attempts of a step, not after a cancel request, and not after the start of
    /// a child that has not ended before the cut (a fork does not adopt the
    /// original's children).
    ///
    /// # Errors
    /// [`Error::InvalidCut`] for a cut that is not allowed (naming why),
    /// [`Error::UnknownRun`] for `run_id`, [`Error::RunExists`] when `new_run_id`
    /// is taken, [`Error::UnknownWorkflow`] / [`Error::VersionMismatch`] when the
    /// segment's workflow version is not registered, [`Error::UnknownQueue`] when
    /// the original's queue is not configured on this host, [`Error::Storage`] (also for
    /// an invalid `new_run_id`), [`Error::Shutdown`]. Nothing is written then.
    pub async fn fork(&self, run_id: &str, at_seq: u64, new_run_id: &str) -> Result<AnyRun> {
        self.core()
            .fork(run_id, at_seq, new_run_id)
            .await
            .map_err(Error::from)?;
        Ok(self.run(new_run_id))
    }
}
