//! Queue limits across a SIGKILL of a host process (`host-0`, a child) that
//! started runs on the queue and holds admitted ones; the hosts of this process
//! take its partitions over. Every step appends to one shared log (`in`/`out`
//! lines, in the order written by every process):
//! - concurrency: runs started on three hosts, one killed mid-way; never more
//!   runs between their `in` and `out` than the limit (the dead host's admitted
//!   runs keep their slots until their takers finish them); the dead host's
//!   starts, retried on the others, are the same runs; every run ends once and
//!   no recorded step runs again;
//! - rate limit (on a test clock the child follows): the window's admissions made
//!   by the dead host count on the others, and each later window admits exactly
//!   its share, until every run (none lost) has ended.

mod procs;
mod support;

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use procs::{Proc, epoch_ms};
use reel::testing::TestClock;
use reel::{Ctx, Event, Host, QueueOptions, Workflow};
use support::shared_clock;

const CONC_ENV: &str = "REEL_PG_QUEUE_KILL_CONC_DIR";
const CONC_TEST: &str = "concurrency_holds_across_a_killed_host_on_postgres";
const RATE_ENV: &str = "REEL_PG_QUEUE_KILL_RATE_DIR";
const RATE_TEST: &str = "rate_limit_holds_across_a_killed_host_on_postgres";
const LIMIT: Duration = Duration::from_secs(90);
const CONCURRENCY: usize = 3;
const RUNS_EACH: usize = 24;
const RATE: usize = 2;
const WINDOW: Duration = Duration::from_secs(60);
const RATED_RUNS: usize = 7;

/// Steps `in`, `work` (busy a little) and `out`; `in` and `out` append
/// `<in|out>\t<run>\t<tag>\t<token>` to `side` and return the token.
#[derive(Clone)]
struct Slot {
    side: PathBuf,
    tag: String,
}

impl Slot {
    async fn mark(&self, ctx: &Ctx, what: &'static str) -> reel::Result<String> {
        let (side, tag, run) = (self.side.clone(), self.tag.clone(), ctx.run_id().to_owned());
        ctx.step(what, move |_| {
            let (side, tag, run) = (side.clone(), tag.clone(), run.clone());
            async move {
                let token = format!("{tag}|{run}/{what}|{}", reel::Uuid::new_v4());
                let line = format!("{what}\t{run}\t{tag}\t{token}\n");
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&side)?;
                f.write_all(line.as_bytes())?;
                Ok::<_, std::io::Error>(token)
            }
        })
        .await
    }
}

impl Workflow for Slot {
    const NAME: &'static str = "slot";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let a = self.mark(&ctx, "in").await?;
        ctx.step("work", |_| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, String>(epoch_ms())
        })
        .await?;
        let b = self.mark(&ctx, "out").await?;
        Ok(vec![a, b])
    }
}

/// The shared log's lines: (what, run, tag, token).
fn lines(side: &Path) -> Vec<(String, String, String, String)> {
    std::fs::read_to_string(side)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let [what, run, tag, token] = f[..] else {
                return None;
            };
            Some((what.into(), run.into(), tag.into(), token.into()))
        })
        .collect()
}

/// Runs that have entered (an `in` line).
fn entered(side: &Path) -> BTreeSet<String> {
    lines(side)
        .into_iter()
        .filter(|l| l.0 == "in")
        .map(|l| l.1)
        .collect()
}

/// The most runs between their first `in` and their first `out` at once.
fn most_at_once(side: &Path) -> usize {
    let (mut now, mut done, mut most) = (BTreeSet::new(), BTreeSet::new(), 0);
    for (what, run, ..) in lines(side) {
        if what == "in" && !done.contains(&run) {
            now.insert(run);
        } else if what == "out" {
            now.remove(&run);
            done.insert(run);
        }
        most = most.max(now.len());
    }
    most
}

/// Problems: a recorded token that is not the last execution of its step.
fn not_last(side: &Path, recorded: &HashMap<String, Vec<String>>) -> Vec<String> {
    let mut last = HashMap::new();
    for (what, run, _, token) in lines(side) {
        last.insert(format!("{run}/{what}"), token);
    }
    let mut problems = Vec::new();
    for (run, tokens) in recorded {
        for token in tokens {
            let key = token.split('|').nth(1).unwrap_or_default();
            if last.get(key) != Some(token) {
                problems.push(format!("{run}: {token} is not the last of {key}"));
            }
        }
    }
    problems
}

async fn open(
    dir: &Path,
    name: &str,
    queue: QueueOptions,
    clock: Option<&TestClock>,
) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    let mut builder = Host::builder()
        .store(store)
        .register(Slot {
            side: dir.join("slots.log"),
            tag: name.to_owned(),
        })
        .queue("q", queue);
    if let Some(clock) = clock {
        builder = builder.clock(clock.clone());
    }
    Ok(builder.build().await?)
}

fn conc() -> QueueOptions {
    QueueOptions::default().concurrency(CONCURRENCY)
}

fn rated() -> QueueOptions {
    QueueOptions::default().rate_limit(RATE as u32, WINDOW)
}

fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A child host: joins, waits for `go`, starts `runs` runs `k-<n>` on the queue,
/// says `started` and works until killed.
fn child(dir: &Path, queue: QueueOptions, clock: Option<TestClock>, runs: usize) {
    procs::runtime().block_on(async {
        if let Some(clock) = &clock {
            shared_clock::follow(clock.clone(), dir);
        }
        let url = std::fs::read_to_string(dir.join("url")).expect("url");
        let host = open(dir, "host-0", queue, clock.as_ref())
            .await
            .expect("open");
        let go = dir.join("go");
        let deadline = Instant::now() + LIMIT;
        while !go.exists() {
            assert!(Instant::now() < deadline, "never told to go");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let hosts = std::fs::read_to_string(dir.join("hosts")).expect("hosts");
        support::spread_leases(&url, "host-", hosts.trim().parse().expect("n"), 60).await;
        for n in 0..runs {
            host.start_on::<Slot>("q", &format!("k-{n}"), ())
                .await
                .expect("start on the queue");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// Waits until `check` holds of the shared log.
async fn until_log(side: &Path, what: &str, check: impl Fn(&Path) -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !check(side) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for every run's result; returns its tokens, and problems with its log.
async fn finish(host: &Host, ids: &[String]) -> (HashMap<String, Vec<String>>, Vec<String>) {
    let (mut recorded, mut problems) = (HashMap::new(), Vec::new());
    for id in ids {
        let run = host.handle::<Slot>(id);
        let Ok(tokens) = tokio::time::timeout(LIMIT, run.result()).await else {
            panic!("{id} did not end: {:?}", run.status().await);
        };
        let tokens = tokens.expect("a queued run completes");
        let events = run.events().await.expect("events");
        let steps = events
            .iter()
            .filter(|e| matches!(e, Event::StepCompleted { .. }))
            .count();
        let begun = events
            .iter()
            .filter(|e| matches!(e, Event::RunStarted { .. }))
            .count();
        if (begun, steps) != (1, 3) {
            problems.push(format!("{id}: {begun} starts, {steps} steps recorded"));
        }
        recorded.insert(id.clone(), tokens);
    }
    (recorded, problems)
}

#[test]
fn concurrency_holds_across_a_killed_host_on_postgres() {
    if let Ok(dir) = std::env::var(CONC_ENV) {
        child(Path::new(&dir), conc(), None, RUNS_EACH);
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let side = dir.join("slots.log");
    let url = rt.block_on(support::database("queue_kill_conc"));
    std::fs::write(dir.join("url"), &url).expect("url file");
    std::fs::write(dir.join("hosts"), "3").expect("hosts file");
    let victim = Proc::spawn(CONC_TEST, CONC_ENV, dir, &[]);
    let hosts = rt.block_on(async {
        let a = open(dir, "host-1", conc(), None).await.expect("host 1");
        let b = open(dir, "host-2", conc(), None).await.expect("host 2");
        support::settled_leases(&url, "host-", 3).await;
        std::fs::write(dir.join("go"), "").expect("go");
        [a, b]
    });
    victim.until(LIMIT, |l| l.ends_with("started"));
    let mut ids: Vec<String> = (0..RUNS_EACH).map(|n| format!("k-{n}")).collect();
    rt.block_on(async {
        // Started here meanwhile, half on each host.
        for n in 0..RUNS_EACH {
            let id = format!("m-{n}");
            hosts[n % 2]
                .start_on::<Slot>("q", &id, ())
                .await
                .expect("start");
            ids.push(id);
        }
        until_log(&side, "runs to enter", |s| entered(s).len() >= 8).await;
    });
    victim.kill();
    rt.block_on(async {
        // The dead host's starts, retried on the others: the same runs.
        for n in 0..RUNS_EACH {
            hosts[n % 2]
                .start_on::<Slot>("q", &format!("k-{n}"), ())
                .await
                .expect("start again");
        }
        let (recorded, mut problems) = finish(&hosts[0], &ids).await;
        problems.extend(not_last(&side, &recorded));
        let most = most_at_once(&side);
        assert!(
            most <= CONCURRENCY,
            "{most} runs of a queue of {CONCURRENCY} ran at once"
        );
        assert_eq!(entered(&side).len(), ids.len(), "every run entered");
        assert!(problems.is_empty(), "{problems:#?}");
        println!("at most {most} at once");
        for h in hosts {
            h.shutdown().await.expect("shutdown");
        }
    });
}

#[test]
fn rate_limit_holds_across_a_killed_host_on_postgres() {
    if let Ok(dir) = std::env::var(RATE_ENV) {
        child(
            Path::new(&dir),
            rated(),
            Some(TestClock::new(start())),
            RATED_RUNS,
        );
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let side = dir.join("slots.log");
    let url = rt.block_on(support::database("queue_kill_rate"));
    std::fs::write(dir.join("url"), &url).expect("url file");
    std::fs::write(dir.join("hosts"), "2").expect("hosts file");
    let clock = TestClock::new(start());
    let victim = Proc::spawn(RATE_TEST, RATE_ENV, dir, &[]);
    let host = rt.block_on(async {
        let host = open(dir, "host-1", rated(), Some(&clock))
            .await
            .expect("host 1");
        support::spread_leases(&url, "host-", 2, 100).await;
        std::fs::write(dir.join("go"), "").expect("go");
        host
    });
    victim.until(LIMIT, |l| l.ends_with("started"));
    rt.block_on(until_log(&side, "the first window", |s| {
        entered(s).len() >= RATE
    }));
    victim.kill();
    let ids: Vec<String> = (0..RATED_RUNS).map(|n| format!("k-{n}")).collect();
    rt.block_on(async {
        let mut window = 1;
        loop {
            // The window's runs end (on their takers), then every host has
            // offered its waiting runs at least once (an inbox poll, a second):
            // still no more than the window's share.
            let admitted: Vec<String> = entered(&side).into_iter().collect();
            finish(&host, &admitted).await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let now = entered(&side).len();
            assert_eq!(
                now,
                (RATE * window).min(RATED_RUNS),
                "admitted by window {window}"
            );
            if now == RATED_RUNS {
                break;
            }
            shared_clock::set(&clock, dir, start() + WINDOW * window as u32);
            window += 1;
            until_log(&side, "the next window", |s| {
                entered(s).len() >= (RATE * window).min(RATED_RUNS)
            })
            .await;
        }
        let (recorded, mut problems) = finish(&host, &ids).await;
        problems.extend(not_last(&side, &recorded));
        assert!(problems.is_empty(), "{problems:#?}");
        host.shutdown().await.expect("shutdown");
    });
}
