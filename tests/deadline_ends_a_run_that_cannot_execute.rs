//! A run's own timeout (`StartOptions::timeout`) passing while the run cannot
//! execute (still waiting on its queue, parked, paused) ends it at once, as a
//! cancel of such a run does, not after the cancel grace (30 s by default). The
//! queued and parked cases ended only at the grace before the fix.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use futures::StreamExt;
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, QueueOptions, RunStatus, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Waits for `go` (or panics outside a step when asked, to get parked).
struct Wait;
impl Workflow for Wait {
    const NAME: &'static str = "wait";
    type Input = bool;
    type Output = u32;
    async fn run(&self, ctx: Ctx, crash: bool) -> reel::Result<u32> {
        if crash {
            panic!("handler bug");
        }
        ctx.wait_for_signal("go").await
    }
}

async fn open(dir: &std::path::Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Wait)
        .restart_limit(0, Duration::from_secs(3600))
        .queue("q", QueueOptions::default().concurrency(1))
        .build()
        .await
}

async fn ended(run: &reel::RunHandle<Wait>) -> anyhow::Result<()> {
    // Nothing moves the clock: only the deadline itself may end the run. The
    // log's watch ends after its terminal record.
    let cancelled = within(
        Duration::from_secs(5),
        "the run to end at its deadline",
        async {
            let mut records = std::pin::pin!(run.watch());
            while let Some(r) = records.next().await {
                if matches!(r?.event, Event::RunCancelled { .. }) {
                    return anyhow::Ok(true);
                }
            }
            Ok(false)
        },
    )
    .await??;
    assert!(cancelled, "the watch ended without RunCancelled");
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let r = run.result().await;
    assert!(
        matches!(r, Err(Error::Cancelled(ref m)) if m.contains("deadline")),
        "{r:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_passing_while_enqueued_ends_the_run_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    let blocker = host.start_on::<Wait>("q", "blocker", false).await?;
    within(LIMIT, "the blocker", blocker.wait_until_suspended()).await??;
    let opts = StartOptions::default()
        .queue("q")
        .timeout(Duration::from_secs(60));
    let timed = host.start_with::<Wait>("timed", false, opts).await?;
    assert_eq!(timed.status().await?, RunStatus::Enqueued);
    clock.advance(Duration::from_secs(120));
    // Not after the cancel grace (30 s later): the run cannot clean up.
    ended(&timed).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_passing_while_parked_ends_the_run_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    let opts = StartOptions::default().timeout(Duration::from_secs(60));
    let parked = host.start_with::<Wait>("parked", true, opts).await?;
    // A parked run is not suspended: the wait ends when it parks.
    let waited = within(LIMIT, "the park", parked.wait_until_suspended()).await?;
    assert!(matches!(waited, Err(Error::RunFinished(_))), "{waited:?}");
    assert!(matches!(parked.status().await?, RunStatus::Parked { .. }));
    clock.advance(Duration::from_secs(120));
    ended(&parked).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_passing_while_paused_ends_the_run_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    let opts = StartOptions::default().timeout(Duration::from_secs(60));
    let paused = host.start_with::<Wait>("paused", false, opts).await?;
    within(LIMIT, "the wait", paused.wait_until_suspended()).await??;
    paused.pause().await?;
    clock.advance(Duration::from_secs(120));
    ended(&paused).await?;
    host.shutdown().await?;
    Ok(())
}
