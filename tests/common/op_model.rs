//! The model behind `tests/operations_follow_a_model.rs`: the operations a
//! sequence is made of, their generator, and what the contract says each one
//! answers and does to the runs. (Included by that test with `#[path]`, not
//! from `common/mod.rs`: no other test needs it.)
#![allow(unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use reel::StatusKind;

/// The run ids a sequence uses: three top-level ids and their children's ids.
pub const TOP: [&str; 3] = ["r0", "r1", "r2"];
pub const KIDS: [&str; 3] = ["r0-kid", "r1-kid", "r2-kid"];
pub const ALL: [&str; 6] = ["r0", "r1", "r2", "r0-kid", "r1-kid", "r2-kid"];

/// Which of the three cancels: `cancel` (waits for the end), `request_cancel`,
/// `terminate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    Cancel,
    Request,
    Terminate,
}

/// The workflows (defined in the test): `Steps` waits for signal `go`, `Sleeper`
/// for a one-hour timer, `Parent` for its child `<id>-kid`, a `Steps`; `Crashy`
/// panics and parks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wf {
    Steps,
    Sleeper,
    Parent,
    Crashy,
}

impl Wf {
    pub const fn name(self) -> &'static str {
        match self {
            Wf::Steps => "m-steps",
            Wf::Sleeper => "m-sleeper",
            Wf::Parent => "m-parent",
            Wf::Crashy => "m-crashy",
        }
    }
}

// ---------------------------------------------------------------------------------
// Operations.

#[derive(Clone, Debug)]
pub enum Op {
    Start {
        run: &'static str,
        wf: Wf,
        input: u32,
    },
    Signal {
        run: &'static str,
        value: u32,
        sid: u8,
    },
    Cancel {
        run: &'static str,
        how: How,
    },
    Pause {
        run: &'static str,
    },
    Resume {
        run: &'static str,
    },
    Retry {
        run: &'static str,
    },
    Delete {
        run: &'static str,
    },
    Fork {
        from: &'static str,
        to: &'static str,
    },
    AdvanceClock,
    Restart,
    /// `result()` through a `RunHandle` of `wf`.
    ResultAs {
        run: &'static str,
        wf: Wf,
    },
}

pub fn op() -> impl Strategy<Value = Op> {
    // Skewed towards `r0` so that operations meet the runs earlier ones made.
    let pick = |ids: [&'static str; 3]| prop_oneof![4 => Just(ids[0]), 2 => Just(ids[1]), 1 => Just(ids[2])];
    let top = move || pick(TOP);
    let any_id = move || prop_oneof![4 => pick(TOP), 1 => pick(KIDS)];
    let wf = prop_oneof![
        3 => Just(Wf::Steps),
        3 => Just(Wf::Sleeper),
        3 => Just(Wf::Parent),
        1 => Just(Wf::Crashy)
    ];
    prop_oneof![
        5 => (top(), wf.clone(), 0..4u32).prop_map(|(run, wf, input)| Op::Start { run, wf, input }),
        3 => (any_id(), 0..4u32, 0..3u8).prop_map(|(run, value, sid)| Op::Signal { run, value, sid }),
        2 => (any_id(), prop_oneof![Just(How::Cancel), Just(How::Request), Just(How::Terminate)])
            .prop_map(|(run, how)| Op::Cancel { run, how }),
        2 => any_id().prop_map(|run| Op::Pause { run }),
        3 => any_id().prop_map(|run| Op::Resume { run }),
        1 => any_id().prop_map(|run| Op::Retry { run }),
        2 => any_id().prop_map(|run| Op::Delete { run }),
        2 => (any_id(), top()).prop_map(|(from, to)| Op::Fork { from, to }),
        1 => Just(Op::AdvanceClock),
        1 => Just(Op::Restart),
        1 => (any_id(), wf).prop_map(|(run, wf)| Op::ResultAs { run, wf }),
    ]
}

// ---------------------------------------------------------------------------------
// The model.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Completed(u32),
    Failed,
    Cancelled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum St {
    /// Suspended on its signal, timer or child.
    Waiting,
    Paused,
    /// Parked by its crash loop (the only runs that park here).
    Parked,
    Done(End),
}

impl St {
    pub fn kind(self) -> StatusKind {
        match self {
            St::Waiting => StatusKind::Suspended,
            St::Parked => StatusKind::Parked,
            St::Paused => StatusKind::Paused,
            St::Done(End::Completed(_)) => StatusKind::Completed,
            St::Done(End::Failed) => StatusKind::Failed,
            St::Done(End::Cancelled) => StatusKind::Cancelled,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Run {
    pub wf: Wf,
    pub input: u32,
    pub st: St,
    /// How a paused run ends once resumed: what woke it while paused.
    pub wake: Option<End>,
    /// Signal ids this run has seen (a repeat is dropped).
    pub sids: BTreeSet<u8>,
    /// A parent that started its child (and so cancels it with itself).
    pub own_kid: bool,
}

/// What an operation should answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    Ok,
    /// `Ok`, and the target's log does not change.
    OkNoChange,
    Unknown(&'static str),
    Invalid(&'static str, StatusKind),
    Finished(&'static str),
    Exists(&'static str, Wf),
    /// A fork from an unknown run onto a taken id: the docs give no order.
    UnknownOrExists(&'static str, &'static str, Wf),
    /// `WorkflowMismatch`: a handle of the first workflow on a run of the second.
    Mismatch(&'static str, Wf, Wf),
    /// Not called: `result()` of an unfinished run waits for its end.
    Blocks,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub runs: BTreeMap<String, Run>,
}

pub fn kid_of(id: &str) -> String {
    format!("{id}-kid")
}

impl Model {
    /// A new run (a `Parent` with its child, or attached to an existing one).
    pub fn create(&mut self, id: &str, wf: Wf, input: u32) {
        let mut run = Run {
            wf,
            input,
            st: if wf == Wf::Crashy {
                St::Parked
            } else {
                St::Waiting
            },
            wake: None,
            sids: BTreeSet::new(),
            own_kid: false,
        };
        let mut attached_end = None;
        if wf == Wf::Parent {
            // README: a child call on an existing run's id only waits for it.
            match self.runs.get(&kid_of(id)).map(|k| k.st) {
                None => run.own_kid = true,
                Some(St::Done(e)) => attached_end = Some(parent_end(e)),
                Some(_) => {}
            }
        }
        self.runs.insert(id.to_owned(), run);
        if wf == Wf::Parent && !self.runs.contains_key(&kid_of(id)) {
            self.create(&kid_of(id), Wf::Steps, input);
        }
        if let Some(e) = attached_end {
            self.end(id, e);
        }
    }

    /// Ends run `id`: its parent learns of it, a cancelled parent cancels its child.
    pub fn end(&mut self, id: &str, end: End) {
        let Some(run) = self.runs.get_mut(id) else {
            return;
        };
        run.st = St::Done(end);
        run.wake = None;
        let cascade = end == End::Cancelled && run.wf == Wf::Parent && run.own_kid;
        if let Some(parent) = id.strip_suffix("-kid")
            && let Some(p) = self.runs.get_mut(parent)
            && p.wf == Wf::Parent
        {
            match p.st {
                St::Waiting => self.end(parent, parent_end(end)),
                St::Paused => p.wake = Some(parent_end(end)),
                St::Done(_) | St::Parked => {}
            }
        }
        if cascade && matches!(self.runs.get(&kid_of(id)), Some(k) if !matches!(k.st, St::Done(_)))
        {
            self.end(&kid_of(id), End::Cancelled);
        }
    }

    /// A wake-up that ends run `id` with `end`: at once, or on resume if paused
    /// ("signals, timers coming due and child results are recorded as usual and
    /// reach the handler ... when the run is resumed").
    pub fn wake(&mut self, id: &str, end: End) {
        let run = self.runs.get_mut(id).expect("a run");
        match run.st {
            St::Waiting => self.end(id, end),
            St::Paused if run.wake.is_none() => run.wake = Some(end),
            _ => {}
        }
    }

    /// Applies `op` as the docs describe it; returns the answer they promise.
    pub fn apply(&mut self, op: &Op) -> Want {
        let known = |m: &Model, id: &str| m.runs.get(id).map(|r| (r.st, r.wf));
        match *op {
            // "idempotent on the run id"; `RunExists` "when another workflow has the id".
            Op::Start { run, wf, input } => match known(self, run) {
                Some((_, w)) if w == wf => Want::OkNoChange,
                Some((_, w)) => Want::Exists(run, w),
                None => {
                    self.create(run, wf, input);
                    Want::Ok
                }
            },
            // `UnknownRun`, `RunFinished`; "a second send with the same signal_id is
            // dropped".
            Op::Signal { run, value, sid } => match known(self, run) {
                None => Want::Unknown(run),
                Some((St::Done(_), _)) => Want::Finished(run),
                Some((_, wf)) => {
                    let r = self.runs.get_mut(run).expect("a run");
                    if !r.sids.insert(sid) {
                        return Want::OkNoChange;
                    }
                    if wf == Wf::Steps {
                        let input = r.input;
                        self.wake(run, End::Completed(input + 1 + value));
                    }
                    Want::Ok
                }
            },
            // "Cancelling a run that is cancelling or cancelled does nothing more";
            // `RunFinished` for a completed or failed run; a parked or paused run
            // is cancelled at once.
            // `request_cancel` and `terminate`: "As cancel"; the end is the same here
            // (no handler cleans up).
            Op::Cancel { run, .. } => match known(self, run) {
                None => Want::Unknown(run),
                Some((St::Done(End::Cancelled), _)) => Want::OkNoChange,
                Some((St::Done(_), _)) => Want::Finished(run),
                Some(_) => {
                    self.end(run, End::Cancelled);
                    Want::Ok
                }
            },
            // "Pausing a paused run does nothing"; `InvalidState` for a finished or
            // parked run.
            Op::Pause { run } => match known(self, run) {
                None => Want::Unknown(run),
                Some((St::Paused, _)) => Want::OkNoChange,
                Some((St::Waiting, _)) => {
                    self.runs.get_mut(run).expect("a run").st = St::Paused;
                    Want::Ok
                }
                Some((st, _)) => Want::Invalid(run, st.kind()),
            },
            // `InvalidState` for a run that is not paused.
            Op::Resume { run } => match known(self, run) {
                None => Want::Unknown(run),
                Some((St::Paused, _)) => {
                    let r = self.runs.get_mut(run).expect("a run");
                    r.st = St::Waiting;
                    if let Some(e) = r.wake.take() {
                        self.end(run, e);
                    }
                    Want::Ok
                }
                Some((st, _)) => Want::Invalid(run, st.kind()),
            },
            Op::Retry { run } => match known(self, run) {
                None => Want::Unknown(run),
                // It activates, crashes and parks again.
                Some((St::Parked, _)) => Want::Ok,
                Some((st, _)) => Want::Invalid(run, st.kind()),
            },
            // Finished runs only, else `InvalidState`; afterwards the id is unknown.
            Op::Delete { run } => match known(self, run) {
                None => Want::Unknown(run),
                Some((St::Done(_), _)) => {
                    self.runs.remove(run);
                    Want::Ok
                }
                Some((st, _)) => Want::Invalid(run, st.kind()),
            },
            // `UnknownRun` for `run_id`, `RunExists` when `new_run_id` is taken; the
            // cut right after `RunStarted` makes the fork a fresh run of the same
            // workflow and input, with no parent.
            Op::Fork { from, to } => match (known(self, from), known(self, to)) {
                (None, None) => Want::Unknown(from),
                (None, Some((_, w))) => Want::UnknownOrExists(from, to, w),
                (Some(_), Some((_, w))) => Want::Exists(to, w),
                (Some((_, wf)), None) => {
                    let input = self.runs[from].input;
                    self.create(to, wf, input);
                    Want::Ok
                }
            },
            Op::AdvanceClock => {
                let sleepers: Vec<(String, u32)> = (self.runs.iter())
                    .filter(|(_, r)| r.wf == Wf::Sleeper)
                    .map(|(id, r)| (id.clone(), r.input))
                    .collect();
                for (id, input) in sleepers {
                    self.wake(&id, End::Completed(input * 2));
                }
                Want::Ok
            }
            Op::Restart => Want::Ok,
            Op::ResultAs { run, wf } => match known(self, run) {
                None => Want::Unknown(run),
                Some((_, w)) if w != wf => Want::Mismatch(run, wf, w),
                Some((St::Waiting | St::Paused, _)) => Want::Blocks,
                Some(_) => Want::Ok,
            },
        }
    }

    pub fn counts(&self) -> BTreeMap<StatusKind, u64> {
        let mut c: BTreeMap<StatusKind, u64> = StatusKind::ALL.iter().map(|k| (*k, 0)).collect();
        for r in self.runs.values() {
            *c.entry(r.st.kind()).or_default() += 1;
        }
        c
    }

    /// Each run's status and workflow, as listings show them.
    pub fn statuses(&self) -> BTreeMap<String, (StatusKind, String)> {
        (self.runs.iter())
            .map(|(id, r)| (id.clone(), (r.st.kind(), r.wf.name().to_owned())))
            .collect()
    }
}

/// How a parent ends when its child ends with `kid`.
pub fn parent_end(kid: End) -> End {
    match kid {
        End::Completed(v) => End::Completed(v + 1000),
        End::Failed | End::Cancelled => End::Failed,
    }
}
