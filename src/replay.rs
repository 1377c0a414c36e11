//! The replay core: synchronous and side-effect free.
//!
//! It indexes the recorded log once per execution and answers three questions: is
//! this call the primitive the log has at this position (ids and kinds match, in
//! call order), has the handler reached every primitive the log opened before the
//! point the walk has come to, and how does a step that has no recorded result go
//! on (run an attempt again, or wait for its backoff timer). It performs nothing
//! itself; [`crate::driver`] walks the log and the primitives carry the answers out.
//!
//! Results are not matched here: the driver makes them visible one at a time, in log
//! order, through [`crate::slots`].

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use reel_actors::retry_timer_id;
use reel_storage::{AttemptError, Event, Failure};

use crate::Error;

/// The kind of a durable primitive, as matched against the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Step,
    Timer,
    Signal {
        name: String,
    },
    Recorded {
        kind: &'static str,
    },
    Child {
        workflow: String,
        run_id: String,
    },
    /// A patch marker (`ctx.patched`): an opening with no result.
    Patch,
    /// A published value (`ctx.publish`), matched by key.
    Publish,
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
            Kind::Patch => format!("patch marker `{id}`"),
            Kind::Publish => format!("published value `{id}`"),
        }
    }
}

/// The primitive an event opens, if it opens one: a step's first attempt, a timer,
/// a signal wait, a recorded value, a child.
fn opening(e: &Event) -> Option<(&String, Kind)> {
    Some(match e {
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
        Event::Patched { id } => (id, Kind::Patch),
        Event::Published { key, .. } => (key, Kind::Publish),
        _ => return None,
    })
}

/// Whether an event opens a primitive.
pub(crate) fn is_opening(e: &Event) -> bool {
    opening(e).is_some()
}

/// What the log says about one step: read from the history when a step needs it
/// (rarely: a step replayed without a result, a run failing with a step's error),
/// not indexed up front, so replaying a long log copies no step ids.
#[derive(Default)]
struct StepRecord {
    /// The log has an event of this step.
    seen: bool,
    done: bool,
    last_started: u32,
    last_failure: Option<(u32, Option<u64>)>,
    /// Every failed attempt, recorded and (during this execution) walked, in log
    /// order.
    errors: Vec<AttemptError>,
}

impl StepRecord {
    /// The recorded history of step `id`.
    fn read(history: &[Event], id: &str) -> StepRecord {
        let mut s = StepRecord::default();
        for e in history {
            let matched = match e {
                Event::StepStarted { id: i, .. }
                | Event::StepCompleted { id: i, .. }
                | Event::StepFailed { id: i, .. } => i == id,
                _ => false,
            };
            if !matched {
                continue;
            }
            s.seen = true;
            match e {
                Event::StepStarted { attempt, .. } => {
                    s.last_started = s.last_started.max(*attempt);
                }
                Event::StepCompleted { .. } => s.done = true,
                Event::StepFailed {
                    attempt,
                    error,
                    retry_at,
                    ..
                } => {
                    s.errors.push(AttemptError {
                        attempt: *attempt,
                        error: error.clone(),
                    });
                    s.last_failure = Some((*attempt, *retry_at));
                    s.done |= retry_at.is_none();
                }
                _ => {}
            }
        }
        s
    }
}

/// How a step that has no recorded result goes on, once replay has caught up.
#[derive(Debug, PartialEq)]
pub(crate) enum StepPlan {
    /// Run the body as this attempt (recording `StepStarted` first when `record`).
    Run { attempt: u32, record: bool },
    /// A failed attempt waits for its backoff timer, due at `fire_at`.
    WaitRetry {
        timer_id: String,
        attempt: u32,
        fire_at: u64,
    },
}

/// What `ctx.patched(id)` / `ctx.deprecate_patch(id)` finds at its position.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Patch {
    /// Already answered in this execution: the first answer again.
    Answered(bool),
    /// The log has this patch's marker here: consumed.
    Marked,
    /// The log has another opening here: it was written before the patch. Nothing
    /// consumed.
    Unpatched,
    /// Past the recorded openings: `ctx.patched` records a new marker (the
    /// position is taken), `ctx.deprecate_patch` does nothing.
    New,
}

/// Whether a primitive is new (to be recorded) or replayed.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Opened {
    New,
    Replayed,
}

/// The replay state of one execution.
pub(crate) struct Replay {
    /// The recorded log; openings and steps are read from it in place.
    history: Arc<Vec<Event>>,
    /// The sequence number of `history`'s first event in the run's log (the
    /// current segment's `RunStarted`): a divergence names a sequence number.
    base: u64,
    /// Positions in `history` of the events that open a primitive, in log order.
    opens: Vec<usize>,
    /// Calls matched so far (the next call is matched against `opens[cursor]`).
    cursor: usize,
    /// Recorded openings the walk has passed.
    walked_opens: usize,
    /// Failed attempts walked during this execution (past the recorded history),
    /// by step id.
    live_failures: HashMap<String, Vec<AttemptError>>,
    /// Due times of the timers and timed waits the log created.
    due: HashMap<String, u64>,
    /// Timers that fired or were cancelled in the log.
    settled: HashSet<String>,
    children_done: HashSet<String>,
    step_names: HashMap<String, u32>,
    /// Step names given as ids that contain `#`: the only ids a generated
    /// `name#k` can collide with (see [`Replay::step_id`]).
    hashed_step_names: HashSet<String>,
    counters: HashMap<&'static str, u32>,
    /// Answers given to `ctx.patched` in this execution, by patch id.
    patches: HashMap<String, bool>,
    diverged: Option<Error>,
}

impl Replay {
    /// Indexes a recorded log.
    pub(crate) fn new(history: &Arc<Vec<Event>>, base: u64) -> Replay {
        let mut r = Replay {
            history: history.clone(),
            base,
            opens: Vec::new(),
            cursor: 0,
            walked_opens: 0,
            live_failures: HashMap::new(),
            due: HashMap::new(),
            settled: HashSet::new(),
            children_done: HashSet::new(),
            step_names: HashMap::new(),
            hashed_step_names: HashSet::new(),
            counters: HashMap::new(),
            patches: HashMap::new(),
            diverged: None,
        };
        for (seq, e) in history.iter().enumerate() {
            if is_opening(e) {
                r.opens.push(seq);
            }
            match e {
                Event::StepFailed {
                    id,
                    attempt,
                    retry_at: Some(at),
                    ..
                } => {
                    r.due.insert(retry_timer_id(id, *attempt), *at);
                }
                Event::TimerScheduled { id, fire_at } => {
                    r.due.insert(id.clone(), *fire_at);
                }
                Event::SignalAwaited {
                    id,
                    deadline: Some(d),
                    ..
                } => {
                    r.due.insert(id.clone(), *d);
                }
                Event::TimerFired { id } | Event::TimerCancelled { id } => {
                    r.settled.insert(id.clone());
                }
                Event::ChildCompleted { id, .. } | Event::ChildDetached { id, .. } => {
                    r.children_done.insert(id.clone());
                }
                _ => {}
            }
        }
        r
    }

    /// The `k`-th recorded opening: its sequence number, id and kind.
    fn open_at(&self, k: usize) -> Option<(u64, &String, Kind)> {
        let seq = *self.opens.get(k)?;
        let (id, kind) = opening(self.history.get(seq)?)?;
        Some((seq as u64, id, kind))
    }

    /// Whether the `k`-th recorded opening is a patch marker.
    fn is_patch_at(&self, k: usize) -> bool {
        self.opens
            .get(k)
            .and_then(|&seq| self.history.get(seq))
            .is_some_and(|e| matches!(e, Event::Patched { .. }))
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
    /// An id is never given twice: a candidate already given is skipped for the
    /// next `k`.
    ///
    /// Which candidates can have been given already, without a set of every id
    /// (this runs for every step): a generated `name#k` splits back into `name` and
    /// `k` at its last `#`, so two generated ids never meet, and a name without
    /// `#` meets no generated id. What is left is a name containing `#` meeting a
    /// generated id (the prefix's counter has passed `k`), and a generated id
    /// meeting such a name, kept in `hashed_step_names`.
    pub(crate) fn step_id(&mut self, name: &str) -> String {
        loop {
            // The name is copied once, on its first call, not on every call.
            let n = match self.step_names.get_mut(name) {
                Some(n) => n,
                None => self.step_names.entry(name.to_owned()).or_insert(0),
            };
            *n += 1;
            let n = *n;
            if n == 1 {
                if !name.contains('#') {
                    return name.to_owned();
                }
                if self.generated(name) {
                    continue;
                }
                self.hashed_step_names.insert(name.to_owned());
                return name.to_owned();
            }
            let id = numbered(name, n);
            if !self.hashed_step_names.contains(&id) {
                return id;
            }
        }
    }

    /// Whether `id` is `prefix#k` as generated for the k-th call of `prefix`, and
    /// that call was made: every candidate up to the prefix's counter was given,
    /// save one that met a name already given, which `id` cannot be (it is only
    /// asked about on its first call).
    fn generated(&self, id: &str) -> bool {
        let Some((prefix, k)) = id.rsplit_once('#') else {
            return false;
        };
        let Ok(n) = k.parse::<u32>() else {
            return false;
        };
        n >= 2 && n.to_string() == k && self.step_names.get(prefix).is_some_and(|&c| c >= n)
    }

    /// Matches the next primitive call against the log (invariant 3).
    ///
    /// # Errors
    /// [`Error::ReplayDivergence`] naming the first divergent event; every later call
    /// of this execution gets the same error.
    pub(crate) fn open(&mut self, id: &str, kind: Kind) -> Result<Opened, Error> {
        if let Some(e) = &self.diverged {
            return Err(e.clone());
        }
        let k = self.skip_patch_markers(self.cursor);
        self.cursor = k + 1;
        match self.open_at(k) {
            None => Ok(Opened::New),
            Some((_, oid, okind)) if *oid == id && okind == kind => Ok(Opened::Replayed),
            Some((seq, oid, okind)) => {
                let (expected, found) =
                    (okind.describe(oid), format!("called {}", kind.describe(id)));
                Err(self.diverge(seq, expected, found))
            }
        }
    }

    /// The first recorded opening from `k` on that is not a patch marker. A marker
    /// no call consumes is skipped: its `ctx.patched` call was deprecated and then
    /// removed from the code, which is safe because a marker carries no result.
    fn skip_patch_markers(&self, mut k: usize) -> usize {
        while self.is_patch_at(k) {
            k += 1;
        }
        k
    }

    /// Matches a patch call (`deprecate` for `ctx.deprecate_patch`) against the
    /// log: the answer depends only on the recorded openings at the call's position,
    /// never on how far the walk has got. Markers of other patches there are looked
    /// past (their calls may have been removed); the first of them with this id is
    /// consumed, along with the markers before it. Memoized by patch id for the
    /// execution.
    ///
    /// # Errors
    /// The divergence that already stopped this execution.
    pub(crate) fn patch(&mut self, id: &str, deprecate: bool) -> Result<Patch, Error> {
        if let Some(e) = &self.diverged {
            return Err(e.clone());
        }
        if let Some(answer) = self.patches.get(id) {
            return Ok(Patch::Answered(*answer));
        }
        let mut k = self.cursor;
        let found = loop {
            match self.open_at(k) {
                Some((_, oid, Kind::Patch)) if *oid == id => {
                    self.cursor = k + 1;
                    break Patch::Marked;
                }
                Some((_, _, Kind::Patch)) => k += 1,
                Some(_) => break Patch::Unpatched,
                None => {
                    if !deprecate {
                        self.cursor = k + 1;
                    }
                    break Patch::New;
                }
            }
        };
        let answer = found == Patch::Marked || (found == Patch::New && !deprecate);
        self.patches.insert(id.to_owned(), answer);
        Ok(found)
    }

    /// The walk reached a recorded opening: live, the handler had called it before
    /// any later result became visible, so it must have been called by now.
    /// `waiting` completes "the handler …" with what it does instead.
    ///
    /// # Errors
    /// [`Error::ReplayDivergence`] at that opening.
    pub(crate) fn walk_opening(&mut self, waiting: impl FnOnce() -> String) -> Result<(), Error> {
        if let Some(e) = &self.diverged {
            return Err(e.clone());
        }
        let k = self.walked_opens;
        if k >= self.opens.len() {
            return Ok(());
        }
        self.walked_opens += 1;
        // A patch marker not reached yet: its call may have been removed (see
        // `skip_patch_markers`); a marker decides nothing by itself.
        if k < self.cursor || self.is_patch_at(k) {
            return Ok(());
        }
        let Some((seq, oid, okind)) = self.open_at(k) else {
            return Ok(());
        };
        let expected = okind.describe(oid);
        Err(self.diverge(seq, expected, waiting()))
    }

    /// Whether the handler has called more primitives than the log holds: it is
    /// past the recorded history.
    pub(crate) fn past_history(&self) -> bool {
        self.cursor > self.opens.len()
    }

    /// Stops the execution with a divergence at position `index` of the history
    /// (reported as its sequence number in the run's log).
    pub(crate) fn diverge(&mut self, index: u64, expected: String, found: String) -> Error {
        let e = Error::ReplayDivergence {
            index: self.base.saturating_add(index),
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
        match self.open_at(self.skip_patch_markers(self.cursor)) {
            None => Ok(()),
            Some((seq, oid, okind)) => {
                let expected = okind.describe(oid);
                Err(self.diverge(seq, expected, "returned before reaching it".to_owned()))
            }
        }
    }

    /// How a replayed step with no recorded result goes on.
    pub(crate) fn plan_step(&self, id: &str) -> StepPlan {
        let s = StepRecord::read(&self.history, id);
        if !s.seen {
            return StepPlan::Run {
                attempt: 1,
                record: true,
            };
        }
        match s.last_failure {
            Some((attempt, Some(fire_at))) if attempt >= s.last_started => {
                let timer_id = retry_timer_id(id, attempt);
                if self.settled.contains(&timer_id) {
                    StepPlan::Run {
                        attempt: attempt + 1,
                        record: true,
                    }
                } else {
                    StepPlan::WaitRetry {
                        timer_id,
                        attempt,
                        fire_at,
                    }
                }
            }
            // An attempt began and never ended (crash, or its future was dropped
            // after replay caught up): run it again.
            _ => StepPlan::Run {
                attempt: s.last_started.max(1),
                record: false,
            },
        }
    }

    /// Notes a step's failed attempt walked during this execution (the recorded
    /// ones are indexed already).
    pub(crate) fn note_step_failure(&mut self, id: &str, attempt: u32, error: &str) {
        self.live_failures
            .entry(id.to_owned())
            .or_default()
            .push(AttemptError {
                attempt,
                error: error.to_owned(),
            });
    }

    /// Every failed attempt of step `id`: recorded, then walked live, in log order.
    fn step_errors(&self, id: &str) -> Vec<AttemptError> {
        let mut errors = StepRecord::read(&self.history, id).errors;
        if let Some(live) = self.live_failures.get(id) {
            errors.extend(live.iter().cloned());
        }
        errors
    }

    /// The failure a run records for the handler's error `e`. [`Error::Step`] has
    /// no room for the step's attempts, so they are added here from the log: when
    /// `e` names a step of this run whose last failed attempt has `e`'s message
    /// (an `Error::Step` built elsewhere, or passed on from a child run, gets none).
    pub(crate) fn failure(&self, e: &Error) -> Failure {
        let mut failure = Failure::from(e);
        if let Failure::Step {
            step,
            message,
            attempts,
        } = &mut failure
        {
            let errors = self.step_errors(step);
            if errors.last().is_some_and(|last| last.error == *message) {
                *attempts = errors;
            }
        }
        failure
    }

    /// The recorded due time of a timer, timed wait or retry backoff.
    pub(crate) fn due(&self, id: &str) -> Option<u64> {
        self.due.get(id).copied()
    }

    /// Notes the due time of a timer recorded during this execution.
    pub(crate) fn note_due(&mut self, id: &str, at: u64) {
        self.due.insert(id.to_owned(), at);
    }

    /// Whether the log shows the timer fired or cancelled.
    pub(crate) fn settled(&self, id: &str) -> bool {
        self.settled.contains(id)
    }

    /// Whether the log holds the child's result.
    pub(crate) fn child_done(&self, id: &str) -> bool {
        self.children_done.contains(id)
    }
}

/// `name#n`, built without the formatting machinery (a step's id, on every call).
fn numbered(name: &str, n: u32) -> String {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut id = String::with_capacity(name.len() + 1 + digits.len() - at);
    id.push_str(name);
    id.push('#');
    for &d in &digits[at..] {
        id.push(char::from(d));
    }
    id
}

#[cfg(test)]
mod tests;
