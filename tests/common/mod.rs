//! Shared helpers for the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

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
