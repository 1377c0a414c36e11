//! Host and actor lifecycles racing work: `result()` callers racing the run's end
//! and the host's shutdown, a host shut down and reopened in a loop while runs
//! progress, handlers that panic while signals arrive, and a parked run that
//! collects signals until a retry resumes it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, Host, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Waits for one signal and returns it plus one.
struct Once;

impl Workflow for Once {
    const NAME: &'static str = "once";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        Ok(ctx.wait_for_signal::<u32>("v").await? + 1)
    }
}

/// Many `result()` callers, the signal that ends the run and the host's
/// shutdown, all at once: each caller gets the output or `Shutdown`, none hangs,
/// and after a reopen the run has its one end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_callers_race_the_end_and_the_shutdown() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || common::hosts::open(dir.path(), Once);
    let mut tally = BTreeMap::new();
    for iter in 0..25u32 {
        let host = open().await?;
        let id = format!("o{iter}");
        let run = host.start::<Once>(&id, ()).await?;
        let mut callers = Vec::new();
        for _ in 0..8 {
            let run = run.clone();
            callers.push(tokio::spawn(async move { run.result().await }));
        }
        run.wait_until_suspended().await?;
        let signal = {
            let run = run.clone();
            tokio::spawn(async move { run.signal("v", &iter, "v").await })
        };
        match iter % 3 {
            // The shutdown races the signal.
            0 => {}
            // The shutdown follows the acknowledged signal: it races the end.
            1 => {
                let _ = signal.is_finished();
                while !signal.is_finished() {
                    tokio::task::yield_now().await;
                }
            }
            _ => {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
            }
        }
        within(LIMIT, "the shutdown", host.shutdown()).await??;
        let sent = within(LIMIT, "the signal", signal).await??;
        assert!(
            matches!(sent, Ok(()) | Err(Error::Shutdown)),
            "iteration {iter}: {sent:?}"
        );
        for c in callers {
            let r = within(LIMIT, "a result caller", c).await??;
            match r {
                Ok(v) => {
                    assert_eq!(v, iter + 1);
                    *tally.entry("ok").or_insert(0) += 1;
                }
                Err(Error::Shutdown) => *tally.entry("shutdown").or_insert(0) += 1,
                other => panic!("iteration {iter}: a caller got {other:?}"),
            }
        }
        let host = open().await?;
        let run = host.handle::<Once>(&id);
        if sent.is_err() {
            // Not acknowledged: it may or may not have landed; send again (same id).
            run.signal("v", &iter, "v").await.or_else(|e| match e {
                Error::RunFinished(_) => Ok(()),
                e => Err(e),
            })?;
        }
        assert_eq!(within(LIMIT, "the result", run.result()).await??, iter + 1);
        let ends = run
            .events()
            .await?
            .iter()
            .filter(|e| e.is_terminal())
            .count();
        assert_eq!(ends, 1, "iteration {iter}");
        host.shutdown().await?;
    }
    eprintln!("result callers: {tally:?}");
    Ok(())
}

/// Body runs per (run, step id).
static STEP_RUNS: Mutex<BTreeMap<(String, String), u32>> = Mutex::new(BTreeMap::new());

/// Loops: a signal, a step, a zero sleep; ends after `n` signals with the values
/// the steps returned.
struct Progress;

impl Workflow for Progress {
    const NAME: &'static str = "progress";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<u32>> {
        let me = ctx.run_id().to_owned();
        let mut out = Vec::new();
        for i in 0..n {
            let v: u32 = ctx.wait_for_signal("tick").await?;
            // The step's id: `apply`, then `apply#2`, `apply#3`, ...
            let step_id = if i == 0 {
                "apply".to_owned()
            } else {
                format!("apply#{}", i + 1)
            };
            let key = (me.clone(), step_id);
            let w = ctx
                .step("apply", |_| {
                    let key = key.clone();
                    async move {
                        *STEP_RUNS
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(key)
                            .or_insert(0) += 1;
                        Ok::<_, String>(v * 2)
                    }
                })
                .await?;
            ctx.sleep(Duration::ZERO).await?;
            out.push(w);
        }
        Ok(out)
    }
}

/// A host opened, signalled and shut down at once, twenty times over, with runs
/// mid-flight: every acknowledged signal is taken once, in order, and every step
/// whose result was recorded before a shutdown does not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_in_a_loop_while_runs_progress() -> anyhow::Result<()> {
    const RUNS: u32 = 6;
    const ROUNDS: u32 = 20;
    let dir = tempfile::tempdir()?;
    let open = || common::hosts::open_passivating(dir.path(), Progress, Duration::from_millis(1));
    let mut recorded_before: BTreeSet<(String, String)> = BTreeSet::new();
    for round in 0..ROUNDS {
        let host = open().await?;
        for r in 0..RUNS {
            let id = format!("p{r}");
            let run = if round == 0 {
                host.start::<Progress>(&id, ROUNDS).await?
            } else {
                host.handle::<Progress>(&id)
            };
            run.signal("tick", &round, &format!("t{round}")).await?;
        }
        if round % 2 == 0 {
            tokio::task::yield_now().await;
        }
        within(LIMIT, "the shutdown", host.shutdown()).await??;
        // What is recorded now must never run again.
        let host = open().await?;
        for r in 0..RUNS {
            let id = format!("p{r}");
            for e in host.handle::<Progress>(&id).events().await? {
                if let Event::StepCompleted { id: step, .. } = e {
                    recorded_before.insert((id.clone(), step));
                }
            }
        }
        // Snapshot the body counts of those steps.
        let counts: BTreeMap<(String, String), u32> =
            STEP_RUNS.lock().unwrap_or_else(|p| p.into_inner()).clone();
        host.shutdown().await?;
        for key in &recorded_before {
            let n = counts.get(key).copied().unwrap_or(0);
            assert!(
                n >= 1,
                "round {round}: {key:?} recorded without its body having run"
            );
        }
    }
    let frozen: BTreeMap<(String, String), u32> =
        STEP_RUNS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let host = open().await?;
    for r in 0..RUNS {
        let id = format!("p{r}");
        let run = host.handle::<Progress>(&id);
        let out = within(LIMIT, "a result", run.result()).await??;
        assert_eq!(out, (0..ROUNDS).map(|v| v * 2).collect::<Vec<_>>(), "{id}");
    }
    let after = STEP_RUNS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for key in &recorded_before {
        assert_eq!(
            frozen.get(key),
            after.get(key),
            "{key:?}: recorded, then its body ran again"
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// Runs that have panicked already.
static PANICKED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Takes `n` signals; panics (outside any step) the first time it has taken the
/// third one.
struct Panicky;

impl Workflow for Panicky {
    const NAME: &'static str = "panicky";
    type Input = u32;
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<String>> {
        let me = ctx.run_id().to_owned();
        let mut got = Vec::new();
        for _ in 0..n {
            got.push(ctx.wait_for_signal::<String>("s").await?);
            if got.len() == 3
                && PANICKED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(me.clone())
            {
                panic!("panicky handler");
            }
        }
        Ok(got)
    }
}

/// Signals keep arriving while the handler panics and the supervisor restarts
/// it: every signal is acknowledged and taken once, in order. Three runs at a
/// time: a restarted actor may read the log while the write of the execution
/// that panicked is still queued, and then its own appends must not land after
/// that write as if it were theirs (the store fences a writer once it refused
/// one of its appends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_arriving_across_a_supervisor_restart_are_taken_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Panicky)
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    let lanes: Vec<_> = (0..3)
        .map(|lane| tokio::spawn(panicky_runs(host.clone(), lane)))
        .collect();
    for lane in lanes {
        lane.await??;
    }
    host.shutdown().await?;
    Ok(())
}

/// Fifteen `Panicky` runs one after the other, each sent its twelve signals.
async fn panicky_runs(host: Host, lane: u32) -> anyhow::Result<()> {
    for iter in 0..15 {
        let run = host
            .start::<Panicky>(&format!("x{lane}-{iter}"), 12)
            .await?;
        let sender = {
            let run = run.clone();
            tokio::spawn(async move {
                for k in 0..12 {
                    run.signal("s", &format!("{k}"), &format!("{k}")).await?;
                }
                Ok::<(), Error>(())
            })
        };
        within(LIMIT, "the sender", sender).await???;
        let got = match within(LIMIT, "the result", run.result()).await? {
            Ok(got) => got,
            Err(e) => {
                // The log, to tell how it went wrong.
                for (i, ev) in run.events().await?.iter().enumerate() {
                    eprintln!("{i}: {ev:?}");
                }
                return Err(e.into());
            }
        };
        assert_eq!(
            got,
            (0..12).map(|k| k.to_string()).collect::<Vec<_>>(),
            "lane {lane}, iteration {iter}"
        );
    }
    Ok(())
}

static FIXED: AtomicBool = AtomicBool::new(false);

/// Takes one signal, then panics until fixed; then takes three more.
struct Broken;

impl Workflow for Broken {
    const NAME: &'static str = "broken";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let mut got = vec![ctx.wait_for_signal::<u32>("n").await?];
        if !FIXED.load(Ordering::SeqCst) {
            panic!("broken handler");
        }
        for _ in 0..3 {
            got.push(ctx.wait_for_signal::<u32>("n").await?);
        }
        Ok(got)
    }
}

/// A run parked by a crash loop still takes signals (buffered in its log), gives
/// its typed error to `result()` callers, and a retry racing more signals resumes
/// it with every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_buffers_signals_and_a_retry_resumes_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Broken)
        .restart_limit(1, Duration::from_secs(60))
        .build()
        .await?;
    let run = host.start::<Broken>("broken", ()).await?;
    run.signal("n", &0u32, "n0").await?;
    let parked = within(LIMIT, "the park", run.result()).await?;
    assert!(matches!(parked, Err(Error::Crashed(_))), "{parked:?}");
    assert_eq!(run.status().await?.kind(), StatusKind::Parked);
    // Signals to a parked run are kept.
    run.signal("n", &1u32, "n1").await?;
    assert_eq!(run.status().await?.kind(), StatusKind::Parked);
    FIXED.store(true, Ordering::SeqCst);
    let more = {
        let run = run.clone();
        tokio::spawn(async move {
            run.signal("n", &2u32, "n2").await?;
            run.signal("n", &3u32, "n3").await
        })
    };
    run.retry().await?;
    within(LIMIT, "the signals", more).await???;
    let got = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(got, vec![0, 1, 2, 3]);
    assert_eq!(run.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}
