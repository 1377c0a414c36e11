//! A `ctx.child` wait keeps to the run it waited on when that run's id is
//! deleted and used again. A parent that waits on a run it did not start (an
//! attached wait) gets that run's end once, never the end of a new run under its
//! id; a parent calling `ctx.child` on the id after the reuse waits on the new
//! run. A recorded parent paused while its child ended, the child then deleted
//! and its id used again, still gets its own child's end, and the new run is a
//! fresh run (no parent). A `ctx.child` call on an ended run whose reads of that
//! run are slow (one of them answered late, as of before, while the run is
//! deleted and its id used again) must give the old run's output or fail
//! saying that run was deleted, as a wait on a run deleted before its end
//! reached it does: not the new run's output, nor a wait for the new run.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Event, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);
/// How long a parent is given to end once the held read goes on.
const HEAR: Duration = Duration::from_secs(5);

/// Completes at once with its input; an input of 1000 or more waits for `go`
/// first.
struct Quick;
impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        if n >= 1000 {
            ctx.wait_for_signal::<()>("go").await?;
        }
        Ok(n)
    }
}

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

/// Waits (`ctx.child`) on the `Quick` run of the given id, with input 99.
struct OnQuick;
impl Workflow for OnQuick {
    const NAME: &'static str = "on-quick";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, id: String) -> reel::Result<u32> {
        ctx.child::<Quick>(&id, 99).await
    }
}

async fn host(dir: &std::path::Path) -> anyhow::Result<(Host, Arc<FaultStore>, TestClock)> {
    let clock = TestClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let faults = FaultStore::new(FjallStore::open(dir)?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .clock(clock.clone())
        .register(Quick)
        .register(Gated)
        .register(OnGated)
        .register(OnQuick)
        .build()
        .await?;
    Ok((host, faults, clock))
}

async fn until_suspended(host: &Host, id: &str) -> anyhow::Result<()> {
    within(LIMIT, &format!("{id} to wait"), async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = host.run(id).status().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

fn child_ends(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::ChildCompleted { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attached_wait_gets_the_old_run_and_a_later_call_the_new_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, _faults, clock) = host(dir.path()).await?;
    host.start::<Gated>("x", 1).await?;
    until_suspended(&host, "x").await?;
    let p1 = host.start::<OnGated>("p1", "x".into()).await?;
    until_suspended(&host, "p1").await?;

    host.run("x").signal("go", &(), "go-1").await?;
    assert_eq!(
        within(LIMIT, "old x", host.handle::<Gated>("x").result()).await??,
        1
    );
    assert_eq!(within(LIMIT, "p1", p1.result()).await??, 1);

    clock.advance(Duration::from_secs(1));
    host.run("x").delete().await?;
    host.start::<Gated>("x", 2).await?;
    until_suspended(&host, "x").await?;
    let p2 = host.start::<OnGated>("p2", "x".into()).await?;
    until_suspended(&host, "p2").await?;
    // The new x is nobody's child: p2 only waits on it.
    assert_eq!(host.run("x").info().await?.parent, None);
    host.run("x").signal("go", &(), "go-1").await?;
    assert_eq!(
        within(LIMIT, "new x", host.handle::<Gated>("x").result()).await??,
        2
    );
    assert_eq!(within(LIMIT, "p2", p2.result()).await??, 2);
    // p1 heard its run's end once and nothing of the new run.
    assert_eq!(p1.result().await?, 1);
    assert_eq!(child_ends(&p1.events().await?), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_parent_gets_its_deleted_childs_end_not_the_new_runs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, _faults, clock) = host(dir.path()).await?;
    // p starts its own child c and waits on it.
    let p = host.start::<OnGated>("p", "c".into()).await?;
    until_suspended(&host, "c").await?;
    until_suspended(&host, "p").await?;
    host.run("p").pause().await?;

    host.run("c").signal("go", &(), "go-1").await?;
    assert_eq!(
        within(LIMIT, "old c", host.handle::<Gated>("c").result()).await??,
        100
    );
    clock.advance(Duration::from_secs(1));
    // The child ended: it can be deleted although its parent has not run since.
    host.run("c").delete().await?;
    host.start::<Gated>("c", 2).await?;
    until_suspended(&host, "c").await?;

    host.run("p").resume().await?;
    assert_eq!(within(LIMIT, "p", p.result()).await??, 100);
    assert_eq!(child_ends(&p.events().await?), 1);
    // The new c is a fresh run: no parent, not cancelled by p's end.
    assert_eq!(host.run("c").info().await?.parent, None);
    assert!(matches!(
        host.run("c").status().await?,
        RunStatus::Suspended { .. }
    ));
    host.run("c").signal("go", &(), "go-1").await?;
    assert_eq!(
        within(LIMIT, "new c", host.handle::<Gated>("c").result()).await??,
        2
    );
    host.shutdown().await?;
    Ok(())
}

/// What a parent waiting on x, ended with 1, may get once x is deleted and its
/// id used again: that output, or that x was deleted.
fn keeps_to_the_old_run(got: &reel::Result<u32>) -> bool {
    match got {
        Ok(n) => *n == 1,
        Err(reel::Error::Failed(m)) => m == "run `x` was deleted while this run waited on it",
        Err(_) => false,
    }
}

/// `x` (Quick) completes with 1; a parent then calls `ctx.child` on it and the
/// `skip`+1-th read of x's metadata made for that call is held (answered as
/// of before) while x is deleted and started again with `again`. Returns what
/// the parent got.
async fn late_output_read_across_reuse(
    skip: u64,
    again: impl AsyncFnOnce(&Host) -> anyhow::Result<()>,
) -> anyhow::Result<reel::Result<u32>> {
    let dir = tempfile::tempdir()?;
    let (host, faults, clock) = host(dir.path()).await?;
    let old = host.start::<Quick>("x", 1).await?;
    assert_eq!(within(LIMIT, "old x", old.result()).await??, 1);

    // The answer of a held read is the store's as of the call: the read that
    // follows it sees the store after the reuse. The call's reads of x: the
    // cycle check (skip 0), the start's look before its first write (skip 1),
    // the start's read of the run its write at sequence 0 was refused by (skip
    // 2), and the look after reading the run's output from its log (skip 3).
    // Holding one of the first two puts the start's write, the existence
    // check, after the reuse: the new run would rightly be the one waited on.
    // From skip 2 on, the start has found the old run.
    let (hold, gate) = Fault::hold(Op::GetRun);
    faults.inject(hold.for_run("x").after(skip));
    let p = host.start::<OnQuick>("p", "x".into()).await?;
    within(
        LIMIT,
        "the parent's read of x's output",
        gate.wait_arrived(),
    )
    .await?;

    clock.advance(Duration::from_secs(1));
    host.run("x").delete().await?;
    again(&host).await?;
    gate.release();

    let got = match tokio::time::timeout(HEAR, p.result()).await {
        Ok(got) => got,
        Err(_) => {
            // It waits on the new run: what does it get once that ends?
            host.run("x").signal("go", &(), "go").await?;
            let late = within(LIMIT, "the parent", p.result()).await?;
            Err(reel::Error::Failed(format!(
                "still waiting {HEAR:?} after the release; once the new x ended: {late:?}"
            )))
        }
    };
    host.shutdown().await?;
    drop(dir);
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_read_of_an_ended_childs_output_does_not_get_the_new_runs_output()
-> anyhow::Result<()> {
    let mut bad = Vec::new();
    for skip in [2, 3] {
        let got = late_output_read_across_reuse(skip, async |host: &Host| {
            let new = host.start::<Quick>("x", 2).await?;
            assert_eq!(within(LIMIT, "new x", new.result()).await??, 2);
            Ok(())
        })
        .await?;
        if !keeps_to_the_old_run(&got) {
            bad.push(format!("read {} held: {got:?}", skip + 1));
        }
    }
    assert!(
        bad.is_empty(),
        "a parent waiting on x (ended with 1) got, after x was deleted and started \
         again with 2: {bad:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_read_of_an_ended_childs_output_is_not_made_of_the_new_runs_log()
-> anyhow::Result<()> {
    let mut bad = Vec::new();
    for skip in [2, 3] {
        // The new run under x waits.
        let got = late_output_read_across_reuse(skip, async |host: &Host| {
            host.start::<Quick>("x", 1000).await?;
            until_suspended(host, "x").await
        })
        .await?;
        if !keeps_to_the_old_run(&got) {
            bad.push(format!("read {} held: {got:?}", skip + 1));
        }
    }
    assert!(
        bad.is_empty(),
        "a parent waiting on x (ended with 1) got, after x was deleted and started \
         again (waiting): {bad:?}"
    );
    Ok(())
}
