//! reel-postgres: reel's storage traits on PostgreSQL.
//!
//! [`PgStore`] implements every trait of `reel-storage` ([`LogWriter`](reel_storage::LogWriter),
//! [`LogReader`](reel_storage::LogReader), [`MetaReader`](reel_storage::MetaReader),
//! [`TimerReader`](reel_storage::TimerReader), [`Store`](reel_storage::Store)) with the
//! semantics of the fjall backend: compare-and-set appends on the expected sequence
//! number, one atomic transaction for a run's events, metadata, active-set entry and
//! timer changes, group commit, corrupt records reported rather than fatal. A host
//! uses it through `HostBuilder::store(store)`: [`PgStore::connect`] for the only
//! host of a database, [`PgStore::join`] for one of several (which
//! `HostBuilder::postgres(url)` does, under a host id new for each host):
//!
//! ```no_run
//! # async fn demo() -> Result<(), reel_storage::StorageError> {
//! let store = reel_postgres::PgStore::connect("postgres://reel@127.0.0.1/reel").await?;
//! // reel::Host::builder().store(store).register(...).build().await
//! # Ok(()) }
//! ```
//!
//! # Layout
//! The modules form no import circle. Leaves: `connection`, `rows` (pooled connections, sequence
//! numbers, metadata and timer scans), `membership` ([`ClusterConfig`], the
//! partitions held, the notice listener, the lease fence and inbox posts a write
//! makes), `listing`, and `schema` above it; `encoded` uses `listing`; `writer`
//! uses those; `store` uses everything below it; `cluster`, `admission` and `schedules` add trait impls to
//! [`PgStore`].
//! - `schema`: the tables, their migrations and the format check ([`SCHEMA_VERSION`]).
//! - `store`: [`PgStore`]: connection pool, sync reads, `close`.
//! - `writer`: the group-commit writer task; `encoded`: an append as it takes it
//!   (encoded on the caller's thread).
//! - `schedules`: the schedules table, written by compare-and-swap.
//! - `listing`: pages and counts of runs by index (the listing columns of
//!   `reel_runs`, their backfill).
//! - `admission`: queues admitted in the database when hosts share it
//!   ([`reel_storage::Admission`]): slots, rate window, keys, order numbers.
//! - `membership`: what a joined store knows of its hosts, and the statements a
//!   write needs of it (the lease fence, inbox posts).
//! - `cluster`: several hosts over one database ([`PgStore::join`], the `Cluster`
//!   trait): leases of partitions, the inbox.
//! - `rows`: row helpers every module shares.
//! - `connection`: what every connection is opened with: bounds on waiting for a
//!   silent server (connect timeout, TCP keepalives and send timeout), and a
//!   member's fence on stalled transactions.
//!
//! # Tables
//! - `reel_schema (key, value)`: `format` (the log format, [`reel_storage::FORMAT_VERSION`])
//!   and `schema` (the migration level). A database written by a newer build is refused.
//! - `reel_log (run_id, seq, part, record)`, primary key `(run_id, seq)`: the record
//!   bytes are exactly fjall's (MessagePack `[appended at, event]`).
//! - `reel_runs (run_id, part, meta, created_at, status, workflow, version, parent)`
//!   (the last five indexed for listing) and `reel_active (run_id, part, meta)`: metadata
//!   of every run, and of unfinished runs only (recovery reads no finished run).
//! - `reel_timers (key, run_id, part, fire_at)`: the due-time index; `key` is fjall's
//!   timer key (big-endian due time, run id, NUL, timer id), so it sorts by due time.
//!
//! - `reel_leases (part, owner, expires_at)`: who holds each partition until when;
//!   `reel_hosts (host_id, expires_at)`: the live hosts' heartbeats;
//!   `reel_inbox (id, part, run_id, mail)`: what hosts ask of runs others own.
//! - `reel_active.queue`, `reel_active.dedup_key` (unique where a key is set),
//!   `reel_queue_slots (run_id, queue, part)`, `reel_queue_starts (queue, at)` and
//!   the sequence `reel_queue_order`: queues admitted across hosts (`admission`).
//!
//! `part` is [`partition_of`] the run id, a stable hash into [`PARTITIONS`]
//! partitions: the unit several hosts share a database by.
//!
//! # Client
//! `tokio-postgres` with a `deadpool-postgres` pool, driven by a small runtime the
//! store owns. The store's reads are sync (the layers above call them from the
//! blocking pool) and its writer is a task; with its own runtime one async driver
//! serves both, a sync read from any thread (even a current-thread runtime's) never
//! deadlocks, and the store outlives the runtime that created it (a host restarted
//! on another runtime). The sync `postgres` crate would run a runtime per
//! connection and panic inside async code; sqlx brings a much larger build for
//! nothing used here.
//!
//! # Group commit and compare-and-set
//! Every append goes through a channel to one writer task, which drains what is
//! queued into one transaction: one query reads the next sequence number of every
//! run in the batch, appends whose expected sequence does not match are answered
//! with a conflict and left out, and the rest are written with one statement per
//! table and one commit (`synchronous_commit = off` when no append in the batch is
//! durable). If that transaction fails on a primary-key violation (another writer
//! took a sequence number since the check), each append of the batch is retried in
//! a transaction of its own, so only the losing append fails. Any other failure is
//! answered to the whole batch as [`StorageError::Io`](reel_storage::StorageError::Io)
//! (after a connection lost during `COMMIT` the batch may have landed: a retry would
//! misreport it).

mod admission;
mod cluster;
mod connection;
mod encoded;
mod listing;
mod membership;
mod rows;
mod schedules;
mod schema;
mod store;
mod writer;

pub use membership::ClusterConfig;
pub use reel_storage::PARTITIONS;
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;

/// The partition of a run as stored (the `part` column):
/// [`reel_storage::partition_of`].
pub fn partition_of(run_id: &str) -> i16 {
    i16::try_from(reel_storage::partition_of(run_id)).unwrap_or(0)
}

/// A tokio-postgres error as a storage error: the server's message when there is one.
pub(crate) fn pg_err(e: &tokio_postgres::Error) -> reel_storage::StorageError {
    match e.as_db_error() {
        Some(db) => reel_storage::StorageError::Io(format!(
            "postgres: {} ({})",
            db.message(),
            db.code().code()
        )),
        None => reel_storage::StorageError::Io(format!("postgres: {e}")),
    }
}

/// Whether `e` is [`pg_err`]'s report of a server error with this SQLSTATE.
pub(crate) fn has_sql_state(
    e: &reel_storage::StorageError,
    state: &tokio_postgres::error::SqlState,
) -> bool {
    matches!(e, reel_storage::StorageError::Io(m) if m.ends_with(&format!("({})", state.code())))
}

/// A prepared statement from the connection's cache: one round trip per execution
/// instead of two.
pub(crate) async fn stmt(
    c: &deadpool_postgres::ClientWrapper,
    sql: &str,
) -> Result<tokio_postgres::Statement, reel_storage::StorageError> {
    c.prepare_cached(sql).await.map_err(|e| pg_err(&e))
}

/// [`stmt`] inside a transaction.
pub(crate) async fn tx_stmt(
    tx: &deadpool_postgres::Transaction<'_>,
    sql: &str,
) -> Result<tokio_postgres::Statement, reel_storage::StorageError> {
    tx.prepare_cached(sql).await.map_err(|e| pg_err(&e))
}
