//! Pause racing a busy run: once `pause()` has returned `Ok`, the run executes
//! nothing new (at most the step body already under way finishes) and stays
//! paused until resumed.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

static ACKED: AtomicBool = AtomicBool::new(false);
static AFTER_ACK: AtomicU32 = AtomicU32::new(0);

/// Runs many quick steps; each body notes whether the test had its pause
/// acknowledged when the body began.
struct Busy;

impl Workflow for Busy {
    const NAME: &'static str = "busy";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let mut sum = 0;
        for i in 0..n {
            sum += ctx
                .step("s", |_| async move {
                    if ACKED.load(Ordering::SeqCst) {
                        AFTER_ACK.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok::<_, String>(i)
                })
                .await?;
        }
        Ok(sum)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_new_runs_after_a_pause_is_acknowledged() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Busy).await?;
    let mut ended_while_paused = Vec::new();
    for iter in 0..30u32 {
        ACKED.store(false, Ordering::SeqCst);
        AFTER_ACK.store(0, Ordering::SeqCst);
        let n = 5 + iter % 7;
        let run = host.start::<Busy>(&format!("b{iter}"), n).await?;
        match run.pause().await {
            Ok(()) => {}
            Err(Error::InvalidState { .. }) => continue,
            Err(e) => anyhow::bail!("pause: {e:?}"),
        }
        ACKED.store(true, Ordering::SeqCst);
        // Give a wrongly running execution the chance to go on: a few status reads.
        let mut statuses = Vec::new();
        for _ in 0..20 {
            statuses.push(run.status().await?);
            tokio::task::yield_now().await;
        }
        let late = AFTER_ACK.load(Ordering::SeqCst);
        assert!(
            late <= 1,
            "iteration {iter}: {late} step bodies began after the pause"
        );
        if statuses.iter().any(|s| *s != RunStatus::Paused) {
            ended_while_paused.push((iter, statuses.last().cloned()));
            continue;
        }
        ACKED.store(false, Ordering::SeqCst);
        run.resume().await?;
        let expected: u32 = (0..n).sum();
        assert_eq!(within(LIMIT, "the result", run.result()).await??, expected);
    }
    assert!(
        ended_while_paused.is_empty(),
        "runs whose pause() returned Ok left the paused state without a resume: {ended_while_paused:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Waits for one signal, then returns it.
struct OneShot;

impl Workflow for OneShot {
    const NAME: &'static str = "one-shot";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal::<u32>("v").await
    }
}

/// A pause racing the signal that lets the handler return: either the pause is
/// refused (the run has ended) or, once it returned `Ok`, the run stays paused
/// until resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_acknowledged_as_the_handler_returns_keeps_the_run_paused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), OneShot).await?;
    let mut bad = Vec::new();
    let mut acked = 0;
    for iter in 0..150u32 {
        let run = host.start::<OneShot>(&format!("o{iter}"), ()).await?;
        run.wait_until_suspended().await?;
        let sender = {
            let run = run.clone();
            tokio::spawn(async move { run.signal("v", &iter, "v").await })
        };
        if iter % 2 == 0 {
            tokio::task::yield_now().await;
        }
        let paused = run.pause().await;
        within(LIMIT, "the signal", sender).await???;
        match paused {
            Err(Error::InvalidState { .. }) => {
                assert_eq!(within(LIMIT, "the result", run.result()).await??, iter);
                continue;
            }
            Err(e) => anyhow::bail!("pause: {e:?}"),
            Ok(()) => acked += 1,
        }
        let status = run.status().await?;
        if status != RunStatus::Paused {
            bad.push((iter, status));
            continue;
        }
        run.resume().await?;
        assert_eq!(within(LIMIT, "the result", run.result()).await??, iter);
    }
    assert!(
        bad.is_empty(),
        "{} of {acked} acknowledged pauses did not hold: {bad:?}",
        bad.len()
    );
    host.shutdown().await?;
    Ok(())
}
