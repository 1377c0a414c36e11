//! A race between ctx futures (`select`) is decided once, by what happened first live,
//! and every later wake-up and a full replay keep that decision, even when by then
//! the losing branch has become ready too.
//!
//! Why it fails without the fix: each wake-up replays the handler from the top, and
//! on replay every branch whose event is in the log is ready at once, so `select`
//! picks whichever branch it polls first, not the one that won live. Here the branch
//! polled first is the one that lost live: (a) a signal beats a 300 ms timer, and
//! once the abandoned timer has fired the replay returns `None` instead of
//! `Some(7)`; (b) approval `approve` arrives before approval `reject`, and once
//! `reject` is in the log the replay says "reject". No divergence is reported: the
//! handler calls the same primitives, it just silently takes the other path.

mod common;

use std::pin::pin;
use std::time::Duration;

use common::{until_log, within};
use futures::future::{Either, select};
use reel::testing::{self, Replayed};
use reel::{Ctx, Event, Host, Workflow};

const LIMIT: Duration = Duration::from_secs(3);
const TIMEOUT_MS: u64 = 300;

/// (a) A signal wait raced against a timer.
struct SignalOrTimeout;

impl Workflow for SignalOrTimeout {
    const NAME: &'static str = "signal-or-timeout";
    type Input = ();
    type Output = Option<u32>;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Option<u32>> {
        let timeout = ctx.sleep(Duration::from_millis(TIMEOUT_MS));
        let signal = ctx.wait_for_signal::<u32>("x");
        // The timer is polled first: once both are in the log, poll order alone
        // would pick it.
        let decided = match select(pin!(timeout), pin!(signal)).await {
            Either::Left((slept, _)) => {
                slept?;
                None
            }
            Either::Right((v, _)) => Some(v?),
        };
        let _: String = ctx.wait_for_signal("go").await?;
        Ok(decided)
    }
}

/// (b) Two approvals raced against each other.
struct FirstDecision;

impl Workflow for FirstDecision {
    const NAME: &'static str = "first-decision";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let reject = ctx.approval("reject");
        let approve = ctx.approval("approve");
        // `reject` is polled first, and is sent second.
        let decided = match select(pin!(reject), pin!(approve)).await {
            Either::Left((a, _)) => format!("reject:{}", a?.approved),
            Either::Right((a, _)) => format!("approve:{}", a?.approved),
        };
        let _: String = ctx.wait_for_signal("go").await?;
        Ok(decided)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_that_beat_a_timer_stays_the_winner() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(SignalOrTimeout)
        .build()
        .await?;
    let started = tokio::time::Instant::now();
    let run = host.start::<SignalOrTimeout>("race-a", ()).await?;
    run.signal("x", &7u32, "x-1").await?;

    // The scenario is wall-clock time passing: wait until the abandoned timer has
    // fired (or, if the engine cancels abandoned timers, until it would have), so
    // its wake-up replays the race with both branches in the log.
    let _ = until_log(
        &run,
        Duration::from_millis(TIMEOUT_MS + 500),
        "the abandoned timer to fire",
        |events| events.iter().any(|e| matches!(e, Event::TimerFired { .. })),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(TIMEOUT_MS));
    within(
        LIMIT,
        "the run to wait for `go`",
        run.wait_until_suspended(),
    )
    .await??;

    run.signal("go", "now", "go-1").await?;
    let out = within(LIMIT, "the run's result", run.result()).await??;
    assert_eq!(
        out,
        Some(7),
        "the signal won live, before the timer was due"
    );

    let events = run.events().await?;
    assert_eq!(
        testing::replay(SignalOrTimeout, &events).await?,
        Replayed::Completed(Some(7)),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_approval_stays_the_decision() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(FirstDecision)
        .build()
        .await?;
    let run = host.start::<FirstDecision>("race-b", ()).await?;
    within(LIMIT, "the race", run.wait_until_suspended()).await??;

    run.approve("approve", true, None).await?;
    within(
        LIMIT,
        "the run to wait for `go`",
        run.wait_until_suspended(),
    )
    .await??;
    // The loser arrives after the decision, and a wake-up replays the race.
    run.approve("reject", true, None).await?;
    within(LIMIT, "the wake-up by `reject`", run.wait_until_suspended()).await??;
    run.signal("go", "now", "go-1").await?;

    let out = within(LIMIT, "the run's result", run.result()).await??;
    assert_eq!(out, "approve:true", "`approve` arrived first");

    let events = run.events().await?;
    assert_eq!(
        testing::replay(FirstDecision, &events).await?,
        Replayed::Completed("approve:true".to_owned()),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}
