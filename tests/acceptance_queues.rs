//! Acceptance: queues as the README's "Queues" section and `Host::fork`'s docs
//! describe them, where the other suites are thin: a queue with both a
//! concurrency and a rate limit admits "while fewer than `concurrency` ... are
//! admitted and unfinished ..., and while the rate window ... has room" (both at
//! once); the fork of a queued run is enqueued with the original's "same
//! priority"; a fork whose original's queue this host does not configure is
//! `Error::UnknownQueue` and writes nothing. Time is a `TestClock`.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use common::workflows::Waiter;
use reel::testing::TestClock;
use reel::{Error, Host, QueueOptions, RunStatus, StartOptions};

const LIMIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

/// 2027-01-10T00:00:00Z.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_799_539_200_000)
}

/// Checks for a little while that `run` stays enqueued (a negative: nothing to
/// wait for).
async fn stays_enqueued(host: &Host, run: &str) -> anyhow::Result<()> {
    for _ in 0..50 {
        assert_eq!(
            host.run(run).status().await?,
            RunStatus::Enqueued,
            "{run} should still wait for the queue"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

async fn admitted(host: &Host, run: &str) -> anyhow::Result<()> {
    within(
        LIMIT,
        &format!("{run} admitted"),
        host.run(run).wait_until_suspended(),
    )
    .await??;
    Ok(())
}

async fn finish(host: &Host, run: &str) -> anyhow::Result<()> {
    let r = host.run(run);
    r.signal("go", &1u32, "go").await?;
    within(LIMIT, &format!("{run} ends"), r.result::<u32>()).await??;
    Ok(())
}

/// Concurrency 2 and at most 3 admissions an hour, together: two run at once;
/// a third is admitted when one ends; a fourth waits for the window although a
/// slot is free; a new window admits it, and the fifth waits for a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_and_rate_limit_hold_together() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = Host::builder()
        .in_memory()
        .clock(clock.clone())
        .register(Waiter)
        .queue(
            "both",
            QueueOptions::default().concurrency(2).rate_limit(3, HOUR),
        )
        .build()
        .await?;
    for k in 0..5 {
        host.start_on::<Waiter>("both", &format!("r{k}"), ())
            .await?;
    }
    admitted(&host, "r0").await?;
    admitted(&host, "r1").await?;
    stays_enqueued(&host, "r2").await?;
    finish(&host, "r0").await?;
    admitted(&host, "r2").await?;
    finish(&host, "r1").await?;
    // One slot free, but three admissions this hour.
    stays_enqueued(&host, "r3").await?;
    clock.advance(HOUR);
    admitted(&host, "r3").await?;
    // r2 and r3 hold both slots.
    stays_enqueued(&host, "r4").await?;
    finish(&host, "r2").await?;
    admitted(&host, "r4").await?;
    host.shutdown().await?;
    Ok(())
}

/// "A fork of a run started on a queue is enqueued on that queue (same
/// priority, ...)": the fork of a priority-5 run, enqueued before a priority-3
/// run, is admitted after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_waits_on_its_queue_with_the_originals_priority() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = Host::builder()
        .in_memory()
        .clock(clock.clone())
        .register(Waiter)
        .queue("one", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    let at = |p: i32| StartOptions::default().queue("one").priority(p);
    let a = host.start_with::<Waiter>("a", (), at(5)).await?;
    a.wait_until_suspended().await?;
    let end = a.records().await?.last().map_or(0, |r| r.seq) + 1;
    host.fork("a", end, "a-fork").await?;
    assert_eq!(host.run("a-fork").status().await?, RunStatus::Enqueued);
    host.start_with::<Waiter>("c", (), at(3)).await?;
    finish(&host, "a").await?;
    admitted(&host, "c").await?;
    stays_enqueued(&host, "a-fork").await?;
    finish(&host, "c").await?;
    admitted(&host, "a-fork").await?;
    host.shutdown().await?;
    Ok(())
}

/// "[`Error::UnknownQueue`] when the original's queue is not configured on this
/// host ... Nothing is written then."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_onto_an_unconfigured_queue_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = Host::builder()
        .path(&path)
        .clock(clock.clone())
        .register(Waiter)
        .queue("gone", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    let a = host.start_on::<Waiter>("gone", "a", ()).await?;
    a.wait_until_suspended().await?;
    let end = a.records().await?.last().map_or(0, |r| r.seq) + 1;
    host.shutdown().await?;

    let host = Host::builder()
        .path(&path)
        .clock(clock.clone())
        .register(Waiter)
        .build()
        .await?;
    match host.fork("a", end, "a-fork").await {
        Err(Error::UnknownQueue(q)) => assert_eq!(q, "gone"),
        other => panic!("a fork onto an unconfigured queue: {other:?}"),
    }
    assert!(matches!(
        host.run("a-fork").status().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;
    Ok(())
}
