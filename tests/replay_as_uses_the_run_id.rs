//! `testing::replay_as` replays a log under the run's own id: a handler that derives
//! ids from `ctx.run_id()` (a child run named after its parent) replays cleanly,
//! where `testing::replay` (run id `replay`) reports the divergence it would cause.

mod common;

use reel::testing::{self, Replayed};
use reel::{Ctx, Error, Workflow};

struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("double", |_| async move { Ok::<_, String>(n * 2) })
            .await
    }
}

struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let kid = format!("{}/kid", ctx.run_id());
        ctx.child::<Kid>(&kid, n).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_as_gives_the_handler_its_run_id() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Parent, Kid).await?;
    let run = host.start::<Parent>("order-7", 21).await?;
    assert_eq!(run.result().await?, 42);
    let events = run.events().await?;
    host.shutdown().await?;

    assert_eq!(
        testing::replay_as(Parent, "order-7", &events).await?,
        Replayed::Completed(42)
    );
    assert!(matches!(
        testing::replay(Parent, &events).await,
        Err(Error::ReplayDivergence { .. })
    ));
    Ok(())
}
