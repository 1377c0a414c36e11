//! A listing filtered by several statuses while runs move between them: each run
//! that exists for the whole listing and stays within the filtered statuses is
//! listed exactly once per page — not twice (seen under its old status and its
//! new one) and not missed (moved from the status read second to the one read
//! first). Runs here loop between running and suspended (a step, then a 1 ms
//! sleep), the listing asks for `running,suspended` in one page.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::within;
use reel::{Ctx, Host, RunFilter, StatusKind, Workflow};

const RUNS: usize = 64;
const LISTINGS: usize = 150;

/// Loops for ever: a step, then a short sleep.
struct Churn;
impl Workflow for Churn {
    const NAME: &'static str = "churn";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        loop {
            ctx.step("tick", |_| async { Ok::<_, String>(()) }).await?;
            ctx.sleep(Duration::from_millis(1)).await?;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_moving_between_filtered_statuses_are_listed_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Churn)
        .build()
        .await?;
    for i in 0..RUNS {
        host.start::<Churn>(&format!("c{i:03}"), ()).await?;
    }
    let filter = RunFilter::default()
        .status([StatusKind::Running, StatusKind::Suspended])
        .limit(1000);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut bad = Vec::new();
    for n in 0..LISTINGS {
        let page = within(Duration::from_secs(20), "a page", host.list(filter.clone())).await??;
        assert!(page.next.is_none());
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for r in &page.items {
            *seen.entry(r.run_id.as_str()).or_default() += 1;
        }
        let twice: Vec<&&str> = seen
            .iter()
            .filter(|(_, c)| **c > 1)
            .map(|(k, _)| k)
            .collect();
        if !twice.is_empty() || seen.len() != RUNS {
            bad.push(format!(
                "listing {n}: {} rows, {} runs, twice: {twice:?}",
                page.items.len(),
                seen.len()
            ));
            let all = host.list(RunFilter::default().limit(1000)).await?;
            let mut kinds: HashMap<String, usize> = HashMap::new();
            for r in &all.items {
                *kinds.entry(format!("{:?}", r.status.kind())).or_default() += 1;
            }
            bad.push(format!("then: {kinds:?}, count {:?}", host.count().await?));
            break;
        }
        if Instant::now() > deadline {
            let all = host.list(RunFilter::default().limit(1000)).await?;
            let mut kinds: HashMap<String, usize> = HashMap::new();
            for r in &all.items {
                *kinds.entry(format!("{:?}", r.status.kind())).or_default() += 1;
            }
            bad.push(format!("then: {kinds:?}, count {:?}", host.count().await?));
            break;
        }
    }
    for i in 0..RUNS {
        host.run(&format!("c{i:03}")).terminate("done").await?;
    }
    host.shutdown().await?;
    assert!(
        bad.is_empty(),
        "{} bad listings: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    Ok(())
}
