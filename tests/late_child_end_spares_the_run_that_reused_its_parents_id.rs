//! A child asked to cancel when its parent completed may take a while to clean up.
//! If the parent is deleted meanwhile and a new run takes its id, the child's late
//! end belongs to the deleted parent: the new run's log gets nothing of it, and
//! the new run goes on and finishes as if the child never existed. Nor does a new
//! run under the id of a deleted parent close that parent's detached children.

mod common;

use std::time::Duration;

use common::late_child::{CLEANUP, Child, Parent, RACE_THE_CHILD, WAIT_FOR_GO};
use common::within;
use reel::{Ctx, Error, Event, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_late_end_does_not_reach_the_new_run_under_its_parents_id() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = reel::Host::builder()
        .path(dir.path())
        .register(Parent)
        .register(Child)
        .build()
        .await?;
    let old = host.start::<Parent>("p", RACE_THE_CHILD).await?;
    assert_eq!(within(LIMIT, "the old parent", old.result()).await??, 0);
    let child = host.handle::<Child>("p-child");
    common::until_log(&child, LIMIT, "the child's cleanup to start", |e| {
        e.iter()
            .any(|e| matches!(e, Event::StepStarted { id, .. } if id == "cleanup"))
    })
    .await?;

    old.delete().await?;
    let new = host.start::<Parent>("p", WAIT_FOR_GO).await?;
    within(LIMIT, "the new run's wait", new.wait_until_suspended()).await??;

    // The child ends now, cancelled, long after its parent.
    CLEANUP.open();
    let ended = within(LIMIT, "the child", child.result()).await?;
    assert!(matches!(ended, Err(Error::Cancelled(_))), "{ended:?}");

    new.signal("go", &5u32, "g").await?;
    let out = within(LIMIT, "the new run", new.result()).await?;
    let events = new.events().await?;
    let foreign: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::ChildCompleted { .. } | Event::ChildDetached { .. }
            )
        })
        .collect();
    assert!(
        foreign.is_empty() && matches!(out, Ok(5)),
        "the new run under the deleted parent's id got the old child's end: {out:?}, \
         {foreign:?}, status {:?}",
        new.status().await
    );
    assert_eq!(new.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}

/// Starts a detached child that waits for `go`, then completes (input 0); or
/// completes at once (input 1).
struct Starter;
impl Workflow for Starter {
    const NAME: &'static str = "starter";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<u32> {
        if mode == 0 {
            ctx.start_child::<Child>("s-child", ()).await?;
        }
        Ok(mode)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_run_under_a_deleted_parents_id_does_not_close_its_children() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = reel::Host::builder()
        .path(dir.path())
        .register(Starter)
        .register(Child)
        .build()
        .await?;
    let old = host.start::<Starter>("s", 0).await?;
    within(LIMIT, "the old parent", old.result()).await??;
    let child = host.handle::<Child>("s-child");
    within(
        LIMIT,
        "the detached child's wait",
        child.wait_until_suspended(),
    )
    .await??;
    old.delete().await?;

    // A new run takes the id and completes: the old run's detached child goes on.
    let new = host.start::<Starter>("s", 1).await?;
    within(LIMIT, "the new run", new.result()).await??;
    assert!(new.children().await?.is_empty());
    let status = child.status().await?;
    assert!(
        matches!(status, RunStatus::Suspended { .. }),
        "the deleted parent's detached child was touched by the new run: {status:?}"
    );
    child.signal("go", &3u32, "g").await?;
    assert_eq!(within(LIMIT, "the child", child.result()).await??, 3);
    host.shutdown().await?;
    Ok(())
}
