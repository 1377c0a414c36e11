//! [`Retention`]: how long finished runs are kept before the host deletes them in
//! the background. A leaf.

use std::time::Duration;

use reel_storage::StatusKind;

/// How long finished runs are kept. The default keeps every run for ever; each
/// kind of end has its own duration, counted from when the run ended.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use reel_actors::Retention;
/// let week = Duration::from_secs(7 * 24 * 3600);
/// let r = Retention::keep_all().completed_after(week).cancelled_after(week);
/// assert!(r.failed.is_none()); // failures are kept unless said otherwise
///
/// // Or as a struct, the rest from the default:
/// let r = Retention { completed: Some(week), ..Retention::default() };
/// assert_eq!(r.every, Duration::from_secs(60));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Delete completed runs this long after they completed.
    pub completed: Option<Duration>,
    /// Delete failed runs this long after they failed (kept by default: they are
    /// what operators look for).
    pub failed: Option<Duration>,
    /// Delete cancelled runs this long after they were cancelled.
    pub cancelled: Option<Duration>,
    /// How often the background pass runs.
    pub every: Duration,
    /// Runs examined per kind of end in one pass: the bound on a pass's work.
    pub per_pass: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention::keep_all()
    }
}

impl Retention {
    /// Keeps every run (the default).
    pub fn keep_all() -> Retention {
        Retention {
            completed: None,
            failed: None,
            cancelled: None,
            every: Duration::from_secs(60),
            per_pass: 1_000,
        }
    }

    /// Deletes completed runs `d` after they completed.
    pub fn completed_after(mut self, d: Duration) -> Retention {
        self.completed = Some(d);
        self
    }

    /// Deletes failed runs `d` after they failed.
    pub fn failed_after(mut self, d: Duration) -> Retention {
        self.failed = Some(d);
        self
    }

    /// Deletes cancelled runs `d` after they were cancelled.
    pub fn cancelled_after(mut self, d: Duration) -> Retention {
        self.cancelled = Some(d);
        self
    }

    /// Sets how often the background pass runs.
    pub fn every(mut self, d: Duration) -> Retention {
        self.every = d;
        self
    }

    /// Sets how many runs of each kind of end one pass examines at most.
    pub fn per_pass(mut self, n: usize) -> Retention {
        self.per_pass = n.max(1);
        self
    }

    /// Whether anything is ever deleted.
    pub fn deletes(&self) -> bool {
        self.kept().any(|(_, d)| d.is_some())
    }

    /// Each kind of end with how long it is kept.
    pub(crate) fn kept(&self) -> impl Iterator<Item = (StatusKind, Option<Duration>)> {
        [
            (StatusKind::Completed, self.completed),
            (StatusKind::Failed, self.failed),
            (StatusKind::Cancelled, self.cancelled),
        ]
        .into_iter()
    }
}
