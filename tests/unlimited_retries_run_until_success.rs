//! `RetryPolicy::unlimited()` is never exhausted: a step whose body fails six times
//! succeeds on attempt 7, each failure recorded with its `retry_at`.
//!
//! Why it fails without the fix: unlimited attempts had to be spelled
//! `max_attempts: u32::MAX` by hand, with no promise that attempt numbers or
//! backoffs stay sane at the limit.

mod common;

use std::time::Duration;

use common::{Counter, within};
use reel::{Ctx, Event, RetryPolicy, Workflow};

struct SucceedsOnSeven {
    attempts: Counter,
}

impl Workflow for SucceedsOnSeven {
    const NAME: &'static str = "succeeds-on-seven";
    type Input = ();
    type Output = u32;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::unlimited()
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        ctx.step_with("flaky", policy, |s| async move {
            self.attempts.bump();
            if s.attempt() < 7 {
                Err(format!("attempt {} failed", s.attempt()))
            } else {
                Ok(s.attempt())
            }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_policy_retries_until_the_body_succeeds() -> anyhow::Result<()> {
    assert_eq!(
        RetryPolicy::unlimited().max_attempts,
        RetryPolicy::UNLIMITED
    );
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = common::hosts::open(
        dir.path(),
        SucceedsOnSeven {
            attempts: attempts.clone(),
        },
    )
    .await?;
    let run = host.start::<SucceedsOnSeven>("u-1", ()).await?;
    assert_eq!(
        within(Duration::from_secs(5), "the run's result", run.result()).await??,
        7
    );
    assert_eq!(attempts.get(), 7);
    let failures: Vec<(u32, bool)> = run
        .events()
        .await?
        .iter()
        .filter_map(|e| match e {
            Event::StepFailed {
                attempt, retry_at, ..
            } => Some((*attempt, retry_at.is_some())),
            _ => None,
        })
        .collect();
    assert_eq!(failures, (1..=6).map(|a| (a, true)).collect::<Vec<_>>());
    host.shutdown().await?;
    Ok(())
}
