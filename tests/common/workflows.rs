//! Small workflow types several test files use alike.

use std::time::SystemTime;

use reel::{Ctx, Workflow};

/// Waits for a `go` signal and returns it.
pub struct Waiter;

impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// Completes at once with the time it started.
pub struct Tick;

impl Workflow for Tick {
    const NAME: &'static str = "tick";
    type Input = ();
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<SystemTime> {
        ctx.now().await
    }
}
