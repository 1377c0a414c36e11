//! Shared helpers for the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub mod cart;
pub mod churn;
pub mod counting;
pub mod counts;
pub mod hosts;
pub mod kill;
pub mod late_child;
pub mod listing;
pub mod log_checks;
pub mod replay;
pub mod schedules;
pub mod status;
pub mod tokens;
pub mod watch;
pub mod workflows;

/// Counts how often a body really ran.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicU32>);

impl Counter {
    pub fn bump(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A one-way gate shared between a test and a step body through a `static`: closed
/// until the test opens it, open for good afterwards.
pub struct Gate(tokio::sync::Semaphore);

impl Gate {
    pub const fn new() -> Gate {
        Gate(tokio::sync::Semaphore::const_new(0))
    }

    /// Opens the gate: a closed semaphore fails every pending and later `acquire`
    /// at once, which is exactly "everyone passes from now on".
    pub fn open(&self) {
        self.0.close();
    }

    pub fn is_open(&self) -> bool {
        self.0.is_closed()
    }

    pub async fn wait(&self) {
        let _ = self.0.acquire().await;
    }
}

/// Awaits `fut` for at most `limit`: a hang becomes an error naming what was awaited.
pub async fn within<F: std::future::Future>(
    limit: std::time::Duration,
    what: &str,
    fut: F,
) -> anyhow::Result<F::Output> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {limit:?} waiting for {what}"))
}

/// Reads the run's log until `done` holds for it, for at most `limit`.
pub async fn until_log<W: reel::Workflow>(
    run: &reel::RunHandle<W>,
    limit: std::time::Duration,
    what: &str,
    done: impl Fn(&[reel::Event]) -> bool,
) -> anyhow::Result<Vec<reel::Event>> {
    within(limit, what, async {
        loop {
            let events = run.events().await?;
            if done(&events) {
                return anyhow::Ok(events);
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await?
}

/// How many `SignalAwaited` on `name` the log holds: each is one wait the handler
/// has reached, so the count tells a test how far a run has got.
pub fn waits_on(events: &[reel::Event], name: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, reel::Event::SignalAwaited { name: n, .. } if n == name))
        .count()
}

/// Retries `op` while it fails (a fault may refuse it); gives up after `tries`.
pub async fn retry<T, F, Fut>(tries: u32, mut op: F) -> reel::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = reel::Result<T>>,
{
    let mut last = None;
    for _ in 0..tries {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(last.unwrap_or(reel::Error::Shutdown))
}
