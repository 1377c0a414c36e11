//! reel-actors: the live side of reel.
//!
//! One kameo actor per live run (`RunActor`, in `run_actor`) owns the run's log segment,
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
//! The modules form no import circle. From the bottom up (each uses only modules
//! listed before it):
//! - leaves: `error` ([`ActorError`]), `options` ([`CoreOptions`]), `message` (what
//!   a run actor receives: `Resume`, `Delivery`, `StopRun`), `waiters` (callers
//!   waiting on runs), `blocking` (storage calls off the async workers),
//!   `passivation` (one queue that passivates idle run actors), `log_watch`
//!   ([`LogWatch`]: told when a watched run's log grows), `retention`
//!   ([`Retention`]), `queues` (queues' admission state: [`QueueLimits`]),
//!   `asking` (asks that never wait on an actor that stopped for good).
//! - `host`: `RunHost`, the narrow interface that everything below the core holds
//!   (weakly) instead of the [`Core`]; the core implements it.
//! - `journal`: [`Journal`], a run's append handle over its current log segment
//!   (sequence numbers, timer index); `journal::index`, the lookups a delivery
//!   makes (timers created and settled, signals received, children called);
//!   `journal::dry`, a journal that keeps its appends (a new run's first execution,
//!   before the run's first write).
//! - `services`: [`Services`], what a handler asks of its host (child runs, signals),
//!   held back while the execution's journal is dry.
//! - `timers`: the timer service actor. `supervisor`: rotating kameo supervisors
//!   that park crash-looping runs.
//! - `engine`: the seam to the replay engine: [`Engine`], [`Registry`],
//!   [`Execution`], [`Outcome`].
//! - `run_actor`: the per-run actor; `run_actor::delivery` appends what wakes a
//!   run, `run_actor::cancel` carries out cancel requests and the host's deadlines
//!   (graceful, then hard after the grace), `run_actor::segment` ends a log segment
//!   and begins the next when the handler continues as new, `run_actor::fresh` a
//!   new run as its first write left it (its first execution included),
//!   `run_actor::messages` the messages it takes from outside (a run whose log
//!   cannot be read takes only a cancel).
//! - `fresh_runs`: new runs' states from their first write to their first actor,
//!   dropped as stale once another actor was spawned for the run meanwhile.
//! - `core`: [`Core`] at the top: `core::recovery` (start-up), `core::activation`
//!   (live-run map, supervisors), `core::routing` (deliveries, wake-ups),
//!   `core::parking`, `core::waiters`, `core::published`, `core::children`
//!   (child-run links, child cycles), `core::subscriptions` (who waits on which
//!   child in this host), `core::cluster` (leases, with a shared
//!   store), `core::inbox` (mail from other hosts), `core::listing`, `core::reading` (a run's
//!   log, records and watches), `core::queueing` (starting runs on queues and
//!   admitting them), `core::starting` (a start, a new run's first write),
//!   `core::eager` (a new run's first execution, before its first write),
//!   `core::run_host` (the core as `RunHost`).

mod asking;
mod blocking;
mod core;
mod engine;
mod error;
mod fresh_runs;
mod host;
mod journal;
mod log_watch;
mod message;
mod options;
mod passivation;
mod queues;
mod retention;
mod run_actor;
mod services;
mod supervisor;
mod timers;
mod waiters;

pub use crate::core::{Core, QueuePlace, Started};
pub use engine::{Engine, Execution, Outcome, Registry};
pub use error::ActorError;
pub use journal::{Journal, Landing, retry_timer_id};
pub use log_watch::LogWatch;
pub use message::ChildCall;
pub use options::CoreOptions;
pub use queues::QueueLimits;
pub use retention::Retention;
pub use run_actor::panic_message;
pub use services::Services;
