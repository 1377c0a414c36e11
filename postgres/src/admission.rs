//! Queues admitted in the database, for hosts that share it ([`Admission`]).
//!
//! - `reel_active.queue`, `reel_active.dedup_key`: the queue and key of each
//!   unfinished run, written by the writer with its metadata; a unique index over
//!   them (where a key is set) makes a second unfinished run with a held key
//!   impossible to create, on any host (its creation is answered with a conflict).
//! - `reel_queue_slots (run_id, queue, part)`: the slots held by admitted runs.
//!   A run's slot is given back by its owner once its end is written
//!   ([`Admission::release`]); a slot whose run is no longer unfinished (its host
//!   died between the two) is reclaimed by the next admission to the queue.
//! - `reel_queue_starts (queue, at)`: admission times inside the rate window (on
//!   the admitting host's clock), older ones deleted as admission goes.
//! - `reel_queue_order`: a sequence giving new runs their order numbers.
//!
//! An admission is one transaction under an advisory lock of its queue: reclaim,
//! count the slots and the window, insert what is granted. Giving a slot back
//! sends `reel_queue` with the queue's name, so the other hosts offer their
//! waiting runs at once (they also do every second).

use std::collections::HashSet;

use reel_storage::{Admission, Grant, QueueLimit, Reservation, Result, StorageError};

use crate::PgStore;
use crate::{partition_of, pg_err, stmt};

/// The first key of the advisory locks of queues (the second is the hash of the
/// queue's name): "reel" in ASCII.
const LOCK_CLASS: i32 = 0x7265_656c;

impl PgStore {
    fn holder(&self, queue: &str, key: &str, except: &str) -> Result<Option<String>> {
        let (queue, key, except) = (queue.to_owned(), key.to_owned(), except.to_owned());
        self.block(move |c| async move {
            let row = c
                .query_opt(
                    &stmt(
                        &c,
                        "SELECT run_id FROM reel_active \
                         WHERE queue = $1 AND dedup_key = $2 AND run_id <> $3",
                    )
                    .await?,
                    &[&queue, &key, &except],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(row.map(|r| r.get(0)))
        })
    }
}

impl Admission for PgStore {
    fn reserve(&self, queue: &str, run_id: &str, dedup_key: Option<&str>) -> Result<Reservation> {
        if let Some(key) = dedup_key
            && let Some(holder) = self.holder(queue, key, run_id)?
        {
            return Ok(Reservation::HeldBy(holder));
        }
        let order: i64 = self.block(move |c| async move {
            let row = c
                .query_one(&stmt(&c, "SELECT nextval('reel_queue_order')").await?, &[])
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(row.get(0))
        })?;
        Ok(Reservation::Order(u64::try_from(order).unwrap_or(0)))
    }

    fn key_holder(&self, queue: &str, key: &str) -> Result<Option<String>> {
        self.holder(queue, key, "")
    }

    fn acquire(
        &self,
        queue: &str,
        limit: QueueLimit,
        now_ms: u64,
        candidates: &[String],
    ) -> Result<Grant> {
        if candidates.is_empty() {
            return Ok(Grant::default());
        }
        let queue = queue.to_owned();
        let candidates = candidates.to_vec();
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        self.block(move |mut c| async move {
            let tx = c.transaction().await.map_err(|e| pg_err(&e))?;
            tx.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                &[&LOCK_CLASS, &queue],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            // Slots of runs that ended (or are gone) without giving them back.
            tx.execute(
                "DELETE FROM reel_queue_slots s WHERE s.queue = $1 \
                 AND NOT EXISTS (SELECT 1 FROM reel_active a WHERE a.run_id = s.run_id)",
                &[&queue],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            let held: HashSet<String> = tx
                .query(
                    "SELECT run_id FROM reel_queue_slots WHERE queue = $1",
                    &[&queue],
                )
                .await
                .map_err(|e| pg_err(&e))?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let mut window: Vec<u64> = Vec::new();
            if let Some((_, period)) = limit.rate {
                let since = now.saturating_sub(i64::try_from(period).unwrap_or(i64::MAX));
                tx.execute(
                    "DELETE FROM reel_queue_starts WHERE queue = $1 AND at <= $2",
                    &[&queue, &since],
                )
                .await
                .map_err(|e| pg_err(&e))?;
                window = tx
                    .query(
                        "SELECT at FROM reel_queue_starts WHERE queue = $1 ORDER BY at",
                        &[&queue],
                    )
                    .await
                    .map_err(|e| pg_err(&e))?
                    .iter()
                    .map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0))
                    .collect();
            }
            let mut grant = Grant::default();
            let (mut taken, mut parts, mut starts) = (Vec::new(), Vec::new(), Vec::new());
            let mut count = held.len();
            for run in candidates {
                if held.contains(&run) {
                    grant.admitted.push(run);
                    continue;
                }
                if limit
                    .concurrency
                    .is_some_and(|c| count >= usize::try_from(c).unwrap_or(usize::MAX))
                {
                    break;
                }
                if let Some((max, period)) = limit.rate
                    && window.len() + starts.len() >= max as usize
                {
                    let oldest = window.first().copied().unwrap_or(now_ms);
                    grant.retry_at = Some(oldest.saturating_add(period));
                    break;
                }
                count += 1;
                if limit.rate.is_some() {
                    starts.push(now);
                }
                parts.push(partition_of(&run));
                taken.push(run.clone());
                grant.admitted.push(run);
            }
            if !taken.is_empty() {
                tx.execute(
                    "INSERT INTO reel_queue_slots (run_id, queue, part) \
                     SELECT r, $2, p FROM unnest($1::text[], $3::smallint[]) AS t(r, p) \
                     WHERE EXISTS (SELECT 1 FROM reel_active a WHERE a.run_id = t.r) \
                     ON CONFLICT (run_id) DO NOTHING",
                    &[&taken, &queue, &parts],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            }
            if !starts.is_empty() {
                tx.execute(
                    "INSERT INTO reel_queue_starts (queue, at) SELECT $1, unnest($2::bigint[])",
                    &[&queue, &starts],
                )
                .await
                .map_err(|e| pg_err(&e))?;
            }
            tx.commit().await.map_err(|e| pg_err(&e))?;
            Ok(grant)
        })
    }

    fn release(&self, _queue: &str, run_id: &str) -> Result<()> {
        let run = run_id.to_owned();
        self.block(move |c| async move {
            c.execute(
                &stmt(
                    &c,
                    "WITH gone AS (DELETE FROM reel_queue_slots WHERE run_id = $1 \
                     RETURNING queue) SELECT pg_notify('reel_queue', queue) FROM gone",
                )
                .await?,
                &[&run],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            Ok::<_, StorageError>(())
        })
    }
}
