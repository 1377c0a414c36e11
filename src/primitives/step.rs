//! Steps: a body with side effects, run at least once and never again once its
//! result is recorded.
//!
//! A step is opened when it is called (`StepStarted`, attempt 1). Its body runs only
//! once replay has caught up with the recorded log: a step whose attempt was
//! abandoned live (its future dropped when it lost a race) is dropped again at the
//! same point of the replay, before its body could start. The body's result is
//! recorded (`StepCompleted`, fsynced, or `StepFailed`) and reaches the handler when
//! the driver walks that event, like any recorded result. On a host sharing its
//! store, a body starts only while the host's leases surely hold.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::Poll;

use futures::FutureExt;
use futures::future::Either;
use reel_actors::{panic_message, retry_timer_id};
use reel_storage::Event;
use serde::{Serialize, de::DeserializeOwned};
use tracing::Instrument;

use crate::ctx::{SlotWait, StepCtx, encode, idempotency_key, millis};
use crate::replay::{Kind, Opened, StepPlan};
use crate::slots::{Key, Resolution, WaitInfo};
use crate::{Ctx, Error, Result, RetryPolicy, StepError};

/// The longest step name: a step's retry timers are named after its id, and a
/// timer id is part of a store key ([`reel_storage::MAX_TIMER_ID_BYTES`]).
pub const MAX_STEP_NAME_BYTES: usize = 16 * 1024;

/// How often a body waiting for its host's leases to be renewed looks again.
const LEASE_RECHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// How one attempt of the body ended.
enum Attempt {
    /// The value, encoded for the log.
    Value(reel_storage::Payload),
    /// The error text; `final_` when it must not be retried.
    Error { message: String, final_: bool },
}

impl Ctx {
    /// Runs a step with the workflow's retry policy. The body runs at least once and
    /// never again once its result is recorded (fsynced before this returns). A
    /// failing or panicking body is retried after durable backoff timers; when the
    /// attempts are exhausted, or the body returns [`StepError::non_retryable`], the
    /// failure is recorded and returned as [`Error::Step`] (also on every replay).
    /// Every attempt's error is kept: a run that fails with the step's error records
    /// them in [`Failure::Step`](crate::Failure::Step)`::attempts`.
    ///
    /// The body's error type is anything that converts into [`StepError`]: any
    /// [`Display`](std::fmt::Display) error (retryable), or `StepError` itself.
    ///
    /// Ids: the step's name; the k-th call with a name already used gets `name#k`.
    ///
    /// The body runs inline, inside the handler's own future, so it may *borrow*
    /// what the handler holds: a non-`move` closure uses a local `Arc` (or a field
    /// of the workflow through `self`) without cloning it, neither for the closure
    /// nor for each attempt's future. Use `move` only for small `Copy` values.
    ///
    /// # Examples
    /// ```
    /// use std::sync::Arc;
    /// use reel::{Ctx, Host, Workflow};
    ///
    /// struct Db;
    /// impl Db {
    ///     async fn get(&self, key: &str) -> std::io::Result<String> {
    ///         Ok(format!("value of {key}"))
    ///     }
    /// }
    ///
    /// struct Lookup {
    ///     db: Arc<Db>,
    /// }
    /// impl Workflow for Lookup {
    ///     const NAME: &'static str = "lookup";
    ///     type Input = String;
    ///     type Output = String;
    ///     async fn run(&self, ctx: Ctx, key: String) -> reel::Result<String> {
    ///         // `self.db` and `key` are borrowed, not cloned (a local `Arc` the same).
    ///         ctx.step("get", |_| async { self.db.get(&key).await }).await
    ///     }
    /// }
    ///
    /// # #[tokio::main] async fn main() -> reel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let host = Host::builder()
    ///     .path(dir.path())
    ///     .register(Lookup { db: Arc::new(Db) })
    ///     .build()
    ///     .await?;
    /// let run = host.start::<Lookup>("l-1", "k".into()).await?;
    /// assert_eq!(run.result().await?, "value of k");
    /// host.shutdown().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Step`] (also when the body's output does not serialize: the body
    /// has run, so that attempt is recorded as failed for good, its message naming
    /// the codec error), [`Error::Codec`] when a recorded output does not
    /// deserialize into `T` (the run parks until code that reads it is deployed),
    /// [`Error::Cancelled`] when the run is asked to cancel (a running body is then
    /// dropped, unless the step was called through [`Ctx::shielded`]),
    /// [`Error::ReplayDivergence`], [`Error::Storage`], [`Error::InvalidArgument`]
    /// for a name longer than [`MAX_STEP_NAME_BYTES`].
    pub fn step<T, E, F, Fut>(
        &self,
        name: &str,
        body: F,
    ) -> impl Future<Output = Result<T>> + Send + use<T, E, F, Fut>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Into<StepError> + Send,
        F: FnMut(StepCtx) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
    {
        self.step_inner(name, None, body)
    }

    /// [`Ctx::step`] with its own retry policy.
    ///
    /// # Errors
    /// As [`Ctx::step`].
    pub fn step_with<T, E, F, Fut>(
        &self,
        name: &str,
        policy: RetryPolicy,
        body: F,
    ) -> impl Future<Output = Result<T>> + Send + use<T, E, F, Fut>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Into<StepError> + Send,
        F: FnMut(StepCtx) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
    {
        self.step_inner(name, Some(policy), body)
    }

    fn step_inner<T, E, F, Fut>(
        &self,
        name: &str,
        policy: Option<RetryPolicy>,
        mut body: F,
    ) -> impl Future<Output = Result<T>> + Send + use<T, E, F, Fut>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Into<StepError> + Send,
        F: FnMut(StepCtx) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
    {
        if let Some(e) = self.refused() {
            return Either::Left(std::future::ready(Err(e)));
        }
        if name.len() > MAX_STEP_NAME_BYTES {
            // Its retry timers are named after it, in keys the store bounds.
            return Either::Left(std::future::ready(Err(Error::InvalidArgument(format!(
                "a step name of {} bytes: at most {MAX_STEP_NAME_BYTES}",
                name.len()
            )))));
        }
        let (id, opened) = {
            let mut st = self.lock();
            let id = st.replay.step_id(name);
            let opened = st.replay.open(&id, Kind::Step);
            if opened.is_ok() {
                st.slots.register(Key::Step(id.clone()), None);
            }
            (id, opened)
        };
        if opened == Ok(Opened::New) {
            // Not fsynced: the completion that follows is ordered after it.
            self.record(
                Event::StepStarted {
                    id: id.clone(),
                    attempt: 1,
                },
                false,
            );
        }
        let mut slot = self.slot(Key::Step(id.clone()), None);
        let ctx = self.clone();
        Either::Right(async move {
            let opened = opened?;
            if let Some(r) = slot.result_or_caught_up().await {
                return ctx.step_result(&id, r);
            }
            if !ctx.live() {
                return ctx.frontier(format!("step `{id}`")).await;
            }
            let plan = match opened {
                Opened::New => StepPlan::Run {
                    attempt: 1,
                    record: false,
                },
                Opened::Replayed => ctx.lock().replay.plan_step(&id),
            };
            let (mut attempt, mut record) = match plan {
                StepPlan::Run { attempt, record } => (attempt, record),
                StepPlan::WaitRetry {
                    timer_id,
                    attempt,
                    fire_at,
                } => {
                    slot.unless_cancelled(ctx.wait_retry(&id, timer_id, fire_at))
                        .await?;
                    (attempt.saturating_add(1), true)
                }
            };
            let policy = policy.unwrap_or_else(|| ctx.inner.policy.clone());
            loop {
                if record {
                    ctx.record(
                        Event::StepStarted {
                            id: id.clone(),
                            attempt,
                        },
                        false,
                    );
                }
                // An unshielded step's body is abandoned when the run's cancel request
                // reaches the handler (its slot is ended then, live and on replay).
                let ran = slot
                    .unless_cancelled(ctx.run_body(&id, attempt, &mut body))
                    .await?;
                let (message, final_) = match ran {
                    Attempt::Value(output) => {
                        ctx.record(
                            Event::StepCompleted {
                                id: id.clone(),
                                output,
                            },
                            true,
                        );
                        break;
                    }
                    Attempt::Error { message, final_ } => (message, final_),
                };
                // Once the run is asked to cancel, a failed attempt is the last one
                // (a shielded step's too: `refused` is never set for it).
                let retry_at = (!final_ && policy.retries_after(attempt) && !ctx.is_cancelled())
                    .then(|| ctx.now_ms().saturating_add(millis(policy.backoff(attempt))));
                tracing::warn!(step = %id, attempt, error = %message, retry_at, "reel: step attempt failed");
                ctx.record(
                    Event::StepFailed {
                        id: id.clone(),
                        attempt,
                        error: message,
                        retry_at,
                    },
                    true,
                );
                let Some(fire_at) = retry_at else { break };
                // The step's own slot, not the backoff timer's, is what a cancel
                // request ends: the handler sees it at the step's turn, in call order.
                slot.unless_cancelled(ctx.wait_retry(&id, retry_timer_id(&id, attempt), fire_at))
                    .await?;
                // No overflow: `retries_after` is false at `u32::MAX`.
                attempt = attempt.saturating_add(1);
                record = true;
            }
            // The recorded result reaches the handler when the driver walks it.
            let r = slot.await;
            ctx.step_result(&id, r)
        })
    }

    /// Runs one attempt of the body. Both the closure call and its future may
    /// panic: either is a failed attempt.
    async fn run_body<T, E, F, Fut>(&self, id: &str, attempt: u32, body: &mut F) -> Attempt
    where
        T: Serialize,
        E: Into<StepError>,
        F: FnMut(StepCtx) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let _running = self.body_running();
        self.until_children_started().await;
        self.until_lease_holds().await;
        let step_ctx = StepCtx {
            attempt,
            key: idempotency_key(&self.inner.run_id, self.inner.segment, id),
            ctx: self.clone(),
        };
        let span = tracing::info_span!(
            "reel.step",
            run_id = %self.inner.run_id,
            workflow = self.inner.workflow,
            step = %id,
            attempt
        );
        let started = std::time::Instant::now();
        let ran = match std::panic::catch_unwind(AssertUnwindSafe(|| body(step_ctx))) {
            Ok(fut) => AssertUnwindSafe(fut).catch_unwind().instrument(span).await,
            Err(panic) => Err(panic),
        };
        metrics::histogram!(reel_storage::metrics::STEP_SECONDS)
            .record(started.elapsed().as_secs_f64());
        // Literal labels are static: no label vector is allocated per attempt.
        if matches!(ran, Ok(Ok(_))) {
            metrics::counter!(reel_storage::metrics::STEP_ATTEMPTS, "outcome" => "ok").increment(1);
        } else {
            metrics::counter!(reel_storage::metrics::STEP_ATTEMPTS, "outcome" => "error")
                .increment(1);
        }
        match ran {
            Ok(Ok(value)) => match encode(&value) {
                Ok(output) => Attempt::Value(output),
                // Recorded as a final failure, so the body does not run again on
                // every replay.
                Err(e) => Attempt::Error {
                    message: e.to_string(),
                    final_: true,
                },
            },
            Ok(Err(e)) => {
                let e: StepError = e.into();
                Attempt::Error {
                    message: e.message,
                    final_: !e.retryable,
                }
            }
            Err(panic) => Attempt::Error {
                message: format!("panicked: {}", panic_message(&*panic)),
                final_: false,
            },
        }
    }

    /// Waits until the child runs this execution called before now exist: their
    /// starts run in tasks of their own, and a body (a `ctx.signal` to such a
    /// child, a call to a service that looks it up) must find them started, as
    /// the log already says they are.
    async fn until_children_started(&self) {
        let mark = self.lock().starts.mark();
        std::future::poll_fn(|cx| {
            if self.lock().starts.done_before(mark, cx.waker()) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Waits until a step body may start here: at once, save in a new run's
    /// first execution before the run is written (until it is), and on a host
    /// sharing its store whose leases may have run out (it was frozen, or cut off
    /// from the database), where another host may own the run and have recorded
    /// this step already. The host's next renewal either renews its leases, and
    /// the body runs, or stops the run here.
    async fn until_lease_holds(&self) {
        let Some(journal) = &self.inner.journal else {
            return;
        };
        // A new run's first execution, before the run is written: the body starts
        // once it is, and never if it is not.
        if !journal.until_live().await {
            std::future::pending::<()>().await;
        }
        while !journal.lease_holds() {
            tokio::time::sleep(LEASE_RECHECK).await;
        }
    }

    /// Waits for a step's backoff timer; dropping the wait cancels the timer. A
    /// cancel request does not end it: it ends the step's own slot, which the caller
    /// watches.
    async fn wait_retry(&self, id: &str, timer_id: String, fire_at: u64) {
        let key = Key::Timer(timer_id.clone());
        {
            let mut st = self.lock();
            st.replay.note_due(&timer_id, fire_at);
            st.slots.register(
                key.clone(),
                Some(WaitInfo {
                    what: format!("retry of step `{id}`"),
                    child: false,
                }),
            );
        }
        let wait: SlotWait = self.slot(key.clone(), Some((timer_id, fire_at)));
        self.lock().slots.shield(&key);
        wait.await;
    }

    fn step_result<T: DeserializeOwned>(&self, id: &str, r: Resolution) -> Result<T> {
        match r {
            Resolution::Step(Ok(p)) => {
                self.decode_recorded(|| format!("output of step `{id}`"), &p)
            }
            Resolution::Step(Err(message)) => Err(Error::Step {
                step: id.to_owned(),
                message,
            }),
            Resolution::Cancelled(reason) => Err(Error::Cancelled(reason)),
            other => Err(Error::Codec(format!(
                "step `{id}` received {other:?} instead of its result"
            ))),
        }
    }
}
