//! Invariant 8: one damaged record harms one run. A record that does not decode in
//! the log, the run metadata, the active set or the timer index parks (or reports)
//! the run it belongs to with `Error::Corrupt` naming the keyspace, the run and the
//! record; the host still opens, `runs()` still lists everything, and every other run
//! resumes and completes.

mod common;

use std::path::Path;
use std::time::Duration;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel::{Ctx, Error, Host, RunStatus, Workflow};

/// A step, a signal, a step.
struct Job;
impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let a = ctx
            .step("a", |_| async move { Ok::<_, String>(n * 2) })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("b", |_| async move { Ok::<_, String>(a + go) })
            .await
    }
}

/// A step, a durable sleep of `ms`, a step.
struct Napper;
impl Workflow for Napper {
    const NAME: &'static str = "napper";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, ms: u64) -> reel::Result<u64> {
        let a = ctx
            .step("a", |_| async move { Ok::<_, String>(ms) })
            .await?;
        ctx.sleep(Duration::from_millis(ms)).await?;
        ctx.step("b", |_| async move { Ok::<_, String>(a + 1) })
            .await
    }
}

async fn open(dir: &Path) -> reel::Result<Host> {
    common::hosts::open_two(dir, Job, Napper).await
}

fn log_key(run: &str, seq: u64) -> Vec<u8> {
    let mut k = run.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Damages one record of each kind, with fjall directly.
fn damage(dir: &Path) -> anyhow::Result<()> {
    let db = Database::builder(dir).open()?;
    let ks = |name: &str| db.keyspace(name, KeyspaceCreateOptions::default);
    let (log, runs, active, timers) = (ks("log")?, ks("runs")?, ks("active")?, ks("timers")?);

    // bad-log: its StepCompleted (sequence 2) becomes garbage.
    anyhow::ensure!(log.contains_key(log_key("bad-log", 2))?);
    log.insert(log_key("bad-log", 2), [0xc1, 0xff, 0x00])?;
    // bad-active: its active-set record does not decode.
    anyhow::ensure!(active.contains_key("bad-active")?);
    active.insert("bad-active", [0x92, 0x01])?;
    // bad-runs (finished): its metadata record does not decode.
    anyhow::ensure!(runs.contains_key("bad-runs")?);
    runs.insert("bad-runs", b"not messagepack \xc1")?;
    // bad-timer: its timer key loses its timer id (not UTF-8 any more), and a key
    // naming no run at all appears.
    let key = timers
        .iter()
        .map(|g| g.key())
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .find(|k| k.windows(10).any(|w| w == b"bad-timer\0"))
        .ok_or_else(|| anyhow::anyhow!("bad-timer has a timer"))?;
    timers.remove(key.clone())?;
    let mut broken = key[..8 + "bad-timer".len() + 1].to_vec();
    broken.extend_from_slice(b"\xff\xfe");
    timers.insert(broken, [])?;
    timers.insert([0x07, 0x07], [])?;
    db.persist(PersistMode::SyncAll)?;
    Ok(())
}

fn assert_corrupt(e: Error, keyspace: &str, run: &str, seq: Option<u64>) {
    match &e {
        Error::Corrupt {
            keyspace: k,
            run_id: r,
            seq: s,
            ..
        } => assert_eq!((k.as_str(), r.as_str(), *s), (keyspace, run, seq), "{e}"),
        other => panic!("expected Corrupt in {keyspace} for {run}, got {other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(&format!("`{keyspace}`")) && text.contains(run),
        "{text}"
    );
}

fn status_of<'a>(runs: &'a [reel::RunInfo], run: &str) -> &'a RunStatus {
    &runs
        .iter()
        .find(|r| r.run_id == run)
        .unwrap_or_else(|| panic!("{run} is listed"))
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrupt_record_parks_one_run_and_the_others_complete() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for run in ["ok-1", "ok-2", "bad-log", "bad-active", "bad-runs"] {
        host.start::<Job>(run, 10)
            .await?
            .wait_until_suspended()
            .await?;
    }
    let finished = host.handle::<Job>("bad-runs");
    finished.signal("go", &1u32, "go-1").await?;
    assert_eq!(finished.result().await?, 21);
    host.start::<Napper>("ok-nap", 50)
        .await?
        .wait_until_suspended()
        .await?;
    host.start::<Napper>("bad-timer", 60_000)
        .await?
        .wait_until_suspended()
        .await?;
    host.shutdown().await?;

    damage(dir.path())?;

    let host = open(dir.path()).await?;
    // Every other run goes on: signals, timers, steps.
    for (i, run) in ["ok-1", "ok-2"].into_iter().enumerate() {
        let h = host.handle::<Job>(run);
        h.signal("go", &(i as u32), "go-1").await?;
        assert_eq!(h.result().await?, 20 + i as u32);
    }
    assert_eq!(host.handle::<Napper>("ok-nap").result().await?, 51);

    // The damaged ones are reported, each naming its keyspace, run and record.
    let bad_active = host.handle::<Job>("bad-active");
    assert_corrupt(
        bad_active.result().await.expect_err("parked"),
        "active",
        "bad-active",
        None,
    );
    assert!(
        matches!(bad_active.status().await?, RunStatus::Parked { error } if error.contains("`active`"))
    );
    let bad_timer = host.handle::<Napper>("bad-timer");
    assert_corrupt(
        bad_timer.result().await.expect_err("parked"),
        "timers",
        "bad-timer",
        None,
    );
    assert_corrupt(
        host.handle::<Job>("bad-runs")
            .result()
            .await
            .expect_err("unreadable"),
        "runs",
        "bad-runs",
        None,
    );
    // The log is read when the run wakes: it is parked then.
    let bad_log = host.handle::<Job>("bad-log");
    assert!(bad_log.signal("go", &1u32, "go-1").await.is_err());
    assert_corrupt(
        bad_log.result().await.expect_err("parked"),
        "log",
        "bad-log",
        Some(2),
    );

    let runs = host.runs().await?;
    assert_eq!(runs.len(), 7, "{runs:?}");
    for run in ["ok-1", "ok-2", "ok-nap"] {
        assert_eq!(status_of(&runs, run), &RunStatus::Completed);
    }
    for (run, keyspace) in [
        ("bad-log", "log"),
        ("bad-active", "active"),
        ("bad-runs", "runs"),
        ("bad-timer", "timers"),
    ] {
        match status_of(&runs, run) {
            RunStatus::Parked { error } => {
                assert!(
                    error.contains(&format!("`{keyspace}`")) && error.contains(run),
                    "{error}"
                );
            }
            other => panic!("{run}: expected Parked, got {other:?}"),
        }
    }
    host.shutdown().await?;
    Ok(())
}
