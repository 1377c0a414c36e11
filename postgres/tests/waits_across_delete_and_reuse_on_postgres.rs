//! Waits across a delete and a reuse of the id they wait on, with the waiter and
//! the run on different hosts sharing Postgres. `host-0` owns the runs waited on;
//! `host-1`, whose store is wrapped in a fault store, owns the waiters.
//!
//! - An attached wait (`ctx.child` on a run the service started) whose host has
//!   not yet read the run's end when the run is deleted and its id used again:
//!   the waiter gets the old run's end or a typed error, never the new run's
//!   output, and does not hang on a deleted run.
//! - A recorded parent whose host lost its lease while its child ended; the child
//!   is then deleted and its id used again before a host takes the parent over:
//!   the parent gets its own child's output.
//! - A signal id that the old run got is not a duplicate for the new run under
//!   its id, sent through either host.
//! - A watch through the non-owner, slow across the delete and reuse, sees none
//!   of the new run's records.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reel::{Ctx, Event, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};
use support::hosts::{
    free_lease, lease_elsewhere, owned_by, result_of, shutdown_all, suspended, until_status,
};

const LIMIT: Duration = Duration::from_secs(20);
/// How long a waiter is given to end after its run was deleted.
const HEAR: Duration = Duration::from_secs(8);

/// Waits for `go`, then completes with its input.
struct Gated;
impl Workflow for Gated {
    const NAME: &'static str = "gated";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.wait_for_signal::<()>("go").await?;
        Ok(n)
    }
}

/// Waits (`ctx.child`) on the `Gated` run of the given id, with input 100.
struct OnGated;
impl Workflow for OnGated {
    const NAME: &'static str = "on-gated";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, id: String) -> reel::Result<u32> {
        ctx.child::<Gated>(&id, 100).await
    }
}

/// Returns the payload of its first signal `s`.
struct Collect;
impl Workflow for Collect {
    const NAME: &'static str = "collect";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        ctx.wait_for_signal("s").await
    }
}

async fn open(store: Arc<dyn reel::Store>) -> anyhow::Result<Host> {
    Ok(Host::builder()
        .store(store)
        .register(Gated)
        .register(OnGated)
        .register(Collect)
        .build()
        .await?)
}

/// `host-0`, `host-1` (through the returned fault store), settled leases.
async fn two_hosts(
    hint: &str,
) -> anyhow::Result<(String, Host, Host, Arc<FaultStore>, Vec<usize>)> {
    let url = support::database(hint).await;
    let h0 = open(support::join(&url, "host-0").await?).await?;
    let faults = FaultStore::new(support::join(&url, "host-1").await?);
    let h1 = open(faults.clone()).await?;
    let owners = support::settled_leases(&url, "host-", 2).await;
    Ok((url, h0, h1, faults, owners))
}

fn child_ends(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::ChildCompleted { .. }))
        .count()
}

/// How the id of the run waited on is used again.
#[derive(Clone, Copy, Debug)]
enum Again {
    /// Deleted only.
    Not,
    /// A new run under the id, waiting.
    Waiting,
    /// A new run under the id, ended with 2.
    Ended,
}

/// `x` (owned by host-0) waits; `p` (owned by host-1) attaches to it. Every
/// read of x's metadata on host-1 is then held while x ends with 1, is deleted
/// and used again as `again` says. Returns what p got within `HEAR` of the
/// release (`None`: p still waited).
async fn attached_wait_across_reuse(again: Again) -> anyhow::Result<Option<reel::Result<u32>>> {
    let (_url, h0, h1, faults, owners) =
        two_hosts(&format!("attached_{again:?}").to_lowercase()).await?;
    let x = owned_by(&owners, 0, "x", 1).remove(0);
    let p = owned_by(&owners, 1, "p", 1).remove(0);
    h0.start::<Gated>(&x, 1).await?;
    until_status(&h0, &x, "waited", suspended).await;
    h1.start::<OnGated>(&p, x.clone()).await?;
    until_status(&h1, &p, "waited", suspended).await;

    let (hold, gate) = Fault::hold(Op::GetRun);
    faults.inject(hold.for_run(&x).until_healed());
    h0.run(&x).signal("go", &(), "go").await?;
    assert_eq!(result_of::<Gated>(&h0, &x).await??, 1);
    h0.run(&x).delete().await?;
    match again {
        Again::Not => {}
        Again::Waiting => {
            h0.start::<Gated>(&x, 2).await?;
            until_status(&h0, &x, "waited again", suspended).await;
        }
        Again::Ended => {
            h0.start::<Gated>(&x, 2).await?;
            until_status(&h0, &x, "waited again", suspended).await;
            h0.run(&x).signal("go", &(), "go").await?;
            assert_eq!(result_of::<Gated>(&h0, &x).await??, 2);
        }
    }
    faults.heal();
    gate.release();

    let got = tokio::time::timeout(HEAR, h1.handle::<OnGated>(&p).result())
        .await
        .ok();
    if got.is_none() {
        eprintln!("p still waits {HEAR:?} after x was deleted ({again:?})");
        if let Again::Waiting = again {
            // What does p hear once the new run ends?
            h0.run(&x).signal("go", &(), "go").await?;
            let late = tokio::time::timeout(HEAR, h1.handle::<OnGated>(&p).result()).await;
            eprintln!("after the new x ended with 2, p got {late:?}");
        }
    } else if let Some(Ok(_)) = &got {
        assert_eq!(child_ends(&h1.run(&p).events().await?), 1);
    }
    // A call on the id after the reuse waits on the new run.
    if let Again::Waiting = again
        && matches!(h0.run(&x).status().await?, RunStatus::Suspended { .. })
    {
        let p2 = owned_by(&owners, 1, "q", 1).remove(0);
        h1.start::<OnGated>(&p2, x.clone()).await?;
        until_status(&h1, &p2, "waited", suspended).await;
        h0.run(&x).signal("go", &(), "go").await?;
        assert_eq!(result_of::<OnGated>(&h1, &p2).await??, 2);
    }
    shutdown_all([h0, h1]).await?;
    Ok(got)
}

fn check_attached(again: Again, got: Option<reel::Result<u32>>) {
    assert!(
        matches!(&got, Some(Ok(1) | Err(reel::Error::UnknownRun(_))))
            || matches!(&got, Some(Err(reel::Error::Failed(m))) if m.contains("was deleted")),
        "an attached wait on x (ended with 1, then deleted; again: {again:?}) gave \
         {got:?} (None: still waiting after {HEAR:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_wait_elsewhere_does_not_hang_on_a_deleted_run() -> anyhow::Result<()> {
    let got = attached_wait_across_reuse(Again::Not).await?;
    check_attached(Again::Not, got);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_wait_elsewhere_does_not_wait_for_the_new_run() -> anyhow::Result<()> {
    let got = attached_wait_across_reuse(Again::Waiting).await?;
    check_attached(Again::Waiting, got);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_wait_elsewhere_does_not_get_the_new_runs_output() -> anyhow::Result<()> {
    let got = attached_wait_across_reuse(Again::Ended).await?;
    check_attached(Again::Ended, got);
    Ok(())
}

/// A recorded parent whose host lost its lease while its child ended, the child
/// then deleted and its id used again before the parent is taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_taken_over_gets_its_deleted_childs_end_not_the_new_runs() -> anyhow::Result<()> {
    let (url, h0, h1, _faults, owners) = two_hosts("recorded_parent").await?;
    let c = owned_by(&owners, 0, "c", 1).remove(0);
    let p = owned_by(&owners, 1, "p", 1).remove(0);
    h1.start::<OnGated>(&p, c.clone()).await?;
    until_status(&h0, &c, "waited", suspended).await;
    until_status(&h1, &p, "waited", suspended).await;

    // p's host loses p's partition: nobody runs p while its child ends.
    lease_elsewhere(&url, &p).await;
    h0.run(&c).signal("go", &(), "go").await?;
    assert_eq!(result_of::<Gated>(&h0, &c).await??, 100);
    h0.run(&c).delete().await?;
    h0.start::<Gated>(&c, 2).await?;
    until_status(&h0, &c, "waited again", suspended).await;
    h0.run(&c).signal("go", &(), "go").await?;
    assert_eq!(result_of::<Gated>(&h0, &c).await??, 2);

    free_lease(&url, &p).await;
    let got = result_of::<OnGated>(&h1, &p).await?;
    let ends = child_ends(&h1.run(&p).events().await?);
    assert_eq!(h0.run(&c).info().await?.parent, None);
    shutdown_all([h0, h1]).await?;
    assert!(
        matches!(got, Ok(100)),
        "p, whose child ended with 100 and was then deleted and replaced by a run \
         ending with 2, got {got:?}"
    );
    assert_eq!(ends, 1, "p recorded {ends} child ends");
    Ok(())
}

/// The old run gets signal id `sid` through `old_via`, ends, is deleted; the new
/// run under its id gets `sid` again through `new_via`: it must receive it.
async fn signal_ids_across_reuse(old_via: usize, new_via: usize) -> anyhow::Result<()> {
    let (_url, h0, h1, _faults, owners) =
        two_hosts(&format!("signal_ids_{old_via}_{new_via}")).await?;
    let hosts = [&h0, &h1];
    let x = owned_by(&owners, 0, "x", 1).remove(0);
    hosts[old_via].start::<Collect>(&x, ()).await?;
    until_status(&h0, &x, "waited", suspended).await;
    hosts[old_via].run(&x).signal("s", &1u32, "sid").await?;
    assert_eq!(result_of::<Collect>(&h0, &x).await??, 1);
    hosts[new_via].run(&x).delete().await?;
    hosts[new_via].start::<Collect>(&x, ()).await?;
    until_status(&h0, &x, "waited again", suspended).await;
    hosts[new_via].run(&x).signal("s", &2u32, "sid").await?;
    let got = result_of::<Collect>(hosts[new_via], &x).await?;
    shutdown_all([h0, h1]).await?;
    assert!(
        matches!(got, Ok(2)),
        "the new run got {got:?} for signal id `sid` (old via host-{old_via}, new via host-{new_via})"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_id_of_the_old_run_reaches_the_new_run_through_a_non_owner() -> anyhow::Result<()>
{
    signal_ids_across_reuse(1, 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_id_of_the_old_run_reaches_the_new_run_through_the_owner() -> anyhow::Result<()> {
    signal_ids_across_reuse(1, 0).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watch_elsewhere_sees_none_of_the_new_run() -> anyhow::Result<()> {
    let (_url, h0, h1, faults, owners) = two_hosts("watch").await?;
    let x = owned_by(&owners, 0, "x", 1).remove(0);
    h0.start::<Gated>(&x, 1).await?;
    until_status(&h0, &x, "waited", suspended).await;
    let mut watch = Box::pin(h1.run(&x).watch());
    let first = tokio::time::timeout(LIMIT, watch.next()).await?;
    assert!(
        matches!(&first, Some(Ok(r)) if matches!(r.event, Event::RunStarted { .. })),
        "{first:?}"
    );

    let (hold, gate) = Fault::hold(Op::ReadLog);
    faults.inject(hold.for_run(&x).until_healed());
    let (hold_meta, meta_gate) = Fault::hold(Op::GetRun);
    faults.inject(hold_meta.for_run(&x).until_healed());
    h0.run(&x).signal("go", &(), "go").await?;
    assert_eq!(result_of::<Gated>(&h0, &x).await??, 1);
    h0.run(&x).delete().await?;
    h0.start::<Gated>(&x, 2).await?;
    until_status(&h0, &x, "waited again", suspended).await;
    h0.run(&x).signal("go", &(), "go").await?;
    assert_eq!(result_of::<Gated>(&h0, &x).await??, 2);
    faults.heal();
    gate.release();
    meta_gate.release();

    let mut rest = Vec::new();
    let ended = tokio::time::timeout(LIMIT, async {
        while let Some(item) = watch.next().await {
            rest.push(item);
        }
    })
    .await
    .is_ok();
    shutdown_all([h0, h1]).await?;
    let new_records: Vec<_> = rest
        .iter()
        .filter(|r| matches!(r, Ok(r) if matches!(r.event, Event::RunStarted { .. })))
        .collect();
    assert!(ended, "the watch never ended; it gave {rest:?}");
    assert!(
        new_records.is_empty(),
        "the watch of the old run gave the new run's records: {rest:?}"
    );
    Ok(())
}
