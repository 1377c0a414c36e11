//! A `result()` waited through a host that does not own the run, slow (its reads
//! of the run answered late), while the owner ends the run, deletes it and starts
//! a new run under its id: the waiter gets the result of the run it waited on, or
//! `UnknownRun` (that run is gone), never the new run's output, never a wait for
//! the new run, never a storage error made of the old run's state and the new
//! run's log. (The same on one host: `tests/result_across_delete_and_reuse_keeps_to_its_run.rs`.)

mod support;

use std::sync::Arc;
use std::time::Duration;

use reel::{Ctx, Error, Host, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};
use support::hosts::{owned_by, result_of, shutdown_all, suspended, until_status};

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for `go` and returns it.
struct Waits;
impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

async fn host(store: Arc<dyn reel::Store>) -> anyhow::Result<Host> {
    Ok(Host::builder().store(store).register(Waits).build().await?)
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(LIMIT, fut)
        .await
        .map_err(|_| anyhow::anyhow!("{what} did not happen within {LIMIT:?}"))
}

/// `host-0` owns the run; `host-1`, whose reads go through a fault store, waits
/// on its result. The waiter's first read (the old run waiting) passes; its
/// next read is held with its answer while the old run ends with 1 on its
/// owner, is deleted and started again; the new run is then ended with 2 when
/// `end_new`. Returns what the waiter got.
async fn slow_waiter_across_reuse(end_new: bool) -> anyhow::Result<reel::Result<u32>> {
    let url = support::database(if end_new {
        "result_reuse_ended"
    } else {
        "result_reuse_waits"
    })
    .await;
    let owner = host(support::join(&url, "host-0").await?).await?;
    let faults = FaultStore::new(support::join(&url, "host-1").await?);
    let other = host(faults.clone()).await?;
    let owners = support::spread_leases(&url, "host-", 2, 100).await;
    let id = owned_by(&owners, 0, "r", 1).remove(0);

    owner.start::<Waits>(&id, ()).await?;
    until_status(&owner, &id, "waited", suspended).await;

    let (first, first_gate) = Fault::hold(Op::GetRun);
    faults.inject(first.for_run(&id));
    let waiter = tokio::spawn({
        let other = other.clone();
        let id = id.clone();
        async move { other.handle::<Waits>(&id).result().await }
    });
    within("the waiter's first read", first_gate.wait_arrived()).await?;
    let (next, next_gate) = Fault::hold(Op::GetRun);
    faults.inject(next.for_run(&id));
    first_gate.release();

    owner.run(&id).signal("go", &1u32, "go").await?;
    assert_eq!(result_of::<Waits>(&owner, &id).await??, 1);
    within("the waiter's next read", next_gate.wait_arrived()).await?;
    owner.run(&id).delete().await?;
    owner.start::<Waits>(&id, ()).await?;
    until_status(&owner, &id, "waited again", suspended).await;
    if end_new {
        owner.run(&id).signal("go", &2u32, "go").await?;
        assert_eq!(result_of::<Waits>(&owner, &id).await??, 2);
    }
    next_gate.release();

    let got = within("the waiter", waiter).await??;
    if !end_new {
        // The new run is untouched.
        owner.run(&id).signal("go", &3u32, "go").await?;
        assert_eq!(result_of::<Waits>(&owner, &id).await??, 3);
    }
    shutdown_all([owner, other]).await?;
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_waiter_elsewhere_does_not_get_the_new_runs_output() -> anyhow::Result<()> {
    let got = slow_waiter_across_reuse(true).await?;
    assert!(
        matches!(got, Ok(1) | Err(Error::UnknownRun(_))),
        "a result() of the old run (output 1) gave {got:?} after the id was used again"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_waiter_elsewhere_does_not_wait_for_the_new_run() -> anyhow::Result<()> {
    let got = slow_waiter_across_reuse(false).await?;
    assert!(
        matches!(got, Ok(1) | Err(Error::UnknownRun(_))),
        "a result() of the old run (output 1) gave {got:?} while a new run under its id waits"
    );
    Ok(())
}
