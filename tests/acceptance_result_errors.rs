//! Acceptance: `result()` of a run that failed returns the error the handler failed
//! with, typed (DESIGN: "`result()` ... a failed run returns its recorded error
//! variant"), at once for a run that has ended, and the same after a host restart;
//! `status()` and `host.runs()` report the failure with the error's Display text.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, RunStatus, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Sends a signal to the run named by its input and propagates the answer with `?`.
struct Relay;
impl Workflow for Relay {
    const NAME: &'static str = "relay";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, target: String) -> reel::Result<u32> {
        ctx.signal(&target, "go", &1u32, "relay-1").await?;
        Ok(1)
    }
}

/// Fails its handler with a chosen error.
struct Refuse;
impl Workflow for Refuse {
    const NAME: &'static str = "refuse";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, why: String) -> reel::Result<u32> {
        ctx.step("look", |_| async { Ok::<_, String>(()) }).await?;
        Err(Error::failed(why))
    }
}

/// A child whose only step is declined for good.
struct Declined;
impl Workflow for Declined {
    const NAME: &'static str = "declined";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("charge", |_| async {
            Err::<u32, _>(StepError::non_retryable("card declined"))
        })
        .await
    }
}

/// Calls a `Declined` child and propagates its error with `?`.
struct Buyer;
impl Workflow for Buyer {
    const NAME: &'static str = "buyer";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, child: String) -> reel::Result<u32> {
        let n = ctx.child::<Declined>(&child, ()).await?;
        Ok(n + 1)
    }
}

async fn open(path: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(Relay)
        .register(Refuse)
        .register(Declined)
        .register(Buyer)
        .register(common::workflows::Quick)
        .register(common::workflows::Waiter)
        .build()
        .await
}

/// The status `host.runs()` reports for `id`.
async fn listed(host: &Host, id: &str) -> anyhow::Result<RunStatus> {
    host.runs()
        .await?
        .into_iter()
        .find(|r| r.run_id == id)
        .map(|r| r.status)
        .ok_or_else(|| anyhow::anyhow!("host.runs() does not list `{id}`"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_with_unknown_run_reports_unknown_run_live_and_after_restart()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host
        .start::<Relay>("relay-unknown", "nobody".into())
        .await?;
    let live = within(LIMIT, "the relay's end", run.result()).await?;
    assert_eq!(
        live,
        Err(Error::UnknownRun("nobody".into())),
        "the handler returned Err(UnknownRun) from ctx.signal: result() must return that variant"
    );
    host.shutdown().await?;

    let host = open(dir.path()).await?;
    let run = host.handle::<Relay>("relay-unknown");
    assert_eq!(
        within(LIMIT, "the result after a restart", run.result()).await?,
        Err(Error::UnknownRun("nobody".into()))
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_with_run_finished_reports_run_finished() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let done = host.start::<common::workflows::Quick>("done", 3).await?;
    assert_eq!(within(LIMIT, "quick", done.result()).await??, 3);
    let run = host.start::<Relay>("relay-finished", "done".into()).await?;
    assert_eq!(
        within(LIMIT, "the relay's end", run.result()).await?,
        Err(Error::RunFinished("done".into()))
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_defined_failure_is_reported_alike_by_result_status_and_runs()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host
        .start::<Refuse>("refused", "out of stock".into())
        .await?;
    let want = Error::Failed("out of stock".into());
    assert_eq!(
        within(LIMIT, "the end", run.result()).await?,
        Err(want.clone())
    );
    let failed = RunStatus::Failed {
        error: want.to_string(),
    };
    assert_eq!(run.status().await?, failed);
    assert_eq!(listed(&host, "refused").await?, failed);
    host.shutdown().await?;

    let host = open(dir.path()).await?;
    let run = host.handle::<Refuse>("refused");
    // An ended run's result is there at once: no waiting on anything.
    assert_eq!(
        within(
            Duration::from_secs(5),
            "the result after a restart",
            run.result()
        )
        .await?,
        Err(want)
    );
    assert_eq!(run.status().await?, failed);
    assert_eq!(listed(&host, "refused").await?, failed);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_step_failure_reaches_its_parent_as_a_step_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let parent = host.start::<Buyer>("buyer", "buyer-child".into()).await?;
    let want = Error::Step {
        step: "charge".into(),
        message: "card declined".into(),
    };
    assert_eq!(
        within(LIMIT, "the parent's end", parent.result()).await?,
        Err(want.clone())
    );
    // The child is a run like any other: its own handle answers the same.
    let child = host.handle::<Declined>("buyer-child");
    assert_eq!(
        within(LIMIT, "the child's end", child.result()).await?,
        Err(want.clone())
    );
    host.shutdown().await?;

    let host = open(dir.path()).await?;
    assert_eq!(
        within(
            LIMIT,
            "parent after restart",
            host.handle::<Buyer>("buyer").result()
        )
        .await?,
        Err(want.clone())
    );
    assert_eq!(
        within(
            LIMIT,
            "child after restart",
            host.handle::<Declined>("buyer-child").result()
        )
        .await?,
        Err(want.clone())
    );
    assert_eq!(
        listed(&host, "buyer").await?,
        RunStatus::Failed {
            error: want.to_string()
        }
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_returns_cancelled_with_its_reason_after_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host
        .start::<common::workflows::Waiter>("to-cancel", ())
        .await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    within(LIMIT, "the cancel", run.cancel("customer changed mind")).await??;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await?,
        Err(Error::Cancelled("customer changed mind".into()))
    );
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    host.shutdown().await?;

    let host = open(dir.path()).await?;
    let run = host.handle::<common::workflows::Waiter>("to-cancel");
    assert_eq!(
        within(LIMIT, "the result after restart", run.result()).await?,
        Err(Error::Cancelled("customer changed mind".into()))
    );
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(
        run.signal("go", &1u32, "late").await,
        Err(Error::RunFinished("to-cancel".into()))
    );
    host.shutdown().await?;
    Ok(())
}
