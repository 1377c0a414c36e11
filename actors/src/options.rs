//! [`CoreOptions`]: the tuning of a host's core, also read by its run actors. A leaf.

use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use crate::queues::QueueLimits;
use crate::retention::Retention;
use reel_storage::{Clock, SystemClock};

/// Tuning of a [`Core`](crate::Core).
#[derive(Clone, Debug)]
pub struct CoreOptions {
    /// How long a suspended run keeps its actor (and decoded log) before it is
    /// passivated: actor stopped, state left on disk.
    pub passivate_after: Duration,
    /// Restarts of a crashing run actor allowed within `restart_window` before the
    /// run is parked.
    pub restart_limit: u32,
    /// See `restart_limit`.
    pub restart_window: Duration,
    /// Activations running at once during recovery and timer storms; as many new
    /// runs may be activating at once before `start` waits for one.
    pub activation_concurrency: usize,
    /// How long a cancelled run's handler may go on cleaning up before it is
    /// cancelled hard. Zero cancels at once.
    pub cancel_grace: Duration,
    /// A run whose current log segment grows past this many events gets a
    /// `tracing` warning (once per activation): every wake-up replays the whole
    /// segment, so a run that loops for ever should continue as new.
    pub long_log_events: u64,
    /// How long finished runs are kept (for ever by default).
    pub retention: Retention,
    /// The clock everything due reads: timers, deadlines, backoffs, the times on
    /// records ([`SystemClock`] by default).
    pub clock: Arc<dyn Clock>,
    /// The queues runs may be started on, by name, with their limits.
    pub queues: HashMap<String, QueueLimits>,
}

impl Default for CoreOptions {
    fn default() -> Self {
        CoreOptions {
            passivate_after: Duration::from_secs(10),
            restart_limit: 3,
            restart_window: Duration::from_secs(30),
            activation_concurrency: 256,
            cancel_grace: Duration::from_secs(30),
            long_log_events: 10_000,
            retention: Retention::default(),
            clock: Arc::new(SystemClock),
            queues: HashMap::new(),
        }
    }
}
