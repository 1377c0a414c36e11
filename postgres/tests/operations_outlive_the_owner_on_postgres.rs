//! More operations through non-owners: cancel returns once the run ended, with
//! its cleanup; a pause outlives the owner's shutdown; retry of a parked run;
//! signals to finished or unknown runs; a `result()` waiting across an owner change.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};
use support::hosts::{owned_by, result_of, shutdown_all, spread, suspended, until_status};

static PANIC: AtomicBool = AtomicBool::new(true);

/// Mode 0: waits for `go`, with a shielded cleanup step on cancel.
/// Mode 1: panics outside any step while `PANIC` is set, then waits for `go`.
#[derive(Clone)]
struct Job {
    host: String,
}
impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<String> {
        if mode == 1 && PANIC.load(Ordering::SeqCst) {
            panic!("crash outside a step");
        }
        let go = ctx.wait_for_signal::<String>("go").await;
        let h = self.host.clone();
        match go {
            Ok(go) => Ok(format!("{go}@{h}")),
            Err(Error::Cancelled(r)) => {
                ctx.shielded()
                    .step("cleanup", move |_| {
                        let h = h.clone();
                        async move { Ok::<_, String>(h) }
                    })
                    .await?;
                Err(Error::Cancelled(r))
            }
            Err(e) => Err(e),
        }
    }
}

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .restart_limit(1, Duration::from_secs(30))
        .register(Job {
            host: name.to_owned(),
        })
        .build()
        .await?)
}

/// `cancel` through a non-owner returns once the run has ended: right after,
/// that host reads it cancelled and its cleanup step recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_through_a_non_owner_returns_once_ended() -> anyhow::Result<()> {
    let url = support::database("hunt_e_cancel_wait").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let ids = owned_by(&owners, 1, "cw", 3);
    for id in &ids {
        hosts[0].start::<Job>(id, 0).await?;
    }
    for id in &ids {
        until_status(&hosts[0], id, "waited", suspended).await;
        tokio::time::timeout(Duration::from_secs(15), hosts[0].run(id).cancel("stop"))
            .await
            .map_err(|_| anyhow::anyhow!("cancel did not return"))??;
        let status = hosts[0].run(id).status().await?;
        assert_eq!(
            status,
            RunStatus::Cancelled,
            "{id} right after cancel returned"
        );
        let events = hosts[0].run(id).events().await?;
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::StepCompleted { id, .. } if id == "cleanup")),
            "{id}: {events:?}"
        );
    }
    shutdown_all(hosts).await
}

/// Paused through host-0, its owner host-1 shuts down: the run stays paused on
/// host-0 (now its owner), a signal meanwhile moves nothing, resume goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_outlives_the_owners_shutdown() -> anyhow::Result<()> {
    let url = support::database("hunt_e_pause_move").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let id = &owned_by(&owners, 1, "pm", 1)[0];
    hosts[0].start::<Job>(id, 0).await?;
    until_status(&hosts[0], id, "waited", suspended).await;
    hosts[0].run(id).pause().await?;
    until_status(&hosts[0], id, "paused", |s| matches!(s, RunStatus::Paused)).await;
    let [h0, h1] = hosts;
    h1.shutdown().await?;
    h0.handle::<Job>(id).signal("go", "g", "g").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h0.run(id).status().await?, RunStatus::Paused);
    h0.run(id).resume().await?;
    let out = result_of::<Job>(&h0, id).await??;
    assert_eq!(out, "g@host-0");
    h0.shutdown().await?;
    Ok(())
}

/// A run parked by a crash loop on host-1 is retried through host-0 once the
/// cause is gone: it runs again on its owner and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_of_a_parked_run_through_a_non_owner() -> anyhow::Result<()> {
    let url = support::database("hunt_e_retry").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let id = &owned_by(&owners, 1, "rt", 1)[0];
    hosts[0].start::<Job>(id, 1).await?;
    until_status(&hosts[0], id, "parked", |s| {
        matches!(s, RunStatus::Parked { .. })
    })
    .await;
    PANIC.store(false, Ordering::SeqCst);
    hosts[0].run(id).retry().await?;
    until_status(&hosts[0], id, "waited", suspended).await;
    hosts[0].handle::<Job>(id).signal("go", "r", "r").await?;
    let out = result_of::<Job>(&hosts[0], id).await??;
    assert_eq!(out, "r@host-1");
    shutdown_all(hosts).await
}

/// A signal through a non-owner to a run already finished (as that host reads
/// it), or to no run at all, is an error at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_through_a_non_owner_to_a_finished_or_unknown_run_fails() -> anyhow::Result<()> {
    let url = support::database("hunt_e_sig_finished").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let id = &owned_by(&owners, 1, "sf", 1)[0];
    hosts[0].start::<Job>(id, 0).await?;
    until_status(&hosts[0], id, "waited", suspended).await;
    hosts[0].handle::<Job>(id).signal("go", "a", "a").await?;
    until_status(&hosts[0], id, "completed", |s| {
        matches!(s, RunStatus::Completed)
    })
    .await;
    let late = hosts[0].handle::<Job>(id).signal("go", "b", "b").await;
    assert!(matches!(late, Err(Error::RunFinished(_))), "{late:?}");
    let ghost = &owned_by(&owners, 1, "ghost", 1)[0];
    let none = hosts[0].handle::<Job>(ghost).signal("go", "b", "b").await;
    assert!(matches!(none, Err(Error::UnknownRun(_))), "{none:?}");
    let none = hosts[0].run(ghost).cancel("x").await;
    assert!(matches!(none, Err(Error::UnknownRun(_))), "{none:?}");
    let none = hosts[0].run(ghost).pause().await;
    assert!(matches!(none, Err(Error::UnknownRun(_))), "{none:?}");
    shutdown_all(hosts).await
}

/// `result()` waiting on host-0 while the run's owner host-1 shuts down and
/// host-2 takes over: it returns the output the new owner produced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_waits_across_an_owner_change() -> anyhow::Result<()> {
    let url = support::database("hunt_e_result_move").await;
    let (hosts, owners) = spread::<3>(&url, 80, host).await?;
    let id = &owned_by(&owners, 1, "rm", 1)[0];
    hosts[0].start::<Job>(id, 0).await?;
    until_status(&hosts[0], id, "waited", suspended).await;
    let [h0, h1, h2] = hosts;
    let waiter = {
        let h = h0.handle::<Job>(id);
        tokio::spawn(async move { h.result().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    h1.shutdown().await?;
    // host-0 or host-2 now owns it; wait until someone does.
    support::spread_leases(&url, "host-", 2, 100).await;
    h2.handle::<Job>(id).signal("go", "m", "m").await?;
    let out = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .map_err(|_| anyhow::anyhow!("result() never returned"))???;
    assert!(out == "m@host-0" || out == "m@host-2", "{out}");
    h0.shutdown().await?;
    h2.shutdown().await?;
    Ok(())
}
