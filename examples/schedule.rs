//! A nightly report on a durable schedule, run through a week in milliseconds.
//!
//! ```text
//! cargo run --example schedule
//! ```
//!
//! The host runs on `reel::testing::TestClock` in auto mode: whenever every run
//! only waits, time jumps to the next due timer or firing. The schedule fires at
//! 03:00 in Paris every night (02:00 UTC in January); each firing starts a run
//! named `nightly/<fire time in ms>`, which sleeps an hour (the report "takes"
//! an hour) and returns the time it finished. The example checks:
//!
//! - seven nights fire, each run finishing at 04:00 Paris time of its night;
//! - the schedule lists its next fire time, the eighth night;
//! - after a restart on the same store (the clock stands still meanwhile), the
//!   schedule is still there and fires the next night.
//!
//! Exits non-zero if any of these fails.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, ensure};
use reel::testing::TestClock;
use reel::{Ctx, Error, Host, ScheduleSpec, Workflow};

const DATA_DIR: &str = "reel-data/schedule";
const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;
/// 2027-01-10T00:00:00Z.
const START_MS: u64 = 1_799_539_200_000;
/// 03:00 in Paris on 2027-01-10, in ms since the epoch.
const FIRST_NIGHT_MS: u64 = START_MS + 2 * HOUR_MS;

/// The nightly report: an hour of work, then the time it finished.
struct Report;

impl Workflow for Report {
    const NAME: &'static str = "report";
    type Input = String;
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _title: String) -> reel::Result<SystemTime> {
        ctx.sleep(Duration::from_secs(3600)).await?;
        ctx.now().await
    }
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

async fn open(clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(DATA_DIR)
        .clock(clock.clone())
        .register(Report)
        .build()
        .await
}

/// Waits for the run of the night starting at `night_ms` and checks when it
/// finished.
async fn check_night(host: &Host, night_ms: u64) -> anyhow::Result<()> {
    let run_id = format!("nightly/{night_ms}");
    let run = host.handle::<Report>(&run_id);
    let finished = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match run.result().await {
                Err(Error::UnknownRun(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
                other => return other,
            }
        }
    })
    .await
    .with_context(|| format!("run {run_id} never finished"))??;
    ensure!(
        finished == at(night_ms + HOUR_MS),
        "{run_id} finished at {finished:?}, not an hour after it fired"
    );
    println!(
        "{run_id}: fired on night {}, finished an hour later",
        (night_ms - FIRST_NIGHT_MS) / DAY_MS + 1
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(DATA_DIR);
    let clock = TestClock::auto(at(START_MS));
    let host = open(&clock).await?;
    host.schedule::<Report>(
        "nightly",
        ScheduleSpec::cron("0 3 * * *").tz("Europe/Paris"),
        "sales".to_owned(),
    )
    .await?;
    let began = std::time::Instant::now();
    for night in 0..7 {
        check_night(&host, FIRST_NIGHT_MS + night * DAY_MS).await?;
    }
    println!("a week of nights took {:?}", began.elapsed());
    // Hold the clock still across the restart.
    clock.set_auto(false);
    host.shutdown().await?;

    let host = open(&clock).await?;
    let schedules = host.schedules().await?;
    let nightly = schedules
        .iter()
        .find(|s| s.id == "nightly")
        .context("the schedule survived the restart")?;
    let next = nightly.next_fire.context("a next fire time")?;
    ensure!(
        next >= at(FIRST_NIGHT_MS + 7 * DAY_MS),
        "next fire time {next:?} is before the eighth night"
    );
    println!("after a restart the schedule fires next at {next:?}");
    let next_ms = u64::try_from(next.duration_since(UNIX_EPOCH)?.as_millis())?;
    clock.set_auto(true);
    check_night(&host, next_ms).await?;
    host.delete_schedule("nightly").await?;
    host.shutdown().await?;
    println!("ok");
    Ok(())
}
