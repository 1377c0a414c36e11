//! The parts of the replay differential test (`tests/replay_differential.rs`).
//!
//! # Layout
//! - `program`: the program AST (`Node`, `Program`) and how it prints.
//! - `generate`: proptest strategies for programs and their schedules (`Case`:
//!   signals, approvals, a cancel request, host restarts).
//! - `interp`: the `Interp` workflow, which runs a program and returns its trace.
//! - `harness`: hosts, restarts, deliveries, waiting for runs to end.
//! - `checks`: what must hold of a finished run, its log and its replays.
//! - `carried`: a log's segments, and the signals carried from one to the next.
//! - `shrink`: reruns and shrinks a failing case.

pub(crate) mod carried;
pub(crate) mod checks;
pub(crate) mod generate;
pub(crate) mod harness;
pub(crate) mod interp;
pub(crate) mod program;
pub(crate) mod shrink;

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How long a run may take before the test calls it a hang (a program takes well
/// under a second); `REEL_DIFF_HANG_SECS` overrides it. Also bounds each replay.
pub(crate) const HANG: Duration = Duration::from_secs(20);
/// The same while shrinking, where a hang costs one try.
pub(crate) const SHRINK_HANG: Duration = Duration::from_secs(5);

/// Coverage figures, printed at the end.
pub(crate) mod stats {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::AtomicU64;

    /// Host restarts.
    pub(crate) static RESTARTS: AtomicU64 = AtomicU64::new(0);
    /// Runs (children included) unfinished at a restart.
    pub(crate) static RUNS_CUT: AtomicU64 = AtomicU64::new(0);
    /// Runs (children included) that ended cancelled.
    pub(crate) static ENDED_CANCELLED: AtomicU64 = AtomicU64::new(0);
    /// Runs whose handler saw a cancel request and still completed.
    pub(crate) static COMPLETED_AFTER_CANCEL: AtomicU64 = AtomicU64::new(0);
    /// `ContinuedAsNew` events in the checked logs.
    pub(crate) static CONTINUED: AtomicU64 = AtomicU64::new(0);
    /// Those that carried at least one signal.
    pub(crate) static CARRIED_SOME: AtomicU64 = AtomicU64::new(0);
    /// Signals they carried.
    pub(crate) static CARRIED: AtomicU64 = AtomicU64::new(0);
    /// Carried signals a later segment's handler took.
    pub(crate) static CARRIED_CONSUMED: AtomicU64 = AtomicU64::new(0);
    /// Replays of a prefix of an older segment that continued as new.
    pub(crate) static PREFIX_CONTINUED: AtomicU64 = AtomicU64::new(0);
    /// Cancel requests carried to a new segment.
    pub(crate) static CANCEL_CARRIED: AtomicU64 = AtomicU64::new(0);
    /// How many final traces show each reaction to a cancel.
    pub(crate) static REACTIONS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
    /// What a trace line shows, for [`REACTIONS`].
    pub(crate) const MARKS: [(&str, &str); 6] = [
        ("continue refused", "continue_as_new cancelled"),
        ("select branch", "saw the cancel"),
        ("is_cancelled", "is_cancelled -> true"),
        ("shielded cleanup", "cleans up"),
        ("resumed", "resumes after the cancel"),
        ("body stopped", "stopped early"),
    ];
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn ms(n: u8) -> Duration {
    Duration::from_millis(u64::from(n))
}

pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
