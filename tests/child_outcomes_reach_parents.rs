//! Adversarial child-run tests: failures and cancellations of children reaching the
//! parent as typed errors, a child id shared by two parents, a child id taken by
//! another workflow, a child that continues as new, a child finished before its
//! parent asks.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Child: by input, returns, fails a step, fails in the handler, or waits for a
/// signal.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u8;
    type Output = String;
    fn retry_policy(&self) -> reel::RetryPolicy {
        reel::RetryPolicy::default().with_max_attempts(1)
    }
    async fn run(&self, ctx: Ctx, how: u8) -> reel::Result<String> {
        match how {
            0 => Ok("fine".into()),
            1 => {
                ctx.step("work", |_| async { Err::<String, _>("kid broke") })
                    .await
            }
            2 => Err(Error::failed("kid gives up")),
            _ => ctx.wait_for_signal("go").await,
        }
    }
}

/// Parent: calls a child and reports what it got, as text.
struct Mom;
impl Workflow for Mom {
    const NAME: &'static str = "mom";
    type Input = (String, u8);
    type Output = String;
    async fn run(&self, ctx: Ctx, input: (String, u8)) -> reel::Result<String> {
        let got = ctx.child::<Kid>(&input.0, input.1).await;
        // The parent goes on after a child's failure.
        let after = ctx
            .step("after", |_| async { Ok::<_, String>("after".to_owned()) })
            .await?;
        Ok(format!("{got:?} {after}"))
    }
}

fn open(path: &std::path::Path) -> reel::HostBuilder {
    Host::builder().path(path).register(Kid).register(Mom)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_outcomes_reach_the_parent_as_typed_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).build().await?;
    let ok = host.start::<Mom>("m-0", ("k-0".into(), 0)).await?;
    let step = host.start::<Mom>("m-1", ("k-1".into(), 1)).await?;
    let failed = host.start::<Mom>("m-2", ("k-2".into(), 2)).await?;
    assert_eq!(
        within(LIMIT, "ok", ok.result()).await??,
        r#"Ok("fine") after"#
    );
    assert_eq!(
        within(LIMIT, "step", step.result()).await??,
        format!(
            "{:?} after",
            Err::<String, _>(Error::Step {
                step: "work".into(),
                message: "kid broke".into()
            })
        )
    );
    assert_eq!(
        within(LIMIT, "failed", failed.result()).await??,
        format!(
            "{:?} after",
            Err::<String, _>(Error::Failed("kid gives up".into()))
        )
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_cancelled_from_outside_is_a_cancelled_error_for_its_parent() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).build().await?;
    let mom = host.start::<Mom>("m", ("k".into(), 3)).await?;
    mom.wait_until_suspended().await?;
    let kid = host.handle::<Kid>("k");
    within(LIMIT, "kid waits", kid.wait_until_suspended()).await??;
    kid.cancel("kid not needed").await?;
    assert_eq!(
        within(LIMIT, "mom", mom.result()).await??,
        format!(
            "{:?} after",
            Err::<String, _>(Error::Cancelled("kid not needed".into()))
        )
    );
    // The parent itself was not cancelled.
    assert_eq!(mom.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_finished_before_the_parent_calls_gives_its_recorded_result() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).build().await?;
    // The child id already names a finished run of the same workflow.
    let kid = host.start::<Kid>("k", 0).await?;
    assert_eq!(kid.result().await?, "fine");
    let mom = host.start::<Mom>("m", ("k".into(), 2)).await?;
    assert_eq!(
        within(LIMIT, "mom", mom.result()).await??,
        r#"Ok("fine") after"#
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parents_waiting_on_one_child_id_both_get_its_result() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let host = open(&path).build().await?;
    let a = host.start::<Mom>("a", ("shared".into(), 3)).await?;
    let b = host.start::<Mom>("b", ("shared".into(), 3)).await?;
    a.wait_until_suspended().await?;
    b.wait_until_suspended().await?;
    host.shutdown().await?;
    let host = open(&path).build().await?;
    let kid = host.handle::<Kid>("shared");
    within(LIMIT, "kid waits", kid.wait_until_suspended()).await??;
    kid.signal("go", "shared result", "g").await?;
    for p in ["a", "b"] {
        assert_eq!(
            within(LIMIT, "a parent", host.handle::<Mom>(p).result()).await??,
            r#"Ok("shared result") after"#,
            "parent {p}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// Another workflow, to take a child's id.
struct Squatter;
impl Workflow for Squatter {
    const NAME: &'static str = "squatter";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_id_taken_by_another_workflow_is_an_error_not_a_hang() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).register(Squatter).build().await?;
    host.start::<Squatter>("taken", ()).await?.result().await?;
    let mom = host.start::<Mom>("m", ("taken".into(), 0)).await?;
    let out = within(LIMIT, "mom", mom.result()).await??;
    assert!(out.starts_with("Err("), "{out}");
    assert!(
        out.contains("squatter"),
        "the error names the other workflow: {out}"
    );
    host.shutdown().await?;
    Ok(())
}

/// A child that continues as new twice before it returns.
struct Looper;
impl Workflow for Looper {
    const NAME: &'static str = "looper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let add: u32 = ctx.wait_for_signal("add").await?;
        if n >= 2 {
            return Ok(n * 100 + add);
        }
        ctx.continue_as_new::<Looper>(n + 1).await
    }
}

struct LoopParent;
impl Workflow for LoopParent {
    const NAME: &'static str = "loop-parent";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.child::<Looper>("looper-child", 0).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_gets_the_last_segment_of_a_child_that_continued_as_new() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Looper, LoopParent).await?;
    let parent = host.start::<LoopParent>("p", ()).await?;
    let child = host.handle::<Looper>("looper-child");
    within(LIMIT, "child started", async {
        loop {
            if child.status().await.is_ok() {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await?;
    // Signals buffered in one burst carry over across both continuations.
    for i in 0..3u32 {
        child.signal("add", &i, &format!("a-{i}")).await?;
    }
    assert_eq!(within(LIMIT, "parent", parent.result()).await??, 202);
    assert_eq!(child.result().await?, 202);
    host.shutdown().await?;
    Ok(())
}

/// Races a child against a timer; the timer wins and the parent completes.
struct Impatient;
impl Workflow for Impatient {
    const NAME: &'static str = "impatient";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let kid = ctx.child::<Kid>("slow-kid", 3);
        let tmr = ctx.sleep(Duration::from_secs(3600));
        tokio::pin!(kid, tmr);
        tokio::select! {
            k = &mut kid => Ok(format!("kid {k:?}")),
            t = &mut tmr => { t?; Ok("gave up".to_owned()) }
        }
    }
}

/// A waited-for child whose parent completes without waiting for it any more is
/// asked to cancel, as a cancel of the parent and a continue-as-new ask it
/// (Temporal's default parent-close policy), not left running for ever (here:
/// suspended on a signal nobody will send, as it was before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_abandoned_by_a_completed_parent_is_not_left_waiting_for_ever() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock =
        reel::testing::TestClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = open(dir.path())
        .clock(clock.clone())
        .register(Impatient)
        .build()
        .await?;
    let parent = host.start::<Impatient>("imp", ()).await?;
    parent.wait_until_suspended().await?;
    let kid = host.handle::<Kid>("slow-kid");
    within(LIMIT, "kid waits", kid.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(3600));
    assert_eq!(within(LIMIT, "parent", parent.result()).await??, "gave up");
    let ended = within(
        Duration::from_secs(3),
        "the abandoned child to end",
        kid.result(),
    )
    .await;
    assert!(
        matches!(ended, Ok(Err(Error::Cancelled(_)))),
        "child after its parent completed: {ended:?}, status {:?}",
        kid.status().await
    );
    host.shutdown().await?;
    Ok(())
}
