//! A signal wait that ends without a signal consumes none: (a) a timed wait on `x`
//! that times out, and (b) a wait on `x` that loses a `select` to a timer and is
//! dropped. A later `wait_for_signal("x")` receives the next `x` sent, and the run
//! completes; a full replay of the final log agrees.
//!
//! Why it fails without the fix: signals are handed out by counting waits on a name
//! in call order. A wait that is still pending when the handler moves on holds its
//! slot, so on the next replay it claims the `x` sent for the later wait (the
//! "k-th wait gets the k-th signal" rule counts the abandoned wait), and the later
//! wait is left waiting for a second `x` that never comes: the run hangs, which this
//! test reports as a timeout.

mod common;

use std::pin::pin;
use std::time::Duration;

use common::{until_log, waits_on, within};
use futures::future::{Either, select};
use reel::testing::{self, Replayed};
use reel::{Ctx, Workflow};

const LIMIT: Duration = Duration::from_secs(3);

/// (a) A timed wait that times out, then a plain wait on the same name.
struct TimedOutThenWait;

impl Workflow for TimedOutThenWait {
    const NAME: &'static str = "timed-out-then-wait";
    type Input = ();
    type Output = (Option<u32>, u32);

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(Option<u32>, u32)> {
        let first = ctx
            .wait_for_signal_timeout::<u32>("x", Duration::from_millis(50))
            .await?;
        let second: u32 = ctx.wait_for_signal("x").await?;
        Ok((first, second))
    }
}

/// (b) A wait on `x` dropped by a `select` that a timer won, then a plain wait.
struct LostRaceThenWait;

impl Workflow for LostRaceThenWait {
    const NAME: &'static str = "lost-race-then-wait";
    type Input = ();
    type Output = (String, u32);

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(String, u32)> {
        let timeout = ctx.sleep(Duration::from_millis(50));
        let x = ctx.wait_for_signal::<u32>("x");
        let first = match select(pin!(timeout), pin!(x)).await {
            Either::Left((slept, _)) => {
                slept?;
                "timeout".to_owned()
            }
            Either::Right((v, _)) => format!("x:{}", v?),
        };
        let second: u32 = ctx.wait_for_signal("x").await?;
        Ok((first, second))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_wait_leaves_the_signal_to_the_next_wait() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), TimedOutThenWait).await?;
    let run = host.start::<TimedOutThenWait>("timed-out", ()).await?;
    // The second wait is opened only once the first one has timed out.
    until_log(&run, LIMIT, "the wait after the timeout", |e| {
        waits_on(e, "x") == 2
    })
    .await?;

    run.signal("x", &5u32, "x-1").await?;
    let out = within(LIMIT, "the second wait to receive `x`", run.result()).await??;
    assert_eq!(out, (None, 5));

    let events = run.events().await?;
    assert_eq!(
        testing::replay(TimedOutThenWait, &events).await?,
        Replayed::Completed((None, 5)),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_dropped_by_a_lost_race_leaves_the_signal_to_the_next_wait() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), LostRaceThenWait).await?;
    let run = host.start::<LostRaceThenWait>("lost-race", ()).await?;
    // The second wait is opened only once the timer has won the race.
    until_log(&run, LIMIT, "the wait after the race", |e| {
        waits_on(e, "x") == 2
    })
    .await?;

    run.signal("x", &5u32, "x-1").await?;
    let out = within(LIMIT, "the second wait to receive `x`", run.result()).await??;
    assert_eq!(out, ("timeout".to_owned(), 5));

    let events = run.events().await?;
    assert_eq!(
        testing::replay(LostRaceThenWait, &events).await?,
        Replayed::Completed(("timeout".to_owned(), 5)),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}
