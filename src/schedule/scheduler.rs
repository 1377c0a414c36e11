//! The host's scheduler: one task that reads the schedules, starts the runs of
//! their due firings and sleeps on the host's clock until the next one (or until a
//! schedule changes, or a run that holds back a buffered firing ends).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};

use reel_actors::{ActorError, Core};
use reel_storage::{RunState, ScheduleRecord, from_ms};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::timing::{Timing, jitter};
use super::{CatchUp, Overlap, ScheduleSpec, blocking, run_id_of};
use crate::ctx::millis;
use crate::{Error, Result};

/// A firing handled within this long after its time (and its jitter) is on time;
/// later, it was missed and the catch-up policy decides. Wide enough that a slow
/// pass, or a pass retried every [`RETRY_MS`] through a storage error of up to a
/// minute, still fires what came due meanwhile (`CatchUp::None` would drop it);
/// Temporal's smallest catch-up window is 10 s.
const ON_TIME_MS: u64 = 60_000;
/// How soon a pass that failed (a storage error) is tried again.
const RETRY_MS: u64 = 1000;

/// The scheduler of one host.
pub(crate) struct Scheduler {
    /// Held by a pass and by every schedule change, so neither loses the other's
    /// write.
    lock: tokio::sync::Mutex<()>,
    notify: Arc<Notify>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Starts the scheduler of `core`'s host.
    pub(crate) fn start(core: &Arc<Core>) -> Arc<Scheduler> {
        let scheduler = Arc::new(Scheduler {
            lock: tokio::sync::Mutex::new(()),
            notify: Arc::new(Notify::new()),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(Arc::downgrade(&scheduler), Arc::downgrade(core)));
        *scheduler.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        scheduler
    }

    /// Stops the scheduler (the host is shutting down).
    pub(crate) fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }

    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    /// A schedule changed: look again.
    pub(crate) fn wake(&self) {
        self.notify.notify_one();
    }
}

async fn run(me: Weak<Scheduler>, core: Weak<Core>) {
    // Runs already watched for their end (they hold back a buffered firing).
    let mut watching = HashSet::new();
    loop {
        let (Some(scheduler), Some(host)) = (me.upgrade(), core.upgrade()) else {
            return;
        };
        let wake_at = {
            let _busy = host.busy();
            match scheduler.pass(&host, &mut watching).await {
                Ok(at) => at,
                Err(Error::Shutdown) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "reel: scheduler pass failed; retrying");
                    Some(host.clock().now_ms().saturating_add(RETRY_MS))
                }
            }
        };
        // On a shared store, look again at what this host leads on real time,
        // whatever the host's clock: leases move on real time, and a test clock
        // moves only when told (a host that took a schedule's partition over
        // would not fire its due firing until then).
        let again = host.lead_recheck();
        let notify = scheduler.notify.clone();
        let sleep = wake_at.map(|at| host.clock().sleep_until(from_ms(at)));
        drop((scheduler, host));
        let due = async {
            match sleep {
                Some(sleep) => sleep.await,
                None => std::future::pending().await,
            }
        };
        let again = async {
            match again {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = due => {}
            () = again => {}
            () = notify.notified() => {}
        }
    }
}

impl Scheduler {
    /// Handles every due firing; returns when the next one is due.
    async fn pass(&self, core: &Arc<Core>, watching: &mut HashSet<String>) -> Result<Option<u64>> {
        let _lock = self.lock.lock().await;
        let store = core.store().clone();
        let records = blocking(move || store.list_schedules()).await?;
        let now = core.clock().now_ms();
        let mut wake: Option<u64> = None;
        // Only runs that still hold a firing back stay watched: the set does not
        // grow with every run that ever held one.
        let holding: HashSet<&str> = records
            .iter()
            .filter(|r| r.buffered.is_some())
            .filter_map(|r| r.last_run.as_deref())
            .collect();
        watching.retain(|run| holding.contains(run.as_str()));
        // On a shared store each schedule is fired by one host: the one leasing
        // its id's partition. The loop looks again every `Core::lead_recheck`
        // (real time): leases move, and a schedule created or changed on another
        // host wakes only that host's scheduler.
        for record in records
            .into_iter()
            .filter(|r| !r.paused && core.leads(&r.id))
        {
            let spec = match ScheduleSpec::decode(&record.spec) {
                Ok(spec) => spec,
                Err(e) => {
                    tracing::error!(schedule = %record.id, error = %e, "reel: unreadable schedule");
                    continue;
                }
            };
            let timing = match Timing::of(&record.id, &spec) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(schedule = %record.id, error = %e, "reel: unusable schedule");
                    continue;
                }
            };
            let next = Firing {
                core,
                spec: &spec,
                timing: &timing,
                now,
            }
            .handle(record, watching, &self.notify)
            .await?;
            wake = match (wake, next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(wake)
    }
}

/// One schedule's due firings in one pass.
struct Firing<'a> {
    core: &'a Arc<Core>,
    spec: &'a ScheduleSpec,
    timing: &'a Timing,
    now: u64,
}

impl Firing<'_> {
    /// The firing's jitter, capped below the gap to the next fire time (Temporal
    /// caps it at the interval): a firing held past the next one would count as
    /// missed, and the catch-up policy would drop it.
    fn jitter(&self, id: &str, at: u64) -> u64 {
        let gap = self
            .timing
            .next_after(at)
            .map_or(u64::MAX, |next| next.saturating_sub(at).saturating_sub(1));
        jitter(id, at, self.spec.jitter_ms.min(gap))
    }

    async fn handle(
        &self,
        mut rec: ScheduleRecord,
        watching: &mut HashSet<String>,
        notify: &Arc<Notify>,
    ) -> Result<Option<u64>> {
        let Some(version) = self.core.newest_version(&rec.workflow) else {
            return Ok(self.unregistered(&rec));
        };
        let read = rec.clone();
        let mut changed = false;
        if let Some(at) = rec.buffered
            && !self.running(rec.last_run.as_deref()).await?
        {
            rec.buffered = None;
            self.start(&mut rec, version, at).await?;
            changed = true;
        }
        let due = rec
            .next_fire
            .saturating_add(self.jitter(&rec.id, rec.next_fire));
        if rec.next_fire != u64::MAX && due <= self.now {
            self.fire_due(&mut rec, version).await?;
            changed = true;
        }
        if changed {
            let store = self.core.store().clone();
            let record = rec.clone();
            if !blocking(move || store.swap_schedule(Some(&read), &record)).await? {
                // Paused, updated or deleted since this pass read it (on another
                // host, say): that change stands. The runs started here stand too
                // (their ids are the fire times); the next pass reads it again.
                tracing::debug!(schedule = %rec.id, "reel: schedule changed during a pass");
                return Ok(Some(self.now));
            }
        }
        if rec.buffered.is_some()
            && let Some(run) = rec.last_run.clone()
            && watching.insert(run.clone())
        {
            // Look again when the run holding the buffered firing back ends.
            let core = Arc::downgrade(self.core);
            let notify = notify.clone();
            tokio::spawn(async move {
                let Some(core) = core.upgrade() else { return };
                let _ = core.wait_settled(&run).await;
                notify.notify_one();
            });
        }
        Ok((rec.next_fire != u64::MAX).then(|| {
            rec.next_fire
                .saturating_add(self.jitter(&rec.id, rec.next_fire))
        }))
    }

    /// No version of the schedule's workflow is registered on this host: nothing
    /// starts and the record stays as it is (the schedule is kept), so a host that
    /// registers the name handles the waiting firing, as a missed one under the
    /// catch-up policy. Once the firing is due, each pass says so at warn level;
    /// until then, the scheduler wakes for it.
    fn unregistered(&self, rec: &ScheduleRecord) -> Option<u64> {
        let due = (rec.next_fire != u64::MAX).then(|| {
            rec.next_fire
                .saturating_add(self.jitter(&rec.id, rec.next_fire))
        });
        if rec.buffered.is_none() && due.is_none_or(|d| d > self.now) {
            return due;
        }
        tracing::warn!(
            schedule = %rec.id,
            workflow = %rec.workflow,
            "reel: no version of the schedule's workflow is registered on this host; \
             its due firing waits for a host that registers it"
        );
        None
    }

    /// Starts the firings due now that the catch-up policy keeps, each under the
    /// overlap policy, and moves `next_fire` past them.
    async fn fire_due(&self, rec: &mut ScheduleRecord, version: u32) -> Result<()> {
        let now = self.now;
        let mut latest = self
            .timing
            .last_between(rec.next_fire, now)
            .unwrap_or(rec.next_fire);
        // The latest fire time may still be waiting for its jitter.
        if latest > rec.next_fire && latest.saturating_add(self.jitter(&rec.id, latest)) > now {
            latest = self
                .timing
                .last_between(rec.next_fire, latest - 1)
                .unwrap_or(rec.next_fire);
        }
        let on_time =
            now.saturating_sub(latest.saturating_add(self.jitter(&rec.id, latest))) <= ON_TIME_MS;
        let fires = match self.spec.catch_up {
            CatchUp::None if on_time => vec![latest],
            CatchUp::None => Vec::new(),
            CatchUp::Last => vec![latest],
            CatchUp::All { within } => {
                let from = rec.next_fire.max(now.saturating_sub(millis(within)));
                let mut fires = self.timing.between(from, latest);
                if on_time && fires.last() != Some(&latest) {
                    fires.push(latest);
                }
                fires
            }
        };
        let missed = self.timing.between(rec.next_fire, latest).len();
        if missed > fires.len() {
            tracing::info!(schedule = %rec.id, missed = missed - fires.len(), "reel: missed firings dropped by the catch-up policy");
        }
        for at in fires {
            let running = self.running(rec.last_run.as_deref()).await?;
            match self.spec.overlap {
                Overlap::AllowAll => self.start(rec, version, at).await?,
                _ if !running => self.start(rec, version, at).await?,
                Overlap::Skip => {
                    tracing::info!(schedule = %rec.id, at, "reel: firing skipped: the previous run has not finished");
                }
                Overlap::BufferOne => {
                    if rec.buffered.is_none() {
                        rec.buffered = Some(at);
                    }
                }
            }
        }
        rec.next_fire = self.timing.next_after(latest).unwrap_or(u64::MAX);
        Ok(())
    }

    /// Whether the run has neither finished nor been parked.
    async fn running(&self, run: Option<&str>) -> Result<bool> {
        let Some(run) = run else { return Ok(false) };
        let meta = self.core.meta(run).await?;
        Ok(meta
            .is_some_and(|m| !m.state.is_finished() && !matches!(m.state, RunState::Parked { .. })))
    }

    /// Starts the firing at `at` on `version` of the schedule's workflow (the
    /// newest registered; idempotent on its run id) and makes it the last run. A
    /// firing that cannot start for good (the id is taken by another workflow) is
    /// logged and dropped.
    async fn start(&self, rec: &mut ScheduleRecord, version: u32, at: u64) -> Result<()> {
        let run_id = run_id_of(&rec.id, at);
        let started = self
            .core
            .start(
                &rec.workflow,
                version,
                &run_id,
                rec.input.clone(),
                None,
                None,
            )
            .await;
        match started {
            Ok(_) => {
                tracing::debug!(schedule = %rec.id, run_id, "reel: schedule fired");
                rec.last_run = Some(run_id);
                Ok(())
            }
            Err(e @ (ActorError::NotRegistered(_) | ActorError::RunExists { .. })) => {
                tracing::error!(schedule = %rec.id, run_id, error = %e, "reel: a firing could not start; dropped");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
