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
//! - `fences`: [`WriterFences`], how a backend refuses the later appends of a
//!   writer once one of its appends was refused ([`Append::writer`]).
//! - [`listing`]: the page query of [`MetaReader::list_page`], its cursor and
//!   order.
//! - [`metrics`]: the names of the metrics reel reports (through the `metrics`
//!   facade).
//! - `keys`: the key layout of the keyspaces and its decoders
//!   ([`encode_timer_key`], [`decode_timer_key`]).
//! - `scan`: [`Scan`] and [`CorruptRecord`]: scans return the good records and report
//!   the damaged ones, so one bad record harms one run.
//! - `schedule`: [`ScheduleRecord`] and [`ScheduleStore`], durable schedules.
//! - `mem_store`: [`MemStore`], an in-memory backend with the same contract (tests).
//! - [`testing`]: [`FaultStore`](testing::FaultStore), a wrapper that injects faults
//!   (for tests of the layers above).
//! - `clock`: [`Clock`] (the time a host reads and waits on), [`SystemClock`], and
//!   [`Activity`], a host's gauge of work in flight.
//! - `validation` (feature `validation`): the contract every backend passes, as
//!   reusable checks run against fjall, [`MemStore`] and PostgreSQL.
//! - `cluster`: [`Cluster`], what a store several hosts share adds: partitions
//!   ([`partition_of`]), leases, the inbox of [`Mail`] and [`Notice`]s.
//! - `admission`: [`Admission`], what a shared store adds so that queues admit
//!   across every host (slots, rate window, de-duplication keys, order numbers).
//! - `copy`: [`copy_store`], an offline copy of a whole store into another
//!   (between any two backends).
//! - `error`: [`StorageError`].

mod admission;
mod clock;
mod cluster;
mod copy;
mod error;
mod event;
mod fences;
mod fjall_store;
mod keys;
pub mod listing;
mod mem_store;
mod meta;
pub mod metrics;
mod record;
mod scan;
mod schedule;
mod store;
pub mod testing;
#[cfg(feature = "validation")]
pub mod validation;

pub use admission::{Admission, Grant, QueueLimit, Reservation};
pub use clock::{Activity, Busy, Clock, Sleep, SystemClock, from_ms, to_ms};
pub use cluster::{Cluster, LeaseChange, Letter, Mail, Notice, PARTITIONS, partition_of};
pub use copy::{CopyError, CopyReport, copy_store};
pub use error::StorageError;
pub use event::{AttemptError, Event, Failure, Payload};
pub use fences::WriterFences;
pub use fjall_store::{
    FORMAT_VERSION, FjallStore, StoreOptions, UPGRADABLE_FORMATS, check_new_run_id, check_run_id,
};
pub use keys::{decode_timer_key, encode_timer_key};
pub use mem_store::MemStore;
pub use meta::{ParentLink, QueueEntry, RunMeta, RunState, StatusKind, TimerEntry};
pub use record::Record;
pub use scan::{CorruptRecord, Scan};
pub use schedule::{ScheduleRecord, ScheduleStore};
pub use store::{
    Append, CommitListener, LogReader, LogSize, LogWriter, MAX_TIMER_ID_BYTES, MetaReader, Result,
    Store, Ticket, TimerReader,
};
