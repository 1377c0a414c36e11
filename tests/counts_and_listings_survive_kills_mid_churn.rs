//! The status counts are kept in the writer's batches, beside the metadata and
//! listing entries they follow. A child process churns many runs from many tasks
//! (starts in bursts, ends of every kind, deletes and new starts under the same
//! ids) and is killed (SIGKILL) at random moments, several times over one store.
//! Then a host opens the store, lets every recovered run settle, and `count()`,
//! the listings and each run's `info()` all agree: every run listed once, no
//! deleted run listed; again after one more reopen.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::churn::Job;
use common::listing::walk;
use futures::future::join_all;
use reel::{Host, RunFilter, RunStatus, StatusKind};

const IDS: u32 = 600;
const TASKS: u32 = 24;
const ROUNDS: u32 = 3;
const CHILD_ENV: &str = "REEL_COUNTS_KILL9_CHILD_DIR";

fn open(dir: &Path) -> impl Future<Output = reel::Result<Host>> {
    Host::builder()
        .path(dir.join("store"))
        .register(Job)
        .build()
}

fn run_id(i: u32) -> String {
    format!("k{i:04}")
}

/// Prints a marker the parent counts to choose when to kill.
fn op() {
    println!("op");
}

/// One task's share of the churn over its ids, several rounds: start (a new run,
/// or the one there), let it end (a waiting run is signalled or cancelled, or,
/// one in four, left waiting), and delete one in three. Idempotent enough to run
/// again from the top after a kill: every answer the documentation gives for a
/// run in any state is taken.
async fn churn(host: &Host, t: u32) {
    for r in 0..ROUNDS {
        let starts = (t..IDS).step_by(TASKS as usize).map(|i| async move {
            let mode = (i + r) % 4;
            let started = host.start::<Job>(&run_id(i), (mode, i)).await;
            op();
            started.map(|_| i)
        });
        let ids: Vec<u32> = join_all(starts)
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        for i in ids {
            let id = run_id(i);
            let run = host.run(&id);
            if let Ok(RunStatus::Suspended { .. }) = run.wait_until_suspended().await {
                match (i / 4 + r) % 4 {
                    0 => {}
                    1 => {
                        let _ = run.cancel("churn").await;
                    }
                    _ => {
                        let _ = run.signal("go", &i, &format!("go-{r}")).await;
                        let _ = run.result::<u32>().await;
                    }
                }
                op();
            }
            if (i + r) % 3 == 0 {
                let _ = run.result::<u32>().await;
                let _ = run.delete().await;
                op();
            }
        }
    }
}

async fn drive(host: &Host) {
    let tasks = (0..TASKS).map(|t| churn(host, t));
    join_all(tasks).await;
}

/// Once no run is running any more (recovered runs go on; polled with a
/// deadline), the runs' own status against `count()` and the listings.
async fn check(host: &Host, when: &str) -> BTreeMap<String, StatusKind> {
    let ids: Vec<String> = (0..IDS).map(run_id).collect();
    let truth: BTreeMap<String, StatusKind> =
        common::churn::settled(host, &ids, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{when}: {e}"))
            .into_iter()
            .map(|(id, info)| (id, info.status.kind()))
            .collect();
    let tally = common::counts::tally(truth.values().copied());
    let counts = host.count().await.expect("count");
    assert_eq!(counts, tally, "{when}: count() against the runs");
    for (limit, newest_first) in [(37, true), (500, false)] {
        let mut filter = RunFilter::default().limit(limit);
        filter.newest_first = newest_first;
        let rows = walk(host, filter).await.expect("list");
        let listed: BTreeMap<String, StatusKind> = rows
            .iter()
            .map(|r| (r.run_id.clone(), r.status.kind()))
            .collect();
        assert_eq!(listed.len(), rows.len(), "{when}: a run listed twice");
        assert_eq!(listed, truth, "{when}: the listing against the runs");
    }
    for kind in StatusKind::ALL {
        let rows = walk(host, RunFilter::default().status([kind]).limit(64))
            .await
            .expect("list");
        assert_eq!(
            rows.len() as u64,
            counts[&kind],
            "{when}: {kind:?} runs listed against the count"
        );
        assert!(rows.iter().all(|r| truth.get(&r.run_id) == Some(&kind)));
    }
    truth
}

#[test]
fn counts_and_listings_survive_kills_mid_churn() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        common::kill::drive_child(open(Path::new(&dir)), drive);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let kills = common::kill::Rounds {
        test: "counts_and_listings_survive_kills_mid_churn",
        env: CHILD_ENV,
        rounds: 8,
        marker: "op",
        done: "all-done",
        min: 20,
        spread: 2_000,
    }
    .run(dir.path());
    assert!(kills > 0, "the child was never killed");

    let rt = common::kill::runtime();
    rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        let first = check(&host, "after the kills").await;
        assert!(first.len() > 100, "only {} runs", first.len());
        for kind in [StatusKind::Completed, StatusKind::Failed] {
            assert!(first.values().any(|k| *k == kind), "no {kind:?} run");
        }
        host.shutdown().await.expect("shutdown");
        let host = open(dir.path()).await.expect("reopen");
        let second = check(&host, "after one more reopen").await;
        assert_eq!(first, second, "the runs changed across a reopen");
        host.shutdown().await.expect("shutdown");
    });
}
