//! A parent that continues as new while its child runs asks that child to
//! cancel; when the new segment calls `ctx.child` on the same child id again,
//! the call is idempotent on the id (as `Ctx::child` documents): it gets the
//! earlier child's recorded end, `Error::Cancelled` naming the continue-as-new,
//! and no second run of that id is started. (Temporal, with its default id
//! reuse policy, would start a new child there: see the report.) The answer is
//! the same on replay after a restart.

mod common;

use std::time::Duration;

use common::within;
use common::workflows::Waiter;
use reel::{Ctx, Error, Event, Host, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Segment 0: calls child `<id>/kid` and continues as new once `move` arrives.
/// Segment 1: calls the same child id again and reports how it answered, after
/// waiting for `end`.
struct Hopper;
impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<String> {
        let kid = format!("{}/kid", ctx.run_id());
        if segment == 0 {
            let child = ctx.child::<Waiter>(&kid, ());
            let moved = ctx.wait_for_signal::<()>("move");
            return tokio::select! {
                biased;
                _ = moved => ctx.continue_as_new::<Hopper>(1).await,
                r = child => r.map(|n| format!("kid said {n}")),
            };
        }
        let again = match ctx.child::<Waiter>(&kid, ()).await {
            Ok(n) => format!("kid said {n}"),
            Err(Error::Cancelled(reason)) => format!("cancelled: {reason}"),
            Err(e) => format!("other: {e}"),
        };
        let _: () = ctx.wait_for_signal("end").await?;
        Ok(again)
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Hopper)
        .register(Waiter)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_segment_gets_the_cancelled_end_of_the_earlier_child() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Hopper>("h", 0).await?;
    within(LIMIT, "the first wait", run.wait_until_suspended()).await??;
    run.signal("move", &(), "move-1").await?;
    common::until_log(&run, LIMIT, "the second segment's wait on end", |e| {
        common::waits_on(e, "end") == 1
    })
    .await?;
    host.shutdown().await?;

    let host = self::host(dir.path()).await?;
    let run = host.handle::<Hopper>("h");
    run.signal("end", &(), "end-1").await?;
    let out = within(LIMIT, "the result", run.result()).await??;
    assert!(
        out.starts_with("cancelled:") && out.contains("continued as new"),
        "{out}"
    );
    let kid = host.handle::<Waiter>("h/kid");
    assert!(matches!(kid.result().await, Err(Error::Cancelled(_))));
    let starts = kid
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::RunStarted { .. }))
        .count();
    assert_eq!(starts, 1, "no second run of the child id");
    let children = run.children().await?;
    assert_eq!(children.len(), 1, "{children:?}");
    host.shutdown().await?;
    Ok(())
}
