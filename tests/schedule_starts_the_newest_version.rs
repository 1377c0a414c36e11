//! A schedule names a workflow, not a version: each firing starts the newest
//! version of the workflow registered on the host. A schedule created under v1
//! fires v2 runs once a deploy registers only v2. While no version of the name is
//! registered, the schedule is kept and its due firing waits for a host that
//! registers it. Time is a `TestClock` moved by the test.
//!
//! Why it fails without the fix: the firing started the version recorded when the
//! schedule was created; with only v2 registered every firing failed to start, was
//! logged and dropped, and the schedule moved on without ever running again.

mod common;

use std::path::Path;
use std::time::Duration;

use common::schedules::{HOUR, info, run_id, t0, until_handled};
use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, HostBuilder, ScheduleSpec, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Version 1 of `report`.
struct ReportV1;

impl Workflow for ReportV1 {
    const NAME: &'static str = "report";
    const VERSION: u32 = 1;
    type Input = u32;
    type Output = String;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<String> {
        Ok(format!("v1:{n}"))
    }
}

/// Version 2 of `report`: the same input, a new output.
struct ReportV2;

impl Workflow for ReportV2 {
    const NAME: &'static str = "report";
    const VERSION: u32 = 2;
    type Input = u32;
    type Output = String;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<String> {
        Ok(format!("v2:{n}"))
    }
}

/// Another workflow, on a schedule of its own.
struct Ping;

impl Workflow for Ping {
    const NAME: &'static str = "ping";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

fn builder(path: &Path, clock: &TestClock) -> HostBuilder {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(Ping)
}

/// The version a run started on.
async fn version_of(host: &Host, run: &str) -> anyhow::Result<u32> {
    let events = host.run(run).events().await?;
    match events.first() {
        Some(Event::RunStarted { version, .. }) => Ok(*version),
        other => anyhow::bail!("{run} begins with {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_created_under_v1_fires_v2_after_a_deploy() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = builder(&path, &clock).register(ReportV1).build().await?;
    host.schedule::<ReportV1>("report", ScheduleSpec::every(HOUR), 7)
        .await?;
    host.shutdown().await?;

    // The deploy: only v2 is registered now.
    clock.advance(HOUR);
    let host = builder(&path, &clock).register(ReportV2).build().await?;
    until_handled(&host, "report", 1).await?;
    let run = host.handle::<ReportV2>(&run_id("report", 1));
    assert_eq!(within(LIMIT, "hour 1", run.result()).await??, "v2:7");
    assert_eq!(version_of(&host, &run_id("report", 1)).await?, 2);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_whose_workflow_is_not_registered_waits_for_a_host_that_is() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    let host = builder(&path, &clock).register(ReportV1).build().await?;
    host.schedule::<ReportV1>("report", ScheduleSpec::every(HOUR), 7)
        .await?;
    // Handled after `report` in every pass (passes go by id).
    host.schedule::<Ping>("z-witness", ScheduleSpec::every(HOUR), ())
        .await?;
    host.shutdown().await?;

    // A host that registers no version of `report`: its firing at hour 1 waits.
    clock.advance(HOUR);
    let host = builder(&path, &clock).build().await?;
    until_handled(&host, "z-witness", 1).await?;
    let report = info(&host, "report").await?;
    assert_eq!(report.next_fire, Some(t0() + HOUR), "the firing waits");
    assert_eq!(report.last_run, None);
    assert!(matches!(
        host.run(&run_id("report", 1)).status().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;

    // A host that registers it handles the waiting firing (on time still, so every
    // catch-up policy starts it).
    let host = builder(&path, &clock).register(ReportV2).build().await?;
    until_handled(&host, "report", 1).await?;
    let run = host.handle::<ReportV2>(&run_id("report", 1));
    assert_eq!(within(LIMIT, "hour 1", run.result()).await??, "v2:7");
    host.shutdown().await?;
    Ok(())
}
