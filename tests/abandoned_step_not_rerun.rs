//! A step that lost a race while its body was running (its future dropped mid-body)
//! does not run its body again on later wake-ups: after the race the run waits for
//! three signals in turn, so it is woken and replayed three more times, and the
//! body's start count stays 1. The race is lost (a) to another step that finishes in
//! the same execution, and (b) to a timer (on a `TestClock` the test moves past it
//! once the body runs).
//!
//! Why it fails without the fix: the abandoned step's log holds `StepStarted` and
//! nothing else, which replay reads as "an attempt began and never ended (a crash):
//! run it again". Every replay re-opens the step and polls it before the winner, so
//! its body starts once per wake-up: (a) counts 4 starts instead of 1. In (b) the
//! running body additionally keeps the timer from ever winning (see
//! `timer_beats_running_step.rs`): the run never gets past the race, reported as a
//! timeout.

mod common;

use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use common::{Gate, until_log, waits_on, within};
use futures::future::{Either, select};
use reel::testing::{self, Replayed, TestClock};
use reel::{Ctx, Event, RunHandle, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(3600);

/// Never opened while a run is live: a body that waits on it runs until dropped.
static NEVER: Gate = Gate::new();

static STEP_RACE_STARTS: AtomicU32 = AtomicU32::new(0);

/// (a) The slow step loses to a fast step in the same execution.
struct LosesToStep;

impl Workflow for LosesToStep {
    const NAME: &'static str = "loses-to-step";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let slow = ctx.step("slow", |_| async {
            STEP_RACE_STARTS.fetch_add(1, Ordering::SeqCst);
            NEVER.wait().await;
            Ok::<u32, String>(0)
        });
        let fast = ctx.step("fast", |_| async { Ok::<u32, String>(1) });
        let won = match select(pin!(slow), pin!(fast)).await {
            Either::Left((v, _)) => format!("slow:{}", v?),
            Either::Right((v, _)) => format!("fast:{}", v?),
        };
        wait_three(&ctx, won).await
    }
}

static TIMER_RACE_STARTS: AtomicU32 = AtomicU32::new(0);

/// (b) The slow step loses to a timer.
struct LosesToTimer;

impl Workflow for LosesToTimer {
    const NAME: &'static str = "loses-to-timer";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let slow = ctx.step("slow", |_| async {
            TIMER_RACE_STARTS.fetch_add(1, Ordering::SeqCst);
            NEVER.wait().await;
            Ok::<u32, String>(0)
        });
        let timer = ctx.sleep(TIMEOUT);
        let won = match select(pin!(slow), pin!(timer)).await {
            Either::Left((v, _)) => format!("slow:{}", v?),
            Either::Right((slept, _)) => {
                slept?;
                "timeout".to_owned()
            }
        };
        wait_three(&ctx, won).await
    }
}

/// After the race: three wake-ups, one per signal `s`.
async fn wait_three(ctx: &Ctx, won: String) -> reel::Result<String> {
    let mut sum = 0;
    for _ in 0..3 {
        sum += ctx.wait_for_signal::<u32>("s").await?;
    }
    Ok(format!("{won}+{sum}"))
}

/// Sends `s` = 1, 2, 3, each once the run waits for it, and returns the result.
async fn wake_three_times<W: Workflow>(run: &RunHandle<W>) -> anyhow::Result<W::Output> {
    until_log(run, LIMIT, "the run to get past the race", |e| {
        waits_on(e, "s") == 1
    })
    .await?;
    for i in 1..=3u32 {
        run.signal("s", &i, &format!("s-{i}")).await?;
        if i < 3 {
            until_log(run, LIMIT, "the wake-up by `s`", |e| {
                waits_on(e, "s") == i as usize + 1
            })
            .await?;
        }
    }
    Ok(within(LIMIT, "the run's result", run.result()).await??)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_that_lost_to_a_step_does_not_run_again() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), LosesToStep).await?;
    let run = host.start::<LosesToStep>("lost-to-step", ()).await?;

    let out = wake_three_times(&run).await?;
    assert_eq!(out, "fast:1+6");
    assert_eq!(
        STEP_RACE_STARTS.load(Ordering::SeqCst),
        1,
        "the abandoned step's body started again on a later wake-up"
    );

    let events = run.events().await?;
    assert_eq!(
        testing::replay(LosesToStep, &events).await?,
        Replayed::Completed("fast:1+6".to_owned()),
        "full replay of the final log"
    );
    assert_eq!(STEP_RACE_STARTS.load(Ordering::SeqCst), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_that_lost_to_a_timer_does_not_run_again() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = common::hosts::open_on(dir.path(), &clock, LosesToTimer).await?;
    let run = host.start::<LosesToTimer>("lost-to-timer", ()).await?;
    // The body runs and the timer is armed: then the timer comes due.
    until_log(&run, LIMIT, "the race", |e| {
        e.iter().any(|e| matches!(e, Event::TimerScheduled { .. }))
            && TIMER_RACE_STARTS.load(Ordering::SeqCst) == 1
    })
    .await?;
    clock.advance(TIMEOUT);

    let out = wake_three_times(&run).await?;
    assert_eq!(out, "timeout+6");
    assert_eq!(
        TIMER_RACE_STARTS.load(Ordering::SeqCst),
        1,
        "the abandoned step's body started again on a later wake-up"
    );

    let events = run.events().await?;
    assert_eq!(
        testing::replay(LosesToTimer, &events).await?,
        Replayed::Completed("timeout+6".to_owned()),
        "full replay of the final log"
    );
    assert_eq!(TIMER_RACE_STARTS.load(Ordering::SeqCst), 1);
    host.shutdown().await?;
    Ok(())
}
