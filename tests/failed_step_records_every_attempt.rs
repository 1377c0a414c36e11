//! A step that fails all its attempts keeps every attempt's error: the run that
//! passes the step's `Error::Step` on with `?` records them, in order, in the
//! `Failure::Step` of its `RunFailed` event, while `Error::Step` itself carries the
//! last attempt's message. The attempts are collected from the log, so attempts made
//! before a host restart count as well as those made after it.
//!
//! Why it fails without the fix: the recorded failure held only the last attempt's
//! text; why the first attempts failed was lost (a timeout before a 500, say).

mod common;

use std::time::Duration;

use common::{Counter, Gate, until_log, within};
use reel::{AttemptError, Ctx, Error, Event, Failure, RetryPolicy, StepCtx, Workflow};

const LIMIT: Duration = Duration::from_secs(5);

/// Opened once the first host is gone: attempt 2 hangs until then.
static SECOND_HOST: Gate = Gate::new();

/// Three attempts, each failing with its own error.
struct Fails {
    attempts: Counter,
    /// Attempt 2 waits for [`SECOND_HOST`], so a restart falls between attempts.
    restart_mid_way: bool,
}

impl Workflow for Fails {
    const NAME: &'static str = "fails";
    type Input = ();
    type Output = ();

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let policy = RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        ctx.step_with("call", policy, |s: StepCtx| async move {
            self.attempts.bump();
            if s.attempt() == 2 && self.restart_mid_way {
                SECOND_HOST.wait().await;
            }
            let error = match s.attempt() {
                1 => "timed out",
                2 => "503 unavailable",
                _ => "500 internal error",
            };
            // Any displayable error (an io::Error here) is a retryable failure.
            Err::<(), _>(std::io::Error::other(error))
        })
        .await
    }
}

fn every_attempt() -> Vec<AttemptError> {
    [
        (1, "timed out"),
        (2, "503 unavailable"),
        (3, "500 internal error"),
    ]
    .into_iter()
    .map(|(attempt, error)| AttemptError {
        attempt,
        error: error.into(),
    })
    .collect()
}

fn expected_failure() -> Failure {
    Failure::Step {
        step: "call".into(),
        message: "500 internal error".into(),
        attempts: every_attempt(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failed_attempts_are_recorded_in_the_run_failure() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = common::hosts::open(
        dir.path(),
        Fails {
            attempts: attempts.clone(),
            restart_mid_way: false,
        },
    )
    .await?;
    let run = host.start::<Fails>("f-1", ()).await?;
    assert_eq!(
        within(LIMIT, "the run's result", run.result()).await?,
        Err(Error::Step {
            step: "call".into(),
            message: "500 internal error".into(),
        })
    );
    assert_eq!(attempts.get(), 3);
    let events = run.events().await?;
    assert_eq!(
        events.last(),
        Some(&Event::RunFailed {
            error: expected_failure()
        })
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_before_a_restart_are_recorded_too() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let open = || {
        common::hosts::open(
            dir.path(),
            Fails {
                attempts: attempts.clone(),
                restart_mid_way: true,
            },
        )
    };
    let host = open().await?;
    let run = host.start::<Fails>("f-2", ()).await?;
    // Attempt 1 failed; attempt 2 has begun and hangs: stop the host there.
    until_log(&run, LIMIT, "attempt 2 to begin", |events| {
        events
            .iter()
            .any(|e| matches!(e, Event::StepStarted { attempt: 2, .. }))
    })
    .await?;
    host.shutdown().await?;

    SECOND_HOST.open();
    let host = open().await?;
    let run = host.handle::<Fails>("f-2");
    assert!(matches!(
        within(LIMIT, "the run's result", run.result()).await?,
        Err(Error::Step { .. })
    ));
    let events = run.events().await?;
    assert_eq!(
        events.last(),
        Some(&Event::RunFailed {
            error: expected_failure()
        })
    );
    host.shutdown().await?;
    Ok(())
}
