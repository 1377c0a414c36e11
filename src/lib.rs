//! reel: durable workflows embedded in a Rust service.
//!
//! A service registers [`Workflow`] types with a [`Host`] and starts runs. Each run
//! is an actor that owns its segment of an append-only event log in an embedded
//! fjall store. On every wake-up (a timer fires, a signal arrives, a child finishes,
//! the process restarts) the run re-runs its handler from the top and the recorded
//! log steers it past finished work, so a crash loses nothing and repeats no
//! recorded step.
//!
//! Crates: `reel` (this one: the API and the replay engine) → `reel-actors` (run
//! actors, supervision, timers, passivation) → `reel-storage` (event model, fjall
//! backend, group commit). `reel-actors` calls the replay engine through its
//! `Engine` trait, so the graph stays one-way.
//!
//! # Layout
//! - `workflow`: [`Workflow`] and [`RetryPolicy`].
//! - `ctx`: [`Ctx`], [`StepCtx`], [`Approval`] and what every primitive shares (ids,
//!   slots, recording, timer cancellation).
//! - `primitives`: one file per durable primitive (step, timer, signal wait,
//!   recorded value, child run, signal to another run, patch, published value),
//!   each adding its methods to [`Ctx`].
//! - `driver`: runs an execution: polls the handler to quiescence, walks the log
//!   and makes recorded results visible one at a time, in log order; reports
//!   suspensions and the final outcome (`driver::outcome` decides which).
//! - `replay`: the synchronous, side-effect-free history index (positional
//!   matching, ids, divergence, how an unfinished step goes on).
//! - `slots`: the synchronous visibility table (which primitive a recorded result
//!   reaches, signal routing and buffering, the cancel request and the waits it
//!   ends).
//! - `child_starts`: the child starts an execution has queued and not finished,
//!   which a step body waits for (synchronous, like `slots`).
//! - `host`: [`Host`], [`HostBuilder`] and the engine of each registered workflow.
//! - `any_run`: [`AnyRun`], the untyped handle on a run (signal, cancel, status,
//!   records, children, output as any serde type): what tools hold.
//! - `handle`: [`RunHandle`], a run of a known workflow: its typed output; it
//!   dereferences to [`AnyRun`] for everything else.
//! - `listing`: [`RunFilter`], [`Page`], [`Cursor`]: [`Host::list`] and
//!   [`Host::count`] over the store's indexes.
//! - `operate`: [`AnyRun::pause`], [`AnyRun::resume`], [`AnyRun::retry`] and
//!   [`Host::fork`].
//! - `watch`: [`AnyRun::watch`], a run's log as a live stream of records.
//! - `deletion`: [`AnyRun::delete`], [`Host::enforce_retention`] and
//!   [`Host::reclaim_space`] ([`Retention`] is set on the [`HostBuilder`]).
//! - `queue`: queues ([`QueueOptions`], [`RateLimit`], `HostBuilder::queue`,
//!   [`Host::start_on`]): limits on how many runs execute at once and how fast
//!   they start.
//! - `status`: [`RunStatus`], [`RunInfo`], [`StartOptions`].
//! - `signal_start`: [`Host::signal_with_start`], a signal that creates its run
//!   when it does not exist yet.
//! - `closing`: the process-wide registry of store directories whose dropped host
//!   is still shutting down, which `HostBuilder::build` waits for.
//! - `schedule`: durable schedules ([`ScheduleSpec`], `Host::schedule` and its
//!   siblings) and the host's scheduler task.
//! - `error`: [`Error`] and [`Result`].
//! - `step_error`: [`StepError`], a step body's error saying whether a retry can
//!   help.
//! - [`testing`]: replay a recorded log without a host; [`testing::TestClock`], a
//!   clock tests move by hand or that skips ahead when every run waits.
//!
//! # Example
//! ```
//! use std::time::Duration;
//! use reel::{Ctx, Host, Workflow};
//!
//! struct Checkout;
//! impl Workflow for Checkout {
//!     const NAME: &'static str = "checkout";
//!     type Input = u32;
//!     type Output = String;
//!     async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
//!         let charge = ctx.step("charge", |s| async move {
//!             Ok::<_, String>(format!("charge-{cents}-{}", s.idempotency_key()))
//!         }).await?;
//!         ctx.sleep(Duration::from_millis(10)).await?;
//!         let paid: bool = ctx.wait_for_signal("payment").await?;
//!         Ok(format!("{charge} paid={paid}"))
//!     }
//! }
//!
//! # #[tokio::main] async fn main() -> reel::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let host = Host::builder().path(dir.path()).register(Checkout).build().await?;
//! let run = host.start::<Checkout>("order-42", 1999).await?;
//! run.signal("payment", &true, "evt-1").await?;
//! assert!(run.result().await?.ends_with("paid=true"));
//! host.shutdown().await?;
//! # Ok(()) }
//! ```

mod any_run;
mod child_starts;
mod closing;
mod ctx;
mod deletion;
mod driver;
mod error;
mod handle;
mod host;
mod listing;
mod operate;
mod primitives;
mod queue;
mod replay;
mod schedule;
mod signal_start;
mod slots;
mod status;
mod step_error;
pub mod testing;
mod watch;
mod workflow;

pub use any_run::AnyRun;
pub use ctx::{Approval, Ctx, StepCtx};
pub use error::{Error, Result};
pub use handle::RunHandle;
pub use host::{Host, HostBuilder};
pub use listing::{Cursor, Page, RunFilter};
pub use primitives::step::MAX_STEP_NAME_BYTES;
pub use queue::{QueueOptions, RateLimit};
pub use reel_actors::Retention;
/// The PostgreSQL backend (`reel-postgres`): [`postgres::PgStore`] for
/// [`HostBuilder::postgres`] and [`HostBuilder::store`], and
/// [`postgres::ClusterConfig`] for several hosts on one database. Feature
/// `postgres` (on by default).
#[cfg(feature = "postgres")]
pub use reel_postgres as postgres;
pub use reel_storage::{
    AttemptError, Clock, Event, Failure, FjallStore, LogSize, MemStore, Payload, Record,
    StatusKind, Store, SystemClock,
};
pub use schedule::{CatchUp, Overlap, ScheduleInfo, ScheduleSpec};
pub use status::{RunInfo, RunStatus, StartOptions};
pub use step_error::StepError;
pub use uuid::Uuid;
pub use workflow::{RetryPolicy, Workflow};
