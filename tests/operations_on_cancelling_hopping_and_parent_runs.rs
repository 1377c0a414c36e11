//! Operations on runs caught in the middle of something other than a plain step:
//! a run cleaning up after a cancel request (a pause does not hold the cancel
//! up; a graceful cancel and a terminate racing over a shielded body), a run
//! whose step result is recorded but not yet seen (fork and resume run no body
//! again), a run continuing as new, a parent whose child is mid-step, a parked
//! run retried while it is cancelled (deletes racing other operations:
//! `operations_racing_a_delete.rs`).
//!
//! Each operation answers `Ok` or its documented typed error (a fork of a run
//! being deleted: `UnknownRun`; a read of it: the whole log or none, never a
//! "corrupt record"), the runs end as documented, no step body runs again once
//! its result is recorded, and nothing hangs (limits are hang detectors only).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use common::log_checks::{count, ends_cancelled};
use common::{Counter, Gate, until_log, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// One step body the test holds and counts.
struct Probe {
    started: Gate,
    release: Gate,
    runs: Counter,
}

fn probes(n: usize) -> Arc<Vec<Probe>> {
    Arc::new(
        (0..n)
            .map(|_| Probe {
                started: Gate::new(),
                release: Gate::new(),
                runs: Counter::default(),
            })
            .collect(),
    )
}

async fn body(p: &Probe) -> Result<u32, String> {
    p.runs.bump();
    p.started.open();
    p.release.wait().await;
    Ok(7)
}

/// Input `(probe, shielded)`: step `slow` (shielded or not), then signal `go`.
struct Busy {
    probes: Arc<Vec<Probe>>,
}

impl Workflow for Busy {
    const NAME: &'static str = "busy";
    type Input = (usize, bool);
    type Output = u32;
    async fn run(&self, ctx: Ctx, (i, shielded): (usize, bool)) -> reel::Result<u32> {
        let p = &self.probes[i];
        let on = if shielded {
            ctx.shielded()
        } else {
            ctx.clone()
        };
        let v = on.step("slow", |_| body(p)).await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(v + go)
    }
}

/// Input `(first probe, segment)`: step `slow` on probe `first + segment`, then
/// continues as new until segment 2, which waits for signal `go`.
struct Hop {
    probes: Arc<Vec<Probe>>,
}

impl Workflow for Hop {
    const NAME: &'static str = "hop";
    type Input = (usize, usize);
    type Output = u32;
    async fn run(&self, ctx: Ctx, (first, seg): (usize, usize)) -> reel::Result<u32> {
        let p = &self.probes[first + seg];
        let v = ctx.step("slow", |_| body(p)).await?;
        if seg < 2 {
            return ctx.continue_as_new::<Hop>((first, seg + 1)).await;
        }
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(v + go)
    }
}

/// Waits for its child `<id>-kid`, a `Busy` on probe `i`.
struct Parent;

impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = usize;
    type Output = u32;
    async fn run(&self, ctx: Ctx, i: usize) -> reel::Result<u32> {
        let kid = format!("{}-kid", ctx.run_id());
        Ok(ctx.child::<Busy>(&kid, (i, false)).await? + 1000)
    }
}

static FIXED: AtomicBool = AtomicBool::new(false);

/// Crashes outside any step until `FIXED`; then waits for signal `go`.
struct Crashy;

impl Workflow for Crashy {
    const NAME: &'static str = "crashy";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        assert!(FIXED.load(Ordering::SeqCst), "handler bug");
        ctx.wait_for_signal("go").await
    }
}

fn clock() -> TestClock {
    TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
}

async fn open(path: &std::path::Path, probes: &Arc<Vec<Probe>>) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        // The cancel grace never runs out by itself: a cancel ends by the handler.
        .clock(clock())
        .register(Busy {
            probes: probes.clone(),
        })
        .register(Hop {
            probes: probes.clone(),
        })
        .register(Parent)
        .build()
        .await
}

fn completions(events: &[Event]) -> usize {
    count(events, |e| matches!(e, Event::StepCompleted { .. }))
}

fn cancelled(out: &reel::Result<u32>, reason: &str) -> bool {
    matches!(out, Err(Error::Cancelled(r)) if r.contains(reason))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_does_not_hold_up_a_cancel_under_way() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(1);
    let p = &probes[0];
    let host = open(dir.path(), &probes).await?;
    let run = host.start::<Busy>("c", (0, true)).await?;
    within(LIMIT, "the body to start", p.started.wait()).await?;
    // `cancel` returns once the run has ended.
    let waiter = run.clone();
    let waiting = tokio::spawn(async move { waiter.cancel("stop").await });
    until_log(&run, LIMIT, "the cancel request", |e| {
        e.iter().any(|e| matches!(e, Event::CancelRequested { .. }))
    })
    .await?;

    // The run is cleaning up (its shielded step runs on). Paused now, it would
    // neither clean up nor end, and the `cancel` above would wait for a grace
    // that only a clock advance ends: the pause is refused and changes nothing.
    let paused = run.pause().await;
    assert!(
        matches!(paused, Err(Error::InvalidState { ref action, .. }) if action == "pause"),
        "{paused:?}"
    );
    assert_ne!(run.status().await?, RunStatus::Paused);
    p.release.open();
    within(LIMIT, "cancel to return", waiting).await???;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let out = within(LIMIT, "the result", run.result()).await?;
    assert!(cancelled(&out, "stop"), "{out:?}");
    let events = run.events().await?;
    ends_cancelled(&events);
    // The shielded body ran to its end and was recorded, once.
    assert_eq!(completions(&events), 1, "{events:?}");
    assert_eq!(p.runs.get(), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_cancel_and_a_terminate_racing_over_a_shielded_body() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(6);
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let id = format!("ct{i}");
        let run = host.start::<Busy>(&id, (i, true)).await?;
        within(LIMIT, "the body to start", p.started.wait()).await?;
        let (a, b) = (run.clone(), run.clone());
        let graceful = tokio::spawn(async move { a.cancel("soft").await });
        let hard = tokio::spawn(async move { b.terminate("hard").await });
        // The terminate ends the run whatever the shielded body does.
        let (g, h) = within(LIMIT, "both cancels", async {
            tokio::join!(graceful, hard)
        })
        .await?;
        let (g, h) = (g?, h?);
        assert!(g.is_ok() && h.is_ok(), "{g:?} {h:?}");
        p.release.open();
        let out = within(LIMIT, "the result", run.result()).await?;
        // The first request's reason stands.
        assert!(
            cancelled(&out, "soft") || cancelled(&out, "hard"),
            "{out:?}"
        );
        ends_cancelled(&run.events().await?);
        assert_eq!(p.runs.get(), 1);
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_of_a_busy_run_and_of_a_paused_recorded_step() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(1);
    let p = &probes[0];
    let host = open(dir.path(), &probes).await?;
    let run = host.start::<Busy>("f", (0, false)).await?;
    within(LIMIT, "the body to start", p.started.wait()).await?;

    // The body is running: a cut at the end of the log keeps its open attempt,
    // which the fork runs itself (it is another run).
    let end = run.records().await?.len() as u64;
    let busy_fork = host.fork("f", end, "f-busy").await;
    run.pause().await?;
    p.release.open();
    until_log(&run, LIMIT, "the step's result", |e| completions(e) == 1).await?;
    assert_eq!(run.status().await?, RunStatus::Paused);

    // Recorded, not yet seen by the paused handler: a fork past it runs no body.
    let before = p.runs.get();
    let end = run.records().await?.len() as u64;
    let fork = host.fork("f", end, "f-after").await?;
    fork.signal("go", &2u32, "g").await?;
    assert_eq!(within(LIMIT, "the fork", fork.result::<u32>()).await??, 9);
    assert_eq!(p.runs.get(), before, "the fork ran a recorded step again");

    run.resume().await?;
    run.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "the original", run.result()).await??, 8);
    assert_eq!(p.runs.get(), before, "the resumed run ran its step again");
    match busy_fork {
        Ok(f) => {
            f.signal("go", &3u32, "g").await?;
            assert_eq!(
                within(LIMIT, "the busy fork", f.result::<u32>()).await??,
                10
            );
            assert_eq!(completions(&f.events().await?), 1);
        }
        Err(Error::InvalidCut { .. }) => {}
        Err(e) => panic!("fork of a busy run: {e:?}"),
    }
    assert_eq!(completions(&run.events().await?), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_before_it_continues_as_new_goes_on_once_resumed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(3);
    let host = open(dir.path(), &probes).await?;
    let run = host.start::<Hop>("h", (0, 0)).await?;
    within(LIMIT, "segment 0's body", probes[0].started.wait()).await?;
    run.pause().await?;
    probes[0].release.open();
    until_log(&run, LIMIT, "segment 0's result", |e| completions(e) == 1).await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    run.resume().await?;

    within(LIMIT, "segment 1's body", probes[1].started.wait()).await?;
    within(LIMIT, "terminate", run.terminate("stop")).await??;
    probes[1].release.open();
    let out = within(LIMIT, "the result", run.result()).await?;
    assert!(cancelled(&out, "stop"), "{out:?}");
    let events = run.events().await?;
    ends_cancelled(&events);
    let news = count(&events, |e| matches!(e, Event::ContinuedAsNew { .. }));
    assert_eq!(news, 1, "{events:?}");
    assert_eq!((probes[0].runs.get(), probes[1].runs.get()), (1, 1));
    assert_eq!(probes[2].runs.get(), 0);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_continue_as_new_ends_the_run_cancelled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(3 * 6);
    let host = open(dir.path(), &probes).await?;
    for k in 0..6 {
        let first = 3 * k;
        let id = format!("hc{k}");
        let run = host.start::<Hop>(&id, (first, 0)).await?;
        within(LIMIT, "the body", probes[first].started.wait()).await?;
        let canceller = run.clone();
        let cancelling = tokio::spawn(async move { canceller.cancel("stop").await });
        probes[first].release.open();
        // Later segments' bodies may start before the request lands; let them go.
        probes[first + 1].release.open();
        within(LIMIT, "the cancel", cancelling).await???;
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(cancelled(&out, "stop"), "{out:?}");
        let events = run.events().await?;
        ends_cancelled(&events);
        for p in &probes[first..first + 3] {
            assert!(p.runs.get() <= 1, "run {id}: a body ran twice");
        }
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_on_a_parent_whose_child_is_mid_step() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(3);
    let host = open(dir.path(), &probes).await?;

    // Terminated: the child it waits on is cancelled with it.
    let parent = host.start::<Parent>("p0", 0).await?;
    within(LIMIT, "the child's body", probes[0].started.wait()).await?;
    within(LIMIT, "terminate", parent.terminate("stop")).await??;
    let kid = host.handle::<Busy>("p0-kid");
    let out = within(LIMIT, "the child's result", kid.result()).await?;
    assert!(cancelled(&out, "stop"), "{out:?}");
    probes[0].release.open();
    ends_cancelled(&kid.events().await?);
    ends_cancelled(&parent.events().await?);

    // Paused: the child goes on; its result waits in the parent's log.
    let parent = host.start::<Parent>("p1", 1).await?;
    within(LIMIT, "the child's body", probes[1].started.wait()).await?;
    parent.pause().await?;
    probes[1].release.open();
    let kid = host.handle::<Busy>("p1-kid");
    kid.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "the child", kid.result()).await??, 8);
    until_log(&parent, LIMIT, "the child's end", |e| {
        e.iter().any(|e| matches!(e, Event::ChildCompleted { .. }))
    })
    .await?;
    assert_eq!(parent.status().await?, RunStatus::Paused);
    parent.resume().await?;
    assert_eq!(within(LIMIT, "the parent", parent.result()).await??, 1008);

    // Cancelled gracefully: `cancel` returns once the parent has ended, and the
    // child's running body is dropped with it.
    let parent = host.start::<Parent>("p2", 2).await?;
    within(LIMIT, "the child's body", probes[2].started.wait()).await?;
    within(LIMIT, "cancel", parent.cancel("stop")).await??;
    let kid = host.handle::<Busy>("p2-kid");
    let out = within(LIMIT, "the child's result", kid.result()).await?;
    assert!(cancelled(&out, "stop"), "{out:?}");
    probes[2].release.open();
    ends_cancelled(&kid.events().await?);
    assert_eq!(completions(&kid.events().await?), 0);
    let runs: Vec<u32> = probes.iter().map(|p| p.runs.get()).collect();
    assert_eq!(runs, [1, 1, 1]);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_racing_a_cancel_of_a_parked_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .clock(clock())
        .restart_limit(1, Duration::from_secs(60))
        .register(Crashy)
        .build()
        .await?;
    let ids: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    for id in &ids {
        let run = host.start::<Crashy>(id, ()).await?;
        common::status::until_status(&run, "parked", |s| s.kind() == StatusKind::Parked).await?;
    }
    FIXED.store(true, Ordering::SeqCst);
    for (i, id) in ids.iter().enumerate() {
        let (a, b) = (host.run(id), host.run(id));
        let retrying = tokio::spawn(async move { a.retry().await });
        let cancelling = tokio::spawn(async move {
            if i % 2 == 0 {
                b.cancel("stop").await
            } else {
                b.terminate("stop").await
            }
        });
        let (retried, done) = within(LIMIT, "retry and cancel", async {
            tokio::join!(retrying, cancelling)
        })
        .await?;
        let (retried, done) = (retried?, done?);
        assert!(done.is_ok(), "{done:?}");
        assert!(
            retried.is_ok()
                || matches!(
                    retried,
                    Err(Error::InvalidState {
                        state: StatusKind::Cancelled,
                        ..
                    })
                ),
            "{retried:?}"
        );
        let run = host.handle::<Crashy>(id);
        assert_eq!(run.status().await?, RunStatus::Cancelled);
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(cancelled(&out, "stop"), "{out:?}");
        ends_cancelled(&run.events().await?);
    }
    host.shutdown().await?;
    Ok(())
}
