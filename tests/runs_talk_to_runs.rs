//! Runs that talk to runs: a detached child started from a handler (its handle
//! returned, not waited for, not cancelled with its parent), a signal sent from a
//! handler (recorded, so replay does not send it again), a child that is called
//! but never awaited still starts (and is cancelled when its parent completes),
//! and parent ids on `Ctx` and `RunInfo`.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Waits for a `go` signal and returns its parent's id.
struct Worker;

impl Workflow for Worker {
    const NAME: &'static str = "worker";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal::<()>("go").await?;
        Ok(ctx.parent_id().unwrap_or("none").to_owned())
    }
}

/// Starts a detached worker and ends at once.
struct Launcher;

impl Workflow for Launcher {
    const NAME: &'static str = "launcher";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let worker = ctx.start_child::<Worker>("launcher/worker", ()).await?;
        // Starting the same id again is idempotent and records a second start.
        let again = ctx.start_child::<Worker>("launcher/worker", ()).await?;
        assert_eq!(worker.id(), again.id());
        // An id held by another workflow is a typed error, recorded.
        let clash = ctx.start_child::<Worker>(ctx.run_id(), ()).await;
        assert!(clash.is_err(), "{clash:?}");
        Ok(worker.id().to_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_child_outlives_its_parent() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Launcher, Worker).await?;
    let launcher = host.start::<Launcher>("launcher", ()).await?;
    assert_eq!(
        within(LIMIT, "launcher", launcher.result()).await??,
        "launcher/worker"
    );
    let worker = host.handle::<Worker>("launcher/worker");
    assert!(
        !worker.status().await?.eq(&RunStatus::Completed),
        "the parent did not wait for it"
    );
    let children = launcher.children().await?;
    assert_eq!(children.len(), 1, "{children:?}"); // the clash is not a child
    assert_eq!(children[0].run_id, "launcher/worker");
    assert_eq!(children[0].parent.as_deref(), Some("launcher"));
    host.shutdown().await?;

    // After a restart the worker is still there and finishes on its own.
    let host = common::hosts::open_two(dir.path(), Launcher, Worker).await?;
    let worker = host.handle::<Worker>("launcher/worker");
    worker.signal("go", &(), "go-1").await?;
    assert_eq!(within(LIMIT, "worker", worker.result()).await??, "launcher");
    let info = host
        .runs()
        .await?
        .into_iter()
        .find(|r| r.run_id == "launcher/worker")
        .expect("listed");
    assert_eq!(info.parent.as_deref(), Some("launcher"));
    host.shutdown().await?;
    Ok(())
}

/// Starts a detached worker, then waits to be cancelled.
struct Supervisor;

impl Workflow for Supervisor {
    const NAME: &'static str = "supervisor";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.start_child::<Worker>("supervisor/worker", ()).await?;
        ctx.wait_for_signal::<()>("never").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_parent_leaves_its_detached_children() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Supervisor, Worker).await?;
    let parent = host.start::<Supervisor>("supervisor", ()).await?;
    parent.wait_until_suspended().await?;
    within(LIMIT, "cancel", parent.cancel("done")).await??;
    let worker = host.handle::<Worker>("supervisor/worker");
    assert!(matches!(
        worker.status().await?,
        RunStatus::Running | RunStatus::Suspended { .. }
    ));
    worker.signal("go", &(), "go-1").await?;
    assert_eq!(
        within(LIMIT, "worker", worker.result()).await??,
        "supervisor"
    );
    host.shutdown().await?;
    Ok(())
}

static SENDS: AtomicU32 = AtomicU32::new(0);

/// Signals the run named in its input, waits (so a restart replays the send), and
/// reports what signalling an unknown run answered.
struct Sender;

impl Workflow for Sender {
    const NAME: &'static str = "sender";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, target: String) -> reel::Result<String> {
        SENDS.fetch_add(1, Ordering::SeqCst);
        ctx.signal(&target, "go", &(), "from-sender").await?;
        let unknown = ctx.signal("nobody", "go", &(), "x").await;
        assert_eq!(unknown, Err(Error::UnknownRun("nobody".into())));
        let reserved = ctx.signal(&target, "approval:boss", &(), "y").await;
        assert!(matches!(reserved, Err(Error::ReservedName(_))));
        ctx.wait_for_signal::<()>("finish").await?;
        Ok("sent".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_from_a_handler_is_sent_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let build = || common::hosts::open_two(dir.path(), Sender, Worker);
    let host = build().await?;
    let worker = host.start::<Worker>("receiver", ()).await?;
    let sender = host.start::<Sender>("sender", "receiver".into()).await?;
    sender.wait_until_suspended().await?;
    assert_eq!(within(LIMIT, "receiver", worker.result()).await??, "none");
    host.shutdown().await?;

    // The sender replays past its recorded sends after a restart.
    let host = build().await?;
    let sender = host.handle::<Sender>("sender");
    sender.signal("finish", &(), "f-1").await?;
    assert_eq!(within(LIMIT, "sender", sender.result()).await??, "sent");
    assert!(SENDS.load(Ordering::SeqCst) >= 2, "the handler replayed");
    let received = host
        .handle::<Worker>("receiver")
        .events()
        .await?
        .into_iter()
        .filter(|e| matches!(e, Event::SignalReceived { .. }))
        .count();
    assert_eq!(received, 1);
    let sends = sender
        .events()
        .await?
        .into_iter()
        .filter(|e| matches!(e, Event::StepStarted { id, .. } if id.starts_with("signal go")))
        .count();
    assert_eq!(sends, 2, "the send and the refused one, each once");
    host.shutdown().await?;
    Ok(())
}

/// Calls a child without awaiting it, then ends.
struct Forgetful;

impl Workflow for Forgetful {
    const NAME: &'static str = "forgetful";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        drop(ctx.child::<Worker>("forgetful/worker", ()));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_called_but_never_awaited_still_starts() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Forgetful, Worker).await?;
    let parent = host.start::<Forgetful>("forgetful", ()).await?;
    within(LIMIT, "parent", parent.result()).await??;
    let worker = host.handle::<Worker>("forgetful/worker");
    within(LIMIT, "child exists", async {
        while worker.status().await.is_err() {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    // It started before its parent's end was recorded; the parent's completion
    // then asked it to cancel (the parent-close policy: use `start_child` for a
    // child that outlives its parent).
    let ended = within(LIMIT, "child", worker.result()).await?;
    assert!(
        matches!(&ended, Err(Error::Cancelled(r)) if r == "parent completed"),
        "{ended:?}"
    );
    host.shutdown().await?;
    Ok(())
}
