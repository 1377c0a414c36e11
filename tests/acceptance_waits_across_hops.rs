//! Acceptance: a `wait_published` caller keeps waiting while the run continues as
//! new (it has not ended), and a child call on a run that does not wait on the
//! caller is no cycle.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Segment 0 waits for `hop` and continues as new; segment 1 waits for `go`,
/// publishes `late` and ends.
struct Hopper;
impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        if segment == 0 {
            let _: () = ctx.wait_for_signal("hop").await?;
            return ctx.continue_as_new::<Hopper>(1).await;
        }
        let _: () = ctx.wait_for_signal("go").await?;
        ctx.publish("late", &42u32).await?;
        Ok(segment)
    }
}

/// Starts `Caller` detached under the id it is given, then waits for `done`.
struct Starter;
impl Workflow for Starter {
    const NAME: &'static str = "starter";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, other: String) -> reel::Result<String> {
        let me = ctx.run_id().to_owned();
        ctx.start_child::<Caller>(&other, me).await?;
        let done: String = ctx.wait_for_signal("done").await?;
        Ok(done)
    }
}

/// Waits on the run it is given as a `ctx.child` call.
struct Caller;
impl Workflow for Caller {
    const NAME: &'static str = "caller";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, target: String) -> reel::Result<String> {
        match ctx.child::<Starter>(&target, String::new()).await {
            Ok(v) => Ok(format!("got {v}")),
            Err(Error::ChildCycle { cycle }) => Ok(format!("cycle {cycle:?}")),
            Err(e) => Err(e),
        }
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Hopper)
        .register(Starter)
        .register(Caller)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_waiting_across_continue_as_new() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Hopper>("hop", 0).await?;
    within(LIMIT, "the run to wait", run.wait_until_suspended()).await??;
    let waiter = {
        let run = run.clone();
        tokio::spawn(async move { run.wait_published::<u32>("late").await })
    };
    run.signal("hop", &(), "h-1").await?;
    within(LIMIT, "the second segment to wait", async {
        loop {
            let info = run.info().await?;
            if info.segment == 1 && matches!(info.status, RunStatus::Suspended { .. }) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    // Give a wrongly woken waiter a moment to come back (a bounded negative check).
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        while !waiter.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        !waiter.is_finished(),
        "the waiter returned at the segment boundary: {:?}",
        waiter.await
    );
    run.signal("go", &(), "g-1").await?;
    assert_eq!(within(LIMIT, "the published value", waiter).await???, 42);
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_on_a_parent_that_does_not_wait_back_is_no_cycle() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let starter = host.start::<Starter>("boss", "helper".into()).await?;
    let caller = host.handle::<Caller>("helper");
    within(LIMIT, "both to wait", async {
        loop {
            if let (Ok(RunStatus::Suspended { .. }), Ok(RunStatus::Suspended { .. })) =
                (starter.status().await, caller.status().await)
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    starter.signal("done", "ok", "d-1").await?;
    assert_eq!(within(LIMIT, "the starter", starter.result()).await??, "ok");
    assert_eq!(
        within(LIMIT, "the caller", caller.result()).await??,
        "got ok"
    );
    host.shutdown().await?;
    Ok(())
}
