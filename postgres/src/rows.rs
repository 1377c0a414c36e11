//! Rows to and from what the storage traits speak: a pooled connection, sequence
//! numbers as stored, metadata and timer-key scans that report corrupt rows
//! instead of failing, inbox letters. A leaf: every other module may use it.

use deadpool_postgres::{Object, Pool};
use reel_storage::{
    Letter, Mail, Result, RunMeta, Scan, StorageError, TimerEntry, decode_timer_key,
};

use crate::pg_err;

/// A connection from the pool.
///
/// # Errors
/// The server's refusal, or [`StorageError::Closed`] once the pool is closed.
pub(crate) async fn get(pool: &Pool) -> Result<Object> {
    pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(&e),
        deadpool_postgres::PoolError::Closed => StorageError::Closed,
        e => StorageError::Io(format!("postgres pool: {e}")),
    })
}

/// A sequence number as stored (`bigint`).
pub(crate) fn seq_sql(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// Decodes metadata rows `(run_id, meta)`; a row that does not decode is reported
/// in [`Scan::corrupt`], the others are returned.
pub(crate) fn scan_meta(keyspace: &str, rows: &[tokio_postgres::Row]) -> Scan<RunMeta> {
    let mut scan = Scan::default();
    for row in rows {
        let run: &str = row.get(0);
        match RunMeta::decode(keyspace, run.as_bytes(), row.get(1)) {
            Ok(meta) => scan.items.push(meta),
            Err(bad) => {
                tracing::error!(record = %bad, "reel: skipping a corrupt metadata record");
                scan.corrupt.push(bad);
            }
        }
    }
    scan
}

/// Decodes timer-index rows `(key)`; a key that does not decode is reported.
pub(crate) fn scan_timers(rows: &[tokio_postgres::Row]) -> Scan<TimerEntry> {
    let mut scan = Scan::default();
    for row in rows {
        match decode_timer_key(row.get(0)) {
            Ok(t) => scan.items.push(t),
            Err(bad) => {
                tracing::error!(record = %bad, "reel: skipping a corrupt timer key");
                scan.corrupt.push(bad);
            }
        }
    }
    scan
}

/// A letter as read from `reel_inbox` (`id, run_id, mail`); mail that does not
/// decode is the letter's error, for the drain to drop.
pub(crate) fn scan_letter(row: &tokio_postgres::Row) -> Letter {
    Letter {
        id: row.get(0),
        run_id: row.get(1),
        mail: Mail::decode(row.get(2)).map_err(|e| e.to_string()),
    }
}
