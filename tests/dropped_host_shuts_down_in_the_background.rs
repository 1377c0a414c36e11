//! `Host` is a cheap handle: clones share one host, `shutdown()` may be called from
//! any clone (a second call is a no-op), and dropping the last clone without
//! `shutdown()` shuts the host down in the background. A new host for the same path
//! in this process waits for that and opens; the old host's `RunHandle`s then
//! answer `Error::Shutdown`. A directory a live host holds is refused with
//! `Error::StoreLocked`, naming the path.
//!
//! Why it fails without the fix: `shutdown` took the host by value, so a service
//! sharing it had to wrap it in an `Arc<Mutex<Option<Host>>>`; a dropped host kept
//! its store's lock until every run handle was gone, and opening the path again
//! failed with fjall's bare "FjallError: Locked".

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, Workflow};

const LIMIT: Duration = Duration::from_secs(5);

/// Waits for one signal and returns it.
struct Echo;

impl Workflow for Echo {
    const NAME: &'static str = "echo";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let said: String = ctx.wait_for_signal("say").await?;
        let n = ctx
            .step("count", |_| async { Ok::<_, String>(said.len()) })
            .await?;
        Ok(format!("{said}:{n}"))
    }
}

async fn open(dir: &std::path::Path) -> reel::Result<Host> {
    common::hosts::open(dir, Echo).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_share_one_host_and_shut_down_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let other = host.clone();
    let run = other.start::<Echo>("e-1", ()).await?;
    run.wait_until_suspended().await?;
    // One clone gone: the host lives on in the other.
    drop(other);
    run.signal("say", "hi", "s-1").await?;
    assert_eq!(
        within(LIMIT, "the result", host.handle::<Echo>("e-1").result()).await??,
        "hi:2"
    );

    let second = host.clone();
    host.shutdown().await?;
    second.shutdown().await?;
    host.shutdown().await?;
    assert_eq!(run.status().await, Err(Error::Shutdown));
    assert_eq!(
        run.signal("say", "again", "s-2").await,
        Err(Error::Shutdown)
    );
    assert_eq!(
        second.start::<Echo>("e-2", ()).await.map(|_| ()),
        Err(Error::Shutdown)
    );
    // The path is free again.
    open(dir.path()).await?.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_clone_frees_the_path_for_a_new_host() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host.start::<Echo>("e-1", ()).await?;
    run.wait_until_suspended().await?;
    drop(host);

    // Waits for the dropped host's background shutdown, then opens.
    let host = within(LIMIT, "a new host on the same path", open(dir.path())).await??;
    // The old host's handle has stopped working; the new host's resumes the run.
    assert_eq!(run.signal("say", "old", "s-0").await, Err(Error::Shutdown));
    let run = host.handle::<Echo>("e-1");
    run.signal("say", "hello", "s-1").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, "hello:5");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_held_by_a_live_host_is_refused_by_name() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let err = open(dir.path()).await.expect_err("the first host holds it");
    let Error::StoreLocked { path } = &err else {
        panic!("expected StoreLocked, got {err:?}");
    };
    assert_eq!(path, dir.path());
    assert_eq!(
        err.to_string(),
        format!(
            "the store at `{}` is in use by another host (another process, or a Host in \
             this process that has not shut down)",
            dir.path().display()
        )
    );
    // The refused open harmed nothing.
    let run = host.start::<Echo>("e-1", ()).await?;
    run.signal("say", "still", "s-1").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, "still:5");
    host.shutdown().await?;
    open(dir.path()).await?.shutdown().await?;
    Ok(())
}

#[test]
fn dropping_a_host_outside_a_runtime_does_not_panic() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let host = runtime.block_on(open(dir.path()))?;
    // No runtime here: the host is not shut down, which is logged as an error.
    drop(host);
    drop(runtime);
    Ok(())
}
