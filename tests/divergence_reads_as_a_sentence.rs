//! The divergence error of a parked run reads as a sentence naming what the log has
//! and what the handler did instead: for a step renamed in the new code, and for a
//! handler that now returns before reaching a recorded step.
//!
//! Why it fails without the fix: the message was built as "the handler did
//! {found}", and an early return produced "the handler did the handler returned".

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(5);

/// The code the runs started with: `pack`, `label`, then a wait for `go`.
async fn original(ctx: &Ctx) -> reel::Result<String> {
    ctx.step("pack", |_| async { Ok::<_, String>(()) }).await?;
    ctx.step("label", |_| async { Ok::<_, String>(()) }).await?;
    ctx.wait_for_signal("go").await
}

struct RenamedV0;
impl Workflow for RenamedV0 {
    const NAME: &'static str = "renamed";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        original(&ctx).await
    }
}

/// New code: `label` is now called `print-label`.
struct Renamed;
impl Workflow for Renamed {
    const NAME: &'static str = "renamed";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("pack", |_| async { Ok::<_, String>(()) }).await?;
        ctx.step("print-label", |_| async { Ok::<_, String>(()) })
            .await?;
        ctx.wait_for_signal("go").await
    }
}

struct EarlyV0;
impl Workflow for EarlyV0 {
    const NAME: &'static str = "early";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        original(&ctx).await
    }
}

/// New code: returns after `pack`.
struct Early;
impl Workflow for Early {
    const NAME: &'static str = "early";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("pack", |_| async { Ok::<_, String>(()) }).await?;
        Ok("packed".into())
    }
}

/// Wakes the run with `go` and returns its parking error's text, checking that
/// `status()` reports the same text.
async fn divergence_text<W: Workflow>(host: &Host, run_id: &str) -> anyhow::Result<String> {
    let run = host.handle::<W>(run_id);
    run.signal("go", "now", "go-1").await?;
    let err = within(LIMIT, "the run to park", run.result())
        .await?
        .err()
        .ok_or_else(|| anyhow::anyhow!("run `{run_id}` completed"))?;
    assert!(matches!(err, Error::ReplayDivergence { .. }), "{err:?}");
    assert_eq!(
        run.status().await?,
        RunStatus::Parked {
            error: err.to_string()
        }
    );
    Ok(err.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergence_messages_name_what_the_handler_did() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), RenamedV0, EarlyV0).await?;
    let renamed = host.start::<RenamedV0>("r-1", ()).await?;
    within(LIMIT, "the wait for `go`", renamed.wait_until_suspended()).await??;
    let early = host.start::<EarlyV0>("e-1", ()).await?;
    within(LIMIT, "the wait for `go`", early.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open_two(dir.path(), Renamed, Early).await?;
    assert_eq!(
        divergence_text::<Renamed>(&host, "r-1").await?,
        "replay diverged at event 3: the log has step `label` there, but the handler \
         called step `print-label`"
    );
    assert_eq!(
        divergence_text::<Early>(&host, "e-1").await?,
        "replay diverged at event 3: the log has step `label` there, but the handler \
         returned before reaching it"
    );
    host.shutdown().await?;
    Ok(())
}
