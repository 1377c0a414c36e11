//! Deleting finished runs: one at a time ([`Core::delete`]) and by the retention
//! policy ([`Core::enforce_retention`], also run in the background).

use std::time::{Duration, Instant};

use reel_storage::Ticket;
use reel_storage::listing::RunQuery;

use super::*;
use crate::message::StopFinished;
use crate::retention::Retention;

/// The least time between two reclaims of space by the background pass: a reclaim
/// compacts the whole store.
const RECLAIM_EVERY: Duration = Duration::from_secs(3600);

/// The key whose partition's lease holder runs the background retention passes of
/// hosts sharing a store (hashed like a run id).
const RETENTION_LEAD: &str = "reel.retention";

/// How many times `per_pass` runs of a kind one retention pass examines at most:
/// runs created before the cutoff that ended after it are read and passed over,
/// and a service of long-lived runs may hold many of them.
pub(crate) const RETENTION_EXAMINED: usize = 8;

/// The creation times of runs a host deleted, by id ([`Core::creation_time`]).
/// Only those not before now matter (a new run is created now at the earliest):
/// the others are forgotten whenever the map has doubled since it was last
/// pruned, so it stays as small as the deletes of the current millisecond (all
/// of them on a frozen clock).
#[derive(Default)]
pub(crate) struct DeletedCreations {
    times: HashMap<String, u64>,
    /// The size at which the map is pruned next.
    prune_at: usize,
}

impl DeletedCreations {
    /// The earliest creation time a new run of `run_id` may have: a millisecond
    /// after the deleted run's, if this host deleted one.
    fn floor(&self, run_id: &str) -> Option<u64> {
        self.times.get(run_id).map(|c| c.saturating_add(1))
    }
}

/// The least size at which [`DeletedCreations`] is pruned.
const PRUNE_AT_LEAST: usize = 1_024;

impl Core {
    /// The creation time of a new run of `run_id`: now, or a millisecond after
    /// the creation time of the run under that id this host deleted last, if that
    /// is later. Runs of one id are told apart by their creation time (a wait
    /// keeps to the run it began on, a delete removes only the run it checked).
    pub(super) fn creation_time(&self, run_id: &str) -> u64 {
        let now = self.options.clock.now_ms();
        let floor = self.deleted_creations().floor(run_id);
        floor.map_or(now, |f| now.max(f))
    }

    /// The memory of deleted runs' creation times.
    fn deleted_creations(&self) -> std::sync::MutexGuard<'_, DeletedCreations> {
        self.deleted_creations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that the run `run_id` created at `created_at` is being deleted.
    fn remember_deleted(&self, deleted: &mut DeletedCreations, run_id: &str, created_at: u64) {
        let DeletedCreations { times, prune_at } = deleted;
        if times.len() >= *prune_at {
            let now = self.options.clock.now_ms();
            times.retain(|_, c| *c >= now);
            *prune_at = (2 * times.len()).max(PRUNE_AT_LEAST);
        }
        times.insert(run_id.to_owned(), created_at);
    }

    /// Submits a new run's first write (`append`, which carries its metadata),
    /// created after every run of its id this host has deleted or is deleting:
    /// a creation time read before such a delete is moved past the deleted run's.
    /// The memory of deletes stays locked from that check to the submission, and
    /// a delete is noted before its own submission, so the store receives a
    /// delete and a creation of one id in an order their creation times agree
    /// with. Returns the creation time written.
    pub(super) fn submit_created(&self, mut append: Append) -> (Ticket, u64) {
        let deleted = self.deleted_creations();
        let floor = deleted.floor(&append.run_id);
        let mut created_at = append.at.unwrap_or_default();
        if let Some(meta) = &mut append.meta {
            if let Some(floor) = floor.filter(|f| *f > meta.created_at) {
                meta.created_at = floor;
                meta.updated_at = meta.updated_at.max(floor);
            }
            created_at = meta.created_at;
            append.at = append.at.map(|at| at.max(created_at));
        }
        (self.store.submit(append), created_at)
    }

    /// Deletes a finished run: its log (every segment), metadata and index
    /// entries, in one write. Its children are not deleted. Afterwards the run is
    /// unknown.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`], [`ActorError::InvalidState`] for a run that has
    /// not finished (running, suspended, parked, paused), storage errors.
    pub async fn delete(&self, run_id: &str) -> Result<(), ActorError> {
        self.delete_run(run_id, None).await
    }

    /// [`Core::delete`]; with `created_at`, only the run of that id created then
    /// (a retention pass deletes the run it found due, not one that took its id
    /// since: that one is `UnknownRun` to it).
    async fn delete_run(&self, run_id: &str, created_at: Option<u64>) -> Result<(), ActorError> {
        self.check_open()?;
        // A delete racing another (two operators, a retention pass) finds the log
        // changed under it: it looks again, and finds the run gone (`UnknownRun`)
        // or, its id taken again, a run to delete or refuse like any other.
        let mut tries = 0;
        loop {
            tries += 1;
            match self.delete_once(run_id, created_at).await {
                Err(ActorError::Storage(reel_storage::StorageError::Conflict { .. }))
                    if tries < 3 => {}
                done => return done,
            }
        }
    }

    /// One attempt of [`Core::delete_run`].
    async fn delete_once(&self, run_id: &str, created_at: Option<u64>) -> Result<(), ActorError> {
        // The log's end is read before the state is checked: a run deleted and
        // started again in between is seen unfinished, and one started again
        // after the check is refused by the store (it never removes an
        // unfinished run).
        let store = self.store.clone();
        let id = run_id.to_owned();
        let next = blocking(move || store.next_seq(&id)).await?;
        let meta = self.known(run_id).await?;
        if created_at.is_some_and(|c| c != meta.created_at) {
            return Err(ActorError::UnknownRun(run_id.to_owned()));
        }
        if !meta.state.is_finished() {
            return Err(ActorError::InvalidState {
                run_id: run_id.to_owned(),
                state: meta.state.kind(),
                action: "delete".to_owned(),
            });
        }
        // A finished run's actor may still be winding down: stop it first, so no
        // state of the run outlives its records. Only the checked run's: the actor
        // live under the id may be a new run's (the checked one deleted since and
        // the id started again), which goes on, and the store refuses the delete.
        let cell = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .cloned();
        if let Some(actor) = cell.as_ref().and_then(|c| c.get()) {
            let stop = StopFinished {
                created_at: meta.created_at,
            };
            // Stopped, or stopping already: waited for.
            if !matches!(ask(actor, stop).await, Ok(false)) {
                actor.wait_for_shutdown().await;
            }
        }
        // The store deletes only the run created when the one checked was: a run
        // deleted since, its id taken by a new run that has already ended with a
        // log as long, is refused (a conflict: looked at again, it is that new
        // run, to delete or refuse like any other, or `UnknownRun` to a
        // retention pass).
        // Noted before it reaches the store, under the lock a new run's first
        // write is submitted under (`Core::submit_created`).
        let deleting = {
            let mut deleted = self.deleted_creations();
            self.remember_deleted(&mut deleted, run_id, meta.created_at);
            self.store.delete(run_id, next, meta.created_at, Vec::new())
        };
        deleting.await?;
        self.unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id);
        self.notify_changed(run_id, None);
        // Runs here still waiting on it (it ended, but its end has not reached
        // them yet) will not hear of it now: a later run under the id is not theirs.
        let gone = self.child_subscribers.take_gone(run_id, None);
        self.runs_gone(run_id, gone);
        Ok(())
    }

    /// One pass of the host's retention policy ([`CoreOptions::retention`]):
    /// deletes the runs that ended longer ago than it keeps them (as of `now_ms`),
    /// at most `per_pass` of each kind of end. A pass goes on through the listing
    /// (by creation time) from where the last one stopped, past runs created
    /// before the cutoff that ended after it, once round at most and examining at
    /// most `RETENTION_EXAMINED` times `per_pass` runs of a kind. Returns how
    /// many it deleted: fewer than `per_pass` of a kind only when no more of that
    /// kind are due or the pass examined its most, so a caller that calls again
    /// until it gets 0 leaves none behind unless that many not yet due lie between.
    ///
    /// # Errors
    /// Storage errors; a run deleted or changed meanwhile is skipped, and so is a
    /// run whose records are damaged (logged).
    pub async fn enforce_retention(&self, now_ms: u64) -> Result<usize, ActorError> {
        // Also under a policy that keeps everything, which reads nothing.
        self.check_open()?;
        let policy = &self.options.retention;
        let mut deleted = 0;
        for (kind, keep) in policy.kept() {
            let Some(keep) = keep else { continue };
            let cutoff = now_ms.saturating_sub(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX));
            let mut after = self
                .retention_cursors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&kind)
                .cloned();
            // Started mid-listing: once its end is reached, the pass goes round to
            // the start (the runs before the cursor may have come due since).
            let mut wrap = after.is_some();
            let mut of_kind = 0;
            let mut examined = 0;
            let most = policy.per_pass.saturating_mul(RETENTION_EXAMINED);
            while of_kind < policy.per_pass && examined < most {
                // A run ends after it starts: one started after the cutoff ended after it.
                let page = self
                    .list_page(RunQuery {
                        status: Some(vec![kind]),
                        created_before: Some(cutoff.saturating_add(1)),
                        limit: policy.per_pass,
                        after: after.take(),
                        newest_first: false,
                        ..RunQuery::default()
                    })
                    .await?;
                for meta in page.items {
                    if of_kind == policy.per_pass {
                        break;
                    }
                    examined += 1;
                    if meta.updated_at > cutoff || !meta.state.is_finished() {
                        continue;
                    }
                    match self.delete_run(&meta.run_id, Some(meta.created_at)).await {
                        Ok(()) => of_kind += 1,
                        Err(ActorError::UnknownRun(_) | ActorError::InvalidState { .. }) => {}
                        // A damaged run is left for an operator to look at; the
                        // pass goes on with the others.
                        Err(ActorError::Storage(e)) if e.corruption().is_some() => {
                            tracing::warn!(
                                run_id = %meta.run_id,
                                error = %e,
                                "reel: retention passed over a damaged run"
                            );
                        }
                        Err(e) => return Err(e),
                    }
                }
                after = page.next;
                if after.is_none() && !std::mem::take(&mut wrap) {
                    break;
                }
            }
            {
                let mut cursors = self
                    .retention_cursors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                match after {
                    Some(next) => cursors.insert(kind, next),
                    None => cursors.remove(&kind),
                };
            }
            deleted += of_kind;
        }
        Ok(deleted)
    }

    /// Gives the space of deleted runs back to the file system now (the store
    /// compacts: its cost grows with the store).
    ///
    /// # Errors
    /// Storage errors.
    pub async fn reclaim(&self) -> Result<(), ActorError> {
        let store = self.store.clone();
        Ok(blocking(move || store.reclaim()).await?)
    }

    /// Runs retention passes every `policy.every` until the host shuts down. A
    /// bare task holding the core weakly: it ends at the first tick after the core
    /// is gone or closing, and a failed pass is logged and tried at the next tick.
    /// On a store shared by several hosts, only the host that leases
    /// [`RETENTION_LEAD`]'s partition passes at a tick (each pass reads the whole
    /// listing: N hosts passing would do N times the work to delete the same runs).
    pub(crate) fn spawn_retention(self: &Arc<Core>, policy: Retention) {
        if !policy.deletes() {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last_reclaim: Option<Instant> = None;
            loop {
                tokio::time::sleep(policy.every).await;
                let Some(core) = weak.upgrade() else { return };
                if core.check_open().is_err() {
                    return;
                }
                // On a shared store one host passes: the one leasing the pass's key.
                if !core.leads(RETENTION_LEAD) {
                    continue;
                }
                match core.enforce_retention(core.options.clock.now_ms()).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(deleted = n, "reel: retention deleted finished runs");
                        if last_reclaim.is_none_or(|t| t.elapsed() >= RECLAIM_EVERY) {
                            last_reclaim = Some(Instant::now());
                            if let Err(e) = core.reclaim().await {
                                tracing::warn!(error = %e, "reel: reclaiming space failed");
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "reel: retention pass failed"),
                }
            }
        });
    }
}
