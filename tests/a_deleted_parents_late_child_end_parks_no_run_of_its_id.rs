//! A parent waiting on its child is cancelled: it ends at once, while its child,
//! asked to cancel too, takes a while to clean up. The parent is deleted and its
//! id used again by a new run. When the child finally ends, its end belongs to the
//! deleted parent: the new run under the parent's id must not hear of it in any
//! way: it is not parked, not crashed, and goes on to its own end
//! (`late_child_end_spares_the_run_that_reused_its_parents_id.rs` has the child's
//! end arrive while the new run stands; here it arrives while the id has no run,
//! and the new run is started right after).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Gate, within};
use reel::{Ctx, Error, Event, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);
/// How long the new run is watched for a park after the child's end: longer than
/// a background delivery retries (about 3 s).
const WATCH: Duration = Duration::from_secs(5);

static CLEANUP: Gate = Gate::new();

/// Waits for `go`; asked to cancel, it cleans up (held by `CLEANUP`) and ends
/// cancelled.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        match ctx.wait_for_signal::<u32>("go").await {
            Err(Error::Cancelled(reason)) => {
                ctx.shielded()
                    .step("cleanup", |_| async {
                        CLEANUP.wait().await;
                        Ok::<_, String>(())
                    })
                    .await?;
                Err(Error::Cancelled(reason))
            }
            other => other,
        }
    }
}

/// Input 0: waits on its child `<id>-kid`. Input 1: waits for `go` and returns it.
struct Dad;
impl Workflow for Dad {
    const NAME: &'static str = "dad";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<u32> {
        if mode == 1 {
            return ctx.wait_for_signal("go").await;
        }
        let kid = format!("{}-kid", ctx.run_id());
        ctx.child::<Kid>(&kid, ()).await
    }
}

/// The run's activation for the child's end reads the id while it has no run;
/// that read's answer is held (fault injection) while the new run is started,
/// so the activation fails on a run that is gone while a new one stands. (The
/// host restarts no crashed actor, so a failed activation is final at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_childs_end_after_its_cancelled_parent_was_deleted_spares_the_next_run()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .register(Dad)
        .register(Kid)
        .restart_limit(0, Duration::from_secs(30))
        .build()
        .await?;

    // The parent waits on its child; it is cancelled (ending at once), its child
    // begins its cleanup, and the parent is deleted.
    let dad = host.start::<Dad>("dad", 0).await?;
    let kid = host.handle::<Kid>("dad-kid");
    within(LIMIT, "the kid's wait", async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = kid.status().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    within(LIMIT, "the parent's cancel", dad.cancel("enough")).await??;
    common::until_log(&kid, LIMIT, "the kid's cleanup", |e| {
        e.iter()
            .any(|e| matches!(e, Event::StepStarted { id, .. } if id == "cleanup"))
    })
    .await?;
    dad.delete().await?;

    // The child ends; the next read of the parent's id (finding no run) is held
    // while a new run takes the id and waits.
    let (hold, gate) = Fault::hold(Op::GetRun);
    faults.inject(hold.for_run("dad"));
    CLEANUP.open();
    let ended = within(LIMIT, "the kid", kid.result()).await?;
    assert!(matches!(ended, Err(Error::Cancelled(_))), "{ended:?}");
    within(LIMIT, "a read of the deleted parent", gate.wait_arrived()).await?;
    let new = host.start::<Dad>("dad", 1).await?;
    within(LIMIT, "the new run's wait", new.wait_until_suspended()).await??;
    gate.release();

    // While the child's end is delivered (and retried), the new run waits
    // untouched.
    let until = Instant::now() + WATCH;
    while Instant::now() < until {
        let status = new.status().await?;
        assert!(
            matches!(status, RunStatus::Suspended { .. }),
            "the new run under a deleted parent's id, waiting for `go`, is now {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    new.signal("go", &7u32, "g").await?;
    let out = within(LIMIT, "the new run", new.result()).await?;
    assert!(matches!(out, Ok(7)), "the new run gave {out:?}");
    host.shutdown().await?;
    Ok(())
}
