//! Replaying recorded logs without a host, like Temporal's `WorkflowReplayer`.
//!
//! Save a run's log (`AnyRun::events()`, [`Event`] is serde) and replay it in CI
//! against the current code: a change that would break running workflows shows up
//! as a [`Error::ReplayDivergence`] naming the first divergent event.
//!
//! ```
//! use reel::{Ctx, Workflow, testing};
//! # struct Greet;
//! # impl Workflow for Greet {
//! #     const NAME: &'static str = "greet";
//! #     type Input = String;
//! #     type Output = String;
//! #     async fn run(&self, ctx: Ctx, n: String) -> reel::Result<String> {
//! #         ctx.step("compose", |_| async { Ok::<_, String>(format!("hi {n}")) }).await
//! #     }
//! # }
//! # let history = testing::History::start::<Greet>(&"bob".to_string()).unwrap()
//! #     .step_completed("compose", &"hi bob".to_string()).unwrap().build();
//! let report = futures::executor::block_on(testing::replay(Greet, &history)).unwrap();
//! assert_eq!(report, testing::Replayed::Completed("hi bob".to_string()));
//! ```

use std::sync::Arc;

mod clock;
pub use clock::TestClock;

use futures::StreamExt;
use reel_actors::Outcome;
use reel_storage::Event;
use serde::Serialize;

use crate::ctx::{RunIdentity, decode, encode};
use crate::driver::execute;
use crate::{Error, Result, Workflow};

/// What replaying a history showed.
#[derive(Debug, Clone, PartialEq)]
pub enum Replayed<O> {
    /// The handler returned this value, consuming exactly the history.
    Completed(O),
    /// The handler returned this error.
    Failed(Error),
    /// The history ends before the handler does: it would wait for this (or call
    /// this new primitive) next.
    Pending(String),
    /// The handler continued as new (`ctx.continue_as_new`), to this version of its
    /// workflow.
    ContinuedAsNew {
        /// The version the next segment runs.
        version: u32,
    },
}

/// Replays `history` against `workflow` with no store and no side effects: recorded
/// steps return their recorded values and no body runs. A log of a run that
/// continued as new is replayed from its last segment (its last `RunStarted`).
///
/// # Errors
/// [`Error::ReplayDivergence`] naming the first divergent event, [`Error::Codec`]
/// for an undecodable input or output, [`Error::Crashed`] if the handler panics.
pub async fn replay<W: Workflow>(workflow: W, history: &[Event]) -> Result<Replayed<W::Output>> {
    replay_as(workflow, "replay", history).await
}

/// [`replay`] with the run id the handler sees in [`Ctx::run_id`](crate::Ctx::run_id)
/// (the log does not hold it): for handlers that derive ids from it, such as child
/// run ids.
///
/// # Errors
/// As [`replay`].
pub async fn replay_as<W: Workflow>(
    workflow: W,
    run_id: &str,
    history: &[Event],
) -> Result<Replayed<W::Output>> {
    let segment = history
        .iter()
        .rposition(|e| matches!(e, Event::RunStarted { .. }))
        .unwrap_or(0);
    let segments = history[..segment]
        .iter()
        .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
        .count();
    let segments = u32::try_from(segments).unwrap_or(u32::MAX);
    let history = Arc::new(history[segment..].to_vec());
    let run = RunIdentity {
        run_id: Arc::from(run_id),
        workflow: W::NAME,
        segment: segments,
        parent: None,
    };
    let (mut outcomes, ctx) = execute(
        Arc::new(workflow),
        run,
        history,
        u64::try_from(segment).unwrap_or(u64::MAX),
        None,
        None,
    );
    let Some(outcome) = outcomes.next().await else {
        return Err(Error::Crashed(
            "the execution ended without an outcome".into(),
        ));
    };
    match outcome {
        Outcome::Completed(p) => decode(&p).map(Replayed::Completed),
        Outcome::Failed(f) => Ok(Replayed::Failed(f.into())),
        Outcome::Cancelled(reason) => Ok(Replayed::Failed(Error::Cancelled(reason))),
        Outcome::Parked(f) => Err(f.into()),
        Outcome::Crashed(m) | Outcome::Unstored(m) => Err(Error::Crashed(m)),
        Outcome::ContinuedAsNew { version, .. } => Ok(Replayed::ContinuedAsNew { version }),
        Outcome::Suspended { waiting_on, .. } => Ok(Replayed::Pending(
            ctx.frontier_reached().unwrap_or(waiting_on),
        )),
        // Only a live run is paused (through its journal): a replay never is.
        Outcome::Paused => Err(Error::Crashed("the replay was paused".into())),
        Outcome::Disowned => Err(Error::Crashed("a replay has no store to refuse it".into())),
    }
}

/// Builds canned histories by hand, for replay tests.
#[derive(Debug, Clone, Default)]
pub struct History {
    events: Vec<Event>,
}

impl History {
    /// A history that starts a run of `W` with `input`.
    ///
    /// # Errors
    /// [`Error::Codec`].
    pub fn start<W: Workflow>(input: &W::Input) -> Result<History> {
        Ok(History {
            events: vec![Event::RunStarted {
                workflow: W::NAME.to_owned(),
                version: W::VERSION,
                input: encode(input)?,
            }],
        })
    }

    /// Appends any event.
    pub fn push(mut self, e: Event) -> History {
        self.events.push(e);
        self
    }

    /// Appends `StepStarted` + `StepCompleted` for step `id`.
    ///
    /// # Errors
    /// [`Error::Codec`].
    pub fn step_completed<T: Serialize + ?Sized>(self, id: &str, output: &T) -> Result<History> {
        let output = encode(output)?;
        Ok(self
            .push(Event::StepStarted {
                id: id.to_owned(),
                attempt: 1,
            })
            .push(Event::StepCompleted {
                id: id.to_owned(),
                output,
            }))
    }

    /// Appends `TimerScheduled` + `TimerFired`.
    pub fn timer_fired(self, id: &str) -> History {
        self.push(Event::TimerScheduled {
            id: id.to_owned(),
            fire_at: 0,
        })
        .push(Event::TimerFired { id: id.to_owned() })
    }

    /// Appends a delivered signal.
    ///
    /// # Errors
    /// [`Error::Codec`].
    pub fn signal<T: Serialize + ?Sized>(self, name: &str, payload_value: &T) -> Result<History> {
        let n = self.events.len();
        Ok(self.push(Event::SignalReceived {
            name: name.to_owned(),
            signal_id: format!("canned-{n}"),
            payload: encode(payload_value)?,
        }))
    }

    /// Appends the marker `Patched { id }` that [`Ctx::patched`](crate::Ctx::patched)
    /// records the first time it answers true.
    pub fn patched(self, id: &str) -> History {
        self.push(Event::Patched { id: id.to_owned() })
    }

    /// Appends a value published with [`Ctx::publish`](crate::Ctx::publish).
    ///
    /// # Errors
    /// [`Error::Codec`].
    pub fn published<T: Serialize + ?Sized>(self, key: &str, value: &T) -> Result<History> {
        let value = encode(value)?;
        Ok(self.push(Event::Published {
            key: key.to_owned(),
            value,
        }))
    }

    /// The events.
    pub fn build(self) -> Vec<Event> {
        self.events
    }
}
