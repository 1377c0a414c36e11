//! Queues across three hosts joined to one database (`PgStore::join`): the
//! store admits, so a queue's concurrency holds across all hosts (runs started
//! round-robin on three hosts never run more than the limit at once, and all
//! complete); a de-duplication key held by a run started on one host refuses a
//! start on another until its run ends; a rate limit counts admissions on every
//! host (a shared test clock moves the window); and the slots of a host that
//! shuts down stay with its admitted runs, which its successors finish, while
//! slots left by runs that ended without giving them back are reclaimed.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use reel::testing::TestClock;
use reel::{Ctx, Error, Host, QueueOptions, RunStatus, StartOptions, Workflow};
use support::hosts::{owned_by, shutdown_all, spread};

const LIMIT: Duration = Duration::from_secs(90);

/// Runs between entering and leaving its step, and the most seen at once.
#[derive(Clone, Default)]
struct Gauge {
    in_flight: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
    entered: Arc<AtomicUsize>,
}

/// Enters, optionally waits for the signal `go`, works a little, leaves.
#[derive(Clone)]
struct Job {
    gauge: Gauge,
}

impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = bool;
    type Output = u32;
    async fn run(&self, ctx: Ctx, wait: bool) -> reel::Result<u32> {
        let gauge = self.gauge.clone();
        ctx.step("enter", |_| {
            let gauge = gauge.clone();
            async move {
                let now = gauge.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                gauge.max.fetch_max(now, Ordering::SeqCst);
                gauge.entered.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            }
        })
        .await?;
        if wait {
            let _: u32 = ctx.wait_for_signal("go").await?;
        }
        let gauge = self.gauge.clone();
        ctx.step("leave", |_| {
            let gauge = gauge.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                gauge.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, String>(())
            }
        })
        .await?;
        Ok(1)
    }
}

async fn host(
    url: &str,
    name: &str,
    gauge: &Gauge,
    queue: QueueOptions,
    clock: Option<&TestClock>,
) -> anyhow::Result<Host> {
    let store = support::join(url, name).await?;
    let mut builder = Host::builder()
        .store(store)
        .register(Job {
            gauge: gauge.clone(),
        })
        .queue("q", queue);
    if let Some(clock) = clock {
        builder = builder.clock(clock.clone());
    }
    Ok(builder.build().await?)
}

async fn three(
    url: &str,
    gauge: &Gauge,
    queue: QueueOptions,
    clock: Option<&TestClock>,
) -> anyhow::Result<(Vec<Host>, Vec<usize>)> {
    // Partitions settle first, so no step is cut short by a lease moving.
    let (hosts, owners) = spread::<3>(url, 60, async |url, name| {
        host(url, name, gauge, queue, clock).await
    })
    .await?;
    Ok((hosts.into(), owners))
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_holds_across_hosts() -> anyhow::Result<()> {
    let url = support::database("queue_concurrency").await;
    let gauge = Gauge::default();
    let (hosts, _) = three(&url, &gauge, QueueOptions::default().concurrency(3), None).await?;
    const RUNS: usize = 60;
    for n in 0..RUNS {
        hosts[n % 3]
            .start_on::<Job>("q", &format!("c-{n}"), false)
            .await?;
    }
    for n in 0..RUNS {
        let h = hosts[(n + 1) % 3].handle::<Job>(&format!("c-{n}"));
        tokio::time::timeout(LIMIT, h.result()).await??;
    }
    assert_eq!(gauge.entered.load(Ordering::SeqCst), RUNS);
    let max = gauge.max.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} runs of a queue of 3 ran at once");
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_key_holds_across_hosts() -> anyhow::Result<()> {
    let url = support::database("queue_dedup").await;
    let gauge = Gauge::default();
    let (hosts, owners) = three(&url, &gauge, QueueOptions::default(), None).await?;
    let opts = || StartOptions::default().queue("q").dedup_key("invoice-7");
    // The holder is owned by host 2, started on host 0; host 1 is refused.
    let holder = owned_by(&owners, 2, "d", 1).remove(0);
    let h = hosts[0].start_with::<Job>(&holder, true, opts()).await?;
    match hosts[1].start_with::<Job>("d-other", true, opts()).await {
        Err(Error::Deduplicated { run_id, key, .. }) => {
            assert_eq!(
                (run_id.as_str(), key.as_str()),
                (holder.as_str(), "invoice-7")
            );
        }
        other => panic!(
            "a held key on another host: {:?}",
            other.map(|h| h.id().to_owned())
        ),
    }
    // The holder itself may be started again anywhere: the same run.
    hosts[2].start_with::<Job>(&holder, true, opts()).await?;
    assert!(matches!(
        hosts[2].handle::<Job>("d-other").status().await,
        Err(Error::UnknownRun(_))
    ));
    h.signal("go", &1u32, "go-1").await?;
    tokio::time::timeout(LIMIT, h.result()).await??;
    // Free once its holder ended, on any host.
    let next = hosts[1].start_with::<Job>("d-next", false, opts()).await?;
    tokio::time::timeout(LIMIT, next.result()).await??;
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_holds_across_hosts() -> anyhow::Result<()> {
    let url = support::database("queue_rate").await;
    let gauge = Gauge::default();
    let clock = TestClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let queue = QueueOptions::default().rate_limit(2, Duration::from_secs(60));
    let (hosts, _) = three(&url, &gauge, queue, Some(&clock)).await?;
    for n in 0..6 {
        hosts[n % 3]
            .start_on::<Job>("q", &format!("r-{n}"), false)
            .await?;
    }
    let completed = || async {
        let mut done = 0;
        for n in 0..6 {
            let status = hosts[0].handle::<Job>(&format!("r-{n}")).status().await?;
            done += usize::from(status == RunStatus::Completed);
        }
        anyhow::Ok(done)
    };
    for window in 1..=3 {
        until("a window's admissions", || {
            gauge.entered.load(Ordering::SeqCst) >= 2 * window
        })
        .await;
        // Past an inbox poll of every host (each offers its waiting runs then),
        // still no more than the window allows.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(gauge.entered.load(Ordering::SeqCst), 2 * window);
        clock.advance(Duration::from_secs(60));
    }
    let deadline = Instant::now() + LIMIT;
    while completed().await? < 6 {
        assert!(Instant::now() < deadline, "not every run completed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_of_a_host_that_leaves_stay_with_its_runs() -> anyhow::Result<()> {
    let url = support::database("queue_host_leaves").await;
    let gauge = Gauge::default();
    let (mut hosts, owners) =
        three(&url, &gauge, QueueOptions::default().concurrency(2), None).await?;
    // Slots left by runs that ended without giving them back (a host killed
    // between the two writes): reclaimed by the next admission, or nothing
    // would ever be admitted.
    support::execute(
        &url,
        "INSERT INTO reel_queue_slots (run_id, queue, part) \
         VALUES ('ghost-1', 'q', 0), ('ghost-2', 'q', 0)",
    )
    .await;
    // Host 0 admits the first two (its own runs) and shuts down holding them.
    let first = owned_by(&owners, 0, "s", 2);
    for id in &first {
        hosts[1].start_on::<Job>("q", id, true).await?;
    }
    until("the first two runs to enter", || {
        gauge.entered.load(Ordering::SeqCst) == 2
    })
    .await;
    let mut rest = owned_by(&owners, 1, "t", 2);
    rest.extend(owned_by(&owners, 2, "u", 2));
    for id in &rest {
        hosts[2].start_on::<Job>("q", id, true).await?;
    }
    hosts.remove(0).shutdown().await?;
    // The successors' runs wait: the leaving host's runs keep their slots.
    for id in first.iter().chain(&rest) {
        hosts[0].handle::<Job>(id).signal("go", &1u32, "go").await?;
    }
    for id in first.iter().chain(&rest) {
        tokio::time::timeout(LIMIT, hosts[1].handle::<Job>(id).result()).await??;
    }
    assert_eq!(gauge.entered.load(Ordering::SeqCst), 6);
    let max = gauge.max.load(Ordering::SeqCst);
    assert!(max <= 2, "{max} runs of a queue of 2 ran at once");
    shutdown_all(hosts).await
}
