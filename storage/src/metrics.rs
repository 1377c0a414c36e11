//! The metrics reel reports, through the [`metrics`] facade: a service installs
//! any recorder (a Prometheus exporter, StatsD, ...) and gets them; without one
//! they cost an atomic load each. Names, in one place:
//!
//! | name | kind | what |
//! | --- | --- | --- |
//! | `reel_runs_started_total` | counter | runs created (`start`, child starts, forks) |
//! | `reel_runs_ended_total{status}` | counter | runs that completed, failed or were cancelled |
//! | `reel_runs_parked_total` | counter | runs parked (divergence, crash loop, missing version, ...) |
//! | `reel_step_attempts_total{outcome}` | counter | step attempts, `ok` or `error` |
//! | `reel_step_seconds` | histogram | how long a step attempt's body took |
//! | `reel_activation_seconds` | histogram | activating a run: spawning its actor and loading its state |
//! | `reel_live_runs` | gauge | run actors in memory (not passivated) |
//! | `reel_commit_appends` | histogram | appends per group commit |
//! | `reel_commit_seconds` | histogram | a group commit's write and fsync |
//! | `reel_commit_syncs_total` | counter | group commits of the fjall store that ended with an fdatasync (those carrying a durable append) |

/// `reel_runs_started_total`.
pub const RUNS_STARTED: &str = "reel_runs_started_total";
/// `reel_runs_ended_total{status}`.
pub const RUNS_ENDED: &str = "reel_runs_ended_total";
/// `reel_runs_parked_total`.
pub const RUNS_PARKED: &str = "reel_runs_parked_total";
/// `reel_step_attempts_total{outcome}`.
pub const STEP_ATTEMPTS: &str = "reel_step_attempts_total";
/// `reel_step_seconds`.
pub const STEP_SECONDS: &str = "reel_step_seconds";
/// `reel_activation_seconds`.
pub const ACTIVATION_SECONDS: &str = "reel_activation_seconds";
/// `reel_live_runs`.
pub const LIVE_RUNS: &str = "reel_live_runs";
/// `reel_commit_appends`.
pub const COMMIT_APPENDS: &str = "reel_commit_appends";
/// `reel_commit_seconds`.
pub const COMMIT_SECONDS: &str = "reel_commit_seconds";
/// `reel_commit_syncs_total`.
pub const COMMIT_SYNCS: &str = "reel_commit_syncs_total";
