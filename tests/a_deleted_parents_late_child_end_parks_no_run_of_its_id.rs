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

use common::late_child::{CLEANUP, Child, Parent, WAIT_FOR_GO, WAIT_ON_THE_CHILD};
use common::within;
use reel::{Error, Event, FjallStore, Host, RunStatus};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);
/// How long the new run is watched for a park after the child's end: longer than
/// a background delivery retries (about 3 s).
const WATCH: Duration = Duration::from_secs(5);

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
        .register(Parent)
        .register(Child)
        .restart_limit(0, Duration::from_secs(30))
        .build()
        .await?;

    // The parent waits on its child; it is cancelled (ending at once), its child
    // begins its cleanup, and the parent is deleted.
    let dad = host.start::<Parent>("dad", WAIT_ON_THE_CHILD).await?;
    let kid = host.handle::<Child>("dad-child");
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
    let new = host.start::<Parent>("dad", WAIT_FOR_GO).await?;
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
