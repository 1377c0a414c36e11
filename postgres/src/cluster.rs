//! Several hosts over one database: [`ClusterConfig`], the leases of partitions,
//! the inbox, and the connection that listens for notices.
//!
//! Leases (`reel_leases`, one row per partition) are held by a host id until an
//! expiry computed by the database's clock, so hosts' clocks never matter. A host
//! renews its leases and heartbeat (`reel_hosts`) at a third of the lease time and
//! takes free or expired partitions up to its fair share (partitions / live hosts,
//! rounded up); past it, it reports the surplus, which the host gives back once
//! their runs are stopped. Taking a partition locks its row `FOR UPDATE SKIP
//! LOCKED`, and every write transaction of a run that is not being created locks
//! its partition's row `FOR KEY SHARE` where `owner` is this host: a takeover waits
//! for (skips) a write under way, and a write after a takeover finds another owner
//! and is refused with [`StorageError::NotOwner`]. Creating a run needs no lease:
//! the sequence check on the new log decides. Its partition's row is locked all
//! the same, and when the creator does not hold it the transaction posts a
//! wake-up to the owner's inbox (whether or not the creator knew it was not the
//! owner), so a run is never created where neither its creator nor the owner's
//! last scan of the partition sees it.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use reel_storage::{
    Cluster, LeaseChange, Letter, Mail, Notice, PARTITIONS, Result, RunMeta, Scan, StorageError,
    TimerEntry, check_run_id,
};
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::store::{PgStore, scan_meta, scan_timers};
use crate::{partition_of, pg_err, stmt};

/// How a [`PgStore`] joins the hosts sharing its database.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// This host's id: unique among the hosts sharing the database, and new for each
    /// process (a restarted host is a new host; its old leases expire).
    pub host_id: String,
    /// How long a lease lasts unless renewed: how soon the others take the runs of
    /// a host that died over. Hosts renew at a third of it.
    pub lease_ttl: Duration,
}

impl ClusterConfig {
    /// A host with this id and a 10 s lease.
    pub fn new(host_id: impl Into<String>) -> ClusterConfig {
        ClusterConfig {
            host_id: host_id.into(),
            lease_ttl: Duration::from_secs(10),
        }
    }

    /// Sets the lease time.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> ClusterConfig {
        self.lease_ttl = ttl;
        self
    }
}

/// A store's part in the cluster: its id, the leases it holds, the notices heard.
pub(crate) struct Membership {
    pub(crate) config: ClusterConfig,
    held: RwLock<BTreeSet<u16>>,
    notices: broadcast::Sender<Notice>,
}

impl Membership {
    pub(crate) fn new(config: ClusterConfig) -> Arc<Membership> {
        Arc::new(Membership {
            config,
            held: RwLock::new(BTreeSet::new()),
            notices: broadcast::channel(4096).0,
        })
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.config.lease_ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Partitions as stored (`smallint`).
fn parts_sql(parts: &BTreeSet<u16>) -> Vec<i16> {
    parts
        .iter()
        .filter_map(|p| i16::try_from(*p).ok())
        .collect()
}

fn parts_rust(rows: &[tokio_postgres::Row]) -> BTreeSet<u16> {
    rows.iter()
        .filter_map(|r| u16::try_from(r.get::<_, i16>(0)).ok())
        .collect()
}

/// Listens for `reel_inbox`, `reel_changed` and `reel_queue` notifications and hands them out as
/// [`Notice`]s; reconnects after a second when the connection drops, telling
/// [`Notice::Missed`] (what was sent meanwhile is lost).
pub(crate) async fn listen(
    config: tokio_postgres::Config,
    notices: Arc<Membership>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let tx = notices.notices.clone();
    drop(notices);
    // Told once the first attempt to listen is over, so a joined store listens
    // before `join` returns (unless the server refuses).
    let mut ready = Some(ready);
    loop {
        if let Ok((client, mut conn)) = config.connect(NoTls).await {
            let (ntx, mut nrx) = tokio::sync::mpsc::unbounded_channel();
            let driver = tokio::spawn(async move {
                while let Some(Ok(message)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await
                {
                    if let AsyncMessage::Notification(n) = message
                        && ntx.send(n).is_err()
                    {
                        break;
                    }
                }
            });
            let listening = client
                .batch_execute("LISTEN reel_inbox; LISTEN reel_changed; LISTEN reel_queue")
                .await
                .is_ok();
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            if listening {
                let _ = tx.send(Notice::Missed);
                while let Some(n) = nrx.recv().await {
                    let notice = match n.channel() {
                        "reel_inbox" => n.payload().parse().ok().map(Notice::Mail),
                        "reel_queue" => Some(Notice::Queue(n.payload().to_owned())),
                        _ => Some(Notice::Changed(n.payload().to_owned())),
                    };
                    if let Some(notice) = notice {
                        let _ = tx.send(notice);
                    }
                }
            }
            driver.abort();
        }
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        let _ = tx.send(Notice::Missed);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl PgStore {
    fn membership(&self) -> Result<Arc<Membership>> {
        self.member
            .clone()
            .ok_or_else(|| StorageError::Io("this PgStore joined no cluster".into()))
    }
}

impl Cluster for PgStore {
    fn host_id(&self) -> &str {
        self.member
            .as_ref()
            .map_or("", |m| m.config.host_id.as_str())
    }

    fn lease_ttl(&self) -> Duration {
        self.member
            .as_ref()
            .map_or(Duration::from_secs(10), |m| m.config.lease_ttl)
    }

    fn holds(&self, partition: u16) -> bool {
        self.member.as_ref().is_some_and(|m| {
            m.held
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&partition)
        })
    }

    fn held(&self) -> BTreeSet<u16> {
        self.member.as_ref().map_or_else(BTreeSet::new, |m| {
            m.held.read().unwrap_or_else(|p| p.into_inner()).clone()
        })
    }

    fn renew(&self) -> Result<LeaseChange> {
        let member = self.membership()?;
        let me = member.config.host_id.clone();
        let ttl = member.ttl_ms();
        let (renewed, gained, live) = self.block(move |mut c| async move {
            let tx = c.transaction().await.map_err(|e| pg_err(&e))?;
            tx.execute(
                "INSERT INTO reel_hosts (host_id, expires_at) \
                 VALUES ($1, now() + $2::bigint * interval '1 millisecond') \
                 ON CONFLICT (host_id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                &[&me, &ttl],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            let live: i64 = tx
                .query_one(
                    "SELECT count(*) FROM reel_hosts WHERE expires_at > now()",
                    &[],
                )
                .await
                .map_err(|e| pg_err(&e))?
                .get(0);
            let renewed = tx
                .query(
                    "UPDATE reel_leases SET expires_at = now() + $2::bigint * interval '1 millisecond' \
                     WHERE owner = $1 RETURNING part",
                    &[&me, &ttl],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            let renewed = parts_rust(&renewed);
            let live_hosts = live.max(1);
            let share = (i64::from(PARTITIONS) + live_hosts - 1) / live_hosts;
            let want = share - i64::try_from(renewed.len()).unwrap_or(0);
            let gained = if want > 0 {
                let rows = tx
                    .query(
                        "UPDATE reel_leases SET owner = $1, \
                         expires_at = now() + $2::bigint * interval '1 millisecond' \
                         WHERE part IN (SELECT part FROM reel_leases \
                           WHERE owner IS NULL OR (expires_at < now() AND owner <> $1) \
                           ORDER BY part LIMIT $3 FOR UPDATE SKIP LOCKED) \
                         RETURNING part",
                        &[&me, &ttl, &want],
                    )
                    .await
                    .map_err(|e| pg_err(&e))?;
                parts_rust(&rows)
            } else {
                BTreeSet::new()
            };
            tx.commit().await.map_err(|e| pg_err(&e))?;
            Ok((renewed, gained, live))
        })?;
        let mut held = member.held.write().unwrap_or_else(|p| p.into_inner());
        let lost: BTreeSet<u16> = held.difference(&renewed).copied().collect();
        // Renewed rows this host did not know it held are its own from before
        // (a renewal whose answer was lost): gained too.
        let gained: BTreeSet<u16> = gained
            .into_iter()
            .chain(renewed.difference(&held).copied())
            .collect();
        *held = renewed.union(&gained).copied().collect();
        let share = usize::from(PARTITIONS).div_ceil(usize::try_from(live.max(1)).unwrap_or(1));
        let surplus = held
            .iter()
            .rev()
            .take(held.len().saturating_sub(share))
            .copied()
            .collect();
        Ok(LeaseChange {
            held: held.clone(),
            gained,
            lost,
            surplus,
        })
    }

    fn release(&self, partitions: &BTreeSet<u16>) -> Result<()> {
        let member = self.membership()?;
        {
            let mut held = member.held.write().unwrap_or_else(|p| p.into_inner());
            for p in partitions {
                held.remove(p);
            }
        }
        let me = member.config.host_id.clone();
        let parts = parts_sql(partitions);
        self.block(move |c| async move {
            c.execute(
                "UPDATE reel_leases SET owner = NULL, expires_at = '-infinity' \
                 WHERE owner = $1 AND part = ANY($2)",
                &[&me, &parts],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            Ok(())
        })
    }

    fn post(&self, run_id: &str, mail: &Mail) -> Result<()> {
        check_run_id(run_id)?;
        let bytes = mail.encode()?;
        let run = run_id.to_owned();
        let part = partition_of(run_id);
        self.block(move |c| async move {
            c.execute(
                &stmt(
                    &c,
                    "WITH posted AS (INSERT INTO reel_inbox (part, run_id, mail) \
                     VALUES ($1, $2, $3) RETURNING part) \
                     SELECT pg_notify('reel_inbox', part::text) FROM posted",
                )
                .await?,
                &[&part, &run, &bytes],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            Ok(())
        })
    }

    fn letters(&self, partitions: &BTreeSet<u16>, limit: usize) -> Result<Vec<Letter>> {
        let me = self.membership()?.config.host_id.clone();
        let parts = parts_sql(partitions);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.block(move |c| async move {
            // Only partitions the database says this host holds: a host that has not
            // yet heard that a partition was taken from it leaves its mail alone.
            let rows = c
                .query(
                    &stmt(
                        &c,
                        "SELECT i.id, i.run_id, i.mail FROM reel_inbox i \
                         JOIN reel_leases l ON l.part = i.part AND l.owner = $3 \
                         WHERE i.part = ANY($1) ORDER BY i.id LIMIT $2",
                    )
                    .await?,
                    &[&parts, &limit, &me],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(rows
                .iter()
                .map(|r| Letter {
                    id: r.get(0),
                    run_id: r.get(1),
                    mail: Mail::decode(r.get(2)).map_err(|e| e.to_string()),
                })
                .collect())
        })
    }

    fn ack(&self, ids: &[i64]) -> Result<()> {
        let me = self.membership()?.config.host_id.clone();
        let ids = ids.to_vec();
        self.block(move |c| async move {
            // Letters of a partition taken from this host since they were read stay
            // for the new owner (what was applied here may have been refused).
            c.execute(
                "DELETE FROM reel_inbox i USING reel_leases l \
                 WHERE i.id = ANY($1) AND l.part = i.part AND l.owner = $2",
                &[&ids, &me],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            Ok(())
        })
    }

    fn unfinished_in(&self, partitions: &BTreeSet<u16>) -> Result<Scan<RunMeta>> {
        let parts = parts_sql(partitions);
        self.block(move |c| async move {
            let rows = c
                .query(
                    "SELECT run_id, meta FROM reel_active WHERE part = ANY($1) ORDER BY run_id",
                    &[&parts],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(scan_meta("active", &rows))
        })
    }

    fn timers_in(&self, partitions: &BTreeSet<u16>) -> Result<Scan<TimerEntry>> {
        let parts = parts_sql(partitions);
        self.block(move |c| async move {
            let rows = c
                .query(
                    "SELECT key FROM reel_timers WHERE part = ANY($1) ORDER BY key",
                    &[&parts],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(scan_timers(&rows))
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<Notice> {
        match &self.member {
            Some(m) => m.notices.subscribe(),
            None => broadcast::channel(1).1,
        }
    }
}

/// The fence of a write transaction: of `parts` (partitions of runs the batch
/// changes, creations aside), those this host holds, locked so that no takeover
/// commits before this transaction does.
pub(crate) async fn fence(
    tx: &deadpool_postgres::Transaction<'_>,
    host_id: &str,
    parts: &[i16],
) -> Result<BTreeSet<i16>> {
    if parts.is_empty() {
        return Ok(BTreeSet::new());
    }
    let rows = tx
        .query(
            &crate::tx_stmt(
                tx,
                "SELECT part FROM reel_leases WHERE owner = $1 AND part = ANY($2) \
                 ORDER BY part FOR KEY SHARE",
            )
            .await?,
            &[&host_id, &parts],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    Ok(rows.iter().map(|r| r.get::<_, i16>(0)).collect())
}

/// Posts `mails` (partition, run, encoded mail) in the write transaction `tx`, and
/// tells the owners once it commits.
pub(crate) async fn post_in(
    tx: &deadpool_postgres::Transaction<'_>,
    mails: &[(i16, &str, &[u8])],
) -> Result<()> {
    if mails.is_empty() {
        return Ok(());
    }
    let parts: Vec<i16> = mails.iter().map(|m| m.0).collect();
    let runs: Vec<&str> = mails.iter().map(|m| m.1).collect();
    let bytes: Vec<&[u8]> = mails.iter().map(|m| m.2).collect();
    tx.execute(
        &crate::tx_stmt(
            tx,
            "WITH posted AS (INSERT INTO reel_inbox (part, run_id, mail) \
             SELECT * FROM unnest($1::smallint[], $2::text[], $3::bytea[]) RETURNING part) \
             SELECT pg_notify('reel_inbox', part::text) FROM (SELECT DISTINCT part FROM posted) p",
        )
        .await?,
        &[&parts, &runs, &bytes],
    )
    .await
    .map_err(|e| pg_err(&e))?;
    Ok(())
}
