//! A caller that stops waiting for a run (a dropped `result()` future, a timeout)
//! leaves nothing behind: the host does not keep its waiter until the run changes
//! state, which for a run waiting on a signal may be never. The same holds for
//! callers waiting for a published value.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use reel_actors::{Core, CoreOptions, Engine, Execution, Outcome, Registry};
use reel_storage::{Failure, MemStore, Payload};

/// Every execution suspends: the run waits forever.
struct Waits;
impl Engine for Waits {
    fn execute(&self, e: Execution) -> BoxStream<'static, Outcome> {
        let seen = e.journal.len();
        // One suspension, then the execution stays alive and waits.
        Box::pin(
            futures::stream::iter([Outcome::Suspended {
                waiting_on: "a signal that never comes".into(),
                awaits_child: false,
                seen,
            }])
            .chain(futures::stream::pending()),
        )
    }
}

struct One;
impl Registry for One {
    fn lookup(&self, _: &str, _: u32) -> Result<Arc<dyn Engine>, Failure> {
        Ok(Arc::new(Waits))
    }
    fn newest(&self, _: &str) -> Option<u32> {
        Some(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_result_waits_are_pruned() {
    let core = Core::open(
        Arc::new(MemStore::new()),
        Arc::new(One),
        CoreOptions::default(),
    )
    .await
    .expect("open");
    core.start("w", 1, "r", Payload::default(), None, None)
        .await
        .expect("start");
    for _ in 0..200 {
        let waited = tokio::time::timeout(Duration::from_millis(1), core.wait_settled("r")).await;
        assert!(waited.is_err(), "the run never settles");
    }
    assert_eq!(core.waiting_callers(), 0);

    // A caller still waiting is counted, and pruned the moment it gives up.
    let waiting = tokio::spawn({
        let core = core.clone();
        async move { core.wait_settled("r").await }
    });
    while core.waiting_callers() == 0 {
        tokio::task::yield_now().await;
    }
    waiting.abort();
    assert!(waiting.await.is_err(), "aborted");
    assert_eq!(core.waiting_callers(), 0);
    core.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_waits_for_published_values_are_pruned() {
    let core = Core::open(
        Arc::new(MemStore::new()),
        Arc::new(One),
        CoreOptions::default(),
    )
    .await
    .expect("open");
    core.start("w", 1, "r", Payload::default(), None, None)
        .await
        .expect("start");
    for _ in 0..200 {
        let waited =
            tokio::time::timeout(Duration::from_millis(1), core.wait_published("r", "k")).await;
        assert!(waited.is_err(), "the run never publishes");
    }
    assert_eq!(core.waiting_for_published(), 0);

    let waiting = tokio::spawn({
        let core = core.clone();
        async move { core.wait_published("r", "k").await }
    });
    while core.waiting_for_published() == 0 {
        tokio::task::yield_now().await;
    }
    waiting.abort();
    assert!(waiting.await.is_err(), "aborted");
    assert_eq!(core.waiting_for_published(), 0);
    core.shutdown().await;
}
