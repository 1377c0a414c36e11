//! reel-actors: the live side of reel.
//!
//! One kameo actor per live run ([`RunActor`](run_actor)) owns the run's log segment,
//! drives its handler through the replay engine on every wake-up, and passivates
//! when the run only waits. Run actors are supervised with kameo's supervision
//! (transient restart policy, restart limit): a crashing run is restarted from disk,
//! and parked when it keeps crashing. A timer service wakes runs when their durable
//! timers come due. [`Core`] routes messages to runs, activating passivated ones.
//!
//! Dependencies point one way: `reel` → `reel-actors` → `reel-storage`. This crate
//! knows no workflow types: `reel` implements [`Engine`] (the replay engine for one
//! workflow name and version) and [`Registry`], and this crate calls them.
//!
//! # Layout
//! - `engine`: the seam to the replay engine: [`Engine`], [`Registry`],
//!   [`Execution`], [`Outcome`].
//! - `journal`: [`Journal`], a run's append handle (sequence numbers, timer index).
//! - `core`: [`Core`], the live-run map, routing, recovery, parking, waiters,
//!   listing; `core::children`: child-run links ([`Services`]: waited-for and
//!   detached children, signals sent by handlers) and child-cycle checks.
//! - `run_actor`: the per-run actor; `run_actor::delivery` appends what wakes a
//!   run, `run_actor::cancel` carries out cancel requests and the host's deadlines
//!   (graceful, then hard after the grace).
//! - `supervisor`: rotating kameo supervisors that park crash-looping runs.
//! - `timers`: the timer service actor.
//! - `error`: [`ActorError`].

mod blocking;
mod core;
mod engine;
mod error;
mod host;
mod journal;
mod message;
mod options;
mod run_actor;
mod services;
mod supervisor;
mod timers;
mod waiters;

pub use crate::core::{Core, Started};
pub use engine::{Engine, Execution, Outcome, Registry};
pub use error::ActorError;
pub use journal::{Journal, Landing, retry_timer_id};
pub use options::CoreOptions;
pub use run_actor::panic_message;
pub use services::Services;
pub use timers::now_ms;
