//! Several hosts over one database: [`ClusterConfig`], the leases of partitions,
//! the inbox, and the connection that listens for notices.
//!
//! Leases (`reel_leases`, one row per partition) are held by a host id until an
//! expiry computed by the database's clock, so hosts' clocks never matter. A host
//! renews its leases and heartbeat (`reel_hosts`, where a dead host's row goes an
//! hour after its last heartbeat ran out) at a third of the lease time and
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
use std::sync::Arc;
use std::time::Duration;

use reel_storage::{
    Cluster, LeaseChange, Letter, Mail, Notice, PARTITIONS, Result, RunMeta, Scan, StorageError,
    TimerEntry, check_run_id,
};
use tokio::sync::broadcast;

use crate::{partition_of, pg_err, stmt};

use crate::membership::{Membership, parts_rust, parts_sql};
use crate::rows::{scan_letter, scan_meta, scan_timers};
use crate::store::PgStore;

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
            // A crashed host's heartbeat stays behind (a host id is new for each
            // process): gone an hour after it stopped, so the table does not grow
            // with every crash.
            tx.execute(
                "DELETE FROM reel_hosts WHERE expires_at < now() - interval '1 hour'",
                &[],
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
            Ok(rows.iter().map(scan_letter).collect())
        })
    }

    fn letters_of(&self, run_id: &str) -> Result<Vec<Letter>> {
        let me = self.membership()?.config.host_id.clone();
        let run = run_id.to_owned();
        let part = partition_of(run_id);
        self.block(move |c| async move {
            let rows = c
                .query(
                    &stmt(
                        &c,
                        "SELECT i.id, i.run_id, i.mail FROM reel_inbox i \
                         JOIN reel_leases l ON l.part = i.part AND l.owner = $3 \
                         WHERE i.part = $1 AND i.run_id = $2 ORDER BY i.id",
                    )
                    .await?,
                    &[&part, &run, &me],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(rows.iter().map(scan_letter).collect())
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
