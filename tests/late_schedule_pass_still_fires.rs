//! A firing handled late, but within a minute of its time, is on time: a scheduler
//! pass that fails (a storage error; it is retried every second) or runs late still
//! starts the firing that came due, even under `CatchUp::None`. A firing handled
//! more than a minute late was missed, and `CatchUp::None` skips it. Time is a
//! `TestClock`.
//!
//! Why it fails without the fix: with a one-second window, a pass retried twice
//! after a storage error, or a pass a few seconds late, treated the due firing as
//! missed and `CatchUp::None` dropped it without a run.

mod common;

use std::time::Duration;

use common::schedules::{HOUR, run_id, t0};
use common::within;
use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Error, FjallStore, Host, ScheduleSpec, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);

/// Completes at once.
struct Report;

impl Workflow for Report {
    const NAME: &'static str = "report";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}

fn hourly() -> ScheduleSpec {
    ScheduleSpec::every(HOUR).catch_up(CatchUp::None)
}

/// Waits until the schedule's next fire time is `hours` after T0: the firings
/// before it were handled.
async fn until_next_fire(host: &Host, id: &str, hours: u64) -> anyhow::Result<()> {
    let next = Some(t0() + HOUR * hours as u32);
    within(LIMIT, &format!("`{id}` to move to hour {hours}"), async {
        loop {
            let info = host.schedules().await?.into_iter().find(|s| s.id == id);
            if info.is_some_and(|s| s.next_fire == next) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_retried_after_storage_errors_still_fires() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    // The firing's run cannot be written three times: three passes fail, a second
    // apart.
    faults.inject(
        Fault::fail(Op::Submit)
            .for_run(&run_id("nightly", 1))
            .times(3),
    );
    let clock = TestClock::auto(t0());
    let host = Host::builder()
        .store(faults.clone())
        .clock(clock.clone())
        .register(Report)
        .build()
        .await?;
    host.schedule::<Report>("nightly", hourly(), 7).await?;
    let run = host.handle::<Report>(&run_id("nightly", 1));
    let records = within(LIMIT, "the firing's run", async {
        loop {
            match run.records().await {
                Ok(records) if !records.is_empty() => return anyhow::Ok(records),
                Ok(_) | Err(Error::UnknownRun(_)) => {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    })
    .await??;
    clock.set_auto(false);
    assert_eq!(faults.injected(), 3);
    assert_eq!(
        records[0].at,
        t0() + HOUR + Duration::from_secs(3),
        "started by the fourth pass, three seconds late"
    );
    assert_eq!(within(LIMIT, "the run", run.result()).await??, 7);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_within_a_minute_fires_and_later_is_skipped() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, Report).await?;
    host.schedule::<Report>("hourly", hourly(), 1).await?;

    // Hour 1 is handled 59 s late (a pass that took that long, a host that was
    // paused): on time, it starts.
    clock.advance(HOUR + Duration::from_secs(59));
    until_next_fire(&host, "hourly", 2).await?;
    let first = host.handle::<Report>(&run_id("hourly", 1));
    assert_eq!(within(LIMIT, "hour 1", first.result()).await??, 1);

    // Hour 2 is handled 61 s late: missed, and `None` drops it.
    clock.set(t0() + 2 * HOUR + Duration::from_secs(61));
    until_next_fire(&host, "hourly", 3).await?;
    let second = host.handle::<Report>(&run_id("hourly", 2));
    assert!(
        matches!(second.status().await, Err(Error::UnknownRun(_))),
        "a firing missed by more than a minute started under CatchUp::None"
    );
    host.shutdown().await?;
    Ok(())
}
