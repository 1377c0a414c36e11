//! A finished run deleted through a host that does not own it, and its id used
//! again at once for a new run, through that host: the new run runs on the owner
//! (after its end, the timer the old run no longer waited for comes due on the
//! owner, which keeps actors for a minute: it must not wake a stale actor that
//! the new run's wake-up would then reach).

mod procs;
mod support;

use std::time::Duration;

use reel::{Ctx, Host, Workflow};
use reel_postgres::partition_of;

/// Waits up to `ms` for a signal `go`; returns it, or 0.
#[derive(Clone)]
struct Waits;

impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = u64;
    type Output = u32;
    async fn run(&self, ctx: Ctx, ms: u64) -> reel::Result<u32> {
        let go: Option<u32> = ctx
            .wait_for_signal_timeout("go", Duration::from_millis(ms))
            .await?;
        Ok(go.unwrap_or(0))
    }
}

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    let store = support::join(url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Waits)
        // Long, so that an actor woken after its run ended stays for the test.
        .passivate_after(Duration::from_secs(60))
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_id_reused_after_delete_elsewhere_on_postgres() -> anyhow::Result<()> {
    let url = support::database("reuse_after_delete").await;
    let one = host(&url, "host-0").await?;
    let two = host(&url, "host-1").await?;
    let owners = support::spread_leases(&url, "host-", 2, 100).await;
    let id = (0..)
        .map(|n| format!("r-{n}"))
        .find(|id| owners[partition_of(id) as usize] == 0)
        .expect("an id on host-0");

    // On its owner: ends by its signal, long before its timeout.
    let run = one.start::<Waits>(&id, 1500).await?;
    run.signal("go", &7u32, "go").await?;
    assert_eq!(run.result().await?, 7);
    // The timer it no longer waits for comes due on the owner.
    let late = two.start::<Waits>("pace", 1600).await?;
    late.result().await?;
    // Deleted and started again through the other host.
    two.run(&id).delete().await?;
    let again = two.start::<Waits>(&id, 100).await?;
    let out = tokio::time::timeout(Duration::from_secs(20), again.result()).await;
    let status = two.run(&id).status().await;
    one.shutdown().await?;
    two.shutdown().await?;
    match out {
        Ok(Ok(0)) => Ok(()),
        other => panic!("the run started again after delete: {other:?}, status {status:?}"),
    }
}
