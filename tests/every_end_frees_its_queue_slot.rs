//! A queue's slot is held from admission until the run ends, whatever way it
//! ends (completes, fails, is cancelled gracefully or hard, is parked then
//! cancelled), and across continue-as-new (one slot, still held); the next
//! enqueued run is admitted exactly then. Also: operations refused on an enqueued
//! run change nothing.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, QueueOptions, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// What a queued run does once admitted.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug)]
enum Plan {
    /// Waits for `go`, returns it.
    Wait,
    /// Fails at once.
    Fail,
    /// Panics outside a step (parks).
    Crash,
    /// Continues as new once, then waits.
    Continue,
}

#[derive(Clone, Default)]
struct Job {
    entered: Arc<AtomicU32>,
}
impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = Plan;
    type Output = u32;
    async fn run(&self, ctx: Ctx, plan: Plan) -> reel::Result<u32> {
        ctx.step("enter", |_| async {
            self.entered.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        })
        .await?;
        match plan {
            Plan::Wait => ctx.wait_for_signal("go").await,
            Plan::Fail => Err(Error::failed("planned failure")),
            Plan::Crash => panic!("handler bug"),
            Plan::Continue => ctx.continue_as_new::<Job>(Plan::Wait).await,
        }
    }
}

async fn admitted(host: &Host, id: &str) -> anyhow::Result<()> {
    let run = host.run(id);
    within(LIMIT, &format!("{id} to be admitted"), async {
        loop {
            match run.status().await? {
                RunStatus::Enqueued => {}
                RunStatus::Running => {}
                _ => return anyhow::Ok(()),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_end_frees_the_slot_and_continue_as_new_keeps_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let job = Job::default();
    let host = Host::builder()
        .path(dir.path())
        .register(job.clone())
        .restart_limit(0, Duration::from_secs(3600))
        .queue("q", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    // In queue order: each is admitted only when the one before it has ended.
    let plans = [
        ("a-wait", Plan::Wait),
        ("b-fail", Plan::Fail),
        ("c-cancel", Plan::Wait),
        ("d-terminate", Plan::Wait),
        ("e-crash", Plan::Crash),
        ("f-continue", Plan::Continue),
        ("g-last", Plan::Wait),
    ];
    for (id, plan) in plans {
        host.start_on::<Job>("q", id, plan).await?;
    }
    let enqueued = |host: Host, ids: &'static [&'static str]| async move {
        for id in ids {
            assert_eq!(
                host.run(id).status().await?,
                RunStatus::Enqueued,
                "{id} was admitted too early"
            );
        }
        anyhow::Ok(())
    };

    admitted(&host, "a-wait").await?;
    enqueued(host.clone(), &["b-fail", "g-last"]).await?;
    host.run("a-wait").signal("go", &1u32, "g").await?;
    within(LIMIT, "a", host.handle::<Job>("a-wait").result()).await??;

    admitted(&host, "b-fail").await?;
    assert!(matches!(
        within(LIMIT, "b", host.handle::<Job>("b-fail").result()).await?,
        Err(Error::Failed(_))
    ));

    admitted(&host, "c-cancel").await?;
    enqueued(host.clone(), &["d-terminate"]).await?;
    host.run("c-cancel").cancel("graceful").await?;

    admitted(&host, "d-terminate").await?;
    enqueued(host.clone(), &["e-crash"]).await?;
    host.run("d-terminate").terminate("hard").await?;

    admitted(&host, "e-crash").await?;
    assert!(matches!(
        host.run("e-crash").status().await?,
        RunStatus::Parked { .. }
    ));
    // A parked run keeps its slot until it ends.
    enqueued(host.clone(), &["f-continue"]).await?;
    host.run("e-crash").cancel("give up").await?;

    // The continued run keeps its one slot while its second segment waits.
    admitted(&host, "f-continue").await?;
    let f = host.handle::<Job>("f-continue");
    within(LIMIT, "the second segment", async {
        loop {
            if f.info().await?.segment >= 1
                && matches!(f.status().await?, RunStatus::Suspended { .. })
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    enqueued(host.clone(), &["g-last"]).await?;
    f.signal("go", &6u32, "g").await?;
    assert_eq!(within(LIMIT, "f", f.result()).await??, 6);

    admitted(&host, "g-last").await?;
    host.run("g-last").signal("go", &7u32, "g").await?;
    assert_eq!(
        within(LIMIT, "g", host.handle::<Job>("g-last").result()).await??,
        7
    );
    // a, b, c, d, e, f (twice: two segments), g.
    assert_eq!(job.entered.load(Ordering::SeqCst), 8);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_operations_on_an_enqueued_run_change_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let job = Job::default();
    let host = common::hosts::open_queued(dir.path(), job.clone(), "q", 1).await?;
    host.start_on::<Job>("q", "first", Plan::Wait).await?;
    admitted(&host, "first").await?;
    let queued = host.start_on::<Job>("q", "queued", Plan::Wait).await?;
    let before = queued.events().await?;
    for (r, action) in [
        (queued.retry().await, "retry"),
        (queued.resume().await, "resume"),
        (queued.delete().await, "delete"),
    ] {
        match r {
            Err(Error::InvalidState {
                state, action: a, ..
            }) => {
                assert_eq!((state, a.as_str()), (StatusKind::Enqueued, action));
            }
            other => panic!("{action} of an enqueued run: {other:?}"),
        }
    }
    // A pause of an enqueued run is either refused or holds the run paused
    // once admitted; either way nothing runs until it is resumed.
    let paused = queued.pause().await;
    assert_eq!(queued.status().await?, RunStatus::Enqueued);
    assert_eq!(queued.events().await?, before);
    host.run("first").signal("go", &1u32, "g").await?;
    within(LIMIT, "first", host.handle::<Job>("first").result()).await??;
    match paused {
        Ok(()) => {
            within(LIMIT, "the paused admission", async {
                loop {
                    if queued.status().await? != RunStatus::Enqueued {
                        return anyhow::Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await??;
            assert_eq!(queued.status().await?, RunStatus::Paused);
            assert_eq!(job.entered.load(Ordering::SeqCst), 1);
            queued.resume().await?;
        }
        Err(Error::InvalidState { state, .. }) => assert_eq!(state, StatusKind::Enqueued),
        Err(e) => panic!("pause of an enqueued run: {e}"),
    }
    admitted(&host, "queued").await?;
    queued.signal("go", &2u32, "g").await?;
    assert_eq!(within(LIMIT, "queued", queued.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}
