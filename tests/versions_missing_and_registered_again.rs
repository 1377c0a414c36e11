//! Adversarial versioning tests modelled on Temporal's versioning suites: a run
//! parked with `VersionMismatch` stays parked (log untouched) when retried on a
//! host that still lacks its version, can be cancelled at once, and resumes with
//! what arrived meanwhile once a host registers it again; a child parked that way
//! keeps its parent waiting (not failed); a fork of such a run is refused with
//! `VersionMismatch`; a run from before a patch that continues as new takes the
//! patched branch in its new segment; an old log replays against new code with
//! `reel::testing`.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::{Replayed, TestClock, replay};
use reel::{Ctx, Error, Event, Host, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Waits for `wake`, sleeps an hour, then waits for `go`.
struct JobV1;
impl Workflow for JobV1 {
    const NAME: &'static str = "job";
    const VERSION: u32 = 1;
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let _: () = ctx.wait_for_signal("wake").await?;
        ctx.sleep(Duration::from_secs(3600)).await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(format!("v1 {n} {go}"))
    }
}

/// Another shape altogether: never used for a v1 run.
struct JobV2;
impl Workflow for JobV2 {
    const NAME: &'static str = "job";
    const VERSION: u32 = 2;
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(format!("v2 {n} {go}"))
    }
}

fn expect_mismatch<T: std::fmt::Debug>(r: reel::Result<T>) {
    match r {
        Err(Error::VersionMismatch { workflow, version }) => {
            assert_eq!((workflow.as_str(), version), ("job", 1));
        }
        other => panic!("expected VersionMismatch(job, 1), got {other:?}"),
    }
}

async fn until_parked(run: &reel::AnyRun) -> anyhow::Result<()> {
    common::status::until_status(run, "the run to park", |s| {
        matches!(s, RunStatus::Parked { .. })
    })
    .await?;
    Ok(())
}

/// Starts `v1` runs on a host with v1, shuts it down, reopens with v2 only.
async fn v1_runs_then_v2_host(
    path: &Path,
    clock: &TestClock,
    ids: &[&str],
) -> anyhow::Result<Host> {
    let host = common::hosts::open_on(path, clock, JobV1).await?;
    for (i, id) in ids.iter().enumerate() {
        let run = host.start::<JobV1>(id, u32::try_from(i)?).await?;
        within(LIMIT, "the v1 run to wait", run.wait_until_suspended()).await??;
    }
    host.shutdown().await?;
    let host = common::hosts::open_on(path, clock, JobV2).await?;
    // Woken, each run finds its version missing and parks.
    for id in ids {
        let run = host.run(id);
        run.signal("wake", &(), "wake-1").await?;
        until_parked(&run).await?;
    }
    Ok(host)
}

/// A run parked with `VersionMismatch`: `retry` on a host that still lacks v1
/// parks it again with the same error and appends nothing; a signal and its timer
/// coming due meanwhile are kept; a host with v1 again finishes it with both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_mismatch_survives_retry_and_resumes_once_registered() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = v1_runs_then_v2_host(&path, &clock, &["old"]).await?;
    let old = host.run("old");
    expect_mismatch(within(LIMIT, "the parked result", old.result::<String>()).await?);
    let before = old.events().await?;

    old.retry().await?;
    until_parked(&old).await?;
    expect_mismatch(within(LIMIT, "the parked result", old.result::<String>()).await?);
    assert_eq!(
        old.events().await?,
        before,
        "a retry that parks again appends nothing"
    );
    assert_eq!(host.count().await?.get(&StatusKind::Parked), Some(&1));

    // A signal sent to the parked run is kept.
    old.signal("go", &7u32, "go-1").await?;
    host.shutdown().await?;

    let host = common::hosts::open_two_on(&path, &clock, JobV1, JobV2).await?;
    let old = host.handle::<JobV1>("old");
    within(LIMIT, "the sleep", old.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(7200));
    assert_eq!(
        within(LIMIT, "the resumed run", old.result()).await??,
        "v1 0 7"
    );
    let info = old.info().await?;
    assert_eq!((info.version, info.status), (1, RunStatus::Completed));
    host.shutdown().await?;
    Ok(())
}

/// A run parked with `VersionMismatch` that is cancelled ends cancelled at once
/// (it cannot execute cleanup), and the counts follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_mismatched_run_cancels_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = v1_runs_then_v2_host(&path, &clock, &["a", "b"]).await?;
    for id in ["a", "b"] {
        until_parked(&host.run(id)).await?;
    }
    within(LIMIT, "the cancel", host.run("a").cancel("retired")).await??;
    within(
        LIMIT,
        "the terminate",
        host.run("b").terminate("retired hard"),
    )
    .await??;
    assert_eq!(host.run("a").status().await?, RunStatus::Cancelled);
    assert_eq!(host.run("b").status().await?, RunStatus::Cancelled);
    let counts = host.count().await?;
    assert_eq!(counts.get(&StatusKind::Cancelled), Some(&2), "{counts:?}");
    assert_eq!(
        counts.get(&StatusKind::Parked).copied().unwrap_or(0),
        0,
        "{counts:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Forking a run whose version is not registered is refused with
/// `VersionMismatch` and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_an_unregistered_version_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = v1_runs_then_v2_host(&path, &clock, &["old"]).await?;
    until_parked(&host.run("old")).await?;
    let records = host.run("old").records().await?;
    let end = records.last().map_or(1, |r| r.seq + 1);
    let r = host.fork("old", end, "old-fork").await;
    expect_mismatch(r.map(|_| ()));
    assert!(matches!(
        host.run("old-fork").status().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;
    Ok(())
}

/// A child on v1 of its workflow, its parent on another workflow.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let out = ctx.child::<JobV1>("kid", 5).await?;
        Ok(format!("parent got {out}"))
    }
}

/// A child parked with `VersionMismatch` keeps its parent waiting (suspended on
/// the child, not failed); once a host registers v1 again both finish. (The parent
/// used to fail for good: replaying its `ctx.child::<JobV1>` starts the child
/// again, idempotently, and the start checked the registration before it found
/// the existing child.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_parked_on_a_missing_version_keeps_its_parent_waiting() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = common::hosts::open_two_on(&path, &clock, JobV1, Parent).await?;
    let parent = host.start::<Parent>("p", ()).await?;
    within(LIMIT, "the parent to wait", parent.wait_until_suspended()).await??;
    within(
        LIMIT,
        "the child to wait",
        host.run("kid").wait_until_suspended(),
    )
    .await??;
    host.shutdown().await?;

    let host = common::hosts::open_two_on(&path, &clock, JobV2, Parent).await?;
    let kid = host.run("kid");
    kid.signal("wake", &(), "wake-1").await?;
    until_parked(&kid).await?;
    kid.signal("go", &1u32, "go-1").await?;
    let parent = host.handle::<Parent>("p");
    let status = parent.status().await?;
    assert!(
        matches!(status, RunStatus::Suspended { .. }),
        "the parent waits for its parked child: {status:?}"
    );
    host.shutdown().await?;

    let host = common::hosts::open_two_on(&path, &clock, JobV1, Parent).await?;
    let parent = host.handle::<Parent>("p");
    within(
        LIMIT,
        "the kid's sleep",
        host.run("kid").wait_until_suspended(),
    )
    .await??;
    clock.advance(Duration::from_secs(7200));
    assert_eq!(
        within(LIMIT, "the parent", parent.result()).await??,
        "parent got v1 5 1"
    );
    host.shutdown().await?;
    Ok(())
}

static NEW_STEPS: AtomicU32 = AtomicU32::new(0);

/// Before the patch: a step, a wait, then continue as new once.
struct Loop;
impl Workflow for Loop {
    const NAME: &'static str = "loop";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, round: u32) -> reel::Result<String> {
        ctx.step("a", |_| async { Ok::<_, String>(()) }).await?;
        let _: () = ctx.wait_for_signal("go").await?;
        if round == 0 {
            return ctx.continue_as_new::<Loop>(1).await;
        }
        Ok(format!("round {round} old"))
    }
}

/// The same workflow with a step patched in before the wait.
struct LoopPatched;
impl Workflow for LoopPatched {
    const NAME: &'static str = "loop";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, round: u32) -> reel::Result<String> {
        ctx.step("a", |_| async { Ok::<_, String>(()) }).await?;
        let patched = ctx.patched("extra");
        if patched {
            ctx.step("b", |_| async {
                NEW_STEPS.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            })
            .await?;
        }
        let _: () = ctx.wait_for_signal("go").await?;
        if round == 0 {
            return ctx.continue_as_new::<LoopPatched>(1).await;
        }
        Ok(format!(
            "round {round} {}",
            if patched { "new" } else { "old" }
        ))
    }
}

/// A run waiting when the patch was deployed takes the old branch in its current
/// segment and the new one in the segment it continues into; the new step runs
/// once, and the whole log replays against the patched code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_patch_run_takes_the_patch_after_continuing_as_new() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let host = common::hosts::open(&path, Loop).await?;
    let run = host.start::<Loop>("l", 0).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(&path, LoopPatched).await?;
    let run = host.handle::<LoopPatched>("l");
    run.signal("go", &(), "go-1").await?;
    within(LIMIT, "the second segment", async {
        loop {
            if run.info().await?.segment == 1
                && matches!(run.status().await?, RunStatus::Suspended { .. })
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await??;
    run.signal("go", &(), "go-2").await?;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "round 1 new"
    );
    assert_eq!(NEW_STEPS.load(Ordering::SeqCst), 1);
    let events = run.events().await?;
    let markers = events
        .iter()
        .filter(|e| matches!(e, Event::Patched { .. }))
        .count();
    assert_eq!(markers, 1, "{events:?}");
    // The saved log replays to the same result against the patched code.
    assert_eq!(
        replay(LoopPatched, &events).await?,
        Replayed::Completed("round 1 new".to_owned())
    );
    host.shutdown().await?;
    Ok(())
}
