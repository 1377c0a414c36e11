//! A new run's first execution, run before the run's first write, which then
//! carries what the execution recorded. When the execution only comes to wait
//! (a signal, a timer) the run is written already waiting, with its suspended
//! state, and no actor is spawned for it: it is activated from disk when
//! something wakes it, like a passivated run. Otherwise (a step, a child, an
//! end) the run's actor goes on with that same execution once the write has
//! landed ([`Handed`]): the handler is not run again.
//!
//! The first execution runs on the caller's task, polled once: its journal keeps
//! its appends instead of writing them ([`Journal::dry`]), no step body starts
//! and no service reaches the host until the journal goes live, and what it
//! records becomes visible to it at once. That is sound because all of it lands
//! in the run's first write, fsynced, before anything else can see the run;
//! everything it observed is in the log, so every later execution observes the
//! same, as after any write. A run that exists already is not executed this way.
//! (When the first write fails, because a racing start of the same id wrote
//! first or the disk failed, the journal is abandoned and what the execution
//! observed is in no log: nothing but its handler saw it.)

use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll};

use futures::StreamExt;
use reel_storage::{Event, RunMeta, RunState};

use super::*;
use crate::engine::{Execution, Outcome};
use crate::journal::Journal;
use crate::run_actor::Handed;
use crate::services::Services;

/// What a new run's first execution left.
pub(super) struct First {
    /// The events it recorded, after `RunStarted`.
    pub(super) events: Vec<Event>,
    /// The run's state, when the execution only came to wait: written so, the
    /// run needs no actor until something wakes it.
    pub(super) waiting: Option<RunState>,
    /// Otherwise the execution, for the run's actor once the run is written.
    pub(super) handed: Option<Handed>,
}

/// Events a first execution may record and leave the run waiting without an
/// actor: no side effect is due (a child to start, a value to announce).
fn waits_only(event: &Event) -> bool {
    matches!(
        event,
        Event::SignalAwaited { .. }
            | Event::TimerScheduled { .. }
            | Event::Recorded { .. }
            | Event::Patched { .. }
    )
}

impl Core {
    /// Runs a new run's handler until it first waits or would reach outside,
    /// writing nothing. `None` when the run is not a plain new one (its first
    /// write holds more than its `RunStarted`) or exists already, its workflow is
    /// not registered here, or the handler panicked (the actor reports that).
    pub(super) fn execute_first(&self, meta: &RunMeta, events: &[Event]) -> Option<First> {
        let [first @ Event::RunStarted { .. }] = events else {
            return None;
        };
        if meta.state != RunState::Running || meta.segment_start != 0 {
            return None;
        }
        let engine = self.registry.lookup(&meta.workflow, meta.version).ok()?;
        // A start of a run that exists (a repeated start, a parent's child start on
        // every execution until the child ends) would execute it for nothing, and
        // what that execution observed would be in no log. A point read, inline,
        // as `Core::meta`'s; only racing starts of one new id still do.
        if !matches!(self.store.get_run(&meta.run_id), Ok(None)) {
            return None;
        }
        let run_id: Arc<str> = meta.run_id.as_str().into();
        let host = self.me.clone() as Weak<dyn RunHost>;
        let journal = Journal::dry(
            run_id.clone(),
            self.store.clone(),
            self.options.clock.clone(),
            host.clone(),
            vec![first.clone()],
        );
        let execution = Execution {
            run_id,
            history: journal.snapshot(),
            journal: journal.clone(),
            services: Services(host, Some(journal.clone())),
            parent: meta.parent.as_ref().map(|p| p.run_id.clone()),
            segment: meta.segment,
        };
        let span = tracing::info_span!(
            "reel.run",
            run_id = %meta.run_id,
            workflow = %meta.workflow,
            version = meta.version,
            generation = 0u64
        );
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _entered = span.enter();
            let mut outcomes = engine.execute(execution);
            let mut cx = Context::from_waker(futures::task::noop_waker_ref());
            let polled = outcomes.poll_next_unpin(&mut cx);
            (outcomes, polled)
        }));
        let Ok((outcomes, polled)) = polled else {
            // What it started (a child) never goes on.
            journal.abandon();
            return None;
        };
        let events = journal.take_dry();
        if let Poll::Ready(Some(Outcome::Suspended {
            waiting_on,
            awaits_child: false,
            seen,
        })) = &polled
            && *seen == 1 + events.len() as u64
            && events.iter().all(waits_only)
        {
            let waiting = RunState::Suspended {
                waiting_on: waiting_on.clone(),
                awaits_child: false,
            };
            // Nothing it did waits on the write: it is done with.
            drop(std::panic::catch_unwind(AssertUnwindSafe(|| {
                drop(outcomes)
            })));
            journal.abandon();
            return Some(First {
                events,
                waiting: Some(waiting),
                handed: None,
            });
        }
        // Its actor goes on with it, the outcome its poll gave first.
        let first_outcome = match polled {
            Poll::Ready(Some(o)) => Some(o),
            _ => None,
        };
        let outcomes = futures::stream::iter(first_outcome).chain(outcomes).boxed();
        Some(First {
            events,
            waiting: None,
            handed: Some(Handed { journal, outcomes }),
        })
    }
}
