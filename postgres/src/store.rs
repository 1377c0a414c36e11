//! [`PgStore`]: the pool, the runtime that drives it, the sync reads and `close`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use reel_storage::listing::{MetaPage, RunQuery};
use reel_storage::{
    Append, Cluster, CommitListener, Event, LogReader, LogSize, LogWriter, MetaReader, Record,
    Result, RunMeta, Scan, StatusKind, StorageError, Store, Ticket, TimerEntry, TimerReader,
};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::NoTls;

use crate::connection::{bound_silences, fence_stalled_transactions};
use crate::encoded::Encoded;
use crate::membership::{ClusterConfig, Membership, listen};
use crate::rows::{get, scan_meta, scan_timers, seq_sql};
use crate::writer::{Listener, Request, writer_loop};
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
    listener: Listener,
    /// Set when the store joined a cluster ([`PgStore::join`]).
    pub(crate) member: Option<Arc<Membership>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db` or
    /// the `key=value` form), creates or upgrades reel's tables and starts the
    /// writer. The host that uses this store is the database's only host: it runs
    /// every run, with no leases (so no wait after a crash). Several hosts on one
    /// database each join it instead ([`PgStore::join`], which
    /// `reel::HostBuilder::postgres` does).
    ///
    /// # Errors
    /// [`StorageError::Io`] when the URL does not parse or the server cannot be
    /// reached; [`StorageError::IncompatibleFormat`] for a database written by
    /// another log format or a newer schema.
    pub async fn connect(url: &str) -> Result<Arc<PgStore>> {
        PgStore::open(url, None).await
    }

    /// Connects like [`PgStore::connect`] as one of several hosts sharing the
    /// database: the host that uses this store runs only the runs of the
    /// partitions it leases, and reaches the others through their owners' inboxes.
    /// The host id names this process: joining under the id of a process whose
    /// heartbeat has not run out waits for it to run out (a crashed process's
    /// does within a lease time), for up to two lease times.
    ///
    /// # Errors
    /// As [`PgStore::connect`]; [`StorageError::InvalidRunId`] for an empty host id;
    /// [`StorageError::Io`] when another live process renews the host id's
    /// heartbeat.
    pub async fn join(url: &str, cluster: ClusterConfig) -> Result<Arc<PgStore>> {
        if cluster.host_id.is_empty() || cluster.lease_ttl.is_zero() {
            return Err(StorageError::Io(
                "a cluster member needs a host id and a lease time above zero".into(),
            ));
        }
        PgStore::open(url, Some(cluster)).await
    }

    async fn open(url: &str, cluster: Option<ClusterConfig>) -> Result<Arc<PgStore>> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StorageError::Io(format!("postgres URL: {e}")))?;
        bound_silences(&mut config, cluster.as_ref().map(|c| c.lease_ttl));
        if let Some(cluster) = &cluster {
            fence_stalled_transactions(&mut config, cluster.lease_ttl);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("reel-postgres")
            .enable_all()
            .build()
            .map_err(|e| StorageError::Io(e.to_string()))?;
        let handle = runtime.handle().clone();
        let member = cluster.map(Membership::new);
        if let Some(member) = &member {
            let (ready, listening) = tokio::sync::oneshot::channel();
            handle.spawn(listen(config.clone(), member.clone(), ready));
            let _ = listening.await;
        }
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
            let member = member.clone();
            handle.spawn(async move {
                let mut client = get(&pool).await?;
                schema::migrate(&mut client).await?;
                match member {
                    Some(member) => claim_host_id(&client, &member.config).await,
                    None => Ok(()),
                }
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
        let listener: Listener = Arc::new(RwLock::new(None));
        let writer_listener = listener.clone();
        let fence = member.as_ref().map(|m| m.config.host_id.clone());
        handle.spawn(async move {
            writer_loop(writer_pool, rx, writer_listener, fence).await;
            let _ = done_tx.send(());
        });
        Ok(Arc::new(PgStore {
            runtime: Mutex::new(Some(runtime)),
            handle,
            pool,
            tx: Mutex::new(Some(tx)),
            writer_done: Mutex::new(Some(done_rx)),
            listener,
            member,
        }))
    }

    /// Runs `f` with a pooled connection on the store's runtime and waits for it;
    /// works from any thread.
    pub(crate) fn block<T, F, Fut>(&self, f: F) -> Result<T>
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

/// Takes this host's id in `reel_hosts`: a host id names one process, and two
/// processes under one id would both run its runs. A heartbeat under the id
/// that has not run out is a live process's (or, after a crash, the last
/// process's until its lease runs out): the claim waits for it to run out,
/// for up to two lease times, and then refuses to join.
async fn claim_host_id(client: &Object, config: &ClusterConfig) -> Result<()> {
    let ttl = i64::try_from(config.lease_ttl.as_millis()).unwrap_or(i64::MAX);
    let give_up = tokio::time::Instant::now() + 2 * config.lease_ttl;
    loop {
        let claimed = client
            .query(
                "INSERT INTO reel_hosts (host_id, expires_at) \
                 VALUES ($1, now() + $2::bigint * interval '1 millisecond') \
                 ON CONFLICT (host_id) DO UPDATE SET expires_at = EXCLUDED.expires_at \
                 WHERE reel_hosts.expires_at <= now() RETURNING host_id",
                &[&config.host_id, &ttl],
            )
            .await
            .map_err(|e| pg_err(&e))?;
        if !claimed.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= give_up {
            return Err(StorageError::Io(format!(
                "host id `{}` is in use: another process renews its heartbeat; each \
                 process sharing the database needs a host id of its own",
                config.host_id
            )));
        }
        tokio::time::sleep(config.lease_ttl / 8).await;
    }
}

/// A sequence number as read back.
fn seq_rust(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

impl LogWriter for PgStore {
    fn set_commit_listener(&self, listener: Arc<dyn CommitListener>) {
        if let Ok(mut l) = self.listener.write() {
            *l = Some(listener);
        }
    }

    /// One transaction: the sequence check, then every row of the run.
    fn delete(
        &self,
        run_id: &str,
        expected_seq: u64,
        created_at: u64,
        remove_timers: Vec<TimerEntry>,
    ) -> Ticket {
        if let Err(e) = reel_storage::check_run_id(run_id) {
            return Ticket::ready(Err(e));
        }
        if self.tx.lock().map(|t| t.is_none()).unwrap_or(true) {
            return Ticket::ready(Err(StorageError::Closed));
        }
        let (reply, rx) = oneshot::channel();
        let pool = self.pool.clone();
        let listener = self.listener.clone();
        let run = run_id.to_owned();
        let keys: Vec<Vec<u8>> = remove_timers
            .iter()
            .map(reel_storage::encode_timer_key)
            .collect();
        self.handle.spawn(async move {
            let outcome = async {
                let mut c = get(&pool).await?;
                let tx = c.transaction().await.map_err(|e| pg_err(&e))?;
                // The run's row, locked first: of two deletes at once (two hosts'
                // retention passes), the second waits for the first, then finds
                // the run gone and is refused, rather than deleting nothing and
                // saying it deleted the run. The reads below see what was
                // committed before the lock was taken. A run created at another
                // time took the id since the caller checked: it is refused too.
                let row = tx
                    .query_opt(
                        "SELECT meta FROM reel_runs WHERE run_id = $1 FOR UPDATE",
                        &[&run],
                    )
                    .await
                    .map_err(|e| pg_err(&e))?;
                let exists = match row {
                    Some(r) => {
                        RunMeta::decode("runs", run.as_bytes(), r.get(0))
                            .map_err(StorageError::CorruptRecord)?
                            .created_at
                            == created_at
                    }
                    None => false,
                };
                let row = tx
                    .query_one(
                        "SELECT coalesce(max(seq) + 1, 0) FROM reel_log WHERE run_id = $1",
                        &[&run],
                    )
                    .await
                    .map_err(|e| pg_err(&e))?;
                let actual = seq_rust(row.get(0));
                // An unfinished run is never removed: a delete that checked a
                // finished run and finds its id taken by a new one is refused.
                let unfinished = tx
                    .query_opt("SELECT 1 FROM reel_active WHERE run_id = $1", &[&run])
                    .await
                    .map_err(|e| pg_err(&e))?
                    .is_some();
                if !exists || actual != expected_seq || unfinished {
                    return Err(StorageError::Conflict {
                        run_id: run.clone(),
                        expected: expected_seq,
                        actual,
                    });
                }
                for sql in [
                    "DELETE FROM reel_log WHERE run_id = $1",
                    "DELETE FROM reel_runs WHERE run_id = $1",
                    "DELETE FROM reel_active WHERE run_id = $1",
                ] {
                    tx.execute(sql, &[&run]).await.map_err(|e| pg_err(&e))?;
                }
                tx.execute("DELETE FROM reel_timers WHERE key = ANY($1)", &[&keys])
                    .await
                    .map_err(|e| pg_err(&e))?;
                tx.commit().await.map_err(|e| pg_err(&e))
            }
            .await;
            if outcome.is_ok()
                && let Some(l) = listener.read().ok().and_then(|l| l.clone())
                && l.wants()
            {
                l.grew(&run, 0);
            }
            let _ = reply.send(outcome);
        });
        Ticket::pending(rx)
    }

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

    /// One indexed range scan (`listing`).
    fn list_page(&self, query: &RunQuery) -> Result<MetaPage> {
        let query = query.clone();
        self.block(move |c| async move { crate::listing::page(&c, &query).await })
    }

    /// Counts in the database by the `status` column (a scan of that index).
    fn count_by_status(&self) -> Result<BTreeMap<StatusKind, u64>> {
        self.block(|c| async move { crate::listing::counts(&c).await })
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
            Ok(scan_timers(&rows))
        })
    }
}

impl Store for PgStore {
    /// PostgreSQL's autovacuum gives the space of deleted rows back to the table;
    /// nothing to do here.
    fn reclaim(&self) -> Result<()> {
        Ok(())
    }

    fn cluster(&self) -> Option<&dyn Cluster> {
        self.member.as_ref().map(|_| self as &dyn Cluster)
    }

    /// Hosts sharing the database admit to queues in it; a store not joined
    /// leaves admission to its host, in memory.
    fn admission(&self) -> Option<&dyn reel_storage::Admission> {
        self.member
            .as_ref()
            .map(|_| self as &dyn reel_storage::Admission)
    }

    /// The server may be unreachable for a while, or end sessions: runs wait for it.
    fn outages_pass(&self) -> bool {
        true
    }

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
        if let Some(member) = &self.member {
            // Gives the leases back: the other hosts take the partitions over at
            // their next renewal instead of after the lease time.
            let me = member.config.host_id.clone();
            let pool = self.pool.clone();
            let (reply, answer) = std::sync::mpsc::channel();
            self.handle.spawn(async move {
                let released = async {
                    let c = get(&pool).await?;
                    c.execute(
                        "UPDATE reel_leases SET owner = NULL, expires_at = '-infinity' WHERE owner = $1",
                        &[&me],
                    )
                    .await
                    .map_err(|e| pg_err(&e))?;
                    c.execute("DELETE FROM reel_hosts WHERE host_id = $1", &[&me])
                        .await
                        .map_err(|e| pg_err(&e))?;
                    Ok::<_, StorageError>(())
                }
                .await;
                let _ = reply.send(released);
            });
            if let Ok(Err(e)) = answer.recv() {
                tracing::warn!(error = %e, "reel-postgres: could not give the leases back; they expire");
            }
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
