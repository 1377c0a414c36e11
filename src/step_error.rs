//! [`StepError`]: what a step body returns when it fails, retryable or not.

use std::fmt::Display;

/// The error of a failed step attempt, saying whether another attempt can help.
///
/// A step body may return any error that implements [`Display`] (a `String`, an
/// `std::io::Error`, an `anyhow::Error`, ...): it converts into a *retryable*
/// `StepError`, retried under the step's [`RetryPolicy`](crate::RetryPolicy). A body
/// that knows a retry cannot help (a declined card, a validation error) returns
/// [`StepError::non_retryable`]: the failure is recorded as final at once and the
/// step returns [`Error::Step`](crate::Error::Step), however many attempts the
/// policy allows. A panicking body is always a retryable failure.
///
/// `StepError` deliberately does not implement [`Display`] itself, so that every
/// displayable error converts into it: `?` works on them inside a body whose error
/// type is `StepError`.
///
/// # Examples
/// ```
/// use reel::{Ctx, StepError, Workflow};
///
/// struct Charge;
/// impl Workflow for Charge {
///     const NAME: &'static str = "charge";
///     type Input = u64;
///     type Output = String;
///     async fn run(&self, ctx: Ctx, cents: u64) -> reel::Result<String> {
///         ctx.step("charge", |_| async move {
///             if cents == 0 {
///                 // Final at once: no retry.
///                 return Err(StepError::non_retryable("nothing to charge"));
///             }
///             // Any displayable error converts, as a retryable one.
///             let n: u64 = "42".parse::<u64>()?;
///             Ok(format!("charged {}", cents + n))
///         })
///         .await
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError {
    pub(crate) message: String,
    pub(crate) retryable: bool,
}

impl StepError {
    /// A failure another attempt may cure (a timeout, a 503): retried under the
    /// step's retry policy.
    pub fn retryable(message: impl Display) -> StepError {
        StepError {
            message: message.to_string(),
            retryable: true,
        }
    }

    /// A failure no retry can cure (a declined card, a malformed request): recorded
    /// as the step's final failure at once.
    pub fn non_retryable(message: impl Display) -> StepError {
        StepError {
            message: message.to_string(),
            retryable: false,
        }
    }

    /// The error text, as recorded in the log.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

/// Every displayable error is a retryable step failure.
impl<E: Display> From<E> for StepError {
    fn from(e: E) -> StepError {
        StepError::retryable(e)
    }
}
