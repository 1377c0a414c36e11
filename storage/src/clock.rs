//! [`Clock`]: where a host reads the time and waits for it, and [`Activity`], the
//! gauge of work in flight a host keeps so that a test clock can tell when every
//! run only waits.
//!
//! Everything that decides *when* something is due reads the host's clock: the
//! timer service, `ctx.now()`, retry backoffs, deadlines, and the times stamped on
//! log records ([`Append::at`](crate::Append::at)). [`SystemClock`] is the default;
//! `reel::testing::TestClock` is a clock that moves only when told to (or, in auto
//! mode, when every run waits).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A future a [`Clock`] hands out to wait for a time.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The time as a host sees it.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Now.
    fn now(&self) -> SystemTime;

    /// A future that completes once [`Clock::now`] has reached `at` (at once if it
    /// has). It may complete a little late, never early.
    fn sleep_until(&self, at: SystemTime) -> Sleep;

    /// Called once by each host built on this clock with the host's [`Activity`]:
    /// a clock that moves by itself when the host is idle watches it. The default
    /// ignores it.
    fn watch(&self, activity: &Arc<Activity>) {
        let _ = activity;
    }

    /// Milliseconds since the Unix epoch, now (0 before the epoch).
    fn now_ms(&self) -> u64 {
        to_ms(self.now())
    }
}

/// Milliseconds since the Unix epoch of `t` (0 before the epoch, saturating).
pub fn to_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time `ms` milliseconds after the Unix epoch.
pub fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 1000))
}

/// The operating system's clock, waited on with tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep_until(&self, at: SystemTime) -> Sleep {
        let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
        Box::pin(async move {
            if !wait.is_zero() {
                // A wait too long for tokio's timer is cut to a year: callers re-check.
                tokio::time::sleep(wait.min(Duration::from_secs(365 * 24 * 3600))).await;
            }
        })
    }
}

/// A host's gauge of work in flight: run executions that are not only waiting,
/// messages on their way to runs, timers being fired. Cheap: two atomics.
#[derive(Debug, Default)]
pub struct Activity {
    busy: AtomicUsize,
    /// Bumped on every [`Activity::enter`]: equal readings with no work in flight
    /// in between mean nothing happened.
    epoch: AtomicU64,
}

impl Activity {
    /// Marks work in flight until the returned guard is dropped.
    pub fn enter(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Whether no work is in flight.
    pub fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }

    /// How many times work began.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// Work in flight on an [`Activity`], until dropped.
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}
