//! A slow watcher of a run whose id is used again: the tests of a watch across a
//! delete and a new run of the id (on the host's clock, on a frozen clock, and
//! with the new run's start racing the delete) share it.

use std::time::Duration;

use futures::StreamExt;
use reel::{Host, Record, RunHandle};

use super::within;
use super::workflows::Tagged;

/// The same record: the same place in a log, the same event.
pub fn same(a: &Record, b: &Record) -> bool {
    a.seq == b.seq && a.event == b.event
}

/// Starts `reused` (a `Tagged` run, "old", one more step after its wait) on
/// `host`; a watcher reads its first record, then is not read for a while.
/// Meanwhile the old run ends, and `replace` deletes it and starts a longer run
/// ("new", six more steps) under its id, which ends too. The watcher goes on
/// reading: it may see the rest of the old run, or stop (the run it watched is
/// gone), but must not see the new run's records.
pub async fn a_slow_watcher_sees_none_of_the_next_run(
    host: &Host,
    limit: Duration,
    replace: impl AsyncFnOnce(RunHandle<Tagged>) -> anyhow::Result<RunHandle<Tagged>>,
) -> anyhow::Result<()> {
    let old = host.start::<Tagged>("reused", ("old".into(), 1)).await?;
    within(limit, "the old run's wait", old.wait_until_suspended()).await??;

    // A watcher reads the first record, then is not read for a while.
    let mut watch = Box::pin(old.watch());
    let first = within(limit, "the first record", watch.next())
        .await?
        .expect("a first record")?;
    assert_eq!(first.seq, 0);

    // Meanwhile the old run ends, is deleted, and a longer run takes its id.
    old.signal("go", &1u32, "g").await?;
    assert_eq!(within(limit, "the old run", old.result()).await??, "old");
    let old_records = old.records().await?;
    let new = replace(old).await?;
    new.signal("go", &2u32, "g").await?;
    assert_eq!(within(limit, "the new run", new.result()).await??, "new");
    let new_records = new.records().await?;
    assert!(new_records.len() > old_records.len());

    // The watcher goes on reading: it may see the rest of the old run, or stop
    // (the run it watched is gone), but must not see the new run's records.
    let rest: Vec<_> = within(limit, "the rest of the watch", watch.collect::<Vec<_>>()).await?;
    let seen: Vec<Record> = std::iter::once(first)
        .chain(rest.into_iter().map_while(Result::ok))
        .collect();
    for r in &seen {
        assert!(
            old_records.iter().any(|o| same(o, r)),
            "the watch of the deleted run yielded a record of the run that reused its id: \
             seq {} {:?}\nseen: {:?}",
            r.seq,
            r.event,
            seen.iter()
                .map(|r| (r.seq, r.event.kind()))
                .collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// The plain `replace` of `a_slow_watcher_sees_none_of_the_next_run`: the old run
/// is deleted, then the new run started.
pub async fn delete_then_start(
    host: &Host,
    old: RunHandle<Tagged>,
) -> anyhow::Result<RunHandle<Tagged>> {
    old.delete().await?;
    Ok(host.start::<Tagged>("reused", ("new".into(), 6)).await?)
}
