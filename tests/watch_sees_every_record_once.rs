//! `AnyRun::watch` streams a run's records: what is there, then each record as it
//! lands, exactly once and in order, across steps, signals, a timer and a
//! continue-as-new, ending after the terminal record. Watchers that attach
//! mid-way, read slowly, or come many at once all see the same records as
//! `records()`; a finished run's watch replays its log and ends; `watch_from`
//! resumes; an unknown run and a host shutdown end the stream with a typed error.

mod common;

use std::time::Duration;

use common::within;
use futures::StreamExt;
use reel::{Ctx, Error, Event, Record, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// A step, a signal, a short timer, a step; continues as new once, then ends.
struct Life;
impl Workflow for Life {
    const NAME: &'static str = "life";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        let a: u32 = ctx
            .step("a", |_| async move { Ok::<_, String>(segment + 1) })
            .await?;
        let n: u32 = ctx.wait_for_signal("more").await?;
        ctx.sleep(Duration::from_millis(5)).await?;
        let b: u32 = ctx
            .step("b", |_| async move { Ok::<_, String>(a + n) })
            .await?;
        if segment == 0 {
            return ctx.continue_as_new::<Life>(1).await;
        }
        Ok(b)
    }
}

async fn collect(stream: impl futures::Stream<Item = reel::Result<Record>>) -> Vec<Record> {
    stream
        .map(|r| r.expect("a record"))
        .collect::<Vec<_>>()
        .await
}

fn kinds(records: &[Record]) -> Vec<&'static str> {
    records.iter().map(|r| r.event.kind()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_sees_every_record_once_in_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Life).await?;
    let run = host.start::<Life>("life", 0).await?;

    // From the start, and many at once.
    let early: Vec<_> = (0..8).map(|_| tokio::spawn(collect(run.watch()))).collect();
    // One that is not read until the run has ended.
    let mut slow = Box::pin(run.watch());
    let first = within(LIMIT, "the first record", slow.next()).await?;

    within(LIMIT, "the first wait", run.wait_until_suspended()).await??;
    // One that attaches mid-way.
    let late = tokio::spawn(collect(run.watch()));
    run.signal("more", &10u32, "s1").await?;
    within(LIMIT, "the second segment's wait", async {
        while run.info().await?.segment == 0 || run.wait_until_suspended().await.is_err() {
            tokio::task::yield_now().await;
        }
        anyhow::Ok(())
    })
    .await??;
    run.signal("more", &20u32, "s2").await?;
    let output = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(output, 2 + 20);

    let all = run.records().await?;
    assert!(matches!(
        all.last().map(|r| &r.event),
        Some(Event::RunCompleted { .. })
    ));
    assert!(
        all.iter()
            .any(|r| matches!(r.event, Event::ContinuedAsNew { .. }))
    );
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.seq, i as u64);
    }
    for watcher in early {
        let seen = within(LIMIT, "an early watcher", watcher).await??;
        assert_eq!(seen, all, "early watcher: {:?}", kinds(&seen));
    }
    assert_eq!(within(LIMIT, "the late watcher", late).await??, all);
    let mut slow_seen = vec![first.expect("a first record")?];
    slow_seen.extend(collect(slow).await);
    assert_eq!(slow_seen, all);

    // A finished run: its log, then the end.
    assert_eq!(
        within(LIMIT, "a watch of a finished run", collect(run.watch())).await?,
        all
    );
    // Resumed from a sequence number.
    let from = all.len() as u64 - 3;
    assert_eq!(
        within(LIMIT, "watch_from", collect(run.watch_from(from))).await?,
        all[all.len() - 3..]
    );
    // Past the end of a finished run: nothing, and the end.
    assert!(collect(run.watch_from(1_000)).await.is_empty());
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runs_and_shutdown_end_the_stream_with_an_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Life).await?;

    let items: Vec<_> = host.run("nope").watch().collect().await;
    assert!(matches!(items.as_slice(), [Err(Error::UnknownRun(r))] if r == "nope"));

    let run = host.start::<Life>("waits", 0).await?;
    run.wait_until_suspended().await?;
    let mut watch = Box::pin(run.watch());
    let mut seen = 0;
    // Read what is there; the next read waits for records that never come.
    while seen < run.records().await?.len() {
        within(LIMIT, "a record", watch.next())
            .await?
            .expect("a record")?;
        seen += 1;
    }
    let pending = tokio::spawn(async move { watch.next().await.map(|r| r.map(|_| ())) });
    host.shutdown().await?;
    let after = within(LIMIT, "the end after shutdown", pending).await??;
    assert!(matches!(after, Some(Err(Error::Shutdown))), "{after:?}");
    Ok(())
}
