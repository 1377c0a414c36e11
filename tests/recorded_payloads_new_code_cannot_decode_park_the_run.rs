//! New code deployed under a waiting run changes the type of a step's output or of
//! a signal it already received. On replay the recorded payload no longer decodes,
//! the call returns `Err(Codec)` and a handler using `?` returns early, before
//! reaching what its log holds next. That is a code change the run's history
//! cannot follow: the run must be parked (README: "a host started with fixed code
//! resumes it"), not failed for good, and it must finish once the old code is back.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// v1 of the code: a step returning a number, a signal carrying a number, a step,
/// then a wait for `again`.
struct Flow;
impl Workflow for Flow {
    const NAME: &'static str = "flow";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let a: u32 = ctx.step("a", |_| async { Ok::<_, String>(1u32) }).await?;
        let b: u32 = ctx.wait_for_signal("first").await?;
        let c: u32 = ctx
            .step("c", move |_| async move { Ok::<_, String>(a + b) })
            .await?;
        let d: u32 = ctx.wait_for_signal("again").await?;
        Ok(c + d)
    }
}

/// The same workflow with step `a`'s output type changed to a struct.
struct StepTypeChanged;
#[derive(serde::Serialize, serde::Deserialize)]
struct Amount {
    cents: u32,
}
impl Workflow for StepTypeChanged {
    const NAME: &'static str = "flow";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let a: Amount = ctx
            .step("a", |_| async { Ok::<_, String>(Amount { cents: 1 }) })
            .await?;
        let b: u32 = ctx.wait_for_signal("first").await?;
        let c: u32 = ctx
            .step("c", move |_| async move { Ok::<_, String>(a.cents + b) })
            .await?;
        let d: u32 = ctx.wait_for_signal("again").await?;
        Ok(c + d)
    }
}

/// The same workflow with the `first` signal's type changed to a string.
struct SignalTypeChanged;
impl Workflow for SignalTypeChanged {
    const NAME: &'static str = "flow";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let a: u32 = ctx.step("a", |_| async { Ok::<_, String>(1u32) }).await?;
        let b: String = ctx.wait_for_signal("first").await?;
        let b = b.len() as u32;
        let c: u32 = ctx
            .step("c", move |_| async move { Ok::<_, String>(a + b) })
            .await?;
        let d: u32 = ctx.wait_for_signal("again").await?;
        Ok(c + d)
    }
}

async fn check<W: Workflow<Input = (), Output = u32>>(changed: W) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Flow).await?;
    let run = host.start::<Flow>("r", ()).await?;
    run.signal("first", &4u32, "f").await?;
    common::until_log(&run, LIMIT, "the second wait", |e| {
        common::waits_on(e, "again") == 1
    })
    .await?;
    host.shutdown().await?;

    // The changed code replays the run when `again` arrives.
    let host = common::hosts::open(dir.path(), changed).await?;
    let run = host.run("r");
    run.signal("again", &10u32, "g").await?;
    let status = within(LIMIT, "the run to stop", async {
        loop {
            let s = run.status().await?;
            if !matches!(s, RunStatus::Running | RunStatus::Suspended { .. }) {
                return anyhow::Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    assert!(
        matches!(status, RunStatus::Parked { .. }),
        "a run whose recorded payload the new code cannot decode ended {status:?} \
         instead of being parked for the old code to finish"
    );
    host.shutdown().await?;

    // The old code back: the run finishes.
    let host = common::hosts::open(dir.path(), Flow).await?;
    let out = within(LIMIT, "the run", host.handle::<Flow>("r").result()).await??;
    assert_eq!(out, 1 + 4 + 10);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_output_new_code_cannot_decode_parks_the_run() -> anyhow::Result<()> {
    check(StepTypeChanged).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_payload_new_code_cannot_decode_parks_the_run() -> anyhow::Result<()> {
    check(SignalTypeChanged).await
}
