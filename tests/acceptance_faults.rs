//! Acceptance, DESIGN invariant 8 ("a corrupt or truncated log record, a full disk.
//! None of these panics the host or damages another run") with the store failing
//! under one run while others go on:
//! - a disk that is full for one run's writes, for a while: its start, its signal,
//!   its steps get typed errors (or it parks), every other run completes meanwhile;
//!   once the disk has room again the same host (no restart) finishes it with the
//!   right result, every step body having run once, and no acknowledged write lost;
//! - reads failing for one run: typed errors for that run alone;
//! - a log with a record missing (a hole where a step's completion was), written
//!   while no host ran: the run is not silently replayed over the hole (its step is
//!   not run a second time, it does not complete), and every other run goes on.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Counter, within};
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel::{Ctx, Error, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(30);
const FULL: &str = "No space left on device (os error 28)";

/// A step, a signal, a step; each body counted.
#[derive(Clone)]
struct Job {
    a: Counter,
    b: Counter,
}
impl Workflow for Job {
    const NAME: &'static str = "acc-f-job";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let a = ctx
            .step("a", |_| async move {
                self.a.bump();
                Ok::<_, String>(n * 2)
            })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("b", |_| async move {
            self.b.bump();
            Ok::<_, String>(a + go)
        })
        .await
    }
}

fn job() -> Job {
    Job {
        a: Counter::default(),
        b: Counter::default(),
    }
}

async fn host_over(store: std::sync::Arc<dyn reel::Store>, job: &Job) -> reel::Result<Host> {
    Host::builder()
        .store(store)
        .register(job.clone())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await
}

fn typed_storage<T: std::fmt::Debug>(what: &str, r: &reel::Result<T>) {
    match r {
        Ok(_) | Err(Error::Storage(_)) | Err(Error::Corrupt { .. }) => {}
        Err(e) => panic!("{what}: expected a value or a storage error, got {e:?}"),
    }
}

/// Waits until `run` has ended or parked; its status then.
async fn settled(run: &reel::AnyRun) -> anyhow::Result<RunStatus> {
    within(LIMIT, run.id(), async {
        loop {
            match run.status().await {
                Ok(
                    s @ (RunStatus::Completed
                    | RunStatus::Failed { .. }
                    | RunStatus::Cancelled
                    | RunStatus::Parked { .. }),
                ) => return s,
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await
}

/// The disk is full for one run's writes from its first step on: the other runs
/// start, take signals and complete meanwhile. Once the disk has room again, the
/// same host finishes the victim with the right result; each step body of every
/// run ran exactly once per run, and every acknowledged write is in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_for_one_run_spares_the_others_and_heals_in_place() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let job = job();
    let host = host_over(faults.clone(), &job).await?;

    // Writes of `victim` fail after its start was recorded, until healed.
    let full = faults.inject(
        Fault::fail(Op::Submit)
            .for_run("victim")
            .after(1)
            .until_healed()
            .message(FULL),
    );
    let victim = host.start::<Job>("victim", 1).await?;
    let others: Vec<String> = (0..6).map(|i| format!("other-{i}")).collect();
    for (i, id) in others.iter().enumerate() {
        host.start::<Job>(id, 10 + i as u32).await?;
    }
    let victim_state = settled(&victim.untyped()).await.ok();
    // A signal to the victim meanwhile is a typed error or is kept.
    let sent = within(
        LIMIT,
        "a signal to the victim",
        victim.signal("go", &5u32, "v-go"),
    )
    .await?;
    match &sent {
        Ok(()) | Err(Error::Storage(_)) | Err(Error::RunFinished(_)) => {}
        Err(e) => panic!("signal to the victim on a full disk: {e:?}"),
    }
    for (i, id) in others.iter().enumerate() {
        let h = host.handle::<Job>(id);
        within(LIMIT, id, h.wait_until_suspended()).await??;
        h.signal("go", &1u32, "go").await?;
        assert_eq!(
            within(LIMIT, id, h.result()).await??,
            (10 + i as u32) * 2 + 1,
            "{id}"
        );
    }
    if let Some(s) = &victim_state {
        assert!(
            matches!(s, RunStatus::Parked { error } if error.contains("No space left")),
            "the victim on a full disk: {s:?}"
        );
    }

    // Room again: the victim goes on in this host.
    faults.heal_one(full);
    if matches!(victim.status().await?, RunStatus::Parked { .. }) {
        victim.retry().await?;
    }
    within(LIMIT, "the victim waits", victim.wait_until_suspended())
        .await?
        .ok();
    // Same signal id: delivered once whether or not the first try was kept.
    common::retry(20, || async {
        match victim.signal("go", &5u32, "v-go").await {
            Err(Error::RunFinished(_)) => Ok(()),
            other => other,
        }
    })
    .await?;
    assert_eq!(within(LIMIT, "the victim", victim.result()).await??, 7);
    let received = victim
        .events()
        .await?
        .iter()
        .filter(|e| e.kind() == "SignalReceived")
        .count();
    assert_eq!(received, 1);
    let runs = others.len() as u32 + 1;
    assert_eq!(job.b.get(), runs, "step b ran more than once for some run");
    // Step `a` of the victim may run again while its completion cannot be
    // recorded (at least once); every other body ran once per run.
    assert!(job.a.get() >= runs, "step a ran {} times", job.a.get());
    host.shutdown().await?;
    faults
        .check_acknowledged_in(&*FjallStore::open(dir.path())?)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
}

/// A start refused by a full disk is a typed error naming the cause and leaves no
/// run behind; the same start succeeds once the disk has room, and nothing else
/// was harmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_a_full_disk_is_a_typed_error_and_leaves_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let job = job();
    let host = host_over(faults.clone(), &job).await?;
    let other = host.start::<Job>("other", 3).await?;
    within(LIMIT, "other waits", other.wait_until_suspended()).await??;
    let full = faults.inject(
        Fault::fail(Op::Submit)
            .for_run("new")
            .until_healed()
            .message(FULL),
    );
    let started = within(LIMIT, "a start on a full disk", host.start::<Job>("new", 2)).await?;
    match &started {
        Err(Error::Storage(m)) => assert!(m.contains("No space left"), "{m}"),
        other => panic!("start on a full disk: {other:?}"),
    }
    assert!(matches!(
        host.run("new").status().await,
        Err(Error::UnknownRun(_))
    ));
    assert_eq!(job.a.get(), 1, "only `other` ran its first step");
    faults.heal_one(full);
    let new = host.start::<Job>("new", 2).await?;
    new.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "new", new.result()).await??, 5);
    other.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "other", other.result()).await??, 7);
    host.shutdown().await?;
    Ok(())
}

/// Reads failing for one run give that run's callers typed errors (never a panic or
/// a wrong answer) and nothing for any other run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_reads_for_one_run_are_typed_errors_for_it_alone() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let job = job();
    let host = host_over(faults.clone(), &job).await?;
    let sick = host.start::<Job>("sick", 1).await?;
    let well = host.start::<Job>("well", 2).await?;
    within(LIMIT, "sick waits", sick.wait_until_suspended()).await??;
    within(LIMIT, "well waits", well.wait_until_suspended()).await??;
    let mut ids = Vec::new();
    for op in [Op::ReadLog, Op::GetRun, Op::LastEvent, Op::NextSeq] {
        ids.push(faults.inject(Fault::fail(op).for_run("sick").until_healed()));
    }
    typed_storage("status", &within(LIMIT, "status", sick.status()).await?);
    typed_storage("events", &within(LIMIT, "events", sick.events()).await?);
    typed_storage("records", &within(LIMIT, "records", sick.records()).await?);
    typed_storage("info", &within(LIMIT, "info", sick.info()).await?);
    // The well run is untouched.
    well.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "well", well.result()).await??, 5);
    for id in ids {
        faults.heal_one(id);
    }
    // Healed: the sick run is as it was and goes on.
    let status = sick.status().await?;
    if matches!(status, RunStatus::Parked { .. }) {
        sick.retry().await?;
    }
    common::retry(20, || async {
        match sick.signal("go", &1u32, "g").await {
            Err(Error::RunFinished(_)) => Ok(()),
            other => other,
        }
    })
    .await?;
    assert_eq!(within(LIMIT, "sick", sick.result()).await??, 3);
    host.shutdown().await?;
    Ok(())
}

fn log_key(run: &str, seq: u64) -> Vec<u8> {
    let mut k = run.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// A record missing from the middle of a waiting run's log (removed while no host
/// ran: the step's completion is gone, the wait after it is there) is not silently
/// replayed over: the recorded step does not run again, the run does not complete
/// on a log that lost a record, it is reported; every other run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hole_in_a_log_is_reported_not_replayed_over() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let job = job();
    let open = |path: &Path, job: &Job| {
        Host::builder()
            .path(path)
            .register(job.clone())
            .restart_limit(2, Duration::from_secs(60))
            .build()
    };
    let host = open(dir.path(), &job).await?;
    let holed = host.start::<Job>("holed", 1).await?;
    let fine = host.start::<Job>("fine", 2).await?;
    within(LIMIT, "holed waits", holed.wait_until_suspended()).await??;
    within(LIMIT, "fine waits", fine.wait_until_suspended()).await??;
    let records = holed.records().await?;
    let completed = records
        .iter()
        .find(|r| r.event.kind() == "StepCompleted")
        .map(|r| r.seq)
        .ok_or_else(|| anyhow::anyhow!("no StepCompleted in {records:?}"))?;
    assert!(
        records.iter().any(|r| r.seq > completed),
        "the wait follows the step: {records:?}"
    );
    host.shutdown().await?;
    assert_eq!(job.a.get(), 2);

    {
        let db = Database::builder(dir.path()).open()?;
        let log = db.keyspace("log", KeyspaceCreateOptions::default)?;
        anyhow::ensure!(log.contains_key(log_key("holed", completed))?);
        log.remove(log_key("holed", completed))?;
        db.persist(PersistMode::SyncAll)?;
    }

    let job2 = Job {
        a: job.a.clone(),
        b: job.b.clone(),
    };
    let host = open(dir.path(), &job2).await?;
    let holed = host.handle::<Job>("holed");
    let fine = host.handle::<Job>("fine");
    let sent = within(
        LIMIT,
        "a signal to the holed run",
        holed.signal("go", &1u32, "g"),
    )
    .await?;
    let ended = within(LIMIT, "the holed run", async {
        loop {
            match holed.status().await {
                Ok(RunStatus::Running | RunStatus::Suspended { .. }) => {
                    tokio::time::sleep(Duration::from_millis(5)).await
                }
                other => return other,
            }
        }
    })
    .await;
    fine.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "fine", fine.result()).await??, 5);
    assert_eq!(
        job.a.get(),
        2,
        "a recorded step ran again over the hole (signal: {sent:?}, status: {ended:?}, log: {:?})",
        holed.events().await
    );
    assert!(
        !matches!(ended, Ok(Ok(RunStatus::Completed))),
        "the run completed over a hole in its log: {:?}",
        holed.events().await
    );
    host.shutdown().await?;
    Ok(())
}
