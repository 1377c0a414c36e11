//! An unbiased `select!` polls its branches in a random order, so the ctx calls a
//! handler makes in one poll must not depend on it (README, "Determinism rules").
//! The two supported ways replay exactly across a restart: `biased;` over async
//! blocks that call the ctx when first polled, and an unbiased `select!` whose
//! branches' first ctx calls are made before it polls them (later calls behind an
//! `.await`, made when a recorded result wakes one branch). Each run is recorded
//! on one host and replayed on the next; none may park with a divergence.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Workflow};

const LIMIT: Duration = Duration::from_secs(20);
const RUNS: usize = 40;
const HOUR: Duration = Duration::from_secs(3600);

/// `biased;` over async blocks that each call the ctx at their first poll.
struct Biased;
impl Workflow for Biased {
    const NAME: &'static str = "biased";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        tokio::select! {
            biased;
            r = async { ctx.sleep(HOUR).await.map(|()| 0) } => r,
            r = async {
                let v = ctx.wait_for_signal::<u32>("go").await?;
                ctx.step("after", |_| async move { Ok::<_, String>(v + 1) }).await
            } => r,
        }
    }
}

/// Unbiased, with every branch's first ctx call made before the `select!` polls:
/// as branch expressions, and a future made before an async block that awaits it
/// and then calls the ctx again.
struct Made;
impl Workflow for Made {
    const NAME: &'static str = "made";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let go = ctx.wait_for_signal::<u32>("go");
        tokio::select! {
            r = ctx.sleep(HOUR) => r.map(|()| 0),
            r = ctx.wait_for_signal::<u32>("other") => r,
            r = async {
                let v = go.await?;
                ctx.step("after", |_| async move { Ok::<_, String>(v + 1) }).await
            } => r,
        }
    }
}

async fn recorded_then_replayed<W>() -> anyhow::Result<()>
where
    W: Workflow<Input = (), Output = u32> + Default,
{
    let dir = tempfile::tempdir()?;
    let open = || common::hosts::open(dir.path(), W::default());
    let host = open().await?;
    for i in 0..RUNS {
        let run = host.start::<W>(&format!("r{i}"), ()).await?;
        within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    }
    host.shutdown().await?;
    // The next host replays every log before the signal can reach the handler.
    let host = open().await?;
    for i in 0..RUNS {
        let run = host.handle::<W>(&format!("r{i}"));
        run.signal("go", &7u32, "go-1").await?;
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(matches!(out, Ok(8)), "run r{i}: {out:?}");
    }
    host.shutdown().await?;
    Ok(())
}

impl Default for Biased {
    fn default() -> Self {
        Biased
    }
}

impl Default for Made {
    fn default() -> Self {
        Made
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn biased_select_over_async_blocks_replays() -> anyhow::Result<()> {
    recorded_then_replayed::<Biased>().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbiased_select_over_futures_made_first_replays() -> anyhow::Result<()> {
    recorded_then_replayed::<Made>().await
}
