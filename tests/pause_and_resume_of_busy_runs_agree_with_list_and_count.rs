//! Pause and resume racing runs that never stop moving (a step, then a 1 ms
//! sleep, for ever), as an operator pausing a fleet does (Temporal's batch
//! suspend, DBOS's cancel/resume): every pause answers Ok; once answered, the run
//! starts no new step; `status`, `list(status = paused)` and `count` agree that
//! every run is paused; the timers that come due meanwhile are recorded and the
//! runs go on from them after resume; terminate then ends every run cancelled,
//! and the counts follow.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::within;
use futures::future::try_join_all;
use reel::{Ctx, Event, Host, RunFilter, RunStatus, StatusKind, Workflow};

const RUNS: usize = 24;
const LIMIT: Duration = Duration::from_secs(30);

/// Loops for ever: a step, then a short sleep.
struct Churn;
impl Workflow for Churn {
    const NAME: &'static str = "churn";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        loop {
            ctx.step("tick", |_| async { Ok::<_, String>(()) }).await?;
            ctx.sleep(Duration::from_millis(1)).await?;
        }
    }
}

fn ids() -> Vec<String> {
    (0..RUNS).map(|i| format!("c{i:02}")).collect()
}

async fn started_steps(host: &Host, id: &str) -> anyhow::Result<usize> {
    Ok(host
        .run(id)
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::StepStarted { .. }))
        .count())
}

async fn poll<F, Fut>(what: &str, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + LIMIT;
    while !f().await? {
        anyhow::ensure!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_fleet_reads_paused_everywhere_and_goes_on_after_resume() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Churn)
        .build()
        .await?;
    for id in ids() {
        host.start::<Churn>(&id, ()).await?;
    }
    // Let every run get going.
    for id in ids() {
        let h = host.clone();
        poll("a first step", || {
            let (h, id) = (h.clone(), id.clone());
            async move { Ok(started_steps(&h, &id).await? >= 2) }
        })
        .await?;
    }

    within(
        LIMIT,
        "pauses",
        try_join_all(ids().into_iter().map(|id| {
            let host = host.clone();
            async move { host.run(&id).pause().await }
        })),
    )
    .await??;
    let mut at_pause: HashMap<String, usize> = HashMap::new();
    for id in ids() {
        assert!(
            matches!(host.run(&id).status().await?, RunStatus::Paused),
            "{id}: {:?}",
            host.run(&id).status().await?
        );
        at_pause.insert(id.clone(), started_steps(&host, &id).await?);
    }
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Paused], RUNS as u64, "{counts:?}");
    let listed = host
        .list(RunFilter::default().status([StatusKind::Paused]).limit(100))
        .await?;
    assert_eq!(listed.items.len(), RUNS);

    // Time passes for the paused runs: each one's pending 1 ms timer comes due
    // and is recorded (a step under way at the pause finished first).
    for id in ids() {
        let h = host.clone();
        poll("the pending timer to be recorded", || {
            let (h, id) = (h.clone(), id.clone());
            async move {
                let events = h.run(&id).events().await?;
                let last_timer = events
                    .iter()
                    .rposition(|e| matches!(e, Event::TimerScheduled { .. }));
                let fired = events
                    .iter()
                    .rposition(|e| matches!(e, Event::TimerFired { .. }));
                Ok(matches!((last_timer, fired), (Some(s), Some(f)) if f > s))
            }
        })
        .await?;
    }
    for id in ids() {
        let now = started_steps(&host, &id).await?;
        // At most the step that was under way when the pause was asked (its
        // StepStarted may land just after the pause was recorded).
        assert!(
            now <= at_pause[&id] + 1,
            "{id} started {} steps while paused",
            now - at_pause[&id]
        );
        assert!(matches!(host.run(&id).status().await?, RunStatus::Paused));
    }
    let paused_steps: HashMap<String, usize> = {
        let mut m = HashMap::new();
        for id in ids() {
            m.insert(id.clone(), started_steps(&host, &id).await?);
        }
        m
    };

    for id in ids() {
        host.run(&id).resume().await?;
    }
    for id in ids() {
        let h = host.clone();
        let base = paused_steps[&id];
        poll("progress after resume", || {
            let (h, id) = (h.clone(), id.clone());
            async move { Ok(started_steps(&h, &id).await? >= base + 2) }
        })
        .await?;
    }
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Paused], 0, "{counts:?}");

    for id in ids() {
        host.run(&id).terminate("done").await?;
    }
    for id in ids() {
        let h = host.clone();
        poll("cancelled", || {
            let (h, id) = (h.clone(), id.clone());
            async move { Ok(h.run(&id).status().await? == RunStatus::Cancelled) }
        })
        .await?;
    }
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Cancelled], RUNS as u64, "{counts:?}");
    assert_eq!(counts.values().sum::<u64>(), RUNS as u64, "{counts:?}");
    host.shutdown().await?;
    Ok(())
}
