//! Metrics stay consistent with the runs: `reel_runs_started_total` counts every
//! run created (a start, a child, a signal-with-start, a fork: the table in
//! `reel_storage::metrics` says so) and `reel_runs_ended_total{status}` every end
//! (a queued run cancelled, a paused run terminated), so that started minus ended
//! is the number of unfinished runs, as `host.count()` says (a fork used not to be
//! counted as started). One test: the recorder is global to the process.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::within;
use common::workflows::Waiter;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use reel::{Ctx, Host, QueueOptions, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Calls a `Waiter` child and returns its value.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.child::<Waiter>("kid", ()).await
    }
}

fn counters(snapshotter: &metrics_util::debugging::Snapshotter) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if let DebugValue::Counter(n) = value {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            out.insert(format!("{}{labels:?}", key.key().name()), n);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_and_ended_counters_match_the_runs() -> anyhow::Result<()> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;

    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Waiter)
        .register(Parent)
        .queue("one", QueueOptions::default().concurrency(1))
        .build()
        .await?;

    // 1: a plain start, completed.
    let a = host.start::<Waiter>("a", ()).await?;
    a.signal("go", &1u32, "g").await?;
    within(LIMIT, "a", a.result()).await??;
    // 2, 3: a parent and its child, completed.
    let p = host.start::<Parent>("p", ()).await?;
    within(LIMIT, "p", p.wait_until_suspended()).await??;
    let kid = host.handle::<Waiter>("kid");
    within(LIMIT, "kid", kid.wait_until_suspended()).await??;
    kid.signal("go", &2u32, "g").await?;
    within(LIMIT, "p", p.result()).await??;
    // 4: signal-with-start, completed.
    host.signal_with_start::<Waiter, _>("s", (), "go", &3u32, "g")
        .await?;
    within(LIMIT, "s", host.handle::<Waiter>("s").result()).await??;
    // 5: a fork of `a` right after its start (before its signal), completed.
    let records = a.records().await?;
    let cut = records.first().map_or(1, |r| r.seq + 1);
    let fork = host.fork("a", cut, "a-fork").await?;
    within(LIMIT, "the fork", fork.wait_until_suspended()).await??;
    fork.signal("go", &4u32, "g2").await?;
    within(LIMIT, "the fork", fork.result::<u32>()).await??;
    // 6, 7: a queued run holding the slot, and one cancelled while enqueued.
    let holder = host.start_on::<Waiter>("one", "holder", ()).await?;
    within(LIMIT, "holder", holder.wait_until_suspended()).await??;
    let queued = host.start_on::<Waiter>("one", "queued", ()).await?;
    assert_eq!(queued.status().await?, RunStatus::Enqueued);
    within(LIMIT, "cancel", queued.cancel("no")).await??;
    // 8: paused, then terminated.
    let paused = host.start::<Waiter>("paused", ()).await?;
    within(LIMIT, "paused", paused.wait_until_suspended()).await??;
    paused.pause().await?;
    within(LIMIT, "terminate", paused.terminate("no")).await??;

    let counts = host.count().await?;
    let runs: u64 = counts.values().sum();
    let unfinished = common::counts::unfinished(&counts);
    assert_eq!((runs, unfinished), (8, 1), "{counts:?}");

    let c = counters(&snapshotter);
    let get = |name: &str| c.get(name).copied().unwrap_or(0);
    let ended = get("reel_runs_ended_total[\"status=completed\"]")
        + get("reel_runs_ended_total[\"status=failed\"]")
        + get("reel_runs_ended_total[\"status=cancelled\"]");
    assert_eq!(
        get("reel_runs_ended_total[\"status=cancelled\"]"),
        2,
        "{c:?}"
    );
    assert_eq!(ended, 7, "{c:?}");
    assert_eq!(
        get("reel_runs_started_total[]"),
        runs,
        "every run created is counted as started (forks included): {c:?}"
    );
    host.shutdown().await?;
    Ok(())
}
