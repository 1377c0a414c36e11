//! Adversarial schedule tests modelled on Temporal's schedule suites: cron in a
//! time zone across DST transitions, jitter bounds over many firings (also a
//! jitter wider than the interval), a spec that never fires, pause/delete of a
//! schedule whose buffered firing is waiting, an overlap policy after a failed or
//! cancelled run, and catch-up of a firing that waited for its workflow to be
//! registered again. Time is a `TestClock`.

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike, TimeZone, Timelike};
use chrono_tz::Tz;
use common::schedules::{HOUR, HOUR_MS, T0_MS, info, t0};
use common::within;
use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Error, Host, HostBuilder, Overlap, ScheduleInfo, ScheduleSpec, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn utc(y: i32, m: u32, d: u32, h: u32) -> anyhow::Result<SystemTime> {
    let t = chrono::Utc
        .with_ymd_and_hms(y, m, d, h, 0, 0)
        .single()
        .ok_or_else(|| anyhow::anyhow!("bad date"))?;
    Ok(UNIX_EPOCH + Duration::from_millis(u64::try_from(t.timestamp_millis())?))
}

fn local(t: SystemTime, tz: Tz) -> anyhow::Result<DateTime<Tz>> {
    tz.timestamp_millis_opt(i64::try_from(ms(t))?)
        .single()
        .ok_or_else(|| anyhow::anyhow!("no local time"))
}

/// Completes at once with its input.
struct Tick;
impl Workflow for Tick {
    const NAME: &'static str = "tick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}

/// Waits for `done`, then fails when asked to.
struct Hold;
impl Workflow for Hold {
    const NAME: &'static str = "hold";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let fail: bool = ctx.wait_for_signal("done").await?;
        if fail {
            return Err(Error::failed("asked to fail"));
        }
        Ok(())
    }
}

fn builder(path: &Path, clock: &TestClock) -> HostBuilder {
    Host::builder().path(path).clock(clock.clone())
}

async fn open(path: &Path, clock: &TestClock) -> reel::Result<Host> {
    builder(path, clock)
        .register(Tick)
        .register(Hold)
        .build()
        .await
}

/// Waits until the schedule's next fire time is past `t`.
async fn until_past(host: &Host, id: &str, t: SystemTime) -> anyhow::Result<ScheduleInfo> {
    within(LIMIT, &format!("`{id}` to move past {t:?}"), async {
        loop {
            let i = info(host, id).await?;
            if i.next_fire.is_none_or(|n| n > t) {
                return anyhow::Ok(i);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?
}

async fn exists(host: &Host, run: &str) -> anyhow::Result<bool> {
    match host.run(run).status().await {
        Ok(_) => Ok(true),
        Err(Error::UnknownRun(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Moves the clock to each next fire time of schedule `id` in turn, `n` times,
/// and returns the fire times; each must have started its run.
async fn walk(
    host: &Host,
    clock: &TestClock,
    id: &str,
    n: usize,
) -> anyhow::Result<Vec<SystemTime>> {
    let mut fired = Vec::new();
    for _ in 0..n {
        let next = info(host, id)
            .await?
            .next_fire
            .ok_or_else(|| anyhow::anyhow!("`{id}` stopped firing after {fired:?}"))?;
        clock.set(next);
        until_past(host, id, next).await?;
        let run = format!("{id}/{}", ms(next));
        assert!(
            exists(host, &run).await?,
            "the firing at {next:?} started no run"
        );
        fired.push(next);
    }
    Ok(fired)
}

/// A daily 02:30 Paris job across the spring-forward night (2027-03-28, 02:00 CET
/// becomes 03:00 CEST, so 02:30 does not exist that day): it goes on firing every
/// day after, at 02:30 local, never twice a day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_cron_in_a_time_zone_survives_spring_forward() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(utc(2027, 3, 25, 12)?);
    let host = open(dir.path(), &clock).await?;
    let paris: Tz = "Europe/Paris".parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    host.schedule::<Tick>(
        "daily",
        ScheduleSpec::cron("30 2 * * *")
            .tz("Europe/Paris")
            .overlap(Overlap::AllowAll),
        1,
    )
    .await?;
    let fired = walk(&host, &clock, "daily", 5).await?;
    let locals: Vec<DateTime<Tz>> = fired
        .iter()
        .map(|t| local(*t, paris))
        .collect::<anyhow::Result<_>>()?;
    let days: Vec<u32> = locals.iter().map(|l| l.day()).collect();
    let mut distinct = days.clone();
    distinct.dedup();
    assert_eq!(days, distinct, "one firing per local day: {locals:?}");
    // The days after the transition fire at 02:30 local.
    for l in locals.iter().filter(|l| l.day() != 28) {
        assert_eq!((l.hour(), l.minute()), (2, 30), "{locals:?}");
    }
    assert!(
        locals.iter().any(|l| l.month() == 3 && l.day() >= 29),
        "fires after the transition: {locals:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// The same job across the fall-back night (2027-10-31, 03:00 CEST becomes 02:00
/// CET, so 02:30 happens twice): one firing that day, as crontab does, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_cron_in_a_time_zone_fires_once_on_the_fall_back_day() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(utc(2027, 10, 29, 12)?);
    let host = open(dir.path(), &clock).await?;
    let paris: Tz = "Europe/Paris".parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    host.schedule::<Tick>(
        "daily",
        ScheduleSpec::cron("30 2 * * *")
            .tz("Europe/Paris")
            .overlap(Overlap::AllowAll),
        1,
    )
    .await?;
    let fired = walk(&host, &clock, "daily", 4).await?;
    let locals: Vec<String> = fired
        .iter()
        .map(|t| local(*t, paris).map(|l| l.to_rfc3339()))
        .collect::<anyhow::Result<_>>()?;
    let days: Vec<u32> = fired
        .iter()
        .map(|t| local(*t, paris).map(|l| l.day()))
        .collect::<anyhow::Result<_>>()?;
    assert_eq!(days, vec![30, 31, 1, 2], "{locals:?}");
    host.shutdown().await?;
    Ok(())
}

/// Walks twelve firings of an hourly cron in Paris from `from` and returns the
/// gaps between them that are not one hour, with the local times around them.
async fn hourly_gaps(from: SystemTime) -> anyhow::Result<Vec<String>> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(from);
    let host = open(dir.path(), &clock).await?;
    let paris: Tz = "Europe/Paris".parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    host.schedule::<Tick>(
        "hourly",
        ScheduleSpec::cron("0 * * * *")
            .tz("Europe/Paris")
            .overlap(Overlap::AllowAll),
        1,
    )
    .await?;
    let fired = walk(&host, &clock, "hourly", 12).await?;
    host.shutdown().await?;
    let mut gaps = Vec::new();
    for pair in fired.windows(2) {
        if pair[1].duration_since(pair[0])? != HOUR {
            gaps.push(format!(
                "{} -> {}",
                local(pair[0], paris)?.to_rfc3339(),
                local(pair[1], paris)?.to_rfc3339()
            ));
        }
    }
    Ok(gaps)
}

/// An hourly cron in a time zone fires every real hour across spring-forward
/// (23 firings on the short day).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hourly_cron_in_a_time_zone_fires_every_hour_across_spring_forward() -> anyhow::Result<()>
{
    assert_eq!(
        hourly_gaps(utc(2027, 3, 27, 20)?).await?,
        Vec::<String>::new()
    );
    Ok(())
}

/// An hourly cron in a time zone fires in the repeated hour on the fall-back
/// night: after 02:00 CEST (00:00Z) comes 02:00 CET (01:00Z), then 03:00 CET
/// (25 firings on a 25-hour day), as crontab runs wildcard-hour jobs and
/// Temporal's calendar specs match both 02:00s. (The repeated hour used to start
/// nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hourly_cron_in_a_time_zone_fires_the_repeated_hour_on_fall_back() -> anyhow::Result<()>
{
    assert_eq!(
        hourly_gaps(utc(2027, 10, 30, 20)?).await?,
        Vec::<String>::new()
    );
    Ok(())
}

/// A cron expression that matches no date (February 30th) is refused or stored
/// as never firing: `schedule` answers promptly either way and the host goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_that_never_matches_does_not_hang_the_host() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    let r = within(
        LIMIT,
        "scheduling February 30th",
        host.schedule::<Tick>("never", ScheduleSpec::cron("0 0 30 2 *"), 1),
    )
    .await?;
    match r {
        Ok(()) => assert_eq!(info(&host, "never").await?.next_fire, None),
        Err(Error::InvalidSchedule { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
    }
    // The scheduler still serves other schedules.
    host.schedule::<Tick>("hourly", ScheduleSpec::every(HOUR), 2)
        .await?;
    clock.advance(HOUR);
    until_past(&host, "hourly", t0() + HOUR).await?;
    assert!(exists(&host, &format!("hourly/{}", T0_MS + HOUR_MS)).await?);
    host.shutdown().await?;
    Ok(())
}

/// The start time of run `run` (its first record's time), once it exists.
async fn started_at(host: &Host, run: &str) -> anyhow::Result<SystemTime> {
    within(LIMIT, &format!("run `{run}`"), async {
        loop {
            match host.run(run).records().await {
                Ok(r) if !r.is_empty() => return anyhow::Ok(r[0].at),
                Ok(_) | Err(Error::UnknownRun(_)) => {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    })
    .await?
}

/// Every firing of an hourly schedule with 45 minutes of jitter starts its own
/// run, no earlier than its fire time and no later than the jitter allows, for
/// twelve firings in a row (no firing dropped as missed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jitter_stays_within_bounds_for_every_firing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host = open(dir.path(), &clock).await?;
    let max = 45 * 60_000;
    host.schedule::<Tick>(
        "jit",
        ScheduleSpec::every(HOUR).jitter(Duration::from_millis(max)),
        1,
    )
    .await?;
    let mut delays = Vec::new();
    for h in 1..=12u64 {
        let fire = T0_MS + h * HOUR_MS;
        let at = ms(started_at(&host, &format!("jit/{fire}")).await?);
        assert!(
            fire <= at && at <= fire + max,
            "firing {h}: started {} ms after its time",
            at.saturating_sub(fire)
        );
        delays.push(at - fire);
    }
    delays.sort_unstable();
    delays.dedup();
    assert!(
        delays.len() > 1,
        "the jitter varies between firings: {delays:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// A jitter wider than the interval is capped below it (as Temporal caps it at
/// the interval): every nominal firing starts a run, none is dropped as "missed"
/// because the next one's jitter had not passed yet (two in ten were).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jitter_wider_than_the_interval_drops_no_firing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    host.schedule::<Tick>(
        "wide",
        ScheduleSpec::every(HOUR)
            .jitter(3 * HOUR)
            .overlap(Overlap::AllowAll),
        1,
    )
    .await?;
    // The clock skips from due time to due time until ten hours have passed.
    clock.set_auto(true);
    let until = t0() + 10 * HOUR;
    within(LIMIT, "ten virtual hours", async {
        while reel::Clock::now(&clock) < until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    clock.set_auto(false);
    // Firings at hours 1..=7 have passed their fire time plus the largest jitter.
    let mut missing = Vec::new();
    for h in 1..=7u64 {
        let run = format!("wide/{}", T0_MS + h * HOUR_MS);
        if !exists(&host, &run).await? {
            missing.push(h);
        }
    }
    assert!(
        missing.is_empty(),
        "firings that started no run: hours {missing:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Runs of schedule `id` that exist, by hour after T0 (1..=last).
async fn fired(host: &Host, id: &str, last: u64) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for h in 1..=last {
        if exists(host, &format!("{id}/{}", T0_MS + h * HOUR_MS)).await? {
            out.push(h);
        }
    }
    Ok(out)
}

/// Waits until the schedule's next fire is at hour `h` after T0 or later.
async fn until_hour(host: &Host, id: &str, h: u64) -> anyhow::Result<()> {
    until_past(
        host,
        id,
        t0() + HOUR * u32::try_from(h)? - Duration::from_millis(1),
    )
    .await?;
    Ok(())
}

/// A buffered firing of a schedule that is then deleted never starts, and one of
/// a schedule that is paused starts only once the schedule is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_firing_follows_a_later_pause_or_delete() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    let spec = || ScheduleSpec::every(HOUR).overlap(Overlap::BufferOne);
    host.schedule::<Hold>("del", spec(), ()).await?;
    host.schedule::<Hold>("pau", spec(), ()).await?;
    host.schedule::<Tick>("zz-witness", ScheduleSpec::every(HOUR), 0)
        .await?;
    for h in 1..=2 {
        clock.advance(HOUR);
        for id in ["del", "pau", "zz-witness"] {
            until_hour(&host, id, h + 1).await?;
        }
    }
    // Hour 1 runs, hour 2 is buffered behind it.
    assert_eq!(fired(&host, "del", 2).await?, vec![1]);
    assert_eq!(fired(&host, "pau", 2).await?, vec![1]);

    host.delete_schedule("del").await?;
    host.pause_schedule("pau").await?;
    for id in ["del", "pau"] {
        let first = host.handle::<Hold>(&format!("{id}/{}", T0_MS + HOUR_MS));
        first.signal("done", &false, "d").await?;
        within(LIMIT, "the first run", first.result()).await??;
    }
    // A full scheduler pass after the runs ended: the witness fires hour 3.
    clock.advance(HOUR);
    until_hour(&host, "zz-witness", 4).await?;
    assert_eq!(
        fired(&host, "del", 3).await?,
        vec![1],
        "a deleted schedule fired"
    );
    assert_eq!(
        fired(&host, "pau", 3).await?,
        vec![1],
        "a paused schedule fired"
    );

    host.resume_schedule("pau").await?;
    within(LIMIT, "the buffered firing after resume", async {
        while !fired(&host, "pau", 3).await?.contains(&2) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await??;
    host.shutdown().await?;
    Ok(())
}

/// `Skip` and `BufferOne` only hold back while the previous run is unfinished: a
/// previous run that failed or was cancelled lets the next firing start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_cancelled_previous_run_does_not_hold_back_the_next_firing()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    let ids = ["skip-f", "skip-c", "buf-f", "buf-c"];
    for id in ids {
        let o = if id.starts_with("skip") {
            Overlap::Skip
        } else {
            Overlap::BufferOne
        };
        host.schedule::<Hold>(id, ScheduleSpec::every(HOUR).overlap(o), ())
            .await?;
    }
    clock.advance(HOUR);
    for id in ids {
        until_hour(&host, id, 2).await?;
    }
    for id in ids {
        let first = host.handle::<Hold>(&format!("{id}/{}", T0_MS + HOUR_MS));
        if id.ends_with('f') {
            first.signal("done", &true, "d").await?;
            assert!(
                within(LIMIT, "the failing run", first.result())
                    .await?
                    .is_err()
            );
        } else {
            within(LIMIT, "the cancel", first.cancel("stop")).await??;
        }
    }
    clock.advance(HOUR);
    for id in ids {
        until_hour(&host, id, 3).await?;
        assert_eq!(fired(&host, id, 2).await?, vec![1, 2], "{id}");
    }
    host.shutdown().await?;
    Ok(())
}

/// A firing that waited for its workflow to be registered again (no version of it
/// on the host for hours) is a missed firing: `CatchUp::None` drops it, `Last`
/// starts only the latest, `All { within }` the ones inside the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firings_missed_while_unregistered_follow_the_catch_up_policy() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = open(&path, &clock).await?;
    let every = || ScheduleSpec::every(HOUR).overlap(Overlap::AllowAll);
    host.schedule::<Tick>("none", every().catch_up(CatchUp::None), 1)
        .await?;
    host.schedule::<Tick>("last", every().catch_up(CatchUp::Last), 2)
        .await?;
    host.schedule::<Tick>(
        "all",
        every().catch_up(CatchUp::All {
            within: 2 * HOUR + HOUR / 4,
        }),
        3,
    )
    .await?;
    host.shutdown().await?;

    // Five and a half hours on a host that registers no `tick`.
    let host = builder(&path, &clock).register(Hold).build().await?;
    for _ in 0..11 {
        clock.advance(HOUR / 2);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for id in ["none", "last", "all"] {
        assert_eq!(info(&host, id).await?.last_run, None, "{id}");
    }
    host.shutdown().await?;

    let host = open(&path, &clock).await?;
    for id in ["none", "last", "all"] {
        until_hour(&host, id, 6).await?;
    }
    assert_eq!(fired(&host, "none", 6).await?, Vec::<u64>::new());
    assert_eq!(fired(&host, "last", 6).await?, vec![5]);
    assert_eq!(fired(&host, "all", 6).await?, vec![4, 5]);
    host.shutdown().await?;
    Ok(())
}

/// Updating a schedule while a firing of its old spec is overdue (it was paused)
/// starts none of the old spec's firings: the new spec fires from now on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_drops_the_old_specs_missed_firings() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    host.schedule::<Tick>("u", ScheduleSpec::every(HOUR), 1)
        .await?;
    host.pause_schedule("u").await?;
    clock.advance(3 * HOUR + HOUR / 2);
    host.update_schedule::<Tick>("u", ScheduleSpec::every(2 * HOUR), 2)
        .await?;
    let i = info(&host, "u").await?;
    assert!(i.paused, "an update keeps the pause");
    assert_eq!(i.next_fire, None);
    host.resume_schedule("u").await?;
    assert_eq!(info(&host, "u").await?.next_fire, Some(t0() + 4 * HOUR));
    clock.advance(HOUR);
    until_hour(&host, "u", 5).await?;
    assert_eq!(fired(&host, "u", 4).await?, vec![4]);
    let run = host.handle::<Tick>(&format!("u/{}", T0_MS + 4 * HOUR_MS));
    assert_eq!(within(LIMIT, "the updated run", run.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}
