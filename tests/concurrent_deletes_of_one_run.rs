//! Two operators delete the same finished run at once (two clicks in the
//! inspector, a retention pass and a script): one delete wins, the other is told
//! the run is gone (`UnknownRun`, a 404), never a storage error (a 500); the run
//! is gone once, its count goes down once, and its id can be used again.

mod common;

use std::time::Duration;

use common::within;
use common::workflows::Quick;
use reel::{Error, Host, StatusKind};

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_losing_delete_is_told_the_run_is_gone() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Quick)
        .build()
        .await?;
    const ROUNDS: u32 = 30;
    let mut outcomes = Vec::new();
    for round in 0..ROUNDS {
        let id = format!("r{round}");
        let h = host.start::<Quick>(&id, round).await?;
        within(LIMIT, "the run", h.result()).await??;
        let (one, two) = (host.run(&id), host.run(&id));
        let (a, b) = within(LIMIT, "two deletes", async {
            tokio::join!(one.delete(), two.delete())
        })
        .await?;
        for r in [&a, &b] {
            assert!(
                matches!(r, Ok(()) | Err(Error::UnknownRun(_))),
                "round {round}: a delete answered {r:?}"
            );
        }
        assert!(a.is_ok() || b.is_ok(), "round {round}: neither delete won");
        outcomes.push((a.is_ok(), b.is_ok()));
        assert!(matches!(
            host.run(&id).status().await,
            Err(Error::UnknownRun(_))
        ));
    }
    let counts = host.count().await?;
    assert_eq!(counts[&StatusKind::Completed], 0, "{counts:?}");
    // Ids come back.
    let again = host.start::<Quick>("r0", 99).await?;
    assert_eq!(within(LIMIT, "reuse", again.result()).await??, 99);
    assert_eq!(host.count().await?[&StatusKind::Completed], 1);
    host.shutdown().await?;
    Ok(())
}
