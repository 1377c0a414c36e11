//! Acceptance, ported from peers' own test suites: cancellation and
//! continue-as-new, and the races between them and a run's lifecycle (a step
//! body running, a `select!` deciding, a segment switch being written, a
//! parked or paused run, a start, a supervisor restart, recovery after a
//! restart, passivation, a kill -9). Each test names the peer test
//! it ports (Temporal sdk-core and Go SDK, duroxide, DBOS, Restate e2e) and
//! asserts exact outcomes: the result or typed error, `status()`, the log, and
//! how often each step body really ran.
//!
//! Every store is a real fjall store in a temp dir (some behind a `FaultStore`
//! that holds one write's answer, to order a race exactly). Nothing waits on the
//! wall clock for an event: step bodies wait on gates the test opens, a test
//! clock stands still unless moved, and every wait has a deadline (`within`).

mod common;
mod peers_cancel_can;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{Counter, Gate, within};
use reel::testing::{Replayed, TestClock};
use reel::{
    Ctx, Error, Event, FjallStore, Host, RetryPolicy, RunStatus, StatusKind, StepError, Workflow,
};
use reel_storage::testing::{Fault, FaultStore, Op};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Bumps its counter when dropped: a step body holds one, so the test learns
/// when the body is gone, whether it finished or was dropped mid-way.
struct OnDrop(Counter);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.bump();
    }
}

/// What a test sees of one step body: how often it started, finished and went
/// away (finished or dropped), and the gate it waits on before finishing.
#[derive(Clone)]
struct Probe {
    started: Counter,
    finished: Counter,
    ended: Counter,
    release: Arc<Gate>,
}

impl Probe {
    fn new() -> Probe {
        Probe {
            started: Counter::default(),
            finished: Counter::default(),
            ended: Counter::default(),
            release: Arc::new(Gate::new()),
        }
    }

    /// A body: counts its start, waits for the gate, counts its end.
    async fn body(&self, value: u32) -> Result<u32, String> {
        self.started.bump();
        let _gone = OnDrop(self.ended.clone());
        self.release.wait().await;
        self.finished.bump();
        Ok(value)
    }
}

/// Polls `done` (a counter, mostly) until it holds, for at most `LIMIT`.
async fn until(what: &str, done: impl Fn() -> bool) -> anyhow::Result<()> {
    within(LIMIT, what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
}

/// Reads the status of `id` until `ok` holds; a run not created yet (a child
/// is created after its parent's write) reads as "not yet".
async fn until_status(
    host: &Host,
    id: &str,
    what: &str,
    ok: impl Fn(&RunStatus) -> bool,
) -> anyhow::Result<RunStatus> {
    let run = host.run(id);
    within(LIMIT, what, async {
        loop {
            match run.status().await {
                Ok(s) if ok(&s) => return anyhow::Ok(s),
                Ok(_) | Err(Error::UnknownRun(_)) => {}
                Err(e) => return Err(e.into()),
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?
}

fn count(events: &[Event], pick: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| pick(e)).count()
}

fn completed(events: &[Event], step: &str) -> usize {
    count(
        events,
        |e| matches!(e, Event::StepCompleted { id, .. } if id == step),
    )
}

fn cancel_requests(events: &[Event]) -> usize {
    count(events, |e| matches!(e, Event::CancelRequested { .. }))
}

fn hops(events: &[Event]) -> usize {
    count(events, |e| matches!(e, Event::ContinuedAsNew { .. }))
}

fn position(events: &[Event], pick: impl Fn(&Event) -> bool) -> Option<usize> {
    events.iter().position(pick)
}

/// The log ends with `RunCancelled` whose reason is `reason`, and holds no other
/// terminal event.
fn ends_cancelled(events: &[Event], reason: &str) {
    match events.last() {
        Some(Event::RunCancelled { reason: r }) => assert_eq!(r, reason, "{events:?}"),
        other => panic!("the log ends with {other:?}, not RunCancelled: {events:?}"),
    }
    assert_eq!(count(events, Event::is_terminal), 1, "{events:?}");
}

/// `Err(Error::Cancelled(reason))`, exactly.
fn is_cancelled<T: std::fmt::Debug>(out: &reel::Result<T>, reason: &str) -> bool {
    matches!(out, Err(Error::Cancelled(r)) if r == reason)
}

// A child workflow the tests of several topics share.

/// What a [`Kid`] does.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Mode {
    /// Completes at once with 1.
    Done,
    /// Fails at once (a non-retryable step).
    Fail,
    /// Waits for `go` and returns it.
    Wait,
    /// Runs a step whose body waits on the `busy` probe's gate.
    Busy,
    /// Runs a step that always fails, with an hour between attempts.
    Backoff,
    /// Sleeps an hour, then returns 4.
    Nap,
}

#[derive(Clone)]
struct Kid {
    busy: Probe,
    attempts: Counter,
}

impl Kid {
    fn new() -> Kid {
        Kid {
            busy: Probe::new(),
            attempts: Counter::default(),
        }
    }
}

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = Mode;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mode: Mode) -> reel::Result<u32> {
        match mode {
            Mode::Done => Ok(1),
            Mode::Fail => {
                ctx.step("fail", |_| async {
                    Err::<u32, _>(StepError::non_retryable("no"))
                })
                .await
            }
            Mode::Wait => ctx.wait_for_signal::<u32>("go").await,
            Mode::Busy => ctx.step("busy", |_| self.busy.body(3)).await,
            Mode::Backoff => {
                let policy = RetryPolicy::default()
                    .with_max_attempts(5)
                    .with_backoff(HOUR, HOUR);
                ctx.step_with("flaky", policy, |_| async {
                    self.attempts.bump();
                    Err::<u32, String>("flaky".into())
                })
                .await
            }
            Mode::Nap => {
                ctx.sleep(HOUR).await?;
                Ok(4)
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A cancel and continue-as-new under SIGKILL.

const KILL_ENV: &str = "REEL_PEERS_CANCEL_CAN_KILL_DIR";
const GRINDERS: usize = 6;

/// Three steps a segment, then continues as new (for ever); on a cancel, a
/// shielded cleanup step, then the cancellation. Every body appends its
/// idempotency key to a side file and prints `exec`.
#[derive(Clone)]
struct Grinder {
    side: PathBuf,
}

fn note(side: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(side)?;
    f.write_all(format!("{line}\n").as_bytes())?;
    println!("exec");
    std::io::stdout().flush()
}

impl Workflow for Grinder {
    const NAME: &'static str = "grinder";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        let work = async {
            for _ in 0..3 {
                ctx.step("tick", |s| async move {
                    note(&self.side, s.idempotency_key()).map(|()| segment)
                })
                .await?;
            }
            ctx.continue_as_new::<Grinder>(segment + 1).await
        };
        match work.await {
            Err(Error::Cancelled(why)) => {
                ctx.shielded()
                    .step("cleanup", |s| async move {
                        note(&self.side, &format!("cleanup {}", s.idempotency_key())).map(|()| 0u32)
                    })
                    .await?;
                Err(Error::Cancelled(why))
            }
            other => other,
        }
    }
}

fn open_grinders(dir: &Path) -> impl Future<Output = reel::Result<Host>> {
    common::hosts::open(
        dir.join("store"),
        Grinder {
            side: dir.join("bodies.log"),
        },
    )
}

/// Starts the runs (again: starts are idempotent), waits until each has
/// reached its third segment or ended, asks each to cancel, and waits for
/// every end.
async fn drive_grinders(host: &Host) -> Vec<reel::Result<u32>> {
    let mut runs = Vec::new();
    for r in 0..GRINDERS {
        let run = host
            .start::<Grinder>(&format!("grinder-{r}"), 0)
            .await
            .expect("start");
        runs.push(run);
    }
    for run in &runs {
        loop {
            let info = run.info().await.expect("info");
            let live = matches!(
                info.status.kind(),
                StatusKind::Running | StatusKind::Suspended
            );
            if info.segment >= 3 || !live {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        match run.request_cancel("stop").await {
            Ok(()) | Err(Error::RunFinished(_)) => {}
            Err(e) => panic!("cancel: {e:?}"),
        }
    }
    let mut out = Vec::new();
    for run in &runs {
        out.push(run.result().await);
    }
    out
}

/// Ports Restate e2e `Cancellation.kt` (an invocation blocked in a call, a
/// sleep or an awakeable is cancelled, observes the cancellation and its
/// cleanup is verified) and sdk-core `cancel_wf.rs` together with duroxide's
/// `cancel_continue_as_new_second_exec`, across process deaths: a child process
/// drives runs that continue as new every three steps and asks them to cancel,
/// and is SIGKILLed at random moments, several times. After a final reopen
/// every run ends `Cancelled("stop")`, its shielded cleanup recorded exactly
/// once and in its last segment, no step recorded twice in a segment, and
/// every recorded step's body really ran.
#[test]
fn sigkill_around_cancels_of_runs_that_continue_as_new() {
    if let Ok(dir) = std::env::var(KILL_ENV) {
        common::kill::drive_child(open_grinders(Path::new(&dir)), drive_grinders);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let kills = common::kill::Rounds {
        test: "sigkill_around_cancels_of_runs_that_continue_as_new",
        env: KILL_ENV,
        rounds: 6,
        marker: "exec",
        done: "all-done",
        min: 5,
        spread: 60,
    }
    .run(dir.path());
    assert!(kills > 0, "the child was never killed");

    let rt = common::kill::runtime();
    rt.block_on(async {
        let host = open_grinders(dir.path()).await.expect("reopen");
        let results = within(LIMIT, "every end", drive_grinders(&host))
            .await
            .expect("ends");
        let side = std::fs::read_to_string(dir.path().join("bodies.log")).unwrap_or_default();
        let ran: BTreeSet<&str> = side.lines().collect();
        for (r, out) in results.iter().enumerate() {
            let id = format!("grinder-{r}");
            assert!(is_cancelled(out, "stop"), "{id}: {out:?}");
            let run = host.handle::<Grinder>(&id);
            assert_eq!(run.status().await.expect("status"), RunStatus::Cancelled);
            let events = run.events().await.expect("events");
            ends_cancelled(&events, "stop");
            assert_eq!(completed(&events, "cleanup"), 1, "{id}: {events:?}");
            let last_start = events
                .iter()
                .rposition(|e| matches!(e, Event::RunStarted { .. }))
                .expect("a start");
            assert_eq!(completed(&events[last_start..], "cleanup"), 1, "{id}");
            // Split into segments: no step id recorded twice in one.
            let mut segment = BTreeSet::new();
            for e in &events {
                match e {
                    Event::RunStarted { .. } => segment.clear(),
                    Event::StepCompleted { id: step, .. } => {
                        assert!(
                            segment.insert(step.clone()),
                            "{id}: {step} twice: {events:?}"
                        )
                    }
                    _ => {}
                }
            }
            let cleanups = side
                .lines()
                .filter(|l| l.starts_with("cleanup ") && l.contains(&id))
                .count();
            assert!(cleanups >= 1, "{id}: the cleanup body never ran");
            let ticks = ran
                .iter()
                .filter(|l| l.starts_with(&format!("{id}%")) || l.starts_with(&format!("{id}/")))
                .count();
            let recorded = count(
                &events,
                |e| matches!(e, Event::StepCompleted { id, .. } if id.starts_with("tick")),
            );
            assert!(
                ticks >= recorded,
                "{id}: recorded steps whose bodies never ran"
            );
        }
        host.shutdown().await.expect("shutdown");
    });
}
