//! The durable primitives, one file each. Each adds its methods to [`crate::Ctx`]
//! and goes through what they share in [`crate::ctx`]: an id and a match against
//! the log when called, a slot for its result, a future that waits for that slot.
//!
//! - `step`: [`Ctx::step`](crate::Ctx::step), [`Ctx::step_with`](crate::Ctx::step_with):
//!   a body with side effects, retried after durable backoff timers.
//! - `timer`: [`Ctx::sleep`](crate::Ctx::sleep), [`Ctx::sleep_until`](crate::Ctx::sleep_until).
//! - `signal`: [`Ctx::wait_for_signal`](crate::Ctx::wait_for_signal) and its timed
//!   form, [`Ctx::approval`](crate::Ctx::approval).
//! - `recorded`: [`Ctx::now`](crate::Ctx::now), [`Ctx::uuid`](crate::Ctx::uuid),
//!   [`Ctx::random_u64`](crate::Ctx::random_u64).
//! - `child`: [`Ctx::child`](crate::Ctx::child) and
//!   [`Ctx::start_child`](crate::Ctx::start_child) (detached).
//! - `send`: [`Ctx::signal`](crate::Ctx::signal), a signal to another run.
//! - `patch`: [`Ctx::patched`](crate::Ctx::patched),
//!   [`Ctx::deprecate_patch`](crate::Ctx::deprecate_patch): changing code under
//!   runs in flight.
//! - `continue_as_new`: [`Ctx::continue_as_new`](crate::Ctx::continue_as_new):
//!   a long-lived run starts a new log segment.
//! - `publish`: [`Ctx::publish`](crate::Ctx::publish), read with
//!   [`AnyRun::published`](crate::AnyRun::published) and
//!   [`AnyRun::wait_published`](crate::AnyRun::wait_published).

mod child;
mod continue_as_new;
mod patch;
mod publish;
mod recorded;
mod send;
mod signal;
pub(crate) mod step;
mod timer;

pub(crate) use signal::{approval_signal, check_signal_name};
