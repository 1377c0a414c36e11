//! Two operators fork the same run onto the same new id at once (a double click,
//! a retried script): one fork makes the run, the other is refused with
//! `RunExists` (a 409), never a storage error; the new run runs once, and the
//! counts hold one more run.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// A step, a signal wait, a step.
struct Two {
    second: Arc<AtomicU32>,
}
impl Workflow for Two {
    const NAME: &'static str = "two";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let a: u32 = ctx
            .step("first", move |_| async move { Ok::<_, String>(n) })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        let counter = self.second.clone();
        ctx.step("second", move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(a + go) }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_forks_onto_one_id_wins_the_other_is_told_it_exists() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let second = Arc::new(AtomicU32::new(0));
    let host = Host::builder()
        .path(dir.path())
        .register(Two {
            second: second.clone(),
        })
        .build()
        .await?;
    let orig = host.start::<Two>("orig", 1).await?;
    orig.signal("go", &2u32, "g").await?;
    assert_eq!(within(LIMIT, "orig", orig.result()).await??, 3);
    let end = orig.records().await?.len() as u64 - 1;
    const ROUNDS: u32 = 20;
    for round in 0..ROUNDS {
        let id = format!("fork{round}");
        let (a, b) = within(LIMIT, "two forks", async {
            tokio::join!(host.fork("orig", end, &id), host.fork("orig", end, &id))
        })
        .await?;
        let wins = [&a, &b].iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {a:?} / {b:?}");
        for r in [&a, &b] {
            assert!(
                matches!(r, Ok(_) | Err(Error::RunExists { .. })),
                "round {round}: {r:?}"
            );
        }
        let out: u32 = within(LIMIT, "the fork", host.run(&id).result()).await??;
        assert_eq!(out, 3);
    }
    // The forks replayed the second step's recorded result: never ran it again.
    assert_eq!(second.load(Ordering::SeqCst), 1);
    let counts = host.count().await?;
    assert_eq!(
        counts[&StatusKind::Completed],
        u64::from(ROUNDS) + 1,
        "{counts:?}"
    );
    host.shutdown().await?;
    Ok(())
}
