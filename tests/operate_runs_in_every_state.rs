//! Adversarial operator tests: terminate, cancel, pause and resume of a parent
//! waiting on a child (the child follows the parent-close policy, the child's
//! result waits in the paused parent's log), fork of a paused run, wrong-state
//! operations on an enqueued run, retention that keeps every unfinished run
//! however old and eventually deletes every run past its window, and deletion of
//! a parent whose detached child goes on.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::status::until_status;
use common::within;
use reel::testing::TestClock;
use reel::{
    Ctx, Error, Event, Host, HostBuilder, QueueOptions, Retention, RunHandle, RunStatus,
    StartOptions, StatusKind, Workflow,
};

const LIMIT: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Waits for `go` and returns it.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// Calls child `<own id>-kid` and waits for it.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let id = format!("{}-kid", ctx.run_id());
        let v = ctx.child::<Kid>(&id, ()).await?;
        Ok(v + 1)
    }
}

/// Starts a detached child `<own id>-kid` and completes.
struct Detacher;
impl Workflow for Detacher {
    const NAME: &'static str = "detacher";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let id = format!("{}-kid", ctx.run_id());
        ctx.start_child::<Kid>(&id, ()).await?;
        Ok(())
    }
}

/// Completes at once.
struct Quick;
impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

/// Panics outside a step: parks after a crash loop.
struct Crashy;
impl Workflow for Crashy {
    const NAME: &'static str = "crashy";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        panic!("always");
    }
}

fn builder(path: &std::path::Path, clock: &TestClock) -> HostBuilder {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(Kid)
        .register(Parent)
        .register(Detacher)
        .register(Quick)
        .register(Crashy)
        .restart_limit(0, Duration::from_secs(30))
        .queue("one", QueueOptions::default().concurrency(1))
}

async fn parent_with_waiting_kid(host: &Host, id: &str) -> anyhow::Result<()> {
    let p = host.start::<Parent>(id, ()).await?;
    within(LIMIT, "the parent", p.wait_until_suspended()).await??;
    let kid = host.run(&format!("{id}-kid"));
    within(LIMIT, "the kid", kid.wait_until_suspended()).await??;
    Ok(())
}

/// Starts a `Kid` as `id` and waits until it waits for `go`.
async fn waiting_kid(host: &Host, id: &str) -> anyhow::Result<RunHandle<Kid>> {
    let run = host.start::<Kid>(id, ()).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    Ok(run)
}

/// Runs retention passes until one deletes nothing (or after `most` more
/// passes); returns what each deleted.
async fn retention_passes(host: &Host, most: usize) -> anyhow::Result<Vec<usize>> {
    let mut passes = Vec::new();
    loop {
        let n = host.enforce_retention().await?;
        passes.push(n);
        if n == 0 || passes.len() > most {
            break;
        }
    }
    Ok(passes)
}

/// Terminating a parent, and cancelling a paused one, cancels the child it waits
/// on (Temporal's default parent-close policy), with a reason naming the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_and_cancel_of_a_paused_parent_cancel_the_waited_child() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;
    parent_with_waiting_kid(&host, "t").await?;
    parent_with_waiting_kid(&host, "c").await?;

    within(LIMIT, "terminate", host.run("t").terminate("ops")).await??;
    host.run("c").pause().await?;
    assert_eq!(host.run("c").status().await?, RunStatus::Paused);
    within(LIMIT, "cancel", host.run("c").cancel("ops")).await??;

    for id in ["t", "c"] {
        assert_eq!(host.run(id).status().await?, RunStatus::Cancelled, "{id}");
        let kid = host.run(&format!("{id}-kid"));
        until_status(&kid, "the kid to be cancelled", |s| {
            *s == RunStatus::Cancelled
        })
        .await?;
        assert!(
            matches!(kid.result::<u32>().await, Err(Error::Cancelled(ref r)) if r.contains("ops")),
            "{id}-kid"
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// A child that completes while its parent is paused: the parent stays paused
/// (its log records the child's end), and finishes with it once resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_result_waits_in_a_paused_parent_until_resume() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;
    parent_with_waiting_kid(&host, "p").await?;
    let parent = host.handle::<Parent>("p");
    parent.pause().await?;
    let kid = host.handle::<Kid>("p-kid");
    kid.signal("go", &41u32, "go").await?;
    assert_eq!(within(LIMIT, "the kid", kid.result()).await??, 41);
    within(LIMIT, "the child's end in the parent's log", async {
        loop {
            let events = parent.events().await?;
            if events
                .iter()
                .any(|e| matches!(e, Event::ChildCompleted { .. }))
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await??;
    assert_eq!(parent.status().await?, RunStatus::Paused);
    assert!(
        !parent
            .events()
            .await?
            .iter()
            .any(|e| matches!(e, Event::RunCompleted { .. })),
        "a paused parent does not complete"
    );
    parent.resume().await?;
    assert_eq!(within(LIMIT, "the parent", parent.result()).await??, 42);
    host.shutdown().await?;
    Ok(())
}

/// A fork of a paused run is a new run that is not paused: it goes on; the
/// original stays paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_paused_run_runs_and_leaves_the_original_paused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;
    let run = waiting_kid(&host, "orig").await?;
    run.pause().await?;
    let end = run.records().await?.last().map_or(1, |r| r.seq + 1);
    let fork = host.fork("orig", end, "forked").await?;
    let s = until_status(&fork, "the fork to wait", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    assert!(matches!(s, RunStatus::Suspended { .. }), "{s:?}");
    fork.signal("go", &3u32, "go").await?;
    assert_eq!(within(LIMIT, "the fork", fork.result::<u32>()).await??, 3);
    assert_eq!(run.status().await?, RunStatus::Paused);
    host.shutdown().await?;
    Ok(())
}

/// An enqueued run refuses resume and retry with `InvalidState(Enqueued)`;
/// terminate ends it cancelled without running, and frees nothing it did not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueued_run_refuses_resume_and_retry_and_terminates() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;
    let first = host.start_on::<Kid>("one", "first", ()).await?;
    within(LIMIT, "the first", first.wait_until_suspended()).await??;
    let queued = host.start_on::<Kid>("one", "queued", ()).await?;
    assert_eq!(queued.status().await?, RunStatus::Enqueued);
    for (r, action) in [
        (queued.resume().await, "resume"),
        (queued.retry().await, "retry"),
    ] {
        match r {
            Err(Error::InvalidState {
                run_id,
                state,
                action: a,
            }) => {
                assert_eq!(
                    (run_id.as_str(), state, a.as_str()),
                    ("queued", StatusKind::Enqueued, action)
                );
            }
            other => panic!("{action} of an enqueued run: {other:?}"),
        }
    }
    within(LIMIT, "terminate", queued.terminate("not needed")).await??;
    assert_eq!(queued.status().await?, RunStatus::Cancelled);
    assert!(
        !queued
            .events()
            .await?
            .iter()
            .any(|e| matches!(e, Event::SignalAwaited { .. })),
        "the terminated run never executed"
    );
    // The queue's slot is still the first run's: a third run waits behind it.
    let third = host.start_on::<Kid>("one", "third", ()).await?;
    assert_eq!(third.status().await?, RunStatus::Enqueued);
    first.signal("go", &1u32, "go").await?;
    within(LIMIT, "the first", first.result()).await??;
    within(LIMIT, "the third", third.wait_until_suspended()).await??;
    host.shutdown().await?;
    Ok(())
}

/// Retention keeps every unfinished run however old (suspended, paused, parked,
/// enqueued) and, pass after pass until a pass deletes nothing, deletes every
/// finished run that ended longer ago than its window, but not one that was
/// created long ago and ended recently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_unfinished_runs_and_deletes_exactly_the_old_ended_ones()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let policy = Retention::keep_all()
        .completed_after(HOUR)
        .failed_after(HOUR)
        .cancelled_after(HOUR)
        .every(Duration::from_secs(3600))
        .per_pass(1);
    let host = builder(dir.path(), &clock)
        .retention(policy)
        .build()
        .await?;

    // Created first, ends last: old by creation, recent by its end.
    let late = waiting_kid(&host, "a-late").await?;
    // Unfinished, all created at T0.
    waiting_kid(&host, "b-suspended").await?;
    let paused = waiting_kid(&host, "c-paused").await?;
    paused.pause().await?;
    let parked = host.start::<Crashy>("d-parked", ()).await?;
    until_status(&parked, "the crash loop to park", |s| {
        matches!(s, RunStatus::Parked { .. })
    })
    .await?;
    let blocker = host.start_on::<Kid>("one", "e-blocker", ()).await?;
    within(LIMIT, "the blocker", blocker.wait_until_suspended()).await??;
    let queued = host.start_on::<Kid>("one", "f-queued", ()).await?;
    assert_eq!(queued.status().await?, RunStatus::Enqueued);

    // Ended at T0 + 1 min: old by the time of the passes.
    clock.advance(Duration::from_secs(60));
    for i in 0..3 {
        host.start::<Quick>(&format!("g-done-{i}"), ())
            .await?
            .result()
            .await?;
    }
    let cancelled = waiting_kid(&host, "h-cancelled").await?;
    cancelled.cancel("x").await?;

    clock.advance(2 * HOUR);
    late.signal("go", &1u32, "go").await?;
    within(LIMIT, "the late run", late.result()).await??;

    let passes = retention_passes(&host, 20).await?;
    let mut left: Vec<String> = host.runs().await?.into_iter().map(|r| r.run_id).collect();
    left.sort();
    assert_eq!(
        left,
        [
            "a-late",
            "b-suspended",
            "c-paused",
            "d-parked",
            "e-blocker",
            "f-queued",
        ],
        "passes deleted {passes:?}"
    );
    assert_eq!(paused.status().await?, RunStatus::Paused);
    assert_eq!(queued.status().await?, RunStatus::Enqueued);
    let total: u64 = host.count().await?.values().sum();
    assert_eq!(total, 6);
    host.shutdown().await?;
    Ok(())
}

/// Deleting a finished parent leaves its detached child running; the child
/// finishes; a new run that reuses the parent's id has no children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_parent_leaves_its_detached_child_and_its_id_reusable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;
    let p = host.start::<Detacher>("p", ()).await?;
    within(LIMIT, "the parent", p.result()).await??;
    let kid = host.handle::<Kid>("p-kid");
    within(LIMIT, "the kid", kid.wait_until_suspended()).await??;
    assert_eq!(p.children().await?.len(), 1);

    p.delete().await?;
    assert!(matches!(p.status().await, Err(Error::UnknownRun(_))));
    assert!(matches!(kid.status().await?, RunStatus::Suspended { .. }));
    kid.signal("go", &9u32, "go").await?;
    assert_eq!(within(LIMIT, "the kid", kid.result()).await??, 9);

    // The id is free again: the new run is a stranger to the old child.
    let again = host.start::<Quick>("p", ()).await?;
    within(LIMIT, "the new p", again.result()).await??;
    let children = again.children().await?;
    assert!(
        children.is_empty(),
        "a new run under a reused id lists the deleted run's child: {:?}",
        children.iter().map(|c| &c.run_id).collect::<Vec<_>>()
    );
    host.shutdown().await?;
    Ok(())
}

/// A run with a deadline that is paused ends cancelled when the deadline passes
/// (it cannot clean up), with the deadline's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_past_its_deadline_ends_cancelled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;
    let run = host
        .start_with::<Kid>("d", (), StartOptions::default().timeout(HOUR))
        .await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    run.pause().await?;
    clock.advance(2 * HOUR);
    until_status(&run, "the deadline", |s| *s == RunStatus::Cancelled).await?;
    match run.result().await {
        Err(Error::Cancelled(reason)) => assert!(reason.contains("deadline"), "{reason}"),
        other => panic!("{other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}

/// A pass goes on past runs that are not due (here `late`, created first but
/// ended recently): it returns fewer than `per_pass` only when none is left, so
/// the documented "call again to go on" loop deletes `old`. (A pass used to spend
/// its budget on `late` and return 0.)
///
/// Completed runs only, one examined per pass: a run created long ago that ended
/// just now is kept, and passes repeated until one deletes nothing still delete
/// the run behind it that ended long ago ("call again to go on").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_passes_go_on_past_a_run_that_is_not_due_yet() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let policy = Retention::keep_all()
        .completed_after(HOUR)
        .every(Duration::from_secs(3600))
        .per_pass(1);
    let host = builder(dir.path(), &clock)
        .retention(policy)
        .build()
        .await?;
    let late = waiting_kid(&host, "late").await?;
    clock.advance(Duration::from_secs(60));
    host.start::<Quick>("old", ()).await?.result().await?;
    clock.advance(2 * HOUR);
    late.signal("go", &1u32, "go").await?;
    within(LIMIT, "the late run", late.result()).await??;

    let passes = retention_passes(&host, 10).await?;
    assert!(
        matches!(host.run("old").status().await, Err(Error::UnknownRun(_))),
        "the run that ended two hours ago is still there after passes {passes:?}"
    );
    assert_eq!(late.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}
