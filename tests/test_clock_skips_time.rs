//! A host built with `reel::testing::TestClock` reads all its time from it: timers,
//! signal timeouts, retry backoffs, run deadlines and the times on records. In
//! auto mode the clock jumps to the next due timer whenever every run only waits,
//! so workflows that wait for days are tested in milliseconds, and their logs show
//! the virtual times; it never jumps while a step executes. By hand, a test moves
//! the clock to any point (an approval at hour 47 of 48).

mod common;

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, Gate, within};
use reel::testing::TestClock;
use reel::{Clock, Ctx, Error, Event, Host, Record, RetryPolicy, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn at(records: &[Record], kind: &str) -> SystemTime {
    records
        .iter()
        .find(|r| r.event.kind() == kind)
        .map(|r| r.at)
        .unwrap_or_else(|| panic!("no {kind} in {records:?}"))
}

/// Sleeps 30 days, then completes.
struct Month;

impl Workflow for Month {
    const NAME: &'static str = "month";
    type Input = ();
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<SystemTime> {
        ctx.sleep(30 * DAY).await?;
        ctx.now().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_day_sleep_finishes_at_once_with_virtual_times() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(start());
    let host = common::hosts::open_on(dir.path(), &clock, Month).await?;
    let began = std::time::Instant::now();
    let run = host.start::<Month>("month-1", ()).await?;
    let woke = within(LIMIT, "the result", run.result()).await??;
    assert!(began.elapsed() < Duration::from_secs(10));
    assert_eq!(woke, start() + 30 * DAY);
    let records = run.records().await?;
    assert_eq!(at(&records, "RunStarted"), start());
    assert_eq!(at(&records, "TimerFired"), start() + 30 * DAY);
    assert_eq!(at(&records, "RunCompleted"), start() + 30 * DAY);
    assert_eq!(clock.now(), start() + 30 * DAY);
    host.shutdown().await?;
    Ok(())
}

/// Waits 48 hours for an approval, escalates if none came.
struct Approval;

impl Workflow for Approval {
    const NAME: &'static str = "approval";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        match ctx
            .wait_for_signal_timeout::<String>("approve", 48 * HOUR)
            .await?
        {
            Some(by) => Ok(format!("approved by {by}")),
            None => {
                ctx.step("escalate", |_| async { Ok::<_, String>(()) })
                    .await?;
                Ok("escalated".to_owned())
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_approval_escalates_after_48_hours() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .clock(TestClock::auto(start()))
        .register(Approval)
        .build()
        .await?;
    let run = host.start::<Approval>("approval-1", ()).await?;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "escalated"
    );
    let records = run.records().await?;
    assert_eq!(at(&records, "StepCompleted"), start() + 48 * HOUR);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_at_hour_47_is_taken_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(start());
    let build = || common::hosts::open_on(&path, &clock, Approval);
    let host = build().await?;
    let run = host.start::<Approval>("approval-2", ()).await?;
    run.wait_until_suspended().await?;
    host.shutdown().await?;

    clock.advance(47 * HOUR);
    let host = build().await?;
    let run = host.handle::<Approval>("approval-2");
    run.signal("approve", "ana", "approve-1").await?;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "approved by ana"
    );
    let records = run.records().await?;
    assert_eq!(at(&records, "SignalReceived"), start() + 47 * HOUR);
    assert!(!records.iter().any(|r| r.event.kind() == "TimerFired"));
    host.shutdown().await?;
    Ok(())
}

/// A step that fails twice, retried an hour apart.
struct Flaky {
    attempts: Counter,
}

impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(5)
            .with_backoff(HOUR, HOUR);
        ctx.step_with("call", policy, |_| async {
            let n = self.attempts.bump();
            if n < 3 {
                Err(format!("down ({n})"))
            } else {
                Ok(n)
            }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_backoff_waits_on_the_test_clock() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = Host::builder()
        .path(dir.path())
        .clock(TestClock::auto(start()))
        .register(Flaky {
            attempts: attempts.clone(),
        })
        .build()
        .await?;
    let run = host.start::<Flaky>("flaky-1", ()).await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 3);
    let failed: Vec<SystemTime> = run
        .records()
        .await?
        .iter()
        .filter(|r| matches!(r.event, Event::StepFailed { .. }))
        .map(|r| r.at)
        .collect();
    assert_eq!(failed, vec![start(), start() + HOUR]);
    let records = run.records().await?;
    assert_eq!(at(&records, "StepCompleted"), start() + 2 * HOUR);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_deadline_passes_on_the_test_clock() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .clock(TestClock::auto(start()))
        .register(Month)
        .build()
        .await?;
    let run = host
        .start_with::<Month>("month-2", (), StartOptions::default().timeout(2 * HOUR))
        .await?;
    let out = within(LIMIT, "the result", run.result()).await?;
    assert!(matches!(out, Err(Error::Cancelled(_))), "{out:?}");
    let records = run.records().await?;
    assert_eq!(at(&records, "RunCancelled"), start() + 2 * HOUR);
    host.shutdown().await?;
    Ok(())
}

static STEP_GATE: Gate = Gate::new();
static STEP_ENTERED: Mutex<Option<tokio::sync::oneshot::Sender<()>>> = Mutex::new(None);

/// Sleeps an hour while a step (gated by the test) runs.
struct SleepBesideStep;

impl Workflow for SleepBesideStep {
    const NAME: &'static str = "sleep-beside-step";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let (slept, stepped) = futures::join!(
            ctx.sleep(HOUR),
            ctx.step("slow", |_| async {
                if let Some(tx) = STEP_ENTERED.lock().expect("lock").take() {
                    let _ = tx.send(());
                }
                STEP_GATE.wait().await;
                Ok::<_, String>(())
            })
        );
        slept?;
        stepped
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_skip_never_fires_a_timer_while_a_step_executes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(start());
    let (tx, entered) = tokio::sync::oneshot::channel();
    *STEP_ENTERED.lock().expect("lock") = Some(tx);
    let host = common::hosts::open_on(dir.path(), &clock, SleepBesideStep).await?;
    let run = host.start::<SleepBesideStep>("beside-1", ()).await?;
    within(LIMIT, "the step to begin", entered).await??;
    // Proving that nothing happens needs some real time to pass: the skipper
    // polls every millisecond, so 100 ms is a hundred chances to misfire.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(clock.now(), start());
    STEP_GATE.open();
    within(LIMIT, "the result", run.result()).await??;
    let records = run.records().await?;
    let completed = records
        .iter()
        .position(|r| r.event.kind() == "StepCompleted");
    let fired = records.iter().position(|r| r.event.kind() == "TimerFired");
    assert!(completed < fired, "{records:?}");
    assert_eq!(at(&records, "StepCompleted"), start());
    assert_eq!(at(&records, "TimerFired"), start() + HOUR);
    host.shutdown().await?;
    Ok(())
}
