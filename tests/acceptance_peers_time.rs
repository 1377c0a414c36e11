//! Acceptance: schedule and durable-time scenarios ported from Temporal's
//! scheduler tests (temporalio/temporal, `service/worker/scheduler/workflow_test.go`)
//! and DBOS's scheduler and sleep tests (dbos-inc/dbos-transact-py,
//! `tests/test_scheduler.py`, `tests/test_dbos.py`), onto reel's schedules
//! (README "Time and schedules"): catch-up firings go through the overlap
//! policy, a firing held back by `BufferOne` survives a restart, a deleted
//! schedule leaves its runs alone and its id can be scheduled again, a failed
//! start does not wedge a schedule, a durable sleep keeps its wake-up time across
//! restarts, a rate-limited queue drains on an auto clock, a year of missed
//! per-second firings is caught up at once, and cron fire times are the cron's
//! own (three ignored tests: cron times keep sub-second parts, and cron catch-up
//! picks the wrong firings). Real stores in temp dirs, time on a `TestClock`.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::schedules::{HOUR, info, run_id, t0, until_handled};
use common::within;
use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Error, Host, Overlap, RunStatus, ScheduleSpec, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

/// Runs until signalled `done`.
struct Hold;

impl Workflow for Hold {
    const NAME: &'static str = "hold";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("done").await
    }
}

async fn open(path: &Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(Hold)
        .build()
        .await
}

/// Which of the firings at hours `1..=last` after T0 started a run.
async fn fired(host: &Host, schedule: &str, last: u64) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for h in 1..=last {
        match host.run(&run_id(schedule, h)).status().await {
            Ok(_) => out.push(h),
            Err(Error::UnknownRun(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

async fn end_hold(host: &Host, run: &str) -> anyhow::Result<()> {
    let r = host.handle::<Hold>(run);
    r.signal("done", &(), &format!("done-{run}")).await?;
    within(LIMIT, &format!("{run} ends"), r.result()).await??;
    Ok(())
}

/// Waits until the schedule's last run is `run`.
async fn until_last_run(host: &Host, schedule: &str, run: &str) -> anyhow::Result<()> {
    within(LIMIT, &format!("{schedule}'s last run {run}"), async {
        while info(host, schedule).await?.last_run.as_deref() != Some(run) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await?
}

/// Ports Temporal `service/worker/scheduler/workflow_test.go::TestOverlapSkip`,
/// `::TestOverlapBufferOne` and `::TestOverlapAllowAll`, with the overlapping
/// firings arriving as catch-up (`CatchUp::All`) after the host was down:
/// firings caught up are firings like any other, so the overlap policy applies
/// to them. Hour 1's run still holds when the host comes back at hour 5½:
/// `Skip` starts none of hours 2–5, `BufferOne` holds hour 2 (the first) until
/// hour 1's run ends and drops 3–5, `AllowAll` starts all four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_firings_follow_the_overlap_policy() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = open(&path, &clock).await?;
    let spec = |o| {
        ScheduleSpec::every(HOUR)
            .overlap(o)
            .catch_up(CatchUp::All { within: 24 * HOUR })
    };
    let ids = ["skip", "buffer", "allow"];
    host.schedule::<Hold>("skip", spec(Overlap::Skip), ())
        .await?;
    host.schedule::<Hold>("buffer", spec(Overlap::BufferOne), ())
        .await?;
    host.schedule::<Hold>("allow", spec(Overlap::AllowAll), ())
        .await?;
    clock.advance(HOUR);
    for id in ids {
        until_handled(&host, id, 1).await?;
    }
    host.shutdown().await?;

    clock.advance(4 * HOUR + HOUR / 2);
    let host = open(&path, &clock).await?;
    for id in ids {
        until_handled(&host, id, 5).await?;
    }
    assert_eq!(fired(&host, "skip", 6).await?, vec![1]);
    assert_eq!(fired(&host, "buffer", 6).await?, vec![1]);
    assert_eq!(fired(&host, "allow", 6).await?, vec![1, 2, 3, 4, 5]);

    end_hold(&host, &run_id("skip", 1)).await?;
    end_hold(&host, &run_id("buffer", 1)).await?;
    until_last_run(&host, "buffer", &run_id("buffer", 2)).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(fired(&host, "buffer", 6).await?, vec![1, 2]);
    assert_eq!(fired(&host, "skip", 6).await?, vec![1]);

    // Hour 6: `Skip` is free to fire; `BufferOne` holds it behind hour 2's run.
    clock.advance(HOUR / 2);
    for id in ids {
        until_handled(&host, id, 6).await?;
    }
    assert_eq!(fired(&host, "skip", 6).await?, vec![1, 6]);
    assert_eq!(fired(&host, "buffer", 6).await?, vec![1, 2]);
    end_hold(&host, &run_id("buffer", 2)).await?;
    until_last_run(&host, "buffer", &run_id("buffer", 6)).await?;
    host.shutdown().await?;
    Ok(())
}

/// Ports Temporal `service/worker/scheduler/workflow_test.go::TestOverlapBufferOne`
/// (run there across the scheduler's own continue-as-new): the firing held back
/// behind an unfinished run is durable state of the schedule; after a host
/// restart it still starts when that run ends, and only it (hour 3, dropped
/// while hour 2 was held, stays dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_firing_survives_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = open(&path, &clock).await?;
    host.schedule::<Hold>(
        "buffer",
        ScheduleSpec::every(HOUR).overlap(Overlap::BufferOne),
        (),
    )
    .await?;
    for h in 1..=3 {
        clock.advance(HOUR);
        until_handled(&host, "buffer", h).await?;
    }
    assert_eq!(fired(&host, "buffer", 3).await?, vec![1]);
    host.shutdown().await?;

    let host = open(&path, &clock).await?;
    until_handled(&host, "buffer", 3).await?;
    assert_eq!(fired(&host, "buffer", 3).await?, vec![1]);
    end_hold(&host, &run_id("buffer", 1)).await?;
    until_last_run(&host, "buffer", &run_id("buffer", 2)).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(fired(&host, "buffer", 3).await?, vec![1, 2]);
    host.shutdown().await?;
    Ok(())
}

/// Ports DBOS `tests/test_scheduler.py::test_dynamic_scheduler_delete_stops_firing`
/// (and Temporal's "deleting a schedule does not affect workflows it started"):
/// after `delete_schedule` no firing starts, the run it started goes on and
/// ends when signalled, and the id can be scheduled again, firing anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_schedule_stops_firing_leaves_its_run_and_can_be_created_again()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = open(&path, &clock).await?;
    let every = || ScheduleSpec::every(HOUR).overlap(Overlap::AllowAll);
    host.schedule::<Hold>("d", every(), ()).await?;
    clock.advance(HOUR);
    until_handled(&host, "d", 1).await?;
    host.delete_schedule("d").await?;
    assert!(host.schedules().await?.iter().all(|s| s.id != "d"));
    assert!(matches!(
        host.pause_schedule("d").await,
        Err(Error::UnknownSchedule(_))
    ));
    clock.advance(2 * HOUR);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fired(&host, "d", 4).await?, vec![1]);
    let first = host.run(&run_id("d", 1)).status().await?;
    assert!(matches!(first, RunStatus::Suspended { .. }), "{first:?}");
    host.shutdown().await?;

    // Still gone after a restart; the run it started still ends normally.
    let host = open(&path, &clock).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fired(&host, "d", 4).await?, vec![1]);
    end_hold(&host, &run_id("d", 1)).await?;

    host.schedule::<Hold>("d", every(), ()).await?;
    assert_eq!(
        info(&host, "d").await?.next_fire,
        Some(t0() + 4 * HOUR),
        "the new schedule fires first after now"
    );
    clock.advance(HOUR);
    until_handled(&host, "d", 4).await?;
    assert_eq!(fired(&host, "d", 4).await?, vec![1, 4]);
    host.shutdown().await?;
    Ok(())
}

/// A step, a ten-hour durable sleep, a step: reports the times it saw.
#[derive(Clone, Default)]
struct Sleeper {
    before: Arc<AtomicU32>,
    after: Arc<AtomicU32>,
    woke_at: Arc<Mutex<Option<SystemTime>>>,
}

impl Workflow for Sleeper {
    const NAME: &'static str = "sleeper";
    type Input = ();
    type Output = (SystemTime, SystemTime);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(SystemTime, SystemTime)> {
        ctx.step("before", |_| async {
            self.before.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        })
        .await?;
        let start = ctx.now().await?;
        ctx.sleep(10 * HOUR).await?;
        let end = ctx.now().await?;
        ctx.step("after", |_| async {
            self.after.fetch_add(1, Ordering::SeqCst);
            *self.woke_at.lock().expect("woke_at") = Some(end);
            Ok::<_, String>(())
        })
        .await?;
        Ok((start, end))
    }
}

/// Ports DBOS `tests/test_dbos.py::test_sleep` / `::test_durable_sleep`
/// (a recovered sleep waits only for what is left of it, from its recorded
/// wake-up time): a ten-hour sleep across two restarts, at hours 4 and 8, is not
/// begun again by either; it does not fire early; it fires once when hour 10
/// comes; the step before it ran once, the step after it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_sleep_keeps_its_wake_up_time_across_restarts() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let sleeper = Sleeper::default();
    let open = || {
        Host::builder()
            .path(&path)
            .clock(clock.clone())
            .register(sleeper.clone())
            .build()
    };
    let host = open().await?;
    let run = host.start::<Sleeper>("nap", ()).await?;
    within(LIMIT, "nap sleeps", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    for _ in 0..2 {
        clock.advance(4 * HOUR);
        let host = open().await?;
        let status = host.run("nap").status().await?;
        assert!(
            matches!(&status, RunStatus::Suspended { waiting_on } if waiting_on.contains("timer")),
            "{status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(sleeper.after.load(Ordering::SeqCst), 0, "woke early");
        host.shutdown().await?;
    }

    let host = open().await?;
    clock.advance(2 * HOUR);
    let (start, end) = within(LIMIT, "nap ends", host.handle::<Sleeper>("nap").result()).await??;
    assert_eq!(start, t0());
    assert_eq!(end, t0() + 10 * HOUR);
    assert_eq!(sleeper.before.load(Ordering::SeqCst), 1);
    assert_eq!(sleeper.after.load(Ordering::SeqCst), 1);
    assert_eq!(*sleeper.woke_at.lock().expect("woke_at"), Some(end));
    host.shutdown().await?;
    Ok(())
}

/// Another workflow, completing at once.
struct Other;

impl Workflow for Other {
    const NAME: &'static str = "other";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

/// Ports Temporal `service/worker/scheduler/workflow_test.go::TestFailedStart`
/// ("failed start, but doesn't do anything else until next scheduled time"): a
/// firing whose start cannot succeed (its run id `<id>/<fire time>` is taken by
/// a run of another workflow) does not wedge the schedule: the next firing
/// starts its run on time, and the run holding the id is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_whose_start_fails_does_not_wedge_the_schedule() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = Host::builder()
        .path(dir.path().join("store"))
        .clock(clock.clone())
        .register(Hold)
        .register(Other)
        .build()
        .await?;
    let squatter = host.start::<Other>(&run_id("s", 1), ()).await?;
    within(LIMIT, "the squatter", squatter.result()).await??;
    host.schedule::<Hold>(
        "s",
        ScheduleSpec::every(HOUR).overlap(Overlap::AllowAll),
        (),
    )
    .await?;
    clock.advance(HOUR);
    tokio::time::sleep(Duration::from_millis(100)).await;
    clock.advance(HOUR);
    within(LIMIT, "hour 2's run", async {
        loop {
            match host.run(&run_id("s", 2)).status().await {
                Ok(_) => return anyhow::Ok(()),
                Err(Error::UnknownRun(_)) => {}
                Err(e) => return Err(e.into()),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    let info = host.run(&run_id("s", 1)).info().await?;
    assert_eq!(info.workflow, "other");
    assert_eq!(info.status, RunStatus::Completed);
    assert_eq!(host.run(&run_id("s", 2)).info().await?.workflow, "hold");
    end_hold(&host, &run_id("s", 2)).await?;
    host.shutdown().await?;
    Ok(())
}

/// Completes at once with the time it started (recorded).
struct Stamp;

impl Workflow for Stamp {
    const NAME: &'static str = "stamp";
    type Input = ();
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<SystemTime> {
        ctx.now().await
    }
}

/// Ports DBOS `tests/test_queue.py::test_limiter` onto a `TestClock` in auto
/// mode (Temporal's time-skipping): fifteen runs on a queue admitting five per
/// day all complete without a hand on the clock, in three waves of five a day
/// apart: no window admits more than five (the limiter's own check, on the
/// runs' recorded start times), and the budget is spent, not trickled (the first
/// window admits exactly five).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_queue_drains_on_an_auto_clock_in_waves() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let day = 24 * HOUR;
    let host = Host::builder()
        .path(dir.path().join("store"))
        .clock(TestClock::auto(t0()))
        .register(Stamp)
        .queue("limited", reel::QueueOptions::default().rate_limit(5, day))
        .build()
        .await?;
    let mut handles = Vec::new();
    for k in 0..15 {
        handles.push(
            host.start_on::<Stamp>("limited", &format!("r{k:02}"), ())
                .await?,
        );
    }
    let mut starts = Vec::new();
    for h in &handles {
        starts.push(within(LIMIT, h.id(), h.result()).await??);
    }
    starts.sort();
    for i in 0..starts.len() - 5 {
        let gap = starts[i + 5].duration_since(starts[i])?;
        assert!(gap >= day, "six admissions within a day: {starts:?}");
    }
    let first_window = starts.iter().filter(|t| **t < starts[0] + day).count();
    assert_eq!(first_window, 5, "{starts:?}");
    assert!(
        starts[14].duration_since(starts[0])? < 3 * day,
        "the waves stalled: {starts:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Completes at once.
struct Beat;

impl Workflow for Beat {
    const NAME: &'static str = "beat";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

/// Ports Temporal `service/worker/scheduler/workflow_test.go::TestCatchupWindow`
/// ("workflow woke up after 6 hours": only what the catch-up window allows
/// starts) at the far end: a host down for a year under schedules firing every
/// second (an interval and a six-field cron) comes back and catches up at once,
/// as its policy says (`None`, `Last`, `All` capped at 1,000 firings), rather
/// than walking 31 million missed firings: within the time limit every
/// schedule's next fire time is in the future again, and the runs started stay
/// within the policy's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_year_of_missed_per_second_firings_is_caught_up_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let open = || {
        Host::builder()
            .path(&path)
            .clock(clock.clone())
            .register(Beat)
            .build()
    };
    let second = Duration::from_secs(1);
    let year = 365 * 24 * HOUR;
    let host = open().await?;
    let specs = [
        (
            "every-none",
            ScheduleSpec::every(second).catch_up(CatchUp::None),
        ),
        (
            "every-last",
            ScheduleSpec::every(second).catch_up(CatchUp::Last),
        ),
        (
            "every-all",
            ScheduleSpec::every(second).catch_up(CatchUp::All { within: year }),
        ),
        (
            "cron-none",
            ScheduleSpec::cron("* * * * * *").catch_up(CatchUp::None),
        ),
        (
            "cron-last",
            ScheduleSpec::cron("* * * * * *").catch_up(CatchUp::Last),
        ),
        (
            "cron-all",
            ScheduleSpec::cron("* * * * * *").catch_up(CatchUp::All { within: year }),
        ),
    ];
    for (id, spec) in specs.clone() {
        host.schedule::<Beat>(id, spec.overlap(Overlap::AllowAll), ())
            .await?;
    }
    host.shutdown().await?;

    clock.advance(year);
    let host = open().await?;
    let now = t0() + year;
    within(Duration::from_secs(60), "every schedule caught up", async {
        loop {
            let all = host.schedules().await?;
            if all.len() == specs.len() && all.iter().all(|s| s.next_fire.is_some_and(|t| t > now))
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await??;
    let count = host.count().await?.values().sum::<u64>();
    // `None` and `Last` start at most a minute's on-time firings (and one
    // missed); `All` at most 1,000 more each.
    assert!(count <= 2 * 1_000 + 6 * 62, "{count} runs started");
    host.shutdown().await?;
    Ok(())
}

/// The runs of schedule `id` that exist, as milliseconds after T0 (their ids'
/// fire times), sorted.
async fn fire_offsets(host: &Host, id: &str) -> anyhow::Result<Vec<i64>> {
    let t0_ms = i64::try_from(t0().duration_since(std::time::UNIX_EPOCH)?.as_millis())?;
    let mut out = Vec::new();
    let mut filter = reel::RunFilter::default().limit(500);
    loop {
        let page = host.list(filter.clone()).await?;
        for run in page.items {
            if let Some(ms) = run.run_id.strip_prefix(&format!("{id}/")) {
                out.push(ms.parse::<i64>()? - t0_ms);
            }
        }
        match page.next {
            Some(c) => filter = filter.after(Some(c)),
            None => break,
        }
    }
    out.sort();
    Ok(out)
}

/// Ports the fire-time naming of Temporal
/// `service/worker/scheduler/workflow_test.go::TestCatchupWindowWhilePaused` and
/// `::TestOverlapSkip` (a firing's workflow id is its nominal time,
/// `myid-2022-06-01T00:17:00Z`, started at exactly that time) onto reel's
/// "each firing starts the run `<id>/<fire time in ms>`": a cron schedule
/// created at a moment that is not on a whole second (as with any real clock)
/// still fires at the cron's times, on the hour and on the half minute, not at
/// those times plus the creation's milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_fire_times_are_the_crons_times_whatever_the_creation_millisecond()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0() + Duration::from_millis(123));
    let host = Host::builder()
        .path(dir.path().join("store"))
        .clock(clock.clone())
        .register(Beat)
        .build()
        .await?;
    host.schedule::<Beat>("hourly", ScheduleSpec::cron("0 * * * *"), ())
        .await?;
    host.schedule::<Beat>("half-minute", ScheduleSpec::cron("*/30 * * * * *"), ())
        .await?;
    assert_eq!(info(&host, "hourly").await?.next_fire, Some(t0() + HOUR));
    assert_eq!(
        info(&host, "half-minute").await?.next_fire,
        Some(t0() + Duration::from_secs(30))
    );
    clock.advance(HOUR);
    until_handled(&host, "hourly", 1).await?;
    assert_eq!(fire_offsets(&host, "hourly").await?, vec![3_600_000]);
    assert_eq!(
        info(&host, "hourly").await?.next_fire,
        Some(t0() + 2 * HOUR)
    );
    host.shutdown().await?;
    Ok(())
}

/// Ports Temporal `service/worker/scheduler/workflow_test.go::TestCatchupWindow`
/// (after the scheduler "woke up" late, the firings inside the catch-up window
/// start, at their own nominal times) for a cron spec, beside the same spec as
/// an interval: an hourly schedule whose host was down from T0 to 3 h 0.5 s
/// starts, under `All { within: 150 min }`, the firings of hours 1, 2 and 3 and
/// under `Last` the firing of hour 3, and goes on firing on the hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_catch_up_starts_the_missed_hours_at_their_times() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let open = || {
        Host::builder()
            .path(&path)
            .clock(clock.clone())
            .register(Beat)
            .build()
    };
    let host = open().await?;
    let all = CatchUp::All {
        within: 150 * Duration::from_secs(60),
    };
    for (id, spec) in [
        ("every-all", ScheduleSpec::every(HOUR).catch_up(all)),
        ("cron-all", ScheduleSpec::cron("0 * * * *").catch_up(all)),
        (
            "every-last",
            ScheduleSpec::every(HOUR).catch_up(CatchUp::Last),
        ),
        (
            "cron-last",
            ScheduleSpec::cron("0 * * * *").catch_up(CatchUp::Last),
        ),
    ] {
        host.schedule::<Beat>(id, spec.overlap(Overlap::AllowAll), ())
            .await?;
    }
    host.shutdown().await?;

    clock.advance(3 * HOUR + Duration::from_millis(500));
    let host = open().await?;
    let now = t0() + 3 * HOUR + Duration::from_millis(500);
    within(LIMIT, "the catch-up", async {
        for id in ["every-all", "cron-all", "every-last", "cron-last"] {
            while info(&host, id).await?.next_fire.is_none_or(|t| t <= now) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        anyhow::Ok(())
    })
    .await??;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let hours = |hs: &[i64]| hs.iter().map(|h| h * 3_600_000).collect::<Vec<_>>();
    for kind in ["every", "cron"] {
        assert_eq!(
            fire_offsets(&host, &format!("{kind}-all")).await?,
            hours(&[1, 2, 3]),
            "{kind}-all"
        );
        assert_eq!(
            fire_offsets(&host, &format!("{kind}-last")).await?,
            hours(&[3]),
            "{kind}-last"
        );
        assert_eq!(
            info(&host, &format!("{kind}-all")).await?.next_fire,
            Some(t0() + 4 * HOUR),
            "{kind}-all"
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// The year-long outage of the test above, for `All`: an interval and a cron
/// spec firing every second both keep the latest 1,000 missed firings (what
/// `between` documents, "the latest ones", and what the interval does), not
/// firings from the outage's first days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_year_of_missed_per_second_cron_firings_catches_up_the_latest() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let open = || {
        Host::builder()
            .path(&path)
            .clock(clock.clone())
            .register(Beat)
            .build()
    };
    let year = 365 * 24 * HOUR;
    let all = CatchUp::All { within: year };
    let host = open().await?;
    host.schedule::<Beat>(
        "every",
        ScheduleSpec::every(Duration::from_secs(1))
            .catch_up(all)
            .overlap(Overlap::AllowAll),
        (),
    )
    .await?;
    host.schedule::<Beat>(
        "cron",
        ScheduleSpec::cron("* * * * * *")
            .catch_up(all)
            .overlap(Overlap::AllowAll),
        (),
    )
    .await?;
    host.shutdown().await?;

    clock.advance(year);
    let host = open().await?;
    let now = t0() + year;
    within(Duration::from_secs(60), "the catch-up", async {
        for id in ["every", "cron"] {
            while info(&host, id).await?.next_fire.is_none_or(|t| t <= now) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        anyhow::Ok(())
    })
    .await??;
    let year_ms = i64::try_from(year.as_millis())?;
    for id in ["every", "cron"] {
        let fired = fire_offsets(&host, id).await?;
        assert!(
            (1_000..=1_001).contains(&fired.len()),
            "{id}: {}",
            fired.len()
        );
        let oldest_age_s = (year_ms - fired[0]) / 1000;
        assert!(
            oldest_age_s <= 1_001,
            "{id}: the oldest firing started is {oldest_age_s} s old"
        );
    }
    host.shutdown().await?;
    Ok(())
}
