//! The timer service: one actor holding every pending timer in due-time order.
//!
//! It loads the due-time index on start (so timers that came due while the process
//! was down fire at once), takes new timers from run journals, forgets the ones
//! journals remove (cancelled timers, timers of finished runs), and wakes the owning
//! run when a timer is due. Delivery is idempotent: the run appends `TimerFired` only
//! for a timer it has neither fired nor cancelled.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kameo::actor::{Actor, ActorRef};
use kameo::error::Infallible;
use kameo::message::{Context, Message};
use reel_storage::{Activity, Busy, Clock, TimerEntry, from_ms};
use tokio::task::JoinHandle;

use crate::host::RunHost;

pub(crate) struct TimerArgs {
    pub(crate) host: Weak<dyn RunHost>,
    /// The due-time index as read by recovery (read once, used twice).
    pub(crate) timers: Vec<TimerEntry>,
    /// The host's clock: the service waits on it.
    pub(crate) clock: Arc<dyn Clock>,
    /// The host's gauge of work in flight: a timer coming due is work from the
    /// moment the clock reaches it until its deliveries are under way.
    pub(crate) activity: Arc<Activity>,
}

pub(crate) struct TimerService {
    host: Weak<dyn RunHost>,
    /// Pending timers in due-time order (a set, so removal is cheap).
    pending: BTreeSet<TimerEntry>,
    armed: Option<(u64, JoinHandle<()>)>,
    clock: Arc<dyn Clock>,
    activity: Arc<Activity>,
}

/// New timers; the guard counts the host busy until the service has armed for
/// them, so a clock that skips ahead when idle cannot skip past them.
pub(crate) struct AddTimers(pub(crate) Vec<TimerEntry>, pub(crate) Busy);
pub(crate) struct RemoveTimers(pub(crate) Vec<TimerEntry>);
/// The clock reached the armed due time; the guard keeps the host counted busy
/// until the due timers' deliveries have begun.
struct Tick(#[allow(dead_code)] Option<Busy>);

impl Actor for TimerService {
    type Args = TimerArgs;
    type Error = Infallible;

    async fn on_start(args: TimerArgs, me: ActorRef<Self>) -> Result<Self, Infallible> {
        tracing::debug!(count = args.timers.len(), "reel: timer index loaded");
        let mut service = TimerService {
            host: args.host,
            pending: args.timers.into_iter().collect(),
            armed: None,
            clock: args.clock,
            activity: args.activity,
        };
        service.arm(&me);
        Ok(service)
    }

    async fn on_stop(
        &mut self,
        _: kameo::actor::WeakActorRef<Self>,
        _: kameo::error::ActorStopReason,
    ) -> Result<(), Infallible> {
        if let Some((_, task)) = self.armed.take() {
            task.abort();
        }
        Ok(())
    }

    /// Says so (kameo is built without its own logging), then stops.
    async fn on_panic(
        &mut self,
        _: kameo::actor::WeakActorRef<Self>,
        err: kameo::error::PanicError,
    ) -> Result<std::ops::ControlFlow<kameo::error::ActorStopReason>, Infallible> {
        tracing::error!(error = %err, "reel: the timer service crashed");
        Ok(std::ops::ControlFlow::Break(
            kameo::error::ActorStopReason::Panicked(err),
        ))
    }
}

impl TimerService {
    fn arm(&mut self, me: &ActorRef<Self>) {
        let Some(next) = self.pending.first() else {
            return;
        };
        let due = next.fire_at;
        if let Some((armed_at, task)) = &self.armed {
            if *armed_at <= due && !task.is_finished() {
                return;
            }
            task.abort();
        }
        // The clock may wake the sleep early or late (a far-future timer is slept
        // on in pieces); the tick pops only what is due.
        let sleep = self.clock.sleep_until(from_ms(due));
        let activity = self.activity.clone();
        let me = me.clone();
        self.armed = Some((
            due,
            tokio::spawn(async move {
                sleep.await;
                // Counted busy before the sleep's end is seen by anyone else.
                let busy = activity.enter();
                let _ = me.tell(Tick(Some(busy))).await;
            }),
        ));
    }
}

impl Message<AddTimers> for TimerService {
    type Reply = ();

    async fn handle(&mut self, msg: AddTimers, ctx: &mut Context<Self, ()>) {
        self.pending.extend(msg.0);
        self.arm(ctx.actor_ref());
        drop(msg.1);
    }
}

impl Message<RemoveTimers> for TimerService {
    type Reply = ();

    async fn handle(&mut self, msg: RemoveTimers, ctx: &mut Context<Self, ()>) {
        for t in &msg.0 {
            self.pending.remove(t);
        }
        // Armed for a timer no longer pending: re-arm for the next one, so nothing
        // waits on the clock for a timer that will never fire (a test clock that
        // skips ahead would otherwise jump to its due time for nothing).
        let next = self.pending.first().map(|t| t.fire_at);
        if let Some((armed_at, task)) = &self.armed
            && next.is_none_or(|n| n > *armed_at)
        {
            task.abort();
            self.armed = None;
            self.arm(ctx.actor_ref());
        }
    }
}

impl Message<Tick> for TimerService {
    type Reply = ();

    async fn handle(&mut self, tick: Tick, ctx: &mut Context<Self, ()>) {
        self.armed = None;
        // The service starts while the core is still being built: a timer already
        // due at start-up must wait for it, not be popped and lost.
        let Some(host) = self.host.upgrade() else {
            let me = ctx.actor_ref().clone();
            self.armed = Some((
                0,
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let _ = me.tell(tick).await;
                }),
            ));
            return;
        };
        let now = self.clock.now_ms();
        let mut due = Vec::new();
        while self.pending.first().is_some_and(|t| t.fire_at <= now) {
            if let Some(t) = self.pending.pop_first() {
                due.push(t);
            }
        }
        for t in due {
            host.fire_timer(t);
        }
        self.arm(ctx.actor_ref());
        drop(tick);
    }
}
