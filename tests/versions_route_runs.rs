//! Runs resume on the version they started with; a version no longer registered is
//! reported as `VersionMismatch`, never run with other code.

mod common;

use reel::{Ctx, Error, RunStatus, Workflow};

struct V1;
impl Workflow for V1 {
    const NAME: &'static str = "greet";
    const VERSION: u32 = 1;
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, name: String) -> reel::Result<String> {
        let _: () = ctx.wait_for_signal("go").await?;
        Ok(format!("v1 {name}"))
    }
}

struct V2;
impl Workflow for V2 {
    const NAME: &'static str = "greet";
    const VERSION: u32 = 2;
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, name: String) -> reel::Result<String> {
        let _: () = ctx.wait_for_signal("go").await?;
        Ok(format!("v2 {name}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_stay_on_their_version() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), V1).await?;
    host.start::<V1>("old", "ann".into())
        .await?
        .wait_until_suspended()
        .await?;
    assert!(matches!(
        host.start::<V2>("new", "bob".into()).await,
        Err(Error::VersionMismatch { version: 2, .. })
    ));
    host.shutdown().await?;

    // Only V2 registered: the V1 run is parked, not run with V2 code.
    let host = common::hosts::open(dir.path(), V2).await?;
    let old = host.handle::<V2>("old");
    old.signal("go", &(), "go-1").await?;
    assert_eq!(
        old.result().await,
        Err(Error::VersionMismatch {
            workflow: "greet".into(),
            version: 1
        })
    );
    assert!(matches!(old.status().await?, RunStatus::Parked { .. }));
    host.shutdown().await?;

    // Both registered: each run on its own version.
    let host = common::hosts::open_two(dir.path(), V1, V2).await?;
    let new = host.start::<V2>("new", "bob".into()).await?;
    new.signal("go", &(), "go-2").await?;
    assert_eq!(new.result().await?, "v2 bob");
    assert_eq!(host.handle::<V1>("old").result().await?, "v1 ann");
    let runs = host.runs().await?;
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed));
    assert_eq!(
        runs.iter().find(|r| r.run_id == "old").map(|r| r.version),
        Some(1)
    );
    host.shutdown().await?;
    Ok(())
}
