//! The replay core: synchronous and side-effect free.
//!
//! Given the recorded log and the primitive the handler just called, it decides what
//! that primitive does: return the recorded result, do something new (and which
//! events to record for it), wait, or report a divergence. It performs nothing
//! itself: [`crate::ctx`] carries out the decision. The same code serves a live run
//! and a full replay, and `reel::testing` runs it with no store at all.

use std::collections::HashMap;
use std::sync::Arc;

use reel_actors::retry_timer_id;
use reel_storage::{Event, Failure, Payload};

use crate::Error;

/// The kind of a durable primitive, as matched against the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Step,
    Timer,
    Signal { name: String },
    Recorded { kind: &'static str },
    Child { workflow: String, run_id: String },
}

impl Kind {
    fn describe(&self, id: &str) -> String {
        match self {
            Kind::Step => format!("step `{id}`"),
            Kind::Timer => format!("timer `{id}`"),
            Kind::Signal { name } => format!("signal wait `{id}` on `{name}`"),
            Kind::Recorded { kind } => format!("recorded {kind} `{id}`"),
            Kind::Child { workflow, run_id } => {
                format!("child `{id}` ({workflow} run `{run_id}`)")
            }
        }
    }
}

/// An event that opens a primitive, in log order.
struct Opening {
    seq: u64,
    id: String,
    kind: Kind,
}

fn opening(seq: u64, e: &Event) -> Option<Opening> {
    let (id, kind) = match e {
        Event::StepStarted { id, attempt: 1 } => (id, Kind::Step),
        Event::TimerScheduled { id, .. } => (id, Kind::Timer),
        Event::SignalAwaited { id, name, .. } => (id, Kind::Signal { name: name.clone() }),
        Event::Recorded { id, kind, .. } => (
            id,
            Kind::Recorded {
                kind: match kind.as_str() {
                    "now" => "now",
                    "uuid" => "uuid",
                    "random" => "random",
                    _ => "unknown",
                },
            },
        ),
        Event::ChildStarted {
            id,
            workflow,
            run_id,
            ..
        } => (
            id,
            Kind::Child {
                workflow: workflow.clone(),
                run_id: run_id.clone(),
            },
        ),
        _ => return None,
    };
    Some(Opening {
        seq,
        id: id.clone(),
        kind,
    })
}

#[derive(Default)]
struct StepRecord {
    output: Option<Payload>,
    last_started: u32,
    last_failure: Option<(u32, String, Option<u64>)>,
}

/// What a step call must do.
#[derive(Debug, PartialEq)]
pub(crate) enum StepPlan {
    /// The result is recorded: return it without running the body.
    Done(Result<Payload, Error>),
    /// Run the body as this attempt (recording `StepStarted` first when `record`).
    Run { attempt: u32, record: bool },
    /// A failed attempt waits for its backoff timer.
    WaitRetry { timer_id: String },
}

/// How a signal wait resolves from the log.
#[derive(Debug, PartialEq)]
pub(crate) enum SignalPlan {
    Received(Payload),
    TimedOut,
    Wait,
}

/// Whether a primitive is new (to be recorded) or replayed.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Opened {
    New,
    Replayed,
}

/// The replay state of one execution.
pub(crate) struct Replay {
    opens: Vec<Opening>,
    cursor: usize,
    steps: HashMap<String, StepRecord>,
    fired: HashMap<String, u64>,
    signals: HashMap<String, Vec<(u64, Payload)>>,
    claims: HashMap<String, usize>,
    waits: HashMap<String, Option<u64>>,
    timers: HashMap<String, u64>,
    recorded: HashMap<String, Payload>,
    children: HashMap<String, Result<Payload, Failure>>,
    step_names: HashMap<String, u32>,
    step_ids: std::collections::HashSet<String>,
    counters: HashMap<&'static str, u32>,
    diverged: Option<Error>,
}

impl Replay {
    /// Indexes a recorded log.
    pub(crate) fn new(history: &Arc<Vec<Event>>) -> Replay {
        let mut r = Replay {
            opens: Vec::new(),
            cursor: 0,
            steps: HashMap::new(),
            fired: HashMap::new(),
            signals: HashMap::new(),
            claims: HashMap::new(),
            waits: HashMap::new(),
            timers: HashMap::new(),
            recorded: HashMap::new(),
            children: HashMap::new(),
            step_names: HashMap::new(),
            step_ids: std::collections::HashSet::new(),
            counters: HashMap::new(),
            diverged: None,
        };
        for (seq, e) in history.iter().enumerate() {
            let seq = seq as u64;
            if let Some(o) = opening(seq, e) {
                r.opens.push(o);
            }
            match e {
                Event::StepStarted { id, attempt } => {
                    let s = r.steps.entry(id.clone()).or_default();
                    s.last_started = s.last_started.max(*attempt);
                }
                Event::StepCompleted { id, output } => {
                    let s = r.steps.entry(id.clone()).or_default();
                    if s.output.is_none() {
                        s.output = Some(output.clone());
                    }
                }
                Event::StepFailed {
                    id,
                    attempt,
                    error,
                    retry_at,
                } => {
                    r.steps.entry(id.clone()).or_default().last_failure =
                        Some((*attempt, error.clone(), *retry_at));
                }
                Event::TimerScheduled { id, fire_at } => {
                    r.timers.insert(id.clone(), *fire_at);
                }
                Event::TimerFired { id } => {
                    r.fired.entry(id.clone()).or_insert(seq);
                }
                Event::SignalAwaited { id, deadline, .. } => {
                    r.waits.insert(id.clone(), *deadline);
                }
                Event::SignalReceived { name, payload, .. } => {
                    r.signals
                        .entry(name.clone())
                        .or_default()
                        .push((seq, payload.clone()));
                }
                Event::Recorded { id, value, .. } => {
                    r.recorded.insert(id.clone(), value.clone());
                }
                Event::ChildCompleted { id, result } => {
                    r.children
                        .entry(id.clone())
                        .or_insert_with(|| result.clone());
                }
                _ => {}
            }
        }
        r
    }

    /// The divergence that stopped this execution, if any.
    pub(crate) fn diverged(&self) -> Option<&Error> {
        self.diverged.as_ref()
    }

    /// Next positional id of a kind: `timer#1`, `signal#2`, ...
    pub(crate) fn positional(&mut self, prefix: &'static str) -> String {
        let n = self.counters.entry(prefix).or_insert(0);
        *n += 1;
        format!("{prefix}#{n}")
    }

    /// The id of a step call: its name, `name#k` for the k-th call with that name.
    pub(crate) fn step_id(&mut self, name: &str) -> String {
        loop {
            let n = self.step_names.entry(name.to_owned()).or_insert(0);
            *n += 1;
            let id = if *n == 1 {
                name.to_owned()
            } else {
                format!("{name}#{n}")
            };
            // A name that itself looks like `a#2` must not reuse an id already given.
            if self.step_ids.insert(id.clone()) {
                return id;
            }
        }
    }

    /// Matches the next primitive against the log (invariant 3).
    ///
    /// # Errors
    /// [`Error::ReplayDivergence`] naming the first divergent event; every later call
    /// of this execution gets the same error.
    pub(crate) fn open(&mut self, id: &str, kind: Kind) -> Result<Opened, Error> {
        if let Some(e) = &self.diverged {
            return Err(e.clone());
        }
        let k = self.cursor;
        self.cursor += 1;
        match self.opens.get(k) {
            None => Ok(Opened::New),
            Some(o) if o.id == id && o.kind == kind => Ok(Opened::Replayed),
            Some(o) => Err(self.diverge(o.seq, o.kind.describe(&o.id), kind.describe(id))),
        }
    }

    fn diverge(&mut self, index: u64, expected: String, found: String) -> Error {
        let e = Error::ReplayDivergence {
            index,
            expected,
            found,
        };
        self.diverged = Some(e.clone());
        e
    }

    /// Called when the handler returns: a log with primitives the handler never
    /// reached diverges too.
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        if let Some(e) = &self.diverged {
            return Err(e.clone());
        }
        match self.opens.get(self.cursor) {
            None => Ok(()),
            Some(o) => {
                let (seq, expected) = (o.seq, o.kind.describe(&o.id));
                Err(self.diverge(seq, expected, "the handler returned".to_owned()))
            }
        }
    }

    /// Decides a step call given whether it was just opened.
    pub(crate) fn plan_step(&self, id: &str, opened: Opened) -> StepPlan {
        let Some(s) = self.steps.get(id).filter(|_| opened == Opened::Replayed) else {
            return StepPlan::Run {
                attempt: 1,
                record: true,
            };
        };
        if let Some(out) = &s.output {
            return StepPlan::Done(Ok(out.clone()));
        }
        match &s.last_failure {
            Some((attempt, error, retry_at)) if *attempt >= s.last_started => match retry_at {
                None => StepPlan::Done(Err(Error::Step {
                    step: id.to_owned(),
                    message: error.clone(),
                })),
                Some(_) => {
                    let timer_id = retry_timer_id(id, *attempt);
                    if self.fired.contains_key(&timer_id) {
                        StepPlan::Run {
                            attempt: attempt + 1,
                            record: true,
                        }
                    } else {
                        StepPlan::WaitRetry { timer_id }
                    }
                }
            },
            // An attempt began and never ended (crash): run it again.
            _ => StepPlan::Run {
                attempt: s.last_started.max(1),
                record: false,
            },
        }
    }

    /// Whether a timer has fired; its due time if it was recorded.
    pub(crate) fn timer(&self, id: &str) -> (bool, Option<u64>) {
        (self.fired.contains_key(id), self.timers.get(id).copied())
    }

    /// The recorded deadline of a signal wait.
    pub(crate) fn wait_deadline(&self, id: &str) -> Option<u64> {
        self.waits.get(id).copied().flatten()
    }

    /// Resolves a signal wait from log order: the k-th wait on a name (counting waits
    /// that received or still wait, not those that timed out) gets the k-th signal of
    /// that name, unless its deadline timer fired first.
    pub(crate) fn plan_signal(&mut self, id: &str, name: &str) -> SignalPlan {
        let slot = self.claims.get(name).copied().unwrap_or(0);
        let candidate = self.signals.get(name).and_then(|v| v.get(slot)).cloned();
        let timed_out_at = self.fired.get(id).copied();
        match (candidate, timed_out_at) {
            (Some((seq, payload)), t) if t.is_none_or(|t| seq < t) => {
                self.claims.insert(name.to_owned(), slot + 1);
                SignalPlan::Received(payload)
            }
            (_, Some(_)) => SignalPlan::TimedOut,
            _ => {
                self.claims.insert(name.to_owned(), slot + 1);
                SignalPlan::Wait
            }
        }
    }

    /// A recorded value.
    pub(crate) fn recorded(&self, id: &str) -> Option<Payload> {
        self.recorded.get(id).cloned()
    }

    /// A child's recorded result.
    pub(crate) fn child(&self, id: &str) -> Option<Result<Payload, Failure>> {
        self.children.get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: u32) -> Payload {
        Payload(rmp_serde::to_vec(&v).unwrap_or_default())
    }

    fn start() -> Event {
        Event::RunStarted {
            workflow: "w".into(),
            version: 1,
            input: p(0),
        }
    }

    #[test]
    fn step_ids_repeat_with_suffix() {
        let mut r = Replay::new(&Arc::new(vec![start()]));
        assert_eq!(r.step_id("a"), "a");
        assert_eq!(r.step_id("a"), "a#2");
        assert_eq!(r.step_id("b"), "b");
        // A name that looks like a generated id gets a fresh one.
        assert_eq!(r.step_id("a#2"), "a#2#2");
        assert_eq!(r.positional("timer"), "timer#1");
        assert_eq!(r.positional("timer"), "timer#2");
    }

    #[test]
    fn divergence_names_first_mismatch_and_sticks() {
        let log = Arc::new(vec![
            start(),
            Event::StepStarted {
                id: "a".into(),
                attempt: 1,
            },
            Event::StepCompleted {
                id: "a".into(),
                output: p(1),
            },
            Event::TimerScheduled {
                id: "timer#1".into(),
                fire_at: 5,
            },
        ]);
        let mut r = Replay::new(&log);
        assert_eq!(r.open("a", Kind::Step), Ok(Opened::Replayed));
        let e = r.open("b", Kind::Step).unwrap_err();
        assert_eq!(
            e,
            Error::ReplayDivergence {
                index: 3,
                expected: "timer `timer#1`".into(),
                found: "step `b`".into()
            }
        );
        assert_eq!(r.open("timer#1", Kind::Timer), Err(e));
    }

    #[test]
    fn handler_returning_early_diverges() {
        let log = Arc::new(vec![
            start(),
            Event::StepStarted {
                id: "a".into(),
                attempt: 1,
            },
        ]);
        let mut r = Replay::new(&log);
        assert!(matches!(
            r.finish(),
            Err(Error::ReplayDivergence { index: 1, .. })
        ));
    }

    #[test]
    fn timed_out_wait_consumes_no_signal() {
        let log = Arc::new(vec![
            start(),
            Event::SignalAwaited {
                id: "signal#1".into(),
                name: "x".into(),
                deadline: Some(1),
            },
            Event::TimerFired {
                id: "signal#1".into(),
            },
            Event::SignalReceived {
                name: "x".into(),
                signal_id: "s1".into(),
                payload: p(7),
            },
            Event::SignalAwaited {
                id: "signal#2".into(),
                name: "x".into(),
                deadline: None,
            },
        ]);
        let mut r = Replay::new(&log);
        assert_eq!(r.plan_signal("signal#1", "x"), SignalPlan::TimedOut);
        assert_eq!(r.plan_signal("signal#2", "x"), SignalPlan::Received(p(7)));
    }

    #[test]
    fn signal_before_deadline_wins() {
        let log = Arc::new(vec![
            start(),
            Event::SignalReceived {
                name: "x".into(),
                signal_id: "s1".into(),
                payload: p(7),
            },
            Event::SignalAwaited {
                id: "signal#1".into(),
                name: "x".into(),
                deadline: Some(1),
            },
            Event::TimerFired {
                id: "signal#1".into(),
            },
        ]);
        let mut r = Replay::new(&log);
        assert_eq!(r.plan_signal("signal#1", "x"), SignalPlan::Received(p(7)));
    }

    #[test]
    fn retry_plans_follow_the_log() {
        let mut log = vec![
            start(),
            Event::StepStarted {
                id: "a".into(),
                attempt: 1,
            },
            Event::StepFailed {
                id: "a".into(),
                attempt: 1,
                error: "boom".into(),
                retry_at: Some(9),
            },
        ];
        let r = Replay::new(&Arc::new(log.clone()));
        assert_eq!(
            r.plan_step("a", Opened::Replayed),
            StepPlan::WaitRetry {
                timer_id: "a/retry1".into()
            }
        );
        log.push(Event::TimerFired {
            id: "a/retry1".into(),
        });
        let r = Replay::new(&Arc::new(log.clone()));
        assert_eq!(
            r.plan_step("a", Opened::Replayed),
            StepPlan::Run {
                attempt: 2,
                record: true
            }
        );
        log.push(Event::StepStarted {
            id: "a".into(),
            attempt: 2,
        });
        let r = Replay::new(&Arc::new(log.clone()));
        assert_eq!(
            r.plan_step("a", Opened::Replayed),
            StepPlan::Run {
                attempt: 2,
                record: false
            }
        );
        log.push(Event::StepFailed {
            id: "a".into(),
            attempt: 2,
            error: "again".into(),
            retry_at: None,
        });
        let r = Replay::new(&Arc::new(log));
        assert_eq!(
            r.plan_step("a", Opened::Replayed),
            StepPlan::Done(Err(Error::Step {
                step: "a".into(),
                message: "again".into()
            }))
        );
    }
}
