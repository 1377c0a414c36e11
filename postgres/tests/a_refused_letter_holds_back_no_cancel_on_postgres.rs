//! A letter its run refuses for good holds back none of the run's later cancels.
//! A signal sent through a host that does not own the run reaches the owner as a
//! letter; to a run whose log cannot be read (it takes only a cancel) the letter
//! is refused on every read of the inbox, and stays. A cancel sent after it must
//! still reach the run and end it: the owner's inbox applies a run's letters in
//! order, but a cancel goes on behind a letter left for later.

mod support;

use std::time::{Duration, Instant};

use reel::{Ctx, Host, RunStatus, Workflow};
use support::hosts::{owned_by, spread, until_status};

/// Waits for one signal `go`.
#[derive(Clone)]
struct Waiter;

impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal("go").await
    }
}

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Waiter)
        // Passivated soon after it waits: the next letter reads its log again.
        .passivate_after(Duration::from_millis(50))
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_letter_holds_back_no_cancel_on_postgres() -> anyhow::Result<()> {
    let url = support::database("refused_letter").await;
    let (hosts, owners) = spread::<2>(&url, 64, host).await?;
    let (here, owner) = (&hosts[0], &hosts[1]);
    let id = owned_by(&owners, 1, "waiter", 1).remove(0);
    here.start::<Waiter>(&id, ()).await?;
    until_status(owner, &id, "waits for its signal", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while owner.live_runs().await > 0 {
        assert!(Instant::now() < deadline, "the run was never passivated");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its first record no longer decodes (0xc1 is never used in MessagePack).
    support::execute(
        &url,
        &format!("UPDATE reel_log SET record = '\\xc1'::bytea WHERE run_id = '{id}' AND seq = 0"),
    )
    .await;

    // Posted to the owner, which refuses it for as long as the log cannot be read.
    here.run(&id).signal("go", &"now", "go-1").await?;
    // `cancel` returns once the run has settled (parked, for its unreadable log,
    // also counts): the status below tells whether the cancel itself went on.
    tokio::time::timeout(Duration::from_secs(30), here.run(&id).cancel("given up"))
        .await
        .map_err(|_| anyhow::anyhow!("the cancel never returned"))??;
    until_status(here, &id, "cancelled", |s| {
        matches!(s, RunStatus::Cancelled)
    })
    .await;
    for host in hosts {
        host.shutdown().await?;
    }
    Ok(())
}
