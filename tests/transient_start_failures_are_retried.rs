//! A start or a child start that fails for a passing reason is not the run's end:
//! a start whose append landed but whose answer was lost still runs when started
//! again, and a child whose start fails for a moment is started later instead of
//! being recorded as a failed child (the parent would get a wrong result); nor is a
//! passing failure to read a finished child's result (read when the child had
//! ended before its parent asked for it).

mod common;

use std::time::Duration;

use common::retry;
use reel::{Ctx, FjallStore, Host, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

/// A step and a child run, no signal: nothing from outside wakes it.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<u64> {
        let a = ctx
            .step("a", |_| async move { Ok::<_, String>(n + 1) })
            .await?;
        let leaf = ctx
            .child::<Leaf>(&format!("{}-leaf", ctx.run_id()), a)
            .await?;
        Ok(leaf + 1)
    }
}

struct Leaf;
impl Workflow for Leaf {
    const NAME: &'static str = "leaf";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<u64> {
        ctx.step("x10", |_| async move { Ok::<_, String>(n * 10) })
            .await
    }
}

/// Starts `parent-<i>` runs over a FaultStore set up by `inject` and expects each to
/// complete with the right result. With `leaves_first`, each parent's child has
/// completed on its own before the faults are injected and the parent starts.
async fn parents(
    n: usize,
    leaves_first: bool,
    inject: impl FnOnce(&FaultStore),
) -> anyhow::Result<u64> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = Host::builder()
        .store(faults.clone())
        .register(Parent)
        .register(Leaf)
        .build()
        .await?;
    if leaves_first {
        for i in 0..n as u64 {
            let leaf = host
                .start::<Leaf>(&format!("parent-{i}-leaf"), i + 1)
                .await?;
            assert_eq!(leaf.result().await?, (i + 1) * 10);
        }
    }
    inject(&faults);
    for i in 0..n as u64 {
        let id = format!("parent-{i}");
        retry(50, || host.start::<Parent>(&id, i)).await?;
        let h = host.handle::<Parent>(&id);
        let Ok(result) = tokio::time::timeout(Duration::from_secs(60), h.result()).await else {
            anyhow::bail!(
                "{id} is stuck: {:?}: {:?}",
                h.status().await,
                h.events().await
            );
        };
        assert_eq!(result?, (i + 1) * 10 + 1, "{id}");
    }
    host.shutdown().await?;
    let store = FjallStore::open(dir.path())?;
    faults
        .check_acknowledged_in(&*store)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(faults.injected())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_answer_lost_still_runs() -> anyhow::Result<()> {
    // The RunStarted append lands, the caller hears it failed and starts again.
    let injected = parents(2, false, |f| {
        f.inject(Fault::lose_answer().for_run("parent-0"));
        f.inject(Fault::lose_answer().for_run("parent-1-leaf"));
    })
    .await?;
    assert_eq!(injected, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_start_failing_for_a_moment_is_not_a_child_failure() -> anyhow::Result<()> {
    let injected = parents(2, false, |f| {
        f.inject(Fault::fail(Op::Submit).for_run("parent-0-leaf"));
        f.inject(Fault::fail(Op::Submit).for_run("parent-1-leaf").times(3));
    })
    .await?;
    assert_eq!(injected, 4);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_child_result_failing_for_a_moment_is_not_a_child_failure() -> anyhow::Result<()>
{
    // A child that ended before its parent asked: its output is read from its log.
    let injected = parents(2, true, |f| {
        f.inject(Fault::fail(Op::LastEvent).for_run("parent-0-leaf"));
        f.inject(Fault::fail(Op::LastEvent).for_run("parent-1-leaf").times(3));
    })
    .await?;
    assert_eq!(injected, 4);
    Ok(())
}
