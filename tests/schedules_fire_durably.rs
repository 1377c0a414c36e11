//! Durable schedules: each firing starts one run named `<schedule id>/<fire time
//! in ms>`; firings missed while no host ran (a shutdown, a kill -9) follow the
//! catch-up policy; a firing that overlaps the previous run follows the overlap
//! policy; pause, resume, update and delete hold across restarts; bad input (to
//! a create or an update) is a typed error that stores nothing. Time is a `TestClock` moved by the test.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use common::schedules::{HOUR, info, run_id, t0, until_handled};
use common::within;
use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Error, Host, Overlap, RunStatus, ScheduleSpec, Workflow};

const LIMIT: Duration = Duration::from_secs(20);
const CHILD_ENV: &str = "REEL_SCHEDULE_KILL_CHILD_DIR";

/// Completes at once.
struct Nightly;

impl Workflow for Nightly {
    const NAME: &'static str = "nightly";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}

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
    common::hosts::open_two_on(path, clock, Nightly, Hold).await
}

/// Which of the firings at hours `1..=last` after T0 started a run.
async fn fired(host: &Host, schedule: &str, last: u64) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for h in 1..=last {
        match host.handle::<Nightly>(&run_id(schedule, h)).status().await {
            Ok(_) => out.push(h),
            Err(Error::UnknownRun(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Waits until the schedule's last run is `run` (a buffered firing started).
async fn until_last_run(host: &Host, schedule: &str, run: &str) -> anyhow::Result<()> {
    within(LIMIT, "the buffered firing", async {
        while info(host, schedule).await?.last_run.as_deref() != Some(run) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await?
}

/// One schedule per catch-up policy, every hour from T0 (firing first at hour 1).
async fn schedule_policies(host: &Host) -> reel::Result<()> {
    let every = || ScheduleSpec::every(HOUR).overlap(Overlap::AllowAll);
    host.schedule::<Nightly>("none", every().catch_up(CatchUp::None), 1)
        .await?;
    host.schedule::<Nightly>("last", every().catch_up(CatchUp::Last), 2)
        .await?;
    host.schedule::<Nightly>(
        "all",
        every().catch_up(CatchUp::All { within: 3 * HOUR }),
        3,
    )
    .await
}

/// After hour 1 fired on time and the host was down until hour 5½: `None` starts
/// nothing more, `Last` hour 5, `All { within: 3h }` hours 3, 4 and 5.
async fn check_policies(host: &Host) -> anyhow::Result<()> {
    for id in ["none", "last", "all"] {
        until_handled(host, id, 5).await?;
    }
    assert_eq!(fired(host, "none", 6).await?, vec![1]);
    assert_eq!(fired(host, "last", 6).await?, vec![1, 5]);
    assert_eq!(fired(host, "all", 6).await?, vec![1, 3, 4, 5]);
    let run = host.handle::<Nightly>(&run_id("all", 4));
    assert_eq!(within(LIMIT, "a caught-up run", run.result()).await??, 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_firings_follow_the_catch_up_policy_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = open(&path, &clock).await?;
    schedule_policies(&host).await?;
    clock.advance(HOUR);
    for id in ["none", "last", "all"] {
        until_handled(&host, id, 1).await?;
    }
    host.shutdown().await?;

    clock.advance(4 * HOUR + HOUR / 2);
    let host = open(&path, &clock).await?;
    check_policies(&host).await?;
    host.shutdown().await?;
    Ok(())
}

/// The child: schedules (once), lets hour 1 fire, says so, and waits to be killed.
fn child(dir: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let clock = TestClock::new(t0());
        let host = open(&dir.join("store"), &clock).await.expect("open");
        schedule_policies(&host).await.expect("schedule");
        clock.advance(HOUR);
        for id in ["none", "last", "all"] {
            until_handled(&host, id, 1).await.expect("hour 1");
        }
        println!("fired");
        std::future::pending::<()>().await;
    });
}

#[test]
fn missed_firings_follow_the_catch_up_policy_after_kill() -> anyhow::Result<()> {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "missed_firings_follow_the_catch_up_policy_after_kill",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().expect("stdout");
    let fired_line = BufReader::new(stdout)
        .lines()
        .map_while(std::result::Result::ok)
        // libtest prints the test's name before its output, on the same line.
        .any(|l| l.ends_with("fired"));
    child.kill()?; // SIGKILL
    child.wait()?;
    assert!(fired_line, "the child never reported hour 1");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let clock = TestClock::new(t0() + 5 * HOUR + HOUR / 2);
        let host = open(&dir.path().join("store"), &clock).await?;
        check_policies(&host).await?;
        host.shutdown().await?;
        anyhow::Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_firings_follow_the_overlap_policy() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(&dir.path().join("store"), &clock).await?;
    let every = |o| ScheduleSpec::every(HOUR).overlap(o);
    host.schedule::<Hold>("skip", every(Overlap::Skip), ())
        .await?;
    host.schedule::<Hold>("buffer", every(Overlap::BufferOne), ())
        .await?;
    host.schedule::<Hold>("allow", every(Overlap::AllowAll), ())
        .await?;
    let ids = ["skip", "buffer", "allow"];
    // Hours 1, 2 and 3 fire while hour 1's run holds.
    for h in 1..=3 {
        clock.advance(HOUR);
        for id in ids {
            until_handled(&host, id, h).await?;
        }
    }
    assert_eq!(fired(&host, "skip", 3).await?, vec![1]);
    assert_eq!(fired(&host, "buffer", 3).await?, vec![1]);
    assert_eq!(fired(&host, "allow", 3).await?, vec![1, 2, 3]);
    assert_eq!(
        info(&host, "buffer").await?.last_run,
        Some(run_id("buffer", 1))
    );

    // Hour 1's run ends: the buffered firing (hour 2, the first held back) starts.
    for id in ["skip", "buffer"] {
        let first = host.handle::<Hold>(&run_id(id, 1));
        first.signal("done", &(), "done-1").await?;
        within(LIMIT, "the first run", first.result()).await??;
    }
    let buffered = run_id("buffer", 2);
    until_last_run(&host, "buffer", &buffered).await?;
    assert_eq!(fired(&host, "buffer", 3).await?, vec![1, 2]);
    let status = host.handle::<Hold>(&buffered).status().await?;
    assert!(
        matches!(status, RunStatus::Running | RunStatus::Suspended { .. }),
        "{status:?}"
    );
    // With the run over, `Skip` fires again at hour 4.
    clock.advance(HOUR);
    until_handled(&host, "skip", 4).await?;
    assert_eq!(fired(&host, "skip", 4).await?, vec![1, 4]);
    host.shutdown().await?;
    Ok(())
}

/// An update keeps a firing `BufferOne` held back: it starts when the run
/// holding it back ends, as it would have without the update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_keeps_a_buffered_firing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(&dir.path().join("store"), &clock).await?;
    let spec = || ScheduleSpec::every(HOUR).overlap(Overlap::BufferOne);
    host.schedule::<Hold>("buffer", spec(), ()).await?;
    // Hour 1 starts a run that holds; hour 2 is buffered behind it.
    for h in 1..=2 {
        clock.advance(HOUR);
        until_handled(&host, "buffer", h).await?;
    }
    assert_eq!(fired(&host, "buffer", 2).await?, vec![1]);
    host.update_schedule::<Hold>("buffer", spec(), ()).await?;

    let first = host.handle::<Hold>(&run_id("buffer", 1));
    first.signal("done", &(), "done-1").await?;
    within(LIMIT, "the first run", first.result()).await??;
    until_last_run(&host, "buffer", &run_id("buffer", 2)).await?;
    assert_eq!(fired(&host, "buffer", 3).await?, vec![1, 2]);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_updated_and_deleted_schedules_hold_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = open(&path, &clock).await?;
    // 03:00 in Paris is 02:00 UTC in January.
    host.schedule::<Nightly>(
        "paris",
        ScheduleSpec::cron("0 3 * * *").tz("Europe/Paris"),
        7,
    )
    .await?;
    host.schedule::<Nightly>("hourly", ScheduleSpec::every(HOUR), 8)
        .await?;
    let paris = info(&host, "paris").await?;
    assert_eq!(paris.next_fire, Some(t0() + 2 * HOUR));
    assert_eq!(paris.workflow, "nightly");
    host.pause_schedule("hourly").await?;
    assert_eq!(info(&host, "hourly").await?.next_fire, None);
    host.shutdown().await?;

    clock.advance(2 * HOUR);
    let host = open(&path, &clock).await?;
    until_handled(&host, "paris", 2).await?;
    let run = host.handle::<Nightly>(&run_id("paris", 2));
    assert_eq!(within(LIMIT, "the 03:00 run", run.result()).await??, 7);
    assert!(info(&host, "hourly").await?.paused);
    assert_eq!(fired(&host, "hourly", 2).await?, Vec::<u64>::new());

    // Resumed: the missed firings are caught up as `Last` says (hour 2 only).
    host.resume_schedule("hourly").await?;
    until_handled(&host, "hourly", 2).await?;
    assert_eq!(fired(&host, "hourly", 2).await?, vec![2]);

    // Updated: every 2 hours with a new input, from the next even hour.
    host.update_schedule::<Nightly>("hourly", ScheduleSpec::every(2 * HOUR), 9)
        .await?;
    assert_eq!(
        info(&host, "hourly").await?.next_fire,
        Some(t0() + 4 * HOUR)
    );
    host.delete_schedule("paris").await?;
    host.shutdown().await?;

    clock.advance(2 * HOUR);
    let host = open(&path, &clock).await?;
    until_handled(&host, "hourly", 5).await?;
    let run = host.handle::<Nightly>(&run_id("hourly", 4));
    assert_eq!(within(LIMIT, "the updated run", run.result()).await??, 9);
    let ids: Vec<String> = host.schedules().await?.into_iter().map(|s| s.id).collect();
    assert_eq!(ids, vec!["hourly".to_owned()]);
    assert!(matches!(
        host.delete_schedule("paris").await,
        Err(Error::UnknownSchedule(_))
    ));
    host.shutdown().await?;
    Ok(())
}

/// Registered nowhere.
struct Stray;

impl Workflow for Stray {
    const NAME: &'static str = "stray";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_typed_errors_that_store_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(&dir.path().join("store"), &clock).await?;
    let err = host
        .schedule::<Nightly>("bad-cron", ScheduleSpec::cron("61 * * * *"), 1)
        .await
        .expect_err("minute 61");
    assert!(
        matches!(&err, Error::InvalidSchedule { id, reason } if id == "bad-cron" && reason.contains("61 * * * *")),
        "{err}"
    );
    let err = host
        .schedule::<Nightly>(
            "bad-tz",
            ScheduleSpec::cron("0 3 * * *").tz("Mars/Olympus"),
            1,
        )
        .await
        .expect_err("unknown zone");
    assert!(
        matches!(&err, Error::InvalidSchedule { reason, .. } if reason.contains("Mars/Olympus")),
        "{err}"
    );
    let err = host
        .schedule::<Nightly>("zero", ScheduleSpec::every(Duration::ZERO), 1)
        .await
        .expect_err("zero interval");
    assert!(matches!(err, Error::InvalidSchedule { .. }), "{err}");
    let err = host
        .schedule::<Nightly>("", ScheduleSpec::every(HOUR), 1)
        .await
        .expect_err("empty id");
    assert!(matches!(err, Error::InvalidSchedule { .. }), "{err}");
    let err = host
        .schedule::<Stray>("stray", ScheduleSpec::every(HOUR), ())
        .await
        .expect_err("not registered");
    assert!(
        matches!(err, Error::UnknownWorkflow(ref w) if w == "stray"),
        "{err}"
    );
    assert!(host.schedules().await?.is_empty(), "nothing stored");

    host.schedule::<Nightly>("once", ScheduleSpec::every(HOUR), 1)
        .await?;
    let err = host
        .schedule::<Nightly>("once", ScheduleSpec::every(2 * HOUR), 2)
        .await
        .expect_err("exists");
    assert!(
        matches!(err, Error::ScheduleExists(ref id) if id == "once"),
        "{err}"
    );
    assert_eq!(info(&host, "once").await?.next_fire, Some(t0() + HOUR));
    assert!(matches!(
        host.pause_schedule("nope").await,
        Err(Error::UnknownSchedule(_))
    ));

    // Updates: an unknown id, a bad spec and an unregistered workflow are typed
    // errors, and the stored schedules stay as they were.
    let before = host.schedules().await?;
    let err = host
        .update_schedule::<Nightly>("nope", ScheduleSpec::every(HOUR), 1)
        .await
        .expect_err("unknown id");
    assert!(
        matches!(err, Error::UnknownSchedule(ref id) if id == "nope"),
        "{err}"
    );
    let err = host
        .update_schedule::<Nightly>("once", ScheduleSpec::cron("0 25 * * *"), 2)
        .await
        .expect_err("hour 25");
    assert!(
        matches!(&err, Error::InvalidSchedule { id, reason } if id == "once" && reason.contains("0 25 * * *")),
        "{err}"
    );
    let err = host
        .update_schedule::<Nightly>("once", ScheduleSpec::every(Duration::ZERO), 2)
        .await
        .expect_err("zero interval");
    assert!(matches!(err, Error::InvalidSchedule { .. }), "{err}");
    let err = host
        .update_schedule::<Stray>("once", ScheduleSpec::every(HOUR), ())
        .await
        .expect_err("not registered");
    assert!(
        matches!(err, Error::UnknownWorkflow(ref w) if w == "stray"),
        "{err}"
    );
    assert_eq!(host.schedules().await?, before, "nothing stored");
    host.shutdown().await?;
    Ok(())
}

/// When the firing at hour 1 of a schedule with up to 30 minutes of jitter
/// started, on a fresh store with a clock that skips ahead.
async fn jittered_start(id: &str) -> anyhow::Result<SystemTime> {
    let dir = tempfile::tempdir()?;
    let host = open(&dir.path().join("store"), &TestClock::auto(t0())).await?;
    host.schedule::<Nightly>(id, ScheduleSpec::every(HOUR).jitter(HOUR / 2), 1)
        .await?;
    let run = host.handle::<Nightly>(&run_id(id, 1));
    let started = within(LIMIT, "the jittered firing", async {
        loop {
            match run.records().await {
                Ok(records) if !records.is_empty() => return anyhow::Ok(records[0].at),
                Ok(_) | Err(Error::UnknownRun(_)) => {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    })
    .await??;
    host.shutdown().await?;
    Ok(started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jitter_delays_a_firing_the_same_way_every_time() -> anyhow::Result<()> {
    let first = jittered_start("jittered").await?;
    assert!(
        t0() + HOUR < first && first <= t0() + HOUR + HOUR / 2,
        "{first:?}"
    );
    // Same id and fire time, same delay: on another host, after a restart.
    assert_eq!(jittered_start("jittered").await?, first);
    Ok(())
}
