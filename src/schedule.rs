//! Durable schedules: runs started on a cron expression (in a time zone) or at a
//! fixed interval, stored in the store like runs and fired by the host's
//! scheduler on the host's [`Clock`](crate::Clock) (so the test clock drives them
//! too).
//!
//! Each firing starts a run with the id `<schedule id>/<fire time in ms since the
//! epoch>` (the nominal time, before jitter), on the newest version of the
//! schedule's workflow registered on the host: a schedule names a workflow, not a
//! version, as a Temporal schedule names a workflow type, so schedules outlive
//! deploys that retire old versions. While no version of the name is registered,
//! the schedule is kept and its due firing waits (logged at warn level) for a host
//! that registers it, which handles it as a missed firing. Starting is idempotent on the run
//! id, and the schedule's next fire time is written only after the run is
//! started, so a firing starts exactly one run even when the process dies between
//! the two.

use std::time::{Duration, SystemTime};

use reel_storage::{ScheduleRecord, from_ms};
use serde::{Deserialize, Serialize};

use crate::ctx::{encode, millis};
use crate::{Error, Host, Result, Workflow};

mod scheduler;
mod timing;

pub(crate) use scheduler::Scheduler;
use timing::Timing;

/// When a schedule fires, what happens to a firing that would overlap the
/// previous one's run, and to firings missed while no host ran.
///
/// ```
/// use std::time::Duration;
/// use reel::{CatchUp, Overlap, ScheduleSpec};
///
/// let nightly = ScheduleSpec::cron("0 3 * * *").tz("Europe/Paris");
/// let poll = ScheduleSpec::every(Duration::from_secs(15 * 60))
///     .overlap(Overlap::BufferOne)
///     .catch_up(CatchUp::All { within: Duration::from_secs(3600) })
///     .jitter(Duration::from_secs(30));
/// # let _ = (nightly, poll);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    when: When,
    overlap: Overlap,
    catch_up: CatchUp,
    jitter_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum When {
    Cron { expr: String, tz: Option<String> },
    Every { ms: u64 },
}

/// What a firing does while the run of the schedule's previous firing has not
/// finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Overlap {
    /// The firing is dropped (the default).
    #[default]
    Skip,
    /// The firing waits and starts when the previous run finishes; at most one
    /// waits, later firings meanwhile are dropped.
    BufferOne,
    /// The firing starts a run at once, beside the previous one.
    AllowAll,
}

/// What happens to firings missed while no host ran (or the schedule was
/// paused), once the schedule fires again. A firing is missed when it is handled
/// more than a minute after its time (and its jitter): within that minute it is on
/// time, so a scheduler pass that is slow or retried through a passing storage
/// error still fires it under every policy, `None` included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CatchUp {
    /// Missed firings are dropped.
    None,
    /// Only the latest missed firing starts (the default).
    #[default]
    Last,
    /// Every missed firing no older than `within` starts, oldest first (at most
    /// 1,000).
    All {
        /// How old a missed firing may be and still start.
        within: Duration,
    },
}

impl ScheduleSpec {
    /// Fires on a five-field cron expression (`minute hour day-of-month month
    /// day-of-week`, as in crontab; a sixth leading seconds field is accepted), in
    /// UTC unless [`ScheduleSpec::tz`] says otherwise. The expression is checked
    /// by [`Host::schedule`].
    pub fn cron(expr: &str) -> ScheduleSpec {
        ScheduleSpec::new(When::Cron {
            expr: expr.to_owned(),
            tz: None,
        })
    }

    /// Fires every `interval`, at multiples of it since the Unix epoch (every
    /// 15 minutes fires at :00, :15, :30 and :45).
    pub fn every(interval: Duration) -> ScheduleSpec {
        ScheduleSpec::new(When::Every {
            ms: millis(interval),
        })
    }

    fn new(when: When) -> ScheduleSpec {
        ScheduleSpec {
            when,
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            jitter_ms: 0,
        }
    }

    /// The IANA time zone a cron expression is read in (`"Europe/Paris"`); no
    /// effect on [`ScheduleSpec::every`].
    pub fn tz(mut self, name: &str) -> ScheduleSpec {
        if let When::Cron { tz, .. } = &mut self.when {
            *tz = Some(name.to_owned());
        }
        self
    }

    /// The overlap policy (default [`Overlap::Skip`]).
    pub fn overlap(mut self, overlap: Overlap) -> ScheduleSpec {
        self.overlap = overlap;
        self
    }

    /// The catch-up policy (default [`CatchUp::Last`]).
    pub fn catch_up(mut self, catch_up: CatchUp) -> ScheduleSpec {
        self.catch_up = catch_up;
        self
    }

    /// Delays each firing by up to `max`: the delay of a firing is derived from
    /// the schedule id and its fire time, so it is the same after a restart. A
    /// delay never reaches the next fire time (it is capped below the interval, as
    /// Temporal caps it), so a jitter wider than the interval drops no firing.
    pub fn jitter(mut self, max: Duration) -> ScheduleSpec {
        self.jitter_ms = millis(max);
        self
    }

    fn encode(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec(self).map_err(|e| Error::Codec(e.to_string()))
    }

    fn decode(bytes: &[u8]) -> Result<ScheduleSpec> {
        rmp_serde::from_slice(bytes).map_err(|e| Error::Codec(e.to_string()))
    }
}

/// A schedule as listed by [`Host::schedules`].
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleInfo {
    /// Its id.
    pub id: String,
    /// The workflow each firing starts.
    pub workflow: String,
    /// When it fires and its policies.
    pub spec: ScheduleSpec,
    /// Paused schedules do not fire.
    pub paused: bool,
    /// The next firing's nominal time (before jitter); `None` when paused or
    /// when the spec never fires again.
    pub next_fire: Option<SystemTime>,
    /// The run of the last firing started.
    pub last_run: Option<String>,
}

/// The run id of the firing of schedule `id` at `fire_ms`.
pub(crate) fn run_id_of(id: &str, fire_ms: u64) -> String {
    format!("{id}/{fire_ms}")
}

fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 256 || id.contains('\0') {
        return Err(Error::InvalidSchedule {
            id: id.to_owned(),
            reason: "an id must be 1 to 256 bytes without NUL".to_owned(),
        });
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> reel_storage::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Storage(e.to_string()))?
        .map_err(Error::from)
}

impl Host {
    /// Creates a durable schedule: from now on, each firing of `spec` starts a run
    /// of `W`'s workflow with `input` and the id `<id>/<fire time in ms>`, on the
    /// newest version of `W::NAME` registered when it fires: a schedule names a
    /// workflow, not a version, so it goes on firing after a deploy that registers
    /// only a newer version. While no version of the name is registered, the
    /// schedule is kept and its due firing waits (logged at warn level) for a host
    /// that registers it, which handles it as a missed firing. The first firing
    /// is the first fire time after now. It survives restarts; firings missed
    /// while no host ran follow the spec's [`CatchUp`].
    ///
    /// # Errors
    /// [`Error::InvalidSchedule`] (bad id, cron expression or time zone),
    /// [`Error::ScheduleExists`], [`Error::UnknownWorkflow`] /
    /// [`Error::VersionMismatch`] when `W` is not registered, [`Error::Codec`],
    /// [`Error::Storage`]: nothing is stored then.
    pub async fn schedule<W: Workflow>(
        &self,
        id: &str,
        spec: ScheduleSpec,
        input: W::Input,
    ) -> Result<()> {
        let record = self.schedule_record::<W>(id, &spec, &input)?;
        let scheduler = self.scheduler_ref();
        let _lock = scheduler.lock().await;
        let store = self.core().store().clone();
        // One check-and-create for every host sharing the store.
        if !blocking(move || store.swap_schedule(None, &record)).await? {
            return Err(Error::ScheduleExists(id.to_owned()));
        }
        scheduler.wake();
        Ok(())
    }

    /// Replaces a schedule's spec and input (and workflow); a paused schedule
    /// stays paused. The next firing is the first fire time of the new spec after
    /// now. A firing held back by [`Overlap::BufferOne`] is kept: it starts when
    /// the previous run ends, as before the update (with the new input).
    ///
    /// # Errors
    /// As [`Host::schedule`], [`Error::UnknownSchedule`] instead of
    /// [`Error::ScheduleExists`].
    pub async fn update_schedule<W: Workflow>(
        &self,
        id: &str,
        spec: ScheduleSpec,
        input: W::Input,
    ) -> Result<()> {
        let record = self.schedule_record::<W>(id, &spec, &input)?;
        self.change_schedule(id, move |old| {
            let mut new = record.clone();
            new.paused = old.paused;
            new.last_run = old.last_run.take();
            new.buffered = old.buffered.take();
            *old = new;
            Ok(())
        })
        .await
    }

    /// Pauses a schedule: it does not fire until resumed.
    ///
    /// # Errors
    /// [`Error::UnknownSchedule`], [`Error::Storage`].
    pub async fn pause_schedule(&self, id: &str) -> Result<()> {
        self.change_schedule(id, |r| {
            r.paused = true;
            Ok(())
        })
        .await
    }

    /// Resumes a paused schedule. Firings due while it was paused are missed
    /// firings: the spec's [`CatchUp`] says which start.
    ///
    /// # Errors
    /// [`Error::UnknownSchedule`], [`Error::Storage`].
    pub async fn resume_schedule(&self, id: &str) -> Result<()> {
        self.change_schedule(id, |r| {
            r.paused = false;
            Ok(())
        })
        .await
    }

    /// Deletes a schedule; runs it started are not touched.
    ///
    /// # Errors
    /// [`Error::UnknownSchedule`], [`Error::Storage`].
    pub async fn delete_schedule(&self, id: &str) -> Result<()> {
        let scheduler = self.scheduler_ref();
        let _lock = scheduler.lock().await;
        let store = self.core().store().clone();
        let key = id.to_owned();
        // A record that does not decode is there: deleting it removes the damage.
        match blocking(move || Ok(store.get_schedule(&key))).await? {
            Ok(Some(_)) | Err(reel_storage::StorageError::CorruptRecord(_)) => {}
            Ok(None) => return Err(Error::UnknownSchedule(id.to_owned())),
            Err(e) => return Err(e.into()),
        }
        let store = self.core().store().clone();
        let key = id.to_owned();
        blocking(move || store.delete_schedule(&key)).await?;
        scheduler.wake();
        Ok(())
    }

    /// Every schedule, by id, with its next fire time. A schedule whose record
    /// this build cannot read (damaged, or written by a newer reel) is left out and
    /// logged: it harms no other; [`Host::delete_schedule`] removes it.
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        let store = self.core().store().clone();
        let records = blocking(move || store.list_schedules()).await?;
        Ok(records
            .into_iter()
            .filter_map(|r| {
                let spec = match ScheduleSpec::decode(&r.spec) {
                    Ok(spec) => spec,
                    Err(e) => {
                        tracing::error!(schedule = %r.id, error = %e, "reel: unreadable schedule left out");
                        return None;
                    }
                };
                Some(ScheduleInfo {
                    spec,
                    next_fire: (!r.paused && r.next_fire != u64::MAX).then(|| from_ms(r.next_fire)),
                    id: r.id,
                    workflow: r.workflow,
                    paused: r.paused,
                    last_run: r.last_run,
                })
            })
            .collect())
    }

    /// A new record for `id` (checked: id, spec, workflow), firing first after now.
    fn schedule_record<W: Workflow>(
        &self,
        id: &str,
        spec: &ScheduleSpec,
        input: &W::Input,
    ) -> Result<ScheduleRecord> {
        check_id(id)?;
        let timing = Timing::of(id, spec)?;
        self.core()
            .check_registered(W::NAME, W::VERSION)
            .map_err(Error::from)?;
        let now = self.core().clock().now_ms();
        Ok(ScheduleRecord {
            id: id.to_owned(),
            workflow: W::NAME.to_owned(),
            version: W::VERSION,
            input: encode(input)?,
            spec: spec.encode()?,
            paused: false,
            next_fire: timing.next_after(now).unwrap_or(u64::MAX),
            last_run: None,
            buffered: None,
        })
    }

    async fn change_schedule(
        &self,
        id: &str,
        mut change: impl FnMut(&mut ScheduleRecord) -> Result<()>,
    ) -> Result<()> {
        let scheduler = self.scheduler_ref();
        let _lock = scheduler.lock().await;
        // Read, change, and store only if nobody (another host's scheduler
        // advancing it, say) stored something else in between; else again.
        loop {
            let store = self.core().store().clone();
            let key = id.to_owned();
            let Some(old) = blocking(move || store.get_schedule(&key)).await? else {
                return Err(Error::UnknownSchedule(id.to_owned()));
            };
            let mut record = old.clone();
            change(&mut record)?;
            let store = self.core().store().clone();
            if blocking(move || store.swap_schedule(Some(&old), &record)).await? {
                break;
            }
        }
        scheduler.wake();
        Ok(())
    }
}
