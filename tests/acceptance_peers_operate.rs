//! Acceptance: workflow-management scenarios ported from DBOS's own suite
//! (dbos-inc/dbos-transact-py, `tests/test_workflow_management.py`) onto
//! reel's operations (README "Observability", operating runs): DBOS's
//! cancel-then-resume, which reel spells as a fork cut before the cancel
//! request, and DBOS's operations on ids that name no workflow. Real stores in
//! temp dirs.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, Host, RunFilter, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

/// How often each step body really ran, by `<run id>/<step>`.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, u32>>>);

impl Tally {
    fn bump(&self, key: &str) {
        *self
            .0
            .lock()
            .expect("tally")
            .entry(key.to_owned())
            .or_default() += 1;
    }
    fn get(&self, key: &str) -> u32 {
        self.0.lock().expect("tally").get(key).copied().unwrap_or(0)
    }
}

/// DBOS's `simple_workflow`: step one, a wait (DBOS blocks on an event), step
/// two, then returns its input.
#[derive(Clone, Default)]
struct Simple {
    tally: Tally,
}

impl Workflow for Simple {
    const NAME: &'static str = "simple";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, x: u32) -> reel::Result<u32> {
        let run = ctx.run_id().to_owned();
        ctx.step("one", |_| async {
            self.tally.bump(&format!("{run}/one"));
            Ok::<_, String>(())
        })
        .await?;
        ctx.wait_for_signal::<()>("go").await?;
        ctx.step("two", |_| async {
            self.tally.bump(&format!("{run}/two"));
            Ok::<_, String>(())
        })
        .await?;
        Ok(x)
    }
}

/// Ports DBOS `tests/test_workflow_management.py::test_cancel_resume`: a run
/// cancelled after step one stops before step two; DBOS then resumes it. reel's
/// cancel is final, and the README's way to go on is a fork: cut at the cancel
/// request, the fork replays step one (not run again), waits where the original
/// waited, and completes with step two run once; the original stays cancelled.
/// A cut after the cancel request is refused and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_goes_on_as_a_fork_cut_before_its_cancel() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let simple = Simple::default();
    let host = Host::builder()
        .path(dir.path().join("store"))
        .register(simple.clone())
        .build()
        .await?;
    let run = host.start::<Simple>("wf", 5).await?;
    within(LIMIT, "wf waits", run.wait_until_suspended()).await??;
    within(LIMIT, "cancel", run.cancel("operator")).await??;
    assert!(matches!(run.result().await, Err(Error::Cancelled(_))));
    assert_eq!(simple.tally.get("wf/one"), 1);
    assert_eq!(simple.tally.get("wf/two"), 0);

    let records = run.records().await?;
    let cancel = records
        .iter()
        .find(|r| matches!(r.event, Event::CancelRequested { .. }))
        .map(|r| r.seq)
        .ok_or_else(|| anyhow::anyhow!("no cancel request in {records:?}"))?;
    match host.fork("wf", cancel + 1, "wf-late").await {
        Err(Error::InvalidCut { .. }) => {}
        other => panic!("a cut after the cancel request: {other:?}"),
    }
    assert!(matches!(
        host.run("wf-late").status().await,
        Err(Error::UnknownRun(_))
    ));

    let fork = host.fork("wf", cancel, "wf-resumed").await?;
    within(LIMIT, "the fork waits", fork.wait_until_suspended()).await??;
    fork.signal("go", &(), "go").await?;
    assert_eq!(
        within(LIMIT, "the fork ends", fork.result::<u32>()).await??,
        5
    );
    assert_eq!(simple.tally.get("wf-resumed/one"), 0, "step one ran again");
    assert_eq!(simple.tally.get("wf-resumed/two"), 1);
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert!(matches!(run.result().await, Err(Error::Cancelled(_))));
    host.shutdown().await?;
    Ok(())
}

/// Ports DBOS `tests/test_workflow_management.py::test_resume_nonexistent_workflow`
/// and `::test_fork_nonexistent_workflow`: every operation on an id no run has
/// is `UnknownRun`, and none of them creates a run (listing and counts stay
/// empty), also the fork's new id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_on_a_nonexistent_run_are_unknown_and_create_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path().join("store"))
        .register(Simple::default())
        .build()
        .await?;
    let ghost = host.run("ghost");
    let unknown = |what: &str, r: reel::Result<()>| {
        assert!(
            matches!(&r, Err(Error::UnknownRun(id)) if id == "ghost"),
            "{what}: {r:?}"
        );
    };
    unknown("pause", ghost.pause().await);
    unknown("resume", ghost.resume().await);
    unknown("retry", ghost.retry().await);
    unknown("delete", ghost.delete().await);
    unknown("cancel", ghost.cancel("x").await);
    unknown("terminate", ghost.terminate("x").await);
    unknown("signal", ghost.signal("go", &(), "s").await);
    assert!(matches!(ghost.status().await, Err(Error::UnknownRun(_))));
    assert!(matches!(ghost.events().await, Err(Error::UnknownRun(_))));
    match host.fork("ghost", 1, "ghost-fork").await {
        Err(Error::UnknownRun(id)) => assert_eq!(id, "ghost"),
        other => panic!("fork of a nonexistent run: {other:?}"),
    }
    assert!(matches!(
        host.run("ghost-fork").status().await,
        Err(Error::UnknownRun(_))
    ));
    let page = host.list(RunFilter::default().limit(10)).await?;
    assert!(page.items.is_empty(), "{:?}", page.items);
    assert_eq!(host.count().await?.values().sum::<u64>(), 0);
    host.shutdown().await?;
    Ok(())
}
