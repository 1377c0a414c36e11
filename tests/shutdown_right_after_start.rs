//! `start` returns once a run is recorded and activates it in the background; a
//! host shut down right after must still stop that activation: no step body of a
//! host runs after its `shutdown()` has returned (an actor spawned during the
//! shutdown would otherwise run on, unsupervised, beside the next host's).

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Workflow};

/// Whether host 1 has shut down.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// Step bodies of host 1 that began after its shutdown returned.
static LATE: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Work {
    host: u32,
}

impl Workflow for Work {
    const NAME: &'static str = "work";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let host = self.host;
        let run = ctx.run_id().to_owned();
        ctx.step("body", move |_| {
            if host == 1 && CLOSED.load(Ordering::SeqCst) {
                LATE.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(run.clone());
            }
            async { Ok::<_, String>(()) }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_step_runs_after_shutdown_returns() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let host = common::hosts::open(&path, Work { host: 1 }).await?;
    let mut ids = Vec::new();
    for i in 0..200 {
        let id = format!("run-{i}");
        host.start::<Work>(&id, ()).await?;
        ids.push(id);
    }
    host.shutdown().await?;
    CLOSED.store(true, Ordering::SeqCst);

    // The next host finishes every run; meanwhile a leftover of host 1 would run.
    let host = common::hosts::open(&path, Work { host: 2 }).await?;
    for id in &ids {
        let run = host.start::<Work>(id, ()).await?;
        within(Duration::from_secs(30), "a run's end", run.result()).await??;
    }
    host.shutdown().await?;
    let late = LATE.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        late.is_empty(),
        "host 1 ran steps after its shutdown: {late:?}"
    );
    Ok(())
}
