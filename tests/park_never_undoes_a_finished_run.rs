//! Parking is conditional: a run that finishes while the supervisor is parking it
//! (the park read the run before it finished and writes after) stays finished. It is
//! not put back into the active set, so the next host does not run it a second time.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reel::{Ctx, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};
use reel_storage::{MetaReader, RunState};

/// Panics outside any step while `crash` is set: a crash loop.
#[derive(Clone)]
struct Flaky {
    crash: Arc<AtomicBool>,
}
impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = ();
    type Output = u32;
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<u32> {
        assert!(!self.crash.load(Ordering::SeqCst), "handler bug");
        Ok(42)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_finishing_while_it_is_parked_stays_finished() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let flaky = Flaky {
        crash: Arc::new(AtomicBool::new(true)),
    };
    let host = Host::builder()
        .store(faults.clone())
        .register(flaky.clone())
        // No restart: the first crash makes the supervisor park the run.
        .restart_limit(0, Duration::from_secs(60))
        .build()
        .await?;
    // The park's read of the run is answered, then held: it sees the run unfinished.
    // (The start's own read, which finds no run of that id, goes first.)
    let (hold, gate) = Fault::hold(Op::GetRun);
    faults.inject(hold.for_run("r").after(1));
    let run = host.start::<Flaky>("r", ()).await?;
    gate.wait_arrived().await;

    // Meanwhile the bug is fixed and the run is woken by a signal: it completes.
    flaky.crash.store(false, Ordering::SeqCst);
    run.signal("poke", &(), "poke-1").await?;
    assert_eq!(run.result().await?, 42);

    // Now the park goes on with what it read before the run finished.
    let submits = faults.calls(Op::Submit);
    gate.release();
    for _ in 0..500 {
        if faults.calls(Op::Submit) > submits {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(faults.calls(Op::Submit) > submits, "the park wrote nothing");
    host.shutdown().await?;

    let store = FjallStore::open(dir.path())?;
    assert_eq!(
        store.get_run("r")?.map(|m| m.state),
        Some(RunState::Completed)
    );
    assert!(
        store.unfinished_runs()?.items.is_empty(),
        "the finished run is back in the active set"
    );
    drop(store);
    let host = common::hosts::open(dir.path(), flaky).await?;
    assert_eq!(
        host.handle::<Flaky>("r").status().await?,
        RunStatus::Completed
    );
    host.shutdown().await?;
    Ok(())
}
