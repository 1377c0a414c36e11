//! README, "Cancellation and deadlines": cleanup goes through `ctx.shielded()`;
//! "A shielded step's body runs to the end ...; an attempt of it that fails
//! after the request is not retried" (and `StepCtx::cancelled`'s doc: "an
//! attempt that fails after the request is not retried"). A cancelled run's
//! compensation step that fails is recorded once, with no retry, and the run
//! ends cancelled: it does not sit out the backoffs of its retry policy.
//!
//! Two shapes: a shielded cleanup step called after the handler saw the
//! request, and a shielded step whose body was running when the request came
//! and fails after it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Counter, Gate, within};
use reel::{Ctx, Error, Event, Host, RetryPolicy, Workflow};

const LIMIT: Duration = Duration::from_secs(15);

/// Each attempt of a step that fails after the request is counted; the policy
/// would allow 5 attempts, 1 ms apart (real clock), so a retry cannot hide.
fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(1),
        multiplier: 1.0,
    }
}

/// Input `false`: waits for `go`; when cancelled, runs the shielded step
/// `compensate`, which fails. Input `true`: runs the shielded step `work`,
/// whose first attempt waits for the cancel and then fails.
struct Compensating {
    attempts: Counter,
    started: Arc<Gate>,
}

impl Workflow for Compensating {
    const NAME: &'static str = "compensating";
    type Input = bool;
    type Output = u32;
    async fn run(&self, ctx: Ctx, in_body: bool) -> reel::Result<u32> {
        let attempts = self.attempts.clone();
        let started = self.started.clone();
        if in_body {
            return ctx
                .shielded()
                .step_with("work", policy(), move |s| {
                    let (attempts, started) = (attempts.clone(), started.clone());
                    async move {
                        attempts.bump();
                        started.open();
                        if s.attempt() == 1 {
                            let reason = s.cancelled().await;
                            return Err(format!("gave up: {reason}"));
                        }
                        Err::<u32, _>(format!("attempt {} failed", s.attempt()))
                    }
                })
                .await;
        }
        match ctx.wait_for_signal::<u32>("go").await {
            Err(Error::Cancelled(reason)) => {
                let r = ctx
                    .shielded()
                    .step_with("compensate", policy(), move |s| {
                        let attempts = attempts.clone();
                        async move {
                            attempts.bump();
                            Err::<u32, _>(format!("attempt {} failed", s.attempt()))
                        }
                    })
                    .await;
                assert!(matches!(r, Err(Error::Step { .. })), "{r:?}");
                Err(Error::Cancelled(reason))
            }
            other => other,
        }
    }
}

async fn check(in_body: bool, step: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let started = Arc::new(Gate::new());
    let host = Host::builder()
        .path(dir.path())
        .register(Compensating {
            attempts: attempts.clone(),
            started: started.clone(),
        })
        .build()
        .await?;
    let run = host.start::<Compensating>("c", in_body).await?;
    if in_body {
        within(LIMIT, "the body to start", started.wait()).await?;
    } else {
        run.wait_until_suspended().await?;
    }
    within(LIMIT, "the cancel", run.cancel("stop")).await??;
    assert_eq!(run.result().await, Err(Error::Cancelled("stop".into())));
    let events = run.events().await?;
    let failed: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::StepFailed { id, .. } if id == step))
        .collect();
    assert_eq!(
        (attempts.get(), failed.len()),
        (1, 1),
        "the shielded step `{step}` was retried after the cancel request: {failed:?}"
    );
    assert!(
        matches!(failed[0], Event::StepFailed { retry_at: None, .. }),
        "{:?}",
        failed[0]
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shielded_cleanup_step_failing_after_the_request_is_not_retried() -> anyhow::Result<()> {
    check(false, "compensate").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shielded_body_failing_after_the_request_is_not_retried() -> anyhow::Result<()> {
    check(true, "work").await
}
