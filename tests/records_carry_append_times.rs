//! Every log record carries the time it was appended: `RunHandle::records()` gives
//! the events of `events()` numbered and timed, so a step's duration, a timer's
//! wait or a signal's latency can be read off a run's log. Across a restart too.

mod common;

use std::time::{Duration, SystemTime};

use common::within;
use reel::{Ctx, Event, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

/// A step whose body takes 30 ms, then a signal wait.
struct Timed;

impl Workflow for Timed {
    const NAME: &'static str = "timed";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("slow", |_| async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok::<_, String>(())
        })
        .await?;
        ctx.wait_for_signal("go").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_numbered_and_timed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let before = SystemTime::now() - Duration::from_secs(1);
    let host = common::hosts::open(&path, Timed).await?;
    let run = host.start::<Timed>("timed-1", ()).await?;
    run.wait_until_suspended().await?;
    host.shutdown().await?;

    let host = common::hosts::open(&path, Timed).await?;
    let run = host.handle::<Timed>("timed-1");
    run.signal("go", &7u32, "go-1").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 7);
    let after = SystemTime::now() + Duration::from_secs(1);

    let records = run.records().await?;
    let events = run.events().await?;
    assert_eq!(
        records.iter().map(|r| r.event.clone()).collect::<Vec<_>>(),
        events
    );
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (0..events.len() as u64).collect::<Vec<_>>()
    );
    for pair in records.windows(2) {
        assert!(pair[0].at <= pair[1].at, "times go forward: {pair:?}");
    }
    assert!(records.iter().all(|r| before <= r.at && r.at <= after));
    let at = |kind: &str| {
        records
            .iter()
            .find(|r| r.event.kind() == kind)
            .map(|r| r.at)
            .expect("the event is in the log")
    };
    let took = at("StepCompleted").duration_since(at("StepStarted"))?;
    assert!(took >= Duration::from_millis(25), "the step took {took:?}");
    assert!(matches!(
        records.last().map(|r| &r.event),
        Some(Event::RunCompleted { .. })
    ));
    host.shutdown().await?;
    Ok(())
}
