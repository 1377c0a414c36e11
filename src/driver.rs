//! The driver: runs one execution of a handler and decides when each recorded
//! result becomes visible to it.
//!
//! The rule (ARCHITECTURE.md, "Replay and concurrency"): results become visible one
//! at a time, in log order, and only when the handler is *quiescent*, that is, it
//! has been polled and nothing it waits on has been woken since. Live, a result is
//! made visible once it is durable; on replay, the same results are made visible in
//! the same order with the same quiescence in between, so the handler sees the same
//! interleaving and makes the same calls, whatever combinator it uses (`join!`,
//! `select!`, `select_all`, `FuturesUnordered`, nested). The log itself is the
//! record of the order; no extra event is needed.
//!
//! The walk also checks calls: a primitive the log opened before the point the walk
//! has reached must have been called by then (live, it was called before any later
//! result became visible). Step bodies run only once the walk has passed the whole
//! recorded history ("caught up"), so an attempt that was abandoned live is
//! abandoned again before its body could start.
//!
//! The execution is a stream of outcomes: a suspension each time every branch waits
//! on something only a new event resolves (it stays alive: the journal wakes it when
//! the actor appends one), then one final outcome. A paused run's execution walks
//! no more of the log, lets its running step bodies finish and record their
//! results, and then ends with `Outcome::Paused`. Which outcome to report is
//! decided in `driver::outcome`.

mod outcome;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use futures::task::{ArcWake, AtomicWaker};
use reel_actors::{Journal, Landing, Outcome, Services};
use reel_storage::{Event, Failure};
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::ctx::{Ctx, RunIdentity, State, decode};
use crate::replay::is_opening;
use crate::slots::is_result;
use crate::{Error, Result, Workflow};

/// Deliveries and polls made in one poll of the stream before it yields to the
/// runtime (a long replay must not hold a worker thread for its whole length).
const BUDGET: u32 = 512;

/// The waker the handler is polled with: records that something the handler waits
/// on was woken, and wakes the execution's task unless the driver is polling it
/// right now (then the flag is enough, and waking the task from inside its own
/// poll would make the runtime wake a second worker for nothing).
#[derive(Default)]
struct TopWaker {
    woken: AtomicBool,
    polling: AtomicBool,
    task: AtomicWaker,
}

impl ArcWake for TopWaker {
    fn wake_by_ref(arc: &Arc<Self>) {
        arc.woken.store(true, Ordering::Release);
        if !arc.polling.load(Ordering::Acquire) {
            arc.task.wake();
        }
    }
}

/// What the walk did.
enum Walked {
    /// A result reached a waiting slot: poll the handler before walking on.
    Delivered,
    /// Nothing more can be walked now.
    Idle,
    /// The log does not match the handler.
    Diverged,
}

/// What walking one event did.
enum Visit {
    /// A result not durable yet: it is not walked.
    NotDurable,
    /// The event does not match the handler's calls.
    Diverged,
    /// Walked; what it delivered.
    Walked(crate::slots::Delivered),
}

/// Walks the event at `seq`: checks a recorded opening against the handler's
/// calls, notes what the event settles, and delivers a result to its slot.
fn visit(ctx: &Ctx, seq: u64, history_len: u64, event: &Event) -> Visit {
    let mut st = ctx.lock();
    if seq < history_len && is_opening(event) {
        // What the handler waits on is described only for the error.
        let State { replay, slots, .. } = &mut *st;
        let checked = replay.walk_opening(|| match slots.describe_waits() {
            Some((what, _)) => format!("did not call it: it waits on {what}"),
            None => "did not call it".to_owned(),
        });
        if checked.is_err() {
            return Visit::Diverged;
        }
    }
    match event {
        Event::TimerFired { id } => {
            st.settled.insert(id.clone());
        }
        Event::StepFailed {
            id, attempt, error, ..
        } if seq >= history_len => st.replay.note_step_failure(id, *attempt, error),
        _ => {}
    }
    Visit::Walked(st.slots.deliver(seq, event))
}

struct Driver<F> {
    ctx: Ctx,
    journal: Option<Journal>,
    history: Arc<Vec<Event>>,
    handler: Pin<Box<F>>,
    top: Arc<TopWaker>,
    landings: VecDeque<Landing>,
    /// Child starts under way (dropping a handle does not stop its task).
    effects: FuturesUnordered<JoinHandle<()>>,
    /// The next sequence number to walk.
    walked: u64,
    /// The walk position at which a suspension was last reported: the actor is told
    /// again once the walk has moved (it marks the run running for every event).
    reported: Option<u64>,
    /// The handler has returned: this outcome is reported once the child starts it
    /// queued are done (a child called but never awaited still starts, before its
    /// parent's end is recorded).
    ending: Option<Outcome>,
    finished: bool,
    /// The handler is polled only when this is set (its first poll) or its waker
    /// fired: a wake-up for a landing or a new event leaves it alone until the
    /// walk delivers something to it.
    handler_due: bool,
}

impl<F, O> Driver<F>
where
    F: Future<Output = Result<O>>,
    O: Serialize,
{
    /// `(length, durable)` of the log this execution sees.
    fn marks(&self) -> (u64, u64) {
        match &self.journal {
            Some(j) => j.marks(),
            None => (self.history.len() as u64, self.history.len() as u64),
        }
    }

    /// Visits the event at `seq` in place: in `history` (the log this execution
    /// began with, which a replay walks whole), or past it in the journal, under
    /// its lock. `None` past the end of the log.
    fn with_event_at<R>(
        &self,
        history: &[Event],
        seq: u64,
        visit: impl FnOnce(&Event) -> R,
    ) -> Option<R> {
        let i = usize::try_from(seq).ok()?;
        if let Some(e) = history.get(i) {
            return Some(visit(e));
        }
        self.journal.as_ref()?.with_event_at(seq, visit)
    }

    /// Takes the appends the primitives queued, and starts the child runs they
    /// queued once replay has caught up. A child start is a task of its own: it
    /// must finish even if this execution ends first (the parent's branch lost a
    /// race, or the parent returned). The execution waits for it before it reports
    /// a suspension, so a suspended parent's children exist. On shutdown the start
    /// is refused and the task ends; the child is recorded and recovery starts it.
    fn collect_work(&mut self) {
        let effects = {
            let mut st = self.ctx.lock();
            self.landings.extend(st.landings.drain(..));
            if st.caught_up {
                std::mem::take(&mut st.effects)
            } else {
                Vec::new()
            }
        };
        self.start_effects(effects);
    }

    /// Starts queued child starts, each in a task of its own.
    fn start_effects(&mut self, effects: Vec<BoxFuture<'static, ()>>) {
        self.effects
            .extend(effects.into_iter().map(|e| tokio::spawn(e)));
    }

    /// Polls the appends in flight, in order; a failed one stops the execution.
    fn poll_landings(&mut self, cx: &mut Context<'_>) -> Option<Outcome> {
        while let Some(front) = self.landings.front_mut() {
            match Pin::new(front).poll(cx) {
                Poll::Pending => return None,
                Poll::Ready(Ok(())) => {
                    self.landings.pop_front();
                }
                Poll::Ready(Err(reel_storage::StorageError::NotOwner { .. })) => {
                    return Some(Outcome::Disowned);
                }
                Poll::Ready(Err(e @ reel_storage::StorageError::Io(_))) => {
                    let e = Error::from(e);
                    return Some(Outcome::Unstored(format!("append failed: {e}")));
                }
                Poll::Ready(Err(e)) => {
                    let e = Error::from(e);
                    return Some(Outcome::Crashed(format!("append failed: {e}")));
                }
            }
        }
        None
    }

    /// Walks the log until a result reaches a waiting slot, or nothing more can be
    /// walked (the end of the log, or a result that is not durable yet). A buffered
    /// signal for a wait called since it arrived goes first: it became visible
    /// earlier than anything still to be walked.
    fn walk(&mut self) -> Walked {
        if self.paused() {
            // Nothing more becomes visible: the execution winds down to its end.
            return Walked::Idle;
        }
        let history = self.history.clone();
        let history_len = history.len() as u64;
        if self.journal.is_none() && self.ctx.lock().replay.past_history() {
            // Replay-only: the handler made a call the history does not hold. Live,
            // that call would be recorded before anything still to be walked became
            // visible, so nothing more is handed out: the replay ends here, with the
            // handler at its frontier.
            self.walked = self.walked.max(history_len);
            return Walked::Idle;
        }
        let fed = self.ctx.lock().slots.feed_buffered();
        if fed.resolved {
            self.settle_delivery(fed);
            return Walked::Delivered;
        }
        // After the cancel request, the waits it ends go next, one at a time.
        let fed = self.ctx.lock().slots.feed_cancelled();
        if fed.resolved {
            self.settle_delivery(fed);
            return Walked::Delivered;
        }
        loop {
            let (len, durable) = self.marks();
            if self.walked >= len {
                return Walked::Idle;
            }
            if self.walked >= history_len && !self.ctx.lock().caught_up {
                // Events that arrived during the replay wait until the handler has
                // caught up: a step plans its next attempt from the recorded history,
                // so the retry timer that fires next must not be walked before the
                // step waits for it.
                return Walked::Idle;
            }
            let seq = self.walked;
            // Visited in place, not copied: an event the execution appended itself
            // is read under the journal's lock (the actor, the only other user of
            // that lock, never takes the context's).
            let visited = self.with_event_at(&history, seq, |event| {
                if is_result(event) && seq >= durable {
                    return Visit::NotDurable;
                }
                visit(&self.ctx, seq, history_len, event)
            });
            let delivered = match visited {
                None | Some(Visit::NotDurable) => return Walked::Idle,
                Some(Visit::Diverged) => {
                    self.walked += 1;
                    return Walked::Diverged;
                }
                Some(Visit::Walked(delivered)) => delivered,
            };
            self.walked += 1;
            if delivered.resolved {
                self.settle_delivery(delivered);
                return Walked::Delivered;
            }
        }
    }

    /// Cancels the deadline of a timed wait that received its signal, and wakes
    /// the futures that received results.
    fn settle_delivery(&self, delivered: crate::slots::Delivered) {
        if let Some(wait) = &delivered.satisfied_wait {
            let due = self.ctx.lock().replay.due(wait);
            if let Some(due) = due {
                self.ctx.cancel_timer(wait, due);
            }
        }
        for w in delivered.wakers {
            w.wake();
        }
    }

    /// Marks replay as caught up once the whole history has been walked.
    fn catch_up(&mut self) -> bool {
        let history_len = self.history.len() as u64;
        let wakers = {
            let mut st = self.ctx.lock();
            if st.caught_up || self.walked < history_len {
                return false;
            }
            st.caught_up = true;
            st.slots.take_step_wakers()
        };
        for w in wakers {
            w.wake();
        }
        true
    }

    /// Ends with `outcome` (the handler returned, or continued as new): the child
    /// starts it queued begin now, caught up or not, and the outcome is reported
    /// once they are done.
    fn end_with(&mut self, outcome: Outcome, cx: &mut Context<'_>) -> Poll<Option<Outcome>> {
        let effects = std::mem::take(&mut self.ctx.lock().effects);
        self.start_effects(effects);
        self.ending = Some(outcome);
        self.end(cx)
    }

    /// Reports the handler's outcome once the child starts still under way are done.
    fn end(&mut self, cx: &mut Context<'_>) -> Poll<Option<Outcome>> {
        while let Poll::Ready(Some(_)) = self.effects.poll_next_unpin(cx) {}
        if !self.effects.is_empty() {
            return Poll::Pending;
        }
        match self.ending.take() {
            Some(o) => self.finish(o),
            None => Poll::Ready(None),
        }
    }

    fn finish(&mut self, outcome: Outcome) -> Poll<Option<Outcome>> {
        // The handler is dropped with the driver, whose `Drop` marks it closing.
        self.finished = true;
        Poll::Ready(Some(outcome))
    }
}

impl<F> Drop for Driver<F> {
    /// The handler is dropped after this: its pending waits are torn down, not
    /// abandoned by the handler, so they cancel nothing.
    fn drop(&mut self) {
        self.ctx.lock().closing = true;
    }
}

impl<F, O> Stream for Driver<F>
where
    F: Future<Output = Result<O>>,
    O: Serialize,
{
    type Item = Outcome;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outcome>> {
        let this = self.get_mut();
        this.top.polling.store(true, Ordering::Release);
        let polled = this.drive(cx);
        this.top.polling.store(false, Ordering::Release);
        // A wake that came from another thread after the last look at the flag.
        if polled.is_pending() && this.top.woken.load(Ordering::Acquire) {
            cx.waker().wake_by_ref();
        }
        polled
    }
}

impl<F, O> Driver<F>
where
    F: Future<Output = Result<O>>,
    O: Serialize,
{
    /// One poll of the execution: see [`Stream::poll_next`].
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<Option<Outcome>> {
        let this = self;
        if this.finished {
            return Poll::Ready(None);
        }
        if this.ending.is_some() {
            return this.end(cx);
        }
        this.top.task.register(cx.waker());
        if let Some(j) = &this.journal {
            j.register_waker(cx.waker());
        }
        let top = futures::task::waker(this.top.clone());
        for _ in 0..BUDGET {
            this.collect_work();
            if let Some(o) = this.poll_landings(cx) {
                return this.finish(o);
            }
            while let Poll::Ready(Some(_)) = this.effects.poll_next_unpin(cx) {}
            let due = std::mem::take(&mut this.handler_due)
                | this.top.woken.swap(false, Ordering::AcqRel);
            if due {
                let polled = this.handler.as_mut().poll(&mut Context::from_waker(&top));
                this.collect_work();
                if let Poll::Ready(result) = polled {
                    let o = this.returned(result);
                    if matches!(o, Outcome::Parked(_) | Outcome::Crashed(_)) {
                        return this.finish(o);
                    }
                    // The handler returned: what it queued starts now, caught up or not.
                    return this.end_with(o, cx);
                }
            }
            if let Some(o) = this.stopped() {
                return this.finish(o);
            }
            if let Some(o) = this.continued() {
                if matches!(o, Outcome::Parked(_)) {
                    return this.finish(o);
                }
                // As when the handler returns: what it queued starts first.
                return this.end_with(o, cx);
            }
            if this.top.woken.load(Ordering::Acquire) {
                continue;
            }
            // Quiescent: the handler has done all it can with what it has seen.
            match this.walk() {
                Walked::Delivered => {
                    this.reported = None;
                    continue;
                }
                Walked::Diverged => {
                    let o = this
                        .stopped()
                        .unwrap_or(Outcome::Crashed("diverged".into()));
                    return this.finish(o);
                }
                Walked::Idle => {}
            }
            if this.catch_up() {
                this.reported = None;
                continue;
            }
            // Only waiting (no landing, effect or body pending: `suspension`), and
            // not winding down from a pause: report it. The actor records the
            // suspension, and the appends held back for the next write (a wait's
            // `SignalAwaited`) travel with that write.
            if this.reported != Some(this.walked)
                && !this.wound_down()
                && let Some(s) = this.suspension()
            {
                this.reported = Some(this.walked);
                return Poll::Ready(Some(s));
            }
            // Idle otherwise (a step body runs on): held appends go to the store now.
            // Not once the suspension is reported: the actor's write of it takes them.
            if this.reported != Some(this.walked)
                && let Some(j) = &this.journal
            {
                j.flush_held();
            }
            if !this.landings.is_empty() {
                // A landing may have completed since it was polled.
                if let Some(o) = this.poll_landings(cx) {
                    return this.finish(o);
                }
                if this.landings.is_empty() {
                    continue;
                }
            }
            if this.wound_down() {
                return this.finish(Outcome::Paused);
            }
            return Poll::Pending;
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Runs one execution of `workflow` against `history` (the segment whose first
/// event is the run's sequence number `base`); shared by the live engine and
/// `reel::testing`. Returns the stream of outcomes and the execution's `Ctx`.
pub(crate) fn execute<W: Workflow>(
    workflow: Arc<W>,
    run: RunIdentity,
    history: Arc<Vec<Event>>,
    base: u64,
    journal: Option<Journal>,
    services: Option<Services>,
) -> (Pin<Box<dyn Stream<Item = Outcome> + Send>>, Ctx) {
    let ctx = Ctx::new(
        run,
        &history,
        base,
        journal.clone(),
        services,
        workflow.retry_policy(),
    );
    let input = match history.first() {
        Some(Event::RunStarted { input, .. }) => decode::<W::Input>(input)
            .map_err(|e| Error::Codec(format!("the run's input no longer decodes: {e}"))),
        _ => Err(Error::Codec(
            "the log does not begin with RunStarted".into(),
        )),
    };
    let input = match input {
        Ok(i) => i,
        // Parked, not failed: code that decodes the input again resumes the run.
        Err(e) => {
            let parked = Outcome::Parked(Failure::from(&e));
            return (Box::pin(futures::stream::once(async move { parked })), ctx);
        }
    };
    let handler_ctx = ctx.clone();
    let handler = Box::pin(async move { workflow.run(handler_ctx, input).await });
    let driver = Driver {
        ctx: ctx.clone(),
        journal,
        history,
        handler,
        top: Arc::new(TopWaker::default()),
        landings: VecDeque::new(),
        effects: FuturesUnordered::new(),
        walked: 1,
        reported: None,
        ending: None,
        finished: false,
        handler_due: true,
    };
    (Box::pin(driver), ctx)
}
