//! A run that continues as new asks the children its old segment waited on to
//! cancel ("parent continued as new"). On the embedded store that request goes
//! to them after the write of the new segment, so a host that goes away in
//! between must not leave them waiting for ever: recovery finds a child whose
//! parent is in a later segment that did not start it, and asks it in the
//! parent's words. Here a `FaultStore` refuses every append of the child, so it
//! cannot record the request; the host then shuts down and the directory is
//! reopened without faults. A child the new segment started is left alone.

mod common;

use std::time::Duration;

use common::within;
use common::workflows::Waiter;
use reel::{Ctx, Error, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);

/// Segment 0: waits on child `<id>/old` and continues as new once `move`
/// arrives. Segment 1: starts child `<id>/new`, then waits on `end` and on it.
struct Mover;
impl Workflow for Mover {
    const NAME: &'static str = "mover";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        if segment == 0 {
            let child = ctx.child::<Waiter>(&format!("{}/old", ctx.run_id()), ());
            let moved = ctx.wait_for_signal::<()>("move");
            return tokio::select! {
                biased;
                _ = moved => ctx.continue_as_new::<Mover>(1).await,
                r = child => r,
            };
        }
        let child = ctx.child::<Waiter>(&format!("{}/new", ctx.run_id()), ());
        let end = ctx.wait_for_signal::<u32>("end");
        let (c, e) = futures::join!(child, end);
        Ok(c? + e?)
    }
}

async fn host(store: std::sync::Arc<dyn reel::Store>) -> reel::Result<Host> {
    Host::builder()
        .store(store)
        .register(Mover)
        .register(Waiter)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_segments_child_is_cancelled_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = host(faults.clone()).await?;
    let run = host.start::<Mover>("m", 0).await?;
    within(LIMIT, "the first wait", run.wait_until_suspended()).await??;
    faults.inject(Fault::fail(Op::Submit).for_run("m/old").until_healed());
    run.signal("move", &(), "move-1").await?;
    common::until_log(&run, LIMIT, "the second segment's wait on end", |e| {
        common::waits_on(e, "end") == 1
    })
    .await?;
    within(LIMIT, "the old child's refusal", async {
        while faults.injected() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    let old = host.handle::<Waiter>("m/old");
    let events = old.events().await?;
    anyhow::ensure!(
        matches!(old.status().await?, RunStatus::Suspended { .. })
            && !events
                .iter()
                .any(|e| matches!(e, reel::Event::CancelRequested { .. })),
        "the old child took the request after all: {events:?}"
    );
    within(LIMIT, "the shutdown", host.shutdown()).await??;
    drop(faults);

    let host = self::host(FjallStore::open(dir.path())?).await?;
    let old = host.handle::<Waiter>("m/old");
    match within(LIMIT, "the old child's end", old.result()).await? {
        Err(Error::Cancelled(reason)) => {
            assert_eq!(reason, "parent continued as new", "the old child's reason");
        }
        other => panic!("the old child ended {other:?}, not cancelled"),
    }
    // The new segment's child is its parent's to settle: it is still waiting.
    let new = host.handle::<Waiter>("m/new");
    anyhow::ensure!(
        matches!(new.status().await?, RunStatus::Suspended { .. }),
        "the new segment's child: {:?}",
        new.status().await?
    );
    new.signal("go", &5u32, "go-1").await?;
    let run = host.handle::<Mover>("m");
    run.signal("end", &2u32, "end-1").await?;
    assert_eq!(
        within(LIMIT, "the parent's result", run.result()).await??,
        7
    );
    host.shutdown().await?;
    Ok(())
}
