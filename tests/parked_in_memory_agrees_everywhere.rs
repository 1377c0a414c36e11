//! A run parked while the store refuses the park write is held parked in memory
//! (README: "Parked runs report `RunStatus::Parked`"). Every view of the host must
//! then tell the same story: `status()`, `runs()`, `list()` with and without a
//! status filter, and `count()`. An operator who filters on `parked` (the
//! inspector's status tab) must find it, and a filter on the state it was in must
//! not list it as parked.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::within;
use reel::{Ctx, FjallStore, Host, RunFilter, RunStatus, StatusKind, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);

/// v1: a step, then a wait for `go`.
struct ShapeV1;
impl Workflow for ShapeV1 {
    const NAME: &'static str = "shape";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("a", |_| async { Ok::<_, String>(1u32) }).await?;
        ctx.wait_for_signal("go").await
    }
}

/// The same name and version, with the first step renamed: a run of v1 diverges.
struct ShapeChanged;
impl Workflow for ShapeChanged {
    const NAME: &'static str = "shape";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("renamed", |_| async { Ok::<_, String>(1u32) })
            .await?;
        ctx.wait_for_signal("go").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_park_held_in_memory_is_reported_alike_by_every_view() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), ShapeV1).await?;
    let run = host.start::<ShapeV1>("held", ()).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    // New code that diverges, over a store that lets the signal land and then
    // refuses every write of this run: the divergence park stays in memory.
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .register(ShapeChanged)
        .build()
        .await?;
    let run = host.handle::<ShapeChanged>("held");
    faults.inject(
        Fault::fail(Op::Submit)
            .for_run("held")
            .after(1)
            .until_healed()
            .message("No space left on device"),
    );
    run.signal("go", &7u32, "g").await?;
    let status = within(LIMIT, "the park", async {
        loop {
            let s = run.status().await?;
            if matches!(s, RunStatus::Parked { .. }) {
                return anyhow::Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    assert!(format!("{status:?}").contains("diverged"), "{status:?}");

    let in_runs = host
        .runs()
        .await?
        .into_iter()
        .find(|r| r.run_id == "held")
        .expect("listed by runs()");
    assert!(
        matches!(in_runs.status, RunStatus::Parked { .. }),
        "runs(): {:?}",
        in_runs.status
    );
    let all = host.list(RunFilter::default()).await?.items;
    let listed = all.iter().find(|r| r.run_id == "held").expect("listed");
    assert!(
        matches!(listed.status, RunStatus::Parked { .. }),
        "list(): {:?}",
        listed.status
    );

    let parked = host
        .list(RunFilter::default().status([StatusKind::Parked]))
        .await?
        .items;
    let others = host
        .list(RunFilter::default().status([StatusKind::Running, StatusKind::Suspended]))
        .await?
        .items;
    let counts = host.count().await?;
    let parked_count = counts.get(&StatusKind::Parked).copied().unwrap_or(0);
    let problems: Vec<String> = [
        (!parked.iter().any(|r| r.run_id == "held"))
            .then(|| "list(status = parked) leaves it out".to_owned()),
        others.iter().find(|r| r.run_id == "held").map(|r| {
            format!(
                "list(status = running|suspended) lists it as {:?}",
                r.status
            )
        }),
        (parked_count != 1).then(|| format!("count() says {counts:?}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(
        problems.is_empty(),
        "status() says parked, but: {problems:#?}"
    );

    faults.heal();
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_and_retry_of_a_run_parked_in_memory() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), ShapeV1).await?;
    let run = host.start::<ShapeV1>("held", ()).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let store: Arc<dyn reel::Store> = faults.clone();
    let host = Host::builder()
        .store(store)
        .register(ShapeChanged)
        .build()
        .await?;
    let run = host.handle::<ShapeChanged>("held");
    faults.inject(
        Fault::fail(Op::Submit)
            .for_run("held")
            .after(1)
            .until_healed(),
    );
    run.signal("go", &7u32, "g").await?;
    // result() answers with the parking error, as for a park on disk.
    let got = within(LIMIT, "result() of the parked run", run.result()).await?;
    assert!(
        matches!(got, Err(reel::Error::ReplayDivergence { .. })),
        "{got:?}"
    );
    // Deleting it is refused (it has not finished); the store heals; retry
    // parks it again (the code still diverges), on disk this time.
    assert!(matches!(
        run.delete().await,
        Err(reel::Error::InvalidState { .. })
    ));
    faults.heal();
    run.retry().await?;
    within(LIMIT, "the park on disk", async {
        loop {
            if host
                .count()
                .await?
                .get(&StatusKind::Parked)
                .copied()
                .unwrap_or(0)
                == 1
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    assert!(matches!(run.status().await?, RunStatus::Parked { .. }));
    host.shutdown().await?;

    // The old code finishes it.
    let host = common::hosts::open(dir.path(), ShapeV1).await?;
    assert_eq!(
        within(LIMIT, "the run", host.handle::<ShapeV1>("held").result()).await??,
        7
    );
    host.shutdown().await?;
    Ok(())
}
