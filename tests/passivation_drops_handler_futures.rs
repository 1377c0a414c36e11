//! DESIGN.md invariant 6: a run that waits holds no handler future after an idle
//! period. Each handler keeps a guard (and a megabyte of its own data) alive across
//! its wait; once the runs are passivated every guard has been dropped: no actor,
//! execution task or handler future of theirs is left in memory. Signalled later,
//! each run is rebuilt from its log alone and ends with its own input.

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures::future::try_join_all;
use reel::{Ctx, Workflow};

/// Handler state alive now, across all runs.
static ALIVE: AtomicI64 = AtomicI64::new(0);
/// Handler state ever made.
static MADE: AtomicI64 = AtomicI64::new(0);

struct Guard(#[allow(dead_code)] Vec<u8>);
impl Guard {
    fn new() -> Guard {
        ALIVE.fetch_add(1, Ordering::SeqCst);
        MADE.fetch_add(1, Ordering::SeqCst);
        Guard(vec![7; 1 << 20])
    }
}
impl Drop for Guard {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Holder;
impl Workflow for Holder {
    const NAME: &'static str = "holder";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let guard = Guard::new();
        let add: u32 = ctx.wait_for_signal("go").await?;
        drop(guard);
        Ok(n + add)
    }
}

/// Polls `cond` every millisecond for at most 30 s.
async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !cond().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("timed out waiting for {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passivated_runs_hold_no_handler_future() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host =
        common::hosts::open_passivating(dir.path(), Holder, Duration::from_millis(1)).await?;
    let runs = try_join_all((0..100u32).map(|i| {
        let host = &host;
        async move { host.start::<Holder>(&format!("h{i}"), i).await }
    }))
    .await?;
    for r in &runs {
        r.wait_until_suspended().await?;
    }
    assert!(
        MADE.load(Ordering::SeqCst) >= 100,
        "every handler made its guard"
    );
    eventually("passivation", async || host.live_runs().await == 0).await?;
    eventually("the handlers' state to be dropped", async || {
        ALIVE.load(Ordering::SeqCst) == 0
    })
    .await?;

    for (i, r) in runs.iter().enumerate() {
        r.signal("go", &1000u32, "go").await?;
        assert_eq!(r.result().await?, i as u32 + 1000);
    }
    eventually("the finished runs' state to be dropped", async || {
        ALIVE.load(Ordering::SeqCst) == 0
    })
    .await?;
    host.shutdown().await?;
    Ok(())
}
