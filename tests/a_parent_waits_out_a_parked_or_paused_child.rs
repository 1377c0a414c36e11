//! A parent waiting on a child that cannot go on for now. A parked child (its
//! handler crash-looped) has not ended: the parent stays suspended on it, and
//! `retry()` of the child after the fix completes both, the parent with the
//! child's output. A parent cancelled while its child is parked or paused asks
//! the child to cancel, and such a child ends cancelled at once ("a paused run
//! that is cancelled ... ends cancelled at once: it cannot run cleanup, as for a
//! parked run"), so the parent's cancel returns and both end cancelled.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

static FIXED: AtomicBool = AtomicBool::new(false);

/// What a [`Kid`] does after its first step.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
enum Mood {
    /// Panics outside any step until `FIXED` is set.
    CrashUntilFixed,
    /// Panics outside any step for ever.
    CrashForEver,
    /// Waits for `go`.
    Wait,
}

struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = Mood;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mood: Mood) -> reel::Result<u32> {
        let a: u32 = ctx.step("first", |_| async { Ok::<_, String>(7) }).await?;
        match mood {
            Mood::CrashUntilFixed if !FIXED.load(Ordering::SeqCst) => panic!("kid bug"),
            Mood::CrashForEver => panic!("kid bug for ever"),
            Mood::Wait => Ok(a + ctx.wait_for_signal::<u32>("go").await?),
            _ => Ok(a),
        }
    }
}

/// Waits on child `<own id>/kid` of the given mood and adds one.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = Mood;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mood: Mood) -> reel::Result<u32> {
        let kid = format!("{}/kid", ctx.run_id());
        Ok(ctx.child::<Kid>(&kid, mood).await? + 1)
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Kid)
        .register(Parent)
        .restart_limit(1, Duration::from_secs(600))
        .build()
        .await
}

/// Reads the run's status until `ok` holds of it; a run not created yet (a
/// child starts after its parent's first write) reads as not yet.
async fn until_status(
    run: &reel::AnyRun,
    what: &str,
    ok: impl Fn(&RunStatus) -> bool,
) -> anyhow::Result<RunStatus> {
    within(LIMIT, what, async {
        loop {
            match run.status().await {
                Ok(s) if ok(&s) => return anyhow::Ok(s),
                Ok(_) | Err(Error::UnknownRun(_)) => {}
                Err(e) => return Err(e.into()),
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?
}

async fn parent_waits_on_kid(host: &Host, parent: &str) -> anyhow::Result<()> {
    let status = within(
        LIMIT,
        "the parent's wait",
        host.run(parent).wait_until_suspended(),
    )
    .await??;
    match status {
        RunStatus::Suspended { waiting_on } => {
            assert!(
                waiting_on.contains("kid"),
                "{parent}: waits on {waiting_on}"
            )
        }
        other => panic!("{parent}: expected suspended on its child, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_child_keeps_its_parent_waiting_until_it_is_retried() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let parent = host.start::<Parent>("p", Mood::CrashUntilFixed).await?;
    let kid = host.run("p/kid");
    until_status(&kid, "the kid's park", |s| s.kind() == StatusKind::Parked).await?;
    parent_waits_on_kid(&host, "p").await?;
    assert!(
        matches!(kid.result::<u32>().await, Err(Error::Crashed(_))),
        "result() of a parked run is its parking error"
    );

    // The parent's wait survives a restart while the child is parked (a new host
    // retries parked runs: it parks again, the cause persisting).
    host.shutdown().await?;
    let host = self::host(dir.path()).await?;
    let kid = host.run("p/kid");
    until_status(&kid, "the kid's park again", |s| {
        s.kind() == StatusKind::Parked
    })
    .await?;
    parent_waits_on_kid(&host, "p").await?;

    FIXED.store(true, Ordering::SeqCst);
    kid.retry().await?;
    assert_eq!(within(LIMIT, "the kid", kid.result::<u32>()).await??, 7);
    let parent = host.handle::<Parent>(parent.id());
    assert_eq!(within(LIMIT, "the parent", parent.result()).await??, 8);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_cancelled_while_its_child_is_parked_ends_both() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let parent = host.start::<Parent>("q", Mood::CrashForEver).await?;
    let kid = host.run("q/kid");
    until_status(&kid, "the kid's park", |s| s.kind() == StatusKind::Parked).await?;
    parent_waits_on_kid(&host, "q").await?;

    within(LIMIT, "the parent's cancel", parent.cancel("stop")).await??;
    assert!(matches!(parent.result().await, Err(Error::Cancelled(_))));
    until_status(&kid, "the kid's end", |s| s.kind() == StatusKind::Cancelled).await?;
    assert!(matches!(
        kid.result::<u32>().await,
        Err(Error::Cancelled(_))
    ));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_cancelled_while_its_child_is_paused_ends_both() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let parent = host.start::<Parent>("r", Mood::Wait).await?;
    let kid = host.run("r/kid");
    until_status(&kid, "the kid's wait", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    kid.pause().await?;
    assert_eq!(kid.status().await?.kind(), StatusKind::Paused);
    parent_waits_on_kid(&host, "r").await?;

    within(LIMIT, "the parent's cancel", parent.cancel("stop")).await??;
    assert!(matches!(parent.result().await, Err(Error::Cancelled(_))));
    until_status(&kid, "the kid's end", |s| s.kind() == StatusKind::Cancelled).await?;
    assert!(matches!(
        kid.signal("go", &1u32, "late").await,
        Err(Error::RunFinished(_))
    ));
    host.shutdown().await?;
    Ok(())
}
