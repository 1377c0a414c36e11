//! Acceptance tests for child runs, written from DESIGN.md and the README ("Runs
//! that talk to runs"): a child id is a run id (two calls on one id in one
//! execution share one child run, also on replay); a child whose workflow is not
//! registered is an error the parent can catch, not a hang; a parent that fails
//! asks the children it waits on to cancel; a child that lost a `select!` to a
//! timer stays the loser on replay after a restart, and is asked to cancel when
//! its parent ends; a detached child started on an existing id is idempotent.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// How many times each kid run's body step ran, by run id.
static BODIES: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

fn bodies(id: &str) -> u32 {
    BODIES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(id)
        .copied()
        .unwrap_or(0)
}

/// A child: records one step (counted), waits for `release`, answers
/// `input * 10 + payload`.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "acc-kid";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let id = ctx.run_id().to_owned();
        ctx.step("body", |_| async {
            *BODIES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(id.clone())
                .or_default() += 1;
            Ok::<_, String>(())
        })
        .await?;
        let extra: u32 = ctx.wait_for_signal("release").await?;
        Ok(n * 10 + extra)
    }
}

/// A workflow no host in these tests registers.
struct Unregistered;
impl Workflow for Unregistered {
    const NAME: &'static str = "acc-never-registered";
    type Input = ();
    type Output = u32;
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<u32> {
        Ok(1)
    }
}

/// Calls the same child id twice, joined, then waits for `go`.
struct Twice;
impl Workflow for Twice {
    const NAME: &'static str = "acc-twice";
    type Input = String;
    type Output = (u32, u32);
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<(u32, u32)> {
        let (a, b) = futures::join!(ctx.child::<Kid>(&kid, 4), ctx.child::<Kid>(&kid, 4));
        let (a, b) = (a?, b?);
        let () = ctx.wait_for_signal("go").await?;
        Ok((a, b))
    }
}

/// Calls a child of an unregistered workflow and reports what it got.
struct CallsUnregistered;
impl Workflow for CallsUnregistered {
    const NAME: &'static str = "acc-calls-unregistered";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let got = ctx.child::<Unregistered>("acc-unreg-kid", ()).await;
        let after = ctx
            .step("after", |_| async { Ok::<_, String>("after".to_owned()) })
            .await?;
        match got {
            Ok(v) => Ok(format!("ok {v} {after}")),
            Err(e) => Ok(format!("err {after}: {e}")),
        }
    }
}

/// Calls a child and, without waiting for it, fails once told to.
struct FailsWhileKidWaits;
impl Workflow for FailsWhileKidWaits {
    const NAME: &'static str = "acc-fails-while-kid-waits";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<u32> {
        let kid = ctx.child::<Kid>(&kid, 1);
        let () = ctx.wait_for_signal("fail").await?;
        drop(kid);
        Err(Error::failed("parent gave up"))
    }
}

/// Races a child against a one-hour timer; then waits for `go` and answers which
/// branch won.
struct ChildOrTimer;
impl Workflow for ChildOrTimer {
    const NAME: &'static str = "acc-child-or-timer";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<String> {
        let won = tokio::select! {
            biased;
            r = ctx.child::<Kid>(&kid, 2) => format!("child {}", r?),
            r = ctx.sleep(Duration::from_secs(3600)) => { r?; "timer".to_owned() }
        };
        let () = ctx.wait_for_signal("go").await?;
        Ok(won)
    }
}

/// Starts a detached child on the given id twice and returns its handle's id.
struct Detacher;
impl Workflow for Detacher {
    const NAME: &'static str = "acc-detacher";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<String> {
        let a = ctx.start_child::<Kid>(&kid, 7).await?;
        let b = ctx.start_child::<Kid>(&kid, 8).await?;
        assert_eq!(a.id(), b.id());
        Ok(a.id().to_owned())
    }
}

fn builder(path: &std::path::Path) -> reel::HostBuilder {
    Host::builder()
        .path(path)
        .register(Kid)
        .register(Twice)
        .register(CallsUnregistered)
        .register(FailsWhileKidWaits)
        .register(ChildOrTimer)
        .register(Detacher)
}

/// Waits until the run `id` exists and waits (for a signal, a timer, a child).
async fn until_waiting(host: &Host, id: &str, on: &str) -> anyhow::Result<()> {
    let run = host.run(id);
    common::status::until_status(
        &run,
        &format!("{id} waiting on {on}"),
        |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains(on)),
    )
    .await
    .map(|_| ())
}

/// Polls the status of `id` until it exists (a child starts a moment after its
/// parent's write).
async fn until_exists(host: &Host, id: &str) -> anyhow::Result<RunStatus> {
    within(LIMIT, &format!("{id} to exist"), async {
        loop {
            match host.run(id).status().await {
                Ok(s) => return anyhow::Ok(s),
                Err(Error::UnknownRun(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
                Err(e) => return Err(e.into()),
            }
        }
    })
    .await?
}

/// DESIGN: "A child run id is a run id like any other"; `ctx.child` starts the
/// child idempotently on its id. Two joined calls on one id in one execution
/// share one run: both get its output, its body runs once, the parent lists one
/// child, and a replay after a restart gives the same outputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_on_one_child_id_share_one_run_also_on_replay() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = builder(dir.path()).build().await?;
    let kid_id = "acc-twice/kid";
    let parent = host.start::<Twice>("acc-twice", kid_id.to_owned()).await?;
    until_exists(&host, kid_id).await?;
    until_waiting(&host, kid_id, "release").await?;
    host.handle::<Kid>(kid_id)
        .signal("release", &3u32, "r-1")
        .await?;
    assert_eq!(
        within(LIMIT, "kid result", host.handle::<Kid>(kid_id).result()).await??,
        43
    );
    until_waiting(&host, "acc-twice", "go").await?;
    let children = parent.children().await?;
    assert_eq!(
        children
            .iter()
            .map(|c| c.run_id.as_str())
            .collect::<Vec<_>>(),
        vec![kid_id],
        "one child run for two calls on its id"
    );
    host.shutdown().await?;

    // The parent replays both child calls from its log after a restart.
    let host = builder(dir.path()).build().await?;
    let parent = host.handle::<Twice>("acc-twice");
    parent.signal("go", &(), "go-1").await?;
    assert_eq!(within(LIMIT, "parent", parent.result()).await??, (43, 43));
    assert_eq!(bodies(kid_id), 1, "the kid's step ran once");
    host.shutdown().await?;
    Ok(())
}

/// DESIGN invariant 8: an unknown workflow gets a clear error and none of these
/// "panics the host"; `ctx.child`'s errors reach the handler, which "may catch"
/// them. A child of a workflow no host registers is an `Err` the parent catches
/// and goes on from, not a wait for ever; a restart replays the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_of_an_unregistered_workflow_is_an_error_the_parent_catches() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = builder(dir.path()).build().await?;
    let parent = host
        .start::<CallsUnregistered>("acc-calls-unreg", ())
        .await?;
    let got = within(LIMIT, "parent result", parent.result()).await??;
    assert!(got.starts_with("err after: "), "{got}");
    assert!(
        got.contains("acc-never-registered"),
        "the error names the workflow: {got}"
    );
    host.shutdown().await?;

    let host = builder(dir.path()).build().await?;
    let again = host.handle::<CallsUnregistered>("acc-calls-unreg");
    assert_eq!(within(LIMIT, "again", again.result()).await??, got);
    host.shutdown().await?;
    Ok(())
}

/// README: "A child that has not ended when its parent completes, fails, is
/// cancelled or continues as new is asked to cancel". The parent fails with its
/// own error (its result is that error, not a cancellation), and the child that
/// waited for a signal ends cancelled, also after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_parent_cancels_the_child_it_waits_on() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = builder(dir.path()).build().await?;
    let kid_id = "acc-fails/kid";
    let parent = host
        .start::<FailsWhileKidWaits>("acc-fails", kid_id.to_owned())
        .await?;
    until_exists(&host, kid_id).await?;
    until_waiting(&host, kid_id, "release").await?;
    until_waiting(&host, "acc-fails", "fail").await?;
    parent.signal("fail", &(), "f-1").await?;
    match within(LIMIT, "parent result", parent.result()).await? {
        Err(Error::Failed(m)) => assert_eq!(m, "parent gave up"),
        other => panic!("the parent's own failure, got {other:?}"),
    }
    let kid = host.handle::<Kid>(kid_id);
    match within(LIMIT, "kid result", kid.result()).await? {
        Err(Error::Cancelled(_)) => {}
        other => panic!("the kid is cancelled with its parent, got {other:?}"),
    }
    assert_eq!(kid.status().await?, RunStatus::Cancelled);
    host.shutdown().await?;

    let host = builder(dir.path()).build().await?;
    let kid = host.handle::<Kid>(kid_id);
    assert_eq!(kid.status().await?, RunStatus::Cancelled);
    assert!(matches!(
        host.handle::<FailsWhileKidWaits>("acc-fails")
            .result()
            .await,
        Err(Error::Failed(_))
    ));
    host.shutdown().await?;
    Ok(())
}

/// README, "Concurrency replays exactly": a `select!` keeps "the branch that won
/// live, whatever arrives later"; "Runs that talk to runs": a child the parent
/// stopped waiting for (it lost a `select!`) is asked to cancel when the parent
/// ends, not before. The timer beats the child; the child then completes while
/// the parent waits elsewhere; a restart replays the parent and it still took
/// the timer branch. A second parent whose child is still running when it ends
/// cancels that child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_lost_a_select_to_a_timer_stays_lost_and_is_cancelled_at_the_end()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    let clock = TestClock::new(t0);
    let host = builder(dir.path()).clock(clock.clone()).build().await?;
    let a = host
        .start::<ChildOrTimer>("acc-race-a", "acc-race-a/kid".into())
        .await?;
    let b = host
        .start::<ChildOrTimer>("acc-race-b", "acc-race-b/kid".into())
        .await?;
    for kid in ["acc-race-a/kid", "acc-race-b/kid"] {
        until_exists(&host, kid).await?;
        until_waiting(&host, kid, "release").await?;
    }
    // Both one-hour timers armed, then passed.
    within(LIMIT, "timers armed", async {
        loop {
            if clock.next_due() == Some(t0 + Duration::from_secs(3600)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    until_waiting(&host, "acc-race-a", "").await?;
    until_waiting(&host, "acc-race-b", "").await?;
    clock.advance(Duration::from_secs(3601));
    until_waiting(&host, "acc-race-a", "go").await?;
    until_waiting(&host, "acc-race-b", "go").await?;

    // The losing children are not cancelled while their parents go on.
    let kid_a = host.handle::<Kid>("acc-race-a/kid");
    let kid_b = host.handle::<Kid>("acc-race-b/kid");
    assert!(matches!(kid_a.status().await?, RunStatus::Suspended { .. }));
    assert!(matches!(kid_b.status().await?, RunStatus::Suspended { .. }));

    // Kid a ends while its parent waits for `go`.
    kid_a.signal("release", &5u32, "r-a").await?;
    assert_eq!(within(LIMIT, "kid a", kid_a.result()).await??, 25);
    drop((a, b));
    host.shutdown().await?;

    let host = builder(dir.path()).clock(clock.clone()).build().await?;
    let a = host.handle::<ChildOrTimer>("acc-race-a");
    let b = host.handle::<ChildOrTimer>("acc-race-b");
    a.signal("go", &(), "go-a").await?;
    assert_eq!(within(LIMIT, "parent a", a.result()).await??, "timer");
    b.signal("go", &(), "go-b").await?;
    assert_eq!(within(LIMIT, "parent b", b.result()).await??, "timer");
    // Parent b ended while its losing kid still waited: the kid is asked to cancel.
    let kid_b = host.handle::<Kid>("acc-race-b/kid");
    match within(LIMIT, "kid b", kid_b.result()).await? {
        Err(Error::Cancelled(_)) => {}
        other => panic!("kid b is cancelled when its parent ends, got {other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}

/// README: "`ctx.start_child::<W>(id, input).await` starts a detached child and
/// returns its `RunHandle` once it exists"; DESIGN: a child run id is a run id
/// and child starts are idempotent on it. A detached start on the id of a run the
/// service started returns its handle and starts nothing new (its body ran once,
/// its input is the first one), and the parent ending does not cancel it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_start_on_an_existing_id_is_idempotent() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = builder(dir.path()).build().await?;
    let kid_id = "acc-detached/kid";
    let kid = host.start::<Kid>(kid_id, 3).await?;
    until_waiting(&host, kid_id, "release").await?;
    let parent = host
        .start::<Detacher>("acc-detacher", kid_id.to_owned())
        .await?;
    assert_eq!(within(LIMIT, "parent", parent.result()).await??, kid_id);
    assert!(
        matches!(kid.status().await?, RunStatus::Suspended { .. }),
        "the detached run goes on after its parent ended"
    );
    kid.signal("release", &1u32, "r-1").await?;
    assert_eq!(
        within(LIMIT, "kid", kid.result()).await??,
        31,
        "the run keeps the input it was started with"
    );
    assert_eq!(bodies(kid_id), 1);
    host.shutdown().await?;
    Ok(())
}
