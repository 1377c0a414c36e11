//! `Host::list` pages through runs with filters (status, workflow, version, start
//! time, parent) in both orders, every run exactly once, also while new runs start
//! between pages; `Host::count` keeps a count per status that matches the runs,
//! across a restart and on a store written before the listing indexes existed;
//! bad arguments are typed errors.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::listing::{assert_sorted, walk};
use common::within;
use futures::future::try_join_all;
use reel::{Ctx, Cursor, Error, Host, RunFilter, RunInfo, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(60);
const RUNS: u32 = 10_000;

/// Ends at once: completes for even inputs, fails for odd ones.
struct Quick;
impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        if n % 2 == 0 {
            Ok(n)
        } else {
            Err(Error::failed(format!("odd {n}")))
        }
    }
}

/// Waits for a signal; its children, if asked for, are `Quick` runs.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, children: u32) -> reel::Result<u32> {
        for i in 0..children {
            let id = format!("{}-c{i}", ctx.run_id());
            ctx.child::<Quick>(&id, i * 2).await?;
        }
        ctx.wait_for_signal("go").await
    }
}

async fn host(dir: &std::path::Path) -> anyhow::Result<Host> {
    Ok(common::hosts::open_two(dir, Quick, Waiter).await?)
}

fn ids(rows: &[RunInfo]) -> Vec<String> {
    rows.iter().map(|r| r.run_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_cover_every_run_once_with_each_filter() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    // Quick runs in batches, so start times spread over several milliseconds.
    for batch in 0..10u32 {
        let starts = (0..RUNS / 10).map(|i| {
            let n = batch * (RUNS / 10) + i;
            let host = &host;
            async move { host.start::<Quick>(&format!("q{n:05}"), n).await }
        });
        let handles = try_join_all(starts).await?;
        within(LIMIT, "quick runs", async {
            for h in &handles {
                let _ = h.result().await;
            }
        })
        .await?;
    }
    let oldest = host.list(RunFilter::default().limit(1).oldest_first());
    let first_created = oldest.await?.items[0].created_at;
    for i in 0..20u32 {
        host.start::<Waiter>(&format!("w{i:02}"), if i == 0 { 3 } else { 0 })
            .await?
            .wait_until_suspended()
            .await?;
    }
    let total = RUNS as usize + 20 + 3;

    // Everything, both orders, odd page sizes.
    for newest_first in [true, false] {
        let mut filter = RunFilter::default().limit(97);
        filter.newest_first = newest_first;
        let rows = walk(&host, filter).await?;
        assert_eq!(rows.len(), total);
        assert_eq!(ids(&rows).into_iter().collect::<HashSet<_>>().len(), total);
        assert_sorted(&rows, newest_first);
    }

    // By status: two kinds merged in one order.
    let done = walk(
        &host,
        RunFilter::default()
            .status([StatusKind::Completed, StatusKind::Suspended])
            .limit(500),
    )
    .await?;
    assert_eq!(done.len(), RUNS as usize / 2 + 3 + 20);
    assert_sorted(&done, true);
    assert!(done.iter().all(|r| matches!(
        r.status.kind(),
        StatusKind::Completed | StatusKind::Suspended
    )));
    let failed = walk(&host, RunFilter::default().status([StatusKind::Failed])).await?;
    assert_eq!(failed.len(), RUNS as usize / 2);

    // By workflow (not indexed: filtered on the way, still complete).
    let waiters = walk(&host, RunFilter::default().workflow("waiter").limit(7)).await?;
    assert_eq!(waiters.len(), 20);
    assert!(waiters.iter().all(|r| r.workflow == "waiter"));
    assert_eq!(walk(&host, RunFilter::default().version(2)).await?.len(), 0);

    // By parent.
    let children = walk(&host, RunFilter::default().parent("w00")).await?;
    assert_eq!(ids(&children).len(), 3);
    assert!(children.iter().all(|c| c.parent.as_deref() == Some("w00")));

    // By start time: the runs started after the first batch's first run, before
    // the waiters.
    let waiters_start = waiters.iter().map(|w| w.created_at).min().expect("waiters");
    let before_waiters = walk(
        &host,
        RunFilter::default()
            .created(Some(first_created), Some(waiters_start))
            .limit(1000),
    )
    .await?;
    assert!(before_waiters.iter().all(|r| r.workflow == "quick"));
    assert!(before_waiters.len() <= RUNS as usize);

    // Counts match the runs.
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Completed], u64::from(RUNS / 2) + 3);
    assert_eq!(counts[&StatusKind::Failed], u64::from(RUNS / 2));
    assert_eq!(counts[&StatusKind::Suspended], 20);
    assert_eq!(counts.values().sum::<u64>(), total as u64);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_is_complete_while_runs_start_between_pages() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    for i in 0..300u32 {
        host.start::<Waiter>(&format!("old{i:03}"), 0).await?;
    }
    for newest_first in [true, false] {
        let mut filter = RunFilter::default().limit(40);
        filter.newest_first = newest_first;
        let mut seen = Vec::new();
        let mut after = None;
        let mut started = 0;
        loop {
            let page = host.list(filter.clone().after(after.take())).await?;
            seen.extend(ids(&page.items));
            // New runs land between pages.
            for _ in 0..5 {
                host.start::<Waiter>(&format!("new-{newest_first}-{started}"), 0)
                    .await?;
                started += 1;
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let unique: HashSet<_> = seen.iter().cloned().collect();
        assert_eq!(unique.len(), seen.len(), "a run listed twice");
        for i in 0..300u32 {
            assert!(unique.contains(&format!("old{i:03}")), "old{i:03} missing");
        }
    }
    host.shutdown().await?;
    Ok(())
}

fn tally(rows: &[RunInfo]) -> BTreeMap<StatusKind, u64> {
    let mut t: BTreeMap<StatusKind, u64> = StatusKind::ALL.into_iter().map(|k| (k, 0)).collect();
    for r in rows {
        *t.entry(r.status.kind()).or_default() += 1;
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_follow_every_change_and_survive_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let empty = host.count().await?;
    assert_eq!(empty.len(), StatusKind::ALL.len());
    assert!(empty.values().all(|c| *c == 0));
    for i in 0..6u32 {
        let _ = host
            .start::<Quick>(&format!("q{i}"), i)
            .await?
            .result()
            .await;
    }
    for i in 0..4u32 {
        host.start::<Waiter>(&format!("w{i}"), 0)
            .await?
            .wait_until_suspended()
            .await?;
    }
    host.handle::<Waiter>("w0").signal("go", &7u32, "s").await?;
    host.handle::<Waiter>("w0").result().await?;
    host.handle::<Waiter>("w1")
        .cancel("no longer needed")
        .await?;
    let expected = tally(&host.runs().await?);
    assert_eq!(host.count().await?, expected);
    assert_eq!(expected[&StatusKind::Completed], 4);
    assert_eq!(expected[&StatusKind::Failed], 3);
    assert_eq!(expected[&StatusKind::Cancelled], 1);
    assert_eq!(expected[&StatusKind::Suspended], 2);
    host.shutdown().await?;

    let host = self::host(dir.path()).await?;
    assert_eq!(host.count().await?, expected);
    host.handle::<Waiter>("w2").signal("go", &1u32, "s").await?;
    host.handle::<Waiter>("w2").result().await?;
    assert_eq!(host.count().await?, tally(&host.runs().await?));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_indexes_gets_them_on_open() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    for i in 0..50u32 {
        let _ = host
            .start::<Quick>(&format!("q{i:02}"), i)
            .await?
            .result()
            .await;
    }
    let before = walk(&host, RunFilter::default()).await?;
    let counts = host.count().await?;
    host.shutdown().await?;
    drop(host);

    // What an older reel left: no listing keyspace content, no marker.
    {
        let db = fjall::Database::builder(dir.path()).open()?;
        let listing = db.keyspace("listing", fjall::KeyspaceCreateOptions::default)?;
        let keys: Vec<_> = listing.iter().map(|g| g.key()).collect::<Result<_, _>>()?;
        for k in keys {
            listing.remove(k)?;
        }
        let reel = db.keyspace("reel", fjall::KeyspaceCreateOptions::default)?;
        reel.remove("listing")?;
        db.persist(fjall::PersistMode::SyncAll)?;
    }

    let host = self::host(dir.path()).await?;
    assert_eq!(walk(&host, RunFilter::default()).await?, before);
    assert_eq!(host.count().await?, counts);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_listing_arguments_are_typed_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    assert!(matches!(
        host.list(RunFilter::default().limit(0)).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        host.list(RunFilter::default().limit(RunFilter::MAX_LIMIT + 1))
            .await,
        Err(Error::InvalidArgument(_))
    ));
    for bad in ["", "nope", "12", ":x", "x:y", "12:"] {
        match bad.parse::<Cursor>() {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("cursor"), "{m}"),
            other => panic!("{bad:?} parsed as {other:?}"),
        }
    }
    // A cursor past everything: an empty last page.
    let far: Cursor = "99999999999999:zzz".parse()?;
    let page = host
        .list(RunFilter::default().oldest_first().after(Some(far)))
        .await?;
    assert!(page.items.is_empty() && page.next.is_none());
    host.shutdown().await?;
    Ok(())
}
