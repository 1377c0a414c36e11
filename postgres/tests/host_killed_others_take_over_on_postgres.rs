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
#[allow(unreachable_pub)]
#[path = "../../tests/common/tokens.rs"]
mod tokens;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reel::{Event, Host};
use reel_postgres::{ClusterConfig, PgStore};
use tokens::Tokens as Work;

const RUNS: usize = 40;
const STEPS: usize = 6;
const CHILD_ENV: &str = "REEL_PG_TAKEOVER_CHILD_DIR";
const LEASE: Duration = Duration::from_millis(1500);

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

    let (executions, reruns) =
        tokens::assert_recorded_last(&dir.path().join("executions.log"), &recorded);
    println!("{executions} step executions, {reruns} of steps not recorded yet");
}
