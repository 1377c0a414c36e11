//! [`Ctx`]: the durable primitives a handler calls, and the driver that runs a
//! handler until it finishes or suspends.
//!
//! Every primitive does its bookkeeping when it is *called* (id, match against the
//! log, events recorded) and only its waiting when polled, so `join!` and
//! `try_join_all` over ctx futures are deterministic whatever order they are polled
//! in. The decisions come from [`crate::replay`]; this module carries them out.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use reel_actors::{Journal, Outcome, Services, now_ms, panic_message};
use reel_storage::{Event, Failure, Payload, Ticket};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tracing::Instrument;

use crate::replay::{Kind, Opened, Replay, SignalPlan, StepPlan};
use crate::{Error, Result, RetryPolicy, Uuid, Workflow};

/// A human decision delivered with [`RunHandle::approve`](crate::RunHandle::approve).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// Approved or rejected.
    pub approved: bool,
    /// Optional words from the approver.
    pub feedback: Option<String>,
}

/// Passed to a step body.
#[derive(Clone, Debug)]
pub struct StepCtx {
    attempt: u32,
    key: String,
}

impl StepCtx {
    /// 1-based attempt number (a crash mid-attempt runs the same attempt again).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// `run id/step id`: stable across retries and crashes, distinct between steps.
    /// Pass it to downstream APIs as their idempotency key.
    pub fn idempotency_key(&self) -> &str {
        &self.key
    }
}

/// The handler's handle on its run: every durable primitive. Cheap to clone, usable
/// from concurrent branches of one handler.
#[derive(Clone)]
pub struct Ctx {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("run_id", &self.inner.run_id)
            .finish_non_exhaustive()
    }
}

struct Inner {
    run_id: Arc<str>,
    /// `None` when replaying without a store (`reel::testing`): a new primitive marks
    /// the end of the recorded history.
    journal: Option<Journal>,
    services: Option<Services>,
    policy: RetryPolicy,
    state: Mutex<State>,
}

struct State {
    replay: Replay,
    active: usize,
    blocked: BTreeMap<u64, (String, bool)>,
    next_token: u64,
    fatal: Option<String>,
    frontier: Option<String>,
}

/// Payloads keep struct field names (MessagePack maps), so adding a field with
/// `#[serde(default)]` to an input, output or signal type stays readable by runs in
/// flight.
pub(crate) fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Payload> {
    rmp_serde::to_vec_named(v)
        .map(Payload)
        .map_err(Error::codec)
}

pub(crate) fn decode<T: DeserializeOwned>(p: &Payload) -> Result<T> {
    rmp_serde::from_slice(p.as_bytes()).map_err(Error::codec)
}

fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A wait that only a later wake-up resolves: pending forever in this execution.
struct Blocked {
    inner: Arc<Inner>,
    token: u64,
}

impl Future for Blocked {
    type Output = std::convert::Infallible;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Pending
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        self.inner.lock().blocked.remove(&self.token);
    }
}

/// Marks work that will finish on its own (a running body, an fsync in flight).
struct Active(Arc<Inner>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.lock().active -= 1;
    }
}

/// How a driven handler stopped.
enum Driven<T> {
    Done(T),
    Suspended {
        waiting_on: String,
        awaits_child: bool,
    },
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Ctx {
    pub(crate) fn new(
        run_id: Arc<str>,
        history: &Arc<Vec<Event>>,
        journal: Option<Journal>,
        services: Option<Services>,
        policy: RetryPolicy,
    ) -> Ctx {
        Ctx {
            inner: Arc::new(Inner {
                run_id,
                journal,
                services,
                policy,
                state: Mutex::new(State {
                    replay: Replay::new(history),
                    active: 0,
                    blocked: BTreeMap::new(),
                    next_token: 0,
                    fatal: None,
                    frontier: None,
                }),
            }),
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    fn active(&self) -> Active {
        self.inner.lock().active += 1;
        Active(self.inner.clone())
    }

    fn block(&self, what: String, child: bool) -> Blocked {
        let mut st = self.inner.lock();
        let token = st.next_token;
        st.next_token += 1;
        st.blocked.insert(token, (what, child));
        Blocked {
            inner: self.inner.clone(),
            token,
        }
    }

    /// Waits forever in this execution; a later wake-up replays past it.
    async fn wait_for_wakeup<T>(&self, what: String, child: bool) -> Result<T> {
        match self.block(what, child).await {}
    }

    /// Records events (at call time, so the log order is the call order).
    /// `None` in replay-only mode.
    fn record(&self, events: Vec<Event>, durable: bool) -> Option<Ticket> {
        self.inner
            .journal
            .as_ref()
            .map(|j| j.append(events, durable))
    }

    /// Awaits a ticket; a storage failure poisons the execution (the actor restarts
    /// the run from disk).
    async fn landed(&self, ticket: Option<Ticket>) -> Result<()> {
        let Some(ticket) = ticket else { return Ok(()) };
        let _active = self.active();
        ticket.await.map_err(|e| {
            let e = Error::from(e);
            self.inner.lock().fatal.get_or_insert_with(|| e.to_string());
            e
        })
    }

    fn replay_only(&self) -> bool {
        self.inner.journal.is_none()
    }

    /// In replay-only mode, a primitive past the end of the history.
    async fn frontier<T>(&self, what: String) -> Result<T> {
        self.inner
            .lock()
            .frontier
            .get_or_insert_with(|| what.clone());
        self.wait_for_wakeup(what, false).await
    }

    /// Runs a step with the workflow's retry policy. The body runs at least once and
    /// never again once its result is recorded (fsynced before this returns). A
    /// failing or panicking body is retried after durable backoff timers; when the
    /// attempts are exhausted the failure is recorded and returned as
    /// [`Error::Step`] (also on every replay).
    ///
    /// Ids: the step's name; the k-th call with a name already used gets `name#k`.
    ///
    /// # Errors
    /// [`Error::Step`], [`Error::Codec`] when the output does not (de)serialize,
    /// [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn step<T, E, F, Fut>(
        &self,
        name: &str,
        body: F,
    ) -> impl Future<Output = Result<T>> + Send + use<T, E, F, Fut>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Display + Send,
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
        E: Display + Send,
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
        E: Display + Send,
        F: FnMut(StepCtx) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
    {
        let (id, plan) = {
            let mut st = self.inner.lock();
            let id = st.replay.step_id(name);
            let plan = st
                .replay
                .open(&id, Kind::Step)
                .map(|opened| st.replay.plan_step(&id, opened));
            (id, plan)
        };
        if let Ok(StepPlan::Run {
            attempt,
            record: true,
        }) = &plan
            && !self.replay_only()
        {
            // Not awaited: the completion that follows is ordered after it and is
            // fsynced, which makes this durable too.
            drop(self.record(
                vec![Event::StepStarted {
                    id: id.clone(),
                    attempt: *attempt,
                }],
                false,
            ));
        }
        let ctx = self.clone();
        async move {
            let attempt = match plan? {
                StepPlan::Done(recorded) => return decode(&recorded?),
                StepPlan::WaitRetry { timer_id } => {
                    return ctx
                        .wait_for_wakeup(format!("retry of step `{id}` ({timer_id})"), false)
                        .await;
                }
                StepPlan::Run { attempt, .. } => attempt,
            };
            if ctx.replay_only() {
                return ctx.frontier(format!("step `{id}`")).await;
            }
            let active = ctx.active();
            let step_ctx = StepCtx {
                attempt,
                key: format!("{}/{id}", ctx.inner.run_id),
            };
            let span =
                tracing::info_span!("reel.step", run_id = %ctx.inner.run_id, step = %id, attempt);
            // Both the closure call and its future may panic: either is a failed attempt.
            let ran = match std::panic::catch_unwind(AssertUnwindSafe(|| body(step_ctx))) {
                Ok(fut) => AssertUnwindSafe(fut).catch_unwind().instrument(span).await,
                Err(panic) => Err(panic),
            };
            let error = match ran {
                Ok(Ok(value)) => match encode(&value) {
                    Ok(output) => {
                        let ticket = ctx.record(vec![Event::StepCompleted { id, output }], true);
                        ctx.landed(ticket).await?;
                        return Ok(value);
                    }
                    // Recorded as a final failure, so the body does not run again on
                    // every replay.
                    Err(e) => {
                        let ticket = ctx.record(
                            vec![Event::StepFailed {
                                id: id.clone(),
                                attempt,
                                error: e.to_string(),
                                retry_at: None,
                            }],
                            true,
                        );
                        ctx.landed(ticket).await?;
                        return Err(Error::Step {
                            step: id,
                            message: e.to_string(),
                        });
                    }
                },
                Ok(Err(e)) => e.to_string(),
                Err(panic) => format!("panicked: {}", panic_message(&*panic)),
            };
            let policy = policy.unwrap_or_else(|| ctx.inner.policy.clone());
            let retry_at = (attempt < policy.max_attempts)
                .then(|| now_ms().saturating_add(policy.backoff(attempt).as_millis() as u64));
            tracing::warn!(step = %id, attempt, %error, retry_at, "reel: step attempt failed");
            let ticket = ctx.record(
                vec![Event::StepFailed {
                    id: id.clone(),
                    attempt,
                    error: error.clone(),
                    retry_at,
                }],
                true,
            );
            ctx.landed(ticket).await?;
            drop(active);
            if retry_at.is_some() {
                ctx.wait_for_wakeup(format!("retry of step `{id}`"), false)
                    .await
            } else {
                Err(Error::Step {
                    step: id,
                    message: error,
                })
            }
        }
    }

    /// A durable sleep: survives restarts; a timer that came due while the process
    /// was down fires right after start.
    ///
    /// # Errors
    /// [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn sleep(&self, d: Duration) -> impl Future<Output = Result<()>> + Send + use<> {
        self.timer(now_ms().saturating_add(d.as_millis() as u64))
    }

    /// A durable sleep until a wall-clock time.
    ///
    /// # Errors
    /// As [`Ctx::sleep`].
    pub fn sleep_until(&self, at: SystemTime) -> impl Future<Output = Result<()>> + Send + use<> {
        self.timer(ms_of(at))
    }

    fn timer(&self, fire_at: u64) -> impl Future<Output = Result<()>> + Send + use<> {
        let (id, opened, fired) = {
            let mut st = self.inner.lock();
            let id = st.replay.positional("timer");
            let opened = st.replay.open(&id, Kind::Timer);
            let (fired, _) = st.replay.timer(&id);
            (id, opened, fired)
        };
        let ticket = match &opened {
            Ok(Opened::New) => self.record(
                vec![Event::TimerScheduled {
                    id: id.clone(),
                    fire_at,
                }],
                true,
            ),
            _ => None,
        };
        let ctx = self.clone();
        async move {
            let opened = opened?;
            if opened == Opened::New && ctx.replay_only() {
                return ctx.frontier(format!("timer `{id}`")).await;
            }
            ctx.landed(ticket).await?;
            if fired {
                Ok(())
            } else {
                ctx.wait_for_wakeup(format!("timer `{id}`"), false).await
            }
        }
    }

    /// Waits for the next signal of this name. Signals are buffered in the log: one
    /// sent before the wait is kept, and the k-th wait on a name receives the k-th
    /// signal of that name.
    ///
    /// # Errors
    /// [`Error::Codec`] when the payload does not decode into `T` (the signal is
    /// consumed), [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn wait_for_signal<T: DeserializeOwned + Send + 'static>(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<T>> + Send + use<T> {
        let wait = self.signal_wait::<T>("signal", name.to_owned(), None);
        async move {
            match wait.await? {
                Some(v) => Ok(v),
                None => Err(Error::Failed(
                    "signal wait without deadline timed out".into(),
                )),
            }
        }
    }

    /// [`Ctx::wait_for_signal`] with a durable deadline: `Ok(None)` when it passes
    /// first. A timed-out wait consumes no signal. Which came first is decided by
    /// the order in the log, so replay always agrees.
    ///
    /// # Errors
    /// As [`Ctx::wait_for_signal`].
    pub fn wait_for_signal_timeout<T: DeserializeOwned + Send + 'static>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<T>>> + Send + use<T> {
        self.signal_wait::<T>("signal", name.to_owned(), Some(timeout))
    }

    /// Waits for a named human decision, sent with
    /// [`RunHandle::approve`](crate::RunHandle::approve).
    ///
    /// # Errors
    /// As [`Ctx::wait_for_signal`].
    pub fn approval(&self, name: &str) -> impl Future<Output = Result<Approval>> + Send + use<> {
        let wait = self.signal_wait::<Approval>("approval", approval_signal(name), None);
        async move {
            wait.await?
                .ok_or_else(|| Error::Failed("approval wait timed out".into()))
        }
    }

    fn signal_wait<T: DeserializeOwned + Send + 'static>(
        &self,
        prefix: &'static str,
        name: String,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Option<T>>> + Send + use<T> {
        let (id, opened, plan, deadline) = {
            let mut st = self.inner.lock();
            let id = st.replay.positional(prefix);
            let opened = st.replay.open(&id, Kind::Signal { name: name.clone() });
            let plan = st.replay.plan_signal(&id, &name);
            (id.clone(), opened, plan, st.replay.wait_deadline(&id))
        };
        let ticket = match &opened {
            Ok(Opened::New) => self.record(
                vec![Event::SignalAwaited {
                    id: id.clone(),
                    name: name.clone(),
                    deadline: timeout.map(|t| now_ms().saturating_add(t.as_millis() as u64)),
                }],
                true,
            ),
            _ => None,
        };
        let ctx = self.clone();
        async move {
            let opened = opened?;
            ctx.landed(ticket).await?;
            match plan {
                SignalPlan::Received(p) => decode(&p).map(Some),
                SignalPlan::TimedOut => Ok(None),
                SignalPlan::Wait if opened == Opened::New && ctx.replay_only() => {
                    ctx.frontier(describe_wait(prefix, &name)).await
                }
                SignalPlan::Wait => {
                    let until = deadline
                        .map(|d| format!(" (deadline {d} ms)"))
                        .unwrap_or_default();
                    ctx.wait_for_wakeup(format!("{}{until}", describe_wait(prefix, &name)), false)
                        .await
                }
            }
        }
    }

    fn recorded<T, M: FnOnce() -> T>(
        &self,
        kind: &'static str,
        make: M,
    ) -> impl Future<Output = Result<T>> + Send + use<T, M>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let (id, opened, existing) = {
            let mut st = self.inner.lock();
            let id = st.replay.positional(kind);
            let opened = st.replay.open(&id, Kind::Recorded { kind });
            let existing = st.replay.recorded(&id);
            (id, opened, existing)
        };
        let fresh = match &opened {
            Ok(Opened::New) if !self.replay_only() => {
                let value = make();
                encode(&value)
                    .map(|p| {
                        let ticket = self.record(
                            vec![Event::Recorded {
                                id: id.clone(),
                                kind: kind.to_owned(),
                                value: p,
                            }],
                            true,
                        );
                        (value, ticket)
                    })
                    .map(Some)
            }
            _ => Ok(None),
        };
        let ctx = self.clone();
        async move {
            let opened = opened?;
            if let Some((value, ticket)) = fresh? {
                ctx.landed(ticket).await?;
                return Ok(value);
            }
            match existing {
                Some(p) if opened == Opened::Replayed => decode(&p),
                _ => ctx.frontier(format!("recorded {kind} `{id}`")).await,
            }
        }
    }

    /// The current time, recorded once and identical on every replay.
    ///
    /// # Errors
    /// [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn now(&self) -> impl Future<Output = Result<SystemTime>> + Send + use<> {
        let ms = self.recorded("now", now_ms);
        async move { Ok(UNIX_EPOCH + Duration::from_millis(ms.await?)) }
    }

    /// A random v4 UUID, recorded once and identical on every replay.
    ///
    /// # Errors
    /// As [`Ctx::now`].
    pub fn uuid(&self) -> impl Future<Output = Result<Uuid>> + Send + use<> {
        self.recorded("uuid", Uuid::new_v4)
    }

    /// A random number, recorded once and identical on every replay.
    ///
    /// # Errors
    /// As [`Ctx::now`].
    pub fn random_u64(&self) -> impl Future<Output = Result<u64>> + Send + use<> {
        self.recorded("random", || Uuid::new_v4().as_u64_pair().0)
    }

    /// Starts a child run of workflow `W` (idempotent on `child_run_id`) and waits for
    /// its output. The child is a run like any other; its completion wakes this run,
    /// also across restarts.
    ///
    /// # Errors
    /// The child's own error if it failed ([`Error::Cancelled`] if cancelled),
    /// [`Error::RunExists`]-like failures when the id belongs to another workflow,
    /// [`Error::Codec`], [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn child<W: Workflow>(
        &self,
        child_run_id: &str,
        input: W::Input,
    ) -> impl Future<Output = Result<W::Output>> + Send + use<W> {
        let child_run_id = child_run_id.to_owned();
        let input = encode(&input);
        let (id, opened, result) = {
            let mut st = self.inner.lock();
            let id = st.replay.positional("child");
            let opened = st.replay.open(
                &id,
                Kind::Child {
                    workflow: W::NAME.to_owned(),
                    run_id: child_run_id.clone(),
                },
            );
            let result = st.replay.child(&id);
            (id, opened, result)
        };
        let ticket = match (&opened, &input) {
            (Ok(Opened::New), Ok(_)) => self.record(
                vec![Event::ChildStarted {
                    id: id.clone(),
                    workflow: W::NAME.to_owned(),
                    version: W::VERSION,
                    run_id: child_run_id.clone(),
                }],
                true,
            ),
            _ => None,
        };
        let ctx = self.clone();
        async move {
            let opened = opened?;
            let input = input?;
            if opened == Opened::New && ctx.replay_only() {
                return ctx.frontier(format!("child `{child_run_id}`")).await;
            }
            ctx.landed(ticket).await?;
            if let Some(result) = result {
                return match result {
                    Ok(p) => decode(&p),
                    Err(f) => Err(f.into()),
                };
            }
            if let Some(services) = &ctx.inner.services {
                let _active = ctx.active();
                services
                    .ensure_child(
                        &ctx.inner.run_id,
                        &id,
                        W::NAME,
                        W::VERSION,
                        &child_run_id,
                        input,
                    )
                    .await;
            }
            ctx.wait_for_wakeup(format!("child run `{child_run_id}`"), true)
                .await
        }
    }

    /// Polls the handler until it returns, or until every branch waits on something
    /// only a later wake-up resolves (no body running, no write in flight).
    async fn drive<T>(&self, handler: impl Future<Output = T>) -> Driven<T> {
        let mut handler = std::pin::pin!(handler);
        std::future::poll_fn(|cx| match handler.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Driven::Done(v)),
            Poll::Pending => {
                let st = self.inner.lock();
                // A handler pending on something that is neither a reel wait nor reel
                // work (a foreign future) is left to wake itself.
                if st.active == 0 && !st.blocked.is_empty() {
                    // Described now: the waits unregister when the handler is dropped.
                    let mut waits: Vec<&str> =
                        st.blocked.values().map(|(w, _)| w.as_str()).collect();
                    waits.dedup();
                    Poll::Ready(Driven::Suspended {
                        waiting_on: waits.join(", "),
                        awaits_child: st.blocked.values().any(|(_, child)| *child),
                    })
                } else {
                    Poll::Pending
                }
            }
        })
        .await
    }

    fn outcome<O: Serialize>(&self, driven: Driven<Result<O>>) -> Outcome {
        let mut st = self.inner.lock();
        if let Some(fatal) = st.fatal.clone() {
            return Outcome::Crashed(fatal);
        }
        if let Some(e) = st.replay.diverged() {
            return Outcome::Parked(Failure::from(e));
        }
        match driven {
            Driven::Done(Ok(output)) => match st.replay.finish() {
                Err(e) => Outcome::Parked(Failure::from(&e)),
                Ok(()) => match encode(&output) {
                    Ok(p) => Outcome::Completed(p),
                    Err(e) => Outcome::Failed(Failure::from(&e)),
                },
            },
            // A handler that fails before reaching recorded primitives diverged: the
            // run is parked (resumable), not failed for good.
            Driven::Done(Err(e)) => match st.replay.finish() {
                Err(d) => Outcome::Parked(Failure::from(&d)),
                Ok(()) => Outcome::Failed(Failure::from(&e)),
            },
            Driven::Suspended {
                waiting_on,
                awaits_child,
            } => Outcome::Suspended {
                waiting_on,
                awaits_child,
            },
        }
    }

    /// The first primitive past the end of the history (replay-only mode).
    pub(crate) fn frontier_reached(&self) -> Option<String> {
        self.inner.lock().frontier.clone()
    }
}

/// How a signal wait reads in `RunStatus::Suspended { waiting_on }`.
fn describe_wait(prefix: &str, name: &str) -> String {
    match name.strip_prefix("approval:") {
        Some(approval) if prefix == "approval" => format!("approval `{approval}`"),
        _ => format!("signal `{name}`"),
    }
}

/// The signal name an approval travels under.
pub(crate) fn approval_signal(name: &str) -> String {
    format!("approval:{name}")
}

/// Runs one execution of `workflow` against `history`; shared by the live engine and
/// `reel::testing`.
pub(crate) async fn execute<W: Workflow>(
    workflow: Arc<W>,
    run_id: Arc<str>,
    history: Arc<Vec<Event>>,
    journal: Option<Journal>,
    services: Option<Services>,
) -> (Outcome, Ctx) {
    let ctx = Ctx::new(run_id, &history, journal, services, workflow.retry_policy());
    let input = match history.first() {
        Some(Event::RunStarted { input, .. }) => decode::<W::Input>(input),
        _ => Err(Error::Codec(
            "the log does not begin with RunStarted".into(),
        )),
    };
    let input = match input {
        Ok(i) => i,
        Err(e) => return (Outcome::Failed(Failure::from(&e)), ctx),
    };
    let driven = ctx.drive(workflow.run(ctx.clone(), input)).await;
    (ctx.outcome(driven), ctx)
}
