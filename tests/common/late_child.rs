//! A parent whose child, asked to cancel, takes a while to clean up: for the tests
//! of a child that ends after its parent was deleted and the parent's id taken by
//! a new run (`late_child_end_spares_the_run_that_reused_its_parents_id.rs`,
//! `a_deleted_parents_late_child_end_parks_no_run_of_its_id.rs`).

use std::time::Duration;

use reel::{Ctx, Error, Workflow};

use super::Gate;

/// Holds every `Child`'s cleanup until the test opens it.
pub static CLEANUP: Gate = Gate::new();

/// Waits for `go`; asked to cancel, it cleans up (held by `CLEANUP`) and ends
/// cancelled.
pub struct Child;
impl Workflow for Child {
    const NAME: &'static str = "child";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        match ctx.wait_for_signal::<u32>("go").await {
            Err(Error::Cancelled(reason)) => {
                ctx.shielded()
                    .step("cleanup", |_| async {
                        CLEANUP.wait().await;
                        Ok::<_, String>(())
                    })
                    .await?;
                Err(Error::Cancelled(reason))
            }
            other => other,
        }
    }
}

/// `Parent`'s input: races its child `<id>-child` against a short sleep and
/// completes (with 0) when the sleep wins, so the child is asked to cancel.
pub const RACE_THE_CHILD: u32 = 0;
/// `Parent`'s input: waits for `go` and returns it.
pub const WAIT_FOR_GO: u32 = 1;
/// `Parent`'s input: waits on its child `<id>-child`.
pub const WAIT_ON_THE_CHILD: u32 = 2;

/// Calls its `Child` or waits for `go`, as its input says (`RACE_THE_CHILD`,
/// `WAIT_FOR_GO`, `WAIT_ON_THE_CHILD`).
pub struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<u32> {
        if mode == WAIT_FOR_GO {
            return ctx.wait_for_signal("go").await;
        }
        let child = format!("{}-child", ctx.run_id());
        if mode == WAIT_ON_THE_CHILD {
            return ctx.child::<Child>(&child, ()).await;
        }
        tokio::select! {
            biased;
            c = ctx.child::<Child>(&child, ()) => c,
            s = ctx.sleep(Duration::from_millis(1)) => s.map(|()| 0),
        }
    }
}
