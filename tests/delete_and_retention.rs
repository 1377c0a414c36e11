//! `AnyRun::delete` removes a finished run whole (log, metadata, listing, count)
//! and refuses an unfinished one with `InvalidState`, changing nothing; the
//! retention policy deletes runs that ended longer ago than it keeps them, in
//! bounded passes, and keeps unfinished runs and (by default) failures; the disk
//! space of deleted runs comes back.

mod common;

use std::path::Path;
use std::time::Duration;

use common::within;
use common::workflows::Waiter;
use reel::{Ctx, Error, Host, Retention, RunFilter, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

/// Returns a payload of `kb` KiB from a step, or fails when `kb` is 0.
struct Payload;
impl Workflow for Payload {
    const NAME: &'static str = "payload";
    type Input = usize;
    type Output = String;
    async fn run(&self, ctx: Ctx, kb: usize) -> reel::Result<String> {
        if kb == 0 {
            return Err(Error::failed("asked to fail"));
        }
        let seed = ctx.run_id().len() as u64 + kb as u64;
        ctx.step("make", move |_| async move {
            Ok::<_, String>(noise(seed, kb * 1024))
        })
        .await
    }
}

/// `len` characters that do not compress (the store compresses its blocks).
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect()
}

async fn host(dir: &Path, retention: Retention) -> anyhow::Result<Host> {
    Ok(Host::builder()
        .path(dir)
        .register(Payload)
        .register(Waiter)
        .retention(retention)
        .build()
        .await?)
}

/// Bytes of the store's files, its write-ahead journal aside: fjall starts a new
/// journal file only once the active one passes 64 MB, and drops sealed ones once
/// flushed, so the journal holds at most that much of deleted runs whatever the
/// store's size (documented on `Host::reclaim_space`).
fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(_) if e.path().extension().is_some_and(|x| x == "jnl") => 0,
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_a_finished_run_and_refuses_others() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path(), Retention::keep_all()).await?;
    let done = host.start::<Payload>("done", 1).await?;
    done.result().await?;
    let waiting = host.start::<Waiter>("waiting", ()).await?;
    within(LIMIT, "the wait", waiting.wait_until_suspended()).await??;
    let paused = host.start::<Waiter>("paused", ()).await?;
    within(LIMIT, "the wait", paused.wait_until_suspended()).await??;
    paused.pause().await?;
    let before = host.count().await?;

    for (run, kind) in [
        (&waiting, StatusKind::Suspended),
        (&paused, StatusKind::Paused),
    ] {
        match run.delete().await {
            Err(Error::InvalidState {
                run_id,
                state,
                action,
            }) => {
                assert_eq!(
                    (run_id.as_str(), state, action.as_str()),
                    (run.id(), kind, "delete")
                );
            }
            other => panic!("deleting {} gave {other:?}", run.id()),
        }
    }
    assert!(matches!(
        host.run("nope").delete().await,
        Err(Error::UnknownRun(_))
    ));
    assert_eq!(
        host.count().await?,
        before,
        "a refused delete changed nothing"
    );
    assert!(matches!(
        waiting.status().await?,
        RunStatus::Suspended { .. }
    ));

    done.delete().await?;
    assert!(matches!(done.status().await, Err(Error::UnknownRun(_))));
    assert!(matches!(done.records().await, Err(Error::UnknownRun(_))));
    assert!(matches!(done.delete().await, Err(Error::UnknownRun(_))));
    let after = host.count().await?;
    assert_eq!(
        after[&StatusKind::Completed],
        before[&StatusKind::Completed] - 1
    );
    let listed = host.list(RunFilter::default()).await?;
    assert!(listed.items.iter().all(|r| r.run_id != "done"));

    // The others are untouched; the id can be used again.
    waiting.signal("go", &5u32, "s").await?;
    assert_eq!(within(LIMIT, "the waiter", waiting.result()).await??, 5);
    let again = host.start::<Payload>("done", 2).await?;
    assert_eq!(again.result().await?.len(), 2048);

    // Gone for good, also after a restart.
    host.shutdown().await?;
    let host = self::host(dir.path(), Retention::keep_all()).await?;
    assert_eq!(host.run("done").result::<String>().await?.len(), 2048);
    let listed = host.list(RunFilter::default()).await?.items;
    assert_eq!(listed.iter().filter(|r| r.run_id == "done").count(), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_finished_runs_in_bounded_passes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // Completed runs go as soon as they end; cancelled ones are kept a day;
    // failures are kept (the default). The background pass is an hour away: the
    // test runs passes itself.
    let policy = Retention::keep_all()
        .completed_after(Duration::ZERO)
        .cancelled_after(Duration::from_secs(24 * 3600))
        .every(Duration::from_secs(3600))
        .per_pass(7);
    let host = host(dir.path(), policy).await?;
    for i in 0..20 {
        host.start::<Payload>(&format!("ok{i:02}"), 1)
            .await?
            .result()
            .await?;
    }
    for i in 0..3 {
        let _ = host
            .start::<Payload>(&format!("bad{i}"), 0)
            .await?
            .result()
            .await;
    }
    let cancelled = host.start::<Waiter>("cancelled", ()).await?;
    within(LIMIT, "the wait", cancelled.wait_until_suspended()).await??;
    cancelled.cancel("not needed").await?;
    let waiting = host.start::<Waiter>("waiting", ()).await?;
    within(LIMIT, "the wait", waiting.wait_until_suspended()).await??;

    let mut passes = Vec::new();
    loop {
        let n = host.enforce_retention().await?;
        passes.push(n);
        if n == 0 {
            break;
        }
    }
    assert!(
        passes.iter().all(|n| *n <= 7),
        "a pass deleted more than its bound: {passes:?}"
    );
    assert_eq!(passes.iter().sum::<usize>(), 20);
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Completed], 0);
    assert_eq!(counts[&StatusKind::Failed], 3);
    assert_eq!(counts[&StatusKind::Cancelled], 1);
    assert_eq!(counts[&StatusKind::Suspended], 1);
    assert!(matches!(
        waiting.status().await?,
        RunStatus::Suspended { .. }
    ));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_runs_give_their_disk_space_back() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(
        dir.path(),
        Retention::keep_all()
            .completed_after(Duration::ZERO)
            .every(Duration::from_secs(3600))
            .per_pass(1_000),
    )
    .await?;
    for i in 0..40 {
        host.start::<Payload>(&format!("big{i:02}"), 256)
            .await?
            .result()
            .await?;
    }
    host.reclaim_space().await?;
    let full = dir_size(dir.path());
    assert!(
        full > 10 * 1024 * 1024,
        "40 runs of 256 KiB take {full} bytes"
    );

    assert_eq!(host.enforce_retention().await?, 40);
    host.reclaim_space().await?;
    let emptied = dir_size(dir.path());
    assert!(
        emptied < full / 4,
        "deleting every run left {emptied} of {full} bytes in the store's tables"
    );
    host.shutdown().await?;
    Ok(())
}
