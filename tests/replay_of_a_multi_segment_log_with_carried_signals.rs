//! `reel::testing::replay` of a saved log (`events()`) of a run that continued as
//! new with a signal carried over, and took a patched branch in its second
//! segment, replays the last segment to the run's result; the log saved while
//! the run waited replays to that wait.

mod common;

use std::time::Duration;

use common::within;
use reel::testing::{Replayed, replay};
use reel::{Ctx, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Segment 0 takes one `n` and continues as new; segment 1 takes two more (one of
/// them carried over), patched to add a step in between.
struct Counter;
impl Workflow for Counter {
    const NAME: &'static str = "counter";
    type Input = (u32, u32);
    type Output = u32;
    async fn run(&self, ctx: Ctx, (segment, acc): (u32, u32)) -> reel::Result<u32> {
        let a: u32 = ctx.wait_for_signal("n").await?;
        if segment == 0 {
            return ctx.continue_as_new::<Counter>((1, acc + a)).await;
        }
        let bonus = if ctx.patched("bonus") {
            ctx.step("bonus", |_| async { Ok::<_, String>(100u32) })
                .await?
        } else {
            0
        };
        let b: u32 = ctx.wait_for_signal("n").await?;
        Ok(acc + a + b + bonus)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_multi_segment_log_replays_to_the_result() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Counter).await?;
    let run = host.start::<Counter>("c", (0, 0)).await?;
    // Two signals before the first segment's wait: one is carried over.
    run.signal("n", &1u32, "s1").await?;
    run.signal("n", &2u32, "s2").await?;
    common::until_log(&run, LIMIT, "the second segment's last wait", |e| {
        common::waits_on(e, "n") >= 3
    })
    .await?;
    let pending = run.events().await?;
    run.signal("n", &4u32, "s3").await?;
    let out = within(LIMIT, "the run", run.result()).await??;
    assert_eq!(out, 1 + 2 + 4 + 100);
    let events = run.events().await?;
    assert_eq!(replay(Counter, &events).await?, Replayed::Completed(out));
    let mid = replay(Counter, &pending).await?;
    assert!(matches!(mid, Replayed::Pending(_)), "{mid:?}");
    host.shutdown().await?;
    Ok(())
}
