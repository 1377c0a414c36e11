//! Listing and counting as an operator relies on them (DBOS's list_workflows):
//! counts match the runs through every kind of transition (enqueued, cancelled
//! while enqueued, paused, parked, retried, forked, deleted
//! and reused, continued as new, terminated), across a restart; filters by status,
//! workflow and creation time page correctly in both orders.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{
    Ctx, Error, Host, HostBuilder, QueueOptions, RunFilter, RunInfo, RunStatus, StatusKind,
    Workflow,
};

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// 0: waits for `go`; 1: panics outside a step; 2: continues as new once (as 0);
/// 3: returns at once.
struct Multi;
impl Workflow for Multi {
    const NAME: &'static str = "multi";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<u32> {
        match mode {
            1 => panic!("handler bug"),
            2 => ctx.continue_as_new::<Multi>(0).await,
            3 => Ok(3),
            _ => {
                ctx.step("s", |_| async { Ok::<_, String>(()) }).await?;
                ctx.wait_for_signal("go").await
            }
        }
    }
}

/// Returns at once: a second workflow name for the filters.
struct Other;
impl Workflow for Other {
    const NAME: &'static str = "other";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}

fn builder(dir: &std::path::Path, clock: &TestClock) -> HostBuilder {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Multi)
        .register(Other)
        .restart_limit(1, Duration::from_secs(3600))
        .queue("q", QueueOptions::default().concurrency(1))
}

fn tally(rows: &[RunInfo]) -> BTreeMap<StatusKind, u64> {
    let mut t: BTreeMap<StatusKind, u64> = StatusKind::ALL.into_iter().map(|k| (k, 0)).collect();
    for r in rows {
        *t.entry(r.status.kind()).or_default() += 1;
    }
    t
}

async fn walk(host: &Host, filter: RunFilter) -> anyhow::Result<Vec<RunInfo>> {
    let mut all = Vec::new();
    let mut after = filter.after.clone();
    loop {
        let page = host.list(filter.clone().after(after)).await?;
        all.extend(page.items);
        match page.next {
            Some(c) => after = Some(c),
            None => return Ok(all),
        }
    }
}

async fn check_counts(host: &Host, what: &str) -> anyhow::Result<BTreeMap<StatusKind, u64>> {
    let runs = host.runs().await?;
    let expected = tally(&runs);
    assert_eq!(host.count().await?, expected, "count() {what}");
    let walked = walk(host, RunFilter::default().limit(3)).await?;
    let ids: BTreeSet<&str> = walked.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids.len(), walked.len(), "a run listed twice {what}");
    assert_eq!(tally(&walked), expected, "list() {what}");
    for kind in StatusKind::ALL {
        let rows = walk(host, RunFilter::default().status([kind]).limit(2)).await?;
        assert!(rows.iter().all(|r| r.status.kind() == kind), "{what}");
        assert_eq!(rows.len() as u64, expected[&kind], "list({kind}) {what}");
    }
    Ok(expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_match_runs_through_every_transition_and_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;

    // Queue: one admitted, one cancelled while enqueued, one left waiting.
    let admitted = host.start_on::<Multi>("q", "admitted", 0).await?;
    within(LIMIT, "admitted", admitted.wait_until_suspended()).await??;
    let doomed = host.start_on::<Multi>("q", "doomed", 0).await?;
    host.start_on::<Multi>("q", "enqueued", 0).await?;
    check_counts(&host, "with a queue").await?;
    doomed.cancel("no").await?;
    check_counts(&host, "after queue cancels").await?;

    // Paused, parked, continued as new, terminated, completed.
    let paused = host.start::<Multi>("paused", 0).await?;
    within(LIMIT, "paused", paused.wait_until_suspended()).await??;
    paused.pause().await?;
    let parked = host.start::<Multi>("parked", 1).await?;
    assert!(matches!(
        within(LIMIT, "the park", parked.result()).await?,
        Err(Error::Crashed(_))
    ));
    let cont = host.start::<Multi>("cont", 2).await?;
    within(LIMIT, "cont", cont.wait_until_suspended()).await??;
    let term = host.start::<Multi>("term", 0).await?;
    within(LIMIT, "term", term.wait_until_suspended()).await??;
    term.terminate("stop").await?;
    host.start::<Other>("other", 1).await?.result().await?;
    host.start::<Multi>("quick", 3).await?.result().await?;
    check_counts(&host, "after pause, park, continue, terminate").await?;

    // Retry the parked run (it parks again), fork, delete and reuse an id with
    // another workflow.
    parked.retry().await?;
    within(LIMIT, "the park again", async {
        loop {
            if matches!(parked.status().await?, RunStatus::Parked { .. }) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    let seg = cont
        .records()
        .await?
        .iter()
        .filter(|r| r.event.kind() == "RunStarted")
        .map(|r| r.seq)
        .max()
        .unwrap_or(0);
    host.fork("cont", seg + 1, "cont-fork").await?;
    within(
        LIMIT,
        "the fork",
        host.handle::<Multi>("cont-fork").wait_until_suspended(),
    )
    .await??;
    host.run("quick").delete().await?;
    host.start::<Other>("quick", 2).await?.result().await?;
    let sws = host
        .signal_with_start::<Multi, _>("sws", 0, "go", &5u32, "g")
        .await?;
    within(LIMIT, "sws", sws.result()).await??;
    check_counts(&host, "after retry, fork, delete, reuse").await?;
    // A parked run is retried by the next host: cancel it first so that the
    // counts after the restart are not a race with its recovery.
    parked.cancel("give up").await?;
    let before = check_counts(&host, "after cancelling the parked run").await?;
    host.shutdown().await?;

    let host = builder(dir.path(), &clock).build().await?;
    let after = check_counts(&host, "after a restart").await?;
    assert_eq!(before, after);
    assert_eq!(
        host.list(RunFilter::default().workflow("other"))
            .await?
            .items
            .len(),
        2
    );
    // Drain the queue and the waiters: everything ends, the counts follow.
    for id in ["admitted", "enqueued", "cont", "cont-fork"] {
        let h = host.handle::<Multi>(id);
        within(LIMIT, "a waiter", h.wait_until_suspended()).await??;
        h.signal("go", &1u32, "go").await?;
        within(LIMIT, "a waiter", h.result()).await??;
    }
    host.run("paused").resume().await?;
    let p = host.handle::<Multi>("paused");
    p.signal("go", &1u32, "go").await?;
    within(LIMIT, "paused", p.result()).await??;
    let end = check_counts(&host, "at the end").await?;
    let unfinished = common::counts::unfinished(&end);
    assert_eq!(unfinished, 0, "{end:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creation_time_filters_page_in_both_orders() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock).build().await?;
    // Four runs a second, for ten seconds, alternating workflows.
    let mut created: Vec<(u64, String, &str)> = Vec::new();
    for s in 0..10u64 {
        for k in 0..4u32 {
            let id = format!("r{s:02}-{k}");
            if k % 2 == 0 {
                host.start::<Other>(&id, k).await?.result().await?;
                created.push((s, id, "other"));
            } else {
                host.start::<Multi>(&id, 3).await?.result().await?;
                created.push((s, id, "multi"));
            }
        }
        clock.advance(Duration::from_secs(1));
    }
    let at = |s: u64| t0() + Duration::from_secs(s);
    for (from, to) in [(0, 10), (3, 7), (5, 6), (9, 20), (4, 4)] {
        for workflow in [None, Some("multi")] {
            for newest in [true, false] {
                let mut f = RunFilter::default()
                    .created(Some(at(from)), Some(at(to)))
                    .limit(3);
                if let Some(w) = workflow {
                    f = f.workflow(w);
                }
                if !newest {
                    f = f.oldest_first();
                }
                let got: Vec<String> = walk(&host, f)
                    .await?
                    .into_iter()
                    .map(|r| r.run_id)
                    .collect();
                let mut want: Vec<String> = created
                    .iter()
                    .filter(|(s, _, w)| *s >= from && *s < to && workflow.is_none_or(|x| x == *w))
                    .map(|(_, id, _)| id.clone())
                    .collect();
                if newest {
                    want.reverse();
                }
                assert_eq!(got, want, "[{from}, {to}) {workflow:?} newest={newest}");
            }
        }
    }
    // A cursor from one page continues the same walk after more runs start.
    let first = host
        .list(RunFilter::default().oldest_first().limit(5))
        .await?;
    host.start::<Other>("late", 0).await?.result().await?;
    let rest = walk(
        &host,
        RunFilter::default()
            .oldest_first()
            .limit(5)
            .after(first.next.clone()),
    )
    .await?;
    assert_eq!(first.items.len() + rest.len(), created.len() + 1);
    assert_eq!(rest.last().map(|r| r.run_id.as_str()), Some("late"));
    // The printed cursor parses back to the same position.
    let printed = first
        .next
        .clone()
        .map(|c| c.to_string())
        .unwrap_or_default();
    let parsed: reel::Cursor = printed.parse()?;
    assert_eq!(Some(parsed), first.next);
    host.shutdown().await?;
    Ok(())
}
