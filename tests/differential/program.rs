//! The program AST: what a generated handler does, and how it prints.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A handler program. Durations are milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Node {
    /// `ctx.step_with(name, 3 attempts, backoff_ms)`; the body yields `yields` times,
    /// sleeps `body_sleep_ms` (cut short by `StepCtx::cancelled`), and fails its
    /// first `fail_first` attempts (3 or more exhausts the attempts: the handler
    /// observes the `Error::Step`).
    Step {
        name: String,
        yields: u8,
        body_sleep_ms: u8,
        fail_first: u8,
        backoff_ms: u8,
    },
    Sleep {
        ms: u8,
    },
    Wait {
        name: String,
    },
    WaitTimeout {
        name: String,
        ms: u8,
    },
    Approval {
        name: String,
    },
    Now,
    Uuid,
    Random,
    /// A child run of `Interp` with this (wait-free) program; `complete_on_cancel`
    /// as in [`Program`].
    Child {
        program: Box<Node>,
        complete_on_cancel: bool,
    },
    Seq(Vec<Node>),
    /// `try_join_all`.
    Join(Vec<Node>),
    /// `FuturesUnordered`; the trace records the completion order.
    Unordered(Vec<Node>),
    /// `select_all`: the first ready branch wins, the others are dropped.
    Select(Vec<Node>),
    /// `tokio::select!` over two branches (random polling order, unless the run
    /// may be cancelled: see [`Program::biased_races`]).
    Race(Box<Node>, Box<Node>),
    /// `ctx.is_cancelled()`, recorded in the trace. Instant: ready at its
    /// first poll, so generated only inside a `seq`, never last (see `generate`).
    IsCancelled,
    /// `ctx.patched(id)`, recorded in the trace. Instant, as `IsCancelled`.
    Patched {
        id: String,
    },
    /// `ctx.publish(key, path)`. Instant, as `IsCancelled`.
    Publish {
        key: String,
    },
    /// `ctx.cancelled()`: resolves when the handler sees the cancel request. Only a
    /// branch of a `select` (alone it would wait for ever when no cancel comes).
    Cancelled,
    /// Runs `body`; if it ends with `Error::Cancelled`, runs `cleanup` through
    /// `ctx.shielded()`, then goes on (`resume`) or ends with the cancellation.
    Guard {
        body: Box<Node>,
        cleanup: Box<Node>,
        resume: bool,
    },
    /// `ctx.continue_as_new` if the run has segments left ([`Program::segments`]),
    /// else nothing. Generated only as an element (not the first) of the root's own
    /// `seq`, where nothing else is in flight: the nodes after it run in the last
    /// segment only.
    ContinueAsNew,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(f: &mut fmt::Formatter<'_>, tag: &str, xs: &[&Node]) -> fmt::Result {
            write!(f, "{tag}[")?;
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{x}")?;
            }
            write!(f, "]")
        }
        match self {
            Node::Step {
                name,
                yields,
                body_sleep_ms,
                fail_first,
                backoff_ms,
            } => write!(
                f,
                "step({name} yields={yields} body={body_sleep_ms}ms fail_first={fail_first} backoff={backoff_ms}ms)"
            ),
            Node::Sleep { ms } => write!(f, "sleep({ms}ms)"),
            Node::Wait { name } => write!(f, "wait({name})"),
            Node::WaitTimeout { name, ms } => write!(f, "wait({name}, {ms}ms)"),
            Node::Approval { name } => write!(f, "approval({name})"),
            Node::Now => write!(f, "now"),
            Node::Uuid => write!(f, "uuid"),
            Node::Random => write!(f, "random"),
            Node::Child {
                program,
                complete_on_cancel,
            } => {
                let end = if *complete_on_cancel {
                    " completes on cancel"
                } else {
                    ""
                };
                write!(f, "child{{{program}{end}}}")
            }
            Node::Seq(xs) => list(f, "seq", &xs.iter().collect::<Vec<_>>()),
            Node::Join(xs) => list(f, "join", &xs.iter().collect::<Vec<_>>()),
            Node::Unordered(xs) => list(f, "unordered", &xs.iter().collect::<Vec<_>>()),
            Node::Select(xs) => list(f, "select", &xs.iter().collect::<Vec<_>>()),
            Node::Race(a, b) => list(f, "race", &[a, b]),
            Node::IsCancelled => write!(f, "is_cancelled"),
            Node::Patched { id } => write!(f, "patched({id})"),
            Node::Publish { key } => write!(f, "publish({key})"),
            Node::Cancelled => write!(f, "cancelled"),
            Node::Guard {
                body,
                cleanup,
                resume,
            } => {
                let then = if *resume { "resume" } else { "end" };
                write!(f, "guard{{{body} on cancel: shielded {cleanup}, {then}}}")
            }
            Node::ContinueAsNew => write!(f, "continue_as_new"),
        }
    }
}

/// The input of `Interp`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Program {
    /// The run's own id, to derive its children's ids from. Not `Ctx::run_id()`:
    /// `reel::testing::replay` replays under the run id `replay`.
    pub(crate) run: String,
    pub(crate) root: Node,
    /// When the program ends with `Error::Cancelled`, return the trace as a value
    /// instead: the run completes after the cancel.
    pub(crate) complete_on_cancel: bool,
    /// `race` polls its branches in order. Set when the run may be cancelled: a
    /// cancel makes every pending wait ready at once, and a refused call is ready
    /// at its first poll, so a random `select!` would pick its branch at random
    /// (the handler, not reel, would be nondeterministic). Also set when the
    /// program holds a node that is ready at its first poll ([`Node::has_instant`]):
    /// two branches going on past one in the same poll would make their next
    /// calls in the random order of an unbiased `select!` (README, "Determinism
    /// rules": calls made in one poll must be made in the same order on replay).
    pub(crate) biased_races: bool,
    /// How many times the run continues as new: at the end of `root` (or at a
    /// [`Node::ContinueAsNew`] in it) while `segment < segments`.
    pub(crate) segments: u8,
    /// Which segment this input begins (0 for the run's first).
    pub(crate) segment: u8,
    /// What the earlier segments observed: the trace this segment goes on from.
    pub(crate) before: Vec<String>,
    /// Run before `root` in every segment but the first (waits on a signal name the
    /// root never waits on, so its signals are carried over from the first segment).
    pub(crate) prologue: Option<Node>,
}

/// Where segment `k` runs its root: `r` in the first segment, `s<k>r` after.
pub(crate) fn root_path(k: u8) -> String {
    if k == 0 {
        "r".to_owned()
    } else {
        format!("s{k}r")
    }
}

/// The first line segment `k` (> 0) adds to the trace it goes on from.
pub(crate) fn begins(k: u8) -> String {
    format!("s{k} begins")
}

/// The child runs a program may start, given its run id: their ids, and whether each
/// completes on a cancel ([`Program::complete_on_cancel`]).
pub(crate) fn child_runs(node: &Node, run_id: &str, path: &str, out: &mut Vec<(String, bool)>) {
    match node {
        Node::Child {
            complete_on_cancel, ..
        } => out.push((child_run_id(run_id, path), *complete_on_cancel)),
        Node::Seq(xs) | Node::Join(xs) | Node::Unordered(xs) | Node::Select(xs) => {
            for (i, x) in xs.iter().enumerate() {
                child_runs(x, run_id, &format!("{path}.{i}"), out);
            }
        }
        Node::Race(a, b) => {
            child_runs(a, run_id, &format!("{path}.0"), out);
            child_runs(b, run_id, &format!("{path}.1"), out);
        }
        // Cleanups have no children.
        Node::Guard { body, .. } => child_runs(body, run_id, &format!("{path}.0"), out),
        _ => {}
    }
}

impl Node {
    /// Whether the program (its children's included) holds a node that is ready at
    /// its first poll (`is_cancelled`, `patched`, `publish`).
    pub(crate) fn has_instant(&self) -> bool {
        match self {
            Node::IsCancelled | Node::Patched { .. } | Node::Publish { .. } => true,
            Node::Seq(xs) | Node::Join(xs) | Node::Unordered(xs) | Node::Select(xs) => {
                xs.iter().any(Node::has_instant)
            }
            Node::Race(a, b) => a.has_instant() || b.has_instant(),
            Node::Guard { body, cleanup, .. } => body.has_instant() || cleanup.has_instant(),
            Node::Child { program, .. } => program.has_instant(),
            _ => false,
        }
    }
}

pub(crate) fn child_run_id(parent: &str, path: &str) -> String {
    format!("{parent}/{path}")
}
