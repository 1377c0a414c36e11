//! Thousands of runs started at once (so the writer's batches are large and mix
//! many runs' appends), ending every way (completed, failed by the handler, failed
//! by a step, cancelled, left waiting), parents starting their children in one
//! burst, finished runs deleted and started again under their ids (also under
//! another workflow) from many tasks, and hot ids each deleted and started again
//! in a tight loop. Once everything has settled, `Host::count` and every
//! listing (each status filter and some combinations, workflow, parent, creation
//! time windows, every page size in both orders) agree with what each run's
//! `info()` says, every run is listed exactly once and no deleted run is listed;
//! the same after the host is closed and the store opened again.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use common::churn::{CHILDREN, Job, Leaf};
use common::listing::walk;
use futures::future::{join_all, try_join_all};
use reel::{Ctx, Error, Host, RunFilter, RunInfo, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(120);
const RUNS: u32 = 3_000;
const HOT_IDS: u32 = 32;
const HOT_LOOPS: u32 = 30;

async fn open(dir: &std::path::Path) -> reel::Result<Host> {
    common::hosts::open_two(dir, Job, Leaf).await
}

fn run_id(i: u32) -> String {
    format!("r{i:05}")
}

fn hot_id(h: u32) -> String {
    format!("hot-{h}")
}

/// Every id a run of this test may have.
fn universe() -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..RUNS {
        ids.push(run_id(i));
        for j in 0..CHILDREN {
            ids.push(format!("{}/c{j}", run_id(i)));
        }
    }
    ids.extend((0..HOT_IDS).map(hot_id));
    ids
}

/// Ends a run that may wait for `go`: signals it or cancels it. Errors of runs
/// that ended meanwhile are fine.
async fn end_waiting(host: &Host, id: &str, i: u32) -> anyhow::Result<()> {
    let run = host.run(id);
    if i % 2 == 0 {
        match run.signal("go", &i, &format!("go-{i}")).await {
            Ok(()) | Err(Error::RunFinished(_)) => {}
            Err(e) => anyhow::bail!("signal to {id}: {e}"),
        }
        let _ = run.result::<u32>().await;
    } else {
        match run.cancel("churn").await {
            Ok(()) | Err(Error::RunFinished(_)) => {}
            Err(e) => anyhow::bail!("cancel of {id}: {e}"),
        }
    }
    Ok(())
}

/// Waits for the run of `id` to end or to wait; ends it (as `end_waiting`) if
/// `end` and it waits for `go`, or, if `end_parents`, on its children too. (A
/// parent cancelled while its children run and then deleted is left out of the
/// runs deleted here: the children's late ends would reach its id,
/// `a_deleted_parents_late_child_end_parks_no_run_of_its_id.rs`.)
async fn settle_one(
    host: &Host,
    id: &str,
    n: u32,
    end: bool,
    end_parents: bool,
) -> anyhow::Result<()> {
    let run = host.run(id);
    match run.wait_until_suspended().await {
        Ok(RunStatus::Suspended { waiting_on })
            if end && (end_parents || waiting_on.contains("go")) =>
        {
            end_waiting(host, id, n).await
        }
        Ok(_) | Err(Error::RunFinished(_)) => Ok(()),
        Err(e) => anyhow::bail!("waiting for {id}: {e}"),
    }
}

/// The phase-2 work on run `i`: ends its waiting run (most of them), and for one
/// run in five deletes it and starts it again, three times, once under the other
/// workflow, the last time leaving every other one deleted.
async fn churn_one(host: &Host, i: u32) -> anyhow::Result<()> {
    let id = run_id(i);
    // Mode-3 runs are 6m + 3: one in four is left waiting, the others are
    // signalled (m even) or cancelled (m odd).
    settle_one(host, &id, i / 6, i % 4 != 3, i % 5 != 0).await?;
    if i % 5 != 0 {
        return Ok(());
    }
    for k in 0..3u32 {
        // Whatever the run of the id waits on is ended; then it is deleted.
        settle_one(host, &id, i / 6 + k, true, false).await?;
        let _ = host.run(&id).result::<u32>().await;
        if let Err(e) = host.run(&id).delete().await {
            anyhow::bail!("delete of {id} (round {k}): {e}");
        }
        if k == 2 && i % 10 == 0 {
            return Ok(());
        }
        if k == 1 {
            let run = host.start::<Leaf>(&id, i).await?;
            match run.result().await {
                Ok(out) => anyhow::ensure!(out == i, "{id}: the leaf's output"),
                Err(e) => anyhow::bail!("{id}: the leaf started in round {k} gave {e}"),
            }
        } else {
            let mode = (i / 5 + k + 1) % 6;
            host.start::<Job>(&id, (mode, i + k)).await?;
        }
    }
    Ok(())
}

/// One task deletes its hot id and starts it again and again, in a tight loop,
/// while everything else goes on (several tasks on one id race each other:
/// `delete_and_start_races_keep_every_reader_on_its_run.rs`).
async fn hammer(host: &Host, h: u32) -> anyhow::Result<()> {
    let id = hot_id(h);
    for k in 0..HOT_LOOPS {
        let tag = 1_000_000 + h * 10_000 + k;
        let run = host.start::<Job>(&id, (k % 3, tag)).await?;
        match run.result().await {
            Ok(out) => anyhow::ensure!(out == tag, "{id}: output {out}, not {tag}"),
            Err(Error::Failed(_)) if k % 3 == 1 => {}
            Err(e) => anyhow::bail!("result of {id}: {e}"),
        }
        run.delete().await?;
    }
    // Every other hot id ends with a run.
    if h % 2 == 0 {
        let run = host.start::<Job>(&id, (0, h)).await?;
        anyhow::ensure!(run.result().await? == h, "{id}: the last output");
    }
    Ok(())
}

/// What `info()` says of every id that has a run, once nothing moves.
async fn truth(host: &Host) -> anyhow::Result<BTreeMap<String, RunInfo>> {
    common::churn::settled(host, &universe(), LIMIT).await
}

/// The rows of a walk, by id, each exactly once and in order.
fn by_id(rows: Vec<RunInfo>, newest_first: bool, what: &str) -> BTreeMap<String, RunInfo> {
    for pair in rows.windows(2) {
        let a = (pair[0].created_at, &pair[0].run_id);
        let b = (pair[1].created_at, &pair[1].run_id);
        assert!(
            if newest_first { a > b } else { a < b },
            "{what}: {a:?} listed before {b:?} (newest first: {newest_first})"
        );
    }
    let n = rows.len();
    let map: BTreeMap<String, RunInfo> = rows.into_iter().map(|r| (r.run_id.clone(), r)).collect();
    assert_eq!(map.len(), n, "{what}: a run listed twice");
    map
}

/// The listed rows agree with the truth on every field the listing is about.
fn assert_same(
    what: &str,
    listed: &BTreeMap<String, RunInfo>,
    expected: &BTreeMap<&String, &RunInfo>,
) {
    let listed_ids: BTreeSet<&String> = listed.keys().collect();
    let expected_ids: BTreeSet<&String> = expected.keys().copied().collect();
    let extra: Vec<_> = listed_ids.difference(&expected_ids).take(5).collect();
    let missing: Vec<_> = expected_ids.difference(&listed_ids).take(5).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{what}: {} listed, {} expected; listed but not expected {extra:?}, expected but \
         not listed {missing:?}",
        listed_ids.len(),
        expected_ids.len()
    );
    for (id, row) in listed {
        let info = expected[id];
        assert_eq!(
            row.status.kind(),
            info.status.kind(),
            "{what}: {id}'s status"
        );
        assert_eq!(row.workflow, info.workflow, "{what}: {id}'s workflow");
        assert_eq!(row.parent, info.parent, "{what}: {id}'s parent");
        assert_eq!(row.created_at, info.created_at, "{what}: {id}'s creation");
    }
}

async fn check(host: &Host, truth: &BTreeMap<String, RunInfo>, when: &str) -> anyhow::Result<()> {
    let select = |keep: &dyn Fn(&RunInfo) -> bool| -> BTreeMap<&String, &RunInfo> {
        truth.iter().filter(|(_, i)| keep(i)).collect()
    };

    // Counts: one per run, by status.
    let tally = common::counts::tally(truth.values().map(|i| i.status.kind()));
    let counts = host.count().await?;
    assert_eq!(counts, tally, "{when}: counts against the runs' own status");

    // Everything, both orders, several page sizes; `runs()` too.
    let everything = select(&|_| true);
    for (limit, newest_first) in [(97, true), (1_000, false), (10_000, true), (13, false)] {
        let mut filter = RunFilter::default().limit(limit);
        filter.newest_first = newest_first;
        let what = format!("{when}: every run, {limit} a page, newest first {newest_first}");
        let rows = by_id(walk(host, filter).await?, newest_first, &what);
        assert_same(&what, &rows, &everything);
    }
    let runs: BTreeMap<String, RunInfo> = host
        .runs()
        .await?
        .into_iter()
        .map(|r| (r.run_id.clone(), r))
        .collect();
    assert_same(&format!("{when}: runs()"), &runs, &everything);

    // Each status alone, and some together.
    let mut status_sets: Vec<Vec<StatusKind>> = StatusKind::ALL.iter().map(|k| vec![*k]).collect();
    status_sets.push(vec![StatusKind::Completed, StatusKind::Failed]);
    status_sets.push(vec![
        StatusKind::Suspended,
        StatusKind::Cancelled,
        StatusKind::Running,
    ]);
    status_sets.push(StatusKind::ALL.to_vec());
    for (n, kinds) in status_sets.iter().enumerate() {
        let newest_first = n % 2 == 0;
        let mut filter = RunFilter::default()
            .status(kinds.iter().copied())
            .limit(1 + n * 37);
        filter.newest_first = newest_first;
        let what = format!("{when}: status {kinds:?}");
        let rows = by_id(walk(host, filter).await?, newest_first, &what);
        let expected = select(&|i| kinds.contains(&i.status.kind()));
        assert_same(&what, &rows, &expected);
        if kinds.len() == 1 {
            assert_eq!(
                rows.len() as u64,
                counts[&kinds[0]],
                "{what}: against count()"
            );
        }
    }

    // By workflow, alone and with a status.
    for workflow in ["job", "leaf"] {
        let what = format!("{when}: workflow {workflow}");
        let rows = by_id(
            walk(host, RunFilter::default().workflow(workflow).limit(251)).await?,
            true,
            &what,
        );
        assert_same(&what, &rows, &select(&|i| i.workflow == workflow));
        let what = format!("{when}: completed {workflow} runs");
        let rows = by_id(
            walk(
                host,
                RunFilter::default()
                    .workflow(workflow)
                    .status([StatusKind::Completed])
                    .limit(77)
                    .oldest_first(),
            )
            .await?,
            false,
            &what,
        );
        assert_same(
            &what,
            &rows,
            &select(&|i| i.workflow == workflow && i.status.kind() == StatusKind::Completed),
        );
    }

    // By parent: every id that is some run's parent, and a few that are not.
    let parents: BTreeSet<String> = truth.values().filter_map(|i| i.parent.clone()).collect();
    assert!(
        parents.len() > 100,
        "{when}: only {} parents",
        parents.len()
    );
    for (n, parent) in parents
        .iter()
        .cloned()
        .chain(["r00001".to_owned(), "nobody".to_owned()])
        .enumerate()
    {
        let newest_first = n % 2 == 0;
        let mut filter = RunFilter::default().parent(&parent).limit(1 + n % 4);
        filter.newest_first = newest_first;
        let what = format!("{when}: children of {parent}");
        let rows = by_id(walk(host, filter).await?, newest_first, &what);
        assert_same(
            &what,
            &rows,
            &select(&|i| i.parent.as_deref() == Some(parent.as_str())),
        );
    }

    // Creation-time windows: a cut at the median splits the runs in two.
    let mut times: Vec<SystemTime> = truth.values().map(|i| i.created_at).collect();
    times.sort();
    let mid = times[times.len() / 2];
    let before = by_id(
        walk(
            host,
            RunFilter::default().created(None, Some(mid)).limit(500),
        )
        .await?,
        true,
        "before the median",
    );
    let after = by_id(
        walk(
            host,
            RunFilter::default()
                .created(Some(mid), None)
                .limit(500)
                .oldest_first(),
        )
        .await?,
        false,
        "from the median",
    );
    assert_same(
        &format!("{when}: created before the median"),
        &before,
        &select(&|i| i.created_at < mid),
    );
    assert_same(
        &format!("{when}: created from the median"),
        &after,
        &select(&|i| i.created_at >= mid),
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_and_listings_match_the_runs_after_concurrent_churn_and_a_reopen()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;

    // Every run started at once, from 32 tasks.
    let starts = (0..32u32).map(|t| {
        let host = host.clone();
        tokio::spawn(async move {
            let starts = (t..RUNS).step_by(32).map(|i| {
                let host = &host;
                async move { host.start::<Job>(&run_id(i), (i % 6, i)).await }
            });
            try_join_all(starts).await.map(|h| h.len())
        })
    });
    let started: usize = common::within(LIMIT, "the starts", try_join_all(starts))
        .await??
        .into_iter()
        .map(|r| r.map_err(anyhow::Error::from))
        .sum::<anyhow::Result<usize>>()?;
    assert_eq!(started, RUNS as usize);

    // Then, all at once: waiting runs ended (some left waiting), one in five runs
    // deleted and started again, and the hot ids hammered.
    let mut work = Vec::new();
    for t in 0..32u32 {
        let host = host.clone();
        work.push(tokio::spawn(async move {
            let jobs = (t..RUNS).step_by(32).map(|i| churn_one(&host, i));
            try_join_all(jobs).await.map(|_| ())
        }));
    }
    for h in 0..HOT_IDS {
        let host = host.clone();
        work.push(tokio::spawn(async move { hammer(&host, h).await }));
    }
    for done in common::within(LIMIT, "the churn", try_join_all(work)).await?? {
        done?;
    }

    let before = truth(&host).await?;
    let kinds: BTreeSet<StatusKind> = before.values().map(|i| i.status.kind()).collect();
    for kind in [
        StatusKind::Suspended,
        StatusKind::Completed,
        StatusKind::Failed,
        StatusKind::Cancelled,
    ] {
        assert!(kinds.contains(&kind), "no {kind:?} run left: {kinds:?}");
    }
    // Deleted and not started again: gone.
    for i in (0..RUNS).step_by(10) {
        assert!(
            !before.contains_key(&run_id(i)),
            "{} still there",
            run_id(i)
        );
    }
    check(&host, &before, "after the churn").await?;

    host.shutdown().await?;
    let host = open(dir.path()).await?;
    let after = truth(&host).await?;
    let a: BTreeMap<_, _> = before
        .iter()
        .map(|(id, i)| (id, (i.status.kind(), i.created_at, &i.workflow, &i.parent)))
        .collect();
    let b: BTreeMap<_, _> = after
        .iter()
        .map(|(id, i)| (id, (i.status.kind(), i.created_at, &i.workflow, &i.parent)))
        .collect();
    assert_eq!(a, b, "the runs are not the same after a reopen");
    check(&host, &after, "after a reopen").await?;
    host.shutdown().await?;
    Ok(())
}

/// Starts `n` `Job` children in one join (so their first writes share batches
/// with each other and with the parent's), modes 0, 1, 2 and 5 in turn; returns
/// how many completed.
struct Brood;
impl Workflow for Brood {
    const NAME: &'static str = "brood";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let calls = (0..n).map(|j| {
            // Ids in another order than the calls.
            let id = format!("{}/k{:03}", ctx.run_id(), (j * 7) % n);
            let mode = [0, 1, 2, 5][(j % 4) as usize];
            let ctx = ctx.clone();
            async move { ctx.child::<Job>(&id, (mode, j)).await }
        });
        Ok(join_all(calls).await.iter().filter(|r| r.is_ok()).count() as u32)
    }
}

/// Parents on a frozen clock start hundreds of children each in one burst: every
/// child shares its parent's creation millisecond, so the listing orders them by
/// id alone, and a page cut falls between runs of one millisecond. Each parent's
/// children are listed once each, in order, with their status, through cursors of
/// every size in both orders, alone and with a status filter; the counts agree.
/// Children deleted and started again (by the host, so without a parent) move to
/// the next millisecond and out of their old parent's listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn children_started_in_one_burst_list_under_their_parent_in_order() -> anyhow::Result<()> {
    const PARENTS: u32 = 6;
    const KIDS: u32 = 250;
    let dir = tempfile::tempdir()?;
    let clock =
        reel::testing::TestClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .register(Job)
        .register(Brood)
        .build()
        .await?;
    let parents = (0..PARENTS).map(|p| {
        let host = host.clone();
        tokio::spawn(async move {
            let run = host.start::<Brood>(&format!("brood-{p}"), KIDS).await?;
            anyhow::Ok(run.result().await?)
        })
    });
    for done in common::within(LIMIT, "the parents", try_join_all(parents)).await?? {
        // Modes 0 and 2 complete: half of them.
        assert_eq!(done?, KIDS / 2);
    }

    let kid_ids = |p: u32| -> Vec<String> {
        (0..KIDS)
            .map(|j| format!("brood-{p}/k{j:03}"))
            .collect::<Vec<_>>()
    };
    let mut truth: BTreeMap<String, RunInfo> = BTreeMap::new();
    for p in 0..PARENTS {
        for id in kid_ids(p).into_iter().chain([format!("brood-{p}")]) {
            truth.insert(id.clone(), host.run(&id).info().await?);
        }
    }
    let check_parent =
        async |host: &Host, truth: &BTreeMap<String, RunInfo>, p: u32| -> anyhow::Result<()> {
            let parent = format!("brood-{p}");
            let mine: Vec<&RunInfo> = truth
                .values()
                .filter(|i| i.parent.as_deref() == Some(parent.as_str()))
                .collect();
            for (limit, newest_first) in [(1, true), (7, false), (250, true), (249, false)] {
                let mut filter = RunFilter::default().parent(&parent).limit(limit);
                filter.newest_first = newest_first;
                let what = format!("children of {parent}, {limit} a page");
                let rows = by_id(walk(host, filter).await?, newest_first, &what);
                let expected: BTreeMap<&String, &RunInfo> =
                    mine.iter().map(|i| (&i.run_id, *i)).collect();
                assert_same(&what, &rows, &expected);
            }
            for kind in [StatusKind::Completed, StatusKind::Failed] {
                let what = format!("{kind:?} children of {parent}");
                let rows = by_id(
                    walk(
                        host,
                        RunFilter::default()
                            .parent(&parent)
                            .status([kind])
                            .limit(9)
                            .oldest_first(),
                    )
                    .await?,
                    false,
                    &what,
                );
                let expected: BTreeMap<&String, &RunInfo> = mine
                    .iter()
                    .filter(|i| i.status.kind() == kind)
                    .map(|i| (&i.run_id, *i))
                    .collect();
                assert_same(&what, &rows, &expected);
            }
            Ok(())
        };
    for p in 0..PARENTS {
        check_parent(&host, &truth, p).await?;
    }
    let tally = common::counts::tally(truth.values().map(|i| i.status.kind()));
    assert_eq!(host.count().await?, tally);
    assert_eq!(tally[&StatusKind::Failed], u64::from(PARENTS * KIDS / 2));

    // One child in four is deleted and started again by the host, from many
    // tasks at once.
    let again = (0..PARENTS).map(|p| {
        let host = host.clone();
        let ids = kid_ids(p);
        tokio::spawn(async move {
            for id in ids.iter().step_by(4) {
                host.run(id).delete().await?;
                let run = host.start::<Job>(id, (0, 1)).await?;
                run.result().await?;
            }
            anyhow::Ok(())
        })
    });
    for done in common::within(LIMIT, "the restarts", try_join_all(again)).await?? {
        done?;
    }
    let mut after: BTreeMap<String, RunInfo> = BTreeMap::new();
    for p in 0..PARENTS {
        for id in kid_ids(p).into_iter().chain([format!("brood-{p}")]) {
            let info = host.run(&id).info().await?;
            if let Some(old) = truth.get(&id)
                && id.contains("/k")
                && info.parent.is_none()
            {
                assert!(
                    info.created_at > old.created_at,
                    "{id} created again no later"
                );
            }
            after.insert(id, info);
        }
    }
    assert_eq!(
        after.values().filter(|i| i.parent.is_none()).count() as u32,
        PARENTS + PARENTS * KIDS.div_ceil(4)
    );
    for p in 0..PARENTS {
        check_parent(&host, &after, p).await?;
    }
    let everything: BTreeMap<&String, &RunInfo> = after.iter().collect();
    for (limit, newest_first) in [(11, true), (1000, false)] {
        let mut filter = RunFilter::default().limit(limit);
        filter.newest_first = newest_first;
        let rows = by_id(walk(&host, filter).await?, newest_first, "every run");
        assert_same("every run after the restarts", &rows, &everything);
    }
    let tally = common::counts::tally(after.values().map(|i| i.status.kind()));
    assert_eq!(host.count().await?, tally);
    host.shutdown().await?;
    Ok(())
}
