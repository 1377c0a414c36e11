//! Acceptance: determinism checks ported from Temporal's sdk-core
//! (temporalio/sdk-core, `crates/sdk-core/tests/integ_tests/workflow_tests/determinism.rs`)
//! onto `Error::ReplayDivergence` and parking (README "Divergence", "Changing a
//! workflow's code"): a divergence found after a crash parks the run and the
//! fixed code completes it; a replay that makes fewer timers than its log
//! diverges rather than completing; a table of code changes (a renamed step, a
//! step turned into a timer, a recorded value of another kind, a renamed signal
//! wait, an inserted step, a removed sleep) against a real run's saved log, next
//! to changes that must not diverge (another timer duration, `sleep_until`
//! instead of `sleep`, a call added past the log); and a parked run keeps the
//! signals sent to it while parked. Real stores in temp dirs,
//! time on a `TestClock`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, until_log, waits_on, within};
use reel::testing::{Replayed, TestClock, replay};
use reel::{Ctx, Error, Event, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn timers_scheduled(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::TimerScheduled { .. }))
        .count()
}

fn position(events: &[Event], what: impl Fn(&Event) -> bool) -> u64 {
    events
        .iter()
        .position(what)
        .map(|p| u64::try_from(p).expect("fits"))
        .expect("the event is in the log")
}

// ---------------------------------------------------------------------------

/// Temporal's `TimerWfNondeterministic`: its first execution sleeps and then
/// dies; the second calls a step where the log has the timer; the third sleeps
/// again and completes.
#[derive(Clone, Default)]
struct Recovers {
    executions: Counter,
    activity: Counter,
}

impl Workflow for Recovers {
    const NAME: &'static str = "recovers";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let n = self.executions.bump();
        if n == 2 {
            ctx.step("activity", |_| async {
                self.activity.bump();
                Ok::<_, String>(())
            })
            .await?;
        } else {
            ctx.sleep(Duration::from_secs(1)).await?;
            if n == 1 {
                panic!("dying on purpose");
            }
        }
        Ok(n)
    }
}

/// Ports sdk-core `determinism.rs::test_determinism_error_then_recovers`: the
/// handler panics after its timer fired (the run actor is restarted from the
/// log); the restarted execution calls a step where the log has the timer, so
/// the run is parked with the divergence (not crashed, not completed), the
/// step body never runs and nothing is appended for it; `retry()` with code
/// that matches the log again completes the run, on its third execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_divergence_after_a_crash_parks_and_matching_code_completes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let wf = Recovers::default();
    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.start::<Recovers>("nd", ()).await?;
    match within(LIMIT, "the park", run.result()).await? {
        Err(Error::ReplayDivergence {
            expected, found, ..
        }) => {
            assert_eq!(expected, "timer `timer#1`");
            assert_eq!(found, "called step `activity`");
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    assert_eq!(run.status().await?.kind(), StatusKind::Parked);
    assert_eq!(wf.activity.get(), 0, "the divergent step's body ran");
    let events = run.events().await?;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepStarted { .. } | Event::StepCompleted { .. })),
        "the divergent execution wrote to the log: {events:?}"
    );

    run.retry().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 3);
    assert_eq!(wf.executions.get(), 3);
    assert_eq!(wf.activity.get(), 0);
    assert_eq!(run.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Temporal's `NondeterministicTimerWf`, the other way round: two timers, or
/// only the second one when `short`.
#[derive(Clone, Default)]
struct Timers {
    short: Arc<AtomicBool>,
}

impl Workflow for Timers {
    const NAME: &'static str = "timers";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        if !self.short.load(Ordering::SeqCst) {
            ctx.sleep(Duration::from_secs(1)).await?;
        }
        ctx.sleep(Duration::from_secs(1)).await?;
        Ok(1)
    }
}

/// Ports sdk-core `determinism.rs::test_wf_task_rejected_properly_due_to_nondeterminism`
/// (an execution whose timers do not match the history fails with a
/// nondeterminism cause): a run whose log holds two timers, replayed by code
/// that makes only one and then returns, is parked with a divergence naming the
/// second timer ("returned before reaching it"); it must not complete. Code
/// that matches again completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_makes_fewer_timers_than_its_log_diverges() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let wf = Timers::default();
    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.start::<Timers>("t", ()).await?;
    until_log(&run, LIMIT, "the first timer", |e| timers_scheduled(e) == 1).await?;
    clock.advance(Duration::from_secs(1));
    until_log(&run, LIMIT, "the second timer", |e| {
        timers_scheduled(e) == 2
    })
    .await?;
    within(LIMIT, "the second wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    wf.short.store(true, Ordering::SeqCst);
    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.handle::<Timers>("t");
    clock.advance(Duration::from_secs(1));
    match within(LIMIT, "the park", run.result()).await? {
        Err(Error::ReplayDivergence {
            expected, found, ..
        }) => {
            assert_eq!(expected, "timer `timer#2`");
            assert_eq!(found, "returned before reaching it");
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    assert_eq!(run.status().await?.kind(), StatusKind::Parked);
    assert!(
        !run.events()
            .await?
            .iter()
            .any(|e| matches!(e, Event::RunCompleted { .. })),
        "a diverged run completed"
    );

    wf.short.store(false, Ordering::SeqCst);
    run.retry().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 1);
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// The code deployed: the original, or one change to it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Change {
    Original,
    RenamedStep,
    StepBecameTimer,
    UuidBecameRandom,
    UuidBecameNow,
    RenamedSignal,
    InsertedStep,
    RemovedSleep,
    LongerSleep,
    SleepUntil,
    StepAddedAtTheEnd,
}

#[derive(Clone, Copy)]
struct Shop(Change);

impl Workflow for Shop {
    const NAME: &'static str = "shop";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let c = self.0;
        if c == Change::InsertedStep {
            ctx.step("audit", |_| async { Ok::<_, String>(0u32) })
                .await?;
        }
        let a: u32 = match c {
            Change::RenamedStep => {
                ctx.step("reserve-v2", |_| async { Ok::<_, String>(2) })
                    .await?
            }
            Change::StepBecameTimer => {
                ctx.sleep(Duration::from_secs(5)).await?;
                2
            }
            _ => {
                ctx.step("reserve", |_| async { Ok::<_, String>(2) })
                    .await?
            }
        };
        match c {
            Change::UuidBecameRandom => {
                ctx.random_u64().await?;
            }
            Change::UuidBecameNow => {
                ctx.now().await?;
            }
            _ => {
                ctx.uuid().await?;
            }
        }
        match c {
            Change::RemovedSleep => {}
            Change::LongerSleep => ctx.sleep(Duration::from_secs(3600)).await?,
            Change::SleepUntil => ctx.sleep_until(t0() + Duration::from_secs(7200)).await?,
            _ => ctx.sleep(Duration::from_secs(60)).await?,
        }
        let name = if c == Change::RenamedSignal {
            "payment"
        } else {
            "paid"
        };
        let paid: u32 = ctx.wait_for_signal(name).await?;
        let b: u32 = ctx.step("ship", |_| async { Ok::<_, String>(3) }).await?;
        if c == Change::StepAddedAtTheEnd {
            ctx.step("notify", |_| async { Ok::<_, String>(()) })
                .await?;
        }
        Ok(a + paid + b)
    }
}

/// Ports sdk-core `determinism.rs::activity_id_or_type_change_is_nondeterministic`
/// and `::child_wf_id_or_type_change_is_nondeterministic` (a command of another
/// type or id where the history has one), with the changes Temporal does not
/// count as nondeterministic (a timer's duration: only the command is matched;
/// a command added after the history's end). A real run's log, saved, is
/// replayed (`reel::testing::replay`) against each change: every change of a
/// primitive's kind or id at a recorded position is a `ReplayDivergence` at
/// that event; another timer duration or a `sleep_until` replays to the same
/// result (the recorded due time holds); a step added past the end of an
/// unfinished log is where the replay stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_of_kind_or_id_diverge_and_durations_do_not() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host = common::hosts::open_on(dir.path(), &clock, Shop(Change::Original)).await?;
    let run = host.start::<Shop>("order", ()).await?;
    until_log(&run, LIMIT, "the signal wait", |e| waits_on(e, "paid") == 1).await?;
    run.signal("paid", &2u32, "paid-1").await?;
    assert_eq!(within(LIMIT, "the run", run.result()).await??, 7);
    let log = run.events().await?;
    host.shutdown().await?;

    let reserve = position(
        &log,
        |e| matches!(e, Event::StepStarted { id, attempt: 1 } if id == "reserve"),
    );
    let uuid = position(&log, |e| matches!(e, Event::Recorded { .. }));
    let timer = position(&log, |e| matches!(e, Event::TimerScheduled { .. }));
    let wait = position(&log, |e| matches!(e, Event::SignalAwaited { .. }));

    assert_eq!(
        replay(Shop(Change::Original), &log).await?,
        Replayed::Completed(7)
    );
    let diverging = [
        (Change::RenamedStep, reserve, "reserve", "reserve-v2"),
        (Change::StepBecameTimer, reserve, "reserve", "timer"),
        (Change::UuidBecameRandom, uuid, "uuid", "random"),
        (Change::UuidBecameNow, uuid, "uuid", "now"),
        (Change::RenamedSignal, wait, "paid", "payment"),
        (Change::InsertedStep, reserve, "reserve", "audit"),
        (Change::RemovedSleep, timer, "timer", "signal"),
    ];
    for (change, at, in_log, called) in diverging {
        match replay(Shop(change), &log).await {
            Err(Error::ReplayDivergence {
                index,
                expected,
                found,
            }) => {
                assert_eq!(index, at, "{change:?}: {expected} / {found}");
                assert!(expected.contains(in_log), "{change:?}: {expected}");
                assert!(found.contains(called), "{change:?}: {found}");
            }
            other => panic!("{change:?}: expected a divergence, got {other:?}"),
        }
    }
    for change in [Change::LongerSleep, Change::SleepUntil] {
        assert_eq!(
            replay(Shop(change), &log).await?,
            Replayed::Completed(7),
            "{change:?}"
        );
    }
    // The log of the run still waiting for `paid` (cut before its signal).
    let received = position(&log, |e| matches!(e, Event::SignalReceived { .. }));
    let unfinished = &log[..usize::try_from(received)?];
    assert!(matches!(
        replay(Shop(Change::Original), unfinished).await?,
        Replayed::Pending(ref w) if w.contains("paid")
    ));
    let end = position(&log, |e| matches!(e, Event::RunCompleted { .. }));
    let before_end = &log[..usize::try_from(end)?];
    assert_eq!(
        replay(Shop(Change::Original), before_end).await?,
        Replayed::Completed(7)
    );
    match replay(Shop(Change::StepAddedAtTheEnd), before_end).await? {
        Replayed::Pending(w) => assert!(w.contains("notify"), "{w}"),
        other => panic!("expected the replay to stop at `notify`, got {other:?}"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------

/// A step, a sleep and two signal waits; `renamed` calls its step by another
/// name (the broken deploy).
#[derive(Clone, Default)]
struct Picky {
    renamed: Arc<AtomicBool>,
    a: Counter,
    a2: Counter,
}

impl Workflow for Picky {
    const NAME: &'static str = "picky";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let base: u32 = if self.renamed.load(Ordering::SeqCst) {
            ctx.step("a2", |_| async {
                self.a2.bump();
                Ok::<_, String>(100)
            })
            .await?
        } else {
            ctx.step("a", |_| async {
                self.a.bump();
                Ok::<_, String>(100)
            })
            .await?
        };
        ctx.sleep(Duration::from_secs(60)).await?;
        let x: u32 = ctx.wait_for_signal("x").await?;
        let y: u32 = ctx.wait_for_signal("y").await?;
        Ok(base + x * 10 + y)
    }
}

/// Ports sdk-core `determinism.rs::test_determinism_error_then_recovers` with
/// the history growing while the run is stuck (Temporal keeps appending
/// signals to a workflow whose tasks fail on nondeterminism, and the fixed
/// worker sees them all): the run's timer fires under a broken deploy and the
/// replay it wakes parks the run with the divergence; two signals sent while it
/// is parked are accepted; once the code is fixed, `retry()` completes it with
/// both signals in order, no step body run twice and none of the broken code's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_keeps_the_signals_sent_while_it_is_parked() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let wf = Picky::default();
    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.start::<Picky>("p", ()).await?;
    until_log(&run, LIMIT, "the sleep", |e| timers_scheduled(e) == 1).await?;
    within(LIMIT, "the sleep", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    wf.renamed.store(true, Ordering::SeqCst);
    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.handle::<Picky>("p");
    clock.advance(Duration::from_secs(120));
    match within(LIMIT, "the park", run.result()).await? {
        Err(Error::ReplayDivergence { found, .. }) => assert!(found.contains("a2"), "{found}"),
        other => panic!("expected a divergence, got {other:?}"),
    }
    run.signal("x", &1u32, "x-1").await?;
    run.signal("y", &2u32, "y-1").await?;
    assert_eq!(run.status().await?.kind(), StatusKind::Parked);
    assert_eq!(wf.a2.get(), 0);

    wf.renamed.store(false, Ordering::SeqCst);
    run.retry().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 112);
    assert_eq!((wf.a.get(), wf.a2.get()), (1, 0));
    let received: Vec<String> = run
        .events()
        .await?
        .iter()
        .filter_map(|e| match e {
            Event::SignalReceived { signal_id, .. } => Some(signal_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(received, ["x-1", "y-1"]);
    host.shutdown().await?;
    Ok(())
}
