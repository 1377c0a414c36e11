//! The messages that reach a run actor: [`Resume`], [`Delivery`] (what wakes a
//! run, also as a [`Lettered`] one from the inbox) and [`StopRun`] /
//! [`StopFinished`], and how a child's wait id tells a detached child. A leaf:
//! the core sends these, the run actor handles them, neither module names the other
//! for them.

use reel_storage::{Failure, Mail, ParentLink, Payload, RunState, TimerEntry};

/// A child run a handler calls: waited for, or detached (a `detached#<n>` wait id,
/// see [`is_detached`]).
#[derive(Clone, Debug)]
pub struct ChildCall {
    /// The parent run and its wait for the child.
    pub link: ParentLink,
    /// The child's workflow name.
    pub workflow: String,
    /// The child's workflow version.
    pub version: u32,
    /// The child's run id.
    pub run_id: String,
    /// The child's input.
    pub input: Payload,
}

/// Run the handler now (start, recovery, restart). Also resumes a parked run.
#[derive(Clone, Copy)]
pub(crate) struct Resume;

/// Something that wakes a run.
#[derive(Clone, Debug)]
pub(crate) enum Delivery {
    Signal {
        name: String,
        signal_id: String,
        payload: Payload,
    },
    Timer(TimerEntry),
    /// A waited-for child ended. `child` is its run id: news of a child called in
    /// an earlier segment of a run that continued as new finds no matching
    /// `ChildStarted` and is dropped.
    ChildDone {
        wait_id: String,
        child: String,
        result: Result<Payload, Failure>,
    },
    /// The detached child `detached#<n>` was started, or could not be.
    ChildDetached {
        wait_id: String,
        child: String,
        error: Option<Failure>,
    },
    /// Cancel the run: graceful (the handler may clean up) unless `hard`.
    Cancel {
        reason: String,
        hard: bool,
        /// The parent asking, when a parent cancels its children: a run started by
        /// someone else, which that parent only attached to, ignores the request.
        from_parent: Option<String>,
    },
}

/// A delivery taken from a letter in the inbox (`letter`, its id): skipped if
/// the run acknowledged the letter itself since it was read, as it does before
/// it ends the log segment the letter's signal landed in.
#[derive(Clone, Debug)]
pub(crate) struct Lettered {
    pub(crate) letter: i64,
    pub(crate) delivery: Delivery,
}

/// Pause the run: its handler stops running (step bodies under way finish and
/// are recorded); wake-ups are still recorded. Idempotent.
#[derive(Clone, Debug)]
pub(crate) struct Pause {
    pub(crate) reason: String,
}

/// Resume a paused run: it runs again and sees what arrived while it was paused.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unpause;

/// Activate a parked run again now, with the code registered now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retry;

/// Admit an enqueued run: it becomes running and its handler starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admit;

/// Wind down and stop: the run's partition is being given back to balance the
/// hosts. Step bodies under way finish and are recorded first, so the next owner
/// does not run them again.
#[derive(Clone, Copy)]
pub(crate) struct HandBack;

/// Stop now (host shutdown); the run stays resumable.
#[derive(Clone, Copy)]
pub(crate) struct StopRun;

/// Stop now if the actor's run is the finished run created at this time (a delete
/// of that run); answers whether it stopped. An actor of another run under the id
/// (the checked one deleted since, and the id started again) goes on.
#[derive(Clone, Copy)]
pub(crate) struct StopFinished {
    pub(crate) created_at: u64,
}

/// Whether a parent link is a detached child's (started with `ctx.start_child`): its
/// parent does not wait on it and is not told when it ends.
pub(crate) fn is_detached(wait_id: &str) -> bool {
    wait_id.starts_with("detached#")
}

/// What a message becomes when its run is owned by another host: the mail posted
/// to that host's inbox, or `None` for what only the owner does (a timer fires on
/// the host that holds it; the owner has it too).
pub(crate) trait Mailable {
    fn mail(&self) -> Option<Mail>;
}

impl Mailable for Resume {
    fn mail(&self) -> Option<Mail> {
        Some(Mail::Wake { timers: Vec::new() })
    }
}

impl Mailable for Admit {
    fn mail(&self) -> Option<Mail> {
        Some(Mail::Wake { timers: Vec::new() })
    }
}

impl Mailable for Pause {
    fn mail(&self) -> Option<Mail> {
        Some(Mail::Pause {
            reason: self.reason.clone(),
        })
    }
}

impl Mailable for Unpause {
    fn mail(&self) -> Option<Mail> {
        Some(Mail::Unpause)
    }
}

impl Mailable for Retry {
    fn mail(&self) -> Option<Mail> {
        Some(Mail::Retry)
    }
}

impl Mailable for Delivery {
    fn mail(&self) -> Option<Mail> {
        Some(match self.clone() {
            Delivery::Signal {
                name,
                signal_id,
                payload,
            } => Mail::Signal {
                name,
                signal_id,
                payload,
            },
            Delivery::Timer(_) => return None,
            Delivery::ChildDone {
                wait_id,
                child,
                result,
            } => Mail::ChildDone {
                wait_id,
                child,
                result,
            },
            Delivery::ChildDetached {
                wait_id,
                child,
                error,
            } => Mail::ChildDetached {
                wait_id,
                child,
                error,
            },
            Delivery::Cancel {
                reason,
                hard,
                from_parent,
            } => Mail::Cancel {
                reason,
                hard,
                from_parent,
            },
        })
    }
}

impl Mailable for Lettered {
    fn mail(&self) -> Option<Mail> {
        self.delivery.mail()
    }
}

impl Delivery {
    /// The delivery a mail from another host asks for, if it is one.
    pub(crate) fn of_mail(mail: Mail) -> Option<Delivery> {
        Some(match mail {
            Mail::Signal {
                name,
                signal_id,
                payload,
            } => Delivery::Signal {
                name,
                signal_id,
                payload,
            },
            Mail::ChildDone {
                wait_id,
                child,
                result,
            } => Delivery::ChildDone {
                wait_id,
                child,
                result,
            },
            Mail::ChildDetached {
                wait_id,
                child,
                error,
            } => Delivery::ChildDetached {
                wait_id,
                child,
                error,
            },
            Mail::Cancel {
                reason,
                hard,
                from_parent,
            } => Delivery::Cancel {
                reason,
                hard,
                from_parent,
            },
            Mail::Wake { .. } | Mail::Pause { .. } | Mail::Unpause | Mail::Retry => return None,
        })
    }
}

/// What a parent learns of a child that ended in `state`: its output (`output`,
/// when at hand) or why it did not complete. `None` for a state that is no end,
/// or a completion whose output is not at hand.
pub(crate) fn child_result(
    state: &RunState,
    output: Option<&Payload>,
) -> Option<Result<Payload, Failure>> {
    match state {
        RunState::Completed => output.cloned().map(Ok),
        RunState::Failed { error } => Some(Err(error.clone())),
        RunState::Cancelled { reason } => Some(Err(Failure::Cancelled(reason.clone()))),
        _ => None,
    }
}

/// The reason a run asks its children to cancel when it was asked to cancel
/// with `reason` (its cleanup's grace, its end, its continue-as-new).
pub(crate) fn parent_cancelled(reason: &str) -> String {
    format!("parent cancelled: {reason}")
}

/// The reason a run that ended in `state` gives the children it asks to cancel:
/// the words of its cancel request (`requested`) when it had one, else how it
/// ended. `None` for a state that is no end.
pub(crate) fn closing_reason(state: &RunState, requested: Option<&str>) -> Option<String> {
    match (state, requested) {
        (RunState::Completed | RunState::Failed { .. } | RunState::Cancelled { .. }, Some(r)) => {
            Some(parent_cancelled(r))
        }
        (RunState::Completed, None) => Some("parent completed".to_owned()),
        (RunState::Failed { .. }, None) => Some("parent failed".to_owned()),
        (RunState::Cancelled { reason }, None) => Some(parent_cancelled(reason)),
        _ => None,
    }
}

/// The reason a run that continues as new gives the children its old segment
/// waited on: the words of its cancel request (`requested`) when it had one.
pub(crate) fn continued_reason(requested: Option<&str>) -> String {
    requested.map_or_else(|| "parent continued as new".to_owned(), parent_cancelled)
}
