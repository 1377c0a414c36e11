//! Acceptance: walking the run listing page by page across hosts joined to one
//! PostgreSQL database, while runs are started and end on every host. Host::list:
//! "a run never appears twice in one walk, and every run that existed when the
//! walk began appears"; README: "the listings work on any host for any run".

mod support;

use std::collections::BTreeSet;

use reel::{Ctx, Host, RunFilter, StatusKind, Workflow};
use support::hosts::{result_of, shutdown_all, spread, suspended, until_status};

/// Waits for a signal and returns it.
#[derive(Clone)]
struct Waits;

impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal("go").await
    }
}

async fn open(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Waits)
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_through_pages_of_several_hosts_sees_each_run_once() -> anyhow::Result<()> {
    let url = support::database("acc_walk").await;
    let (hosts, _owners) = spread::<3>(&url, 60, open).await?;
    const BEFORE: usize = 40;
    let before: Vec<String> = (0..BEFORE).map(|i| format!("walk-{i:03}")).collect();
    for (i, id) in before.iter().enumerate() {
        hosts[i % 3].start::<Waits>(id, ()).await?;
    }
    for id in &before {
        until_status(&hosts[0], id, "waited", suspended).await;
    }
    let counts = hosts[2].count().await?;
    assert_eq!(counts[&StatusKind::Suspended], BEFORE as u64, "{counts:?}");

    for newest_first in [true, false] {
        let mut seen: Vec<String> = Vec::new();
        let mut cursor = None;
        let mut page_no = 0usize;
        let mut extra = 0usize;
        loop {
            // Each page through another host; between pages, new runs start and
            // old ones end, through yet other hosts.
            let mut filter = RunFilter::default()
                .workflow("waits")
                .limit(7)
                .after(cursor.take());
            if !newest_first {
                filter = filter.oldest_first();
            }
            let page = hosts[page_no % 3].list(filter).await?;
            seen.extend(page.items.iter().map(|r| r.run_id.clone()));
            let Some(next) = page.next else { break };
            cursor = Some(next);
            let id = format!("late-{newest_first}-{extra:03}");
            hosts[(page_no + 1) % 3].start::<Waits>(&id, ()).await?;
            extra += 1;
            page_no += 1;
        }
        let unique: BTreeSet<&String> = seen.iter().collect();
        assert_eq!(
            unique.len(),
            seen.len(),
            "a run appeared twice in one walk (newest_first {newest_first}): {seen:?}"
        );
        for id in &before {
            assert!(
                unique.contains(id),
                "{id} existed when the walk began but was not listed (newest_first \
                 {newest_first}): {seen:?}"
            );
        }
    }

    // End half of the first runs, each through a host chosen round-robin; then a
    // status walk through the hosts sees exactly the ended ones.
    let mut ended = BTreeSet::new();
    for (i, id) in before.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        let h = &hosts[(i + 1) % 3];
        h.handle::<Waits>(id).signal("go", "v", "go").await?;
        assert_eq!(result_of::<Waits>(&hosts[(i + 2) % 3], id).await??, "v");
        ended.insert(id.clone());
    }
    let mut listed = BTreeSet::new();
    let mut cursor = None;
    let mut page_no = 0usize;
    loop {
        let page = hosts[page_no % 3]
            .list(
                RunFilter::default()
                    .status([StatusKind::Completed])
                    .limit(3)
                    .after(cursor.take()),
            )
            .await?;
        for r in page.items {
            assert!(listed.insert(r.run_id.clone()), "{} twice", r.run_id);
        }
        let Some(next) = page.next else { break };
        cursor = Some(next);
        page_no += 1;
    }
    assert_eq!(
        listed, ended,
        "the completed runs, listed through every host"
    );
    for h in &hosts {
        let counts = h.count().await?;
        assert_eq!(counts[&StatusKind::Completed], ended.len() as u64);
        let total: u64 = counts.values().sum();
        assert_eq!(
            total as usize,
            h.runs().await?.len(),
            "count and runs() agree: {counts:?}"
        );
    }
    shutdown_all(hosts).await
}
