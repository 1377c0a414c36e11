//! What the API reports about runs and takes to start them: [`RunStatus`],
//! [`RunInfo`], [`StartOptions`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel_storage::{LogSize, RunMeta, RunState, StatusKind};

use crate::Error;

/// Where a run stands.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// Executing, or woken and about to.
    Running,
    /// Waiting for a timer, signal, approval or child run.
    Suspended {
        /// What it waits for.
        waiting_on: String,
    },
    /// Finished with a value.
    Completed,
    /// Finished with an error.
    Failed {
        /// The error's Display text.
        error: String,
    },
    /// Cancelled.
    Cancelled,
    /// Cannot go on with the registered code (replay divergence, version no longer
    /// registered, crash loop, unreadable log). Retried when a host opens the store.
    Parked {
        /// The error's Display text.
        error: String,
    },
    /// Paused by an operator ([`AnyRun::pause`](crate::AnyRun)): executes nothing;
    /// wake-ups are recorded and applied when it is resumed.
    Paused,
    /// Started on a queue and waiting for the queue to admit it
    /// ([`HostBuilder::queue`](crate::HostBuilder::queue)): its handler has not run.
    Enqueued,
}

impl RunStatus {
    /// The status without its data.
    pub fn kind(&self) -> StatusKind {
        match self {
            RunStatus::Running => StatusKind::Running,
            RunStatus::Suspended { .. } => StatusKind::Suspended,
            RunStatus::Completed => StatusKind::Completed,
            RunStatus::Failed { .. } => StatusKind::Failed,
            RunStatus::Cancelled => StatusKind::Cancelled,
            RunStatus::Parked { .. } => StatusKind::Parked,
            RunStatus::Paused => StatusKind::Paused,
            RunStatus::Enqueued => StatusKind::Enqueued,
        }
    }
}

impl From<&RunState> for RunStatus {
    fn from(s: &RunState) -> RunStatus {
        match s {
            RunState::Running => RunStatus::Running,
            RunState::Suspended { waiting_on, .. } => RunStatus::Suspended {
                waiting_on: waiting_on.clone(),
            },
            RunState::Completed => RunStatus::Completed,
            RunState::Failed { error } => RunStatus::Failed {
                error: Error::from(error.clone()).to_string(),
            },
            RunState::Cancelled { .. } => RunStatus::Cancelled,
            RunState::Parked { error } => RunStatus::Parked {
                error: Error::from(error.clone()).to_string(),
            },
            RunState::Paused { .. } => RunStatus::Paused,
            RunState::Enqueued => RunStatus::Enqueued,
            _ => RunStatus::Running,
        }
    }
}

/// How a run is started ([`Host::start_with`](crate::Host::start_with)).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use reel::StartOptions;
/// let on_queue = StartOptions::default().queue("emails").priority(-1);
/// let same = StartOptions { queue: Some("emails".into()), priority: -1, ..StartOptions::default() };
/// assert_eq!(on_queue, same);
/// let bounded = StartOptions { timeout: Some(Duration::from_secs(30)), ..Default::default() };
/// assert!(bounded.queue.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// After this long the run is asked to cancel, with a reason that says so
    /// (`Error::Cancelled("deadline exceeded: …")`); its handler may clean up as for
    /// any cancel. Counted from the start, across restarts.
    pub timeout: Option<Duration>,
    /// Start the run on this queue ([`HostBuilder::queue`](crate::HostBuilder::queue)):
    /// it is recorded [`RunStatus::Enqueued`] and runs once the queue admits it.
    pub queue: Option<String>,
    /// On a queue: lower values are admitted first (default 0); runs of one
    /// priority are admitted in start order.
    pub priority: i32,
    /// On a queue: while a run started with this key is enqueued or running on the
    /// queue, starting another run with it fails with
    /// [`Error::Deduplicated`](crate::Error::Deduplicated).
    pub dedup_key: Option<String>,
}

impl StartOptions {
    /// Sets [`StartOptions::timeout`].
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Sets [`StartOptions::queue`].
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue = Some(name.into());
        self
    }

    /// Sets [`StartOptions::priority`].
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Sets [`StartOptions::dedup_key`].
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }
}

/// One line of [`Host::list`](crate::Host::list) and [`Host::runs`](crate::Host::runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The run id.
    pub run_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version the run is bound to.
    pub version: u32,
    /// Where it stands.
    pub status: RunStatus,
    /// The run that started it as a child, if any.
    pub parent: Option<String>,
    /// How many times the run has continued as new (the number of its current log
    /// segment, from 0).
    pub segment: u32,
    /// When the run was started.
    pub created_at: SystemTime,
    /// When its state last changed.
    pub updated_at: SystemTime,
    /// The size of the current log segment, which every wake-up replays: filled
    /// in by [`AnyRun::info`](crate::AnyRun::info) (it reads the segment's
    /// records), `None` in listings.
    pub log: Option<LogSize>,
    /// The queue the run was started on ([`Host::start_on`](crate::Host::start_on)),
    /// if any.
    pub queue: Option<String>,
}

impl From<RunMeta> for RunInfo {
    fn from(m: RunMeta) -> RunInfo {
        RunInfo {
            status: RunStatus::from(&m.state),
            parent: m.parent.map(|p| p.run_id),
            segment: m.segment,
            created_at: UNIX_EPOCH + Duration::from_millis(m.created_at),
            updated_at: UNIX_EPOCH + Duration::from_millis(m.updated_at),
            log: None,
            queue: m.queue.map(|q| q.name),
            run_id: m.run_id,
            workflow: m.workflow,
            version: m.version,
        }
    }
}
