//! Differential test of replay (invariants 2 and 3 under concurrency): random handler
//! programs (steps with retries, sleeps, signal waits with and without deadlines,
//! approvals, recorded values, child runs, nested in sequences, joins, unordered
//! joins and selects) run live on a real host, then
//!
//! 1. replay their final log with `reel::testing::replay`: same output, no divergence
//!    (failure kinds `replay-output-differs`, `replay-not-completed`, `replay-error`);
//! 2. check that every execution of the live run (one per wake-up) observed a prefix
//!    of the final output: a re-run from the top sees the same interleaving
//!    (`execution-not-prefix`);
//! 3. replay every prefix of that log: never a divergence or an error, and what the
//!    handler observes is a prefix of the live output, as after a crash at that point
//!    (`prefix-replay`). This assumes results are handed to the handler in log order;
//!    `REEL_DIFF_PREFIXES=0` turns the check off for an engine that records the
//!    order of delivery some other way;
//! 4. run again on a host shut down and reopened mid-way (one to three times): the
//!    run completes (`hang`, `run-failed`), and the checks above hold for it too;
//! 5. check that no step id completed twice in a log, and no body whose completion
//!    is recorded ran to completion twice: shutdowns here are graceful
//!    (`step-completed-twice`, `body-rerun`).
//!
//! Child runs started by a program get the same checks.
//!
//! The interpreter's output is the *trace* of what its handler observed, in the
//! order it observed it (step results, timers fired, signals received or timed out,
//! which branch of a select won, the completion order of an unordered join), so
//! any difference in interleaving between live execution and replay shows up as a
//! different output.
//!
//! Knobs (environment): `REEL_DIFF_CASES` (default 200), `REEL_DIFF_BATCH` (programs
//! run concurrently on one host, default 8), `REEL_DIFF_SEED` (reproduces the
//! generated programs; timing still varies), `REEL_DIFF_KEEP_GOING=1` (run every
//! batch and tally the failures instead of stopping at the first failing batch),
//! `REEL_DIFF_SHRINK_SECS` (time spent shrinking a failure, default 60; 0 = off),
//! `REEL_DIFF_HANG_SECS` (how long a run may take, default 20), `REEL_DIFF_ONLY_SEQ=1`
//! (programs without concurrency: a check of the harness itself).
//!
//! Every case runs its program twice, on two hosts at once (one left alone, one shut
//! down and reopened), next to the other programs of its batch; a failure prints the
//! program, its signal schedule, the log and the seed, then shrinks it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reel::testing::{Replayed, replay};
use reel::{Ctx, Event, Host, RetryPolicy, RunHandle, RunStatus, Workflow};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// `Host::shutdown`, bounded: a shutdown that hangs is a failure of its own.
async fn bounded_shutdown(host: Host, when: &str) -> anyhow::Result<()> {
    match tokio::time::timeout(Duration::from_secs(30), host.shutdown()).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!("Host::shutdown hung for 30 s ({when})"),
    }
}

/// How long a run may take before the test calls it a hang (a program takes well
/// under a second); `REEL_DIFF_HANG_SECS` overrides it. Also bounds each replay.
const HANG: Duration = Duration::from_secs(20);
/// The same while shrinking, where a hang costs one try.
const SHRINK_HANG: Duration = Duration::from_secs(5);
const SIGNAL_NAMES: [&str; 3] = ["a", "b", "c"];
const STEP_NAMES: [&str; 4] = ["s0", "s1", "s2", "s3"];

// ---------------------------------------------------------------------------------
// The program AST and its interpreter.

/// A handler program. Durations are milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Node {
    /// `ctx.step_with(name, 3 attempts, backoff_ms)`; the body yields `yields` times,
    /// sleeps `body_sleep_ms`, and fails its first `fail_first` attempts (3 or more
    /// exhausts the attempts: the handler observes the `Error::Step`).
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
    /// A child run of `Interp` with this (wait-free) program.
    Child(Box<Node>),
    Seq(Vec<Node>),
    /// `try_join_all`.
    Join(Vec<Node>),
    /// `FuturesUnordered`; the trace records the completion order.
    Unordered(Vec<Node>),
    /// `select_all`: the first ready branch wins, the others are dropped.
    Select(Vec<Node>),
    /// `tokio::select!` over two branches (random polling order).
    Race(Box<Node>, Box<Node>),
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
            Node::Child(p) => write!(f, "child{{{p}}}"),
            Node::Seq(xs) => list(f, "seq", &xs.iter().collect::<Vec<_>>()),
            Node::Join(xs) => list(f, "join", &xs.iter().collect::<Vec<_>>()),
            Node::Unordered(xs) => list(f, "unordered", &xs.iter().collect::<Vec<_>>()),
            Node::Select(xs) => list(f, "select", &xs.iter().collect::<Vec<_>>()),
            Node::Race(a, b) => list(f, "race", &[a, b]),
        }
    }
}

/// The input of [`Interp`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Program {
    /// The run's own id, to derive its children's ids from. Not `Ctx::run_id()`:
    /// `reel::testing::replay` replays under the run id `replay`.
    run: String,
    root: Node,
}

/// What a handler evaluates a node with.
#[derive(Clone)]
struct Cx {
    ctx: Ctx,
    run: Arc<str>,
    trace: Trace,
}

/// What one execution of a handler observed, in order.
type Trace = Arc<Mutex<Vec<String>>>;
/// The traces of every execution of one run, in order.
type Executions = Arc<Mutex<Vec<Trace>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Executions of the runs on the test's hosts, by run id.
static LIVE_EXECUTIONS: Mutex<BTreeMap<String, Executions>> = Mutex::new(BTreeMap::new());
/// How often each step body returned `Ok`, by idempotency key (`run id/step id`).
static BODY_COMPLETIONS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());
/// Makes every run id of this process unique (shrinking reruns programs).
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);
/// Coverage figures: host restarts, and runs (children included) unfinished at one.
static RESTARTS: AtomicU64 = AtomicU64::new(0);
static RUNS_CUT: AtomicU64 = AtomicU64::new(0);

fn executions_of(run_id: &str) -> Executions {
    lock(&LIVE_EXECUTIONS)
        .entry(run_id.to_owned())
        .or_default()
        .clone()
}

/// Interprets a [`Node`]; its output is the trace of what the handler observed.
#[derive(Clone, Default)]
struct Interp {
    /// Where executions record their traces; `None`: [`LIVE_EXECUTIONS`].
    sink: Option<Executions>,
}

impl Workflow for Interp {
    const NAME: &'static str = "interp";
    type Input = Program;
    type Output = Vec<String>;

    async fn run(&self, ctx: Ctx, input: Program) -> reel::Result<Vec<String>> {
        let trace = Trace::default();
        let sink = match &self.sink {
            Some(s) => s.clone(),
            None => executions_of(ctx.run_id()),
        };
        lock(&sink).push(trace.clone());
        let cx = Cx {
            ctx,
            run: Arc::from(input.run),
            trace: trace.clone(),
        };
        eval(&cx, &input.root, "r").await?;
        let observed = lock(&trace).clone();
        Ok(observed)
    }
}

fn ms(n: u8) -> Duration {
    Duration::from_millis(u64::from(n))
}

fn note(trace: &Trace, what: String) {
    lock(trace).push(what);
}

fn child_run_id(parent: &str, path: &str) -> String {
    format!("{parent}/{path}")
}

/// Builds the future of `node`. Every primitive a node can call without waiting for
/// an earlier result is called here, eagerly, in tree order (the first child of a
/// `seq` included), so that ids never depend on the order futures are first polled
/// in (`tokio::select!` polls its branches in random order): the handler itself is
/// deterministic, and any difference between executions comes from what reel hands
/// it.
fn eval(cx: &Cx, node: &Node, path: &str) -> BoxFuture<'static, reel::Result<()>> {
    let (ctx, t) = (&cx.ctx, cx.trace.clone());
    let path = path.to_owned();
    match node {
        Node::Step {
            name,
            yields,
            body_sleep_ms,
            fail_first,
            backoff_ms,
        } => {
            let policy = RetryPolicy {
                max_attempts: 3,
                initial_backoff: ms(*backoff_ms),
                max_backoff: ms(*backoff_ms),
                multiplier: 1.0,
            };
            let (yields, body_sleep, fail_first) =
                (*yields, *body_sleep_ms, u32::from(*fail_first));
            let label = name.clone();
            let step = ctx.step_with(name, policy, move |s| {
                let label = label.clone();
                async move {
                    for _ in 0..yields {
                        tokio::task::yield_now().await;
                    }
                    if body_sleep > 0 {
                        tokio::time::sleep(ms(body_sleep)).await;
                    }
                    if s.attempt() <= fail_first {
                        return Err(format!("attempt {} fails", s.attempt()));
                    }
                    *lock(&BODY_COMPLETIONS)
                        .entry(s.idempotency_key().to_owned())
                        .or_default() += 1;
                    Ok(format!("{label}@{}", s.attempt()))
                }
            });
            let name = name.clone();
            Box::pin(async move {
                match step.await {
                    Ok(v) => note(&t, format!("{path} step {name} -> {v}")),
                    Err(reel::Error::Step { step, message }) => {
                        note(&t, format!("{path} step {name} failed ({step}: {message})"));
                    }
                    Err(e) => return Err(e),
                }
                Ok(())
            })
        }
        Node::Sleep { ms: d } => {
            let sleep = ctx.sleep(ms(*d));
            Box::pin(async move {
                sleep.await?;
                note(&t, format!("{path} slept"));
                Ok(())
            })
        }
        Node::Wait { name } => {
            let wait = ctx.wait_for_signal::<u32>(name);
            let name = name.clone();
            Box::pin(async move {
                let v = wait.await?;
                note(&t, format!("{path} signal {name} -> {v}"));
                Ok(())
            })
        }
        Node::WaitTimeout { name, ms: d } => {
            let wait = ctx.wait_for_signal_timeout::<u32>(name, ms(*d));
            let name = name.clone();
            Box::pin(async move {
                match wait.await? {
                    Some(v) => note(&t, format!("{path} signal {name} -> {v}")),
                    None => note(&t, format!("{path} signal {name} timed out")),
                }
                Ok(())
            })
        }
        Node::Approval { name } => {
            let wait = ctx.approval(name);
            let name = name.clone();
            Box::pin(async move {
                let a = wait.await?;
                note(
                    &t,
                    format!("{path} approval {name} -> {} {:?}", a.approved, a.feedback),
                );
                Ok(())
            })
        }
        Node::Now => {
            let now = ctx.now();
            Box::pin(async move {
                let at = now.await?;
                let at = at
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
                note(&t, format!("{path} now -> {at}"));
                Ok(())
            })
        }
        Node::Uuid => {
            let uuid = ctx.uuid();
            Box::pin(async move {
                let u = uuid.await?;
                note(&t, format!("{path} uuid -> {u}"));
                Ok(())
            })
        }
        Node::Random => {
            let random = ctx.random_u64();
            Box::pin(async move {
                let r = random.await?;
                note(&t, format!("{path} random -> {r}"));
                Ok(())
            })
        }
        Node::Child(program) => {
            let run = child_run_id(&cx.run, &path);
            let root = (**program).clone();
            let child = ctx.child::<Interp>(&run.clone(), Program { run, root });
            Box::pin(async move {
                let out = child.await?;
                note(&t, format!("{path} child -> [{}]", out.join("; ")));
                Ok(())
            })
        }
        Node::Seq(children) => {
            let first = children.first().map(|c| eval(cx, c, &format!("{path}.0")));
            let rest = children.iter().skip(1).cloned().collect::<Vec<_>>();
            let cx = cx.clone();
            Box::pin(async move {
                if let Some(first) = first {
                    first.await?;
                }
                for (i, c) in rest.iter().enumerate() {
                    eval(&cx, c, &format!("{path}.{}", i + 1)).await?;
                }
                Ok(())
            })
        }
        Node::Join(children) => {
            let branches = children
                .iter()
                .enumerate()
                .map(|(i, c)| eval(cx, c, &format!("{path}.{i}")))
                .collect::<Vec<_>>();
            Box::pin(async move {
                futures::future::try_join_all(branches).await?;
                note(&t, format!("{path} joined"));
                Ok(())
            })
        }
        Node::Unordered(children) => {
            let mut branches = children
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let branch = eval(cx, c, &format!("{path}.{i}"));
                    async move { (i, branch.await) }
                })
                .collect::<FuturesUnordered<_>>();
            Box::pin(async move {
                let mut order = Vec::new();
                while let Some((i, done)) = branches.next().await {
                    done?;
                    order.push(i);
                }
                note(&t, format!("{path} unordered finished in order {order:?}"));
                Ok(())
            })
        }
        Node::Select(children) => {
            let branches = children
                .iter()
                .enumerate()
                .map(|(i, c)| eval(cx, c, &format!("{path}.{i}")))
                .collect::<Vec<_>>();
            Box::pin(async move {
                if branches.is_empty() {
                    return Ok(());
                }
                let (won, i, losers) = futures::future::select_all(branches).await;
                drop(losers);
                won?;
                note(&t, format!("{path} select won by {i}"));
                Ok(())
            })
        }
        Node::Race(a, b) => {
            let a = eval(cx, a, &format!("{path}.0"));
            let b = eval(cx, b, &format!("{path}.1"));
            Box::pin(async move {
                let (i, won) = tokio::select! {
                    r = a => (0, r),
                    r = b => (1, r),
                };
                won?;
                note(&t, format!("{path} race won by {i}"));
                Ok(())
            })
        }
    }
}

/// The ids of the child runs a program may start, given its run id.
fn child_runs(node: &Node, run_id: &str, path: &str, out: &mut Vec<String>) {
    match node {
        Node::Child(_) => out.push(child_run_id(run_id, path)),
        Node::Seq(xs) | Node::Join(xs) | Node::Unordered(xs) | Node::Select(xs) => {
            for (i, x) in xs.iter().enumerate() {
                child_runs(x, run_id, &format!("{path}.{i}"), out);
            }
        }
        Node::Race(a, b) => {
            child_runs(a, run_id, &format!("{path}.0"), out);
            child_runs(b, run_id, &format!("{path}.1"), out);
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------
// Generation.

/// One generated case: a program, the delays of the signals and approvals its waits
/// need, and when the restarted copy's host is shut down and reopened.
#[derive(Clone, Debug)]
struct Case {
    program: Node,
    /// Delay of the k-th delivery (cycled), ms from the run's start.
    delivery_delays: Vec<u8>,
    /// Delays between the restarts of the restarted copy (used from the batch's first
    /// case).
    restart_delays: Vec<u8>,
}

/// A signal or approval sent to a run.
#[derive(Clone, Debug)]
struct Delivery {
    approval: bool,
    name: String,
    /// The k-th delivery of this name.
    k: u32,
    delay_ms: u8,
}

impl Case {
    fn input(&self, run: &str) -> Program {
        Program {
            run: run.to_owned(),
            root: self.program.clone(),
        }
    }

    /// One delivery per wait on each name, so no wait without deadline can hang
    /// (a wait that times out consumes none; a dropped select loser consumes at most
    /// one, as any wait does).
    fn deliveries(&self) -> Vec<Delivery> {
        fn walk(n: &Node, out: &mut Vec<(bool, String)>) {
            match n {
                Node::Wait { name } | Node::WaitTimeout { name, .. } => {
                    out.push((false, name.clone()));
                }
                Node::Approval { name } => out.push((true, name.clone())),
                Node::Seq(xs) | Node::Join(xs) | Node::Unordered(xs) | Node::Select(xs) => {
                    xs.iter().for_each(|x| walk(x, out));
                }
                Node::Race(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
                // Child programs are generated without waits.
                _ => {}
            }
        }
        let mut waits = Vec::new();
        walk(&self.program, &mut waits);
        let mut counts: BTreeMap<(bool, String), u32> = BTreeMap::new();
        waits
            .into_iter()
            .enumerate()
            .map(|(i, (approval, name))| {
                let k = counts.entry((approval, name.clone())).or_default();
                *k += 1;
                Delivery {
                    approval,
                    name,
                    k: *k,
                    delay_ms: self
                        .delivery_delays
                        .get(i % self.delivery_delays.len().max(1))
                        .copied()
                        .unwrap_or(0),
                }
            })
            .collect()
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "program: {}", self.program)?;
        let deliveries = self
            .deliveries()
            .iter()
            .map(|d| {
                let kind = if d.approval { "approval" } else { "signal" };
                format!("{kind} {}#{} at {}ms", d.name, d.k, d.delay_ms)
            })
            .collect::<Vec<_>>();
        writeln!(f, "deliveries: [{}]", deliveries.join(", "))?;
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

/// Leaves of a child program: no waits (nobody signals a child).
fn quiet_leaf() -> BoxedStrategy<Node> {
    prop_oneof![
        3 => step(),
        2 => duration().prop_map(|ms| Node::Sleep { ms }),
        1 => Just(Node::Now),
        1 => Just(Node::Random),
    ]
    .boxed()
}

fn composite(inner: BoxedStrategy<Node>) -> BoxedStrategy<Node> {
    if only_sequences() {
        return vec(inner, 1..4).prop_map(Node::Seq).boxed();
    }
    prop_oneof![
        vec(inner.clone(), 1..4).prop_map(Node::Seq),
        vec(inner.clone(), 1..4).prop_map(Node::Join),
        vec(inner.clone(), 1..4).prop_map(Node::Unordered),
        vec(inner.clone(), 2..4).prop_map(Node::Select),
        (inner.clone(), inner).prop_map(|(a, b)| Node::Race(Box::new(a), Box::new(b))),
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
        1 => child_program().prop_map(|p| Node::Child(Box::new(p))),
    ]
    .boxed()
}

fn case() -> BoxedStrategy<Case> {
    (
        leaf().prop_recursive(3, 12, 3, composite),
        vec(0u8..=60, 16),
        vec(0u8..=50, 1..=3),
    )
        .prop_map(|(program, delivery_delays, restart_delays)| Case {
            program,
            delivery_delays,
            restart_delays,
        })
        .boxed()
}

// ---------------------------------------------------------------------------------
// Running and checking.

/// A property that did not hold, with what shows it.
#[derive(Clone, Debug)]
struct Failure {
    kind: &'static str,
    detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.kind, self.detail)
    }
}

fn fail(kind: &'static str, detail: String) -> Failure {
    Failure { kind, detail }
}

type Handles = Arc<BTreeMap<String, RunHandle<Interp>>>;

async fn open(dir: &std::path::Path) -> anyhow::Result<Host> {
    Ok(Host::builder()
        .path(dir)
        .register(Interp::default())
        .build()
        .await?)
}

fn handles(host: &Host, ids: &[String]) -> Handles {
    Arc::new(
        ids.iter()
            .map(|id| (id.clone(), host.handle::<Interp>(id)))
            .collect(),
    )
}

/// Sends one delivery after its delay, through whichever host is open: a send that
/// fails (host shutting down) is retried on the next host. The signal id is fixed,
/// so a retried signal is delivered once.
async fn deliver(
    mut hosts: watch::Receiver<Option<Handles>>,
    run_id: String,
    d: Delivery,
    errors: Arc<Mutex<Vec<(String, String)>>>,
) {
    tokio::time::sleep(ms(d.delay_ms)).await;
    loop {
        let handle = hosts
            .borrow_and_update()
            .as_ref()
            .and_then(|h| h.get(&run_id).cloned());
        if let Some(h) = handle {
            let sent = if d.approval {
                h.approve(&d.name, d.k % 2 == 1, Some(format!("{}-{}", d.name, d.k)))
                    .await
            } else {
                let payload = 100 * d.k + u32::from(d.delay_ms);
                h.signal(&d.name, &payload, &format!("{}-{}", d.name, d.k))
                    .await
            };
            match sent {
                Ok(()) | Err(reel::Error::RunFinished(_)) => return,
                Err(e) => lock(&errors).push((run_id.clone(), format!("{d:?}: {e}"))),
            }
        }
        if hosts.changed().await.is_err() {
            return;
        }
    }
}

/// Checks a finished run's log against its output.
async fn check_run(run_id: &str, output: &[String], events: &[Event]) -> Result<(), Failure> {
    // Replay of the whole log.
    let whole = tokio::time::timeout(HANG, replay(Interp::default(), events))
        .await
        .map_err(|_| {
            fail(
                "replay-hang",
                format!("run {run_id}: replay did not finish"),
            )
        })?;
    match whole {
        Ok(Replayed::Completed(replayed)) if replayed == output => {}
        Ok(Replayed::Completed(replayed)) => {
            return Err(fail(
                "replay-output-differs",
                format!(
                    "run {run_id}:\n  live:     {output:?}\n  replayed: {replayed:?}\n  log: {}",
                    show_log(events)
                ),
            ));
        }
        Ok(other) => {
            return Err(fail(
                "replay-not-completed",
                format!(
                    "run {run_id}: {other:?}\n  live: {output:?}\n  log: {}",
                    show_log(events)
                ),
            ));
        }
        Err(e) => {
            return Err(fail(
                "replay-error",
                format!(
                    "run {run_id}: {e}\n  live: {output:?}\n  log: {}",
                    show_log(events)
                ),
            ));
        }
    }

    // Every execution of the live run observed a prefix of the output.
    let executions = executions_of(run_id);
    let executions = lock(&executions).clone();
    for (i, e) in executions.iter().enumerate() {
        let seen = lock(e).clone();
        if !output.starts_with(&seen) {
            return Err(fail(
                "execution-not-prefix",
                format!(
                    "run {run_id}: execution {} of {} observed\n  {seen:?}\n  final output\n  {output:?}\n  log: {}",
                    i + 1,
                    executions.len(),
                    show_log(events)
                ),
            ));
        }
    }

    // Replays of every prefix of the log: no divergence, and observations that are a
    // prefix of the output.
    let prefixes = if std::env::var("REEL_DIFF_PREFIXES").is_ok_and(|v| v == "0") {
        0
    } else {
        events.len()
    };
    for n in 1..prefixes {
        let sink = Executions::default();
        let prefix = &events[..n];
        let r = tokio::time::timeout(
            HANG,
            replay(
                Interp {
                    sink: Some(sink.clone()),
                },
                prefix,
            ),
        )
        .await
        .map_err(|_| {
            fail(
                "replay-hang",
                format!("run {run_id}: replay of the first {n} events"),
            )
        })?;
        let seen = lock(&sink)
            .first()
            .map(|t| lock(t).clone())
            .unwrap_or_default();
        let bad = match &r {
            Ok(Replayed::Pending(_)) => !output.starts_with(&seen),
            Ok(Replayed::Completed(o)) => o != output,
            _ => true,
        };
        if bad {
            return Err(fail(
                "prefix-replay",
                format!(
                    "run {run_id}: replay of the first {n} of {} events gave {r:?}, observing\n  {seen:?}\n  final output\n  {output:?}\n  log: {}",
                    events.len(),
                    show_log(events)
                ),
            ));
        }
    }

    // Steps: one completion per id, and a recorded body ran to completion once.
    let mut completed: BTreeMap<&str, u32> = BTreeMap::new();
    for e in events {
        if let Event::StepCompleted { id, .. } = e {
            *completed.entry(id.as_str()).or_default() += 1;
        }
    }
    if let Some((id, n)) = completed.iter().find(|(_, n)| **n > 1) {
        return Err(fail(
            "step-completed-twice",
            format!("run {run_id}: step `{id}` completed {n} times in the log"),
        ));
    }
    let bodies = lock(&BODY_COMPLETIONS).clone();
    for id in completed.keys() {
        let n = bodies.get(&format!("{run_id}/{id}")).copied().unwrap_or(0);
        if n > 1 {
            return Err(fail(
                "body-rerun",
                format!("run {run_id}: body of recorded step `{id}` ran to completion {n} times"),
            ));
        }
    }
    Ok(())
}

/// The log in short, for failure reports.
fn show_log(events: &[Event]) -> String {
    let lines = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let s = match e {
                Event::RunStarted { .. } => "RunStarted".to_owned(),
                Event::StepStarted { id, attempt } => format!("StepStarted({id}, {attempt})"),
                Event::StepCompleted { id, .. } => format!("StepCompleted({id})"),
                Event::StepFailed {
                    id,
                    attempt,
                    retry_at,
                    ..
                } => format!("StepFailed({id}, {attempt}, retry={})", retry_at.is_some()),
                Event::TimerScheduled { id, .. } => format!("TimerScheduled({id})"),
                Event::TimerFired { id } => format!("TimerFired({id})"),
                Event::SignalAwaited { id, name, deadline } => format!(
                    "SignalAwaited({id}, {name}{})",
                    if deadline.is_some() { ", deadline" } else { "" }
                ),
                Event::SignalReceived {
                    name, signal_id, ..
                } => format!("SignalReceived({name}, {signal_id})"),
                Event::Recorded { id, .. } => format!("Recorded({id})"),
                Event::ChildStarted { id, run_id, .. } => format!("ChildStarted({id}, {run_id})"),
                Event::ChildCompleted { id, .. } => format!("ChildCompleted({id})"),
                Event::RunCompleted { .. } => "RunCompleted".to_owned(),
                other => format!("{other:?}"),
            };
            format!("{i}:{s}")
        })
        .collect::<Vec<_>>();
    lines.join(" ")
}

/// Waits for a run (and the child runs it started) to finish and checks them.
async fn finish_and_check(
    host: &Host,
    run_id: &str,
    program: &Node,
    hang: Duration,
) -> Result<(), Failure> {
    let out = settle(host, run_id, hang).await?;
    let Some(out) = out else {
        return Err(fail("run-cancelled", format!("run {run_id} was cancelled")));
    };
    let events = host
        .handle::<Interp>(run_id)
        .events()
        .await
        .map_err(|e| fail("events", format!("run {run_id}: {e}")))?;
    check_run(run_id, &out, &events).await?;
    let mut children = Vec::new();
    child_runs(program, run_id, "r", &mut children);
    for child in children {
        let h = host.handle::<Interp>(&child);
        if matches!(h.status().await, Err(reel::Error::UnknownRun(_))) {
            continue; // never started: its node was in a branch dropped before it ran
        }
        // A child may be cancelled with its parent's dropped branch.
        if let Some(out) = settle(host, &child, hang).await? {
            let events = h
                .events()
                .await
                .map_err(|e| fail("events", format!("run {child}: {e}")))?;
            check_run(&child, &out, &events).await?;
        }
    }
    Ok(())
}

/// A run's output; `None` if it was cancelled.
async fn settle(host: &Host, run_id: &str, hang: Duration) -> Result<Option<Vec<String>>, Failure> {
    let h = host.handle::<Interp>(run_id);
    match tokio::time::timeout(hang, h.result()).await {
        Ok(Ok(out)) => Ok(Some(out)),
        Ok(Err(reel::Error::Cancelled(_))) => Ok(None),
        Ok(Err(e)) => {
            let log = h.events().await.map(|e| show_log(&e)).unwrap_or_default();
            Err(fail(
                "run-failed",
                format!("run {run_id}: {e}\n  log: {log}"),
            ))
        }
        Err(_) => {
            let status = h.status().await;
            let log = h.events().await.map(|e| show_log(&e)).unwrap_or_default();
            Err(fail(
                "hang",
                format!("run {run_id} not finished after {hang:?}: {status:?}\n  log: {log}"),
            ))
        }
    }
}

/// Runs each case twice, concurrently with the others: once on a host left alone
/// (live) and once on a host shut down and reopened after the delays of the first
/// case's `restart_delays`. Returns one verdict per case.
async fn run_batch(cases: &[Case], hang: Duration) -> anyhow::Result<Vec<Result<(), Failure>>> {
    let live_dir = tempfile::tempdir()?;
    let restart_dir = tempfile::tempdir()?;
    let live_host = open(live_dir.path()).await?;
    let mut restart_host = open(restart_dir.path()).await?;
    let errors = Arc::new(Mutex::new(Vec::<(String, String)>::new()));

    let mut live_ids = Vec::new();
    let mut restart_ids = Vec::new();
    for c in cases {
        let n = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let (l, r) = (format!("p{n}-live"), format!("p{n}-restart"));
        live_host.start::<Interp>(&l, c.input(&l)).await?;
        restart_host.start::<Interp>(&r, c.input(&r)).await?;
        live_ids.push(l);
        restart_ids.push(r);
    }
    let (_live_tx, live_rx) = watch::channel(Some(handles(&live_host, &live_ids)));
    let (restart_tx, restart_rx) = watch::channel(Some(handles(&restart_host, &restart_ids)));
    let mut senders = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        for d in c.deliveries() {
            senders.push(tokio::spawn(deliver(
                live_rx.clone(),
                live_ids[i].clone(),
                d.clone(),
                errors.clone(),
            )));
            senders.push(tokio::spawn(deliver(
                restart_rx.clone(),
                restart_ids[i].clone(),
                d,
                errors.clone(),
            )));
        }
    }

    let live = futures::future::join_all(
        cases
            .iter()
            .zip(&live_ids)
            .map(|(c, id)| finish_and_check(&live_host, id, &c.program, hang)),
    );
    let restarted = async {
        let delays = cases
            .first()
            .map(|c| c.restart_delays.clone())
            .unwrap_or_default();
        for d in delays {
            tokio::time::sleep(ms(d)).await;
            let unfinished = restart_host
                .runs()
                .await?
                .iter()
                .filter(|r| !matches!(r.status, RunStatus::Completed | RunStatus::Failed { .. }))
                .count();
            RESTARTS.fetch_add(1, Ordering::Relaxed);
            RUNS_CUT.fetch_add(unfinished as u64, Ordering::Relaxed);
            restart_tx.send_replace(None);
            bounded_shutdown(restart_host, "mid-run restart").await?;
            restart_host = open(restart_dir.path()).await?;
            restart_tx.send_replace(Some(handles(&restart_host, &restart_ids)));
        }
        let verdicts = futures::future::join_all(
            cases
                .iter()
                .zip(&restart_ids)
                .map(|(c, id)| finish_and_check(&restart_host, id, &c.program, hang)),
        )
        .await;
        anyhow::Ok((verdicts, restart_host))
    };
    let (live, restarted) = tokio::join!(live, restarted);
    let (restarted, restart_host) = restarted?;
    for s in &senders {
        s.abort();
    }
    bounded_shutdown(live_host, "end of batch (live host)").await?;
    bounded_shutdown(restart_host, "end of batch (restarted host)").await?;

    let errors = lock(&errors).clone();
    let with_deliveries = |mut f: Failure, host: &str, run: &str| {
        f.detail = format!("({host} host) {}", f.detail);
        let failed = errors
            .iter()
            .filter(|(r, _)| r == run)
            .map(|(_, e)| e.as_str())
            .collect::<Vec<_>>();
        if f.kind == "hang" && !failed.is_empty() {
            f.detail = format!("{}\n  failed deliveries (retried): {failed:?}", f.detail);
        }
        f
    };
    Ok(live
        .into_iter()
        .zip(restarted)
        .enumerate()
        .map(|(i, (l, r))| {
            l.map_err(|f| with_deliveries(f, "live", &live_ids[i]))
                .and(r.map_err(|f| with_deliveries(f, "restarted", &restart_ids[i])))
        })
        .collect())
}

/// Whether `case` fails, trying it four times at once (failures depend on timing).
async fn fails(case: &Case) -> anyhow::Result<Option<Failure>> {
    let verdicts = run_batch(&vec![case.clone(); 4], SHRINK_HANG).await?;
    Ok(verdicts.into_iter().find_map(Result::err))
}

/// Shrinks a failing case with proptest's value tree, within a time budget.
async fn shrink(
    mut tree: Box<dyn ValueTree<Value = Case>>,
    failure: Failure,
    budget: Duration,
) -> anyhow::Result<(Case, Failure, usize)> {
    let deadline = Instant::now() + budget;
    let mut best = (tree.current(), failure);
    let mut tries = 0;
    if budget.is_zero() || !tree.simplify() {
        return Ok((best.0, best.1, tries));
    }
    while Instant::now() < deadline {
        tries += 1;
        let candidate = tree.current();
        match fails(&candidate).await? {
            // Only the same kind of failure: another kind is another bug.
            Some(f) if f.kind == best.1.kind => {
                best = (candidate, f);
                if !tree.simplify() {
                    break;
                }
            }
            _ => {
                if !tree.complicate() {
                    break;
                }
            }
        }
    }
    Ok((best.0, best.1, tries))
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&seed.rotate_left(i as u32 * 16).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_agrees_with_live_runs_of_random_programs() -> anyhow::Result<()> {
    let cases = env_u64("REEL_DIFF_CASES", 200) as usize;
    let batch = env_u64("REEL_DIFF_BATCH", 8).max(1) as usize;
    let keep_going = std::env::var("REEL_DIFF_KEEP_GOING").is_ok_and(|v| v == "1");
    let shrink_budget = Duration::from_secs(env_u64("REEL_DIFF_SHRINK_SECS", 60));
    let hang = Duration::from_secs(env_u64("REEL_DIFF_HANG_SECS", HANG.as_secs()));
    let seed = env_u64(
        "REEL_DIFF_SEED",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    );
    eprintln!("replay_differential: {cases} cases, batches of {batch}, REEL_DIFF_SEED={seed}");

    let mut runner = TestRunner::new_with_rng(Config::default(), rng(seed));
    let strategy = case();
    let started = Instant::now();
    let mut tally: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut examples: BTreeMap<&'static str, (usize, Case, Failure)> = BTreeMap::new();
    let mut first: Option<(usize, Case, Failure)> = None;
    let mut first_tree = None;
    let mut done = 0;
    while done < cases {
        let n = batch.min(cases - done);
        let mut trees = Vec::with_capacity(n);
        for _ in 0..n {
            trees.push(
                strategy
                    .new_tree(&mut runner)
                    .map_err(|e| anyhow::anyhow!("generating a case: {e}"))?,
            );
        }
        let batch_cases = trees.iter().map(|t| t.current()).collect::<Vec<_>>();
        let verdicts = run_batch(&batch_cases, hang).await?;
        for (i, (verdict, tree)) in verdicts.into_iter().zip(trees).enumerate() {
            if let Err(f) = verdict {
                *tally.entry(f.kind).or_default() += 1;
                examples
                    .entry(f.kind)
                    .or_insert_with(|| (done + i, batch_cases[i].clone(), f.clone()));
                if first.is_none() {
                    first = Some((done + i, batch_cases[i].clone(), f));
                    first_tree = Some(tree);
                }
            }
        }
        done += n;
        if first.is_some() && !keep_going {
            break;
        }
    }
    let elapsed = started.elapsed();
    let executions = lock(&LIVE_EXECUTIONS)
        .values()
        .map(|e| lock(e).len())
        .collect::<Vec<_>>();
    eprintln!(
        "replay_differential: {done} cases in {elapsed:.1?}; {} runs (children included), \
         {} executions; {} host restarts cut {} unfinished runs",
        executions.len(),
        executions.iter().sum::<usize>(),
        RESTARTS.load(Ordering::Relaxed),
        RUNS_CUT.load(Ordering::Relaxed),
    );

    if keep_going {
        for (index, case, failure) in examples.values() {
            eprintln!(
                "\nreplay_differential: first {} (case {index}):\n{case}\n{failure}",
                failure.kind
            );
        }
    }
    let (Some((index, case, failure)), Some(tree)) = (first, first_tree) else {
        return Ok(());
    };
    eprintln!(
        "replay_differential: case {index} (REEL_DIFF_SEED={seed}) failed: {failure}\n{case}\nfailures by kind: {tally:?}\nshrinking for up to {shrink_budget:?}..."
    );
    let (small, small_failure, tries) = shrink(tree, failure.clone(), shrink_budget).await?;
    anyhow::bail!(
        "replay differs from live execution.\n\
         seed: REEL_DIFF_SEED={seed}, case {index} of {done}; failures by kind: {tally:?}\n\
         first failure:\n{case}\n{failure}\n\n\
         shrunk ({tries} tries):\n{small}\n{small_failure}"
    )
}
