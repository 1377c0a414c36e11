//! Operations on a run waiting out a step's retry backoff: its retry timer comes
//! due while it is paused but no attempt runs until it is resumed; a fork made
//! during the backoff runs from its cut; a terminate during the backoff means no
//! further attempt. No step body runs again once its result is recorded.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::log_checks::ends_cancelled;
use common::within;
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Step `flaky` fails its first attempt and waits an hour (on the test clock)
/// before the second, then waits for signal `go`.
struct Flaky {
    attempts: Attempts,
}

/// Attempts per run id.
#[derive(Clone, Default)]
struct Attempts(Arc<std::sync::Mutex<std::collections::BTreeMap<String, u32>>>);

impl Attempts {
    fn bump(&self, run: &str) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(run.to_owned()).or_default() += 1;
    }
    fn of(&self, run: &str) -> u32 {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.get(run).copied().unwrap_or(0)
    }
}

impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = reel::RetryPolicy::default()
            .with_max_attempts(2)
            .with_backoff(Duration::from_secs(3600), Duration::from_secs(3600));
        let run = ctx.run_id().to_owned();
        let v = ctx
            .step_with("flaky", policy, |s| {
                let first = s.attempt() == 1;
                self.attempts.bump(&run);
                async move {
                    if first {
                        Err("first attempt fails".to_owned())
                    } else {
                        Ok(5u32)
                    }
                }
            })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(v + go)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_during_a_retry_backoff() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock =
        reel::testing::TestClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let attempts = Attempts::default();
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .register(Flaky {
            attempts: attempts.clone(),
        })
        .build()
        .await?;
    let failed = |e: &[Event]| e.iter().any(|e| matches!(e, Event::StepFailed { .. }));

    // Paused in the backoff; the retry comes due while paused; resumed, the
    // second attempt runs once.
    let run = host.start::<Flaky>("b0", ()).await?;
    common::until_log(&run, LIMIT, "the failed attempt", failed).await?;
    run.pause().await?;
    // A cut right after the failed attempt is inside the step's attempts.
    let end = run.records().await?.len() as u64;
    let forked = host.fork("b0", end, "b0-fork").await;
    assert!(
        matches!(forked, Ok(_) | Err(Error::InvalidCut { .. })),
        "{forked:?}"
    );
    within(LIMIT, "the retry timer to be armed", async {
        while clock.next_due().is_none() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    clock.advance(Duration::from_secs(3601));
    run.signal("go", &1u32, "g").await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    assert_eq!(attempts.of("b0"), 1, "an attempt ran while paused");
    run.resume().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 6);
    assert_eq!(attempts.of("b0"), 2);
    if let Ok(fork) = forked {
        clock.advance(Duration::from_secs(3601));
        fork.signal("go", &2u32, "g").await?;
        assert_eq!(within(LIMIT, "the fork", fork.result::<u32>()).await??, 7);
        assert_eq!(attempts.of("b0-fork"), 1);
    }

    // Terminated in the backoff: no attempt after, the timer never wakes it.
    let run = host.start::<Flaky>("b1", ()).await?;
    common::until_log(&run, LIMIT, "the failed attempt", failed).await?;
    within(LIMIT, "terminate", run.terminate("stop")).await??;
    clock.advance(Duration::from_secs(7200));
    let out = within(LIMIT, "the result", run.result()).await?;
    assert!(
        matches!(out, Err(Error::Cancelled(ref r)) if r == "stop"),
        "{out:?}"
    );
    ends_cancelled(&run.events().await?);
    assert_eq!(attempts.of("b1"), 1);
    host.shutdown().await?;
    Ok(())
}
