//! On a frozen test clock, runs of one id deleted and started again (by a start, a
//! fork, a parent's child call, from many tasks at once) get strictly increasing
//! creation times, and the listings by creation time stay ordered and complete
//! through it. README, "A reused id is another run": a run started under the id of
//! a run its host deleted is created at least a millisecond after that run, also
//! when the clock has not moved, so two runs of one id never share a creation
//! time. Two edges of that promise: a start that began while the old run still
//! stood and wrote after its delete, and a start after thousands of other deletes.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::listing::{assert_sorted, walk};
use common::within;
use common::workflows::{Quick, Tagged};
use futures::future::try_join_all;
use reel::testing::TestClock;
use reel::{Ctx, Error, FjallStore, Host, RunFilter, StatusKind, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(60);
const T0: Duration = Duration::from_secs(1_800_000_000);

fn frozen() -> TestClock {
    TestClock::new(SystemTime::UNIX_EPOCH + T0)
}

/// Calls its child `kid` (a `Quick` with the parent's input) and returns its output.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.child::<Quick>("kid", n).await
    }
}

async fn host_on(dir: &std::path::Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Quick)
        .register(Tagged)
        .register(Parent)
        .build()
        .await
}

fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_id_deleted_and_started_again_hundreds_of_times_lists_once_in_order()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = frozen();
    let host = host_on(dir.path(), &clock).await?;
    let first = host.start::<Quick>("anchor-first", 0).await?;
    within(LIMIT, "the first anchor", first.result()).await??;

    let mut created: Vec<SystemTime> = Vec::new();
    for i in 0..300u32 {
        let run = host.start::<Quick>("solo", i).await?;
        assert_eq!(within(LIMIT, "the solo run", run.result()).await??, i);
        let info = run.info().await?;
        if let Some(last) = created.last() {
            assert!(
                info.created_at > *last,
                "loop {i}: the run of `solo` was created at {:?}, the deleted one at {last:?}",
                info.created_at
            );
        }
        created.push(info.created_at);

        // The id is listed once, with the new run's creation time.
        let rows = walk(&host, RunFilter::default().limit(1)).await?;
        let solo: Vec<_> = rows.iter().filter(|r| r.run_id == "solo").collect();
        assert_eq!(
            solo.len(),
            1,
            "loop {i}: `solo` listed {} times",
            solo.len()
        );
        assert_eq!(solo[0].created_at, info.created_at);
        assert_eq!(rows.len(), 2, "loop {i}: {rows:?}");
        // A window of exactly its millisecond holds it and nothing else.
        let window = walk(
            &host,
            RunFilter::default()
                .created(Some(info.created_at), Some(info.created_at + ms(1)))
                .limit(3),
        )
        .await?;
        let window_ids: Vec<_> = window.iter().map(|r| r.run_id.as_str()).collect();
        if i == 0 {
            // Created in the frozen millisecond, beside the anchor.
            assert_eq!(window_ids, ["solo", "anchor-first"]);
        } else {
            assert_eq!(window_ids, ["solo"], "loop {i}");
        }
        let counts = host.count().await?;
        assert_eq!(counts[&StatusKind::Completed], 2, "loop {i}: {counts:?}");
        assert_eq!(counts.values().sum::<u64>(), 2, "loop {i}: {counts:?}");
        if i + 1 < 300 {
            run.delete().await?;
        }
    }

    // The clock moves on: later runs are created at the clock's time again.
    clock.advance(Duration::from_secs(10));
    let last = host.start::<Quick>("anchor-last", 0).await?;
    within(LIMIT, "the last anchor", last.result()).await??;
    let last_created = last.info().await?.created_at;
    assert_eq!(
        last_created,
        SystemTime::UNIX_EPOCH + T0 + Duration::from_secs(10)
    );
    for newest_first in [true, false] {
        let mut filter = RunFilter::default().limit(2);
        filter.newest_first = newest_first;
        let rows = walk(&host, filter).await?;
        assert_sorted(&rows, newest_first);
        let mut ids: Vec<_> = rows.iter().map(|r| r.run_id.as_str()).collect();
        if newest_first {
            ids.reverse();
        }
        assert_eq!(ids, ["anchor-first", "solo", "anchor-last"]);
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_ids_reused_from_many_tasks_keep_increasing_creation_times() -> anyhow::Result<()> {
    const IDS: u32 = 48;
    const LOOPS: u32 = 25;
    let dir = tempfile::tempdir()?;
    let clock = frozen();
    let host = host_on(dir.path(), &clock).await?;
    let tasks = (0..IDS).map(|id| {
        let host = host.clone();
        tokio::spawn(async move {
            let run_id = format!("id-{id:02}");
            let mut created = Vec::new();
            for i in 0..LOOPS {
                let n = id * 1000 + i;
                let run = host.start::<Quick>(&run_id, n).await?;
                anyhow::ensure!(
                    run.result().await? == n,
                    "{run_id} loop {i}: another output"
                );
                created.push(run.info().await?.created_at);
                // Ids divisible by 4 end deleted; the others keep their last run.
                if i + 1 < LOOPS || id % 4 == 0 {
                    run.delete().await?;
                }
            }
            anyhow::Ok((id, run_id, created))
        })
    });
    let all = within(LIMIT, "the loops", try_join_all(tasks)).await??;
    let mut kept = BTreeMap::new();
    for done in all {
        let (id, run_id, created) = done?;
        for pair in created.windows(2) {
            assert!(
                pair[1] > pair[0],
                "{run_id}: runs of one id created at {created:?}"
            );
        }
        if id % 4 != 0 {
            kept.insert(run_id, *created.last().expect("runs"));
        }
    }
    assert_eq!(kept.len(), 36);

    for newest_first in [true, false] {
        for limit in [1, 5, 36, 1000] {
            let mut filter = RunFilter::default().limit(limit);
            filter.newest_first = newest_first;
            let rows = walk(&host, filter).await?;
            assert_sorted(&rows, newest_first);
            let listed: BTreeMap<String, SystemTime> = rows
                .iter()
                .map(|r| (r.run_id.clone(), r.created_at))
                .collect();
            assert_eq!(listed.len(), rows.len(), "a run listed twice");
            assert_eq!(listed, kept, "limit {limit}, newest first {newest_first}");
        }
    }
    let completed = walk(
        &host,
        RunFilter::default()
            .status([StatusKind::Completed])
            .limit(7)
            .oldest_first(),
    )
    .await?;
    assert_eq!(completed.len(), kept.len());
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Completed], kept.len() as u64);
    assert_eq!(counts.values().sum::<u64>(), kept.len() as u64);

    // Counts and listings are the same after a reopen.
    host.shutdown().await?;
    let host = host_on(dir.path(), &clock).await?;
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Completed], kept.len() as u64);
    assert_eq!(counts.values().sum::<u64>(), kept.len() as u64);
    let rows = walk(&host, RunFilter::default().limit(10).oldest_first()).await?;
    assert_sorted(&rows, false);
    assert_eq!(
        rows.iter()
            .map(|r| (r.run_id.clone(), r.created_at))
            .collect::<BTreeMap<_, _>>(),
        kept
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_and_a_child_under_a_deleted_id_are_created_later() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = frozen();
    let host = host_on(dir.path(), &clock).await?;

    // A fork onto the id of a deleted run.
    let source = host.start::<Quick>("source", 7).await?;
    within(LIMIT, "the source", source.result()).await??;
    let target = host.start::<Quick>("target", 1).await?;
    within(LIMIT, "the target", target.result()).await??;
    let old_target = target.info().await?.created_at;
    target.delete().await?;
    let forked = host.fork("source", 1, "target").await?;
    assert_eq!(within(LIMIT, "the fork", forked.result::<u32>()).await??, 7);
    let new_target = forked.info().await?.created_at;
    assert!(
        new_target > old_target,
        "a fork onto a deleted id was created at {new_target:?}, the deleted run at {old_target:?}"
    );

    // A parent's child call onto the id of a deleted run, several times over.
    let mut kid_created = Vec::new();
    for i in 0..5u32 {
        let parent_id = format!("parent-{i}");
        let parent = host.start::<Parent>(&parent_id, i).await?;
        assert_eq!(within(LIMIT, "the parent", parent.result()).await??, i);
        let kid = host.run("kid").info().await?;
        assert_eq!(kid.parent.as_deref(), Some(parent_id.as_str()));
        kid_created.push(kid.created_at);
        let children = walk(&host, RunFilter::default().parent(&parent_id)).await?;
        assert_eq!(children.len(), 1, "{parent_id}'s children: {children:?}");
        assert_eq!(children[0].created_at, kid.created_at);
        host.run("kid").delete().await?;
    }
    for pair in kid_created.windows(2) {
        assert!(pair[1] > pair[0], "child runs of one id: {kid_created:?}");
    }
    // The deleted kid is listed under no parent any more.
    for i in 0..5u32 {
        let children = walk(&host, RunFilter::default().parent(format!("parent-{i}"))).await?;
        assert!(children.is_empty(), "parent-{i}: {children:?}");
    }
    host.shutdown().await?;
    Ok(())
}

/// A host over a fault-injecting store on a frozen clock.
async fn fault_host(dir: &std::path::Path) -> anyhow::Result<(Host, Arc<FaultStore>)> {
    let faults = FaultStore::new(FjallStore::open(dir)?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .clock(frozen())
        .register(Quick)
        .register(Tagged)
        .build()
        .await?;
    Ok((host, faults))
}

/// Starts `reused` (a `Tagged` run with `extra` more steps) while the ended run of
/// that id is deleted: the start's read of the id (made after it chose the new
/// run's creation time, before its first write) is held until the delete is done.
/// Returns the handle of the new run.
async fn start_across_a_delete(
    host: &Host,
    faults: &FaultStore,
    extra: u32,
) -> anyhow::Result<reel::RunHandle<Tagged>> {
    let (hold, gate) = Fault::hold(Op::GetRun);
    faults.inject(hold.for_run("reused"));
    let start = tokio::spawn({
        let host = host.clone();
        async move { host.start::<Tagged>("reused", ("new".into(), extra)).await }
    });
    within(LIMIT, "the start's read of the id", gate.wait_arrived()).await?;
    host.run("reused").delete().await?;
    gate.release();
    let new = within(LIMIT, "the start", start).await???;
    Ok(new)
}

/// A start of an id that began while the old run stood and writes after that run
/// was deleted creates a new run; it must still be created after the deleted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_racing_the_delete_of_its_id_is_created_later() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, faults) = fault_host(dir.path()).await?;
    let old = host.start::<Tagged>("reused", ("old".into(), 0)).await?;
    within(LIMIT, "the old run's wait", old.wait_until_suspended()).await??;
    old.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "the old run", old.result()).await??, "old");
    let old_created = old.info().await?.created_at;

    let new = start_across_a_delete(&host, &faults, 0).await?;
    let now = new.info().await?;
    // The start wrote a new run (the old run's log is gone with it).
    let first = new.events().await?.into_iter().next();
    assert!(
        matches!(first, Some(reel::Event::RunStarted { .. })),
        "the new run's log starts with {first:?}"
    );
    assert!(
        now.created_at > old_created,
        "a run started under the id of a run the host deleted was created at {:?}, \
         the same time as the deleted run ({old_created:?})",
        now.created_at
    );
    host.shutdown().await?;
    Ok(())
}

/// What it costs when the start above shares the deleted run's creation time: a
/// slow watcher of the old run goes on into the new run's records
/// (`runs_of_one_id_within_one_millisecond_are_told_apart.rs` without the race).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_watcher_sees_none_of_a_run_whose_start_raced_the_delete() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, faults) = fault_host(dir.path()).await?;
    common::watch::a_slow_watcher_sees_none_of_the_next_run(&host, LIMIT, async |_| {
        start_across_a_delete(&host, &faults, 6).await
    })
    .await?;
    host.shutdown().await?;
    Ok(())
}

/// The host keeps the creation times of the runs it deleted, a bounded number of
/// them; a run started again after thousands of other deletes on a frozen clock
/// must still be created after the deleted run of its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_after_thousands_of_other_deletes_is_created_later() -> anyhow::Result<()> {
    const OTHERS: u32 = 4_200;
    let dir = tempfile::tempdir()?;
    let clock = frozen();
    let host = host_on(dir.path(), &clock).await?;
    let old = host.start::<Quick>("reused", 1).await?;
    within(LIMIT, "the old run", old.result()).await??;
    let old_created = old.info().await?.created_at;
    old.delete().await?;

    // Thousands of other runs end and are deleted, from many tasks at once.
    let chunks = (0..16u32).map(|t| {
        let host = host.clone();
        tokio::spawn(async move {
            for i in (t..OTHERS).step_by(16) {
                let run = host.start::<Quick>(&format!("other-{i:05}"), i).await?;
                run.result().await?;
                run.delete().await?;
            }
            anyhow::Ok(())
        })
    });
    for done in within(LIMIT, "the other runs", try_join_all(chunks)).await?? {
        done?;
    }
    assert_eq!(host.count().await?.values().sum::<u64>(), 0);

    let new = host.start::<Quick>("reused", 2).await?;
    assert_eq!(within(LIMIT, "the new run", new.result()).await??, 2);
    let new_created = new.info().await?.created_at;
    assert!(
        new_created > old_created,
        "a run started under the id of a run the host deleted ({OTHERS} deletes of other \
         ids in between, clock frozen) was created at {new_created:?}, the deleted run at \
         {old_created:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Not a creation-time check: an unknown id stays unknown to every reader while
/// its runs come and go (nothing of a deleted run is left to `info`, `status`,
/// `result`, the listings or the counts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_id_is_unknown_everywhere_between_its_runs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = frozen();
    let host = host_on(dir.path(), &clock).await?;
    let mut seen = HashSet::new();
    for i in 0..20u32 {
        let run = host.start::<Quick>("gone", i).await?;
        assert_eq!(within(LIMIT, "the run", run.result()).await??, i);
        assert!(seen.insert(run.info().await?.created_at));
        run.delete().await?;
        assert!(matches!(run.info().await, Err(Error::UnknownRun(_))));
        assert!(matches!(run.status().await, Err(Error::UnknownRun(_))));
        assert!(matches!(run.result().await, Err(Error::UnknownRun(_))));
        assert!(walk(&host, RunFilter::default()).await?.is_empty());
        assert_eq!(host.count().await?.values().sum::<u64>(), 0);
    }
    host.shutdown().await?;
    Ok(())
}
