//! A host that gives partitions back to a host that joined lets the step bodies
//! under way finish and be recorded, stops their runs, and only then releases the
//! leases: no step body runs twice, on either host, although every run always has
//! a body under way and half of them move to the new host mid-run.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reel::{Ctx, Host, Workflow};

/// Each step execution: idempotency key -> the hosts that ran it.
type Executions = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// Set once the partitions have moved: the runs then end.
static DONE: AtomicBool = AtomicBool::new(false);

/// Steps of 50 ms, one after the other, until a step returns that it is done.
#[derive(Clone)]
struct Ticker {
    host: String,
    executions: Executions,
}

impl Workflow for Ticker {
    const NAME: &'static str = "ticker";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let mut ticks = 0;
        loop {
            ticks += 1;
            let (host, executions) = (self.host.clone(), self.executions.clone());
            let done = ctx
                .step("tick", move |s| {
                    let (host, executions) = (host.clone(), executions.clone());
                    async move {
                        executions
                            .lock()
                            .expect("executions")
                            .entry(s.idempotency_key().to_owned())
                            .or_default()
                            .push(host);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok::<_, String>(DONE.load(Ordering::SeqCst))
                    }
                })
                .await?;
            if done {
                return Ok(ticks);
            }
        }
    }
}

async fn host(url: &str, name: &str, executions: &Executions) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Ticker {
            host: name.to_owned(),
            executions: executions.clone(),
        })
        .build()
        .await?)
}

/// How many step executions `host` ran.
fn ran_by(executions: &Executions, host: &str) -> usize {
    executions
        .lock()
        .expect("executions")
        .values()
        .flatten()
        .filter(|h| *h == host)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_does_not_rerun_steps_on_postgres() -> anyhow::Result<()> {
    let url = support::database("rebalance").await;
    let executions = Executions::default();
    let a = host(&url, "host-a", &executions).await?;
    support::spread_leases(&url, "host-", 1, 256).await;
    const RUNS: usize = 24;
    for i in 0..RUNS {
        a.start::<Ticker>(&format!("ticker-{i}"), ()).await?;
    }
    // `host-b` joins while every run is busy; `host-a` gives it half of the
    // partitions, with runs under way.
    let b = host(&url, "host-b", &executions).await?;
    support::spread_leases(&url, "host-", 2, 128).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while ran_by(&executions, "host-b") < 2 * RUNS {
        assert!(
            Instant::now() < deadline,
            "host-b never ran the runs it took"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    DONE.store(true, Ordering::SeqCst);
    let mut moved = 0;
    for i in 0..RUNS {
        let id = format!("ticker-{i}");
        tokio::time::timeout(Duration::from_secs(60), b.handle::<Ticker>(&id).result())
            .await
            .map_err(|_| anyhow::anyhow!("{id} did not complete"))??;
        let runs = executions.lock().expect("executions");
        let hosts: BTreeSet<&String> = runs
            .iter()
            .filter(|(key, _)| key.starts_with(&format!("{id}/")))
            .flat_map(|(_, hosts)| hosts)
            .collect();
        moved += usize::from(hosts.len() > 1);
    }
    let twice: Vec<(String, Vec<String>)> = executions
        .lock()
        .expect("executions")
        .iter()
        .filter(|(_, hosts)| hosts.len() > 1)
        .map(|(k, h)| (k.clone(), h.clone()))
        .collect();
    assert!(twice.is_empty(), "steps run twice: {twice:?}");
    println!("{moved} of {RUNS} runs moved from host-a to host-b mid-run");
    assert!(moved > 0, "some runs moved mid-run");
    a.shutdown().await?;
    b.shutdown().await?;
    Ok(())
}
