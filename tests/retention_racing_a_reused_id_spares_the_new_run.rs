//! A retention pass deletes the runs it found due, and only those. When an operator
//! deletes a due run by hand and starts a new run under its id while the pass is
//! between reading the old run and deleting it, the pass must leave the new run
//! alone: it ended less than the policy's age ago, or has not ended at all
//! (`delete` is for finished runs only).

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::within;
use common::workflows::Waiter;
use reel::testing::TestClock;
use reel::{FjallStore, Host, Retention, RunStatus};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retention_pass_does_not_delete_the_run_that_took_a_due_runs_id() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .clock(clock.clone())
        .register(Waiter)
        // Completed runs are kept an hour; the test runs the pass itself.
        .retention(
            Retention::keep_all()
                .completed_after(HOUR)
                .every(Duration::from_secs(24 * 3600)),
        )
        .build()
        .await?;

    let old = host.start::<Waiter>("reused", ()).await?;
    old.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "the old run", old.result()).await??, 1);
    clock.advance(2 * HOUR);

    // The pass reads the old run (due) and is held before it deletes it.
    let (hold, gate) = Fault::hold(Op::GetRun);
    faults.inject(hold.for_run("reused"));
    let pass = tokio::spawn({
        let host = host.clone();
        async move { host.enforce_retention().await }
    });
    within(LIMIT, "the pass to read the run", gate.wait_arrived()).await?;

    // Meanwhile an operator deletes the old run and the id is used again.
    host.run("reused").delete().await?;
    let new = host.start::<Waiter>("reused", ()).await?;
    within(LIMIT, "the new run's wait", new.wait_until_suspended()).await??;

    gate.release();
    let deleted = within(LIMIT, "the pass", pass).await???;

    let status = new.status().await;
    assert!(
        matches!(status, Ok(RunStatus::Suspended { .. })),
        "the retention pass (deleted {deleted}) took the new, unfinished run under the \
         reused id with it: status() = {status:?}"
    );
    new.signal("go", &2u32, "g").await?;
    assert_eq!(within(LIMIT, "the new run", new.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}
