//! A child call that would make runs wait on each other for ever (a run whose child
//! id is its own id, or a cycle of children) fails at once with `Error::ChildCycle`
//! naming the cycle: the calling handler sees the error; nothing hangs.

mod common;

use std::time::Duration;

use reel::{Ctx, Error, Host, Workflow};

/// Calls itself as its child and reports what happened.
struct Narcissus;
impl Workflow for Narcissus {
    const NAME: &'static str = "narcissus";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let me = ctx.run_id().to_owned();
        match ctx.child::<Narcissus>(&me, ()).await {
            Err(Error::ChildCycle { cycle }) => Ok(cycle),
            other => Err(Error::failed(format!("expected a cycle, got {other:?}"))),
        }
    }
}

/// Starts the first id of its input as its child, handing it the rest.
struct Relay;
impl Workflow for Relay {
    const NAME: &'static str = "relay";
    type Input = Vec<String>;
    type Output = u32;
    async fn run(&self, ctx: Ctx, path: Vec<String>) -> reel::Result<u32> {
        match path.split_first() {
            Some((next, rest)) => Ok(ctx.child::<Relay>(next, rest.to_vec()).await? + 1),
            None => Ok(0),
        }
    }
}

async fn open(dir: &std::path::Path) -> reel::Result<Host> {
    common::hosts::open_two(dir, Narcissus, Relay).await
}

/// Ends a test that would otherwise hang.
async fn within<T>(f: impl Future<Output = T>) -> anyhow::Result<T> {
    Ok(tokio::time::timeout(Duration::from_secs(20), f).await?)
}

fn ids(path: &[&str]) -> Vec<String> {
    path.iter().map(|s| (*s).to_owned()).collect()
}

fn assert_cycle(result: reel::Result<u32>, expected: &[&str]) {
    match result {
        Err(ref e @ Error::ChildCycle { ref cycle }) => {
            assert_eq!(cycle, &ids(expected));
            assert!(e.to_string().contains(&expected.join(" → ")), "{e}");
        }
        other => panic!("expected ChildCycle {expected:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_cycles_are_errors_not_hangs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;

    let own = host.start::<Narcissus>("own", ()).await?;
    assert_eq!(within(own.result()).await??, ids(&["own", "own"]));

    // a → b → a: b's child call fails; b fails with it, and so does a.
    let a = host.start::<Relay>("a", ids(&["b", "a"])).await?;
    assert_cycle(within(a.result()).await?, &["b", "a", "b"]);
    assert_cycle(
        within(host.handle::<Relay>("b").result()).await?,
        &["b", "a", "b"],
    );

    // x → y → z → x
    let x = host.start::<Relay>("x", ids(&["y", "z", "x"])).await?;
    assert_cycle(within(x.result()).await?, &["z", "x", "y", "z"]);

    // A chain without a cycle still works, also through a finished run's id.
    let chain = host.start::<Relay>("c1", ids(&["c2", "c3"])).await?;
    assert_eq!(within(chain.result()).await??, 2);
    let again = host.start::<Relay>("c0", ids(&["c1"])).await?;
    assert_eq!(within(again.result()).await??, 3);

    // The recorded error survives a restart.
    host.shutdown().await?;
    let host = open(dir.path()).await?;
    assert_eq!(
        host.handle::<Narcissus>("own").result().await?,
        ids(&["own", "own"])
    );
    assert_cycle(host.handle::<Relay>("a").result().await, &["b", "a", "b"]);
    host.shutdown().await?;
    Ok(())
}
