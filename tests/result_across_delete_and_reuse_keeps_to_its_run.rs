//! A `result()` that is slow (its read of the run answered late) while the run it
//! waits on ends, is deleted and its id is used again by a new run: the waiter gets
//! the result of the run it waited on, or `UnknownRun` (that run is gone), never
//! the new run's output nor a storage error made of the old run's state and the
//! new run's log. A watch of a run keeps to that run the same way
//! (`watch_across_delete_and_reuse_never_mixes_runs.rs`).

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::within;
use common::workflows::{Quick, Waiter};
use reel::testing::TestClock;
use reel::{Error, FjallStore, Host};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);

async fn host(dir: &std::path::Path) -> anyhow::Result<(Host, Arc<FaultStore>, TestClock)> {
    let clock = TestClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let faults = FaultStore::new(FjallStore::open(dir)?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .clock(clock.clone())
        .register(Quick)
        .register(Waiter)
        .build()
        .await?;
    Ok((host, faults, clock))
}

/// The old run `reused` ends with 1; a second `result()` of it reads the run
/// and its answer is held; meanwhile the run is deleted and `reused` started
/// again with `again`; then the held answer goes on. Returns what that
/// `result()` gave.
async fn slow_result_across_reuse(
    again: impl AsyncFnOnce(&Host) -> anyhow::Result<()>,
) -> anyhow::Result<(Host, reel::Result<u32>)> {
    let dir = tempfile::tempdir()?;
    let (host, faults, clock) = host(dir.path()).await?;
    let old = host.start::<Quick>("reused", 1).await?;
    assert_eq!(within(LIMIT, "the old run", old.result()).await??, 1);

    let (hold, gate) = Fault::hold(Op::GetRun);
    faults.inject(hold.for_run("reused"));
    let slow = tokio::spawn(async move { old.result().await });
    within(
        LIMIT,
        "the slow result() to read the run",
        gate.wait_arrived(),
    )
    .await?;

    clock.advance(Duration::from_secs(1));
    host.run("reused").delete().await?;
    again(&host).await?;

    gate.release();
    let got = within(LIMIT, "the slow result()", slow).await??;
    // The directory goes with this function: shut down first.
    host.shutdown().await?;
    drop(dir);
    Ok((host, got))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_result_does_not_return_the_new_runs_output() -> anyhow::Result<()> {
    let (_host, got) = slow_result_across_reuse(async |host: &Host| {
        let new = host.start::<Quick>("reused", 2).await?;
        assert_eq!(within(LIMIT, "the new run", new.result()).await??, 2);
        Ok(())
    })
    .await?;
    assert!(
        matches!(got, Ok(1) | Err(Error::UnknownRun(_))),
        "a result() of the old run (output 1) gave {got:?} after the id was used again"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_result_of_an_ended_run_is_not_a_storage_error_when_the_new_run_waits()
-> anyhow::Result<()> {
    let (_host, got) = slow_result_across_reuse(async |host: &Host| {
        let new = host.start::<Waiter>("reused", ()).await?;
        within(LIMIT, "the new run's wait", new.wait_until_suspended()).await??;
        Ok(())
    })
    .await?;
    assert!(
        matches!(got, Ok(1) | Err(Error::UnknownRun(_))),
        "a result() of the old run (output 1) gave {got:?} while a new run under its id waits"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_that_saw_the_old_run_waiting_does_not_wait_for_the_new_run() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let (host, faults, clock) = host(dir.path()).await?;
    let old = host.start::<Waiter>("reused", ()).await?;
    within(LIMIT, "the old run's wait", old.wait_until_suspended()).await??;

    // The first read of the waiter sees the old run waiting; its second read
    // (after the old run's state changed) is held with the answer it read.
    let (first, first_gate) = Fault::hold(Op::GetRun);
    faults.inject(first.for_run("reused"));
    let waiter = tokio::spawn({
        let old = old.clone();
        async move { old.result().await }
    });
    within(LIMIT, "the waiter's first read", first_gate.wait_arrived()).await?;
    first_gate.release();

    // The old run is cancelled (the waiter hears it), deleted, and the id used
    // again by a run that waits.
    old.cancel("done with it").await?;
    clock.advance(Duration::from_secs(1));
    host.run("reused").delete().await?;
    let new = host.start::<Waiter>("reused", ()).await?;
    within(LIMIT, "the new run's wait", new.wait_until_suspended()).await??;

    let got = within(LIMIT, "the waiter", waiter).await?;
    match got {
        Ok(Err(Error::Cancelled(_) | Error::UnknownRun(_))) => {}
        other => panic!("the waiter on the cancelled old run gave {other:?}"),
    }
    // The new run is untouched and ends by its own signal.
    new.signal("go", &3u32, "g").await?;
    assert_eq!(within(LIMIT, "the new run", new.result()).await??, 3);
    host.shutdown().await?;
    Ok(())
}
