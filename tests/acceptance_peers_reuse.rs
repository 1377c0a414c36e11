//! Acceptance: deleting runs, retention and reusing run ids while work of the
//! deleted run is still in flight, ported from the peers' own suites (DBOS
//! `tests/test_workflow_management.py`, duroxide `tests/deletion_integration_tests.rs`
//! and `tests/bulk_deletion_integration_tests.rs`, Temporal sdk-go
//! `test/integration_test.go`) onto reel's run actors: an activation of a
//! finished run (for its child's late end, or a signal that read the run
//! waiting) racing its delete and a new run under its id, and such a signal
//! arriving after the delete (refused as `UnknownRun`, a bug this file found);
//! a duplicate start, a delete and a new start under one id; a delete racing a
//! supervisor restart; `signal_with_start` racing a delete; retention
//! passes racing new runs that take the ids they free; a parent's late child end
//! after the child's id was deleted and taken again; and a tight loop of ends,
//! deletes and new starts on a passivating host.
//!
//! Real fjall stores in temp dirs, most behind a `FaultStore` whose gates hold a
//! read's answer until the test releases it, which forces the order a race needs.
//! No wall-clock sleeps to wait for events (gates, bounded polls, a `TestClock`).
//! Each test names the peer test it ports.

mod common;
mod peers_reuse;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Counter, Gate, within};
use reel::{AnyRun, Ctx, Error, Event, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::FaultStore;

const LIMIT: Duration = Duration::from_secs(30);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Runs its step `work` (counted), then ends with its input when that is 1000 or
/// more, or waits for `go` and ends with `input * 100 + go`.
#[derive(Clone, Default)]
struct Job {
    steps: Counter,
}

impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, input: u32) -> reel::Result<u32> {
        let steps = self.steps.clone();
        let n = ctx
            .step("work", move |_| {
                let steps = steps.clone();
                async move {
                    steps.bump();
                    Ok::<_, String>(input)
                }
            })
            .await?;
        if n >= 1000 {
            return Ok(n);
        }
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(n * 100 + go)
    }
}

/// Waits for `go`; asked to cancel, it cleans up in a shielded step held by its
/// gate, and ends cancelled.
#[derive(Clone)]
struct Worker {
    cleanup: Arc<Gate>,
}

impl Workflow for Worker {
    const NAME: &'static str = "worker";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        match ctx.wait_for_signal::<u32>("go").await {
            Err(Error::Cancelled(reason)) => {
                let gate = self.cleanup.clone();
                ctx.shielded()
                    .step("cleanup", move |_| {
                        let gate = gate.clone();
                        async move {
                            gate.wait().await;
                            Ok::<_, String>(())
                        }
                    })
                    .await?;
                Err(Error::Cancelled(reason))
            }
            other => other,
        }
    }
}

/// `Boss` input: waits on its `Worker` `<id>-worker`.
const ON_THE_WORKER: u32 = 0;

/// Waits on its worker (`ON_THE_WORKER`), or for `go` (anything else).
struct Boss;

impl Workflow for Boss {
    const NAME: &'static str = "boss";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<u32> {
        if mode == ON_THE_WORKER {
            let worker = format!("{}-worker", ctx.run_id());
            return ctx.child::<Worker>(&worker, ()).await;
        }
        ctx.wait_for_signal("go").await
    }
}

/// A host on `faults` running `Job`, `Boss` and `Worker` (its cleanup held by `cleanup`).
async fn fault_host(
    faults: &Arc<FaultStore>,
    cleanup: &Arc<Gate>,
    job: &Job,
) -> reel::Result<Host> {
    Host::builder()
        .store(faults.clone())
        .register(job.clone())
        .register(Boss)
        .register(Worker {
            cleanup: cleanup.clone(),
        })
        .build()
        .await
}

fn faults_on(dir: &std::path::Path) -> anyhow::Result<Arc<FaultStore>> {
    Ok(FaultStore::new(FjallStore::open(dir)?))
}

/// Polls until `run` is suspended (it may not exist yet); a timeout reports its
/// last status and log.
async fn suspended(run: &AnyRun, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(RunStatus::Suspended { .. }) = run.status().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "{what}: not suspended after {LIMIT:?}: status {:?}, log {:?}",
                run.status().await,
                run.events().await
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls until at most `n` run actors are live on `host`.
async fn live_at_most(host: &Host, n: usize, what: &str) -> anyhow::Result<()> {
    within(LIMIT, what, async {
        while host.live_runs().await > n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Releases its gates when dropped: a test that fails while a read is held
/// would otherwise leave a blocking thread waiting, and its runtime with it.
#[derive(Default)]
struct Releasing(std::sync::Mutex<Vec<reel_storage::testing::Gate>>);

impl Releasing {
    /// Keeps `gate` to release on drop, and returns it.
    fn keep(&self, gate: reel_storage::testing::Gate) -> reel_storage::testing::Gate {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(gate.clone());
        gate
    }
}

impl Drop for Releasing {
    fn drop(&mut self) {
        for gate in self.0.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            gate.release();
        }
    }
}

fn count(events: &[Event], pred: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| pred(e)).count()
}

fn is_unknown<T: std::fmt::Debug>(got: &reel::Result<T>) -> bool {
    matches!(got, Err(Error::UnknownRun(_)))
}
