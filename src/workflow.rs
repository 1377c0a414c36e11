//! The [`Workflow`] trait and [`RetryPolicy`].

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{Ctx, Result};

/// How often and how patiently a failing step is retried. The waits between
/// attempts are durable timers: a crash during a backoff loses nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Total attempts, the first included (1 = no retry).
    pub max_attempts: u32,
    /// Wait before the second attempt.
    pub initial_backoff: Duration,
    /// Upper bound of any wait.
    pub max_backoff: Duration,
    /// Factor applied to the wait after each failed attempt.
    pub multiplier: f64,
}

impl Default for RetryPolicy {
    /// 3 attempts, 100 ms then 200 ms, capped at 10 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
        }
    }
}

impl RetryPolicy {
    /// No retries: the first failure is final.
    pub fn no_retry() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The wait after failed attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = self
            .multiplier
            .max(1.0)
            .powi(attempt.saturating_sub(1) as i32);
        let wait = (self.initial_backoff.as_secs_f64() * factor)
            .min(self.max_backoff.as_secs_f64())
            .max(0.0);
        // Too long to represent (or NaN): the longest wait there is, never a panic.
        Duration::try_from_secs_f64(wait).unwrap_or(self.max_backoff)
    }
}

/// A workflow definition: a handler that is replayed from the top on every wake-up.
///
/// The handler must be deterministic given its input and what the [`Ctx`] returns:
/// do I/O in [`Ctx::step`], take time and randomness from [`Ctx::now`],
/// [`Ctx::uuid`] and [`Ctx::random_u64`], and wait with [`Ctx::sleep`] and
/// [`Ctx::wait_for_signal`].
///
/// # Examples
/// ```
/// use reel::{Ctx, Workflow};
///
/// struct Greet;
/// impl Workflow for Greet {
///     const NAME: &'static str = "greet";
///     type Input = String;
///     type Output = String;
///     async fn run(&self, ctx: Ctx, name: String) -> reel::Result<String> {
///         let greeting = ctx.step("compose", |_| async { Ok::<_, String>(format!("hello {name}")) }).await?;
///         Ok(greeting)
///     }
/// }
/// ```
pub trait Workflow: Send + Sync + 'static {
    /// The workflow's name, recorded with every run.
    const NAME: &'static str;
    /// The version recorded at start; a run resumes only on the same version.
    const VERSION: u32 = 1;
    /// Input, encoded as MessagePack in the log.
    type Input: Serialize + DeserializeOwned + Send + 'static;
    /// Output, encoded as MessagePack in the log.
    type Output: Serialize + DeserializeOwned + Send + 'static;

    /// The handler.
    fn run(
        &self,
        ctx: Ctx,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Output>> + Send;

    /// Default retry policy of every step of this workflow.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
    }
}
