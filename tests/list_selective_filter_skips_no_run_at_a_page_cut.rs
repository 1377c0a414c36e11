//! A listing whose filter the indexes do not cover (a workflow name) examines at
//! most `limit + SCAN_BUDGET` index entries per page and then answers a short
//! page with a `next` cursor. The walk must still be complete: a run sitting at
//! the very position where a page stopped examining is listed by the next page,
//! in both orders (`Host::list` promises "every run that existed when the walk
//! began appears").

mod common;

use std::time::Duration;

use common::within;
use futures::stream::{self, StreamExt, TryStreamExt};
use reel::{Ctx, Cursor, Host, RunFilter, Workflow};

const LIMIT: Duration = Duration::from_secs(120);
/// `reel_storage::listing::SCAN_BUDGET`, plus the one row a page of 1 examines.
const BULK: usize = 10_001;

/// Ends at once.
struct Bulk;
impl Workflow for Bulk {
    const NAME: &'static str = "bulk";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

/// Ends at once; only two of these exist.
struct Rare;
impl Workflow for Rare {
    const NAME: &'static str = "rare";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

async fn walk(host: &Host, filter: RunFilter) -> anyhow::Result<(Vec<String>, usize)> {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut after: Option<Cursor> = None;
    loop {
        let page = host.list(filter.clone().after(after.take())).await?;
        pages += 1;
        ids.extend(page.items.into_iter().map(|r| r.run_id));
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok((ids, pages)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_at_the_scan_budget_cut_is_on_the_next_page() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Bulk)
        .register(Rare)
        .build()
        .await?;
    // `rare-old` first, then BULK runs, then `rare-new`: in either order one
    // rare run is the first row and the other sits exactly BULK + 1 entries
    // after it, where the second page stops examining.
    let old = host.start::<Rare>("rare-old", ()).await?;
    within(LIMIT, "rare-old", old.result()).await??;
    within(
        LIMIT,
        "bulk starts",
        stream::iter(0..BULK)
            .map(|i| {
                let host = host.clone();
                async move { host.start::<Bulk>(&format!("bulk-{i:05}"), ()).await }
            })
            .buffer_unordered(256)
            .try_collect::<Vec<_>>(),
    )
    .await??;
    // Created at or after every bulk run; on a tie the id orders it after them.
    let new = host.start::<Rare>("rare-new", ()).await?;
    within(LIMIT, "rare-new", new.result()).await??;

    for newest_first in [false, true] {
        let mut filter = RunFilter::default().workflow("rare").limit(1);
        filter.newest_first = newest_first;
        let (ids, pages) = within(LIMIT, "the walk", walk(&host, filter)).await??;
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            ["rare-new", "rare-old"],
            "newest_first={newest_first}: the walk listed {ids:?} in {pages} pages"
        );
    }
    host.shutdown().await?;
    Ok(())
}
