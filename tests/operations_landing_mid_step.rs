//! Operations that land while a run's step body is running (or waits out a retry
//! backoff), and operations racing each other on such a run: pause then terminate
//! while the body still runs, pause/resume/pause around a running body, two
//! resumes racing, pause racing a cancel, resume racing a cancel, a signal racing
//! a cancel, a pause and resumes racing the host's shutdown, and pause, fork and
//! terminate during a retry backoff.
//!
//! Each operation answers `Ok` or the typed error the docs give for the state it
//! found; the run ends as documented (`RunCancelled` the last record, `result()`
//! the documented error); a body runs once per recorded attempt and never again
//! after its result is recorded; no body runs on a host after its shutdown has
//! returned; nothing hangs (limits are hang detectors only).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::log_checks::{count, ends_cancelled};
use common::{Counter, Gate, within};
use reel::{Ctx, Error, Event, Host, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// What a test controls and observes of one run's step body.
struct Probe {
    started: Gate,
    release: Gate,
    ended: Gate,
    dropped: Gate,
    runs: Counter,
}

impl Probe {
    fn new() -> Probe {
        Probe {
            started: Gate::new(),
            release: Gate::new(),
            ended: Gate::new(),
            dropped: Gate::new(),
            runs: Counter::default(),
        }
    }

    /// Waits until the body has either run to its end or been dropped.
    async fn settled(&self) {
        tokio::select! {
            () = self.ended.wait() => {}
            () = self.dropped.wait() => {}
        }
    }
}

/// Opens `dropped` when the body's future is dropped before its end.
struct DropFlag<'a>(&'a Gate, bool);

impl Drop for DropFlag<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.open();
        }
    }
}

/// Runs step `slow` (the body waits for the test), then waits for signal `go`.
/// The input picks the run's probe.
struct Gated {
    probes: Arc<Vec<Probe>>,
}

impl Workflow for Gated {
    const NAME: &'static str = "gated";
    type Input = usize;
    type Output = u32;
    async fn run(&self, ctx: Ctx, i: usize) -> reel::Result<u32> {
        let p = &self.probes[i];
        let v = ctx
            .step("slow", |_| async {
                let mut flag = DropFlag(&p.dropped, false);
                p.runs.bump();
                p.started.open();
                p.release.wait().await;
                flag.1 = true;
                p.ended.open();
                Ok::<u32, String>(7)
            })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(v + go)
    }
}

fn probes(n: usize) -> Arc<Vec<Probe>> {
    Arc::new((0..n).map(|_| Probe::new()).collect())
}

async fn open(path: &std::path::Path, probes: &Arc<Vec<Probe>>) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(Gated {
            probes: probes.clone(),
        })
        .build()
        .await
}

/// Runs `a` and `b` on two tasks at once; their answers.
async fn race<A, B>(a: A, b: B) -> anyhow::Result<(A::Output, B::Output)>
where
    A: Future + Send + 'static,
    B: Future + Send + 'static,
    A::Output: Send + 'static,
    B::Output: Send + 'static,
{
    let (a, b) = (tokio::spawn(a), tokio::spawn(b));
    let (a, b) = within(LIMIT, "two racing operations", async { tokio::join!(a, b) }).await?;
    Ok((a?, b?))
}

fn completions(events: &[Event]) -> usize {
    count(
        events,
        |e| matches!(e, Event::StepCompleted { id, .. } if id == "slow"),
    )
}

fn attempts(events: &[Event]) -> usize {
    count(
        events,
        |e| matches!(e, Event::StepStarted { id, .. } if id == "slow"),
    )
}

fn is_invalid(r: &reel::Result<()>, action: &str, not: StatusKind) -> bool {
    matches!(r, Err(Error::InvalidState { action: a, state, .. }) if a == action && *state != not)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_of_a_paused_run_whose_body_still_runs_ends_it_for_good() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(1);
    let p = &probes[0];
    let host = open(dir.path(), &probes).await?;
    let run = host.start::<Gated>("t", 0).await?;
    within(LIMIT, "the body to start", p.started.wait()).await?;

    run.pause().await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    within(LIMIT, "terminate", run.terminate("stop")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    p.release.open();
    within(LIMIT, "the body to end or be dropped", p.settled()).await?;

    let out = within(LIMIT, "the result", run.result()).await?;
    assert!(
        matches!(out, Err(Error::Cancelled(ref r)) if r == "stop"),
        "{out:?}"
    );
    // Everything the host still does reaches the log before shutdown returns.
    host.shutdown().await?;
    let host = open(dir.path(), &probes).await?;
    let run = host.handle::<Gated>("t");
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let events = run.events().await?;
    ends_cancelled(&events);
    assert!(completions(&events) <= 1, "{events:?}");
    assert_eq!(p.runs.get(), 1, "the body ran again");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_pause_around_a_running_body_record_it_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(1);
    let p = &probes[0];
    let host = open(dir.path(), &probes).await?;
    let run = host.start::<Gated>("prp", 0).await?;
    within(LIMIT, "the body to start", p.started.wait()).await?;

    run.pause().await?;
    // Resumed while the execution winds down from the pause.
    run.resume().await?;
    let again = run.resume().await;
    assert!(
        is_invalid(&again, "resume", StatusKind::Paused),
        "{again:?}"
    );
    run.pause().await?;
    run.pause().await?;
    p.release.open();
    // The body's result is recorded while the run stays paused.
    common::until_log(&run, LIMIT, "the step's result", |e| completions(e) == 1).await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    let signalled = run.signal("go", &5u32, "g1").await;
    assert!(signalled.is_ok(), "{signalled:?}");
    assert_eq!(run.status().await?, RunStatus::Paused);

    run.resume().await?;
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, 12);
    let events = run.events().await?;
    assert_eq!(
        (attempts(&events), completions(&events)),
        (1, 1),
        "{events:?}"
    );
    assert_eq!(p.runs.get(), 1, "the body ran again");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resumes_racing_one_wins_the_other_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(6);
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let id = format!("rr{i}");
        let run = host.start::<Gated>(&id, i).await?;
        within(LIMIT, "the body to start", p.started.wait()).await?;
        run.pause().await?;
        if i % 2 == 1 {
            p.release.open();
            common::until_log(&run, LIMIT, "the result", |e| completions(e) == 1).await?;
        }
        let (x, y) = (host.run(&id), host.run(&id));
        let (a, b) = race(
            async move { x.resume().await },
            async move { y.resume().await },
        )
        .await?;
        let oks = [&a, &b].iter().filter(|r| r.is_ok()).count();
        assert_eq!(oks, 1, "{a:?} {b:?}");
        for r in [&a, &b] {
            assert!(
                r.is_ok() || is_invalid(r, "resume", StatusKind::Paused),
                "{r:?}"
            );
        }
        p.release.open();
        run.signal("go", &1u32, "g").await?;
        assert_eq!(within(LIMIT, "the result", run.result()).await??, 8);
        assert_eq!(p.runs.get(), 1, "run {id}: the body ran again");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_racing_a_cancel_of_a_busy_run_ends_it_cancelled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(8);
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let id = format!("pc{i}");
        let run = host.start::<Gated>(&id, i).await?;
        within(LIMIT, "the body to start", p.started.wait()).await?;
        let (a, b) = (host.run(&id), host.run(&id));
        let (paused, cancelled) = race(async move { a.pause().await }, async move {
            if i % 2 == 0 {
                b.cancel("stop").await
            } else {
                b.terminate("stop").await
            }
        })
        .await?;
        assert!(
            paused.is_ok() || is_invalid(&paused, "pause", StatusKind::Paused),
            "{paused:?}"
        );
        assert!(cancelled.is_ok(), "{cancelled:?}");
        assert_eq!(run.status().await?, RunStatus::Cancelled);
        p.release.open();
        within(LIMIT, "the body to settle", p.settled()).await?;
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(
            matches!(out, Err(Error::Cancelled(ref r)) if r == "stop"),
            "{out:?}"
        );
    }
    host.shutdown().await?;
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let events = host.run(&format!("pc{i}")).events().await?;
        ends_cancelled(&events);
        assert_eq!(p.runs.get(), 1, "run pc{i}: the body ran again");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_racing_a_cancel_of_a_busy_run_is_recorded_or_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(8);
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let id = format!("sc{i}");
        let run = host.start::<Gated>(&id, i).await?;
        within(LIMIT, "the body to start", p.started.wait()).await?;
        if i % 2 == 1 {
            p.release.open();
        }
        let (a, b) = (host.run(&id), host.run(&id));
        let (signalled, cancelled) = race(
            async move { a.signal("go", &1u32, "s").await },
            async move { b.cancel("stop").await },
        )
        .await?;
        assert!(
            matches!(cancelled, Ok(()) | Err(Error::RunFinished(_))),
            "{cancelled:?}"
        );
        let events = run.events().await?;
        let received = count(&events, |e| matches!(e, Event::SignalReceived { .. }));
        match signalled {
            Ok(()) => assert_eq!(received, 1, "{events:?}"),
            Err(Error::RunFinished(_)) => assert_eq!(received, 0, "{events:?}"),
            other => panic!("signal answered {other:?}"),
        }
        p.release.open();
        within(LIMIT, "the body to settle", p.settled()).await?;
        let out = within(LIMIT, "the result", run.result()).await?;
        // A cancel that found the run already waiting for `go` with the signal on
        // its way may lose to the signal: then the run completed first.
        match out {
            Err(Error::Cancelled(ref r)) => assert_eq!(r, "stop"),
            Ok(8) => assert_eq!(received, 1),
            ref other => panic!("result {other:?}"),
        }
        if cancelled.is_err() {
            assert_eq!(out.ok(), Some(8), "a cancel refused as finished");
        }
    }
    host.shutdown().await?;
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let events = host.run(&format!("sc{i}")).events().await?;
        assert!(completions(&events) <= 1, "{events:?}");
        assert_eq!(p.runs.get(), 1, "run sc{i}: the body ran again");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_racing_the_shutdown_holds_after_the_reopen_or_was_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(6);
    for (i, p) in probes.iter().enumerate() {
        let id = format!("ps{i}");
        let host = open(dir.path(), &probes).await?;
        let run = host.start::<Gated>(&id, i).await?;
        within(LIMIT, "the body to start", p.started.wait()).await?;
        let (a, other) = (host.run(&id), host.clone());
        let (paused, down) = race(async move { a.pause().await }, async move {
            other.shutdown().await
        })
        .await?;
        down?;
        assert!(
            matches!(paused, Ok(()) | Err(Error::Shutdown)),
            "{paused:?}"
        );
        p.release.open();
        drop(run);
        drop(host);

        let host = open(dir.path(), &probes).await?;
        let run = host.handle::<Gated>(&id);
        let status = run.status().await?;
        // A result recorded before the shutdown is never run for again.
        let recorded = completions(&run.events().await?) == 1;
        let bodies = p.runs.get();
        if paused.is_ok() {
            assert_eq!(status, RunStatus::Paused, "run {id}: the pause was lost");
        }
        if status == RunStatus::Paused {
            run.resume().await?;
        }
        run.signal("go", &1u32, "g").await?;
        assert_eq!(within(LIMIT, "the result", run.result()).await??, 8);
        let events = run.events().await?;
        assert_eq!(completions(&events), 1, "{events:?}");
        let most = if recorded { bodies } else { bodies + 1 };
        assert!(
            p.runs.get() <= most,
            "run {id}: {} bodies (recorded before the reopen: {recorded}) for {events:?}",
            p.runs.get()
        );
        host.shutdown().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_racing_a_cancel_of_a_paused_busy_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probes = probes(8);
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let id = format!("rc{i}");
        let run = host.start::<Gated>(&id, i).await?;
        within(LIMIT, "the body to start", p.started.wait()).await?;
        run.pause().await?;
        let (a, b) = (host.run(&id), host.run(&id));
        let (resumed, cancelled) = race(async move { a.resume().await }, async move {
            if i % 2 == 0 {
                b.cancel("stop").await
            } else {
                b.terminate("stop").await
            }
        })
        .await?;
        assert!(
            resumed.is_ok() || is_invalid(&resumed, "resume", StatusKind::Paused),
            "{resumed:?}"
        );
        assert!(cancelled.is_ok(), "{cancelled:?}");
        assert_eq!(run.status().await?, RunStatus::Cancelled);
        p.release.open();
        within(LIMIT, "the body to settle", p.settled()).await?;
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(
            matches!(out, Err(Error::Cancelled(ref r)) if r == "stop"),
            "{out:?}"
        );
    }
    host.shutdown().await?;
    let host = open(dir.path(), &probes).await?;
    for (i, p) in probes.iter().enumerate() {
        let events = host.run(&format!("rc{i}")).events().await?;
        ends_cancelled(&events);
        assert_eq!(p.runs.get(), 1, "run rc{i}: the body ran again");
    }
    host.shutdown().await?;
    Ok(())
}

/// Step `a` (held by the test), then step `b`, which notes whether it ran on a
/// host that had already shut down.
struct TwoSteps {
    probes: Arc<Vec<Probe>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    late: Counter,
    b_runs: Counter,
}

impl Workflow for TwoSteps {
    const NAME: &'static str = "two-steps";
    type Input = usize;
    type Output = u32;
    async fn run(&self, ctx: Ctx, i: usize) -> reel::Result<u32> {
        let p = &self.probes[i];
        let a = ctx
            .step("a", |_| async {
                p.runs.bump();
                p.started.open();
                p.release.wait().await;
                Ok::<u32, String>(1)
            })
            .await?;
        let b = ctx
            .step("b", |_| async {
                self.b_runs.bump();
                if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
                    self.late.bump();
                }
                Ok::<u32, String>(2)
            })
            .await?;
        Ok(a + b)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumes_and_signals_racing_the_shutdown_run_nothing_after_it() -> anyhow::Result<()> {
    const N: usize = 12;
    let dir = tempfile::tempdir()?;
    let probes = probes(N);
    let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (late, b_runs) = (Counter::default(), Counter::default());
    let build = || {
        Host::builder().path(dir.path()).register(TwoSteps {
            probes: probes.clone(),
            closed: closed.clone(),
            late: late.clone(),
            b_runs: b_runs.clone(),
        })
    };
    let host = build().build().await?;
    for (i, p) in probes.iter().enumerate() {
        let run = host.start::<TwoSteps>(&format!("z{i}"), i).await?;
        within(LIMIT, "step a's body", p.started.wait()).await?;
        run.pause().await?;
        p.release.open();
        common::until_log(&run, LIMIT, "step a's result", |e| {
            e.iter().any(|e| matches!(e, Event::StepCompleted { .. }))
        })
        .await?;
    }
    let mut tasks = Vec::new();
    for i in 0..N {
        let run = host.run(&format!("z{i}"));
        tasks.push(tokio::spawn(async move {
            if i % 3 == 2 {
                run.signal("noise", &1u32, "n").await
            } else {
                run.resume().await
            }
        }));
    }
    host.shutdown().await?;
    closed.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in tasks {
        let answer = within(LIMIT, "an operation racing the shutdown", t).await??;
        assert!(
            matches!(answer, Ok(()) | Err(Error::Shutdown)),
            "{answer:?}"
        );
    }
    drop(host);

    closed.store(false, std::sync::atomic::Ordering::SeqCst);
    let host = build().build().await?;
    for i in 0..N {
        let run = host.handle::<TwoSteps>(&format!("z{i}"));
        if run.status().await? == RunStatus::Paused {
            run.resume().await?;
        }
        assert_eq!(within(LIMIT, "the result", run.result()).await??, 3);
        let events = run.events().await?;
        let done = count(&events, |e| matches!(e, Event::StepCompleted { .. }));
        assert_eq!(done, 2, "{events:?}");
    }
    host.shutdown().await?;
    assert_eq!(late.get(), 0, "step bodies ran after the shutdown returned");
    for (i, p) in probes.iter().enumerate() {
        assert_eq!(p.runs.get(), 1, "run z{i}: step a ran again");
    }
    assert!(b_runs.get() as usize <= 2 * N);
    Ok(())
}
