//! Cancels racing recovery, the start of their run, and signal-driven hops.

use crate::*;

// Cancels racing the recovery of runs interrupted mid-step.

/// Segment 0: a step whose body waits on the test's gate, then continues as
/// new. Segment 1: a wait for `go`.
#[derive(Clone)]
struct Worker {
    probes: Arc<Vec<Probe>>,
}

impl Workflow for Worker {
    const NAME: &'static str = "worker";
    type Input = (usize, u32);
    type Output = u32;
    async fn run(&self, ctx: Ctx, (i, segment): (usize, u32)) -> reel::Result<u32> {
        if segment == 0 {
            ctx.step("work", |_| self.probes[i].body(1)).await?;
            return ctx.continue_as_new::<Worker>((i, 1)).await;
        }
        ctx.wait_for_signal::<u32>("go").await
    }
}

fn workers(n: usize) -> Worker {
    Worker {
        probes: Arc::new((0..n).map(|_| Probe::new()).collect()),
    }
}

/// Adapts DBOS `tests/test_workflow_management.py` `test_cancel_resume` (a
/// workflow cancelled while it is in a step) and sdk-core `cancel_wf.rs`
/// `cancel_during_timer` (an external cancel) to runs a restarted host is
/// recovering, as a fresh Temporal worker replays from history: runs interrupted mid-step by a shutdown
/// are resumed by the next host, which runs their bodies again (and, once a
/// body is let through, continues the run as new), and each is cancelled (or
/// terminated) the moment the new host is built, racing its activation and
/// its switch. Every run ends `Cancelled("stop")` with one request in its
/// last segment; the interrupted body never finishes; the rerun body's result
/// is recorded at most once, and only if that body finished; nothing is left
/// running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_racing_the_recovery_of_runs_interrupted_mid_step() -> anyhow::Result<()> {
    const N: usize = 16;
    let dir = tempfile::tempdir()?;
    let before = workers(N);
    let host = common::hosts::open(dir.path(), before.clone()).await?;
    for i in 0..N {
        host.start::<Worker>(&format!("worker-{i}"), (i, 0)).await?;
    }
    until("every body", || {
        before.probes.iter().all(|p| p.started.get() == 1)
    })
    .await?;
    host.shutdown().await?;

    let after = workers(N);
    let host = common::hosts::open(dir.path(), after.clone()).await?;
    let mut tasks = Vec::new();
    for i in 0..N {
        let run = host.handle::<Worker>(&format!("worker-{i}"));
        let p = after.probes[i].clone();
        tasks.push(tokio::spawn(async move {
            if i % 4 == 0 {
                p.release.open();
            }
            let ended = match i % 2 {
                0 => run.cancel("stop").await,
                _ => run.terminate("stop").await,
            };
            if i % 4 == 1 {
                p.release.open();
            }
            ended?;
            anyhow::Ok(run)
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let run = within(LIMIT, "a cancel", t).await???;
        let id = run.id().to_string();
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(is_cancelled(&out, "stop"), "{id}: {out:?}");
        assert_eq!(run.status().await?, RunStatus::Cancelled, "{id}");
        let events = run.events().await?;
        ends_cancelled(&events, "stop");
        assert!(hops(&events) <= 1, "{id}: {events:?}");
        let last_start = events
            .iter()
            .rposition(|e| matches!(e, Event::RunStarted { .. }))
            .unwrap_or(0);
        let requests = cancel_requests(&events[last_start..]);
        assert!(requests <= 1, "{id}: {events:?}");
        if i % 2 == 0 {
            assert_eq!(requests, 1, "{id}: {events:?}");
        }
        let p = &after.probes[i];
        assert!(completed(&events, "work") <= 1, "{id}: {events:?}");
        if completed(&events, "work") == 1 {
            assert_eq!(p.finished.get(), 1, "{id}: a result no body gave");
        }
        assert!(p.started.get() <= 1, "{id}: the body ran twice on one host");
        assert_eq!(before.probes[i].finished.get(), 0);
    }
    for p in after.probes.iter() {
        p.release.open();
    }
    until("every rerun body to go away", || {
        after
            .probes
            .iter()
            .all(|p| p.ended.get() == p.started.get())
    })
    .await?;
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Cancels racing a start, and signal-driven hops.

/// A step (its body is instant), then a wait for `go`.
#[derive(Clone)]
struct Quickstep {
    bodies: Counter,
}

impl Workflow for Quickstep {
    const NAME: &'static str = "quickstep";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let v = ctx
            .step("work", |_| async {
                self.bodies.bump();
                Ok::<u32, String>(1)
            })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(v + go)
    }
}

/// Adapts DBOS `tests/test_workflow_management.py` `test_cancel_resume` (a
/// cancel sent as soon as the workflow has begun) and duroxide's
/// `cancel_instance` (`tests/cancellation_tests.rs`) to the earliest moment: the
/// cancel is sent while `start` runs the handler's first execution and writes
/// the run. A cancel that answers `Ok` ends the run `Cancelled("stop")` with
/// one request; one sent before the run exists is `UnknownRun`, and the next
/// one ends it. The step is recorded at most once, and only by a body that ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_racing_the_start_of_their_run_end_it_once() -> anyhow::Result<()> {
    const N: usize = 24;
    let dir = tempfile::tempdir()?;
    let wf = Quickstep {
        bodies: Counter::default(),
    };
    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let mut tasks = Vec::new();
    for i in 0..N {
        let host = host.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("quick-{i}");
            let run = host.handle::<Quickstep>(&id);
            let cancel = async {
                loop {
                    match run.cancel("stop").await {
                        Err(Error::UnknownRun(_)) => tokio::task::yield_now().await,
                        other => return other,
                    }
                }
            };
            let (started, cancelled) = tokio::join!(host.start::<Quickstep>(&id, ()), cancel);
            started?;
            cancelled?;
            let out = run.result().await;
            assert!(is_cancelled(&out, "stop"), "{id}: {out:?}");
            assert_eq!(run.status().await?, RunStatus::Cancelled, "{id}");
            let events = run.events().await?;
            ends_cancelled(&events, "stop");
            assert_eq!(cancel_requests(&events), 1, "{id}: {events:?}");
            assert!(completed(&events, "work") <= 1, "{id}: {events:?}");
            anyhow::Ok(completed(&events, "work"))
        }));
    }
    let mut recorded = 0;
    for t in tasks {
        recorded += within(LIMIT, "a run", t).await???;
    }
    assert!(wf.bodies.get() as usize >= recorded);
    assert!(wf.bodies.get() as usize <= N, "a body ran twice");
    host.shutdown().await?;
    Ok(())
}

/// Takes one `n` signal a segment and continues as new, three times; the
/// fourth segment waits for `n` again.
struct Flipper;

impl Workflow for Flipper {
    const NAME: &'static str = "flipper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        let n: u32 = ctx.wait_for_signal("n").await?;
        if segment < 3 {
            return ctx.continue_as_new::<Flipper>(segment + 1).await;
        }
        Ok(n)
    }
}

/// Adapts duroxide `cancel_continue_as_new_second_exec` and Temporal's
/// continue-as-new tests (Go SDK `Test_ContinueAsNewWorkflow`) to a race of
/// signals, hops and a cancel: many runs
/// passivate a millisecond after they wait, and each gets three signals (each
/// makes it continue as new) and a cancel at the same moment. Each ends
/// `Cancelled("stop")` in its last segment, with at most three switches and
/// one request in its last segment; every signal acknowledged `Ok` is in its
/// log (landed in one segment, or carried into the next).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_racing_signal_driven_hops_end_every_run_and_lose_no_signal() -> anyhow::Result<()>
{
    const N: usize = 16;
    let dir = tempfile::tempdir()?;
    let host =
        common::hosts::open_passivating(dir.path(), Flipper, Duration::from_millis(1)).await?;
    let mut tasks = Vec::new();
    for i in 0..N {
        let host = host.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("flipper-{i}");
            let run = host.start::<Flipper>(&id, 0).await?;
            let signals = async {
                let mut acked = Vec::new();
                for k in 0..3u32 {
                    let sig = format!("n-{k}");
                    match run.signal("n", &k, &sig).await {
                        Ok(()) => acked.push(sig),
                        Err(Error::RunFinished(_)) => {}
                        Err(e) => panic!("{id}: signal: {e:?}"),
                    }
                    if i % 2 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                acked
            };
            let (acked, cancelled) = tokio::join!(signals, run.cancel("stop"));
            cancelled?;
            let out = run.result().await;
            assert!(is_cancelled(&out, "stop"), "{id}: {out:?}");
            assert_eq!(run.status().await?, RunStatus::Cancelled, "{id}");
            let events = run.events().await?;
            ends_cancelled(&events, "stop");
            assert!(hops(&events) <= 3, "{id}: {events:?}");
            let last_start = events
                .iter()
                .rposition(|e| matches!(e, Event::RunStarted { .. }))
                .unwrap_or(0);
            assert_eq!(
                cancel_requests(&events[last_start..]),
                1,
                "{id}: {events:?}"
            );
            assert_eq!(run.info().await?.segment as usize, hops(&events), "{id}");
            for sig in acked {
                assert!(
                    events.iter().any(
                        |e| matches!(e, Event::SignalReceived { signal_id, .. } if *signal_id == sig)
                    ),
                    "{id}: the acknowledged signal {sig} is lost: {events:?}"
                );
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        within(LIMIT, "a run", t).await???;
    }
    host.shutdown().await?;
    Ok(())
}
