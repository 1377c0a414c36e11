//! Generation: random programs and the schedule of what the test sends their runs
//! (signals, approvals, a cancel request).

use std::collections::BTreeMap;
use std::fmt;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::Index;

use super::env_u64;
use super::program::{Node, Program};

const SIGNAL_NAMES: [&str; 3] = ["a", "b", "c"];
/// The signal only prologues wait on (see [`Program::prologue`]).
const PROLOGUE_SIGNAL: &str = "d";
const STEP_NAMES: [&str; 4] = ["s0", "s1", "s2", "s3"];
const PATCH_IDS: [&str; 2] = ["p1", "p2"];
const PUBLISH_KEYS: [&str; 2] = ["k1", "k2"];
/// The reason of the test's cancel requests.
pub(crate) const CANCEL_REASON: &str = "diff-cancel";

/// One generated case: a program, the delays of the signals and approvals its waits
/// need, maybe a cancel request, and when the restarted copy's host is shut down
/// and reopened.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) program: Node,
    /// Delay of the k-th delivery (cycled), ms from the run's start.
    pub(crate) delivery_delays: Vec<u8>,
    /// When the run is asked to cancel, ms from its start (`request_cancel`).
    pub(crate) cancel_at: Option<u8>,
    /// See [`Program::complete_on_cancel`].
    pub(crate) complete_on_cancel: bool,
    /// Delays between the restarts of the restarted copy (used from the batch's first
    /// case).
    pub(crate) restart_delays: Vec<u8>,
    /// See [`Program::segments`] and [`Program::prologue`].
    pub(crate) segments: u8,
    pub(crate) prologue: Option<Node>,
}

/// What the test sends a run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Sent {
    Signal,
    Approval,
    Cancel,
}

/// A signal, approval or cancel request sent to a run.
#[derive(Clone, Debug)]
pub(crate) struct Delivery {
    pub(crate) sent: Sent,
    /// The signal's or approval's name; a cancel request's reason.
    pub(crate) name: String,
    /// The k-th delivery of this name.
    pub(crate) k: u32,
    pub(crate) delay_ms: u8,
}

impl Case {
    pub(crate) fn input(&self, run: &str) -> Program {
        Program {
            run: run.to_owned(),
            root: self.program.clone(),
            complete_on_cancel: self.complete_on_cancel,
            biased_races: self.cancel_at.is_some()
                || self.program.has_instant()
                || self.prologue.as_ref().is_some_and(Node::has_instant),
            segments: self.segments,
            segment: 0,
            before: Vec::new(),
            prologue: self.prologue.clone(),
        }
    }

    /// One delivery per wait on each name in every segment (the root's in each, the
    /// prologue's in each but the first), so no wait without deadline can hang (a
    /// wait that times out consumes none; a dropped select loser consumes at most
    /// one, as any wait does; signals a segment does not consume carry over), then
    /// the cancel request if any.
    pub(crate) fn deliveries(&self) -> Vec<Delivery> {
        fn walk(n: &Node, out: &mut Vec<(Sent, String)>) {
            match n {
                Node::Wait { name } | Node::WaitTimeout { name, .. } => {
                    out.push((Sent::Signal, name.clone()));
                }
                Node::Approval { name } => out.push((Sent::Approval, name.clone())),
                Node::Seq(xs) | Node::Join(xs) | Node::Unordered(xs) | Node::Select(xs) => {
                    xs.iter().for_each(|x| walk(x, out));
                }
                Node::Race(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
                // Cleanups and child programs are generated without waits.
                Node::Guard { body, .. } => walk(body, out),
                _ => {}
            }
        }
        let mut waits = Vec::new();
        for k in 0..=self.segments {
            if let (true, Some(p)) = (k > 0, &self.prologue) {
                walk(p, &mut waits);
            }
            walk(&self.program, &mut waits);
        }
        let mut counts: BTreeMap<(bool, String), u32> = BTreeMap::new();
        let mut out = waits
            .into_iter()
            .enumerate()
            .map(|(i, (sent, name))| {
                let k = counts
                    .entry((sent == Sent::Approval, name.clone()))
                    .or_default();
                *k += 1;
                Delivery {
                    sent,
                    name,
                    k: *k,
                    delay_ms: self
                        .delivery_delays
                        .get(i % self.delivery_delays.len().max(1))
                        .copied()
                        .unwrap_or(0),
                }
            })
            .collect::<Vec<_>>();
        if let Some(delay_ms) = self.cancel_at {
            out.push(Delivery {
                sent: Sent::Cancel,
                name: CANCEL_REASON.to_owned(),
                k: 1,
                delay_ms,
            });
        }
        out
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "program: {}", self.program)?;
        let deliveries = self
            .deliveries()
            .iter()
            .map(|d| match d.sent {
                Sent::Signal => format!("signal {}#{} at {}ms", d.name, d.k, d.delay_ms),
                Sent::Approval => format!("approval {}#{} at {}ms", d.name, d.k, d.delay_ms),
                Sent::Cancel => format!("CANCEL at {}ms", d.delay_ms),
            })
            .collect::<Vec<_>>();
        if self.segments > 0 {
            let prologue = self
                .prologue
                .as_ref()
                .map(|p| format!(", each later one after the prologue {p}"))
                .unwrap_or_default();
            writeln!(f, "continues as new {} times{prologue}", self.segments)?;
        }
        writeln!(f, "deliveries: [{}]", deliveries.join(", "))?;
        if self.cancel_at.is_some() {
            let end = if self.complete_on_cancel {
                "completes with its trace"
            } else {
                "ends with the cancellation"
            };
            writeln!(f, "after a cancel the program {end}")?;
        }
        write!(f, "restarts after (ms): {:?}", self.restart_delays)
    }
}

fn name_of(names: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(names).prop_map(str::to_owned)
}

fn duration() -> impl Strategy<Value = u8> {
    1u8..=40
}

fn step() -> impl Strategy<Value = Node> {
    (
        name_of(&STEP_NAMES),
        0u8..3,
        prop_oneof![2 => Just(0u8), 1 => duration()],
        prop_oneof![4 => Just(0u8), 2 => 1u8..=2, 1 => Just(3u8)],
        1u8..=10,
    )
        .prop_map(
            |(name, yields, body_sleep_ms, fail_first, backoff_ms)| Node::Step {
                name,
                yields,
                body_sleep_ms,
                fail_first,
                backoff_ms,
            },
        )
}

/// Leaves of a child program or a cleanup: no waits (nobody signals a child, and a
/// shielded wait would outlive the cancel).
fn quiet_leaf() -> BoxedStrategy<Node> {
    prop_oneof![
        3 => step(),
        2 => duration().prop_map(|ms| Node::Sleep { ms }),
        1 => Just(Node::Now),
        1 => Just(Node::Random),
    ]
    .boxed()
}

/// Nodes ready at their first poll. They are generated only inside a `seq`, never
/// last, so no two branches of a random `race` are ready at once: the branch it
/// picks never depends on its polling order.
fn instant() -> BoxedStrategy<Node> {
    prop_oneof![
        Just(Node::IsCancelled),
        name_of(&PATCH_IDS).prop_map(|id| Node::Patched { id }),
        name_of(&PUBLISH_KEYS).prop_map(|key| Node::Publish { key }),
    ]
    .boxed()
}

/// A `seq` of `inner` nodes, with instant nodes before some of them.
fn seq(inner: BoxedStrategy<Node>) -> BoxedStrategy<Node> {
    vec((option::weighted(0.25, instant()), inner), 1..4)
        .prop_map(|xs| {
            Node::Seq(
                xs.into_iter()
                    .flat_map(|(i, n)| i.into_iter().chain([n]))
                    .collect(),
            )
        })
        .boxed()
}

/// What a guard runs through the shielded handle: quiet leaves, and instant nodes
/// (an `is_cancelled` there sees the request).
fn cleanup() -> BoxedStrategy<Node> {
    prop_oneof![
        1 => quiet_leaf(),
        1 => seq(quiet_leaf()),
        1 => (instant(), quiet_leaf()).prop_map(|(i, n)| Node::Seq(vec![i, n])),
    ]
    .boxed()
}

fn composite(inner: BoxedStrategy<Node>) -> BoxedStrategy<Node> {
    if only_sequences() {
        return seq(inner);
    }
    let select = (
        vec(inner.clone(), 2..4),
        option::weighted(0.5, (any::<bool>(), any::<Index>())),
    )
        .prop_map(|(mut xs, cancelled)| {
            // First half of the time: it wins only if no branch before it holds a
            // wait the cancel ends (`select_all` polls in order).
            if let Some((first, at)) = cancelled {
                let at = if first { 0 } else { at.index(xs.len() + 1) };
                xs.insert(at, Node::Cancelled);
            }
            Node::Select(xs)
        });
    prop_oneof![
        3 => seq(inner.clone()),
        2 => vec(inner.clone(), 1..4).prop_map(Node::Join),
        2 => vec(inner.clone(), 1..4).prop_map(Node::Unordered),
        2 => select,
        2 => (inner.clone(), inner.clone()).prop_map(|(a, b)| Node::Race(Box::new(a), Box::new(b))),
        2 => (inner, cleanup(), any::<bool>()).prop_map(|(body, cleanup, resume)| Node::Guard {
            body: Box::new(body),
            cleanup: Box::new(cleanup),
            resume,
        }),
    ]
    .boxed()
}

/// `REEL_DIFF_ONLY_SEQ=1`: no concurrency in the programs, a sanity check of the
/// harness itself (sequential programs replay deterministically without any
/// concurrency support).
fn only_sequences() -> bool {
    std::env::var("REEL_DIFF_ONLY_SEQ").is_ok_and(|v| v == "1")
}

fn child_program() -> impl Strategy<Value = Node> {
    quiet_leaf().prop_recursive(2, 4, 3, composite)
}

fn leaf() -> BoxedStrategy<Node> {
    prop_oneof![
        4 => step(),
        2 => duration().prop_map(|ms| Node::Sleep { ms }),
        1 => name_of(&SIGNAL_NAMES).prop_map(|name| Node::Wait { name }),
        1 => (name_of(&SIGNAL_NAMES), duration())
            .prop_map(|(name, ms)| Node::WaitTimeout { name, ms }),
        1 => name_of(&SIGNAL_NAMES).prop_map(|name| Node::Approval { name }),
        1 => Just(Node::Now),
        1 => Just(Node::Uuid),
        1 => Just(Node::Random),
        1 => (child_program(), any::<bool>()).prop_map(|(p, complete_on_cancel)| Node::Child {
            program: Box::new(p),
            complete_on_cancel,
        }),
    ]
    .boxed()
}

/// When a case's run is asked to cancel, ms from its start: `REEL_DIFF_CANCEL` is
/// the percentage of cases that are (default 35; 0 = none, 100 = all).
/// Mostly early: most programs are done within a few tens of milliseconds.
fn cancel_at() -> BoxedStrategy<Option<u8>> {
    let at = prop_oneof![3 => 0u8..=25, 1 => 0u8..=80];
    match env_u64("REEL_DIFF_CANCEL", 35) {
        0 => Just(None).boxed(),
        p if p >= 100 => at.prop_map(Some).boxed(),
        p => option::weighted(p as f64 / 100.0, at).boxed(),
    }
}

/// Cases with a cancel keep their unordered joins (`REEL_DIFF_CANCEL_UNORDERED=0`
/// turns them into joins). This found a bug, now fixed: the waits a cancel request
/// ends were all woken at once, in `HashMap` order, so a `FuturesUnordered` saw
/// them end in an order that differed between executions of one log; they now end
/// one at a time in call order (`Slots::feed_cancelled`).
fn cancel_unordered() -> bool {
    std::env::var("REEL_DIFF_CANCEL_UNORDERED").map_or(true, |v| v != "0")
}

/// `node` with every unordered join (child programs included) made a join.
fn without_unordered(node: Node) -> Node {
    let all = |xs: Vec<Node>| xs.into_iter().map(without_unordered).collect();
    let one = |x: Box<Node>| Box::new(without_unordered(*x));
    match node {
        Node::Unordered(xs) | Node::Join(xs) => Node::Join(all(xs)),
        Node::Seq(xs) => Node::Seq(all(xs)),
        Node::Select(xs) => Node::Select(all(xs)),
        Node::Race(a, b) => Node::Race(one(a), one(b)),
        Node::Child {
            program,
            complete_on_cancel,
        } => Node::Child {
            program: one(program),
            complete_on_cancel,
        },
        Node::Guard {
            body,
            cleanup,
            resume,
        } => Node::Guard {
            body: one(body),
            cleanup: one(cleanup),
            resume,
        },
        leaf => leaf,
    }
}

/// How many times a case's run continues as new: `REEL_DIFF_CAN` is the
/// percentage of cases that do (default 40; 0 = none), one to three times (once
/// most often: each segment re-runs the program, which costs time).
fn segments() -> BoxedStrategy<u8> {
    let times = prop_oneof![3 => Just(1u8), 2 => Just(2u8), 1 => Just(3u8)];
    match env_u64("REEL_DIFF_CAN", 40) {
        0 => Just(0u8).boxed(),
        p if p >= 100 => times.boxed(),
        p => option::weighted(p as f64 / 100.0, times)
            .prop_map(Option::unwrap_or_default)
            .boxed(),
    }
}

/// What later segments run first: waits on a signal the root never waits on.
fn prologue() -> BoxedStrategy<Node> {
    let name = || Just(PROLOGUE_SIGNAL.to_owned());
    let wait = prop_oneof![
        2 => name().prop_map(|name| Node::Wait { name }),
        1 => (name(), duration()).prop_map(|(name, ms)| Node::WaitTimeout { name, ms }),
    ];
    vec(wait, 1..3).prop_map(Node::Seq).boxed()
}

/// `program` with a `continue_as_new` at `at` of its own `seq` (not first), if it
/// is a `seq` of two or more nodes.
fn with_continue(program: Node, at: Option<Index>) -> Node {
    match (program, at) {
        (Node::Seq(mut xs), Some(at)) if xs.len() >= 2 => {
            xs.insert(1 + at.index(xs.len() - 1), Node::ContinueAsNew);
            Node::Seq(xs)
        }
        (program, _) => program,
    }
}

pub(crate) fn case() -> BoxedStrategy<Case> {
    (
        leaf().prop_recursive(3, 12, 3, composite),
        vec(0u8..=60, 16),
        cancel_at(),
        any::<bool>(),
        vec(0u8..=50, 1..=3),
        (
            segments(),
            option::weighted(0.7, prologue()),
            option::weighted(0.3, any::<Index>()),
        ),
    )
        .prop_map(
            |(
                program,
                delivery_delays,
                cancel_at,
                complete_on_cancel,
                restart_delays,
                (segments, prologue, continue_at),
            )| {
                let program = if cancel_at.is_some() && !cancel_unordered() {
                    without_unordered(program)
                } else {
                    program
                };
                let (program, prologue) = if segments > 0 {
                    (with_continue(program, continue_at), prologue)
                } else {
                    (program, None)
                };
                Case {
                    program,
                    delivery_delays,
                    cancel_at,
                    complete_on_cancel,
                    restart_delays,
                    segments,
                    prologue,
                }
            },
        )
        .boxed()
}
