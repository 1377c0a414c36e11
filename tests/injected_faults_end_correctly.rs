//! Runs over `FaultStore`: appends that fail before landing, appends that land but
//! whose answer is lost, failing reads, slow and reordered answers, a store that is
//! down for a while. Every run ends with the right result or parked with the injected
//! cause, never with a wrong result; no acknowledged append is lost; and a host opened
//! afterwards without faults finishes every parked run with the right result.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::retry;
use reel::{Ctx, Error, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const GO: u64 = 1_000;

/// Steps, a durable timer, a signal, a step: every kind of append.
struct Pipeline;
impl Workflow for Pipeline {
    const NAME: &'static str = "pipeline";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<u64> {
        let a = ctx
            .step("a", |_| async move { Ok::<_, String>(n + 1) })
            .await?;
        let b = ctx
            .step("b", |_| async move { Ok::<_, String>(a * 3) })
            .await?;
        ctx.sleep(Duration::from_millis(5)).await?;
        let go: u64 = ctx.wait_for_signal("go").await?;
        ctx.step("c", |_| async move { Ok::<_, String>(b + go) })
            .await
    }
}

fn expected(n: u64) -> u64 {
    (n + 1) * 3 + GO
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("run-{i}")).collect()
}

async fn host_over(store: Arc<dyn reel::Store>) -> reel::Result<Host> {
    Host::builder()
        .store(store)
        .register(Pipeline)
        .restart_limit(3, Duration::from_secs(30))
        .build()
        .await
}

/// Starts, signals and awaits every run; returns how many ended parked.
async fn drive(host: &Host, runs: &[String]) -> anyhow::Result<usize> {
    for (i, id) in runs.iter().enumerate() {
        retry(50, || host.start::<Pipeline>(id, i as u64)).await?;
    }
    for id in runs {
        let h = host.handle::<Pipeline>(id);
        // Same signal id on every try: delivered once whatever the faults did.
        retry(50, || async {
            match h.signal("go", &GO, "go-1").await {
                Err(Error::RunFinished(_)) => Ok(()),
                other => other,
            }
        })
        .await?;
    }
    let mut parked = 0;
    for (i, id) in runs.iter().enumerate() {
        if ended_parked(host, id, expected(i as u64)).await? {
            parked += 1;
        }
    }
    Ok(parked)
}

/// Waits for the run's end: `false` for the right result, `true` for parked with the
/// injected cause, an error for anything else (a wrong result, another ending, a run
/// that does not end).
async fn ended_parked(host: &Host, id: &str, expected: u64) -> anyhow::Result<bool> {
    let h = host.handle::<Pipeline>(id);
    for _ in 0..20 {
        let Ok(result) = tokio::time::timeout(Duration::from_secs(60), h.result()).await else {
            anyhow::bail!(
                "{id} is stuck: {:?}: {:?}",
                h.status().await,
                h.events().await
            );
        };
        let e = match result {
            Ok(v) if v == expected => return Ok(false),
            Ok(v) => anyhow::bail!("{id}: wrong result {v}, expected {expected}"),
            Err(e) => e,
        };
        match retry(50, || h.status()).await? {
            RunStatus::Parked { error } if error.contains("injected fault") => return Ok(true),
            // Reading the result failed (a fault hit this read), not the run: again.
            RunStatus::Completed | RunStatus::Running | RunStatus::Suspended { .. }
                if e.to_string().contains("injected fault") => {}
            status => anyhow::bail!("{id}: ended with {e} / {status:?}, not parked with the cause"),
        }
    }
    anyhow::bail!("{id}: reading its result keeps failing")
}

/// Runs `runs` over a FaultStore set up by `inject`, checks the outcome, then reopens
/// the directory without faults and checks that every run completes correctly.
async fn scenario(
    runs: usize,
    inject: impl FnOnce(&FaultStore, &[String]),
) -> anyhow::Result<(u64, usize)> {
    let dir = tempfile::tempdir()?;
    let ids = ids(runs);
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    inject(&faults, &ids);
    let host = host_over(faults.clone()).await?;
    let parked = drive(&host, &ids).await?;
    host.shutdown().await?;
    let injected = faults.injected();
    recheck(dir.path(), &ids, &faults).await?;
    Ok((injected, parked))
}

/// Reopened without faults: no acknowledged append is missing, and every run (parked
/// ones are retried) ends with its right result.
async fn recheck(dir: &Path, ids: &[String], faults: &FaultStore) -> anyhow::Result<()> {
    let store = FjallStore::open(dir)?;
    let checked = faults
        .check_acknowledged_in(&*store)
        .map_err(|e| anyhow::anyhow!(e))?;
    anyhow::ensure!(checked > 0, "no append was acknowledged");
    let host = host_over(store).await?;
    let parked = drive(&host, ids).await?;
    anyhow::ensure!(parked == 0, "{parked} runs still parked without faults");
    host.shutdown().await?;
    Ok(())
}

/// Appends per run: RunStarted, StepStarted/Completed a and b, TimerScheduled, a
/// suspension, TimerFired, SignalAwaited, SignalReceived, StepStarted/Completed c,
/// RunCompleted, plus metadata-only writes.
const APPENDS_PER_RUN: usize = 14;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_append_fails_once_before_landing() -> anyhow::Result<()> {
    let (injected, _) = scenario(APPENDS_PER_RUN, |f, ids| {
        for (i, id) in ids.iter().enumerate() {
            f.inject(Fault::fail(Op::Submit).for_run(id).after(i as u64));
        }
    })
    .await?;
    assert!(injected >= APPENDS_PER_RUN as u64 / 2, "{injected}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_append_lands_but_its_answer_is_lost_once() -> anyhow::Result<()> {
    let (injected, _) = scenario(APPENDS_PER_RUN, |f, ids| {
        for (i, id) in ids.iter().enumerate() {
            f.inject(Fault::lose_answer().for_run(id).after(i as u64));
        }
    })
    .await?;
    assert!(injected >= APPENDS_PER_RUN as u64 / 2, "{injected}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_fail_once() -> anyhow::Result<()> {
    let ops = [Op::ReadLog, Op::GetRun, Op::LastEvent, Op::NextSeq];
    let (injected, _) = scenario(8, |f, ids| {
        for (i, id) in ids.iter().enumerate() {
            f.inject(
                Fault::fail(ops[i % ops.len()])
                    .for_run(id)
                    .after(i as u64 / 4),
            );
        }
    })
    .await?;
    assert!(injected > 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_reordered_answers() -> anyhow::Result<()> {
    let (injected, parked) = scenario(24, |f, ids| {
        f.reorder_answers(4, Duration::from_millis(2));
        f.inject(Fault::delay(Op::Submit, Duration::from_millis(3)).until_healed());
        for id in ids.iter().step_by(3) {
            f.inject(
                Fault::delay(Op::ReadLog, Duration::from_millis(5))
                    .for_run(id)
                    .until_healed(),
            );
        }
    })
    .await?;
    assert!(injected > 24, "{injected}");
    // Nothing failed: nothing may end parked.
    assert_eq!(parked, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_refuses_writes_for_a_while() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ids = ids(6);
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = host_over(faults.clone()).await?;
    for (i, id) in ids.iter().enumerate() {
        host.start::<Pipeline>(id, i as u64)
            .await?
            .wait_until_suspended()
            .await?;
    }
    // Down: every append fails, with the message a full disk gives.
    faults.inject(
        Fault::fail(Op::Submit)
            .until_healed()
            .message("injected fault: No space left on device"),
    );
    for id in &ids {
        let refused = host.handle::<Pipeline>(id).signal("go", &GO, "go-1").await;
        assert!(refused.is_err(), "{id}: {refused:?}");
    }
    faults.heal();
    let parked = drive(&host, &ids).await?;
    host.shutdown().await?;
    assert!(faults.injected() >= ids.len() as u64);
    assert!(parked <= ids.len());
    recheck(dir.path(), &ids, &faults).await
}
