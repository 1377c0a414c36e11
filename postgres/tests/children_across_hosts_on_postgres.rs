//! Parent and child runs on different hosts: parent-close cancel, cancel and
//! terminate of a parent through a third host, a child's failure, and a child's
//! end reaching a parent whose host changed.

mod support;

use std::time::{Duration, Instant};

use reel::{Ctx, Error, Host, RunStatus, StatusKind, Workflow};
use support::hosts::{
    cancelled, owned_by, result_of, shutdown_all, spread, suspended, until_status,
};

/// Waits for `go` and returns it, or fails when it is `fail`.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let go: String = ctx.wait_for_signal("go").await?;
        if go == "fail" {
            return Err(Error::Failed("kid told to fail".into()));
        }
        Ok(format!("kid:{go}"))
    }
}

/// Mode 0: waits for its child. Mode 1: calls the child, does not wait, returns
/// (parent-close). Mode 2: waits for the child, then a signal `more`. Mode 3:
/// waits for the child and turns its error into the output.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = (String, u32);
    type Output = String;
    async fn run(&self, ctx: Ctx, (child, mode): (String, u32)) -> reel::Result<String> {
        match mode {
            1 => {
                let _pending = ctx.child::<Kid>(&child, ());
                ctx.step("work", |_| async { Ok::<_, String>(1u32) })
                    .await?;
                Ok("left".into())
            }
            _ => {
                let out = ctx.child::<Kid>(&child, ()).await;
                let out = match out {
                    Ok(o) => o,
                    Err(e) if mode == 3 => format!("child error: {e}"),
                    Err(e) => return Err(e),
                };
                if mode == 2 {
                    let more: String = ctx.wait_for_signal("more").await?;
                    return Ok(format!("{out}+{more}"));
                }
                Ok(out)
            }
        }
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

/// A parent on host-0 returns while its (waited-for) child on host-1 still
/// waits: the child is asked to cancel, and ends cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_close_cancels_a_child_on_another_host() -> anyhow::Result<()> {
    let url = support::database("hunt_e_pclose").await;
    let (hosts, owners) = spread::<3>(&url, 80, host).await?;
    let parent = &owned_by(&owners, 0, "p", 1)[0];
    let kid = &owned_by(&owners, 1, "k", 1)[0];
    hosts[2].start::<Parent>(parent, (kid.clone(), 1)).await?;
    let out = result_of::<Parent>(&hosts[2], parent).await??;
    assert_eq!(out, "left");
    until_status(&hosts[2], kid, "was cancelled", cancelled).await;
    shutdown_all(hosts).await
}

/// A parent (host-0) waiting on its child (host-1) is cancelled through host-2:
/// both end cancelled. The same with terminate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_or_terminate_parent_through_a_third_host_cancels_child() -> anyhow::Result<()> {
    let url = support::database("hunt_e_pcancel").await;
    let (hosts, owners) = spread::<3>(&url, 80, host).await?;
    let parents = owned_by(&owners, 0, "p", 2);
    let kids = owned_by(&owners, 1, "k", 2);
    for (p, k) in parents.iter().zip(&kids) {
        hosts[1].start::<Parent>(p, (k.clone(), 0)).await?;
    }
    for (p, k) in parents.iter().zip(&kids) {
        until_status(&hosts[2], k, "waited", suspended).await;
        until_status(&hosts[2], p, "waited", suspended).await;
    }
    hosts[2].run(&parents[0]).cancel("from host-2").await?;
    hosts[2].run(&parents[1]).terminate("from host-2").await?;
    for (p, k) in parents.iter().zip(&kids) {
        until_status(&hosts[0], p, "was cancelled", cancelled).await;
        until_status(&hosts[0], k, "was cancelled", cancelled).await;
    }
    shutdown_all(hosts).await
}

/// A child on host-1 fails; its parent on host-0 sees the failure (and catches
/// it); a child on host-1 completing reaches a parent on host-2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_failure_and_result_cross_hosts() -> anyhow::Result<()> {
    let url = support::database("hunt_e_cfail").await;
    let (hosts, owners) = spread::<3>(&url, 80, host).await?;
    let p0 = &owned_by(&owners, 0, "p", 1)[0];
    let p2 = &owned_by(&owners, 2, "p", 1)[0];
    let kids = owned_by(&owners, 1, "k", 2);
    hosts[2].start::<Parent>(p0, (kids[0].clone(), 3)).await?;
    hosts[0].start::<Parent>(p2, (kids[1].clone(), 0)).await?;
    for k in &kids {
        until_status(&hosts[2], k, "waited", suspended).await;
    }
    hosts[0]
        .handle::<Kid>(&kids[0])
        .signal("go", "fail", "f")
        .await?;
    hosts[2]
        .handle::<Kid>(&kids[1])
        .signal("go", "yes", "y")
        .await?;
    let a = result_of::<Parent>(&hosts[1], p0).await??;
    assert!(
        a.starts_with("child error:") && a.contains("kid told to fail"),
        "{a}"
    );
    let b = result_of::<Parent>(&hosts[1], p2).await??;
    assert_eq!(b, "kid:yes");
    let children = hosts[2].run(p0).children().await?;
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(
        children[0].status.kind(),
        StatusKind::Failed,
        "{children:?}"
    );
    shutdown_all(hosts).await
}

/// The parent's host shuts down while the child (another host) still waits:
/// the child completes while the parent's partition has moved, and the parent,
/// now on the remaining host, gets the result and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_result_reaches_a_parent_whose_host_left() -> anyhow::Result<()> {
    let url = support::database("hunt_e_cmove").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let parent = &owned_by(&owners, 0, "p", 1)[0];
    let kid = &owned_by(&owners, 1, "k", 1)[0];
    hosts[1].start::<Parent>(parent, (kid.clone(), 2)).await?;
    until_status(&hosts[1], kid, "waited", suspended).await;
    until_status(&hosts[1], parent, "waited", suspended).await;
    let [h0, h1] = hosts;
    h0.shutdown().await?;
    // Right away: the parent's partition may not be leased by anyone yet.
    h1.handle::<Kid>(kid).signal("go", "now", "n").await?;
    until_status(&h1, kid, "completed", |s| matches!(s, RunStatus::Completed)).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let events = h1.run(parent).events().await?;
        if events
            .iter()
            .any(|e| matches!(e, reel::Event::ChildCompleted { .. }))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the parent never got its child's end: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h1.handle::<Parent>(parent).signal("more", "m", "m").await?;
    let out = result_of::<Parent>(&h1, parent).await??;
    assert_eq!(out, "kid:now+m");
    h1.shutdown().await?;
    Ok(())
}
