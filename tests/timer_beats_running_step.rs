//! A wake-up that resolves a wait preempts a step body that is still running: (a) a
//! timer wins a `select` against a step whose body blocks until the test lets it
//! go (the test moves a `TestClock` past the timer once the body runs), and (b) a
//! signal sent while such a body runs wins a `select` against it.
//! The losing body is dropped and never completes (no `StepCompleted`), and a full
//! replay of the final log agrees.
//!
//! Why it fails without the fix: the timer's or the signal's wake-up is only acted on
//! by replaying the handler once the current execution suspends, and an execution
//! with a step body in flight never suspends. The run stays `Running` inside the
//! step until the body returns, so the `select` can only ever be won by the step:
//! here the body is held until the run's result is known, and the test reports the
//! hang as a timeout (and would see the step win once the body is let go).

mod common;

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use common::{Gate, until_log, within};
use futures::future::{Either, select};
use reel::testing::{self, Replayed, TestClock};
use reel::{Ctx, Event, RunHandle, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(3600);

/// Opens its gate when dropped: a step body holds one, so the test knows when the
/// body is gone (finished or dropped unfinished).
struct OnDrop(&'static Gate);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

static TIMER_BODY_STARTED: Gate = Gate::new();
static TIMER_BODY_RELEASE: Gate = Gate::new();
static TIMER_BODY_GONE: Gate = Gate::new();
static TIMER_BODY_FINISHED: AtomicBool = AtomicBool::new(false);

/// (a) A blocked step raced against a short timer.
struct TimerVsStep;

impl Workflow for TimerVsStep {
    const NAME: &'static str = "timer-vs-step";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let slow = ctx.step("slow", |_| async {
            let _gone = OnDrop(&TIMER_BODY_GONE);
            TIMER_BODY_STARTED.open();
            TIMER_BODY_RELEASE.wait().await;
            TIMER_BODY_FINISHED.store(true, Ordering::SeqCst);
            Ok::<_, String>("done".to_owned())
        });
        let timer = ctx.sleep(TIMEOUT);
        match select(pin!(slow), pin!(timer)).await {
            Either::Left((v, _)) => Ok(format!("step:{}", v?)),
            Either::Right((slept, _)) => {
                slept?;
                Ok("timeout".to_owned())
            }
        }
    }
}

static SIGNAL_BODY_STARTED: Gate = Gate::new();
static SIGNAL_BODY_RELEASE: Gate = Gate::new();
static SIGNAL_BODY_GONE: Gate = Gate::new();
static SIGNAL_BODY_FINISHED: AtomicBool = AtomicBool::new(false);

/// (b) A blocked step raced against a signal.
struct SignalVsStep;

impl Workflow for SignalVsStep {
    const NAME: &'static str = "signal-vs-step";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let slow = ctx.step("slow", |_| async {
            let _gone = OnDrop(&SIGNAL_BODY_GONE);
            SIGNAL_BODY_STARTED.open();
            SIGNAL_BODY_RELEASE.wait().await;
            SIGNAL_BODY_FINISHED.store(true, Ordering::SeqCst);
            Ok::<_, String>("done".to_owned())
        });
        let stop = ctx.wait_for_signal::<String>("stop");
        match select(pin!(slow), pin!(stop)).await {
            Either::Left((v, _)) => Ok(format!("step:{}", v?)),
            Either::Right((v, _)) => Ok(format!("signal:{}", v?)),
        }
    }
}

/// Lets the held body go, waits until it is gone, and checks it did not finish:
/// its future was dropped when the race was decided.
async fn assert_body_abandoned<W: Workflow>(
    run: &RunHandle<W>,
    release: &Gate,
    gone: &Gate,
    finished: &AtomicBool,
) -> anyhow::Result<()> {
    release.open();
    within(LIMIT, "the step body to be gone", gone.wait()).await?;
    assert!(
        !finished.load(Ordering::SeqCst),
        "the losing step body went on after the race was decided"
    );
    let events = run.events().await?;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepCompleted { id, .. } if id == "slow")),
        "the losing step was recorded as completed: {events:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_wins_against_a_running_step() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = common::hosts::open_on(dir.path(), &clock, TimerVsStep).await?;
    let run = host.start::<TimerVsStep>("timer-race", ()).await?;
    within(LIMIT, "the step body to start", TIMER_BODY_STARTED.wait()).await?;
    until_log(&run, LIMIT, "the timer", |e| {
        e.iter().any(|e| matches!(e, Event::TimerScheduled { .. }))
    })
    .await?;
    clock.advance(TIMEOUT);

    let out = within(
        LIMIT,
        "the timer to win against the running step",
        run.result(),
    )
    .await;
    // Whatever happened, a held body must not outlive the test.
    TIMER_BODY_RELEASE.open();
    let out = out??;
    assert!(
        TIMER_BODY_STARTED.is_open(),
        "the step body was running when the timer fired"
    );
    assert_eq!(out, "timeout");

    assert_body_abandoned(
        &run,
        &TIMER_BODY_RELEASE,
        &TIMER_BODY_GONE,
        &TIMER_BODY_FINISHED,
    )
    .await?;
    let events = run.events().await?;
    assert_eq!(
        testing::replay(TimerVsStep, &events).await?,
        Replayed::Completed("timeout".to_owned()),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_wins_against_a_running_step() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), SignalVsStep).await?;
    let run = host.start::<SignalVsStep>("signal-race", ()).await?;
    within(LIMIT, "the step body to start", SIGNAL_BODY_STARTED.wait()).await?;
    run.signal("stop", "now", "stop-1").await?;

    let out = within(
        LIMIT,
        "the signal to win against the running step",
        run.result(),
    )
    .await;
    SIGNAL_BODY_RELEASE.open();
    assert_eq!(out??, "signal:now");

    assert_body_abandoned(
        &run,
        &SIGNAL_BODY_RELEASE,
        &SIGNAL_BODY_GONE,
        &SIGNAL_BODY_FINISHED,
    )
    .await?;
    let events = run.events().await?;
    assert_eq!(
        testing::replay(SignalVsStep, &events).await?,
        Replayed::Completed("signal:now".to_owned()),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}
