//! Acceptance: supervisor restarts of crashing handlers on hosts that share runs
//! on one PostgreSQL database, while signals arrive as letters through other
//! hosts, starts race, partitions move, the owner is killed, and runs continue as
//! new. Ports of peers' multi-worker failure tests: Temporal's worker restarts and
//! workflow task failures with several workers (sdk-core integ tests, server
//! `TestWorkflowTaskFailure*`), DBOS `tests/test_failures.py` and the recovery of
//! another executor's workflows (`test_recovery`, `executor_id`), duroxide's
//! multi-worker tests.
//!
//! Every test asserts exact outcomes: the results, the events of the log, and
//! how many times each step body ran (once; or, where a body may be cut short by
//! design, that the recorded value is the body's last execution).

mod pg_restarts;
mod procs;
mod support;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use procs::{Proc, until};
use reel::{Ctx, Event, Host, Workflow};
use support::hosts::{owned_by, result_of, shutdown_all, spread};

/// Crash restarts a crash-looping run may take before it is parked.
const MANY: u32 = 1_000_000;

/// What the hosts of one test share: each step body execution (key -> the tags of
/// its executions, in order) and the positions where a handler already panicked.
#[derive(Clone, Default)]
struct Marks {
    host: String,
    bodies: Arc<Mutex<HashMap<String, Vec<String>>>>,
    crashed: Arc<Mutex<HashSet<String>>>,
}

impl Marks {
    /// The same marks, for the host `name`.
    fn on(&self, name: &str) -> Marks {
        Marks {
            host: name.to_owned(),
            ..self.clone()
        }
    }

    fn ran(&self, key: String, tag: String) {
        let mut bodies = self.bodies.lock().expect("bodies");
        bodies.entry(key).or_default().push(tag);
    }

    /// True the first time `key` is asked about: where to panic once.
    fn first(&self, key: String) -> bool {
        self.crashed.lock().expect("crashed").insert(key)
    }

    /// (bodies, of which run other than once).
    fn bodies(&self) -> (usize, Vec<(String, Vec<String>)>) {
        let bodies = self.bodies.lock().expect("bodies");
        let not_once = bodies.iter().filter(|(_, t)| t.len() != 1);
        (
            bodies.len(),
            not_once.map(|(k, t)| (k.clone(), t.clone())).collect(),
        )
    }

    fn ran_by(&self, host: &str) -> usize {
        let bodies = self.bodies.lock().expect("bodies");
        let tags = bodies.values().flatten();
        tags.filter(|t| t.starts_with(host)).count()
    }
}

/// Joins `url` as `name` with `w` registered and crash loops allowed.
async fn open<W: Workflow>(url: &str, name: &str, w: W) -> anyhow::Result<Host> {
    let b = support::hosts::joined(url, name).await?;
    Ok(b.register(w)
        .restart_limit(MANY, Duration::from_secs(30))
        .build()
        .await?)
}

/// Sends signals `name` 0..n (ids `<name>-<k>`) to each run of `ids`, one after
/// the other, the k-th through `via[k % via.len()]`; the runs in parallel.
async fn burst(via: &[&Host], ids: &[String], name: &str, n: u32) -> reel::Result<()> {
    let sends = ids.iter().map(|id| async move {
        for k in 0..n {
            let host = via[k as usize % via.len()];
            host.run(id)
                .signal(name, &k, &format!("{name}-{k}"))
                .await?;
        }
        Ok::<_, reel::Error>(())
    });
    futures::future::try_join_all(sends).await.map(drop)
}

/// The events of this kind (`Event::kind`).
fn kinds(events: &[Event], kind: &str) -> usize {
    events.iter().filter(|e| e.kind() == kind).count()
}

/// Recorded completions of the steps named `name` (ids `name`, `name#k`).
fn done(events: &[Event], name: &str) -> usize {
    let hash = format!("{name}#");
    let steps = events.iter().filter(
        |e| matches!(e, Event::StepCompleted { id, .. } if id == name || id.starts_with(&hash)),
    );
    steps.count()
}

/// The ids of the signals the log received, in its order.
fn signals<B: FromIterator<String>>(events: &[Event]) -> B {
    let ids = events.iter().filter_map(|e| match e {
        Event::SignalReceived { signal_id, .. } => Some(signal_id.clone()),
        _ => None,
    });
    ids.collect()
}

fn completed(events: &[Event]) -> bool {
    matches!(events.last(), Some(Event::RunCompleted { .. }))
}

/// `n` rounds: a step, a signal `msg`; the handler panics once after taking each
/// signal, before using it.
#[derive(Clone)]
struct Rounds(Marks);

impl Workflow for Rounds {
    const NAME: &'static str = "rounds";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<u32>> {
        let mut got = Vec::new();
        for k in 0..n {
            let key = format!("{}/{k}", ctx.run_id());
            let body = || async {
                self.0.ran(key.clone(), self.0.host.clone());
                Ok::<_, String>(())
            };
            ctx.step("work", |_| body()).await?;
            let m: u32 = ctx.wait_for_signal("msg").await?;
            if self.0.first(key.clone()) {
                panic!("handler bug after signal {k} of {key}");
            }
            got.push(m);
        }
        Ok(got)
    }
}

/// Three hosts; four runs on host-1 take six signals each, sent one after the
/// other through host-0 and host-2 by turn (letters to host-1's inbox), while the
/// handler panics after taking each one and the supervisor restarts it. Every
/// signal is taken once, in the order sent, and every step body ran once. Ports
/// Temporal's workflow task failures with signals from other workers (server
/// `TestWorkflowTaskFailure*` with signals) and DBOS `test_failures.py`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn panics_while_letters_arrive_take_each_signal_once_in_order() -> anyhow::Result<()> {
    let url = support::database("restarts_letters").await;
    let marks = Marks::default();
    let (hosts, owners) = spread::<3>(&url, 80, async |url, name| {
        open(url, name, Rounds(marks.on(name))).await
    })
    .await?;
    const N: u32 = 6;
    let ids = owned_by(&owners, 1, "letters", 4);
    for id in &ids {
        hosts[0].start::<Rounds>(id, N).await?;
    }
    burst(&[&hosts[0], &hosts[2]], &ids, "msg", N).await?;
    check_rounds(&hosts, &ids, N, &marks).await?;
    shutdown_all(hosts).await
}

/// Each run of `ids` took the signals `msg-0..n` once, in order (its result and
/// its log say so, read through each host), and every body ran once.
async fn check_rounds(hosts: &[Host], ids: &[String], n: u32, marks: &Marks) -> anyhow::Result<()> {
    let sent: Vec<String> = (0..n).map(|k| format!("msg-{k}")).collect();
    for (id, host) in ids.iter().zip(hosts.iter().cycle()) {
        assert_eq!(
            result_of::<Rounds>(host, id).await??,
            (0..n).collect::<Vec<_>>()
        );
        let ev = host.run(id).events().await?;
        assert_eq!(signals::<Vec<_>>(&ev), sent, "{id}: {ev:?}");
        assert_eq!(done(&ev, "work"), n as usize, "{id}: {ev:?}");
        assert!(completed(&ev), "{id}: {ev:?}");
    }
    let runs = ids.len() * n as usize;
    assert_eq!(marks.crashed.lock().expect("crashed").len(), runs);
    assert_eq!(
        marks.bodies(),
        (runs, vec![]),
        "bodies, and those not run once"
    );
    Ok(())
}

/// Racing starts of each run (twice through its owner host-0, once through
/// host-1) while host-1 signals it as soon as it exists: the new run's first
/// state is taken once (fix 3, on Postgres), its first step ran once, and the
/// signals are taken once each, in order, across the handler's restarts. Ports
/// Temporal's duplicate `StartWorkflowExecution` racing a signal (server
/// `TestStartWorkflowExecution_*`) and DBOS's concurrent starts of one
/// workflow id (`test_failures.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_starts_and_early_letters_run_the_first_step_once() -> anyhow::Result<()> {
    let url = support::database("restarts_fresh").await;
    let marks = Marks::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |url, name| {
        open(url, name, Rounds(marks.on(name))).await
    })
    .await?;
    const N: u32 = 3;
    let ids = owned_by(&owners, 0, "fresh", 8);
    let races = ids.iter().map(|id| {
        let (owner, other) = (&hosts[0], &hosts[1]);
        let early = async move {
            let run = other.run(id);
            let sent = || async { run.signal("msg", &0, "msg-0").await.is_ok() };
            until("the run to exist", Duration::from_secs(15), sent).await;
            for k in 1..N {
                run.signal("msg", &k, &format!("msg-{k}")).await?;
            }
            Ok::<_, reel::Error>(())
        };
        async move {
            let (a, b, c, d) = tokio::join!(
                owner.start::<Rounds>(id, N),
                owner.start::<Rounds>(id, N),
                other.start::<Rounds>(id, N),
                early
            );
            a.and(b).and(c)?;
            d?;
            Ok::<_, reel::Error>(())
        }
    });
    futures::future::try_join_all(races).await?;
    check_rounds(&hosts, &ids, N, &marks).await?;
    shutdown_all(hosts).await
}

/// A step `charge`, then (if `crash`) a panic; then a signal `go` and a step
/// `ship`. Each body appends `<step>\t<tag>\t<run>` to `side`.
#[derive(Clone)]
struct Charge {
    side: PathBuf,
    tag: &'static str,
    crash: bool,
}

impl Charge {
    async fn body(&self, step: &str, run: &str) -> std::io::Result<String> {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.side)?;
        f.write_all(format!("{step}\t{}\t{run}\n", self.tag).as_bytes())?;
        Ok(self.tag.to_owned())
    }
}

impl Workflow for Charge {
    const NAME: &'static str = "charge";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let id = ctx.run_id().to_owned();
        let charged = ctx.step("charge", |_| self.body("charge", &id)).await?;
        if self.crash {
            println!("crash {id}");
            std::io::stdout().flush().ok();
            panic!("handler bug after the charge of {id}");
        }
        let go: String = ctx.wait_for_signal("go").await?;
        let shipped = ctx.step("ship", |_| self.body("ship", &id)).await?;
        Ok(format!("{charged}|{go}|{shipped}"))
    }
}

/// What is wrong with a finished `Charge` run: its result, its events, or its
/// bodies (`charge` once on host-0, `ship` once on host-1, nothing else).
async fn check_charge(host: &Host, side: &Path, id: &str) -> Vec<String> {
    let mut problems = Vec::new();
    match result_of::<Charge>(host, id).await {
        Ok(Ok(r)) if r == "host-0|go|host-1" => {}
        other => problems.push(format!("{id}: {other:?}")),
    }
    let text = std::fs::read_to_string(side).unwrap_or_default();
    let mut bodies: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with(&format!("\t{id}")))
        .collect();
    bodies.sort();
    let want = [
        format!("charge\thost-0\t{id}"),
        format!("ship\thost-1\t{id}"),
    ];
    if bodies != want {
        problems.push(format!("{id}: bodies {bodies:?}"));
    }
    match host.run(id).events().await {
        Ok(ev)
            if signals::<Vec<_>>(&ev) == ["go-1"]
                && done(&ev, "charge") == 1
                && done(&ev, "ship") == 1
                && completed(&ev) => {}
        other => problems.push(format!("{id}: events {other:?}")),
    }
    problems
}

const KILL_ENV: &str = "REEL_PG_RESTARTS_KILL_DIR";
const KILL_TEST: &str = "owner_killed_while_its_runs_crash_loop";
const KILL_RUNS: usize = 4;

/// The victim: host-0, whose runs crash-loop after their charge, until killed.
fn crash_looping_owner(dir: &Path) {
    procs::runtime().block_on(async {
        let url = std::fs::read_to_string(dir.join("url")).expect("url");
        let (side, tag) = (dir.join("side"), "host-0");
        let host = open(
            &url,
            tag,
            Charge {
                side,
                tag,
                crash: true,
            },
        )
        .await;
        let host = host.expect("open");
        let go = dir.join("go");
        until("go", Duration::from_secs(60), || async { go.exists() }).await;
        let owners = support::settled_leases(&url, "host-", 2).await;
        for id in owned_by(&owners, 0, "loop", KILL_RUNS) {
            host.start::<Charge>(&id, ()).await.expect("start");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// A host process (host-0) whose runs crash-loop right after their first step is
/// SIGKILLed; a signal for each was sent through host-1 while they looped, and is
/// sent again (same id) after the kill. host-1 takes the runs over with healthy
/// code: the charge recorded on host-0 is not run again, the signal is taken
/// once, `ship` runs once on host-1. Ports DBOS `test_recovery` of another
/// executor's workflows (`executor_id`) and Temporal's worker restart tests.
#[test]
fn owner_killed_while_its_runs_crash_loop() {
    if let Ok(dir) = std::env::var(KILL_ENV) {
        crash_looping_owner(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let side = dir.path().join("side");
    let url = rt.block_on(support::database("restarts_kill"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let victim = Proc::spawn(KILL_TEST, KILL_ENV, dir.path(), &[]);
    let (host, ids) = rt.block_on(async {
        let (side, tag) = (side.clone(), "host-1");
        let host = open(
            &url,
            tag,
            Charge {
                side,
                tag,
                crash: false,
            },
        )
        .await;
        let owners = support::settled_leases(&url, "host-", 2).await;
        std::fs::write(dir.path().join("go"), "").expect("go");
        let ids = owned_by(&owners, 0, "loop", KILL_RUNS);
        (host.expect("host-1"), ids)
    });
    victim.until(Duration::from_secs(60), |l| l.ends_with("started"));
    let mut crashes: HashMap<String, u32> = HashMap::new();
    victim.until(Duration::from_secs(30), |l| {
        if let Some(id) = l.strip_prefix("crash ") {
            *crashes.entry(id.to_owned()).or_default() += 1;
        }
        let looped = |id: &String| crashes.get(id).is_some_and(|&n| n >= 3);
        ids.iter().all(looped)
    });
    let go = async |what: &str| {
        for id in &ids {
            host.run(id).signal("go", "go", "go-1").await.expect(what);
        }
    };
    rt.block_on(go("signal while the owner crash-loops"));
    victim.kill();
    let problems = rt.block_on(async {
        go("the same signal after the kill").await;
        let mut problems = Vec::new();
        for id in &ids {
            problems.extend(check_charge(&host, &side, id).await);
        }
        host.shutdown().await.expect("shutdown");
        problems
    });
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Set once the partitions have moved twice: the tickers then end.
static TICKERS_DONE: AtomicBool = AtomicBool::new(false);
/// 0 until host-a begins to shut down, then 1: in the tag of every tick body.
static LEAVING: AtomicU32 = AtomicU32::new(0);
