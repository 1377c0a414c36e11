//! Adversarial queue tests: sliding rate windows, cancelled/terminated/deleted
//! enqueued runs and their slots/keys, signal_with_start_with on a queue, limits
//! across reopen with changed settings, de-duplication across restarts.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use common::workflows::Tick;
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RunStatus, StartOptions, Workflow};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Enters (reports its run id), then collects `go` signals until one says "done";
/// returns them joined.
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
        let mut notes = Vec::new();
        loop {
            let note: String = ctx.wait_for_signal("go").await?;
            let last = note == "done";
            notes.push(note);
            if last {
                break;
            }
        }
        ctx.step("leave", |_| async {
            // Saturating: a run that entered before a restart leaves on a
            // fresh job, whose count starts at 0.
            let _ = self
                .in_flight
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    Some(n.saturating_sub(1))
                });
            Ok::<_, String>(())
        })
        .await?;
        Ok(notes.join(","))
    }
}

fn job() -> (Job, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Job {
            entered: tx,
            in_flight: Arc::default(),
            max: Arc::default(),
        },
        rx,
    )
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

/// Nothing more enters within a short settle time.
async fn none_enters(rx: &mut mpsc::UnboundedReceiver<String>) -> anyhow::Result<()> {
    match tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        Err(_) => Ok(()),
        Ok(got) => anyhow::bail!("unexpected admission: {got:?}"),
    }
}

async fn finish(host: &Host, id: &str) -> anyhow::Result<String> {
    host.run(id)
        .signal("go", "done", &format!("{id}-done"))
        .await?;
    Ok(within(LIMIT, "a result", host.handle::<Job>(id).result()).await??)
}

/// Finishes `first`, then each run that enters next, `n` times; returns the
/// runs in the order they entered (the last is left waiting).
async fn take_turns(
    host: &Host,
    entered: &mut mpsc::UnboundedReceiver<String>,
    first: &str,
    n: usize,
) -> anyhow::Result<Vec<String>> {
    let mut order = Vec::new();
    let mut current = first.to_owned();
    for _ in 0..n {
        finish(host, &current).await?;
        current = next(entered).await?;
        order.push(current.clone());
    }
    Ok(order)
}

/// Takes entering runs into `running` until two run or all `total` were
/// admitted; a run entering again (its body cut by a shutdown) counts once.
async fn fill(
    entered: &mut mpsc::UnboundedReceiver<String>,
    admitted: &mut Vec<String>,
    running: &mut Vec<String>,
    total: usize,
) -> anyhow::Result<()> {
    while running.len() < 2 && admitted.len() < total {
        let id = next(entered).await?;
        if !admitted.contains(&id) {
            admitted.push(id.clone());
            running.push(id);
        }
    }
    Ok(())
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// "At most `limit` admissions within any window of `period`": a sliding window,
/// so an admission half way through a period does not allow a burst at the next
/// period boundary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_window_slides() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let minute = Duration::from_secs(60);
    let clock = TestClock::new(t0());
    let host = common::hosts::open_rate_limited(dir.path(), &clock, Tick, "api", 2, minute).await?;
    let a = host.start_on::<Tick>("api", "a", ()).await?;
    assert_eq!(within(LIMIT, "a", a.result()).await??, t0());
    clock.advance(Duration::from_secs(30));
    let b = host.start_on::<Tick>("api", "b", ()).await?;
    let c = host.start_on::<Tick>("api", "c", ()).await?;
    let d = host.start_on::<Tick>("api", "d", ()).await?;
    assert_eq!(
        within(LIMIT, "b", b.result()).await??,
        t0() + Duration::from_secs(30)
    );
    clock.advance(Duration::from_secs(29)); // t0 + 59
    settle().await;
    assert_eq!(c.status().await?, RunStatus::Enqueued);
    clock.advance(Duration::from_secs(2)); // t0 + 61: `a` left the window
    assert_eq!(
        within(LIMIT, "c", c.result()).await??,
        t0() + Duration::from_secs(61)
    );
    settle().await;
    // b (t0+30) and c (t0+61) are both within the last minute.
    assert_eq!(
        d.status().await?,
        RunStatus::Enqueued,
        "burst at the boundary"
    );
    clock.advance(Duration::from_secs(28)); // t0 + 89
    settle().await;
    assert_eq!(d.status().await?, RunStatus::Enqueued);
    clock.advance(Duration::from_secs(2)); // t0 + 91
    assert_eq!(
        within(LIMIT, "d", d.result()).await??,
        t0() + Duration::from_secs(91)
    );
    host.shutdown().await?;
    Ok(())
}

/// A cancelled enqueued run was never admitted: it takes no room in the rate
/// window, and the run behind it is admitted as soon as the window has room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_enqueued_runs_take_no_room_in_the_rate_window() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let minute = Duration::from_secs(60);
    let clock = TestClock::new(t0());
    let host = common::hosts::open_rate_limited(dir.path(), &clock, Tick, "api", 1, minute).await?;
    let a = host.start_on::<Tick>("api", "a", ()).await?;
    let b = host.start_on::<Tick>("api", "b", ()).await?;
    let c = host.start_on::<Tick>("api", "c", ()).await?;
    let d = host.start_on::<Tick>("api", "d", ()).await?;
    assert_eq!(within(LIMIT, "a", a.result()).await??, t0());
    within(LIMIT, "cancel b", b.cancel("not needed")).await??;
    within(LIMIT, "terminate c", c.terminate("not needed")).await??;
    assert_eq!(b.status().await?, RunStatus::Cancelled);
    assert_eq!(c.status().await?, RunStatus::Cancelled);
    assert!(matches!(b.result().await, Err(Error::Cancelled(_))));
    clock.advance(minute);
    assert_eq!(within(LIMIT, "d", d.result()).await??, t0() + minute);
    // Neither cancelled run executed anything.
    for run in [&b, &c] {
        let events = run.events().await?;
        assert!(
            !events.iter().any(|e| matches!(e, Event::Recorded { .. })),
            "{events:?}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// A cancelled, terminated or deleted enqueued run frees its place and its
/// de-duplication key; an enqueued run cannot be deleted (not finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_enqueued_runs_frees_keys_and_places() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 1).await?;
    host.start_on::<Job>("q", "holder", ()).await?;
    assert_eq!(next(&mut entered).await?, "holder");
    let keyed = |k: &str, p: i32| StartOptions::default().queue("q").dedup_key(k).priority(p);
    let b = host.start_with::<Job>("b", (), keyed("kb", 0)).await?;
    let c = host.start_with::<Job>("c", (), keyed("kc", 0)).await?;
    host.start_with::<Job>("d", (), keyed("kd", 0)).await?;
    // Deleting an enqueued run is refused and changes nothing.
    assert!(
        matches!(b.delete().await, Err(Error::InvalidState { .. })),
        "delete of an enqueued run"
    );
    assert_eq!(b.status().await?, RunStatus::Enqueued);
    within(LIMIT, "cancel b", b.cancel("bye")).await??;
    within(LIMIT, "terminate c", c.terminate("bye")).await??;
    // Keys are free at once.
    host.start_with::<Job>("b2", (), keyed("kb", 5)).await?;
    host.start_with::<Job>("c2", (), keyed("kc", 5)).await?;
    assert!(matches!(
        host.start_with::<Job>("d2", (), keyed("kd", 5)).await,
        Err(Error::Deduplicated { .. })
    ));
    // A finished enqueued run can be deleted; its id can be used again.
    b.delete().await?;
    assert!(matches!(b.status().await, Err(Error::UnknownRun(_))));
    host.start_with::<Job>("b", (), keyed("kb-again", 9))
        .await?;
    host.shutdown().await?;

    // After a restart the freed keys stay free and the order is d, b2, c2, b.
    let (job, mut entered) = self::job();
    let host = open(dir.path(), &job, 1).await?;
    assert!(matches!(
        host.start_with::<Job>("x", (), keyed("kb", 0)).await,
        Err(Error::Deduplicated { .. })
    ));
    assert!(matches!(
        host.start_with::<Job>("x", (), keyed("kd", 0)).await,
        Err(Error::Deduplicated { .. })
    ));
    assert!(matches!(
        host.run("x").status().await,
        Err(Error::UnknownRun(_))
    ));
    let order = take_turns(&host, &mut entered, "holder", 4).await?;
    assert_eq!(order, ["d", "b2", "c2", "b"]);
    finish(&host, "b").await?;
    assert_eq!(job.max.load(Ordering::SeqCst), 1);
    // Every key is free once its run ended.
    host.start_with::<Job>("y", (), keyed("kd", 0)).await?;
    host.shutdown().await?;
    Ok(())
}

/// Priorities at the extremes of i32, negative ones first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_priorities_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 1).await?;
    host.start_on::<Job>("q", "holder", ()).await?;
    assert_eq!(next(&mut entered).await?, "holder");
    let prios = [
        ("p-max", i32::MAX),
        ("p-0a", 0),
        ("p-min", i32::MIN),
        ("p-neg1", -1),
        ("p-1", 1),
        ("p-0b", 0),
        ("p-min2", i32::MIN),
    ];
    for (id, p) in prios {
        host.start_with::<Job>(id, (), StartOptions::default().queue("q").priority(p))
            .await?;
    }
    // Starting an existing enqueued run again with another priority changes nothing.
    host.start_with::<Job>(
        "p-max",
        (),
        StartOptions::default().queue("q").priority(i32::MIN),
    )
    .await?;
    let order = take_turns(&host, &mut entered, "holder", prios.len()).await?;
    finish(&host, &order[prios.len() - 1]).await?;
    assert_eq!(
        order,
        ["p-min", "p-min2", "p-neg1", "p-0a", "p-0b", "p-1", "p-max"]
    );
    host.shutdown().await?;
    Ok(())
}

/// Admitted runs that wait hold their slots across a reopen, also when the new
/// host configures a lower concurrency: nothing more is admitted until the
/// admitted runs drop below the new limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_concurrency_after_reopen_counts_admitted_runs_first() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 3).await?;
    for i in 0..10 {
        host.start_on::<Job>("q", &format!("r{i}"), ()).await?;
    }
    let mut first = Vec::new();
    for _ in 0..3 {
        first.push(next(&mut entered).await?);
    }
    first.sort();
    assert_eq!(first, ["r0", "r1", "r2"]);
    host.shutdown().await?;

    let (job, mut entered) = self::job();
    let host = open(dir.path(), &job, 1).await?;
    none_enters(&mut entered).await?;
    assert_eq!(host.run("r3").status().await?, RunStatus::Enqueued);
    finish(&host, "r0").await?;
    finish(&host, "r1").await?;
    none_enters(&mut entered).await?;
    assert_eq!(host.run("r3").status().await?, RunStatus::Enqueued);
    finish(&host, "r2").await?;
    assert_eq!(next(&mut entered).await?, "r3");
    none_enters(&mut entered).await?;
    host.shutdown().await?;

    // And a higher one admits more at once.
    let (job, mut entered) = self::job();
    let host = open(dir.path(), &job, 4).await?;
    let mut more = Vec::new();
    for _ in 0..3 {
        more.push(next(&mut entered).await?);
    }
    more.sort();
    assert_eq!(more, ["r4", "r5", "r6"]);
    none_enters(&mut entered).await?;
    host.shutdown().await?;
    Ok(())
}

/// Many runs, concurrency 2, the host shut down and reopened after every few
/// admissions: the limit holds throughout and runs are admitted in start order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_and_order_hold_across_many_reopens() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ids: Vec<String> = (0..24).map(|i| format!("r{i:02}")).collect();
    let max_seen = Arc::new(AtomicUsize::new(0));
    let mut admitted: Vec<String> = Vec::new();
    let mut running: Vec<String> = Vec::new();
    let mut finished = 0;
    let mut round = 0;
    while finished < ids.len() {
        round += 1;
        let (job, mut entered) = self::job();
        // Runs admitted before the restart re-run nothing: `enter` is recorded.
        let host = open(dir.path(), &job, 2).await?;
        if round == 1 {
            for id in &ids {
                host.start_on::<Job>("q", id, ()).await?;
            }
        }
        // Fill the free slots (a body cut by the shutdown may enter again).
        fill(&mut entered, &mut admitted, &mut running, ids.len()).await?;
        for _ in 0..3 {
            if running.is_empty() {
                break;
            }
            // Signal the oldest one, partly, then fully.
            let id = running.remove(0);
            host.run(&id)
                .signal("go", "half", &format!("{id}-half"))
                .await?;
            finish(&host, &id).await?;
            finished += 1;
            fill(&mut entered, &mut admitted, &mut running, ids.len()).await?;
            let in_flight = host
                .runs()
                .await?
                .iter()
                .filter(|r| !matches!(r.status, RunStatus::Enqueued | RunStatus::Completed))
                .count();
            max_seen.fetch_max(in_flight, Ordering::SeqCst);
        }
        host.shutdown().await?;
        anyhow::ensure!(round < 40, "too many rounds");
    }
    // In start order, up to the two admitted together (their bodies enter in
    // either order): the k-th run enters no later than k + 1 others have.
    let mut sorted = admitted.clone();
    sorted.sort();
    assert_eq!(sorted, ids);
    for (pos, id) in admitted.iter().enumerate() {
        let k = ids.iter().position(|i| i == id).unwrap_or(usize::MAX);
        assert!(k <= pos + 1, "{id} entered {pos}th: {admitted:?}");
    }
    assert!(max_seen.load(Ordering::SeqCst) <= 2);
    Ok(())
}

/// signal_with_start_with on a queue: the new run waits enqueued with its
/// signal(s), is admitted by its priority, and a conflicting key creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_with_start_on_a_queue_keeps_priority_keys_and_signals() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (job, mut entered) = job();
    let host = open(dir.path(), &job, 1).await?;
    host.start_on::<Job>("q", "holder", ()).await?;
    assert_eq!(next(&mut entered).await?, "holder");
    host.start_with::<Job>(
        "plain",
        (),
        StartOptions::default().queue("q").dedup_key("k-plain"),
    )
    .await?;
    let urgent = StartOptions::default()
        .queue("q")
        .priority(-5)
        .dedup_key("k-urgent");
    let run = host
        .signal_with_start_with::<Job, _>("urgent", (), urgent.clone(), "go", "one", "s1")
        .await?;
    assert_eq!(run.status().await?, RunStatus::Enqueued);
    // Again on the existing enqueued run: signalled, not Deduplicated; the
    // duplicate signal id is dropped.
    host.signal_with_start_with::<Job, _>("urgent", (), urgent.clone(), "go", "two", "s2")
        .await?;
    host.signal_with_start_with::<Job, _>("urgent", (), urgent, "go", "one-again", "s1")
        .await?;
    // Another id with a held key: an error, and no run is created.
    let clash = StartOptions::default().queue("q").dedup_key("k-plain");
    assert!(matches!(
        host.signal_with_start_with::<Job, _>("clash", (), clash, "go", "x", "s1")
            .await,
        Err(Error::Deduplicated { .. })
    ));
    assert!(matches!(
        host.run("clash").status().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;

    let (job, mut entered) = self::job();
    let host = open(dir.path(), &job, 1).await?;
    finish(&host, "holder").await?;
    assert_eq!(next(&mut entered).await?, "urgent");
    assert_eq!(finish(&host, "urgent").await?, "one,two,done");
    assert_eq!(next(&mut entered).await?, "plain");
    finish(&host, "plain").await?;
    host.shutdown().await?;
    Ok(())
}

/// A run that continues as new keeps its slot and its key, across a restart.
#[derive(Clone)]
struct Hopper;

impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let _: String = ctx.wait_for_signal("hop").await?;
        if n >= 3 {
            return Ok(n);
        }
        ctx.continue_as_new::<Hopper>(n + 1).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continued_run_keeps_slot_and_key_across_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || common::hosts::open_queued(dir.path(), Hopper, "q", 1);
    let opts = |k: &str| StartOptions::default().queue("q").dedup_key(k);
    let host = open().await?;
    let h = host.start_with::<Hopper>("h", 0, opts("k")).await?;
    host.start_with::<Hopper>("other", 0, opts("k2")).await?;
    within(LIMIT, "h waits", h.wait_until_suspended()).await??;
    h.signal("hop", "1", "hop-1").await?;
    within(LIMIT, "h segment 1", async {
        loop {
            if h.info().await?.segment >= 1 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await??;
    host.shutdown().await?;

    let host = open().await?;
    assert!(matches!(
        host.start_with::<Hopper>("h2", 0, opts("k")).await,
        Err(Error::Deduplicated { .. })
    ));
    let h = host.handle::<Hopper>("h");
    let other = host.handle::<Hopper>("other");
    assert_eq!(other.status().await?, RunStatus::Enqueued);
    for i in 2..=4 {
        within(LIMIT, "h waits", h.wait_until_suspended()).await??;
        h.signal("hop", "x", &format!("hop-{i}")).await?;
    }
    assert_eq!(within(LIMIT, "h", h.result()).await??, 3);
    within(LIMIT, "other admitted", other.wait_until_suspended()).await??;
    host.start_with::<Hopper>("h3", 0, opts("k")).await?;
    host.shutdown().await?;
    Ok(())
}
