//! A watch of a run follows that run only. When the run ends, is deleted and its id
//! is used again by a new run, a watcher that had not yet read to the old run's end
//! gets the old run's records and nothing of the new run's (Temporal keys a history
//! by run id, not workflow id, so a follower never crosses into the next run).

mod common;

use std::time::Duration;

use common::watch::same;
use common::within;
use common::workflows::Tagged;
use futures::StreamExt;
use reel::Record;

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_of_a_deleted_run_sees_none_of_the_next_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Tagged).await?;
    common::watch::a_slow_watcher_sees_none_of_the_next_run(&host, LIMIT, async |old| {
        common::watch::delete_then_start(&host, old).await
    })
    .await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumed_after_delete_and_reuse_does_not_splice_the_runs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Tagged).await?;
    let old = host.start::<Tagged>("reused", ("old".into(), 0)).await?;
    within(LIMIT, "the old run's wait", old.wait_until_suspended()).await??;
    // A client read the old run's first records, then lost its connection.
    let head: Vec<Record> = within(
        LIMIT,
        "the head",
        old.watch().take(2).map(|r| r.expect("a record")).collect(),
    )
    .await?;
    let resume_at = head.last().expect("two records").seq + 1;
    let created_at = old.info().await?.created_at;

    old.signal("go", &1u32, "g").await?;
    within(LIMIT, "the old run", old.result()).await??;
    let old_records = old.records().await?;
    old.delete().await?;
    let new = host.start::<Tagged>("reused", ("new".into(), 6)).await?;
    new.signal("go", &2u32, "g").await?;
    within(LIMIT, "the new run", new.result()).await??;

    // The client resumes where it was. It may get an error or nothing (the run it
    // watched is gone), but records of the new run spliced onto the old run's
    // head would read as one run that never happened.
    let tail: Vec<_> = within(
        LIMIT,
        "the resumed watch",
        old.watch_run_from(created_at, resume_at)
            .collect::<Vec<_>>(),
    )
    .await?;
    let tail: Vec<Record> = tail.into_iter().map_while(Result::ok).collect();
    let foreign: Vec<_> = tail
        .iter()
        .filter(|r| !old_records.iter().any(|o| same(o, r)))
        .map(|r| (r.seq, r.event.kind()))
        .collect();
    assert!(
        foreign.is_empty(),
        "a watch resumed at seq {resume_at} after the run was deleted and its id \
         reused spliced the new run's records onto the old run's: {foreign:?}"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumed_on_its_run_reads_on_to_its_end() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Tagged).await?;
    let run = host.start::<Tagged>("kept", ("only".into(), 2)).await?;
    within(LIMIT, "the run's wait", run.wait_until_suspended()).await??;
    let head: Vec<Record> = within(
        LIMIT,
        "the head",
        run.watch().take(2).map(|r| r.expect("a record")).collect(),
    )
    .await?;
    let created_at = run.info().await?.created_at;
    run.signal("go", &1u32, "g").await?;
    within(LIMIT, "the run", run.result()).await??;
    let tail: Vec<Record> = within(
        LIMIT,
        "the resumed watch",
        run.watch_run_from(created_at, head[1].seq + 1)
            .map(|r| r.expect("a record"))
            .collect(),
    )
    .await?;
    let all = run.records().await?;
    let resumed: Vec<u64> = head.iter().chain(&tail).map(|r| r.seq).collect();
    let expected: Vec<u64> = all.iter().map(|r| r.seq).collect();
    assert_eq!(
        resumed, expected,
        "head and resumed tail against the whole log"
    );
    // A resume that names another creation time reads nothing of this run.
    let other = created_at + Duration::from_millis(1);
    let none: Vec<_> = within(
        LIMIT,
        "a resume naming another run",
        run.watch_run_from(other, 0).collect::<Vec<_>>(),
    )
    .await?;
    assert!(none.is_empty(), "read {} items of another run", none.len());
    host.shutdown().await?;
    Ok(())
}
