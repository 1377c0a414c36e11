//! Three hosts over one database; one of them (a child process, which joined first
//! and so leased every partition) is killed by SIGKILL mid-run. The two hosts of
//! this process take its partitions over once its leases expire, and every run
//! completes. Each step body logs a fresh token to a side file and returns it: the
//! recorded token is the *last* execution of its step, so no step ran again once
//! its completion was recorded, and each step is recorded once (no duplicate
//! appends).

mod support;
// Only its runtime: this test kills its child once, by hand.
#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/common/kill.rs"]
mod kill;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reel::{Ctx, Event, Host, Workflow};
use reel_postgres::{ClusterConfig, PgStore};

const RUNS: usize = 40;
const STEPS: usize = 6;
const CHILD_ENV: &str = "REEL_PG_TAKEOVER_CHILD_DIR";
const LEASE: Duration = Duration::from_millis(1500);

#[derive(Clone)]
struct Work {
    side: PathBuf,
}

impl Workflow for Work {
    const NAME: &'static str = "work";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut tokens = Vec::new();
        for i in 0..STEPS {
            let side = self.side.clone();
            let run = ctx.run_id().to_owned();
            let token = ctx
                .step("s", |s| {
                    let (side, run) = (side.clone(), run.clone());
                    async move {
                        // Some work, so that the kill lands inside steps too.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        let token = format!("{}-{}", s.idempotency_key(), reel::Uuid::new_v4());
                        let line = format!("{run} {} {token}\n", s.idempotency_key());
                        let mut f = std::fs::OpenOptions::new()
                            .append(true)
                            .create(true)
                            .open(&side)?;
                        f.write_all(line.as_bytes())?;
                        println!("exec {run}");
                        Ok::<_, std::io::Error>(token)
                    }
                })
                .await?;
            tokens.push(token);
            if i % 2 == 1 {
                ctx.sleep(Duration::from_millis(40)).await?;
            }
        }
        Ok(tokens)
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
    let mut executed = 0;
    let mut started = false;
    // Alone, the first host runs everything: let it get well into the runs.
    while !(started && executed >= 30) {
        let line = lines
            .next()
            .expect("the first host ended early")
            .expect("read");
        started |= line == "started";
        executed += usize::from(line.starts_with("exec "));
    }
    let recorded: HashMap<String, Vec<String>> = rt.block_on(async {
        let a = open(dir.path(), "host-a").await.expect("host a");
        let b = open(dir.path(), "host-b").await.expect("host b");
        victim.kill().expect("SIGKILL");
        let killed = Instant::now();
        victim.wait().expect("wait");
        let mut out = HashMap::new();
        for i in 0..RUNS {
            let id = format!("run-{i}");
            let run = [&a, &b][i % 2].handle::<Work>(&id);
            let tokens = tokio::time::timeout(Duration::from_secs(120), run.result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not complete"))
                .expect("every run completes");
            let events = run.events().await.expect("events");
            let completed = events
                .iter()
                .filter(|e| matches!(e, Event::StepCompleted { .. }))
                .count();
            assert_eq!(completed, STEPS, "{id}: each step recorded exactly once");
            out.insert(id, tokens);
        }
        println!(
            "every run completed {:?} after the kill (lease {LEASE:?})",
            killed.elapsed()
        );
        a.shutdown().await.expect("shutdown a");
        b.shutdown().await.expect("shutdown b");
        out
    });

    let side = std::fs::read_to_string(dir.path().join("executions.log")).expect("side file");
    let mut last: HashMap<String, String> = HashMap::new();
    for line in side.lines() {
        let mut parts = line.split(' ');
        let (Some(_run), Some(key), Some(token)) = (parts.next(), parts.next(), parts.next())
        else {
            continue; // a line torn by the kill
        };
        last.insert(key.to_owned(), token.to_owned());
    }
    println!("{} step executions", side.lines().count());
    for (run, tokens) in &recorded {
        for token in tokens {
            let key = token.rsplitn(6, '-').last().unwrap_or_default().to_owned();
            assert_eq!(
                last.get(&key),
                Some(token),
                "{run}: step {key} ran again after its completion was recorded"
            );
        }
    }
}
