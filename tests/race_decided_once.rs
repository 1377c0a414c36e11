//! A race between ctx futures (`select`) is decided once, by what happened first live,
//! and every later wake-up and a full replay keep that decision, even when by then
//! the losing branch has become ready too.
//!
//! Why it fails without the fix: each wake-up replays the handler from the top, and
//! on replay every branch whose event is in the log is ready at once, so `select`
//! picks whichever branch it polls first, not the one that won live. Here the branch
//! polled first is the one that lost live: (a) a signal beats an hour's timer (on
//! a `TestClock` the test moves past it), and once the abandoned timer has fired
//! the replay returns `None` instead of `Some(7)`; (b) approval `approve` arrives before approval `reject`, and once
//! `reject` is in the log the replay says "reject". No divergence is reported: the
//! handler calls the same primitives, it just silently takes the other path.

mod common;

use std::pin::pin;
use std::time::{Duration, UNIX_EPOCH};

use common::{until_log, waits_on, within};
use futures::future::{Either, select};
use reel::testing::{self, Replayed, TestClock};
use reel::{Clock, Ctx, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(3600);

/// (a) A signal wait raced against a timer.
struct SignalOrTimeout;

impl Workflow for SignalOrTimeout {
    const NAME: &'static str = "signal-or-timeout";
    type Input = ();
    type Output = Option<u32>;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Option<u32>> {
        let timeout = ctx.sleep(TIMEOUT);
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

/// Sleeps past `SignalOrTimeout`'s timer: the timer service fires timers in due
/// order, so once this one has fired, the abandoned one was due and handled.
struct Witness;

impl Workflow for Witness {
    const NAME: &'static str = "witness";
    type Input = ();
    type Output = ();

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.sleep(TIMEOUT + Duration::from_secs(1)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_that_beat_a_timer_stays_the_winner() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let started = clock.now();
    let host = common::hosts::open_two_on(dir.path(), &clock, SignalOrTimeout, Witness).await?;
    let run = host.start::<SignalOrTimeout>("race-a", ()).await?;
    let witness = host.start::<Witness>("witness", ()).await?;
    within(LIMIT, "the race", run.wait_until_suspended()).await??;
    run.signal("x", &7u32, "x-1").await?;
    until_log(&run, LIMIT, "the run to take `x`", |e| {
        waits_on(e, "go") == 1
    })
    .await?;

    // The scenario is time passing: move the clock past the timer and wait until
    // the abandoned timer has fired (or, if the engine cancels abandoned timers,
    // until it would have), so the next wake-up replays the race with both
    // branches in the log.
    clock.advance(TIMEOUT + Duration::from_secs(60));
    within(LIMIT, "the witness's timer", witness.result()).await??;
    assert!(clock.now() >= started + TIMEOUT);
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
    let host = common::hosts::open(dir.path(), FirstDecision).await?;
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
