//! Acceptance: queue scenarios ported from DBOS's own queue suite
//! (dbos-inc/dbos-transact-py, `tests/test_queue.py`) onto reel's queues
//! (README "Queues"): de-duplication keys per queue, a crash-looping queued run
//! (DBOS's dead-letter queue), a cancel of the admitted run mid-step, timeouts of
//! enqueued runs across a restart, two queues that do not hold each other back,
//! a queued run whose version (or workflow) is no longer registered (ignored:
//! it takes the queue's slot and parks there), a paused admitted run
//! across a restart, and a repeated start of a finished queued run. Real stores
//! in temp dirs; time is a `TestClock` where it matters.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::status::until_status;
use common::workflows::Waiter;
use common::{Gate, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Host, QueueOptions, RunStatus, StartOptions, Workflow};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);

/// 2027-01-10T00:00:00Z.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_799_539_200_000)
}

/// How often each step body really ran, by `<run id>/<step>`.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, u32>>>);

impl Tally {
    fn bump(&self, key: &str) {
        *self
            .0
            .lock()
            .expect("tally")
            .entry(key.to_owned())
            .or_default() += 1;
    }
    fn get(&self, key: &str) -> u32 {
        self.0.lock().expect("tally").get(key).copied().unwrap_or(0)
    }
}

/// One counted step, then completes with its input.
#[derive(Clone, Default)]
struct Counted {
    tally: Tally,
}

impl Workflow for Counted {
    const NAME: &'static str = "counted";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let key = format!("{}/work", ctx.run_id());
        ctx.step("work", |_| async {
            self.tally.bump(&key);
            Ok::<_, String>(n)
        })
        .await
    }
}

/// Checks for a little while that `run` stays enqueued (a negative: nothing to
/// wait for).
async fn stays_enqueued(host: &Host, run: &str) -> anyhow::Result<()> {
    for _ in 0..50 {
        assert_eq!(
            host.run(run).status().await?,
            RunStatus::Enqueued,
            "{run} should still wait for the queue"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

async fn admitted(host: &Host, run: &str) -> anyhow::Result<()> {
    within(
        LIMIT,
        &format!("{run} admitted"),
        host.run(run).wait_until_suspended(),
    )
    .await??;
    Ok(())
}

async fn finish(host: &Host, run: &str) -> anyhow::Result<u32> {
    let r = host.run(run);
    r.signal("go", &7u32, &format!("go-{run}")).await?;
    Ok(within(LIMIT, &format!("{run} ends"), r.result::<u32>()).await??)
}

fn on(queue: &str) -> StartOptions {
    StartOptions::default().queue(queue)
}

/// Ports DBOS `tests/test_queue.py::test_queue_deduplication`: a de-duplication
/// key is held per queue while its run is enqueued or running. Another run with
/// the key on the same queue is refused naming the holder and is not created;
/// the same key on another queue, another key, and a start of the holder's own
/// id again (DBOS: "enqueued multiple times ... get the result of the first
/// one") are all accepted; once the holder ends, the key is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_keys_are_held_per_queue_and_freed_when_the_holder_ends() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path().join("store"))
        .register(Waiter)
        .queue("a", QueueOptions::default().concurrency(1))
        .queue("b", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    let keyed = |q: &str, k: &str| on(q).dedup_key(k);

    host.start_with::<Waiter>("r1", (), keyed("a", "k")).await?;
    admitted(&host, "r1").await?;

    match host.start_with::<Waiter>("r2", (), keyed("a", "k")).await {
        Err(Error::Deduplicated { queue, key, run_id }) => {
            assert_eq!(
                (queue.as_str(), key.as_str(), run_id.as_str()),
                ("a", "k", "r1")
            );
        }
        other => panic!("a second run with the key on its queue: {other:?}"),
    }
    assert!(
        matches!(host.run("r2").status().await, Err(Error::UnknownRun(_))),
        "a deduplicated start creates nothing"
    );

    // The same key on another queue is another key.
    host.start_with::<Waiter>("r3", (), keyed("b", "k")).await?;
    admitted(&host, "r3").await?;
    // Another key on the same queue waits for the slot.
    host.start_with::<Waiter>("r4", (), keyed("a", "other"))
        .await?;
    assert_eq!(host.run("r4").status().await?, RunStatus::Enqueued);
    // The holder started again with its own key is the same run, not a duplicate.
    let again = host.start_with::<Waiter>("r1", (), keyed("a", "k")).await;
    assert!(again.is_ok(), "a repeated start of the holder: {again:?}");

    assert_eq!(finish(&host, "r1").await?, 7);
    // The key is free: r2 is accepted now and queues behind r4 (start order).
    host.start_with::<Waiter>("r2", (), keyed("a", "k")).await?;
    admitted(&host, "r4").await?;
    stays_enqueued(&host, "r2").await?;
    finish(&host, "r4").await?;
    admitted(&host, "r2").await?;
    // r2 holds the key now.
    assert!(matches!(
        host.start_with::<Waiter>("r5", (), keyed("a", "k")).await,
        Err(Error::Deduplicated { run_id, .. }) if run_id == "r2"
    ));
    finish(&host, "r2").await?;
    finish(&host, "r3").await?;
    host.shutdown().await?;
    Ok(())
}

/// Records its entry in a step, then panics outside any step until `fixed`.
#[derive(Clone, Default)]
struct Crashy {
    tally: Tally,
    fixed: Arc<AtomicBool>,
}

impl Workflow for Crashy {
    const NAME: &'static str = "crashy";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let key = format!("{}/enter", ctx.run_id());
        ctx.step("enter", |_| async {
            self.tally.bump(&key);
            Ok::<_, String>(())
        })
        .await?;
        if !self.fixed.load(Ordering::SeqCst) {
            panic!("handler bug (deliberate)");
        }
        Ok(n + 1)
    }
}

/// Ports DBOS `tests/test_queue.py::test_dlq_enqueued_workflows`: enqueuing the
/// blocked run's id again and again changes nothing; a queued run whose handler
/// keeps crashing is parked (DBOS's `MAX_RECOVERY_ATTEMPTS_EXCEEDED`) instead of
/// looping, and, as reel's README says, keeps its slot while parked, so the
/// regular run behind it stays enqueued; `retry()` after the fix completes it
/// without running its recorded step again, and the regular run then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_queued_run_parks_holds_its_slot_and_retries_after_a_fix()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let crashy = Crashy::default();
    let counted = Counted::default();
    let host = Host::builder()
        .path(dir.path().join("store"))
        .register(crashy.clone())
        .register(counted.clone())
        .restart_limit(2, Duration::from_secs(60))
        .queue("q", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    host.start_on::<Crashy>("q", "blocked", 1).await?;
    host.start_on::<Counted>("q", "regular", 5).await?;
    for _ in 0..5 {
        host.start_on::<Crashy>("q", "blocked", 1).await?;
    }
    let parked = until_status(&host.run("blocked"), "blocked parked", |s| {
        matches!(s, RunStatus::Parked { .. })
    })
    .await?;
    let RunStatus::Parked { error } = parked else {
        unreachable!()
    };
    assert!(error.contains("crashed"), "{error}");
    assert!(matches!(
        host.run("blocked").result::<u32>().await,
        Err(Error::Crashed(_))
    ));
    stays_enqueued(&host, "regular").await?;
    assert_eq!(crashy.tally.get("blocked/enter"), 1);

    crashy.fixed.store(true, Ordering::SeqCst);
    host.run("blocked").retry().await?;
    let out = within(LIMIT, "blocked ends", host.run("blocked").result::<u32>()).await??;
    assert_eq!(out, 2);
    assert_eq!(
        crashy.tally.get("blocked/enter"),
        1,
        "the recorded step ran again"
    );
    let out = within(LIMIT, "regular ends", host.run("regular").result::<u32>()).await??;
    assert_eq!(out, 5);
    assert_eq!(counted.tally.get("regular/work"), 1);
    host.shutdown().await?;
    Ok(())
}

/// Step `one` tells the test it runs and waits for a gate; step `two` follows.
#[derive(Clone)]
struct Gated {
    tally: Tally,
    entered: mpsc::UnboundedSender<String>,
    gate: Arc<Gate>,
}

impl Workflow for Gated {
    const NAME: &'static str = "gated";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let run = ctx.run_id().to_owned();
        ctx.step("one", |_| async {
            self.tally.bump(&format!("{run}/one"));
            let _ = self.entered.send(run.clone());
            self.gate.wait().await;
            Ok::<_, String>(())
        })
        .await?;
        ctx.step("two", |_| async {
            self.tally.bump(&format!("{run}/two"));
            Ok::<_, String>(n)
        })
        .await
    }
}

/// Ports DBOS `tests/test_queue.py::test_cancelling_queued_workflows`: on a
/// concurrency-1 queue, the admitted run is cancelled while its step body runs;
/// the regular run behind it is admitted and completes; the cancelled run stays
/// `Cancelled` (its result the cancel) also once its gate opens, and its next
/// step never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_admitted_run_mid_step_admits_the_next() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let gated = Gated {
        tally: Tally::default(),
        entered: tx,
        gate: Arc::new(Gate::new()),
    };
    let counted = Counted::default();
    let host = Host::builder()
        .path(dir.path().join("store"))
        .register(gated.clone())
        .register(counted.clone())
        .queue("q", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    host.start_on::<Gated>("q", "stuck", 1).await?;
    host.start_on::<Counted>("q", "regular", 3).await?;
    let entered = within(LIMIT, "stuck's step body", rx.recv()).await?;
    assert_eq!(entered.as_deref(), Some("stuck"));
    assert!(matches!(
        host.run("stuck").status().await?,
        RunStatus::Running | RunStatus::Suspended { .. }
    ));
    stays_enqueued(&host, "regular").await?;

    within(LIMIT, "cancel", host.run("stuck").cancel("operator")).await??;
    assert_eq!(host.run("stuck").status().await?, RunStatus::Cancelled);
    let out = within(LIMIT, "regular ends", host.run("regular").result::<u32>()).await??;
    assert_eq!(out, 3);

    gated.gate.open();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(host.run("stuck").status().await?, RunStatus::Cancelled);
    match host.run("stuck").result::<u32>().await {
        Err(Error::Cancelled(reason)) => assert!(reason.contains("operator"), "{reason}"),
        other => panic!("a cancelled run's result: {other:?}"),
    }
    assert_eq!(gated.tally.get("stuck/one"), 1);
    assert_eq!(gated.tally.get("stuck/two"), 0);
    host.shutdown().await?;
    Ok(())
}

fn queued_host(path: &std::path::Path, clock: &TestClock, counted: &Counted) -> reel::HostBuilder {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(Waiter)
        .register(counted.clone())
        .queue("q", QueueOptions::default().concurrency(1))
}

/// Ports DBOS `tests/test_queue.py::test_timeout_queue` and
/// `::test_timeout_queue_recovery`: runs enqueued with short timeouts behind a
/// blocking run are cancelled (`deadline exceeded`) while still waiting, without
/// running anything, also when the deadline passed while no host ran; the
/// deadline is counted from the start and kept across the restart (not begun
/// again); a run with a generous timeout is admitted once the blocker ends and
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueued_runs_time_out_from_their_start_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let counted = Counted::default();
    let host = queued_host(&path, &clock, &counted).build().await?;
    host.start_on::<Waiter>("q", "blocker", ()).await?;
    admitted(&host, "blocker").await?;
    for id in ["t1", "t2", "t3"] {
        host.start_with::<Counted>(id, 1, on("q").timeout(HOUR))
            .await?;
    }
    host.start_with::<Counted>("t4", 4, on("q").timeout(3 * HOUR))
        .await?;
    host.start_with::<Counted>("late", 9, on("q").timeout(10 * HOUR))
        .await?;
    for id in ["t1", "t2", "t3", "t4", "late"] {
        assert_eq!(host.run(id).status().await?, RunStatus::Enqueued, "{id}");
    }
    host.shutdown().await?;

    clock.advance(2 * HOUR);
    let host = queued_host(&path, &clock, &counted).build().await?;
    for id in ["t1", "t2", "t3"] {
        until_status(&host.run(id), &format!("{id} cancelled"), |s| {
            *s == RunStatus::Cancelled
        })
        .await?;
        match host.run(id).result::<u32>().await {
            Err(Error::Cancelled(reason)) => {
                assert!(reason.contains("deadline exceeded"), "{id}: {reason}")
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    stays_enqueued(&host, "t4").await?;
    // Two hours after the reopen, four after t4's start: its 3 h are up.
    clock.advance(2 * HOUR);
    until_status(&host.run("t4"), "t4 cancelled", |s| {
        *s == RunStatus::Cancelled
    })
    .await?;
    stays_enqueued(&host, "late").await?;

    assert_eq!(finish(&host, "blocker").await?, 7);
    let out = within(LIMIT, "late ends", host.run("late").result::<u32>()).await??;
    assert_eq!(out, 9);
    for id in ["t1", "t2", "t3", "t4"] {
        assert_eq!(counted.tally.get(&format!("{id}/work")), 0, "{id} ran");
    }
    assert_eq!(counted.tally.get("late/work"), 1);
    host.shutdown().await?;
    Ok(())
}

/// Ports DBOS `tests/test_queue.py::test_multiple_queues`: a concurrency-1 queue
/// held by a blocked run does not hold back a rate-limited queue, which admits
/// its fifteen runs in three waves of five, one per window of the host's clock;
/// meanwhile the second run of the blocked queue never starts, and it runs once
/// the first ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_queue_does_not_hold_back_a_rate_limited_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let counted = Counted::default();
    let minute = Duration::from_secs(60);
    let host = Host::builder()
        .path(dir.path().join("store"))
        .clock(clock.clone())
        .register(Waiter)
        .register(counted.clone())
        .queue("one", QueueOptions::default().concurrency(1))
        .queue("limited", QueueOptions::default().rate_limit(5, minute))
        .build()
        .await?;
    host.start_on::<Waiter>("one", "w1", ()).await?;
    admitted(&host, "w1").await?;
    host.start_on::<Counted>("one", "w2", 2).await?;
    let ids: Vec<String> = (0..15).map(|k| format!("l{k:02}")).collect();
    for (k, id) in ids.iter().enumerate() {
        host.start_on::<Counted>("limited", id, k as u32).await?;
    }
    for wave in 0..3 {
        for (k, id) in ids.iter().enumerate().skip(wave * 5).take(5) {
            let out = within(LIMIT, id, host.run(id).result::<u32>()).await??;
            assert_eq!(out, k as u32);
        }
        for id in ids.iter().skip(wave * 5 + 5) {
            assert_eq!(host.run(id).status().await?, RunStatus::Enqueued, "{id}");
        }
        if wave < 2 {
            stays_enqueued(&host, &ids[wave * 5 + 5]).await?;
        }
        assert_eq!(host.run("w2").status().await?, RunStatus::Enqueued);
        clock.advance(minute);
    }
    stays_enqueued(&host, "w2").await?;
    assert_eq!(counted.tally.get("w2/work"), 0);
    assert_eq!(finish(&host, "w1").await?, 7);
    let out = within(LIMIT, "w2 ends", host.run("w2").result::<u32>()).await??;
    assert_eq!(out, 2);
    for id in &ids {
        assert_eq!(counted.tally.get(&format!("{id}/work")), 1, "{id}");
    }
    host.shutdown().await?;
    Ok(())
}

/// Version 1 of `job`.
struct JobV1;

impl Workflow for JobV1 {
    const NAME: &'static str = "job";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("v1", |_| async { Ok::<_, String>("v1".to_owned()) })
            .await
    }
}

/// Version 2 of `job`.
struct JobV2;

impl Workflow for JobV2 {
    const NAME: &'static str = "job";
    const VERSION: u32 = 2;
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("v2", |_| async { Ok::<_, String>("v2".to_owned()) })
            .await
    }
}

/// Ports DBOS `tests/test_queue.py::test_worker_concurrency_across_versions`
/// (and `::test_dequeue_no_version_requires_latest`): a run enqueued on version 1
/// is still waiting for its queue when a host registering only version 2 opens
/// the store. It cannot execute there; the version-2 run started after it on the
/// same concurrency-1 queue must not be held back by it, and it executes nothing
/// of version 2. A host registering version 1 again runs it to its version-1
/// result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueued_run_of_an_unregistered_version_holds_back_no_other_version()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let q = || QueueOptions::default().concurrency(1);
    let host = Host::builder()
        .path(&path)
        .register(Waiter)
        .register(JobV1)
        .queue("q", q())
        .build()
        .await?;
    host.start_on::<Waiter>("q", "blocker", ()).await?;
    admitted(&host, "blocker").await?;
    host.start_on::<JobV1>("q", "old", ()).await?;
    assert_eq!(host.run("old").status().await?, RunStatus::Enqueued);
    host.shutdown().await?;

    let host = Host::builder()
        .path(&path)
        .register(Waiter)
        .register(JobV2)
        .queue("q", q())
        .build()
        .await?;
    host.start_on::<JobV2>("q", "new", ()).await?;
    assert_eq!(finish(&host, "blocker").await?, 7);
    let out = within(LIMIT, "the v2 run", host.run("new").result::<String>()).await??;
    assert_eq!(out, "v2");
    let status = host.run("old").status().await?;
    assert!(
        matches!(&status, RunStatus::Enqueued)
            || matches!(&status, RunStatus::Parked { error } if error.contains("version")),
        "the v1 run on a v2-only host: {status:?}"
    );
    let old = host.run("old").events().await?;
    assert!(
        !old.iter()
            .any(|e| matches!(e, reel::Event::StepStarted { .. })),
        "the v1 run executed on a v2-only host: {old:?}"
    );
    host.shutdown().await?;

    let host = Host::builder()
        .path(&path)
        .register(Waiter)
        .register(JobV1)
        .register(JobV2)
        .queue("q", q())
        .build()
        .await?;
    let out = within(LIMIT, "the v1 run", host.run("old").result::<String>()).await??;
    assert_eq!(out, "v1");
    host.shutdown().await?;
    Ok(())
}

/// Ports DBOS `tests/test_workflow_management.py::test_cancel_resume_queue`
/// onto reel's pause/resume: an admitted run paused between its steps keeps its
/// queue slot, also across a host restart (the run behind it stays enqueued);
/// resumed on the new host it runs its second step once and ends, and the next
/// run is admitted; a second resume is refused and runs nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_admitted_run_keeps_its_slot_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let counted = Counted::default();
    let open = || {
        Host::builder()
            .path(&path)
            .register(TwoSteps {
                tally: counted.tally.clone(),
            })
            .register(counted.clone())
            .queue("q", QueueOptions::default().concurrency(1))
            .build()
    };
    let host = open().await?;
    host.start_on::<TwoSteps>("q", "first", 5).await?;
    host.start_on::<Counted>("q", "second", 6).await?;
    admitted(&host, "first").await?;
    host.run("first").pause().await?;
    assert_eq!(host.run("first").status().await?, RunStatus::Paused);
    host.run("first").signal("go", &1u32, "go-1").await?;
    stays_enqueued(&host, "second").await?;
    host.shutdown().await?;

    let host = open().await?;
    assert_eq!(host.run("first").status().await?, RunStatus::Paused);
    stays_enqueued(&host, "second").await?;
    assert_eq!(counted.tally.get("first/two"), 0);
    host.run("first").resume().await?;
    let out = within(LIMIT, "first ends", host.run("first").result::<u32>()).await??;
    assert_eq!(out, 6);
    let out = within(LIMIT, "second ends", host.run("second").result::<u32>()).await??;
    assert_eq!(out, 6);
    assert!(host.run("first").resume().await.is_err());
    assert_eq!(counted.tally.get("first/one"), 1);
    assert_eq!(counted.tally.get("first/two"), 1);
    host.shutdown().await?;
    Ok(())
}

/// Step `one`, a wait for `go` (a u32), step `two` returning input + go.
struct TwoSteps {
    tally: Tally,
}

impl Workflow for TwoSteps {
    const NAME: &'static str = "two-steps";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let run = ctx.run_id().to_owned();
        ctx.step("one", |_| async {
            self.tally.bump(&format!("{run}/one"));
            Ok::<_, String>(())
        })
        .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("two", |_| async {
            self.tally.bump(&format!("{run}/two"));
            Ok::<_, String>(n + go)
        })
        .await
    }
}

/// Ports DBOS `tests/test_queue.py::test_queue_step`: enqueuing a finished
/// queued run's id again returns the recorded result without running anything
/// or taking a slot: it answers at once although the queue's only slot is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_start_of_a_finished_queued_run_runs_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let counted = Counted::default();
    let host = Host::builder()
        .path(dir.path().join("store"))
        .register(Waiter)
        .register(counted.clone())
        .queue("q", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    let h = host.start_on::<Counted>("q", "done", 4).await?;
    assert_eq!(within(LIMIT, "done ends", h.result()).await??, 4);
    host.start_on::<Waiter>("q", "holder", ()).await?;
    admitted(&host, "holder").await?;
    let again = host
        .start_with::<Counted>("done", 99, on("q").dedup_key("x"))
        .await?;
    assert_eq!(
        within(LIMIT, "the repeated start", again.result()).await??,
        4
    );
    assert_eq!(host.run("done").status().await?, RunStatus::Completed);
    assert_eq!(counted.tally.get("done/work"), 1);
    // The repeated start holds no key.
    host.start_with::<Counted>("other", 1, on("q").dedup_key("x"))
        .await?;
    finish(&host, "holder").await?;
    assert_eq!(
        within(LIMIT, "other ends", host.run("other").result::<u32>()).await??,
        1
    );
    host.shutdown().await?;
    Ok(())
}

/// Waits for `go`, never registered on the second host.
struct Orphan;

impl Workflow for Orphan {
    const NAME: &'static str = "orphan";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// The same DBOS scenario as the test above
/// (`tests/test_queue.py::test_worker_concurrency_across_versions`) with the
/// whole workflow missing instead of one version: a run enqueued for a workflow
/// the next host does not register must not take the queue's only slot from a
/// run that host can execute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueued_run_of_an_unregistered_workflow_holds_back_no_other_run() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let counted = Counted::default();
    let q = || QueueOptions::default().concurrency(1);
    let host = Host::builder()
        .path(&path)
        .register(Waiter)
        .register(Orphan)
        .queue("q", q())
        .build()
        .await?;
    host.start_on::<Waiter>("q", "blocker", ()).await?;
    admitted(&host, "blocker").await?;
    host.start_on::<Orphan>("q", "orphan", ()).await?;
    host.shutdown().await?;

    let host = Host::builder()
        .path(&path)
        .register(Waiter)
        .register(counted.clone())
        .queue("q", q())
        .build()
        .await?;
    host.start_on::<Counted>("q", "known", 3).await?;
    assert_eq!(finish(&host, "blocker").await?, 7);
    let out = within(LIMIT, "the known run", host.run("known").result::<u32>()).await??;
    assert_eq!(out, 3);
    host.shutdown().await?;
    Ok(())
}

/// Ports the first half of DBOS `tests/test_queue.py::test_timeout_queue`
/// (blocked workflows with a timeout are cancelled once admitted and running): an
/// admitted run waiting past its deadline is cancelled with `deadline exceeded`
/// and frees its slot for the run behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_run_past_its_deadline_frees_its_slot() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let counted = Counted::default();
    let host = queued_host(&dir.path().join("store"), &clock, &counted)
        .build()
        .await?;
    host.start_with::<Waiter>("blocked", (), on("q").timeout(HOUR))
        .await?;
    admitted(&host, "blocked").await?;
    host.start_with::<Counted>("normal", 5, on("q").timeout(5 * HOUR))
        .await?;
    stays_enqueued(&host, "normal").await?;
    clock.advance(2 * HOUR);
    match within(LIMIT, "blocked ends", host.run("blocked").result::<u32>()).await? {
        Err(Error::Cancelled(reason)) => assert!(reason.contains("deadline exceeded"), "{reason}"),
        other => panic!("a run past its deadline: {other:?}"),
    }
    let out = within(LIMIT, "normal ends", host.run("normal").result::<u32>()).await??;
    assert_eq!(out, 5);
    host.shutdown().await?;
    Ok(())
}
