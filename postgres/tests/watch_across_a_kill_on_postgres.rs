//! Watches through a surviving host of runs whose owner (a child process) is
//! SIGKILLed mid-run, and of runs that continue as new meanwhile: each watch
//! streams the run's log as the takers write it, without a gap or a repeat, and
//! ends after the terminal record; what it streamed is what `records()` reads.

mod procs;
mod support;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use procs::{Proc, Tagged};
use reel::{Event, Host};
use reel_postgres::partition_of;

const CHILD_ENV: &str = "REEL_PG_WATCH_KILL_CHILD_DIR";
const TEST: &str = "watch_across_a_kill_on_postgres";
const RUNS: usize = 8;

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Tagged {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
            steps: 16,
            busy: Duration::from_millis(10),
            pause_every: 4,
            pause: Duration::from_millis(100),
        })
        .build()
        .await?)
}

fn ids(owners: &[usize]) -> Vec<String> {
    (0..)
        .map(|n| format!("w-{n}"))
        .filter(|id| owners[partition_of(id) as usize] == 0)
        .take(RUNS)
        .collect()
}

fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let url = std::fs::read_to_string(dir.join("url")).expect("url");
        let host = open(dir, "host-0").await.expect("open");
        let go = dir.join("go");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !go.exists() {
            assert!(Instant::now() < deadline, "never told to go");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let owners = support::spread_leases(&url, "host-", 2, 100).await;
        for id in ids(&owners) {
            host.start::<Tagged>(&id, ()).await.expect("start");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

#[test]
fn watch_across_a_kill_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("watch_kill"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let victim = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[]);
    let (host, ids) = rt.block_on(async {
        let host = open(dir.path(), "host-1").await.expect("host 1");
        let owners = support::spread_leases(&url, "host-", 2, 100).await;
        std::fs::write(dir.path().join("go"), "").expect("go");
        (host, ids(&owners))
    });
    victim.until(Duration::from_secs(60), |l| l.ends_with("started"));
    let watches: Vec<_> = ids
        .iter()
        .map(|id| {
            let stream = host.run(id).watch();
            rt.spawn(async move {
                tokio::time::timeout(
                    Duration::from_secs(40),
                    stream.collect::<Vec<reel::Result<reel::Record>>>(),
                )
                .await
            })
        })
        .collect();
    let mut execs = 0;
    victim.until(Duration::from_secs(30), |l| {
        execs += usize::from(l.starts_with("exec host-0"));
        execs >= 30
    });
    victim.kill();
    rt.block_on(async {
        let mut problems = Vec::new();
        for (id, watch) in ids.iter().zip(watches) {
            let Ok(streamed) = watch.await.expect("watch task") else {
                problems.push(format!("{id}: the watch did not end"));
                continue;
            };
            let streamed: Vec<reel::Record> = match streamed.into_iter().collect() {
                Ok(r) => r,
                Err(e) => {
                    problems.push(format!("{id}: the watch failed: {e}"));
                    continue;
                }
            };
            let seqs: Vec<u64> = streamed.iter().map(|r| r.seq).collect();
            if seqs != (0..seqs.len() as u64).collect::<Vec<_>>() {
                problems.push(format!("{id}: streamed sequence numbers {seqs:?}"));
            }
            if !matches!(
                streamed.last().map(|r| &r.event),
                Some(Event::RunCompleted { .. })
            ) {
                problems.push(format!("{id}: the watch ended on {:?}", streamed.last()));
            }
            let records = host.run(id).records().await.expect("records");
            let read: Vec<(u64, String)> = records
                .iter()
                .map(|r| (r.seq, format!("{:?}", r.event)))
                .collect();
            let seen: Vec<(u64, String)> = streamed
                .iter()
                .map(|r| (r.seq, format!("{:?}", r.event)))
                .collect();
            if read != seen {
                problems.push(format!(
                    "{id}: streamed {} records, the log holds {}",
                    seen.len(),
                    read.len()
                ));
            }
        }
        host.shutdown().await.expect("shutdown");
        assert!(
            problems.is_empty(),
            "{} problems:\n{}",
            problems.len(),
            problems.join("\n")
        );
    });
}
