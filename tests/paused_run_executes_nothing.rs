//! `AnyRun::pause` stops a run's handler; what wakes it meanwhile (a signal, a
//! timer coming due) is recorded and reaches the handler, in log order, when it is
//! resumed. The pause survives a host restart (recovery does not run a paused
//! handler). A step body running when the pause comes finishes and is recorded
//! once. A paused run that is cancelled ends at once. Wrong states and unknown runs
//! get typed errors and change nothing.

mod common;

use std::time::{Duration, UNIX_EPOCH};

use common::{Counter, Gate, until_log, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
/// The timer of `TimerAndSignal`, on a `TestClock` the test moves.
const NAP: Duration = Duration::from_secs(3600);

fn clock() -> TestClock {
    TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
}

/// Waits for a timer and a signal together, then runs a step.
struct TimerAndSignal {
    after: Counter,
}
impl Workflow for TimerAndSignal {
    const NAME: &'static str = "timer-and-signal";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let (_, x) = futures::try_join!(ctx.sleep(NAP), ctx.wait_for_signal::<u32>("x"))?;
        let after = self.after.clone();
        ctx.step("after", move |_| {
            after.bump();
            async move { Ok::<_, String>(x + 1) }
        })
        .await
    }
}

fn build(path: &std::path::Path, clock: &TestClock, after: &Counter) -> reel::HostBuilder {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(TimerAndSignal {
            after: after.clone(),
        })
}

fn position(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
    events
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("no such event in {events:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_records_wake_ups_across_a_restart_and_applies_them_on_resume()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let after = Counter::default();
    let clock = clock();
    let host = build(dir.path(), &clock, &after).build().await?;
    let run = host.start::<TimerAndSignal>("p1", ()).await?;
    within(LIMIT, "the run to wait", run.wait_until_suspended()).await??;

    run.pause().await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    assert_eq!(run.status().await?.kind(), StatusKind::Paused);
    run.pause().await?; // idempotent
    run.signal("x", &41u32, "x-1").await?;
    until_log(&run, LIMIT, "the signal recorded while paused", |e| {
        e.iter()
            .any(|e| matches!(e, Event::SignalReceived { name, .. } if name == "x"))
    })
    .await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    host.shutdown().await?;

    // The timer comes due while no host runs: the new host records it, and does
    // not run the handler.
    clock.advance(NAP);
    let host = build(dir.path(), &clock, &after).build().await?;
    let run = host.handle::<TimerAndSignal>("p1");
    let events = until_log(&run, LIMIT, "the timer recorded while paused", |e| {
        e.iter().any(|e| matches!(e, Event::TimerFired { .. }))
    })
    .await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    assert_eq!(after.get(), 0, "a paused run ran a step");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepStarted { .. })),
        "{events:?}"
    );

    run.resume().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 42);
    assert_eq!(after.get(), 1);
    let events = run.events().await?;
    let signal = position(&events, |e| matches!(e, Event::SignalReceived { .. }));
    let fired = position(&events, |e| matches!(e, Event::TimerFired { .. }));
    let step = position(&events, |e| matches!(e, Event::StepStarted { .. }));
    assert!(signal < step && fired < step, "{events:?}");
    host.shutdown().await?;
    Ok(())
}

static SLOW: Gate = Gate::new();
/// Opened by the slow step's body once it runs.
static SLOW_RUNS: Gate = Gate::new();

/// A step that waits for the test's gate, then another step.
struct TwoSteps {
    slow: Counter,
    next: Counter,
}
impl Workflow for TwoSteps {
    const NAME: &'static str = "two-steps";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let slow = self.slow.clone();
        let a: u32 = ctx
            .step("slow", move |_| {
                slow.bump();
                async {
                    SLOW_RUNS.open();
                    SLOW.wait().await;
                    Ok::<_, String>(1)
                }
            })
            .await?;
        let next = self.next.clone();
        let b: u32 = ctx
            .step("next", move |_| {
                next.bump();
                async { Ok::<_, String>(2) }
            })
            .await?;
        Ok(a + b)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_running_when_the_run_is_paused_finishes_and_is_recorded_once() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let (slow, next) = (Counter::default(), Counter::default());
    let host = common::hosts::open(
        dir.path(),
        TwoSteps {
            slow: slow.clone(),
            next: next.clone(),
        },
    )
    .await?;
    let run = host.start::<TwoSteps>("s1", ()).await?;
    // Its body runs (the `StepStarted` in the log is no proof: a new run's first
    // write holds it before the body may start, and a run paused before its body
    // started runs nothing).
    within(LIMIT, "the slow step's body to run", SLOW_RUNS.wait()).await?;
    run.pause().await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    SLOW.open();
    until_log(&run, LIMIT, "the slow step's result", |e| {
        e.iter()
            .any(|e| matches!(e, Event::StepCompleted { id, .. } if id == "slow"))
    })
    .await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    host.shutdown().await?;
    assert_eq!(next.get(), 0, "the paused run went on to its next step");

    // Still paused after a restart, its finished step recorded.
    let host = common::hosts::open(
        dir.path(),
        TwoSteps {
            slow: slow.clone(),
            next: next.clone(),
        },
    )
    .await?;
    let run = host.handle::<TwoSteps>("s1");
    assert_eq!(run.status().await?, RunStatus::Paused);
    run.resume().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 3);
    assert_eq!((slow.get(), next.get()), (1, 1));
    let events = run.events().await?;
    let slow_events = events
        .iter()
        .filter(|e| {
            matches!(e, Event::StepStarted { id, .. } | Event::StepCompleted { id, .. } if id == "slow")
        })
        .count();
    assert_eq!(slow_events, 2, "one attempt, one result: {events:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_that_is_cancelled_ends_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let after = Counter::default();
    let host = build(dir.path(), &clock(), &after).build().await?;
    let run = host.start::<TimerAndSignal>("c1", ()).await?;
    within(LIMIT, "the run to wait", run.wait_until_suspended()).await??;
    run.pause().await?;
    within(LIMIT, "the cancel", run.cancel("not needed")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    match run.result().await {
        Err(Error::Cancelled(reason)) => assert_eq!(reason, "not needed"),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(after.get(), 0);
    host.shutdown().await?;
    Ok(())
}

fn assert_invalid(r: reel::Result<()>, run: &str, state: StatusKind, action: &str) {
    match r {
        Err(Error::InvalidState {
            run_id,
            state: s,
            action: a,
        }) => {
            assert_eq!((run_id.as_str(), s, a.as_str()), (run, state, action));
        }
        other => panic!("expected InvalidState({run}, {state}, {action}), got {other:?}"),
    }
}

/// Returns at once.
struct Quick;
impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_retry_refuse_wrong_states_and_unknown_runs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let after = Counter::default();
    let clock = clock();
    let host = build(dir.path(), &clock, &after)
        .register(Quick)
        .build()
        .await?;

    let unknown = host.run("nope");
    for r in [
        unknown.pause().await,
        unknown.resume().await,
        unknown.retry().await,
    ] {
        assert!(
            matches!(r, Err(Error::UnknownRun(ref id)) if id == "nope"),
            "{r:?}"
        );
    }

    let done = host.start::<Quick>("done", ()).await?;
    within(LIMIT, "the quick run", done.result()).await??;
    assert_invalid(done.pause().await, "done", StatusKind::Completed, "pause");
    assert_invalid(done.resume().await, "done", StatusKind::Completed, "resume");
    assert_invalid(done.retry().await, "done", StatusKind::Completed, "retry");
    assert_eq!(done.status().await?, RunStatus::Completed);

    let waiting = host.start::<TimerAndSignal>("waiting", ()).await?;
    within(LIMIT, "the run to wait", waiting.wait_until_suspended()).await??;
    let before = waiting.events().await?;
    assert_invalid(
        waiting.resume().await,
        "waiting",
        StatusKind::Suspended,
        "resume",
    );
    assert_invalid(
        waiting.retry().await,
        "waiting",
        StatusKind::Suspended,
        "retry",
    );
    assert_eq!(waiting.status().await?.kind(), StatusKind::Suspended);
    assert_eq!(waiting.events().await?, before);

    waiting.pause().await?;
    assert_invalid(
        waiting.retry().await,
        "waiting",
        StatusKind::Paused,
        "retry",
    );
    assert_eq!(waiting.status().await?, RunStatus::Paused);
    assert_eq!(waiting.events().await?, before);

    // Resumed on the same host, it goes on (its timer comes due meanwhile).
    waiting.signal("x", &1u32, "x-1").await?;
    clock.advance(NAP);
    waiting.resume().await?;
    assert!(
        matches!(waiting.resume().await, Err(Error::InvalidState { ref state, .. })
            if matches!(state, StatusKind::Running | StatusKind::Suspended)),
        "a resumed run is not paused"
    );
    let waiting = host.handle::<TimerAndSignal>("waiting");
    assert_eq!(within(LIMIT, "the result", waiting.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}
