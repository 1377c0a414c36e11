//! Thousands of concurrent runs in one process, child runs, passivation, and one
//! writer per run (invariants 4, 5, 6).

mod common;

use std::time::Duration;

use common::Counter;
use common::workflows::Waiter;
use futures::future::try_join_all;
use reel::{Ctx, Host, Workflow};

struct Small;
impl Workflow for Small {
    const NAME: &'static str = "small";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let a: u32 = ctx
            .step("a", |_| async move { Ok::<_, String>(n + 1) })
            .await?;
        let b: u32 = ctx
            .step("b", |_| async move { Ok::<_, String>(a * 2) })
            .await?;
        Ok(b)
    }
}

struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let children =
            (0..n).map(|i| ctx.child::<Small>(&format!("{}-child-{i}", ctx.run_id()), i));
        Ok(try_join_all(children).await?.into_iter().sum())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_runs_complete() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Small).await?;
    let starts = (0..10_000u32).map(|i| {
        let host = &host;
        async move { host.start::<Small>(&format!("r{i}"), i).await }
    });
    let handles = try_join_all(starts).await?;
    let results = try_join_all(handles.iter().map(|h| h.result())).await?;
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r, (i as u32 + 1) * 2);
    }
    assert_eq!(host.runs().await?.len(), 10_000);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_gathers_children_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Parent, Small).await?;
    let parent = host.start::<Parent>("p", 50).await?;
    // Sum of (i + 1) * 2 for i in 0..50.
    assert_eq!(parent.result().await?, 2550);
    assert_eq!(host.runs().await?.len(), 51);
    host.shutdown().await?;

    // A parent waiting on a child that is waiting: restart in between.
    struct Slow;
    impl Workflow for Slow {
        const NAME: &'static str = "slow-parent";
        type Input = ();
        type Output = u32;
        async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
            ctx.child::<Waiter>("slow-child", ()).await
        }
    }
    let host = common::hosts::open_two(dir.path(), Slow, Waiter).await?;
    let p = host.start::<Slow>("slow", ()).await?;
    p.wait_until_suspended().await?;
    host.handle::<Waiter>("slow-child")
        .wait_until_suspended()
        .await?;
    host.shutdown().await?;
    let host = common::hosts::open_two(dir.path(), Slow, Waiter).await?;
    host.handle::<Waiter>("slow-child")
        .signal("go", &9u32, "go")
        .await?;
    assert_eq!(host.handle::<Slow>("slow").result().await?, 9);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_runs_are_passivated_and_reactivated() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Waiter)
        .passivate_after(Duration::from_millis(1))
        .build()
        .await?;
    let handles = try_join_all((0..200).map(|i| {
        let (host, id) = (&host, format!("w{i}"));
        async move { host.start::<Waiter>(&id, ()).await }
    }))
    .await?;
    for h in &handles {
        h.wait_until_suspended().await?;
    }
    // Passivation is a timer inside the host; wait for its effect, bounded.
    let mut live = host.live_runs().await;
    for _ in 0..5_000 {
        if live == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        live = host.live_runs().await;
    }
    assert_eq!(live, 0, "every waiting run was passivated");
    for (i, h) in handles.iter().enumerate() {
        h.signal("go", &(i as u32), "go").await?;
    }
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(h.result().await?, i as u32);
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_of_one_id_make_one_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ran = Counter::default();
    #[derive(Clone)]
    struct Once(Counter);
    impl Workflow for Once {
        const NAME: &'static str = "once";
        type Input = ();
        type Output = ();
        async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
            let c = self.0.clone();
            ctx.step("only", |_| {
                let c = c.clone();
                async move { Ok::<_, String>(c.bump()) }
            })
            .await?;
            Ok(())
        }
    }
    let host = common::hosts::open(dir.path(), Once(ran.clone())).await?;
    let handles = try_join_all((0..20).map(|_| host.start::<Once>("same", ()))).await?;

    for h in &handles {
        h.result().await?;
    }
    assert_eq!(ran.get(), 1);
    assert_eq!(host.runs().await?.len(), 1);
    host.shutdown().await?;
    Ok(())
}
