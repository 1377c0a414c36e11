//! Acceptance: durable schedules and run deadlines as the README's "Time and
//! schedules" and "Cancellation and deadlines" describe them, where the other
//! suites are thin: a six-field cron (seconds first) fires on its seconds;
//! `every(d)` fires at multiples of `d` since the epoch; `update_schedule`
//! replaces the workflow too; "Firings due while it was paused are missed
//! firings: the spec's CatchUp says which start" for `None` and `All { within }`
//! in a live host; the overlap policy treats a paused previous run as unfinished
//! (`Skip` drops, `BufferOne` holds one firing until it ends); operations on an
//! unknown schedule are `UnknownSchedule`; a run's deadline carries over
//! continue-as-new and passes also while no host ran. Time is a `TestClock`.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::schedules::{HOUR, HOUR_MS, T0_MS, info, run_id, t0, until_handled};
use common::{status::until_status, within};
use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Error, Host, Overlap, RunStatus, ScheduleSpec, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Completes at once with its input.
struct Nightly;

impl Workflow for Nightly {
    const NAME: &'static str = "nightly";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}

/// Completes at once with its input doubled: another workflow.
struct Report;

impl Workflow for Report {
    const NAME: &'static str = "report";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(2 * n)
    }
}

/// Runs until signalled `done`.
struct Hold;

impl Workflow for Hold {
    const NAME: &'static str = "hold";
    type Input = u32;
    type Output = ();
    async fn run(&self, ctx: Ctx, _: u32) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("done").await
    }
}

/// Waits for `go` (a u32) `left` times, continuing as new after each.
struct Hopper;

impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, left: u32) -> reel::Result<u32> {
        let n: u32 = ctx.wait_for_signal("go").await?;
        if left == 0 {
            return Ok(n);
        }
        ctx.continue_as_new::<Hopper>(left - 1).await
    }
}

fn builder(clock: &TestClock) -> reel::HostBuilder {
    Host::builder()
        .clock(clock.clone())
        .register(Nightly)
        .register(Report)
        .register(Hold)
        .register(Hopper)
}

async fn host_on(clock: &TestClock) -> reel::Result<Host> {
    builder(clock).in_memory().build().await
}

fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

async fn exists(host: &Host, run: &str) -> anyhow::Result<bool> {
    match host.run(run).status().await {
        Ok(_) => Ok(true),
        Err(Error::UnknownRun(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Waits until schedule `id`'s next fire time is `next`.
async fn until_next(host: &Host, id: &str, next: SystemTime) -> anyhow::Result<()> {
    within(LIMIT, &format!("schedule `{id}` next at {next:?}"), async {
        while info(host, id).await?.next_fire != Some(next) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await?
}

/// "crontab's five fields, or six with seconds": `*/30 * * * * *` fires every
/// 30 seconds, each firing starting `<id>/<fire time in ms>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_with_a_seconds_field_fires_on_its_seconds() -> anyhow::Result<()> {
    let clock = TestClock::new(t0() + Duration::from_secs(5));
    let host = host_on(&clock).await?;
    host.schedule::<Nightly>("sec", ScheduleSpec::cron("*/30 * * * * *"), 4)
        .await?;
    assert_eq!(
        info(&host, "sec").await?.next_fire,
        Some(t0() + Duration::from_secs(30))
    );
    for k in 1..=3u64 {
        clock.set(t0() + Duration::from_secs(30 * k));
        until_next(&host, "sec", t0() + Duration::from_secs(30 * (k + 1))).await?;
        let run = host.handle::<Nightly>(&format!("sec/{}", T0_MS + 30_000 * k));
        assert_eq!(within(LIMIT, "a firing", run.result()).await??, 4);
    }
    assert!(!exists(&host, &format!("sec/{}", T0_MS + 15_000)).await?);
    host.shutdown().await?;
    Ok(())
}

/// "`ScheduleSpec::every(Duration)`" fires at multiples of the interval since the
/// epoch: created at 00:07, every 15 minutes fires first at 00:15, then 00:30.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_fires_at_multiples_since_the_epoch() -> anyhow::Result<()> {
    let quarter = Duration::from_secs(15 * 60);
    let clock = TestClock::new(t0() + Duration::from_secs(7 * 60));
    let host = host_on(&clock).await?;
    host.schedule::<Nightly>("q", ScheduleSpec::every(quarter), 1)
        .await?;
    assert_eq!(info(&host, "q").await?.next_fire, Some(t0() + quarter));
    clock.set(t0() + quarter);
    until_next(&host, "q", t0() + 2 * quarter).await?;
    assert!(exists(&host, &format!("q/{}", T0_MS + 900_000)).await?);
    assert_eq!(
        info(&host, "q").await?.last_run,
        Some(format!("q/{}", T0_MS + 900_000))
    );
    host.shutdown().await?;
    Ok(())
}

/// "Replaces a schedule's spec and input (and workflow)": after an update to
/// another workflow, the next firing starts that workflow with the new input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_can_change_the_workflow() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    host.schedule::<Nightly>("s", ScheduleSpec::every(HOUR), 1)
        .await?;
    host.update_schedule::<Report>("s", ScheduleSpec::every(HOUR), 5)
        .await?;
    let s = info(&host, "s").await?;
    assert_eq!(s.workflow, "report");
    assert_eq!(s.next_fire, Some(t0() + HOUR));
    clock.advance(HOUR);
    until_handled(&host, "s", 1).await?;
    let run = host.handle::<Report>(&run_id("s", 1));
    assert_eq!(within(LIMIT, "the report", run.result()).await??, 10);
    assert_eq!(run.info().await?.workflow, "report");
    host.shutdown().await?;
    Ok(())
}

/// "Firings due while it was paused are missed firings: the spec's CatchUp says
/// which start": paused from T0 to hour 3½ in a live host, `None` starts none of
/// hours 1-3, `All { within: 2h }` starts hours 2 and 3, `Last` hour 3; all fire
/// again at hour 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firings_missed_while_paused_follow_the_catch_up_policy() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let every = || ScheduleSpec::every(HOUR).overlap(Overlap::AllowAll);
    host.schedule::<Nightly>("none", every().catch_up(CatchUp::None), 1)
        .await?;
    host.schedule::<Nightly>(
        "all",
        every().catch_up(CatchUp::All { within: 2 * HOUR }),
        2,
    )
    .await?;
    host.schedule::<Nightly>("last", every().catch_up(CatchUp::Last), 3)
        .await?;
    for id in ["none", "all", "last"] {
        host.pause_schedule(id).await?;
        let s = info(&host, id).await?;
        assert!(s.paused);
        assert_eq!(s.next_fire, None, "a paused schedule has no next fire time");
    }
    for _ in 0..7 {
        clock.advance(HOUR / 2);
        tokio::task::yield_now().await;
    }
    for id in ["none", "all", "last"] {
        for h in 1..=3 {
            assert!(!exists(&host, &run_id(id, h)).await?, "{id} fired paused");
        }
        host.resume_schedule(id).await?;
        until_handled(&host, id, 3).await?;
    }
    let fired = |id: &'static str| {
        let host = host.clone();
        async move {
            let mut out = Vec::new();
            for h in 1..=4 {
                if exists(&host, &run_id(id, h)).await? {
                    out.push(h);
                }
            }
            anyhow::Ok(out)
        }
    };
    assert_eq!(fired("none").await?, Vec::<u64>::new());
    assert_eq!(fired("all").await?, vec![2, 3]);
    assert_eq!(fired("last").await?, vec![3]);
    clock.advance(HOUR / 2);
    for id in ["none", "all", "last"] {
        until_handled(&host, id, 4).await?;
        assert!(exists(&host, &run_id(id, 4)).await?, "{id} at hour 4");
    }
    host.shutdown().await?;
    Ok(())
}

/// "what a firing does while the previous run is unfinished": a paused run is
/// unfinished, so `Skip` drops the firing and `BufferOne` holds one until the run
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_previous_run_is_unfinished_for_the_overlap_policy() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    host.schedule::<Hold>("skip", ScheduleSpec::every(HOUR), 0)
        .await?;
    host.schedule::<Hold>(
        "buf",
        ScheduleSpec::every(HOUR).overlap(Overlap::BufferOne),
        0,
    )
    .await?;
    clock.advance(HOUR);
    for id in ["skip", "buf"] {
        until_handled(&host, id, 1).await?;
        let first = host.run(&run_id(id, 1));
        first.wait_until_suspended().await?;
        first.pause().await?;
        until_status(&first, "paused", |s| *s == RunStatus::Paused).await?;
    }
    clock.advance(HOUR);
    for id in ["skip", "buf"] {
        until_handled(&host, id, 2).await?;
        assert!(
            !exists(&host, &run_id(id, 2)).await?,
            "{id}: a firing beside a paused run"
        );
        assert_eq!(info(&host, id).await?.last_run, Some(run_id(id, 1)));
    }
    for id in ["skip", "buf"] {
        host.run(&run_id(id, 1)).cancel("enough").await?;
    }
    within(LIMIT, "the buffered firing", async {
        while info(&host, "buf").await?.last_run != Some(run_id("buf", 2)) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await??;
    assert!(!exists(&host, &run_id("skip", 2)).await?);
    host.shutdown().await?;
    Ok(())
}

/// `pause_schedule`, `resume_schedule`, `update_schedule` and `delete_schedule`
/// of an unknown id are `UnknownSchedule`; a second schedule under an id is
/// `ScheduleExists`; a schedule of an unregistered workflow is `UnknownWorkflow`;
/// none of them stores anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_duplicate_schedules_are_typed_errors() -> anyhow::Result<()> {
    struct Stray;
    impl Workflow for Stray {
        const NAME: &'static str = "stray";
        type Input = ();
        type Output = ();
        async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
            Ok(())
        }
    }
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let unknown = |r: reel::Result<()>, what: &str| match r {
        Err(Error::UnknownSchedule(id)) => assert_eq!(id, "ghost", "{what}"),
        other => panic!("{what} of an unknown schedule: {other:?}"),
    };
    unknown(host.pause_schedule("ghost").await, "pause");
    unknown(host.resume_schedule("ghost").await, "resume");
    unknown(host.delete_schedule("ghost").await, "delete");
    unknown(
        host.update_schedule::<Nightly>("ghost", ScheduleSpec::every(HOUR), 1)
            .await,
        "update",
    );
    host.schedule::<Nightly>("s", ScheduleSpec::every(HOUR), 1)
        .await?;
    assert!(matches!(
        host.schedule::<Nightly>("s", ScheduleSpec::every(2 * HOUR), 2)
            .await,
        Err(Error::ScheduleExists(_))
    ));
    assert!(matches!(
        host.schedule::<Stray>("t", ScheduleSpec::every(HOUR), ())
            .await,
        Err(Error::UnknownWorkflow(_) | Error::VersionMismatch { .. })
    ));
    let all = host.schedules().await?;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].next_fire, Some(t0() + HOUR), "the first spec stands");
    host.delete_schedule("s").await?;
    clock.advance(2 * HOUR);
    assert!(host.schedules().await?.is_empty());
    // Deleted: nothing fires (give a scheduler pass the chance).
    host.schedule::<Nightly>("probe", ScheduleSpec::every(HOUR), 1)
        .await?;
    clock.advance(HOUR);
    until_handled(&host, "probe", 3).await?;
    assert!(!exists(&host, &run_id("s", 1)).await?);
    assert!(!exists(&host, &run_id("s", 2)).await?);
    host.shutdown().await?;
    Ok(())
}

/// "Signals ... carry over, in order, as does a cancel request and the run's
/// deadline": a run with a one-hour timeout that continued as new twice is
/// cancelled for its deadline at hour 1, not an hour after its last hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_carries_over_continue_as_new() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let run = host
        .start_with::<Hopper>("h", 5, StartOptions::default().timeout(HOUR))
        .await?;
    for k in 0..2u32 {
        run.wait_until_suspended().await?;
        clock.advance(Duration::from_secs(20 * 60));
        run.signal("go", &k, &format!("g{k}")).await?;
        within(LIMIT, "the hop", async {
            while run.info().await?.segment < k + 1 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            anyhow::Ok(())
        })
        .await??;
    }
    run.wait_until_suspended().await?;
    // Hour 0:40 now: the deadline is at hour 1.
    clock.advance(Duration::from_secs(21 * 60));
    match within(LIMIT, "the deadline", run.result()).await? {
        Err(Error::Cancelled(reason)) => {
            assert!(reason.starts_with("deadline exceeded"), "{reason}")
        }
        other => panic!("past its deadline: {other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}

/// "When it passes (also if it passed while no host ran), the run is asked to
/// cancel": a deadline that passed while the store was closed ends the run once
/// a host opens it, and a run that completed before its deadline stays completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passed_while_no_host_ran_cancels_on_open() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = builder(&clock).path(&path).build().await?;
    let late = host
        .start_with::<Hold>("late", 0, StartOptions::default().timeout(HOUR))
        .await?;
    let early = host
        .start_with::<Hold>("early", 0, StartOptions::default().timeout(HOUR))
        .await?;
    late.wait_until_suspended().await?;
    early.wait_until_suspended().await?;
    early.signal("done", &(), "d").await?;
    within(LIMIT, "early ends", early.result()).await??;
    host.shutdown().await?;

    clock.set(at_ms(T0_MS + 3 * HOUR_MS));
    let host = builder(&clock).path(&path).build().await?;
    let late = host.handle::<Hold>("late");
    match within(LIMIT, "the deadline", late.result()).await? {
        Err(Error::Cancelled(reason)) => {
            assert!(reason.starts_with("deadline exceeded"), "{reason}")
        }
        other => panic!("past its deadline: {other:?}"),
    }
    assert_eq!(
        host.handle::<Hold>("early").status().await?,
        RunStatus::Completed
    );
    host.shutdown().await?;
    Ok(())
}
