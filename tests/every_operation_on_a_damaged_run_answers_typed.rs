//! Invariant 8, operation by operation: a run whose records were damaged while no
//! host ran answers every call of the operating API (status, result, events,
//! records, watch, signal, cancel, pause, resume, retry, delete, fork) with a value
//! or a typed error naming the damage, within a bound: none panics, none hangs.
//! Three moments of discovery: an unfinished run whose metadata record (`runs`) is
//! damaged but whose active-set record is not; a finished run whose terminal record
//! is truncated; and a passivated run whose log is damaged, found when its timer
//! fires while a `result()` caller already waits. Another run goes on throughout.

mod common;

use std::path::Path;
use std::time::Duration;

use common::schedules::{HOUR, t0};
use common::within;
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use futures::StreamExt;
use reel::testing::TestClock;
use reel::{AnyRun, Ctx, Error, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// A step, a durable sleep of `hours`, a signal `go`, a step.
struct Job;
impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, hours: u64) -> reel::Result<u64> {
        let a = ctx
            .step("a", |_| async move { Ok::<_, String>(hours) })
            .await?;
        ctx.sleep(HOUR * hours as u32).await?;
        let go: u64 = ctx.wait_for_signal("go").await?;
        ctx.step("b", |_| async move { Ok::<_, String>(a + go) })
            .await
    }
}

async fn open(path: &Path, clock: &TestClock) -> reel::Result<Host> {
    common::hosts::open_on(path, clock, Job).await
}

fn log_key(run: &str, seq: u64) -> Vec<u8> {
    let mut k = run.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn damage(dir: &Path, edit: impl FnOnce(&Database) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let db = Database::builder(dir).open()?;
    edit(&db)?;
    db.persist(PersistMode::SyncAll)?;
    Ok(())
}

/// Cuts a value in half.
fn truncate(db: &Database, keyspace: &str, key: &[u8]) -> anyhow::Result<()> {
    let ks = db.keyspace(keyspace, KeyspaceCreateOptions::default)?;
    let value = ks
        .get(key)?
        .ok_or_else(|| anyhow::anyhow!("{keyspace} holds {key:?}"))?;
    ks.insert(key, &value[..value.len() / 2])?;
    Ok(())
}

/// An answer is fine if it is a value or one of the typed errors a damaged record
/// can give; anything else (or a hang) fails, naming the call.
fn typed<T: std::fmt::Debug>(what: &str, r: reel::Result<T>) {
    match r {
        Ok(_)
        | Err(
            Error::Corrupt { .. }
            | Error::Storage(_)
            | Error::InvalidState { .. }
            | Error::RunFinished(_)
            | Error::InvalidCut { .. },
        ) => {}
        Err(other) => panic!("{what}: unexpected error {other:?}"),
    }
}

/// Calls every operation on `run`, each bounded: no panic, no hang, typed errors.
async fn every_operation(host: &Host, run: &AnyRun) -> anyhow::Result<()> {
    typed("status", within(LIMIT, "status", run.status()).await?);
    typed(
        "result",
        within(LIMIT, "result", run.result::<u64>()).await?,
    );
    typed("events", within(LIMIT, "events", run.events()).await?);
    typed("records", within(LIMIT, "records", run.records()).await?);
    // A watch yields what it can read, then an error or its end: it never hangs on a
    // run that cannot change.
    within(LIMIT, "watch to end or error", async {
        let mut watch = Box::pin(run.watch());
        while let Some(item) = watch.next().await {
            if let Err(e) = item {
                typed::<()>("watch", Err(e));
                break;
            }
        }
    })
    .await?;
    typed(
        "signal",
        within(LIMIT, "signal", run.signal("go", &1u64, "go-x")).await?,
    );
    typed("pause", within(LIMIT, "pause", run.pause()).await?);
    typed("resume", within(LIMIT, "resume", run.resume()).await?);
    typed("retry", within(LIMIT, "retry", run.retry()).await?);
    typed(
        "fork",
        within(
            LIMIT,
            "fork",
            host.fork(run.id(), 2, &format!("{}-fork", run.id())),
        )
        .await?
        .map(drop),
    );
    typed("cancel", within(LIMIT, "cancel", run.cancel("stop")).await?);
    typed("delete", within(LIMIT, "delete", run.delete()).await?);
    typed("runs", within(LIMIT, "runs", host.runs()).await?);
    typed("count", within(LIMIT, "count", host.count()).await?);
    Ok(())
}

/// `ok` goes on to completion: the damage is its neighbour's only.
async fn ok_completes(host: &Host, clock: &TestClock) -> anyhow::Result<()> {
    let ok = host.handle::<Job>("ok");
    clock.advance(2 * HOUR);
    common::until_log(&ok, LIMIT, "ok waits for go", |e| {
        common::waits_on(e, "go") == 1
    })
    .await?;
    ok.signal("go", &5u64, "go-1").await?;
    assert_eq!(within(LIMIT, "ok's result", ok.result()).await??, 6);
    Ok(())
}

async fn start_waiting(host: &Host, runs: &[&str]) -> anyhow::Result<()> {
    for run in runs {
        host.start::<Job>(run, 1)
            .await?
            .wait_until_suspended()
            .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_run_with_a_damaged_metadata_record() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    start_waiting(&host, &["ok", "bad"]).await?;
    host.shutdown().await?;
    damage(dir.path(), |db| truncate(db, "runs", b"bad"))?;

    let host = open(dir.path(), &clock).await?;
    let bad = host.run("bad");
    every_operation(&host, &bad).await?;
    ok_completes(&host, &clock).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_whose_terminal_record_is_truncated() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    start_waiting(&host, &["ok", "bad"]).await?;
    clock.advance(2 * HOUR);
    let bad = host.handle::<Job>("bad");
    common::until_log(&bad, LIMIT, "bad waits for go", |e| {
        common::waits_on(e, "go") == 1
    })
    .await?;
    bad.signal("go", &1u64, "go-1").await?;
    assert_eq!(bad.result().await?, 2);
    let last = bad.events().await?.len() as u64 - 1;
    host.shutdown().await?;
    damage(dir.path(), |db| truncate(db, "log", &log_key("bad", last)))?;

    let host = open(dir.path(), &clock).await?;
    let bad = host.run("bad");
    assert!(
        matches!(bad.result::<u64>().await, Err(Error::Corrupt { seq: Some(s), .. }) if s == last),
        "the result names the damaged record"
    );
    every_operation(&host, &bad).await?;
    ok_completes(&host, &clock).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passivated_run_found_damaged_when_its_timer_fires() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    start_waiting(&host, &["ok", "bad"]).await?;
    host.shutdown().await?;
    // The step's completion (sequence 2: RunStarted, StepStarted, StepCompleted).
    damage(dir.path(), |db| truncate(db, "log", &log_key("bad", 2)))?;

    let host = open(dir.path(), &clock).await?;
    let bad = host.handle::<Job>("bad");
    let waiter = tokio::spawn({
        let bad = bad.clone();
        async move { bad.result().await }
    });
    // The timer fires: the run is activated, its log read, and the damage found.
    ok_completes(&host, &clock).await?;
    let ended = within(LIMIT, "the waiter hears of the damage", waiter).await??;
    assert!(
        matches!(ended, Err(Error::Corrupt { seq: Some(2), .. })),
        "{ended:?}"
    );
    assert!(matches!(bad.status().await?, RunStatus::Parked { .. }));
    every_operation(&host, &host.run("bad")).await?;
    host.shutdown().await?;
    Ok(())
}

/// The way out of a run whose log cannot be read: the docs of `cancel` say a
/// parked run is cancelled at once; once cancelled it can be deleted. The actor
/// that found the log unreadable refuses every other message ("unavailable"), and
/// `delete` refuses an unfinished run: without the cancel, the damaged run could
/// never be removed through the API (parked, listed, counted, retried at every
/// open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_for_an_unreadable_log_can_be_cancelled_and_deleted() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock).await?;
    start_waiting(&host, &["ok", "bad"]).await?;
    host.shutdown().await?;
    damage(dir.path(), |db| truncate(db, "log", &log_key("bad", 2)))?;

    let host = open(dir.path(), &clock).await?;
    let bad = host.run("bad");
    // Woken, found damaged, parked.
    assert!(bad.signal("go", &1u64, "go-1").await.is_err());
    assert!(matches!(bad.status().await?, RunStatus::Parked { .. }));
    within(LIMIT, "cancel", bad.cancel("damaged")).await??;
    assert_eq!(bad.status().await?, RunStatus::Cancelled);
    within(LIMIT, "delete", bad.delete()).await??;
    assert!(matches!(bad.status().await, Err(Error::UnknownRun(_))));
    ok_completes(&host, &clock).await?;
    host.shutdown().await?;
    Ok(())
}
