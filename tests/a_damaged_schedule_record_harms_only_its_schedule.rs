//! Invariant 8 for the `schedules` keyspace: one schedule record that no longer
//! decodes (truncated on disk while no host ran) is that schedule's problem only.
//! The host opens; every other schedule still fires on time; `schedules()` still
//! lists the others; operations naming the damaged schedule get a typed error (no
//! panic, no hang), and deleting it removes the damage.

mod common;

use std::path::Path;
use std::time::Duration;

use common::schedules::{HOUR, run_id, t0};
use common::within;
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel::testing::TestClock;
use reel::{Ctx, Error, Host, ScheduleSpec, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

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

async fn open(path: &Path, clock: &TestClock) -> reel::Result<Host> {
    common::hosts::open_on(path, clock, Tick).await
}

/// Cuts schedule `id`'s stored record in half, with fjall directly.
fn truncate_schedule(dir: &Path, id: &str) -> anyhow::Result<()> {
    let db = Database::builder(dir).open()?;
    let schedules = db.keyspace("schedules", KeyspaceCreateOptions::default)?;
    let value = schedules
        .get(id)?
        .ok_or_else(|| anyhow::anyhow!("schedule `{id}` is stored"))?;
    schedules.insert(id, &value[..value.len() / 2])?;
    db.persist(PersistMode::SyncAll)?;
    Ok(())
}

/// Waits until the run `run` exists (a firing started it) and returns its result.
async fn fired(host: &Host, run: &str) -> anyhow::Result<u32> {
    let h = host.handle::<Tick>(run);
    within(LIMIT, &format!("the firing `{run}`"), async {
        loop {
            match h.status().await {
                Ok(_) => return anyhow::Ok(h.result().await?),
                Err(Error::UnknownRun(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => return Err(e.into()),
            }
        }
    })
    .await?
}

/// Two schedules, every hour; the `bad` one's record is truncated while no host runs.
async fn damaged_store(path: &Path, clock: &TestClock) -> anyhow::Result<()> {
    let host = open(path, clock).await?;
    host.schedule::<Tick>("good", ScheduleSpec::every(HOUR), 7)
        .await?;
    host.schedule::<Tick>("bad", ScheduleSpec::every(HOUR), 9)
        .await?;
    host.shutdown().await?;
    truncate_schedule(path, "bad")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_schedules_fire_past_a_damaged_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    damaged_store(&path, &clock).await?;

    let host = open(&path, &clock).await?;
    clock.advance(HOUR);
    assert_eq!(fired(&host, &run_id("good", 1)).await?, 7);
    clock.advance(HOUR);
    assert_eq!(fired(&host, &run_id("good", 2)).await?, 7);
    // The damaged one starts nothing (it cannot be read), and is not misread.
    assert!(matches!(
        host.handle::<Tick>(&run_id("bad", 1)).status().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_lists_the_others_past_a_damaged_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    damaged_store(&path, &clock).await?;

    let host = open(&path, &clock).await?;
    let listed = host.schedules().await?;
    assert!(listed.iter().any(|s| s.id == "good"), "{listed:?}");
    host.shutdown().await?;
    Ok(())
}

/// The host opens, every call naming the damaged schedule is a
/// typed error that names it, and no call panics or hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_a_damaged_schedule_are_typed_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    damaged_store(&path, &clock).await?;

    let host = open(&path, &clock).await?;
    let named = |r: reel::Result<()>, what: &str| match r {
        Err(e @ (Error::Storage(_) | Error::Corrupt { .. })) => {
            assert!(e.to_string().contains("bad"), "{what}: {e}");
        }
        other => panic!("{what}: expected a typed error naming `bad`, got {other:?}"),
    };
    named(
        within(LIMIT, "pause", host.pause_schedule("bad")).await?,
        "pause",
    );
    named(
        within(LIMIT, "resume", host.resume_schedule("bad")).await?,
        "resume",
    );
    // Creating over it does not silently replace what cannot be read.
    named(
        within(
            LIMIT,
            "schedule over it",
            host.schedule::<Tick>("bad", ScheduleSpec::every(HOUR), 1),
        )
        .await?,
        "schedule over it",
    );
    // The good one still answers its own calls.
    host.pause_schedule("good").await?;
    host.resume_schedule("good").await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_damaged_schedule_removes_the_damage() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let clock = TestClock::new(t0());
    damaged_store(&path, &clock).await?;

    let host = open(&path, &clock).await?;
    within(LIMIT, "delete", host.delete_schedule("bad")).await??;
    let listed = host.schedules().await?;
    assert_eq!(
        listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["good"]
    );
    clock.advance(HOUR);
    assert_eq!(fired(&host, &run_id("good", 1)).await?, 7);
    host.shutdown().await?;
    Ok(())
}
