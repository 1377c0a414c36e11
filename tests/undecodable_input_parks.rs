//! A recorded payload that the registered code can no longer decode parks the run
//! (resumable), it does not fail it for good: (a) a run's input, after workflow `w`
//! v1 is re-registered with an input type that cannot read it, and (b) a replayed
//! step's output, after the step's output type changed (with more of the log after
//! the step, and with the step last in the log). The runs report
//! `RunStatus::Parked` with a codec message, run no step body, and complete once a
//! host with the original code opens the store.
//!
//! Why it fails without the fix: an input that does not decode is reported as the
//! handler's failure (`Outcome::Failed`), and a step output that does not decode is
//! returned to the handler as `Error::Codec`, which `?` turns into the handler's
//! failure: the run is recorded `Failed` with `RunFailed`, final, and the original
//! code cannot resume it. When more of the log follows the step, the early return is
//! caught as a divergence instead, so the run is parked by accident, under a message
//! ("the handler returned before reaching it") that hides the codec error.

mod common;

use std::time::Duration;

use common::{Counter, Gate, until_log, within};
use reel::{Ctx, Event, RunStatus, Workflow};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(3);

#[derive(Serialize, Deserialize)]
struct Order {
    n: u32,
}

/// The code runs of `w` v1 were started with.
struct Original;

impl Workflow for Original {
    const NAME: &'static str = "w";
    type Input = Order;
    type Output = u32;

    async fn run(&self, ctx: Ctx, order: Order) -> reel::Result<u32> {
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(order.n + go)
    }
}

/// An input type the recorded `{ n: 40 }` does not decode into.
#[derive(Serialize, Deserialize)]
struct Renamed {
    count: u64,
    sku: String,
}

/// `w` v1 again, registered with an incompatible input type.
struct ChangedInput;

impl Workflow for ChangedInput {
    const NAME: &'static str = "w";
    type Input = Renamed;
    type Output = u32;

    async fn run(&self, ctx: Ctx, r: Renamed) -> reel::Result<u32> {
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(r.count as u32 + go)
    }
}

/// Never opened: holds a handler right after its step, the way a process killed
/// between the step's completion and the handler's next call would leave the log.
static HOLD: Gate = Gate::new();

/// The code runs of `priced` were started with: the step returns a `u32`.
struct PricedV1 {
    /// Stop right after the step (see [`HOLD`]).
    hold: bool,
}

impl Workflow for PricedV1 {
    const NAME: &'static str = "priced";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let price: u32 = ctx.step("price", |_| async { Ok::<_, String>(7) }).await?;
        if self.hold {
            HOLD.wait().await;
        }
        let go: String = ctx.wait_for_signal("go").await?;
        Ok(format!("{price}-{go}"))
    }
}

#[derive(Serialize, Deserialize)]
struct Price {
    amount: String,
    currency: String,
}

/// Changed code: the same step now returns a struct the recorded `7` is not.
struct PricedChanged {
    bodies: Counter,
}

impl Workflow for PricedChanged {
    const NAME: &'static str = "priced";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let bodies = self.bodies.clone();
        let price: Price = ctx
            .step("price", |_| {
                bodies.bump();
                async {
                    Ok::<_, String>(Price {
                        amount: "7".into(),
                        currency: "EUR".into(),
                    })
                }
            })
            .await?;
        let go: String = ctx.wait_for_signal("go").await?;
        Ok(format!("{}{}-{go}", price.amount, price.currency))
    }
}

/// Waits for the run to settle and checks it is parked with a codec error.
async fn assert_parked_on_codec<W: Workflow>(run: &reel::RunHandle<W>) -> anyhow::Result<()> {
    let settled = within(LIMIT, "the run to settle", run.result()).await?;
    assert!(settled.is_err(), "the run completed with the changed code");
    match run.status().await? {
        RunStatus::Parked { error } => assert!(
            error.contains("codec"),
            "parked, but not for the codec error: {error}"
        ),
        other => panic!("expected parked with a codec error, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_input_parks_and_resumes_with_the_original_type() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Original).await?;
    let run = host.start::<Original>("w-1", Order { n: 40 }).await?;
    within(LIMIT, "the wait for `go`", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), ChangedInput).await?;
    let run = host.handle::<ChangedInput>("w-1");
    // A waiting run is replayed when something wakes it.
    run.signal("go", &2u32, "go-1").await?;
    assert_parked_on_codec(&run).await?;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Original).await?;
    let run = host.handle::<Original>("w-1");
    let out = within(LIMIT, "the resumed run's result", run.result()).await?;
    assert_eq!(out?, 42, "resumed with the original input type");
    host.shutdown().await?;
    Ok(())
}

/// The step's output is followed by more of the log (the wait for `go`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_step_output_parks_and_resumes_with_the_original_type() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), PricedV1 { hold: false }).await?;
    let run = host.start::<PricedV1>("p-1", ()).await?;
    within(LIMIT, "the wait for `go`", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let changed = PricedChanged {
        bodies: Counter::default(),
    };
    let bodies = changed.bodies.clone();
    let host = common::hosts::open(dir.path(), changed).await?;
    let run = host.handle::<PricedChanged>("p-1");
    run.signal("go", "now", "go-1").await?;
    assert_parked_on_codec(&run).await?;
    assert_eq!(bodies.get(), 0, "the recorded step ran again");
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), PricedV1 { hold: false }).await?;
    let run = host.handle::<PricedV1>("p-1");
    let out = within(LIMIT, "the resumed run's result", run.result()).await?;
    assert_eq!(out?, "7-now", "resumed with the original output type");
    host.shutdown().await?;
    Ok(())
}

/// The step's output is the last thing in the log: the host stopped right after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_last_step_output_parks_and_resumes_with_the_original_type()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), PricedV1 { hold: true }).await?;
    let run = host.start::<PricedV1>("p-2", ()).await?;
    until_log(&run, LIMIT, "the step's completion", |events| {
        events
            .iter()
            .any(|e| matches!(e, Event::StepCompleted { id, .. } if id == "price"))
    })
    .await?;
    host.shutdown().await?;

    let changed = PricedChanged {
        bodies: Counter::default(),
    };
    let bodies = changed.bodies.clone();
    // Recovery resumes the run, which was running when the host stopped.
    let host = common::hosts::open(dir.path(), changed).await?;
    let run = host.handle::<PricedChanged>("p-2");
    assert_parked_on_codec(&run).await?;
    assert_eq!(bodies.get(), 0, "the recorded step ran again");
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), PricedV1 { hold: false }).await?;
    let run = host.handle::<PricedV1>("p-2");
    within(LIMIT, "the wait for `go`", run.wait_until_suspended()).await??;
    run.signal("go", "now", "go-1").await?;
    let out = within(LIMIT, "the resumed run's result", run.result()).await?;
    assert_eq!(out?, "7-now", "resumed with the original output type");
    host.shutdown().await?;
    Ok(())
}
