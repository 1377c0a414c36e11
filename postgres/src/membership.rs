//! What a joined [`PgStore`](crate::PgStore) knows of the hosts sharing its
//! database, and the statements the writer needs of it: [`ClusterConfig`], the
//! partitions held ([`Membership`]), the connection that listens for notices, the
//! lease fence of a write and the inbox post of a creation. A leaf under `store`
//! and `writer`; `cluster` builds the [`Cluster`](reel_storage::Cluster) on it.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use reel_storage::{Notice, Result};
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::pg_err;

/// How a [`PgStore`](crate::PgStore) joins the hosts sharing its database.
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
    pub(crate) held: RwLock<BTreeSet<u16>>,
    pub(crate) notices: broadcast::Sender<Notice>,
}

impl Membership {
    pub(crate) fn new(config: ClusterConfig) -> Arc<Membership> {
        Arc::new(Membership {
            config,
            held: RwLock::new(BTreeSet::new()),
            notices: broadcast::channel(4096).0,
        })
    }

    pub(crate) fn ttl_ms(&self) -> i64 {
        i64::try_from(self.config.lease_ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Partitions as stored (`smallint`).
pub(crate) fn parts_sql(parts: &BTreeSet<u16>) -> Vec<i16> {
    parts
        .iter()
        .filter_map(|p| i16::try_from(*p).ok())
        .collect()
}

pub(crate) fn parts_rust(rows: &[tokio_postgres::Row]) -> BTreeSet<u16> {
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
