//! Replay under concurrency: `try_join!` over two branches that each call two steps
//! in sequence, followed by a durable sleep, completes with the right values, also
//! across a host restart during the sleep, and a full replay of the final log agrees.
//!
//! Why it fails without the fix: live, the branches open their steps in the order
//! a1, b1, a2, b2 (each branch calls its second step only once its first one has
//! landed). On the wake-up after the sleep every recorded step is ready at once, so
//! branch A calls `a2` before branch B has called `b1`; matching primitives against
//! one cursor over the log in call order then reports `ReplayDivergence` ("the log has
//! step `b1` there, but the handler called step `a2`") and parks a run whose code never changed.

mod common;

use std::time::Duration;

use common::within;
use reel::testing::{self, Replayed};
use reel::{Ctx, Host, RunStatus, Workflow};

struct TwoBranches;

impl Workflow for TwoBranches {
    const NAME: &'static str = "two-branches";
    /// How long the sleep after the join lasts, in ms.
    type Input = u64;
    type Output = Vec<u32>;

    async fn run(&self, ctx: Ctx, sleep_ms: u64) -> reel::Result<Vec<u32>> {
        let a = async {
            let a1: u32 = ctx.step("a1", |_| async { Ok::<_, String>(1) }).await?;
            let a2: u32 = ctx
                .step("a2", move |_| async move { Ok::<_, String>(a1 + 1) })
                .await?;
            Ok::<_, reel::Error>((a1, a2))
        };
        let b = async {
            let b1: u32 = ctx.step("b1", |_| async { Ok::<_, String>(10) }).await?;
            let b2: u32 = ctx
                .step("b2", move |_| async move { Ok::<_, String>(b1 + 1) })
                .await?;
            Ok::<_, reel::Error>((b1, b2))
        };
        let ((a1, a2), (b1, b2)) = futures::try_join!(a, b)?;
        ctx.sleep(Duration::from_millis(sleep_ms)).await?;
        Ok(vec![a1, a2, b1, b2])
    }
}

const EXPECTED: [u32; 4] = [1, 2, 10, 11];
const LIMIT: Duration = Duration::from_secs(3);

async fn open(dir: &std::path::Path) -> reel::Result<Host> {
    common::hosts::open(dir, TwoBranches).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_branches_of_two_steps_complete_after_a_sleep() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host.start::<TwoBranches>("join-1", 20).await?;

    let out = within(LIMIT, "the run's result", run.result()).await?;
    assert_eq!(out?, EXPECTED, "live run after the sleep's wake-up");

    let events = run.events().await?;
    assert_eq!(
        testing::replay(TwoBranches, &events).await?,
        Replayed::Completed(EXPECTED.to_vec()),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_branches_of_two_steps_survive_a_restart_mid_sleep() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    // Long enough that the restart certainly happens while the sleep is pending.
    let run = host.start::<TwoBranches>("join-2", 400).await?;
    let status = within(LIMIT, "the sleep", run.wait_until_suspended()).await??;
    assert!(
        matches!(&status, RunStatus::Suspended { waiting_on } if waiting_on.contains("timer")),
        "{status:?}"
    );
    // The log as it stands mid-sleep already replays to the pending sleep.
    let mid_sleep = run.events().await?;
    let replayed = testing::replay(TwoBranches, &mid_sleep).await?;
    assert!(
        matches!(&replayed, Replayed::Pending(_)),
        "replay of the log mid-sleep: {replayed:?}"
    );
    host.shutdown().await?;

    let host = open(dir.path()).await?;
    let run = host.handle::<TwoBranches>("join-2");
    let out = within(LIMIT, "the run's result after the restart", run.result()).await?;
    assert_eq!(out?, EXPECTED, "run resumed by a new host");

    let events = run.events().await?;
    assert_eq!(
        testing::replay(TwoBranches, &events).await?,
        Replayed::Completed(EXPECTED.to_vec()),
        "full replay of the final log"
    );
    host.shutdown().await?;
    Ok(())
}
