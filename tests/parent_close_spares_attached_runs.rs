//! Parent-close cancels only a parent's own children. A handler that calls
//! `ctx.child` on the id of a run someone else started only attaches to it: when
//! the handler completes, fails, is cancelled or continues as new without waiting
//! for that run's end, the run goes on. A child the parent started itself is
//! cancelled, as before (Temporal's default parent-close policy).

mod common;

use std::time::Duration;

use common::{until_log, waits_on, within};
use reel::{Ctx, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for signal `go` and returns its payload.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        ctx.wait_for_signal::<u32>("go").await
    }
}

/// How the parent ends once its short timer has beaten the child call.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy)]
enum End {
    Complete,
    Fail,
    Cancel,
}

/// Calls `Waiter` as a child on the given id, and stops waiting for it when a
/// short timer fires first; then ends as `End` says (`Cancel` waits for a cancel
/// request instead).
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = (String, End);
    type Output = String;
    async fn run(&self, ctx: Ctx, (child, end): (String, End)) -> reel::Result<String> {
        let call = ctx.child::<Waiter>(&child, ());
        let timer = ctx.sleep(Duration::from_millis(20));
        tokio::select! {
            biased;
            r = call => return Ok(format!("child ended first: {r:?}")),
            r = timer => r?,
        }
        match end {
            End::Complete => Ok("gave up on the child".into()),
            End::Fail => Err(reel::Error::Failed("gave up on the child".into())),
            End::Cancel => {
                ctx.wait_for_signal::<()>("never").await?;
                Ok("signalled".into())
            }
        }
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Waiter)
        .register(Parent)
        .build()
        .await
}

/// Whether the run ended as cancelled.
async fn cancelled(host: &Host, id: &str) -> anyhow::Result<bool> {
    let waiter = host.handle::<Waiter>(id);
    let ended = within(LIMIT, id, waiter.result()).await?;
    Ok(matches!(ended, Err(reel::Error::Cancelled(_)))
        && matches!(waiter.status().await?, RunStatus::Cancelled))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_parent_only_attached_to_outlives_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    for (i, end) in [End::Complete, End::Fail, End::Cancel]
        .into_iter()
        .enumerate()
    {
        // Started by the service, not by the parent: the parent only attaches.
        let theirs = format!("theirs-{i}");
        let waiter = host.start::<Waiter>(&theirs, ()).await?;
        let parent = host
            .start::<Parent>(&format!("attaching-{i}"), (theirs.clone(), end))
            .await?;
        if matches!(end, End::Cancel) {
            until_log(&parent, LIMIT, "the parent past its timer", |log| {
                waits_on(log, "never") == 1
            })
            .await?;
            parent.cancel("done with it").await?;
        }
        let _ = within(LIMIT, "parent ends", parent.result()).await?;
        // The attached run still waits, and still answers its signal.
        waiter.signal("go", &7u32, &format!("go-{i}")).await?;
        assert_eq!(
            within(LIMIT, "the attached run", waiter.result()).await??,
            7,
            "the run the parent attached to was not cancelled ({i})"
        );
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_the_parent_started_is_cancelled_with_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let parent = host
        .start::<Parent>("starting", ("mine".into(), End::Complete))
        .await?;
    assert_eq!(
        within(LIMIT, "parent", parent.result()).await??,
        "gave up on the child"
    );
    assert!(
        cancelled(&host, "mine").await?,
        "the parent's own child is cancelled as the parent completes"
    );
    host.shutdown().await?;
    Ok(())
}
