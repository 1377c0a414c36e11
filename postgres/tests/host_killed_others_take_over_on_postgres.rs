//! Three hosts over one database; one of them (a child process, which joined first
//! and so leased every partition) is killed by SIGKILL mid-run. The two hosts of
//! this process take its partitions over once its leases expire, and every run
//! completes. Each step body logs a fresh token to a side file and returns it: the
//! recorded token is the *last* execution of its step, so no step ran again once
//! its completion was recorded, and each step is recorded once (no duplicate
//! appends).
//!
//! Timers: `sleeper` runs, started on the surviving hosts before the kill, run on
//! their owner (the first host): their first timer fires there. Their second
//! timer comes due after the kill and before the takeover; the new owner fires it
//! at once when it takes the partition (its `TimerFired` is appended there: the
//! step after it runs there). And the takeover itself happens within a bound
//! derived from the lease time (a liveness check, not a performance figure).

mod support;
// Only its runtime: this test kills its child once, by hand.
#[allow(unreachable_pub)]
#[path = "../../tests/common/kill.rs"]
mod kill;
#[allow(unreachable_pub)]
#[path = "../../tests/common/tokens.rs"]
mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reel::{Ctx, Event, Host, Workflow};
use reel_postgres::{ClusterConfig, PgStore, partition_of};
use tokens::Tokens as Work;

const RUNS: usize = 40;
const STEPS: usize = 6;
const SLEEPERS: usize = 8;
const CHILD_ENV: &str = "REEL_PG_TAKEOVER_CHILD_DIR";
/// Long enough that a sleeper's second timer, due [`DUE_AFTER`] after the sleepers
/// start, comes due before the killed host's leases expire (at least two thirds
/// of a lease after the kill: it renewed at most a third of a lease before).
const LEASE: Duration = Duration::from_secs(3);
const DUE_AFTER: Duration = Duration::from_millis(1200);
/// Slack of the liveness bounds, for a loaded machine and a debug build.
const SLACK: Duration = Duration::from_secs(10);

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A run with two timers: a short one that fires on its owner before the kill,
/// and one due at `due_ms` (epoch), after the kill. Each step returns the host it
/// ran on; the last also when (epoch ms).
#[derive(Clone)]
struct Sleeper {
    host: String,
}

impl Sleeper {
    async fn step(&self, ctx: &Ctx, name: &'static str) -> reel::Result<String> {
        let host = self.host.clone();
        ctx.step(name, move |_| {
            let host = host.clone();
            async move { Ok::<_, String>(host) }
        })
        .await
    }
}

impl Workflow for Sleeper {
    const NAME: &'static str = "sleeper";
    type Input = u64;
    type Output = (String, String, String, u64);
    async fn run(&self, ctx: Ctx, due_ms: u64) -> reel::Result<Self::Output> {
        let first = self.step(&ctx, "first").await?;
        ctx.sleep(Duration::from_millis(30)).await?;
        let second = self.step(&ctx, "second").await?;
        ctx.sleep_until(UNIX_EPOCH + Duration::from_millis(due_ms))
            .await?;
        let host = self.host.clone();
        let (third, at) = ctx
            .step("third", move |_| {
                let host = host.clone();
                async move { Ok::<_, String>((host, epoch_ms())) }
            })
            .await?;
        Ok((first, second, third, at))
    }
}

/// A host named `name` over the database whose URL is in `dir/url`.
async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = PgStore::join(&url, ClusterConfig::new(name).lease_ttl(LEASE)).await?;
    Ok(Host::builder()
        .store(store)
        .register(Work {
            side: dir.join("executions.log"),
            steps: STEPS,
            pause_every: 2,
            pause: Duration::from_millis(40),
            // Some work, so that the kill lands inside steps too.
            busy: Duration::from_millis(5),
        })
        .register(Sleeper {
            host: name.to_owned(),
        })
        .build()
        .await?)
}

/// The child: the first host; starts every run and works until killed.
fn child(dir: &Path) {
    kill::runtime().block_on(async {
        let host = open(dir, "host-killed").await.expect("open");
        for i in 0..RUNS {
            host.start::<Work>(&format!("run-{i}"), ())
                .await
                .expect("start");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// Watches the lease table from the kill on: when each partition first had an
/// owner other than `killed` (epoch ms), until every one has (a minute at most).
async fn watch_takeover(url: String, killed: &'static str) -> BTreeMap<i16, u64> {
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let mut taken = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while taken.len() < 256 && Instant::now() < deadline {
        let rows = client
            .query("SELECT part, owner FROM reel_leases", &[])
            .await
            .expect("leases");
        let now = epoch_ms();
        for row in rows {
            let (part, owner): (i16, Option<String>) = (row.get(0), row.get(1));
            if owner.is_some_and(|o| o != killed) {
                taken.entry(part).or_insert(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(client);
    let _ = task.await;
    taken
}

#[test]
fn host_killed_others_take_over_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = kill::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("takeover"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");

    let mut victim = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "host_killed_others_take_over_on_postgres",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the first host");
    let mut lines = BufReader::new(victim.stdout.take().expect("stdout")).lines();
    let mut next_line = || {
        lines
            .next()
            .expect("the first host ended early")
            .expect("read")
    };
    let mut executed = 0;
    let mut started = false;
    // Alone, the first host runs everything: let it get well into the runs.
    while !(started && executed >= 30) {
        let line = next_line();
        started |= line == "started";
        executed += usize::from(line.starts_with("exec "));
    }
    // The other hosts join (the first keeps every partition: its leases are
    // live) and start the sleepers, which run on the first host; once each has
    // recorded its second step (its first timer fired), the first host dies.
    let (a, b, due_ms) = rt.block_on(async {
        let a = open(dir.path(), "host-a").await.expect("host a");
        let b = open(dir.path(), "host-b").await.expect("host b");
        let due_ms = epoch_ms() + u64::try_from(DUE_AFTER.as_millis()).expect("ms");
        for i in 0..SLEEPERS {
            [&a, &b][i % 2]
                .start::<Sleeper>(&format!("sleeper-{i}"), due_ms)
                .await
                .expect("start a sleeper");
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for i in 0..SLEEPERS {
            let run = a.handle::<Sleeper>(&format!("sleeper-{i}"));
            loop {
                let events = run.events().await.expect("events");
                let steps = events
                    .iter()
                    .filter(|e| matches!(e, Event::StepCompleted { .. }))
                    .count();
                if steps >= 2 {
                    break;
                }
                assert!(Instant::now() < deadline, "the sleepers never ran");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        (a, b, due_ms)
    });
    victim.kill().expect("SIGKILL");
    let killed = Instant::now();
    let killed_ms = epoch_ms();
    victim.wait().expect("wait");
    assert!(
        killed_ms < due_ms,
        "the sleepers reached their second step too late to test overdue timers"
    );
    let recorded: HashMap<String, Vec<String>> = rt.block_on(async {
        let taken = tokio::spawn(watch_takeover(url.clone(), "host-killed"));
        let mut out = HashMap::new();
        for i in 0..RUNS {
            let id = format!("run-{i}");
            let run = [&a, &b][i % 2].handle::<Work>(&id);
            let tokens = tokio::time::timeout(Duration::from_secs(120), run.result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not complete"))
                .expect("every run completes");
            let events = run.events().await.expect("events");
            tokens::assert_steps_once(&id, &events, STEPS);
            out.insert(id, tokens);
        }
        println!(
            "every run completed {:?} after the kill (lease {LEASE:?})",
            killed.elapsed()
        );
        let taken = taken.await.expect("lease watch");
        assert_eq!(taken.len(), 256, "every partition was taken over");
        // Liveness: the killed host's leases expire at most a lease after its
        // last renewal, and the others renew every third of a lease.
        let bound = u64::try_from((LEASE + LEASE / 3 + SLACK).as_millis()).expect("ms");
        let last = taken.values().max().copied().unwrap_or(0);
        assert!(
            last - killed_ms <= bound,
            "the takeover took {} ms after the kill, past {bound} ms",
            last - killed_ms
        );
        let mut latest = 0;
        for i in 0..SLEEPERS {
            let id = format!("sleeper-{i}");
            let run = b.handle::<Sleeper>(&id);
            let (first, second, third, fired_ms) =
                tokio::time::timeout(Duration::from_secs(60), run.result())
                    .await
                    .unwrap_or_else(|_| panic!("{id} did not complete"))
                    .expect("every sleeper completes");
            // Started on host-a or host-b, run by the owner, whose timer fired.
            assert_eq!(
                (first.as_str(), second.as_str()),
                ("host-killed", "host-killed")
            );
            assert!(third == "host-a" || third == "host-b", "{id}: {third}");
            let taken_ms = taken[&partition_of(&id)];
            assert!(due_ms < taken_ms, "{id}: due before the takeover");
            // Overdue at the takeover: fired at once, by the recovery of the
            // partition (within a third of a lease, when the taker's next renewal
            // would come, plus a second for a loaded machine).
            let late = fired_ms.saturating_sub(taken_ms);
            latest = latest.max(late);
            let at_once =
                u64::try_from((LEASE / 3 + Duration::from_secs(1)).as_millis()).expect("ms");
            assert!(
                late <= at_once,
                "{id}: an overdue timer fired {late} ms after the takeover (bound {at_once} ms)"
            );
            let events = run.events().await.expect("events");
            let fired = events
                .iter()
                .filter(|e| matches!(e, Event::TimerFired { .. }))
                .count();
            assert_eq!(fired, 2, "{id}: each timer fired once: {events:?}");
        }
        println!(
            "partitions taken over {} ms after the kill; overdue timers fired at most \
             {latest} ms after their partition was taken",
            last - killed_ms
        );
        a.shutdown().await.expect("shutdown a");
        b.shutdown().await.expect("shutdown b");
        out
    });

    let (executions, reruns) =
        tokens::assert_recorded_last(&dir.path().join("executions.log"), &recorded);
    println!("{executions} step executions, {reruns} of steps not recorded yet");
}
