//! Runs that continue as new after every two signals, fed bursts of signals
//! through two surviving hosts (by turn) while their owner, a child process, is
//! SIGKILLed mid-way: signals sent before the kill sit buffered in the log and
//! must carry over from segment to segment, signals sent after it wait in the
//! dead owner's inbox for the taker. Every run receives every signal exactly
//! once, in the order sent, and ends with the segment count it should.

mod procs;
mod support;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use procs::Proc;
use reel::{Ctx, Host, RunStatus, Workflow};
use reel_postgres::partition_of;

const CHILD_ENV: &str = "REEL_PG_SIGNAL_SEGMENTS_CHILD_DIR";
const TEST: &str = "signals_carry_over_segments_across_a_kill_on_postgres";
const RUNS: usize = 6;
const TOTAL: u32 = 24;
const PER_SEGMENT: u32 = 2;

/// Receives `PER_SEGMENT` signals `s` per segment, then continues as new, until
/// it has `TOTAL`; returns them and its segment count.
#[derive(Clone)]
struct Relay;

impl Workflow for Relay {
    const NAME: &'static str = "relay";
    type Input = (u32, Vec<u32>);
    type Output = (u32, Vec<u32>);
    async fn run(
        &self,
        ctx: Ctx,
        (seg, mut got): (u32, Vec<u32>),
    ) -> reel::Result<(u32, Vec<u32>)> {
        for _ in 0..PER_SEGMENT {
            let n: u32 = ctx.wait_for_signal("s").await?;
            got.push(n);
        }
        // A little work per segment, so a kill lands between segments too.
        ctx.sleep(Duration::from_millis(30)).await?;
        if (got.len() as u32) < TOTAL {
            return ctx.continue_as_new::<Relay>((seg + 1, got)).await;
        }
        Ok((seg + 1, got))
    }
}

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder().store(store).register(Relay).build().await?)
}

/// `RUNS` ids on partitions of host-0.
fn ids(owners: &[usize]) -> Vec<String> {
    (0..)
        .map(|n| format!("relay-{n}"))
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
        let owners = support::settled_leases(&url, "host-", 3).await;
        for id in ids(&owners) {
            host.start::<Relay>(&id, (0, Vec::new()))
                .await
                .expect("start");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// Signals `range` to every run, each through host 1 or 2 by turn.
async fn send(hosts: &[Host], ids: &[String], range: std::ops::Range<u32>) {
    for k in range {
        for (i, id) in ids.iter().enumerate() {
            hosts[(k as usize + i) % 2]
                .run(id)
                .signal("s", &k, &format!("s-{k}"))
                .await
                .expect("signal");
        }
    }
}

#[test]
fn signals_carry_over_segments_across_a_kill_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("signal_segments"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let victim = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[]);
    let (hosts, ids) = rt.block_on(async {
        let hosts = vec![
            open(dir.path(), "host-1").await.expect("host 1"),
            open(dir.path(), "host-2").await.expect("host 2"),
        ];
        let owners = support::settled_leases(&url, "host-", 3).await;
        std::fs::write(dir.path().join("go"), "").expect("go");
        (hosts, ids(&owners))
    });
    victim.until(Duration::from_secs(60), |l| l.ends_with("started"));
    rt.block_on(async {
        send(&hosts, &ids, 0..TOTAL / 2).await;
        // Mid-way: some segments done on the owner, signals still buffered.
        let first = hosts[0].run(&ids[0]);
        procs::until("the first segments", Duration::from_secs(30), || async {
            first.records().await.is_ok_and(|r| {
                r.first().is_some_and(|r| r.seq > 0)
                    || r.iter()
                        .any(|r| matches!(r.event, reel::Event::ContinuedAsNew { .. }))
            })
        })
        .await;
    });
    victim.kill();
    rt.block_on(async {
        send(&hosts, &ids, TOTAL / 2..TOTAL).await;
        let mut problems = Vec::new();
        for id in &ids {
            let run = hosts[1].handle::<Relay>(id);
            match tokio::time::timeout(Duration::from_secs(40), run.result()).await {
                Ok(Ok((segments, got))) => {
                    if got != (0..TOTAL).collect::<Vec<_>>() {
                        problems.push(format!("{id}: received {got:?}"));
                    }
                    if segments != TOTAL / PER_SEGMENT {
                        problems.push(format!("{id}: {segments} segments"));
                    }
                }
                other => problems.push(format!("{id}: {other:?} ({:?})", run.status().await)),
            }
            if !matches!(run.status().await, Ok(RunStatus::Completed)) {
                problems.push(format!("{id}: status {:?}", run.status().await));
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
