//! `Host::count` while runs move between statuses and none is created or
//! deleted: the per-status counts are one reading, so they always add up to the
//! number of runs (the inspector's `/api/count` shows their sum as `total`).
//! Runs here loop between running and suspended.

mod common;

use std::time::{Duration, Instant};

use reel::{Ctx, Host, Workflow};

const RUNS: u64 = 64;

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
async fn counts_add_up_to_the_runs_while_they_move() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Churn)
        .build()
        .await?;
    for i in 0..RUNS {
        host.start::<Churn>(&format!("c{i:03}"), ()).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut bad = None;
    let mut reads = 0;
    while Instant::now() < deadline {
        let counts = host.count().await?;
        reads += 1;
        let total: u64 = counts.values().sum();
        if total != RUNS {
            bad = Some(format!("read {reads}: total {total}: {counts:?}"));
            break;
        }
    }
    for i in 0..RUNS {
        host.run(&format!("c{i:03}")).terminate("done").await?;
    }
    host.shutdown().await?;
    assert!(bad.is_none(), "{bad:?}");
    Ok(())
}
