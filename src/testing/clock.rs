//! [`TestClock`]: a clock that moves only when a test says so, or, in auto mode,
//! skips ahead to the next due timer whenever every run of its hosts only waits
//! (like Temporal's time-skipping test server).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use reel_storage::{Activity, Clock, Sleep};

/// Consecutive idle readings (about a millisecond apart) before auto mode skips.
const STABLE_POLLS: u32 = 3;

/// A clock for tests: it starts at a given time and moves only by
/// [`advance`](TestClock::advance) and [`set`](TestClock::set), or, when built with
/// [`TestClock::auto`], also by itself: whenever nothing runs on the hosts built
/// with it (every run waits on a timer or a signal, no step executes, no write or
/// message is on its way) and a timer is pending, time jumps to that timer's due
/// time. A workflow that sleeps 30 days finishes in milliseconds, and its records
/// carry the virtual times.
///
/// Install it with [`HostBuilder::clock`](crate::HostBuilder::clock); clones share
/// one time, so a test keeps a clone to move it, and a host rebuilt on the same
/// store can be handed the same clock.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use reel::Clock;
/// use reel::testing::TestClock;
///
/// let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
/// clock.advance(Duration::from_secs(3600));
/// assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(1_700_003_600));
/// ```
#[derive(Clone, Debug)]
pub struct TestClock(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    auto: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    now: SystemTime,
    /// Waiting sleeps by due time. A sleep stays here until it has seen its time
    /// come (or is dropped): while one that is due has not, time must not move on.
    sleepers: BTreeMap<(SystemTime, u64), Waker>,
    next_sleeper: u64,
    /// The activity gauges of the hosts built with this clock.
    hosts: Vec<Weak<Activity>>,
    skipper: bool,
}

impl TestClock {
    /// A clock at `start` that moves only by hand.
    pub fn new(start: SystemTime) -> TestClock {
        TestClock(Arc::new(Inner {
            auto: AtomicBool::new(false),
            state: Mutex::new(State {
                now: start,
                sleepers: BTreeMap::new(),
                next_sleeper: 0,
                hosts: Vec::new(),
                skipper: false,
            }),
        }))
    }

    /// A clock at `start` that also skips ahead to the next due timer whenever
    /// every run of its hosts only waits.
    pub fn auto(start: SystemTime) -> TestClock {
        let clock = TestClock::new(start);
        clock.set_auto(true);
        clock
    }

    /// Turns skipping ahead on or off.
    pub fn set_auto(&self, on: bool) {
        self.0.auto.store(on, Ordering::Release);
    }

    /// Moves the clock `d` forward, waking what came due.
    pub fn advance(&self, d: Duration) {
        let mut st = self.0.lock();
        let to = st.now.checked_add(d).unwrap_or(st.now);
        st.move_to(to);
    }

    /// Moves the clock to `t` (it never moves back: an earlier `t` is ignored).
    pub fn set(&self, t: SystemTime) {
        self.0.lock().move_to(t);
    }

    /// The due time of the earliest pending wait on the clock (a host's next
    /// timer), if any. A host arms a run's timer once the write that schedules it
    /// has landed, a moment after the run is seen waiting (`wait_until_suspended`),
    /// and again after a reopen: poll for it rather than read it once. Moving the
    /// clock needs no such wait: a timer armed later whose time has passed fires
    /// at once.
    pub fn next_due(&self) -> Option<SystemTime> {
        self.0.lock().sleepers.keys().next().map(|k| k.0)
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn move_to(&mut self, t: SystemTime) {
        if t <= self.now {
            return;
        }
        self.now = t;
        for waker in self.sleepers.range(..=(t, u64::MAX)).map(|(_, w)| w) {
            waker.wake_by_ref();
        }
    }
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        self.0.lock().now
    }

    fn sleep_until(&self, at: SystemTime) -> Sleep {
        // Registered at once, not at its first poll: auto mode must see the wait
        // from the moment it exists.
        let mut st = self.0.lock();
        let id = (st.now < at).then(|| {
            st.next_sleeper += 1;
            let id = st.next_sleeper;
            st.sleepers.insert((at, id), Waker::noop().clone());
            id
        });
        Box::pin(TestSleep {
            clock: self.0.clone(),
            at,
            id,
        })
    }

    fn watch(&self, activity: &Arc<Activity>) {
        let mut st = self.0.lock();
        st.hosts.push(Arc::downgrade(activity));
        if !st.skipper {
            st.skipper = true;
            tokio::spawn(skip_ahead(Arc::downgrade(&self.0)));
        }
    }
}

/// Auto mode: polls the hosts' activity about every millisecond of real time and,
/// once every host has stayed idle for a few readings with nothing due unseen,
/// moves the clock to the earliest pending wait. Ends with the clock.
async fn skip_ahead(clock: Weak<Inner>) {
    let mut last_epoch = None;
    let mut stable = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let Some(inner) = clock.upgrade() else { return };
        if !inner.auto.load(Ordering::Acquire) {
            stable = 0;
            continue;
        }
        let mut st = inner.lock();
        st.hosts.retain(|h| h.strong_count() > 0);
        let hosts: Vec<Arc<Activity>> = st.hosts.iter().filter_map(Weak::upgrade).collect();
        let next = st.sleepers.keys().next().map(|k| k.0);
        let quiet = !hosts.is_empty()
            && hosts.iter().all(|h| h.is_idle())
            && next.is_some_and(|n| n > st.now);
        let epoch: u64 = hosts.iter().map(|h| h.epoch()).sum();
        if !quiet || last_epoch != Some(epoch) {
            stable = 0;
            last_epoch = Some(epoch);
            continue;
        }
        stable += 1;
        if stable >= STABLE_POLLS
            && let Some(next) = next
        {
            tracing::debug!(to = ?next, "reel: test clock skipping ahead");
            st.move_to(next);
            stable = 0;
        }
    }
}

/// A wait on a [`TestClock`], registered while pending.
struct TestSleep {
    clock: Arc<Inner>,
    at: SystemTime,
    id: Option<u64>,
}

impl Future for TestSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let clock = self.clock.clone();
        let mut st = clock.lock();
        if st.now >= self.at {
            if let Some(id) = self.id.take() {
                st.sleepers.remove(&(self.at, id));
            }
            return Poll::Ready(());
        }
        let id = match self.id {
            Some(id) => id,
            None => {
                st.next_sleeper += 1;
                let id = st.next_sleeper;
                self.id = Some(id);
                id
            }
        };
        st.sleepers.insert((self.at, id), cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for TestSleep {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.clock.lock().sleepers.remove(&(self.at, id));
        }
    }
}
