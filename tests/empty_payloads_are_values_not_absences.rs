//! A payload that encodes as MessagePack `nil` (`()`, `None`, a unit struct) is a
//! value like any other: a timed wait that receives `None` returns `Some(None)`,
//! not a timeout; a step returning `()` or `None` is recorded and not run again;
//! a published `None` is `Some(None)` to a reader; a run returning `()` completes.
//! Live, and after a restart that replays the log.

mod common;

use std::time::Duration;

use common::{Counter, within};
use reel::{Ctx, Workflow};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(20);
static BODIES: std::sync::LazyLock<Counter> = std::sync::LazyLock::new(Counter::default);

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone, Copy)]
struct Nothing;

/// What each wait and step gave, in order: whether each timed wait got a signal
/// (`Some(None)` itself does not survive MessagePack, which writes `Some(x)` as
/// `x`), then the values.
type Seen = (bool, bool, Nothing, (), Option<u8>);

struct Empties;
impl Workflow for Empties {
    const NAME: &'static str = "empties";
    type Input = ();
    type Output = Seen;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<Seen> {
        let a: Option<Option<u32>> = ctx
            .wait_for_signal_timeout("maybe", Duration::from_secs(3600))
            .await?;
        let b: Option<()> = ctx
            .wait_for_signal_timeout("unit", Duration::from_secs(3600))
            .await?;
        let c: Nothing = ctx.wait_for_signal("nothing").await?;
        ctx.step("unit-step", |_| async {
            BODIES.bump();
            Ok::<_, String>(())
        })
        .await?;
        let e: Option<u8> = ctx
            .step("none-step", |_| async {
                BODIES.bump();
                Ok::<_, String>(None)
            })
            .await?;
        ctx.publish("maybe", &None::<u32>).await?;
        ctx.wait_for_signal::<()>("finish").await?;
        Ok((a == Some(None), b == Some(()), c, (), e))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nil_payloads_are_delivered_recorded_and_replayed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Empties).await?;
    let run = host.start::<Empties>("e", ()).await?;
    run.signal("maybe", &None::<u32>, "1").await?;
    run.signal("unit", &(), "2").await?;
    run.signal("nothing", &Nothing, "3").await?;
    common::until_log(&run, LIMIT, "the last wait", |e| {
        common::waits_on(e, "finish") == 1
    })
    .await?;
    assert_eq!(
        run.published::<Option<u32>>("maybe").await?,
        Some(None),
        "a published None reads as published"
    );
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Empties).await?;
    let run = host.handle::<Empties>("e");
    run.signal("finish", &(), "4").await?;
    let seen = within(LIMIT, "the run", run.result()).await??;
    assert_eq!(
        seen,
        (true, true, Nothing, (), None),
        "(got None, got (), ...)"
    );
    assert_eq!(BODIES.get(), 2, "a step that returned nil ran again");
    host.shutdown().await?;
    Ok(())
}
