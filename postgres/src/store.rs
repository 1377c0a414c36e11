//! [`PgStore`]: the pool, the runtime that drives it, the sync reads and `close`.

use std::future::Future;
use std::sync::{Arc, Mutex};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use reel_storage::{
    Append, Event, LogReader, LogSize, LogWriter, MetaReader, Record, Result, RunMeta, Scan,
    StorageError, Store, Ticket, TimerEntry, TimerReader, decode_timer_key,
};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::NoTls;

use crate::writer::{Encoded, Request, writer_loop};
use crate::{pg_err, schema, stmt};

/// Connections of the pool: the writer holds one, reads share the rest.
const POOL_SIZE: usize = 8;

/// The PostgreSQL implementation of [`Store`].
pub struct PgStore {
    runtime: Mutex<Option<Runtime>>,
    handle: Handle,
    pool: Pool,
    tx: Mutex<Option<mpsc::UnboundedSender<Request>>>,
    writer_done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db` or
    /// the `key=value` form), creates or upgrades reel's tables and starts the
    /// writer.
    ///
    /// # Errors
    /// [`StorageError::Io`] when the URL does not parse or the server cannot be
    /// reached; [`StorageError::IncompatibleFormat`] for a database written by
    /// another log format or a newer schema.
    pub async fn connect(url: &str) -> Result<Arc<PgStore>> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StorageError::Io(format!("postgres URL: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("reel-postgres")
            .enable_all()
            .build()
            .map_err(|e| StorageError::Io(e.to_string()))?;
        let handle = runtime.handle().clone();
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| StorageError::Io(e.to_string()))?;
        let setup = {
            let pool = pool.clone();
            handle.spawn(async move {
                let mut client = get(&pool).await?;
                schema::migrate(&mut client).await
            })
        };
        let outcome = match setup.await {
            Ok(r) => r,
            Err(e) => Err(StorageError::Io(e.to_string())),
        };
        if let Err(e) = outcome {
            runtime.shutdown_background();
            return Err(e);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let writer_pool = pool.clone();
        handle.spawn(async move {
            writer_loop(writer_pool, rx).await;
            let _ = done_tx.send(());
        });
        Ok(Arc::new(PgStore {
            runtime: Mutex::new(Some(runtime)),
            handle,
            pool,
            tx: Mutex::new(Some(tx)),
            writer_done: Mutex::new(Some(done_rx)),
        }))
    }

    /// Runs `f` with a pooled connection on the store's runtime and waits for it;
    /// works from any thread.
    fn block<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + Send,
    {
        if self.tx.lock().map_err(|_| StorageError::Closed)?.is_none() {
            return Err(StorageError::Closed);
        }
        let (reply, answer) = std::sync::mpsc::channel();
        let pool = self.pool.clone();
        self.handle.spawn(async move {
            let result = match get(&pool).await {
                Ok(client) => f(client).await,
                Err(e) => Err(e),
            };
            let _ = reply.send(result);
        });
        answer.recv().unwrap_or(Err(StorageError::Closed))
    }
}

/// A connection from the pool.
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

fn seq_rust(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

impl LogWriter for PgStore {
    fn submit(&self, append: Append) -> Ticket {
        let append = match Encoded::new(append) {
            Ok(a) => a,
            Err(e) => return Ticket::ready(Err(e)),
        };
        let (reply, rx) = oneshot::channel();
        let Ok(guard) = self.tx.lock() else {
            return Ticket::ready(Err(StorageError::Closed));
        };
        match guard.as_ref() {
            Some(tx) if tx.send(Request { append, reply }).is_ok() => Ticket::pending(rx),
            _ => Ticket::ready(Err(StorageError::Closed)),
        }
    }
}

impl LogReader for PgStore {
    fn read_log(&self, run_id: &str) -> Result<Vec<Event>> {
        self.read_log_from(run_id, 0)
    }

    fn read_log_from(&self, run_id: &str, from: u64) -> Result<Vec<Event>> {
        Ok(self
            .read_records(run_id, from)?
            .into_iter()
            .map(|r| r.event)
            .collect())
    }

    fn read_records(&self, run_id: &str, from: u64) -> Result<Vec<Record>> {
        let run = run_id.to_owned();
        self.block(move |c| async move {
            let rows = c
                .query(
                    &stmt(
                        &c,
                        "SELECT seq, record FROM reel_log WHERE run_id = $1 AND seq >= $2 \
                     ORDER BY seq",
                    )
                    .await?,
                    &[&run, &seq_sql(from)],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            let mut records = Vec::with_capacity(rows.len());
            for (next, row) in (from..).zip(&rows) {
                let seq = seq_rust(row.get(0));
                if seq != next {
                    return Err(StorageError::Corrupt {
                        run_id: run,
                        seq: next,
                        reason: format!("missing record (next present is {seq})"),
                    });
                }
                records.push(Record::decode(row.get(1), &run, seq)?);
            }
            Ok(records)
        })
    }

    fn log_size(&self, run_id: &str, from: u64) -> Result<LogSize> {
        let run = run_id.to_owned();
        self.block(move |c| async move {
            // Bytes as fjall counts them: key (run id, NUL, 8-byte sequence) + value.
            let row = c
                .query_one(
                    &stmt(
                        &c,
                        "SELECT count(*), coalesce(sum(octet_length(record) + octet_length(run_id) \
                     + 9), 0)::bigint FROM reel_log WHERE run_id = $1 AND seq >= $2",
                    )
                    .await?,
                    &[&run, &seq_sql(from)],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(LogSize {
                events: seq_rust(row.get(0)),
                bytes: seq_rust(row.get(1)),
            })
        })
    }

    fn last_event(&self, run_id: &str) -> Result<Option<(u64, Event)>> {
        let run = run_id.to_owned();
        self.block(move |c| async move {
            let row = c.query_opt(
                    &stmt(&c, "SELECT seq, record FROM reel_log WHERE run_id = $1 ORDER BY seq DESC LIMIT 1").await?,
                    &[&run],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            match row {
                None => Ok(None),
                Some(row) => {
                    let seq = seq_rust(row.get(0));
                    Ok(Some((seq, Record::decode(row.get(1), &run, seq)?.event)))
                }
            }
        })
    }

    fn next_seq(&self, run_id: &str) -> Result<u64> {
        let run = run_id.to_owned();
        self.block(move |c| async move {
            let row = c
                .query_one(
                    &stmt(
                        &c,
                        "SELECT coalesce(max(seq) + 1, 0) FROM reel_log WHERE run_id = $1",
                    )
                    .await?,
                    &[&run],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(seq_rust(row.get(0)))
        })
    }
}

/// Decodes `(run_id, meta)` rows of `reel_runs` or `reel_active`; one that does not
/// decode is reported, not fatal.
fn scan_meta(keyspace: &str, rows: &[tokio_postgres::Row]) -> Scan<RunMeta> {
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

impl MetaReader for PgStore {
    fn get_run(&self, run_id: &str) -> Result<Option<RunMeta>> {
        let run = run_id.to_owned();
        self.block(move |c| async move {
            let row = c
                .query_opt(
                    &stmt(&c, "SELECT meta FROM reel_runs WHERE run_id = $1").await?,
                    &[&run],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            row.map(|r| {
                RunMeta::decode("runs", run.as_bytes(), r.get(0))
                    .map_err(StorageError::CorruptRecord)
            })
            .transpose()
        })
    }

    fn list_runs(&self) -> Result<Scan<RunMeta>> {
        self.block(|c| async move {
            let rows = c
                .query(
                    &stmt(&c, "SELECT run_id, meta FROM reel_runs ORDER BY run_id").await?,
                    &[],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(scan_meta("runs", &rows))
        })
    }

    fn unfinished_runs(&self) -> Result<Scan<RunMeta>> {
        self.block(|c| async move {
            let rows = c
                .query(
                    &stmt(&c, "SELECT run_id, meta FROM reel_active ORDER BY run_id").await?,
                    &[],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(scan_meta("active", &rows))
        })
    }
}

impl TimerReader for PgStore {
    fn timers(&self) -> Result<Scan<TimerEntry>> {
        self.block(|c| async move {
            let rows = c
                .query(
                    &stmt(&c, "SELECT key FROM reel_timers ORDER BY key").await?,
                    &[],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            let mut scan = Scan::default();
            for row in &rows {
                match decode_timer_key(row.get(0)) {
                    Ok(t) => scan.items.push(t),
                    Err(bad) => {
                        tracing::error!(record = %bad, "reel: skipping a corrupt timer key");
                        scan.corrupt.push(bad);
                    }
                }
            }
            Ok(scan)
        })
    }
}

impl Store for PgStore {
    fn close(&self) {
        // Dropping the sender ends the writer once the queue is drained.
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Ok(mut done) = self.writer_done.lock()
            && let Some(done) = done.take()
        {
            let _ = done.recv();
        }
        self.pool.close();
        if let Ok(mut rt) = self.runtime.lock()
            && let Some(rt) = rt.take()
        {
            // Never blocks, so closing from async code is fine.
            rt.shutdown_background();
        }
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.close();
    }
}
