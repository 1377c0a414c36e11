//! The outcomes an execution can report: stopped (divergence, parked), the
//! handler's return, continue-as-new, a suspension, and whether a paused
//! execution has wound down.

use std::future::Future;

use reel_actors::{Journal, Outcome};
use reel_storage::Failure;
use serde::Serialize;

use super::Driver;
use crate::ctx::encode;
use crate::{Error, Result};

impl<F, O> Driver<F>
where
    F: Future<Output = Result<O>>,
    O: Serialize,
{
    /// The final outcome if the execution must stop now.
    pub(super) fn stopped(&self) -> Option<Outcome> {
        let st = self.ctx.lock();
        if let Some(e) = st.replay.diverged() {
            return Some(Outcome::Parked(Failure::from(e)));
        }
        st.parked
            .as_ref()
            .map(|e| Outcome::Parked(Failure::from(e)))
    }

    pub(super) fn returned(&self, result: Result<O>) -> Outcome {
        if let Some(o) = self.stopped() {
            return o;
        }
        let mut st = self.ctx.lock();
        match (st.replay.finish(), result) {
            (Err(e), _) => Outcome::Parked(Failure::from(&e)),
            (Ok(()), Ok(output)) => match encode(&output) {
                Ok(p) => Outcome::Completed(p),
                Err(e) => Outcome::Failed(Failure::from(&e)),
            },
            // After a cancel request, whatever error the handler ends with (the
            // cancellation itself, or a failure of its cleanup) cancels the run.
            (Ok(()), Err(e)) => match st.slots.cancelled() {
                Some(reason) => {
                    if !matches!(e, Error::Cancelled(_)) {
                        tracing::warn!(error = %e, "reel: cancelled run ended with an error");
                    }
                    Outcome::Cancelled(reason.to_owned())
                }
                None => Outcome::Failed(st.replay.failure(&e)),
            },
        }
    }

    /// The handler asked to continue as new: the outcome that ends this segment.
    /// Signals walked and not consumed, and every one not walked yet, carry over.
    pub(super) fn continued(&self) -> Option<Outcome> {
        let request = self.ctx.lock().continued.take()?;
        if let Some(o) = self.stopped() {
            return Some(o);
        }
        let mut st = self.ctx.lock();
        if let Err(e) = st.replay.finish() {
            return Some(Outcome::Parked(Failure::from(&e)));
        }
        Some(Outcome::ContinuedAsNew {
            version: request.version,
            input: request.input,
            carried: st.slots.unconsumed_signals(),
            seen: self.walked,
        })
    }

    /// Whether the run is paused (live only).
    pub(super) fn paused(&self) -> bool {
        self.journal.as_ref().is_some_and(Journal::is_paused)
    }

    /// Whether a paused execution may end now: no step body runs, no append or
    /// child start is under way, so every result it produced is recorded.
    pub(super) fn wound_down(&self) -> bool {
        self.paused()
            && self.landings.is_empty()
            && self.effects.is_empty()
            && self.ctx.lock().bodies == 0
    }

    /// The suspension to report if the execution can only wait now.
    pub(super) fn suspension(&self) -> Option<Outcome> {
        let (len, _) = self.marks();
        let st = self.ctx.lock();
        let idle = st.caught_up
            && self.walked >= len
            && self.landings.is_empty()
            && self.effects.is_empty()
            && st.bodies == 0;
        if !idle {
            return None;
        }
        let (waiting_on, awaits_child) = match st.slots.describe_waits() {
            Some(w) => w,
            // Replay-only: the end of the history is as far as it goes.
            None if self.journal.is_none() => ("the end of the history".to_owned(), false),
            // Pending on something reel does not know (a foreign future): it wakes
            // the handler itself.
            None => return None,
        };
        Some(Outcome::Suspended {
            waiting_on,
            awaits_child,
            seen: self.walked,
        })
    }
}
