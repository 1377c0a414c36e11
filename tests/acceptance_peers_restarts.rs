//! Acceptance: crashes, restarts and their races with incoming work, ported from
//! the peers' own suites (Temporal sdk-core `crates/sdk-core/tests/integ_tests/`,
//! duroxide `tests/`, DBOS `tests/`) onto reel's supervisor restarts, passivation,
//! pause, cancel, children, continue-as-new and kill -9: a handler that panics
//! after a timer fired reruns, not the timer; signals and a step result arriving
//! around a failed execution are all taken after the restart; signals racing a
//! run's failing end are either taken or refused, never lost; passivation racing
//! supervisor restarts takes every signal once; a run paused or cancelled while
//! its handler restarts honours it; a child's end and a signal racing the
//! parent's restart are each taken once; continue-as-new right after a restart
//! carries every signal once; lost write answers record a timer firing and a
//! signal once; a storm of runs crashing at once over stale log reads resumes
//! every run from its own log; and a process killed mid-work resumes every run
//! without redoing a recorded step; a step that was not under way when its
//! handler crashed runs once after the supervisor's restart (a bug this file
//! found: the restarted actor read the log before the crashed execution's last
//! write had landed).
//!
//! Real fjall stores in temp dirs, most behind a `FaultStore` whose log reads
//! answer late (`slow_reads`): a run actor restarting or activating then works
//! from a snapshot that may be stale, which widens the races these tests are
//! about. No wall-clock sleeps to wait for events (gates, bounded waits on
//! logs and statuses, a `TestClock`). Each test names the peer test it ports.

mod common;
mod peers_restarts;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Gate, until_log, waits_on, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, FjallStore, Host, RunHandle, RunStatus, StatusKind, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};
use reel_storage::{LogReader, Store};

const LIMIT: Duration = Duration::from_secs(30);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many times each keyed thing happened (a step body of a run, a handler
/// execution), shared between a test and its workflow's clones.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, u32>>>);

impl Tally {
    fn bump(&self, key: impl Into<String>) -> u32 {
        let mut m = lock(&self.0);
        let n = m.entry(key.into()).or_insert(0);
        *n += 1;
        *n
    }

    fn get(&self, key: &str) -> u32 {
        lock(&self.0).get(key).copied().unwrap_or(0)
    }
}

/// Answers true the first time it is asked for a key, false afterwards: a crash
/// that happens once per run (or per run and position), in this process.
#[derive(Clone, Default)]
struct FirstTime(Arc<Mutex<BTreeSet<String>>>);

impl FirstTime {
    fn first(&self, key: impl Into<String>) -> bool {
        lock(&self.0).insert(key.into())
    }
}

/// One gate per run id, made on first use.
#[derive(Clone, Default)]
struct Gates(Arc<Mutex<BTreeMap<String, Arc<Gate>>>>);

impl Gates {
    fn of(&self, run: &str) -> Arc<Gate> {
        lock(&self.0)
            .entry(run.to_owned())
            .or_insert_with(|| Arc::new(Gate::new()))
            .clone()
    }
}

/// A fjall store in `dir` whose log reads answer 2 ms late (the snapshot is
/// taken at once): a run actor restarting or activating may then start from a
/// log that writes landing meanwhile have left behind.
fn slow_reads(dir: &Path) -> anyhow::Result<Arc<FaultStore>> {
    let faults = FaultStore::new(FjallStore::open(dir)?);
    faults.inject(Fault::delay(Op::ReadLog, Duration::from_millis(2)).until_healed());
    Ok(faults)
}

/// How many events of the log `f` picks.
fn count(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

/// The ids of the signals the log received, in log order.
fn received(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::SignalReceived { signal_id, .. } => Some(signal_id.clone()),
            _ => None,
        })
        .collect()
}

/// How often each step id completed in the log.
fn completions(events: &[Event]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in events {
        if let Event::StepCompleted { id, .. } = e {
            *out.entry(id.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// Exactly one terminal event, and it is the last one.
fn ends_once(events: &[Event], what: &str) {
    assert_eq!(
        count(events, Event::is_terminal),
        1,
        "{what}: terminal events in {events:?}"
    );
    assert!(
        events.last().is_some_and(Event::is_terminal),
        "{what}: records after the end: {events:?}"
    );
}

/// Waits until `done` holds, polling every few milliseconds, for at most LIMIT.
async fn until(what: &str, done: impl Fn() -> bool) -> anyhow::Result<()> {
    within(LIMIT, what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
}

/// Prints a run's log, to tell how a failing test went wrong.
async fn dump<W: Workflow>(run: &RunHandle<W>) {
    if let Ok(events) = run.events().await {
        for (i, e) in events.iter().enumerate() {
            eprintln!("{} {i}: {e:?}", run.id());
        }
    }
}

// ---------------------------------------------------------------------------

const KILL_ENV: &str = "REEL_PEERS_RESTARTS_KILL_DIR";
const KILL_RUNS: usize = 10;

/// duroxide's recovery orchestration: two steps, a wait for `Resume`, two more
/// steps; it also crashes once per run and process after its third step. Each
/// step body appends `phase run step token` to a side file and prints `exec`.
#[derive(Clone)]
struct Recover {
    side: PathBuf,
    phase: &'static str,
    crashed: FirstTime,
}

impl Recover {
    fn new(dir: &Path, phase: &'static str) -> Recover {
        Recover {
            side: dir.join("executions.log"),
            phase,
            crashed: FirstTime::default(),
        }
    }

    async fn step(&self, ctx: &Ctx, name: &str) -> reel::Result<String> {
        let me = ctx.run_id().to_owned();
        ctx.step(name, |s| {
            let me = me.clone();
            async move {
                let token = format!("{}:{}", s.idempotency_key(), reel::Uuid::new_v4());
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&self.side)?;
                f.write_all(format!("{} {me} {name} {token}\n", self.phase).as_bytes())?;
                println!("exec");
                Ok::<_, std::io::Error>(token)
            }
        })
        .await
    }
}

impl Workflow for Recover {
    const NAME: &'static str = "recover";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let s1 = self.step(&ctx, "s1").await?;
        let s2 = self.step(&ctx, "s2").await?;
        let _: String = ctx.wait_for_signal("Resume").await?;
        let s3 = self.step(&ctx, "s3").await?;
        if self.crashed.first(ctx.run_id()) {
            panic!("crash after the third step");
        }
        let s4 = self.step(&ctx, "s4").await?;
        Ok(vec![s1, s2, s3, s4])
    }
}

fn open_recover(dir: &Path, phase: &'static str) -> impl Future<Output = reel::Result<Host>> {
    Host::builder()
        .path(dir.join("store"))
        .register(Recover::new(dir, phase))
        .restart_limit(5, Duration::from_secs(60))
        .build()
}

/// Starts every run (again: starts are idempotent), sends each its `Resume`
/// (same id every time), and waits for every result.
async fn drive_recover(host: &Host) -> Vec<(String, reel::Result<Vec<String>>)> {
    let mut runs = Vec::new();
    for r in 0..KILL_RUNS {
        let id = format!("inst-{r}");
        let run = host.start::<Recover>(&id, ()).await.expect("start");
        runs.push((id, run));
    }
    for (_, run) in &runs {
        match run.signal("Resume", "go", "resume").await {
            Ok(()) | Err(Error::RunFinished(_)) => {}
            Err(e) => panic!("resume: {e:?}"),
        }
    }
    let mut out = Vec::new();
    for (id, run) in runs {
        out.push((id, run.result().await));
    }
    out
}

/// Ports duroxide `tests/recovery_tests.rs::recovery_across_restart_sqlite_provider`
/// (two activities, a wait for `Resume`, two more; after a restart each
/// activity is scheduled exactly once) and DBOS
/// `tests/test_dbos.py::test_recovery_workflow_step` (recovery reruns the
/// workflow but not its recorded steps), with a real kill -9: a child process
/// drives ten runs that also crash once each (a supervisor restart) and is
/// killed at random moments, several times. A host reopening the store
/// finishes every run: each step completed once in the log, each run took its
/// one `Resume`, the output holds the recorded steps' tokens, and no step whose
/// completion was recorded before the reopen ran again.
#[test]
fn a_process_killed_mid_work_resumes_every_run_without_redoing_a_step() -> anyhow::Result<()> {
    if let Ok(dir) = std::env::var(KILL_ENV) {
        let dir = PathBuf::from(dir);
        common::kill::drive_child(open_recover(&dir, "child"), drive_recover);
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let kills = common::kill::Rounds {
        test: "a_process_killed_mid_work_resumes_every_run_without_redoing_a_step",
        env: KILL_ENV,
        rounds: 6,
        marker: "exec",
        done: "all-done",
        min: 2,
        spread: 36,
    }
    .run(dir.path());
    assert!(kills > 0, "the child was never killed");

    // What is recorded before a host of this phase opens (and recovers the
    // runs) must never run again.
    let mut recorded: BTreeSet<(String, String)> = BTreeSet::new();
    {
        let store = FjallStore::open(dir.path().join("store"))?;
        for r in 0..KILL_RUNS {
            let id = format!("inst-{r}");
            for step in completions(&LogReader::read_log(&*store, &id)?).into_keys() {
                recorded.insert((id.clone(), step));
            }
        }
        Store::close(&*store);
    }
    let rt = common::kill::runtime();
    rt.block_on(async {
        let host = open_recover(dir.path(), "final").await?;
        let results = within(LIMIT, "every run", drive_recover(&host)).await?;
        let side = std::fs::read_to_string(dir.path().join("executions.log"))?;
        let lines: Vec<Vec<&str>> = side
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .collect();
        for (id, out) in results {
            let run = host.handle::<Recover>(&id);
            if out.is_err() {
                dump(&run).await;
            }
            let tokens = out?;
            let events = run.events().await?;
            let steps = ["s1", "s2", "s3", "s4"];
            assert_eq!(
                completions(&events),
                steps
                    .iter()
                    .map(|s| (s.to_string(), 1))
                    .collect::<BTreeMap<_, _>>(),
                "{id}"
            );
            assert_eq!(received(&events), ["resume"], "{id}");
            assert_eq!(waits_on(&events, "Resume"), 1, "{id}: {events:?}");
            ends_once(&events, &id);
            for (step, token) in steps.iter().zip(&tokens) {
                let ran: Vec<&Vec<&str>> = lines
                    .iter()
                    .filter(|l| l.len() == 4 && l[1] == id && l[2] == *step)
                    .collect();
                assert!(
                    ran.iter().any(|l| l[3] == token),
                    "{id}/{step}: its recorded token {token} is no execution's"
                );
                if recorded.contains(&(id.clone(), step.to_string())) {
                    assert!(
                        ran.iter().all(|l| l[0] == "child"),
                        "{id}/{step}: recorded before the reopen, then ran again"
                    );
                }
            }
        }
        host.shutdown().await?;
        anyhow::Ok(())
    })
}
