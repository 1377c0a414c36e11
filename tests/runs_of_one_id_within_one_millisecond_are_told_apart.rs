//! Runs of one id are told apart by their creation time (a wait or a watch keeps
//! to the run it began on; a delete removes only the run it checked). A run
//! started under the id of a run this host deleted is created at least a
//! millisecond after it, also when the clock has not moved since (a frozen test
//! clock, or a delete and a start within one millisecond), so two runs of one id
//! never share a creation time.

mod common;

use std::time::{Duration, SystemTime};

use common::within;
use common::workflows::Tagged;
use reel::testing::TestClock;

const LIMIT: Duration = Duration::from_secs(20);

const T0: Duration = Duration::from_secs(1_800_000_000);

fn frozen() -> TestClock {
    TestClock::new(SystemTime::UNIX_EPOCH + T0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_started_again_under_a_deleted_id_are_created_later() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = frozen();
    let host = common::hosts::open_on(dir.path(), &clock, Tagged).await?;
    let mut created = Vec::new();
    for i in 0..4u32 {
        let run = host
            .start::<Tagged>("reused", (format!("run {i}"), 0))
            .await?;
        run.signal("go", &i, "g").await?;
        within(LIMIT, "the run", run.result()).await??;
        created.push(host.run("reused").info().await?.created_at);
        run.delete().await?;
    }
    // Another id is not held back by them: created at the clock's time.
    let other = host.start::<Tagged>("other", ("other".into(), 0)).await?;
    assert_eq!(other.info().await?.created_at, SystemTime::UNIX_EPOCH + T0);
    host.shutdown().await?;
    assert_eq!(created[0], SystemTime::UNIX_EPOCH + T0);
    for pair in created.windows(2) {
        assert!(
            pair[1] > pair[0],
            "a run of a reused id was created no later than the deleted one: {created:?}"
        );
    }
    Ok(())
}

/// `watch_across_delete_and_reuse_never_mixes_runs.rs`'s slow watcher, with the
/// clock frozen: the old run and the new one are started in the same
/// millisecond.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_on_a_frozen_clock_sees_none_of_the_next_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = frozen();
    let host = common::hosts::open_on(dir.path(), &clock, Tagged).await?;
    common::watch::a_slow_watcher_sees_none_of_the_next_run(&host, LIMIT, async |old| {
        common::watch::delete_then_start(&host, old).await
    })
    .await?;
    host.shutdown().await?;
    Ok(())
}
