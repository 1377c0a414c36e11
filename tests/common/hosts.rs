//! The hosts most tests open: one store directory, one workflow type, perhaps a
//! test clock, every other setting at its default.

use std::path::PathBuf;

use reel::testing::TestClock;
use reel::{Host, Workflow};

/// A host over the store at `path` running `workflow`, with default settings.
pub async fn open<W: Workflow>(path: impl Into<PathBuf>, workflow: W) -> reel::Result<Host> {
    Host::builder().path(path).register(workflow).build().await
}

/// A host over the store at `path` on `clock` running `workflow`, with default
/// settings otherwise.
pub async fn open_on<W: Workflow>(
    path: impl Into<PathBuf>,
    clock: &TestClock,
    workflow: W,
) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(workflow)
        .build()
        .await
}

/// A host over the store at `path` on `clock` running `workflow`, with a queue
/// `queue` that admits at most `limit` runs per `period`.
pub async fn open_rate_limited<W: Workflow>(
    path: impl Into<PathBuf>,
    clock: &TestClock,
    workflow: W,
    queue: &str,
    limit: u32,
    period: std::time::Duration,
) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(workflow)
        .queue(
            queue,
            reel::QueueOptions::default().rate_limit(limit, period),
        )
        .build()
        .await
}

/// A host over the store at `path` running `workflow`, with a queue `queue`
/// that runs at most `concurrency` runs at once.
pub async fn open_queued<W: Workflow>(
    path: impl Into<PathBuf>,
    workflow: W,
    queue: &str,
    concurrency: usize,
) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(workflow)
        .queue(
            queue,
            reel::QueueOptions::default().concurrency(concurrency),
        )
        .build()
        .await
}

/// A host over the store at `path` running `workflow` that passivates a run once
/// it has waited `after`.
pub async fn open_passivating<W: Workflow>(
    path: impl Into<PathBuf>,
    workflow: W,
    after: std::time::Duration,
) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(workflow)
        .passivate_after(after)
        .build()
        .await
}

/// A host over the store at `path` running `first` and `second`, with default
/// settings.
pub async fn open_two<A: Workflow, B: Workflow>(
    path: impl Into<PathBuf>,
    first: A,
    second: B,
) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(first)
        .register(second)
        .build()
        .await
}

/// A host over the store at `path` on `clock` running `first` and `second`, with
/// default settings otherwise.
pub async fn open_two_on<A: Workflow, B: Workflow>(
    path: impl Into<PathBuf>,
    clock: &TestClock,
    first: A,
    second: B,
) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(first)
        .register(second)
        .build()
        .await
}
