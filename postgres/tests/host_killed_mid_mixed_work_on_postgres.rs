//! Three host processes' worth of work over one database, the partitions spread
//! over them: a child process (`host-0`) and two hosts of this process. Every
//! kind of work is under way on the child when it is SIGKILLed: steps running,
//! timers pending, signals in flight (sent through the other hosts, alternating,
//! before and after the kill), children running on other hosts, runs continuing
//! as new, and queued runs holding slots of a queue of two. After the takeover:
//! - every run ends, `status()` says completed and its log ends with its end;
//! - no recorded step ran again after its record (each body logs the process it
//!   ran on and returns a fresh token: the token recorded is the step's last
//!   execution), across segments too;
//! - each waiter received every signal once, in the order sent;
//! - the queue never had more than two runs between entering and leaving, across
//!   the processes (a shared side file, appended in order);
//! - the counts of the surviving hosts agree with the runs.

mod procs;
mod support;

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use procs::{Proc, Tagged};
use reel::{Ctx, Event, Host, QueueOptions, RunStatus, StatusKind, Workflow};

const CHILD_ENV: &str = "REEL_PG_MIXED_KILL_CHILD_DIR";
const TEST: &str = "host_killed_mid_mixed_work_on_postgres";
const TAGGED: usize = 12;
const WAITERS: usize = 8;
const SIGNALS: u32 = 8;
const PARENTS: usize = 4;
const KIDS: usize = 3;
const LOOPERS: usize = 6;
const SEGMENTS: u32 = 6;
const JOBS: usize = 14;
const QUEUE_LIMIT: usize = 2;

fn append(side: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(side)?;
    f.write_all(format!("{line}\n").as_bytes())
}

/// Receives `SIGNALS` signals `sig`, each recorded by a step; returns them.
#[derive(Clone)]
struct Waiter;

impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let mut got = Vec::new();
        for _ in 0..SIGNALS {
            let n: u32 = ctx.wait_for_signal("sig").await?;
            let n = ctx
                .step("got", move |_| async move { Ok::<_, String>(n) })
                .await?;
            got.push(n);
        }
        Ok(got)
    }
}

/// A step, a timer, a step; returns twice its input.
#[derive(Clone)]
struct Kid {
    tag: String,
}

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u32;
    type Output = (u32, String);
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<(u32, String)> {
        let tag = self.tag.clone();
        ctx.step("before", |_| async { Ok::<_, String>(()) })
            .await?;
        ctx.sleep(Duration::from_millis(300)).await?;
        let ran = ctx
            .step("after", move |_| {
                let tag = tag.clone();
                async move { Ok::<_, String>(tag) }
            })
            .await?;
        Ok((n * 2, ran))
    }
}

/// Starts `KIDS` children (ids spread over the partitions) and sums their results.
#[derive(Clone)]
struct Parent;

impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        let kids = (0..KIDS as u32).map(|k| ctx.child::<Kid>(&format!("{me}-kid-{k}"), k + 1));
        let mut sum = 0;
        for r in futures::future::join_all(kids).await {
            sum += r?.0;
        }
        Ok(sum)
    }
}

/// Continues as new `SEGMENTS` times, with a logged step and a timer in each
/// segment; returns every segment's token.
#[derive(Clone)]
struct Looper {
    side: PathBuf,
    tag: String,
}

impl Workflow for Looper {
    const NAME: &'static str = "looper";
    type Input = (u32, Vec<String>);
    type Output = Vec<String>;
    async fn run(
        &self,
        ctx: Ctx,
        (n, mut tokens): (u32, Vec<String>),
    ) -> reel::Result<Vec<String>> {
        let (side, tag, run) = (self.side.clone(), self.tag.clone(), ctx.run_id().to_owned());
        let token = ctx
            .step("seg", |s| {
                let (side, tag, run) = (side.clone(), tag.clone(), run.clone());
                async move {
                    let begin = procs::epoch_ms();
                    let token = format!("{tag}|{}|{}", s.idempotency_key(), reel::Uuid::new_v4());
                    append(
                        &side,
                        &format!(
                            "{tag}\t{run}\t{}\t{token}\t{begin}\t{}",
                            s.idempotency_key(),
                            procs::epoch_ms()
                        ),
                    )?;
                    println!("exec {tag} {run}");
                    Ok::<_, std::io::Error>(token)
                }
            })
            .await?;
        tokens.push(token);
        ctx.sleep(Duration::from_millis(120)).await?;
        if n + 1 < SEGMENTS {
            return ctx.continue_as_new::<Looper>((n + 1, tokens)).await;
        }
        Ok(tokens)
    }
}

/// A queued job: enters (logged), holds its slot across a timer, leaves (logged).
#[derive(Clone)]
struct Job {
    side: PathBuf,
}

impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let run = ctx.run_id().to_owned();
        for what in ["enter", "leave"] {
            if what == "leave" {
                ctx.sleep(Duration::from_millis(250)).await?;
            }
            let (side, run) = (self.side.clone(), run.clone());
            ctx.step(what, move |_| {
                let (side, run) = (side.clone(), run.clone());
                async move {
                    append(&side, &format!("{what} {run}"))?;
                    println!("{what} {run}");
                    Ok::<_, std::io::Error>(())
                }
            })
            .await?;
        }
        Ok(())
    }
}

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Tagged {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
            steps: 10,
            busy: Duration::from_millis(10),
            pause_every: 3,
            pause: Duration::from_millis(100),
        })
        .register(Waiter)
        .register(Kid {
            tag: name.to_owned(),
        })
        .register(Parent)
        .register(Looper {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
        })
        .register(Job {
            side: dir.join("queue.log"),
        })
        .queue("q", QueueOptions::default().concurrency(QUEUE_LIMIT))
        .build()
        .await?)
}

/// Starts the half (`half` 0 or 1) of every kind of run.
async fn start_half(host: &Host, half: usize) -> anyhow::Result<()> {
    let mine = |i: usize| i % 2 == half;
    for i in (0..TAGGED).filter(|i| mine(*i)) {
        host.start::<Tagged>(&format!("tagged-{i}"), ()).await?;
    }
    for i in (0..WAITERS).filter(|i| mine(*i)) {
        host.start::<Waiter>(&format!("waiter-{i}"), ()).await?;
    }
    for i in (0..PARENTS).filter(|i| mine(*i)) {
        host.start::<Parent>(&format!("parent-{i}"), ()).await?;
    }
    for i in (0..LOOPERS).filter(|i| mine(*i)) {
        host.start::<Looper>(&format!("looper-{i}"), (0, Vec::new()))
            .await?;
    }
    for i in (0..JOBS).filter(|i| mine(*i)) {
        host.start_on::<Job>("q", &format!("job-{i}"), ()).await?;
    }
    Ok(())
}

fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let host = open(dir, "host-0").await.expect("open");
        // Work begins once the partitions are spread over the three hosts.
        let go = dir.join("go");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !go.exists() {
            assert!(Instant::now() < deadline, "never told to go");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        start_half(&host, 0).await.expect("start");
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// Sends round `k` of the signals to every waiter, through host 1 or 2 by turn.
async fn signal_round(hosts: &[Host], k: u32) {
    for i in 0..WAITERS {
        let via = &hosts[(k as usize + i) % 2];
        via.handle::<Waiter>(&format!("waiter-{i}"))
            .signal("sig", &k, &format!("sig-{k}"))
            .await
            .expect("signal");
    }
}

/// The most runs between "enter" and "leave" at once, in the queue log's order.
fn queue_peak(side: &Path) -> (usize, BTreeSet<String>) {
    let text = std::fs::read_to_string(side).unwrap_or_default();
    let (mut inside, mut left, mut peak) = (BTreeSet::new(), BTreeSet::new(), 0);
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("enter", run)) => {
                inside.insert(run.to_owned());
            }
            Some(("leave", run)) => {
                inside.remove(run);
                left.insert(run.to_owned());
            }
            _ => {}
        }
        peak = peak.max(inside.len());
    }
    (peak, left)
}

#[test]
fn host_killed_mid_mixed_work_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("mixed_kill"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let victim = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[]);
    let hosts = rt.block_on(async {
        let hosts = vec![
            open(dir.path(), "host-1").await.expect("host 1"),
            open(dir.path(), "host-2").await.expect("host 2"),
        ];
        support::spread_leases(&url, "host-", 3, 60).await;
        std::fs::write(dir.path().join("go"), "").expect("go");
        start_half(&hosts[0], 1).await.expect("start");
        hosts
    });
    let (mut started, mut execs, mut entered) = (false, 0, 0);
    let mut seen = |line: &str| {
        started |= line == "started";
        execs += usize::from(line.starts_with("exec host-0"));
        entered += usize::from(line.starts_with("enter "));
        (started, execs >= 25 && entered >= 1)
    };
    // The signals go to every waiter, the child's half too: they exist once the
    // child says it started them.
    let mut busy = false;
    victim.until(Duration::from_secs(60), |line| {
        let (started, far) = seen(line);
        busy = started && far;
        started
    });
    rt.block_on(async {
        for k in 0..SIGNALS / 2 {
            signal_round(&hosts, k).await;
        }
    });
    // The child is well into its work (steps, segments, queued jobs) when killed.
    if !busy {
        victim.until(Duration::from_secs(60), |line| {
            let (started, far) = seen(line);
            started && far
        });
    }
    victim.kill();
    let killed = Instant::now();
    rt.block_on(async {
        // Signals sent while the owner is dead and its leases not yet expired.
        for k in SIGNALS / 2..SIGNALS {
            signal_round(&hosts, k).await;
        }
        let limit = Duration::from_secs(60);
        let mut problems = Vec::new();
        let mut recorded: HashMap<String, Vec<String>> = HashMap::new();
        let check = |id: String| {
            let host = &hosts[0];
            async move {
                let run = host.run(&id);
                let status = run.status().await.expect("status");
                let events = run.events().await.expect("events");
                let last = events.last().cloned();
                let mut p = Vec::new();
                if status != RunStatus::Completed {
                    p.push(format!("{id}: status {status:?}"));
                }
                if !matches!(last, Some(Event::RunCompleted { .. })) {
                    p.push(format!("{id}: log ends with {last:?}"));
                }
                p
            }
        };
        for i in 0..TAGGED {
            let id = format!("tagged-{i}");
            let tokens = tokio::time::timeout(limit, hosts[1].handle::<Tagged>(&id).result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not end"))
                .expect("completes");
            recorded.insert(id.clone(), tokens);
            problems.extend(check(id).await);
        }
        for i in 0..LOOPERS {
            let id = format!("looper-{i}");
            let tokens = tokio::time::timeout(limit, hosts[1].handle::<Looper>(&id).result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not end"))
                .expect("completes");
            if tokens.len() != SEGMENTS as usize {
                problems.push(format!("{id}: {} segments", tokens.len()));
            }
            recorded.insert(id.clone(), tokens);
            problems.extend(check(id).await);
        }
        for i in 0..WAITERS {
            let id = format!("waiter-{i}");
            let got = tokio::time::timeout(limit, hosts[0].handle::<Waiter>(&id).result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not end"))
                .expect("completes");
            if got != (0..SIGNALS).collect::<Vec<_>>() {
                problems.push(format!("{id}: received {got:?}"));
            }
            problems.extend(check(id).await);
        }
        for i in 0..PARENTS {
            let id = format!("parent-{i}");
            let sum = tokio::time::timeout(limit, hosts[1].handle::<Parent>(&id).result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not end"))
                .expect("completes");
            let want: u32 = (1..=KIDS as u32).map(|k| k * 2).sum();
            if sum != want {
                problems.push(format!("{id}: sum {sum}, not {want}"));
            }
            problems.extend(check(id.clone()).await);
            for k in 0..KIDS {
                problems.extend(check(format!("{id}-kid-{k}")).await);
            }
        }
        for i in 0..JOBS {
            let id = format!("job-{i}");
            tokio::time::timeout(limit, hosts[0].handle::<Job>(&id).result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not end"))
                .expect("completes");
            problems.extend(check(id).await);
        }
        println!("every run ended {:?} after the kill", killed.elapsed());
        problems.extend(procs::not_last(
            &dir.path().join("executions.log"),
            &recorded,
        ));
        let (peak, left) = queue_peak(&dir.path().join("queue.log"));
        if peak > QUEUE_LIMIT {
            problems.push(format!(
                "{peak} jobs of a queue of {QUEUE_LIMIT} were inside at once"
            ));
        }
        if left.len() != JOBS {
            problems.push(format!("{} jobs left the queue, not {JOBS}", left.len()));
        }
        let total = TAGGED + WAITERS + PARENTS * (1 + KIDS) + LOOPERS + JOBS;
        for (h, host) in hosts.iter().enumerate() {
            let counts = host.count().await.expect("count");
            let completed = counts.get(&StatusKind::Completed).copied().unwrap_or(0);
            let all: u64 = counts.values().sum();
            if completed != total as u64 || all != total as u64 {
                problems.push(format!("host {}: counts {counts:?}, {total} runs", h + 1));
            }
        }
        for host in hosts {
            host.shutdown().await.expect("shutdown");
        }
        assert!(
            problems.is_empty(),
            "{} problems:\n{}",
            problems.len(),
            problems.join("\n")
        );
    });
}
