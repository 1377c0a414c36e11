//! Queues (`HostBuilder::queue`, `Host::start_on`): a run started on a queue is
//! recorded enqueued and runs only once admitted. Admission keeps the queue's
//! concurrency (also across a restart: admitted runs count first), its rate limit
//! (on the host's clock), priorities before start order, and de-duplication keys
//! (also across a restart).
//! An enqueued run can be signalled, cancelled and listed; bad settings and
//! unknown queues are typed errors that store nothing.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use common::workflows::Tick;
use reel::testing::TestClock;
use reel::{
    Ctx, Error, Event, Host, QueueOptions, RunFilter, RunStatus, StartOptions, StatusKind, Workflow,
};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(60);

/// Enters (reports its run id), waits for `go`, leaves. `in_flight` counts runs
/// between entering and leaving; `max` the most seen at once.
#[derive(Clone)]
struct Job {
    entered: mpsc::UnboundedSender<String>,
    in_flight: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let id = ctx.run_id().to_owned();
        ctx.step("enter", |_| async {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(now, Ordering::SeqCst);
            let _ = self.entered.send(id.clone());
            Ok::<_, String>(())
        })
        .await?;
        let note: String = ctx.wait_for_signal("go").await?;
        ctx.step("leave", |_| async {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, String>(())
        })
        .await?;
        Ok(note)
    }
}

fn job() -> (Job, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let job = Job {
        entered: tx,
        in_flight: Arc::default(),
        max: Arc::default(),
    };
    (job, rx)
}

/// A host running `job`, with a queue `q` of `concurrency`.
async fn open(dir: &std::path::Path, job: &Job, concurrency: usize) -> reel::Result<Host> {
    common::hosts::open_queued(dir, job.clone(), "q", concurrency).await
}

async fn next(rx: &mut mpsc::UnboundedReceiver<String>) -> anyhow::Result<String> {
    within(LIMIT, "a run to enter", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("channel closed"))
}

async fn go(host: &Host, id: &str) -> anyhow::Result<()> {
    host.run(id).signal("go", &id.to_owned(), "go").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_runs_never_more_than_three_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 3).await?;
    let ids: Vec<String> = (0..1000).map(|i| format!("job-{i:04}")).collect();
    for id in &ids {
        host.start_on::<Job>("q", id, ()).await?;
    }
    let mut done = 0;
    let mut first_round = true;
    while done < ids.len() {
        // Three enter (fewer at the tail) and wait for `go`: no fourth can enter.
        let batch = 3.min(ids.len() - done);
        let mut round = Vec::new();
        for _ in 0..batch {
            round.push(next(&mut entered).await?);
        }
        // Admitted in start order: this round is the next `batch` runs started
        // (admitted runs run side by side, so they may enter in any order).
        let mut admitted = round.clone();
        admitted.sort();
        assert_eq!(admitted, ids[done..done + batch], "round from run {done}");
        if first_round {
            let counts = host.count().await?;
            assert_eq!(counts[&StatusKind::Enqueued], 997);
            let waiting = host
                .list(RunFilter::default().status([StatusKind::Enqueued]).limit(5))
                .await?;
            assert_eq!(waiting.items.len(), 5);
            let last = ids.last().expect("ids");
            assert_eq!(host.run(last).status().await?, RunStatus::Enqueued);
            first_round = false;
        }
        assert!(job.in_flight.load(Ordering::SeqCst) <= 3);
        for id in &round {
            go(&host, id).await?;
        }
        for id in &round {
            within(LIMIT, "a result", host.handle::<Job>(id).result()).await??;
        }
        done += batch;
    }
    assert_eq!(job.max.load(Ordering::SeqCst), 3);
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Completed], 1000);
    assert_eq!(counts[&StatusKind::Enqueued], 0);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_first_then_start_order_and_limits_survive_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 1).await?;
    host.start_on::<Job>("q", "blocker", ()).await?;
    assert_eq!(next(&mut entered).await?, "blocker");
    let low = StartOptions::default().queue("q").priority(5);
    let high = StartOptions::default().queue("q").priority(1);
    host.start_with::<Job>("low-1", (), low.clone()).await?;
    host.start_with::<Job>("high-1", (), high.clone()).await?;
    host.start_with::<Job>("low-2", (), low).await?;
    host.start_with::<Job>("high-2", (), high).await?;
    // A signal to an enqueued run waits in its log.
    host.run("low-2")
        .signal("go", &"early".to_owned(), "early")
        .await?;
    assert_eq!(host.run("low-2").status().await?, RunStatus::Enqueued);
    host.shutdown().await?;

    // The blocker was admitted: it holds the only slot after the restart too.
    let (job, mut entered) = self::job();
    let host = open(dir.path(), &job, 1).await?;
    assert_eq!(host.run("high-1").status().await?, RunStatus::Enqueued);
    let mut order = Vec::new();
    let mut current = "blocker".to_owned();
    for _ in 0..4 {
        if current != "low-2" {
            go(&host, &current).await?;
        }
        current = next(&mut entered).await?;
        order.push(current.clone());
    }
    assert_eq!(order, ["high-1", "high-2", "low-1", "low-2"]);
    let note = within(LIMIT, "low-2", host.handle::<Job>("low-2").result()).await??;
    assert_eq!(note, "early");
    assert_eq!(job.max.load(Ordering::SeqCst), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_keys_cancels_and_bad_input() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 1).await?;
    let keyed = |k: &str| StartOptions::default().queue("q").dedup_key(k);
    host.start_with::<Job>("a", (), keyed("invoice-7")).await?;
    assert_eq!(next(&mut entered).await?, "a");
    match host.start_with::<Job>("b", (), keyed("invoice-7")).await {
        Err(Error::Deduplicated { queue, key, run_id }) => {
            assert_eq!(
                (queue.as_str(), key.as_str(), run_id.as_str()),
                ("q", "invoice-7", "a")
            );
        }
        other => panic!("expected Deduplicated, got {other:?}"),
    }
    assert!(matches!(
        host.run("b").status().await,
        Err(Error::UnknownRun(_))
    ));
    // Starting the holder again is idempotent.
    host.start_with::<Job>("a", (), keyed("invoice-7")).await?;

    // A cancelled enqueued run ends without running and takes no slot.
    host.start_on::<Job>("q", "doomed", ()).await?;
    host.start_on::<Job>("q", "after", ()).await?;
    host.run("doomed").cancel("not needed").await?;
    assert_eq!(host.run("doomed").status().await?, RunStatus::Cancelled);
    assert!(matches!(
        host.handle::<Job>("doomed").result().await,
        Err(Error::Cancelled(_))
    ));
    go(&host, "a").await?;
    host.handle::<Job>("a").result().await?;
    assert_eq!(next(&mut entered).await?, "after");
    let events = host.run("doomed").events().await?;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepStarted { .. } | Event::StepCompleted { .. })),
        "{events:?}"
    );
    // Its key is free once `a` ended.
    host.start_with::<Job>("b", (), keyed("invoice-7")).await?;

    // Unknown queue: typed, nothing stored.
    match host.start_on::<Job>("nope", "x", ()).await {
        Err(Error::UnknownQueue(q)) => assert_eq!(q, "nope"),
        other => panic!("expected UnknownQueue, got {other:?}"),
    }
    assert!(matches!(
        host.run("x").status().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;

    for bad in [
        QueueOptions::default().concurrency(0),
        QueueOptions::default().rate_limit(0, Duration::from_secs(1)),
        QueueOptions::default().rate_limit(5, Duration::ZERO),
    ] {
        let dir = tempfile::tempdir()?;
        let built = Host::builder()
            .path(dir.path())
            .register(job.clone())
            .queue("q", bad)
            .build()
            .await;
        match built {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("queue `q`"), "{why}"),
            other => panic!("expected InvalidArgument for {bad:?}, got {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_keys_hold_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 1).await?;
    let keyed = |k: &str| StartOptions::default().queue("q").dedup_key(k);
    // `a` is admitted and holds `k1`; `b` waits behind it and holds `k2`.
    host.start_with::<Job>("a", (), keyed("k1")).await?;
    assert_eq!(next(&mut entered).await?, "a");
    host.start_with::<Job>("b", (), keyed("k2")).await?;
    assert_eq!(host.run("b").status().await?, RunStatus::Enqueued);
    host.shutdown().await?;

    let (job, mut entered) = self::job();
    let host = open(dir.path(), &job, 1).await?;
    for (id, key, holder) in [("c", "k1", "a"), ("d", "k2", "b")] {
        match host.start_with::<Job>(id, (), keyed(key)).await {
            Err(Error::Deduplicated {
                queue,
                key: k,
                run_id,
            }) => {
                assert_eq!(
                    (queue.as_str(), k.as_str(), run_id.as_str()),
                    ("q", key, holder)
                );
            }
            other => panic!("{id}: expected Deduplicated by {holder}, got {other:?}"),
        }
        assert!(matches!(
            host.run(id).status().await,
            Err(Error::UnknownRun(_))
        ));
    }
    // Once `a` ends its key is free; `b`'s is held until `b` ends.
    go(&host, "a").await?;
    within(LIMIT, "a", host.handle::<Job>("a").result()).await??;
    assert_eq!(next(&mut entered).await?, "b");
    host.start_with::<Job>("c", (), keyed("k1")).await?;
    assert!(matches!(
        host.start_with::<Job>("d", (), keyed("k2")).await,
        Err(Error::Deduplicated { .. })
    ));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_is_kept_on_the_test_clock() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let minute = Duration::from_secs(60);
    let clock = TestClock::new(t0);
    let host = common::hosts::open_rate_limited(dir.path(), &clock, Tick, "partner-api", 2, minute)
        .await?;
    let ids: Vec<String> = (0..5).map(|i| format!("tick-{i}")).collect();
    for id in &ids {
        host.start_on::<Tick>("partner-api", id, ()).await?;
    }
    let result = |i: usize| result_of(&host, &ids[i]);
    assert_eq!(within(LIMIT, "tick-0", result(0)).await??, t0);
    assert_eq!(within(LIMIT, "tick-1", result(1)).await??, t0);
    for id in &ids[2..] {
        assert_eq!(host.run(id).status().await?, RunStatus::Enqueued);
    }
    clock.advance(minute);
    assert_eq!(within(LIMIT, "tick-2", result(2)).await??, t0 + minute);
    assert_eq!(within(LIMIT, "tick-3", result(3)).await??, t0 + minute);
    assert_eq!(host.run(&ids[4]).status().await?, RunStatus::Enqueued);
    clock.advance(minute);
    assert_eq!(within(LIMIT, "tick-4", result(4)).await??, t0 + 2 * minute);
    host.shutdown().await?;

    // The auto-skipping clock moves to the next window by itself.
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0);
    let host = common::hosts::open_rate_limited(dir.path(), &clock, Tick, "partner-api", 2, minute)
        .await?;
    for id in &ids {
        host.start_on::<Tick>("partner-api", id, ()).await?;
    }
    let started = within(LIMIT, "tick-4", result_of(&host, &ids[4])).await??;
    assert_eq!(started, t0 + 2 * minute);
    host.shutdown().await?;
    Ok(())
}

async fn result_of(host: &Host, id: &str) -> reel::Result<SystemTime> {
    host.handle::<Tick>(id).result().await
}
