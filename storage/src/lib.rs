//! reel-storage: the durable home of every run.
//!
//! This crate owns the event model and everything that touches disk. Above it,
//! `reel-actors` drives runs and `reel` replays handlers; neither names fjall. Every
//! run's history is an append-only log of MessagePack [`Event`]s keyed by run id and
//! big-endian sequence number. Appends are compare-and-set on the expected next
//! sequence number, and are group-committed: one writer thread turns everything
//! queued into one atomic batch and one fdatasync. Metadata and the due-time index of
//! timers live in their own keyspaces and change in the same batch as the log, so
//! recovery reads neither every log nor every finished run.
//!
//! # Layout
//! - `event`: [`Event`], [`Payload`], [`Failure`] and [`AttemptError`], the encoded
//!   log records.
//! - `meta`: [`RunMeta`], [`RunState`] and [`TimerEntry`].
//! - `store`: the narrow traits ([`LogWriter`], [`LogReader`], [`MetaReader`],
//!   [`TimerReader`], [`Store`]) and the write unit [`Append`] with its [`Ticket`].
//! - `fjall_store`: [`FjallStore`], the fjall backend and its group-commit writer.
//! - `keys`: the key layout of the keyspaces and its decoders
//!   ([`encode_timer_key`], [`decode_timer_key`]).
//! - `scan`: [`Scan`] and [`CorruptRecord`]: scans return the good records and report
//!   the damaged ones, so one bad record harms one run.
//! - `mem_store`: [`MemStore`], an in-memory backend with the same contract (tests).
//! - [`testing`]: [`FaultStore`](testing::FaultStore), a wrapper that injects faults
//!   (for tests of the layers above).
//! - `validation` (feature `validation`): the contract every backend passes, as
//!   reusable checks run against fjall, [`MemStore`] and PostgreSQL.
//! - `error`: [`StorageError`].

mod error;
mod event;
mod fjall_store;
mod keys;
mod mem_store;
mod meta;
mod record;
mod scan;
mod store;
pub mod testing;
#[cfg(feature = "validation")]
pub mod validation;

pub use error::StorageError;
pub use event::{AttemptError, Event, Failure, Payload};
pub use fjall_store::{FORMAT_VERSION, FjallStore, StoreOptions, check_run_id};
pub use keys::{decode_timer_key, encode_timer_key};
pub use mem_store::MemStore;
pub use meta::{ParentLink, RunMeta, RunState, TimerEntry};
pub use record::Record;
pub use scan::{CorruptRecord, Scan};
pub use store::{
    Append, LogReader, LogSize, LogWriter, MetaReader, Result, Store, Ticket, TimerReader,
};
