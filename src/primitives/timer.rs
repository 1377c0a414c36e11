//! Durable timers: `ctx.sleep` and `ctx.sleep_until`.
//!
//! `TimerScheduled` is recorded when the timer is called; the timer service wakes
//! the run when it is due and the actor records `TimerFired`, which the driver hands
//! to the timer's slot. A timer future dropped before it fired (it lost a race)
//! records `TimerCancelled` and leaves the due-time index, so it never wakes the
//! run again.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel_storage::Event;

use crate::ctx::millis;
use crate::replay::{Kind, Opened};
use crate::slots::{Key, Resolution, WaitInfo};
use crate::{Ctx, Error, Result};
use futures::future::Either;

impl Ctx {
    /// A durable sleep: survives restarts; a timer that came due while the process
    /// was down fires right after start. Any duration is accepted: one too long to
    /// represent is a timer in the far future.
    ///
    /// # Errors
    /// [`Error::Cancelled`] when the run is asked to cancel (see [`Ctx::cancelled`]),
    /// [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn sleep(&self, d: Duration) -> impl Future<Output = Result<()>> + Send + use<> {
        self.timer(self.now_ms().saturating_add(millis(d)))
    }

    /// A durable sleep until a wall-clock time.
    ///
    /// # Errors
    /// As [`Ctx::sleep`].
    pub fn sleep_until(&self, at: SystemTime) -> impl Future<Output = Result<()>> + Send + use<> {
        self.timer(at.duration_since(UNIX_EPOCH).map(millis).unwrap_or(0))
    }

    fn timer(&self, fire_at: u64) -> impl Future<Output = Result<()>> + Send + use<> {
        if let Some(e) = self.refused() {
            return Either::Left(std::future::ready(Err(e)));
        }
        let (id, opened, fire_at) = {
            let mut st = self.lock();
            let id = st.replay.positional("timer");
            let opened = st.replay.open(&id, Kind::Timer);
            let fire_at = match opened {
                Ok(Opened::Replayed) => st.replay.due(&id).unwrap_or(fire_at),
                _ => fire_at,
            };
            if opened.is_ok() {
                st.slots.register(
                    Key::Timer(id.clone()),
                    Some(WaitInfo {
                        what: format!("timer `{id}`"),
                        child: false,
                    }),
                );
            }
            (id, opened, fire_at)
        };
        if opened == Ok(Opened::New) {
            self.record(
                Event::TimerScheduled {
                    id: id.clone(),
                    fire_at,
                },
                true,
            );
        }
        let wait = self.slot(Key::Timer(id.clone()), Some((id.clone(), fire_at)));
        let ctx = self.clone();
        Either::Right(async move {
            let opened = opened?;
            if opened == Opened::New && !ctx.live() {
                return ctx.frontier(format!("timer `{id}`")).await;
            }
            match wait.await {
                Resolution::Cancelled(reason) => Err(Error::Cancelled(reason)),
                _ => Ok(()),
            }
        })
    }
}
