//! A queue's concurrency and admission order under SIGKILL: a child process
//! enqueues 1,000 runs (of four priorities) on a queue of concurrency 3 while three
//! blockers hold every slot, then lets the blockers end, and is killed at random
//! moments, several times (while enqueueing too); a host then reopens the store and
//! finishes them. Every run's body notes when it enters and leaves in a side file,
//! across all the processes: at no point were more than 3 runs between entering
//! and leaving; runs were admitted by priority, then in start order; every run
//! completed, and each step's completion is recorded once.
//!
//! Why the order check is sound: all 1,000 runs wait before the first of them is
//! admitted, so the queue must admit them exactly in (priority, start order). A run
//! admitted earlier may enter later than one admitted after it (admitted runs run
//! side by side), but it holds a slot until it has entered and left: when a run
//! enters, at most `CONCURRENCY - 1` runs before it in admission order may not
//! have entered yet.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reel::{Ctx, Event, Host, QueueOptions, RunStatus, StartOptions, Workflow};

const RUNS: usize = 1000;
const CONCURRENCY: usize = 3;
const QUEUE: &str = "exports";
const CHILD_ENV: &str = "REEL_QUEUE_KILL9_CHILD_DIR";

fn run_id(r: usize) -> String {
    format!("export-{r:04}")
}

/// Four priorities, interleaved in start order.
fn priority(r: usize) -> i32 {
    [2, 0, 3, 1][r % 4]
}

#[derive(Clone)]
struct Export {
    side: PathBuf,
}

impl Export {
    fn note(&self, line: &str) -> Result<(), String> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.side)
            .map_err(|e| e.to_string())?;
        // One write of the whole line: a kill cannot tear it.
        f.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| e.to_string())
    }
}

impl Workflow for Export {
    const NAME: &'static str = "export";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let id = ctx.run_id().to_owned();
        ctx.step("enter", |_| async {
            println!("exec");
            self.note(&format!("+{id}"))
        })
        .await?;
        ctx.step("work", |_| async {
            println!("exec");
            self.note(&format!("w{id}"))
        })
        .await?;
        ctx.step("leave", |_| async { self.note(&format!("-{id}")) })
            .await?;
        Ok(())
    }
}

/// Holds a slot of the queue until signalled `go`.
struct Blocker;

impl Workflow for Blocker {
    const NAME: &'static str = "blocker";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("go").await
    }
}

fn open(dir: &Path) -> impl Future<Output = reel::Result<Host>> {
    Host::builder()
        .path(dir.join("store"))
        .register(Export {
            side: dir.join("trace.log"),
        })
        .register(Blocker)
        .queue(QUEUE, QueueOptions::default().concurrency(CONCURRENCY))
        .build()
}

/// Fills the slots with blockers, enqueues every run behind them (idempotent: a
/// process after a kill re-starts what is there and adds what is not, in the same
/// order), lets the blockers end and waits for every run.
async fn drive(host: &Host) {
    let on = |priority| StartOptions::default().queue(QUEUE).priority(priority);
    let blockers: Vec<String> = (0..CONCURRENCY).map(|b| format!("blocker-{b}")).collect();
    for id in &blockers {
        host.start_with::<Blocker>(id, (), on(-1))
            .await
            .expect("start a blocker");
    }
    for id in &blockers {
        while host.run(id).status().await.expect("status") == RunStatus::Enqueued {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for r in 0..RUNS {
        host.start_with::<Export>(&run_id(r), (), on(priority(r)))
            .await
            .expect("start");
        println!("exec enqueued");
    }
    for id in &blockers {
        match host.run(id).signal("go", &(), "go").await {
            Ok(()) | Err(reel::Error::RunFinished(_)) => {}
            Err(e) => panic!("release {id}: {e}"),
        }
    }
    for r in 0..RUNS {
        host.handle::<Export>(&run_id(r))
            .result()
            .await
            .expect("result");
    }
}

fn child(dir: &Path) {
    common::kill::drive_child(open(dir), drive);
}

#[test]
fn queue_limit_holds_across_kill() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // 1,000 `exec` lines while enqueueing, then two per run.
    let kills = common::kill::Rounds {
        test: "queue_limit_holds_across_kill",
        env: CHILD_ENV,
        rounds: 5,
        marker: "exec",
        done: "all-done",
        min: 5,
        spread: 2 * RUNS,
    }
    .run(dir.path());
    assert!(kills > 0, "the child was never killed");

    let rt = common::kill::runtime();
    let logs = rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        drive(&host).await;
        let mut logs = HashMap::new();
        for r in 0..RUNS {
            let id = run_id(r);
            logs.insert(id.clone(), host.run(&id).events().await.expect("events"));
        }
        host.shutdown().await.expect("shutdown");
        logs
    });

    let trace = std::fs::read_to_string(dir.path().join("trace.log")).expect("trace");
    assert_limit_held(&trace);
    assert_admission_order(&trace);
    for (id, events) in &logs {
        assert!(
            matches!(events.last(), Some(Event::RunCompleted { .. })),
            "{id}: {events:?}"
        );
        let completed = events
            .iter()
            .filter(|e| matches!(e, Event::StepCompleted { .. }))
            .count();
        assert_eq!(completed, 3, "{id}: {events:?}");
    }
}

/// Between a run's first `+` and its last `-`, it held a slot (a re-run body notes
/// again; the set keeps one entry per run).
fn assert_limit_held(trace: &str) {
    let mut inside: HashSet<&str> = HashSet::new();
    let mut most = 0;
    for line in trace.lines() {
        if let Some(id) = line.strip_prefix('+') {
            inside.insert(id);
        } else if let Some(id) = line.strip_prefix('-') {
            inside.remove(id);
        }
        most = most.max(inside.len());
    }
    assert!(most <= CONCURRENCY, "{most} runs inside at once");
    assert!(most > 0);
}

/// Admitted by priority, then in start order: when a run first enters, fewer than
/// `CONCURRENCY` runs admitted before it have not entered yet.
fn assert_admission_order(trace: &str) {
    let mut order: Vec<usize> = (0..RUNS).collect();
    order.sort_by_key(|&r| (priority(r), r));
    let rank: HashMap<String, usize> = order
        .iter()
        .enumerate()
        .map(|(rank, &r)| (run_id(r), rank))
        .collect();
    let mut entered = vec![false; RUNS];
    let mut first_missing = 0;
    for id in trace.lines().filter_map(|l| l.strip_prefix('+')) {
        let rank = rank[id];
        if entered[rank] {
            continue; // a body run again after a kill
        }
        entered[rank] = true;
        while first_missing < RUNS && entered[first_missing] {
            first_missing += 1;
        }
        let waiting = (first_missing..rank).filter(|&k| !entered[k]).count();
        assert!(
            waiting < CONCURRENCY,
            "{id} (priority {}) entered while {waiting} runs admitted before it had not, \
             the first of them {}",
            priority(order[rank]),
            run_id(order[first_missing]),
        );
    }
    assert!(entered.iter().all(|e| *e), "a run never entered");
}
