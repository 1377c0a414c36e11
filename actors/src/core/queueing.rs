//! Queues: starting a run on a queue and admitting queued runs.
//!
//! A run started on a queue is written like any new run, but
//! [`RunState::Enqueued`] with its place ([`RunMeta::queue`]), and not activated.
//! Admission (`admit`) takes the runs the queue's limits allow in priority and
//! start order (`crate::queues`), records each as running and begins its handler.
//! It runs after each enqueue, after each end of one of the queue's runs, at
//! start-up, and when the rate window has room again (a wait on the host's clock).
//! A run whose admission fails (a storage error) gives its slot to the runs behind
//! it and is admitted again, in its place, after a backoff on the host's clock.

use super::*;
use crate::message::Admit;
use crate::queues::QueueLimits;
use reel_storage::QueueEntry;

/// Where a run is started: its queue, priority and de-duplication key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueuePlace {
    /// The queue's name (configured in [`CoreOptions::queues`]).
    pub queue: String,
    /// Lower values are admitted first; runs of one priority in start order.
    pub priority: i32,
    /// While a run with this key is enqueued or running on the queue, another
    /// run's start with the key is refused.
    pub dedup_key: Option<String>,
}

impl Core {
    /// Creates a run on a queue (idempotent on `run_id` for the same workflow): it
    /// is recorded enqueued, durably, and starts when the queue admits it, in
    /// priority and start order, across restarts. A `deadline` counts from now.
    ///
    /// # Errors
    /// [`ActorError::UnknownQueue`], [`ActorError::Deduplicated`],
    /// [`ActorError::NotRegistered`], [`ActorError::RunExists`], storage errors.
    /// Nothing is written on an error.
    pub async fn enqueue(
        &self,
        workflow: &str,
        version: u32,
        run_id: &str,
        input: Payload,
        deadline: Option<u64>,
        place: QueuePlace,
    ) -> Result<Started, ActorError> {
        self.check_open()?;
        check_run_id(run_id)?;
        self.check_registered(workflow, version)?;
        let order = self
            .queues
            .reserve(&place.queue, run_id, place.dedup_key.as_ref())?;
        let (mut meta, events) = self.new_run(workflow, version, run_id, input, None, deadline);
        meta.state = RunState::Enqueued;
        meta.queue = Some(QueueEntry {
            name: place.queue.clone(),
            priority: place.priority,
            order,
            dedup_key: place.dedup_key,
        });
        let created = self.create(meta, events).await;
        if !matches!(created, Ok(Started::Created)) {
            self.queues.unreserve(&place.queue, run_id);
        }
        created
    }

    /// The limits of a configured queue.
    pub fn queue_limits(&self, queue: &str) -> Option<QueueLimits> {
        self.options.queues.get(queue).copied()
    }

    /// Admits what `queue` allows, in a task of its own that holds `busy` (so a
    /// clock skipping ahead when the host idles waits for it).
    pub(crate) fn admit_later(&self, queue: String, busy: reel_storage::Busy) {
        let Some(core) = self.me.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let _busy = busy;
            core.admit(&queue).await;
        });
    }

    /// Takes the runs the queue admits now and admits each; if the rate limit holds
    /// runs back, looks again when the window has room.
    async fn admit(&self, queue: &str) {
        if self.is_closing() {
            return;
        }
        let admission = self.queues.take(queue, self.options.clock.now_ms());
        if let Some(at) = admission.retry_at
            && self.queues.schedule_wake(queue, at)
        {
            self.wake_queue_at(queue.to_owned(), at);
        }
        let admits = admission.runs.into_iter().map(|run| async move {
            match self.deliver(&run, Admit).await {
                Ok(()) | Err(ActorError::Shutdown) => {}
                Err(e) => self.admission_failed(queue, &run, e).await,
            }
        });
        futures::future::join_all(admits).await;
    }

    /// A run taken for admission could not be admitted. One admitted after all (or
    /// paused or parked since) keeps its slot; one that ended frees it; one still
    /// enqueued (or whose state cannot be read now) frees its slot for the runs
    /// behind it and is admitted again after a backoff, in its place.
    async fn admission_failed(&self, queue: &str, run_id: &str, error: ActorError) {
        match self.meta(run_id).await {
            Ok(Some(m)) if m.state.is_finished() => self.queue_ended(queue, run_id),
            Ok(None) => self.queue_ended(queue, run_id),
            Ok(Some(m)) if m.state != RunState::Enqueued => self.queues.not_aside(queue, run_id),
            Ok(Some(_)) | Err(_) => self.retry_admission(queue, run_id, &error),
        }
    }

    /// Sets a run whose admission failed aside: its slot goes to the next run now,
    /// and it waits for admission again after [`admission_backoff`] on the host's
    /// clock.
    fn retry_admission(&self, queue: &str, run_id: &str, error: &ActorError) {
        let Some(failures) = self.queues.admission_failed(queue, run_id) else {
            return;
        };
        let delay = admission_backoff(failures);
        tracing::warn!(run_id, queue, %error, failures, retry_in = ?delay, "reel: could not admit a queued run; retrying");
        self.admit_later(queue.to_owned(), self.activity.enter());
        let Some(core) = self.me.upgrade() else {
            return;
        };
        let weak = Arc::downgrade(&core);
        let at = core
            .options
            .clock
            .now_ms()
            .saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        let sleep = core.options.clock.sleep_until(reel_storage::from_ms(at));
        drop(core);
        let (queue, run_id) = (queue.to_owned(), run_id.to_owned());
        // Ends with the host (the weak reference) or after one retry.
        tokio::spawn(async move {
            sleep.await;
            let Some(core) = weak.upgrade() else { return };
            let _busy = core.activity.enter();
            core.readmit(&queue, &run_id).await;
        });
    }

    /// Puts a run set aside back in its place if it is still enqueued, and admits
    /// what the queue allows.
    async fn readmit(&self, queue: &str, run_id: &str) {
        if self.is_closing() {
            return;
        }
        match self.meta(run_id).await {
            Ok(Some(RunMeta {
                state: RunState::Enqueued,
                queue: Some(entry),
                ..
            })) if entry.name == queue => {
                if self.queues.requeue(run_id, &entry) {
                    self.admit(queue).await;
                }
            }
            Ok(Some(m)) if !m.state.is_finished() => self.queues.not_aside(queue, run_id),
            Ok(_) => self.queue_ended(queue, run_id),
            Err(e) => self.retry_admission(queue, run_id, &e),
        }
    }

    fn wake_queue_at(&self, queue: String, at: u64) {
        let Some(core) = self.me.upgrade() else {
            return;
        };
        let weak = Arc::downgrade(&core);
        let sleep = core.options.clock.sleep_until(reel_storage::from_ms(at));
        drop(core);
        tokio::spawn(async move {
            sleep.await;
            let Some(core) = weak.upgrade() else { return };
            core.queues.woke(&queue, at);
            core.admit(&queue).await;
        });
    }

    /// A run of `queue` ended (or left it unadmitted): its slot goes to the next.
    pub(crate) fn queue_ended(&self, queue: &str, run_id: &str) {
        if self.queues.ended(queue, run_id) {
            self.admit_later(queue.to_owned(), self.activity.enter());
        }
    }
}

/// How long a run whose admission failed `failures` times in a row waits before it
/// is tried again: 100 ms, doubling up to a minute.
fn admission_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(10);
    (Duration::from_millis(100) * (1u32 << doublings)).min(Duration::from_secs(60))
}
