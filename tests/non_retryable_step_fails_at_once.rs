//! A step body that returns `StepError::non_retryable` fails for good at once,
//! whatever its retry policy allows: one attempt, one `StepFailed` with no
//! `retry_at`, `Error::Step` for the handler (and from `result()` when the handler
//! passes it on). A handler that catches the error goes on, and across a host restart
//! the step is not run again (the replay re-raises the recorded failure).
//!
//! Why it fails without the fix: every `Err` of a body was retried until the policy's
//! attempts were exhausted, so a declined card was charged five times.

mod common;

use std::time::Duration;

use common::{Counter, within};
use reel::{AttemptError, Ctx, Error, Event, Failure, Host, RetryPolicy, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(5);

fn five_attempts() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(5)
        .with_backoff(Duration::from_millis(1), Duration::from_millis(1))
}

/// Charges a card that is declined; passes the step's error on with `?`.
struct Declined {
    attempts: Counter,
}

impl Workflow for Declined {
    const NAME: &'static str = "declined";
    type Input = ();
    type Output = u32;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step_with("charge", five_attempts(), |_| async {
            self.attempts.bump();
            // A retryable error converts with `?` in a body whose error type is
            // StepError; it is not taken here.
            let cents: u32 = "1999".parse::<u32>()?;
            if cents > 0 {
                return Err(StepError::non_retryable("card declined"));
            }
            Ok(cents)
        })
        .await
    }
}

/// Catches the declined charge and goes on to wait for a signal.
struct CatchesDecline {
    attempts: Counter,
}

impl Workflow for CatchesDecline {
    const NAME: &'static str = "catches-decline";
    type Input = ();
    type Output = String;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let charged = ctx
            .step_with("charge", five_attempts(), |_| async {
                self.attempts.bump();
                Err::<u32, _>(StepError::non_retryable("card declined"))
            })
            .await;
        let note = match charged {
            Err(Error::Step { step, message }) => format!("{step}: {message}"),
            other => format!("unexpected {other:?}"),
        };
        let next: String = ctx.wait_for_signal("next").await?;
        Ok(format!("{note}, then {next}"))
    }
}

fn step_failures(events: &[Event]) -> Vec<(u32, String, Option<u64>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::StepFailed {
                attempt,
                error,
                retry_at,
                ..
            } => Some((*attempt, error.clone(), *retry_at)),
            _ => None,
        })
        .collect()
}

async fn open(dir: &std::path::Path, attempts: &Counter) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Declined {
            attempts: attempts.clone(),
        })
        .register(CatchesDecline {
            attempts: attempts.clone(),
        })
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_retryable_error_is_final_after_one_attempt() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = open(dir.path(), &attempts).await?;
    let run = host.start::<Declined>("d-1", ()).await?;
    let err = within(LIMIT, "the run's result", run.result())
        .await?
        .expect_err("the charge is declined");
    assert_eq!(
        err,
        Error::Step {
            step: "charge".into(),
            message: "card declined".into(),
        }
    );
    assert_eq!(
        attempts.get(),
        1,
        "the policy allows 5, the body said no retry"
    );
    let events = run.events().await?;
    assert_eq!(
        step_failures(&events),
        vec![(1, "card declined".to_owned(), None)]
    );
    assert_eq!(
        events.last(),
        Some(&Event::RunFailed {
            error: Failure::Step {
                step: "charge".into(),
                message: "card declined".into(),
                attempts: vec![AttemptError {
                    attempt: 1,
                    error: "card declined".into(),
                }],
            }
        })
    );
    host.shutdown().await?;

    // After a restart the failed run reports the same error and runs nothing.
    let host = open(dir.path(), &attempts).await?;
    let run = host.handle::<Declined>("d-1");
    assert_eq!(run.result().await, Err(err));
    assert_eq!(attempts.get(), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_catches_the_error_and_the_step_never_runs_again() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = open(dir.path(), &attempts).await?;
    let run = host.start::<CatchesDecline>("c-1", ()).await?;
    within(LIMIT, "the wait for `next`", run.wait_until_suspended()).await??;
    assert_eq!(attempts.get(), 1);
    assert_eq!(
        step_failures(&run.events().await?),
        vec![(1, "card declined".to_owned(), None)]
    );
    host.shutdown().await?;

    // The new host replays the handler when the signal wakes the run: the step's
    // recorded failure is raised again, its body does not run.
    let host = open(dir.path(), &attempts).await?;
    let run = host.handle::<CatchesDecline>("c-1");
    run.signal("next", "ship anyway", "next-1").await?;
    assert_eq!(
        within(LIMIT, "the run's result", run.result()).await??,
        "charge: card declined, then ship anyway"
    );
    assert_eq!(attempts.get(), 1, "the step ran once across the restart");
    assert_eq!(step_failures(&run.events().await?).len(), 1);
    host.shutdown().await?;
    Ok(())
}
