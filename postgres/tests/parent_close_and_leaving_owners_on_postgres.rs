//! Edges: a parent continuing as new cancels its child on another host; a cancel
//! sent while the owner is leaving; terminate of a paused run through a
//! non-owner.

mod support;

use std::time::Duration;

use reel::{Ctx, Host, RunStatus, Workflow};
use support::hosts::{cancelled, owned_by, shutdown_all, spread, suspended, until_status};

struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal::<String>("go").await
    }
}

/// Segment 0 calls a child (not awaited) and continues as new; segment 1 waits
/// for `done`.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = (String, u32);
    type Output = String;
    async fn run(&self, ctx: Ctx, (kid, seg): (String, u32)) -> reel::Result<String> {
        if seg == 0 {
            let _pending = ctx.child::<Kid>(&kid, ());
            ctx.step("s", |_| async { Ok::<_, String>(()) }).await?;
            return ctx.continue_as_new::<Parent>((kid, 1)).await;
        }
        ctx.wait_for_signal::<String>("done").await
    }
}

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Kid)
        .register(Parent)
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_cancels_a_child_on_another_host() -> anyhow::Result<()> {
    let url = support::database("hunt_e_can_child").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let p = &owned_by(&owners, 0, "p", 1)[0];
    let k = &owned_by(&owners, 1, "k", 1)[0];
    hosts[1].start::<Parent>(p, (k.clone(), 0)).await?;
    until_status(
        &hosts[1],
        p,
        "reached segment 1",
        |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("done")),
    )
    .await;
    until_status(&hosts[0], k, "was cancelled", cancelled).await;
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_sent_while_the_owner_leaves() -> anyhow::Result<()> {
    let url = support::database("hunt_e_cancel_leave").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let ids = owned_by(&owners, 1, "k", 4);
    for id in &ids {
        hosts[0].start::<Kid>(id, ()).await?;
    }
    for id in &ids {
        until_status(&hosts[0], id, "waited", suspended).await;
    }
    let [h0, h1] = hosts;
    let leaving = tokio::spawn(async move { h1.shutdown().await });
    for id in &ids {
        tokio::time::timeout(Duration::from_secs(15), h0.run(id).cancel("bye"))
            .await
            .map_err(|_| anyhow::anyhow!("cancel of {id} did not return"))??;
        assert_eq!(h0.run(id).status().await?, RunStatus::Cancelled, "{id}");
    }
    leaving.await??;
    h0.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_a_paused_run_through_a_non_owner() -> anyhow::Result<()> {
    let url = support::database("hunt_e_term_paused").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let id = &owned_by(&owners, 1, "k", 1)[0];
    hosts[0].start::<Kid>(id, ()).await?;
    until_status(&hosts[0], id, "waited", suspended).await;
    hosts[0].run(id).pause().await?;
    until_status(&hosts[0], id, "paused", |s| matches!(s, RunStatus::Paused)).await;
    hosts[0].run(id).terminate("gone").await?;
    until_status(&hosts[0], id, "was cancelled", cancelled).await;
    let r = hosts[1].run(id).resume().await;
    assert!(r.is_err(), "resume of a terminated run: {r:?}");
    shutdown_all(hosts).await
}
