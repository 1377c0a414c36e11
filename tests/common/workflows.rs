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

/// A step returning its tag, a wait for `go`, then `extra` more steps, each
/// returning its tag: runs with different tags and lengths have different logs.
pub struct Tagged;

impl Workflow for Tagged {
    const NAME: &'static str = "tagged";
    type Input = (String, u32);
    type Output = String;
    async fn run(&self, ctx: Ctx, (tag, extra): (String, u32)) -> reel::Result<String> {
        let t = tag.clone();
        ctx.step("first", move |_| {
            let t = t.clone();
            async move { Ok::<_, String>(t) }
        })
        .await?;
        let _: u32 = ctx.wait_for_signal("go").await?;
        for _ in 0..extra {
            let t = tag.clone();
            ctx.step("more", move |_| {
                let t = t.clone();
                async move { Ok::<_, String>(t) }
            })
            .await?;
        }
        Ok(tag)
    }
}

/// Completes at once with its input: every run's log has the same length.
pub struct Quick;

impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}
