//! The fork of a run started on a queue is enqueued on that queue: it waits for
//! admission like any start on it, so the queue's concurrency holds. A fork of a
//! run started without a queue starts at once, as before.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Host, QueueOptions, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for signal `go` and returns its payload.
struct Job;
impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        ctx.wait_for_signal::<u32>("go").await
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Job)
        .queue(
            "one",
            QueueOptions {
                concurrency: Some(1),
                ..QueueOptions::default()
            },
        )
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_queued_run_waits_for_the_queue() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let running = host.start_on::<Job>("one", "running", ()).await?;
    within(LIMIT, "the first run waits", running.wait_until_suspended()).await??;
    let waiting = host.start_on::<Job>("one", "waiting", ()).await?;
    assert_eq!(waiting.status().await?, RunStatus::Enqueued);

    // Forked after its RunStarted: the fork is a run of the queue too.
    let fork = host.fork("waiting", 1, "fork").await?;
    assert_eq!(
        fork.status().await?,
        RunStatus::Enqueued,
        "the fork waits on the queue while its one slot is taken"
    );

    // Each end admits the next, in start order: `waiting`, then the fork.
    running.signal("go", &1u32, "go-1").await?;
    assert_eq!(within(LIMIT, "first", running.result()).await??, 1);
    within(LIMIT, "the waiting run", waiting.wait_until_suspended()).await??;
    assert_eq!(fork.status().await?, RunStatus::Enqueued);
    waiting.signal("go", &2u32, "go-2").await?;
    assert_eq!(within(LIMIT, "second", waiting.result()).await??, 2);
    within(LIMIT, "the fork admitted", fork.wait_until_suspended()).await??;
    fork.signal("go", &3u32, "go-3").await?;
    let out: u32 = within(LIMIT, "the fork", fork.result()).await??;
    assert_eq!(out, 3);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_run_without_a_queue_starts_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let original = host.start::<Job>("original", ()).await?;
    within(LIMIT, "the original waits", original.wait_until_suspended()).await??;
    let fork = host.fork("original", 1, "fork").await?;
    within(LIMIT, "the fork runs", fork.wait_until_suspended()).await??;
    fork.signal("go", &5u32, "go").await?;
    let out: u32 = within(LIMIT, "the fork", fork.result()).await??;
    assert_eq!(out, 5);
    // Forking onto a taken id is refused, as before.
    assert!(matches!(
        host.fork("original", 1, "fork").await,
        Err(reel::Error::RunExists { .. })
    ));
    host.shutdown().await?;
    Ok(())
}
