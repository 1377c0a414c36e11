//! The [`Workflow`] trait and [`RetryPolicy`].

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{Ctx, Result};

/// How often and how patiently a failing step is retried. The waits between
/// attempts are durable timers: a crash during a backoff loses nothing.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use reel::RetryPolicy;
///
/// // Retry until the step succeeds (or fails with `StepError::non_retryable`),
/// // waiting 1 s, 2 s, 4 s, ... and at most a minute between attempts.
/// let forever = RetryPolicy::unlimited()
///     .with_backoff(Duration::from_secs(1), Duration::from_secs(60));
/// assert_eq!(forever.backoff(10), Duration::from_secs(60));
///
/// let five = RetryPolicy::default().with_max_attempts(5).with_multiplier(3.0);
/// assert_eq!(five.backoff(2), Duration::from_millis(300));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Total attempts, the first included (1 = no retry; 0 counts as 1).
    /// [`RetryPolicy::UNLIMITED`] is never exhausted.
    pub max_attempts: u32,
    /// Wait before the second attempt.
    pub initial_backoff: Duration,
    /// Upper bound of any wait.
    pub max_backoff: Duration,
    /// Factor applied to the wait after each failed attempt (below 1 counts as 1).
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
    /// The `max_attempts` that is never exhausted: the step is retried until it
    /// succeeds or its body returns [`StepError::non_retryable`](crate::StepError).
    /// (It is `u32::MAX`; attempt numbers never overflow. At one attempt per
    /// millisecond, the last attempt would come after 49 days of failures.)
    pub const UNLIMITED: u32 = u32::MAX;

    /// No retries: the first failure is final.
    pub fn no_retry() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The default backoff with [`RetryPolicy::UNLIMITED`] attempts: never exhausted.
    pub fn unlimited() -> RetryPolicy {
        RetryPolicy {
            max_attempts: RetryPolicy::UNLIMITED,
            ..RetryPolicy::default()
        }
    }

    /// This policy with `max_attempts` total attempts (0 counts as 1).
    pub fn with_max_attempts(self, max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            ..self
        }
    }

    /// This policy waiting `initial` before the second attempt and never more than
    /// `max` between two attempts.
    pub fn with_backoff(self, initial: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            initial_backoff: initial,
            max_backoff: max,
            ..self
        }
    }

    /// This policy multiplying the wait by `multiplier` after each failed attempt.
    pub fn with_multiplier(self, multiplier: f64) -> RetryPolicy {
        RetryPolicy { multiplier, ..self }
    }

    /// Whether failed attempt `attempt` (1-based) is followed by another one.
    pub(crate) fn retries_after(&self, attempt: u32) -> bool {
        attempt < self.max_attempts
    }

    /// The wait after failed attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        // Past `i32::MAX` attempts the exponent saturates (a wrapped, negative one
        // would shrink the wait).
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let factor = self.multiplier.max(1.0).powi(exponent);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_round_trips_through_serde() {
        // A policy kept in a config file (JSON) or in a run's input (MessagePack).
        for policy in [
            RetryPolicy::default(),
            RetryPolicy::no_retry(),
            RetryPolicy::unlimited()
                .with_backoff(Duration::from_millis(250), Duration::from_secs(90))
                .with_multiplier(1.5),
        ] {
            let json = serde_json::to_string(&policy).expect("to json");
            assert_eq!(
                serde_json::from_str::<RetryPolicy>(&json).expect("from json"),
                policy
            );
            let packed = rmp_serde::to_vec(&policy).expect("to msgpack");
            assert_eq!(
                rmp_serde::from_slice::<RetryPolicy>(&packed).expect("from msgpack"),
                policy
            );
        }
    }

    #[test]
    fn attempt_limits_hold_at_the_edges() {
        let unlimited = RetryPolicy::unlimited();
        assert!(unlimited.retries_after(1));
        assert!(unlimited.retries_after(u32::MAX - 1));
        // The counter stops there instead of overflowing.
        assert!(!unlimited.retries_after(u32::MAX));
        // 0 counts as 1: no retry.
        assert!(!RetryPolicy::default().with_max_attempts(0).retries_after(1));
        assert!(!RetryPolicy::no_retry().retries_after(1));
    }

    #[test]
    fn backoff_never_shrinks_or_panics_for_huge_attempts() {
        let p = RetryPolicy::unlimited();
        assert_eq!(p.backoff(u32::MAX), p.max_backoff);
        assert_eq!(p.backoff(1 << 31), p.max_backoff);
        assert_eq!(p.backoff(1), p.initial_backoff);
        assert_eq!(p.backoff(0), p.initial_backoff);
    }
}
