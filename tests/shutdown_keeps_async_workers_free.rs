//! `Host::shutdown` closes the store (joins the writer thread, fsyncs) on the blocking
//! pool, not on an async worker: on a single-threaded runtime, other tasks keep
//! running while the store closes.

use std::sync::mpsc;
use std::time::Duration;

use reel::{Ctx, FjallStore, Host, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

struct Double;
impl Workflow for Double {
    const NAME: &'static str = "double";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("double", |_| async move { Ok::<_, String>(n * 2) })
            .await
    }
}

async fn scenario() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    // Closing the store waits until a task on this runtime lets it go on.
    let (hold, gate) = Fault::hold(Op::Close);
    faults.inject(hold);
    let host = Host::builder()
        .store(faults.clone())
        .register(Double)
        .build()
        .await?;
    assert_eq!(host.start::<Double>("d", 21).await?.result().await?, 42);
    let releaser = tokio::spawn(async move {
        gate.wait_arrived().await;
        gate.release();
    });
    host.shutdown().await?;
    releaser.await?;
    assert_eq!(faults.calls(Op::Close), 1);
    Ok(())
}

#[test]
fn shutdown_closes_the_store_off_the_async_workers() {
    let (done, finished) = mpsc::channel();
    // The runtime runs on a thread of its own: if shutdown blocks its only worker,
    // this test fails after the timeout instead of hanging.
    std::thread::spawn(move || {
        let result = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(scenario()));
        let _ = done.send(result.map_err(|e| e.to_string()));
    });
    match finished.recv_timeout(Duration::from_secs(30)) {
        Ok(result) => result.expect("scenario"),
        Err(_) => panic!("shutdown blocked the async worker while closing the store"),
    }
}
