//! A retention pass reads a due run, and before it deletes it an operator deletes
//! that run and starts a new one under its id, which ends at once with a log as
//! long as the old one's: the pass must leave the new run alone (it ended less
//! than the policy's age ago). The pass's checks (the log's length, the run's
//! creation time, its state) were made on the old run; the store, asked to delete
//! a finished run of that length, cannot tell the two apart. The companion of
//! `retention_racing_a_reused_id_spares_the_new_run.rs`, where the new run has
//! not ended.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::within;
use common::workflows::Quick;
use reel::testing::TestClock;
use reel::{FjallStore, Host, Retention};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_does_not_delete_a_young_ended_run_that_took_a_due_runs_id() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .clock(clock.clone())
        .register(Quick)
        .retention(Retention::keep_all().completed_after(HOUR).every(24 * HOUR))
        .build()
        .await?;

    let old = host.start::<Quick>("reused", 1).await?;
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

    host.run("reused").delete().await?;
    let new = host.start::<Quick>("reused", 2).await?;
    assert_eq!(within(LIMIT, "the new run", new.result()).await??, 2);

    gate.release();
    let deleted = within(LIMIT, "the pass", pass).await???;
    let out = new.result().await;
    assert!(
        matches!(out, Ok(2)),
        "the pass (deleted {deleted}) took the new run, ended just now, with it: {out:?}"
    );
    host.shutdown().await?;
    Ok(())
}
