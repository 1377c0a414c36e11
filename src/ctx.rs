//! [`Ctx`]: the handler's handle on its run, and what every durable primitive shares.
//!
//! Every primitive does its bookkeeping when it is *called*: it gets its id, is
//! matched against the log ([`crate::replay`]), records its opening event and
//! registers a slot ([`crate::slots`]) for its result. Its future only waits for
//! that slot. Results reach slots solely through the driver ([`crate::driver`]),
//! one at a time and in log order, so the handler sees the same interleaving on
//! every replay whatever combinator it uses. The primitives themselves live in
//! [`crate::primitives`], one file each.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use foldhash::{HashSet, HashSetExt};
use futures::future::BoxFuture;
use reel_actors::{Journal, Landing, Services};
use reel_storage::{Event, Payload};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::child_starts::ChildStarts;
use crate::replay::Replay;
use crate::slots::{Key, Resolution, Slots};
use crate::{Error, Result, RetryPolicy};

/// A human decision delivered with [`AnyRun::approve`](crate::AnyRun::approve).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// Approved or rejected.
    pub approved: bool,
    /// Optional words from the approver.
    pub feedback: Option<String>,
}

/// Passed to a step body.
#[derive(Clone)]
pub struct StepCtx {
    pub(crate) attempt: u32,
    pub(crate) key: String,
    pub(crate) ctx: Ctx,
}

impl std::fmt::Debug for StepCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepCtx")
            .field("attempt", &self.attempt)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl StepCtx {
    /// Resolves with the reason once the run has been asked to cancel. An ordinary
    /// step's body is dropped at that point; a shielded step's body (cleanup, see
    /// [`Ctx::shielded`]) goes on, and can watch this to cut long work short (for
    /// example in a `select!` with its work). Its result is recorded and returned;
    /// an attempt that fails after the request is not retried.
    pub fn cancelled(&self) -> impl Future<Output = String> + Send + 'static {
        self.ctx.cancelled()
    }

    /// Whether the run has been asked to cancel.
    pub fn is_cancelled(&self) -> bool {
        self.ctx.is_cancelled()
    }

    /// 1-based attempt number (a crash mid-attempt runs the same attempt again).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// `run id/step id`, with `%` and `/` in the run id escaped (`%25`, `%2F`), so
    /// the key is stable across retries and crashes, distinct between steps, and
    /// distinct between runs (run `a/b` step `c` and run `a` step `b/c` differ).
    /// After the run has continued as new `n` times, the run part ends in `%S<n>`
    /// (`order-1%S2/charge`), so steps of different segments differ too.
    /// Pass it to downstream APIs as their idempotency key.
    pub fn idempotency_key(&self) -> &str {
        &self.key
    }
}

/// The idempotency key of a step: unambiguous whatever the run id holds.
/// The escaped run id never holds `%S`, so the segment suffix is unambiguous.
pub(crate) fn idempotency_key(run_id: &str, segment: u32, step_id: &str) -> String {
    let mut key = String::with_capacity(run_id.len() + step_id.len() + 8);
    if run_id.contains(['%', '/']) {
        for c in run_id.chars() {
            match c {
                '%' => key.push_str("%25"),
                '/' => key.push_str("%2F"),
                c => key.push(c),
            }
        }
    } else {
        // Most run ids need no escaping: copied whole, not a char at a time.
        key.push_str(run_id);
    }
    if segment > 0 {
        use std::fmt::Write as _;
        let _ = write!(key, "%S{segment}");
    }
    key.push('/');
    key.push_str(step_id);
    key
}

/// The handler's handle on its run: every durable primitive. Cheap to clone, usable
/// from concurrent branches of one handler.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) inner: Arc<Inner>,
    /// Calls through this handle are not ended by a cancel request (cleanup).
    shielded: bool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("run_id", &self.inner.run_id)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) run_id: Arc<str>,
    /// The run's workflow name.
    pub(crate) workflow: &'static str,
    /// How many times the run has continued as new.
    pub(crate) segment: u32,
    /// The run that started this one as its child.
    pub(crate) parent: Option<String>,
    /// `None` when replaying without a store (`reel::testing`): a new primitive marks
    /// the end of the recorded history.
    pub(crate) journal: Option<Journal>,
    pub(crate) services: Option<Services>,
    pub(crate) policy: RetryPolicy,
    state: Mutex<State>,
}

impl Inner {
    /// The state the primitives and the driver share.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A handler's request to continue as new (`ctx.continue_as_new`), kept until the
/// driver ends the execution with it.
#[derive(Clone, Debug)]
pub(crate) struct ContinueRequest {
    /// The version of the workflow the new segment runs.
    pub(crate) version: u32,
    /// The new segment's input.
    pub(crate) input: Payload,
}

/// What the primitives and the driver share during one execution.
pub(crate) struct State {
    pub(crate) replay: Replay,
    pub(crate) slots: Slots,
    /// The walk has passed the whole recorded history and the handler has done all
    /// it can with it: step bodies may run, children may be started.
    pub(crate) caught_up: bool,
    /// Step bodies running now.
    pub(crate) bodies: usize,
    /// Appends made since the driver last looked; it polls them to completion.
    pub(crate) landings: Vec<Landing>,
    /// Work to start once caught up (child runs); the driver polls it.
    pub(crate) effects: Vec<BoxFuture<'static, ()>>,
    /// The child starts among `effects`, queued or under way: step bodies wait
    /// for those queued before them.
    pub(crate) starts: ChildStarts,
    /// A recorded value no longer decodes with this code: the run is parked.
    pub(crate) parked: Option<Error>,
    /// Replay-only mode: the first primitive past the end of the history.
    pub(crate) frontier: Option<String>,
    /// Timers fired or cancelled during this execution.
    pub(crate) settled: HashSet<String>,
    /// The execution is over and its handler is being dropped.
    pub(crate) closing: bool,
    /// The handler asked to continue as new.
    pub(crate) continued: Option<ContinueRequest>,
}

/// Payloads keep struct field names (MessagePack maps), so adding a field with
/// `#[serde(default)]` to an input, output or signal type stays readable by runs in
/// flight.
pub(crate) fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Payload> {
    rmp_serde::to_vec_named(v)
        .map(Payload)
        .map_err(Error::codec)
}

/// How deep a payload may nest. rmp-serde's default (1,024) lets a damaged or
/// hostile payload (a signal from outside) recurse deep enough to overflow a worker
/// thread's stack, which aborts the process; 128 levels is far more than data types
/// nest, and a deeper payload is a codec error.
const MAX_PAYLOAD_DEPTH: usize = 128;

pub(crate) fn decode<T: DeserializeOwned>(p: &Payload) -> Result<T> {
    let mut de = rmp_serde::Deserializer::from_read_ref(p.as_bytes());
    de.set_max_depth(MAX_PAYLOAD_DEPTH);
    T::deserialize(&mut de).map_err(Error::codec)
}

/// Milliseconds of a duration, saturating (`Duration::MAX` is a far-future time,
/// never a wrapped-around small one).
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Which run an execution is of: what [`Ctx`] tells the handler about it.
pub(crate) struct RunIdentity {
    pub(crate) run_id: Arc<str>,
    pub(crate) workflow: &'static str,
    /// How many times the run has continued as new.
    pub(crate) segment: u32,
    /// The run that started this one as its child.
    pub(crate) parent: Option<String>,
}

impl Ctx {
    pub(crate) fn new(
        run: RunIdentity,
        history: &Arc<Vec<Event>>,
        base: u64,
        journal: Option<Journal>,
        services: Option<Services>,
        policy: RetryPolicy,
    ) -> Ctx {
        Ctx {
            shielded: false,
            inner: Arc::new(Inner {
                run_id: run.run_id,
                workflow: run.workflow,
                segment: run.segment,
                parent: run.parent,
                journal,
                services,
                policy,
                state: Mutex::new(State {
                    replay: Replay::new(history, base),
                    slots: Slots::default(),
                    caught_up: false,
                    bodies: 0,
                    landings: Vec::new(),
                    effects: Vec::new(),
                    starts: ChildStarts::default(),
                    parked: None,
                    frontier: None,
                    settled: HashSet::new(),
                    closing: false,
                    continued: None,
                }),
            }),
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The id of the run that started this one as its child (waited for or
    /// detached), if any.
    pub fn parent_id(&self) -> Option<&str> {
        self.inner.parent.as_deref()
    }

    /// Resolves with the reason once the run has been asked to cancel
    /// ([`AnyRun::cancel`](crate::AnyRun::cancel), a parent's cancel, or the
    /// run's deadline). The request reaches the handler at the same point on every
    /// replay.
    ///
    /// When it does, every step, timer, signal wait and child wait still pending ends
    /// with [`Error::Cancelled`] (a running step body is dropped, as Temporal's
    /// default activity cancellation does), and later calls fail at once with it,
    /// except through [`Ctx::shielded`], which cleanup uses. Whatever error the
    /// handler then returns ends the run as cancelled; a value completes it. The
    /// host cancels the run hard if it is still going after the cancel grace
    /// ([`HostBuilder::cancel_grace`](crate::HostBuilder::cancel_grace)).
    ///
    /// # Examples
    /// ```
    /// use reel::{Ctx, Error, Workflow};
    ///
    /// struct Booking;
    /// impl Workflow for Booking {
    ///     const NAME: &'static str = "booking";
    ///     type Input = ();
    ///     type Output = String;
    ///     async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
    ///         ctx.step("reserve", |_| async { Ok::<_, String>(()) }).await?;
    ///         match ctx.wait_for_signal::<bool>("confirm").await {
    ///             Err(Error::Cancelled(reason)) => {
    ///                 // Compensate through the shielded handle, then end cancelled.
    ///                 let cleanup = ctx.shielded();
    ///                 cleanup.step("release", |_| async { Ok::<_, String>(()) }).await?;
    ///                 Err(Error::Cancelled(reason))
    ///             }
    ///             other => Ok(format!("confirmed: {}", other?)),
    ///         }
    ///     }
    /// }
    /// ```
    pub fn cancelled(&self) -> impl Future<Output = String> + Send + 'static {
        self.lock().slots.count_cancel_wait(true);
        CancelWait(self.clone())
    }

    /// Whether the run's handler has seen a cancel request (see [`Ctx::cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.lock().slots.cancelled().is_some()
    }

    /// A handle whose calls a cancel request does not end: the cleanup and
    /// compensation a cancelled run performs before it ends (Temporal's
    /// non-cancellable scope). It sees the request like any handle.
    pub fn shielded(&self) -> Ctx {
        Ctx {
            inner: self.inner.clone(),
            shielded: true,
        }
    }

    /// The error a new call gets once the handler has seen a cancel request, unless
    /// it goes through a shielded handle.
    pub(crate) fn refused(&self) -> Option<Error> {
        if self.shielded {
            return None;
        }
        self.lock()
            .slots
            .cancelled()
            .map(|reason| Error::Cancelled(reason.to_owned()))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
    }

    /// Milliseconds since the epoch on the host's clock (the system clock when
    /// only replaying).
    pub(crate) fn now_ms(&self) -> u64 {
        match &self.inner.journal {
            Some(journal) => journal.now_ms(),
            None => reel_storage::Clock::now_ms(&reel_storage::SystemClock),
        }
    }

    /// Whether this execution records (a live run) or only replays (`reel::testing`).
    pub(crate) fn live(&self) -> bool {
        self.inner.journal.is_some()
    }

    /// Records events now (at call time, so the log order is the call order); the
    /// driver sees the write land. Nothing in replay-only mode.
    pub(crate) fn record(&self, event: Event, durable: bool) {
        if let Some(journal) = &self.inner.journal {
            // A write that need not be fsynced (`StepStarted`) is not waited for:
            // the durable write that follows it lands after it, or reports its
            // failure (the writer answers every later append with the first cause).
            // Waiting for it would cost the execution a wake-up per step.
            if durable {
                let landing = journal.append([event], true);
                self.lock().landings.push(landing);
            } else {
                journal.append_unawaited(event);
            }
        }
    }

    /// Cancels a timer the handler no longer waits for, unless it already fired or
    /// was cancelled, or the execution is being torn down (then it stays: the run
    /// has not decided anything).
    pub(crate) fn cancel_timer(&self, id: &str, fire_at: u64) {
        let Some(journal) = &self.inner.journal else {
            return;
        };
        if journal.is_closed() {
            return;
        }
        {
            let mut st = self.lock();
            if st.closing || st.replay.settled(id) || !st.settled.insert(id.to_owned()) {
                return;
            }
        }
        let landing = journal.cancel_timer(id, fire_at);
        self.lock().landings.push(landing);
    }

    /// A future for the slot's result; dropping it removes the slot, and cancels
    /// `timer` (id, due time) if it had not fired. A shielded handle's slot is not
    /// ended by a cancel request.
    pub(crate) fn slot(&self, key: Key, timer: Option<(String, u64)>) -> SlotWait {
        if self.shielded {
            self.lock().slots.shield(&key);
        }
        SlotWait {
            ctx: self.clone(),
            key,
            timer,
            done: false,
        }
    }

    /// Parks the run: a value recorded by earlier code does not decode with this
    /// code. Fixed code resumes it.
    pub(crate) fn decode_recorded<T: DeserializeOwned>(
        &self,
        what: impl FnOnce() -> String,
        p: &Payload,
    ) -> Result<T> {
        decode(p).map_err(|e| {
            let e = Error::Codec(format!("recorded {} no longer decodes: {e}", what()));
            self.lock().parked.get_or_insert_with(|| e.clone());
            e
        })
    }

    /// In replay-only mode, a primitive past the end of the history: waits forever
    /// and is reported as what the handler would do next.
    pub(crate) async fn frontier<T>(&self, what: String) -> Result<T> {
        self.lock().frontier.get_or_insert(what);
        std::future::pending().await
    }

    /// The first primitive past the end of the history (replay-only mode).
    pub(crate) fn frontier_reached(&self) -> Option<String> {
        self.lock().frontier.clone()
    }

    /// Marks a step body as running until the guard drops.
    pub(crate) fn body_running(&self) -> BodyRunning {
        self.lock().bodies += 1;
        BodyRunning(self.clone())
    }
}

/// Waits for one primitive's result.
pub(crate) struct SlotWait {
    ctx: Ctx,
    key: Key,
    timer: Option<(String, u64)>,
    done: bool,
}

impl SlotWait {
    /// Resolves with the slot's result if visible, or `None` once replay has caught
    /// up without it (a step whose body must run now). While it waits, the waker
    /// kept in the slot is the one catching up wakes.
    pub(crate) fn result_or_caught_up(&mut self) -> impl Future<Output = Option<Resolution>> + '_ {
        std::future::poll_fn(move |cx| {
            let mut st = self.ctx.lock();
            if let Some(r) = st.slots.poll(&self.key, cx.waker()) {
                self.done = !matches!(r, Resolution::Cancelled(_));
                return Poll::Ready(Some(r));
            }
            if st.caught_up {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
    }
}

impl SlotWait {
    /// Runs `work` (a step's body, or its backoff) unless a cancel request ends
    /// this slot's wait first: then `work` is dropped and the cancellation returned.
    pub(crate) async fn unless_cancelled<F: Future>(&mut self, work: F) -> Result<F::Output> {
        let cancelled = std::future::poll_fn(|cx| {
            match self.ctx.lock().slots.take_cancelled(&self.key, cx.waker()) {
                Some(reason) => Poll::Ready(reason),
                None => Poll::Pending,
            }
        });
        match futures::future::select(std::pin::pin!(work), std::pin::pin!(cancelled)).await {
            futures::future::Either::Left((done, _)) => Ok(done),
            futures::future::Either::Right((reason, _)) => Err(Error::Cancelled(reason)),
        }
    }
}

impl Future for SlotWait {
    type Output = Resolution;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Resolution> {
        let this = self.get_mut();
        let taken = this.ctx.lock().slots.poll(&this.key, cx.waker());
        match taken {
            Some(r) => {
                // A wait ended by a cancel request leaves its timer to be cancelled.
                this.done = !matches!(r, Resolution::Cancelled(_));
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for SlotWait {
    fn drop(&mut self) {
        let out = self.ctx.lock().slots.remove(&self.key);
        for w in out.wakers {
            w.wake();
        }
        if !self.done
            && let Some((id, fire_at)) = self.timer.take()
        {
            self.ctx.cancel_timer(&id, fire_at);
        }
    }
}

/// Waits for the cancel request (`ctx.cancelled()`); counted while alive.
struct CancelWait(Ctx);

impl Future for CancelWait {
    type Output = String;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<String> {
        match self.0.lock().slots.poll_cancelled(cx.waker()) {
            Some(reason) => Poll::Ready(reason),
            None => Poll::Pending,
        }
    }
}

impl Drop for CancelWait {
    fn drop(&mut self) {
        self.0.lock().slots.count_cancel_wait(false);
    }
}

/// A step body is running while this lives.
pub(crate) struct BodyRunning(Ctx);

impl Drop for BodyRunning {
    fn drop(&mut self) {
        self.0.lock().bodies -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deeply_nested_payload_is_a_codec_error_not_a_stack_overflow() {
        // 100,000 one-element arrays, one inside the other, then nil.
        let mut bytes = vec![0x91u8; 100_000];
        bytes.push(0xc0);
        let r = decode::<serde::de::IgnoredAny>(&Payload(bytes));
        assert!(matches!(r, Err(Error::Codec(_))), "{r:?}");
        let shallow = encode(&vec![vec![vec![1u8]]]).unwrap();
        assert_eq!(
            decode::<Vec<Vec<Vec<u8>>>>(&shallow).unwrap(),
            vec![vec![vec![1]]]
        );
    }

    #[test]
    fn idempotency_keys_escape_the_run_id() {
        assert_eq!(idempotency_key("a/b", 0, "c"), "a%2Fb/c");
        assert_eq!(idempotency_key("a", 0, "b/c"), "a/b/c");
        assert_eq!(idempotency_key("50%", 0, "x"), "50%25/x");
        assert_eq!(idempotency_key("a", 2, "x"), "a%S2/x");
        assert_eq!(idempotency_key("a%S2", 0, "x"), "a%25S2/x");
    }
}
