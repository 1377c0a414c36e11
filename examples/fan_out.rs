//! Fan-out / fan-in: a parent workflow starts 100 child workflows concurrently and
//! sums their outputs.
//!
//! ```text
//! cargo run --example fan_out
//! ```
//!
//! Each child is a run like any other (its own log, its own actor); the parent
//! suspends until the children's results arrive, and replays past the ones already
//! recorded on every wake-up. Concurrency inside a handler comes from joining ctx
//! futures (`try_join_all`, `join!`), never from `tokio::spawn`: the ids of the
//! children are assigned when `ctx.child` is called, in call order, so every replay
//! makes the same calls in the same order.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use futures::future::try_join_all;
use reel::{Ctx, Event, Host, Workflow};

const DATA_DIR: &str = "reel-data/fan_out";
const CHILDREN: u64 = 100;

/// One child: squares its input in a step.
struct Square;

impl Workflow for Square {
    const NAME: &'static str = "square";
    type Input = u64;
    type Output = u64;

    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<u64> {
        ctx.step("square", |_| async move { Ok::<_, String>(n * n) })
            .await
    }
}

/// The parent: starts `n` children at once and sums their outputs.
struct SumOfSquares;

impl Workflow for SumOfSquares {
    const NAME: &'static str = "sum-of-squares";
    type Input = u64;
    type Output = u64;

    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<u64> {
        let parent = ctx.run_id().to_owned();
        // `ctx.child` takes its id when it is called (here while `try_join_all`
        // collects the iterator, in order), so every replay makes the same calls.
        // The children then run concurrently; the parent waits for all of them.
        let children = (0..n).map(|i| ctx.child::<Square>(&format!("{parent}-child-{i}"), i));
        let outputs = try_join_all(children).await?;
        Ok(outputs.iter().sum())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match std::fs::remove_dir_all(DATA_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("wiping {DATA_DIR}")),
    }
    let host = Host::builder()
        .path(DATA_DIR)
        .register(SumOfSquares)
        .register(Square)
        .build()
        .await?;

    let started = Instant::now();
    let run = host.start::<SumOfSquares>("fan-out-1", CHILDREN).await?;
    let sum = tokio::time::timeout(Duration::from_secs(120), run.result())
        .await
        .context("the parent did not finish within 120 s")??;
    let elapsed = started.elapsed();

    let expected: u64 = (0..CHILDREN).map(|i| i * i).sum();
    println!("sum of squares of 0..{CHILDREN} from {CHILDREN} child runs: {sum}");
    println!("took {elapsed:.2?} (start of the parent to its result)");
    ensure!(sum == expected, "expected {expected}, got {sum}");

    let events = run.events().await?;
    let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
    let started_children = count(|e| matches!(e, Event::ChildStarted { .. }));
    let completed_children = count(|e| matches!(e, Event::ChildCompleted { .. }));
    println!(
        "parent log: {} events ({started_children} ChildStarted, {completed_children} ChildCompleted)",
        events.len()
    );
    ensure!(started_children == CHILDREN as usize);
    ensure!(completed_children == CHILDREN as usize);
    let runs = host.runs().await?;
    println!(
        "runs in the store: {} (1 parent + {CHILDREN} children)",
        runs.len()
    );
    ensure!(runs.len() == CHILDREN as usize + 1);

    host.shutdown().await?;
    Ok(())
}
