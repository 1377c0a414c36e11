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
//!
//! On a store that admits itself ([`reel_storage::Admission`]: hosts sharing one
//! database), order numbers and the de-duplication check come from the store,
//! and admission offers the store this host's waiting runs in order: it grants
//! what the queue's limits allow across every host (`admit_shared`). A run's end
//! gives its slot back in the store, which tells the other hosts; they also
//! offer their waiting runs at every inbox poll.

use super::*;
use crate::message::Admit;
use crate::queues::QueueLimits;
use reel_storage::{Grant, QueueEntry, QueueLimit, Reservation};

/// Waiting runs offered to a store that admits, per pass.
const OFFER: usize = 64;

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
    /// `first` goes into the run's first write after its start (a signal that
    /// comes with it).
    ///
    /// # Errors
    /// [`ActorError::UnknownQueue`], [`ActorError::Deduplicated`],
    /// [`ActorError::NotRegistered`], [`ActorError::RunExists`], storage errors.
    /// Nothing is written on an error.
    #[allow(clippy::too_many_arguments)]
    pub async fn enqueue(
        &self,
        workflow: &str,
        version: u32,
        run_id: &str,
        input: Payload,
        deadline: Option<u64>,
        place: QueuePlace,
        first: Vec<Event>,
    ) -> Result<Started, ActorError> {
        self.check_open()?;
        check_new_run_id(run_id)?;
        self.check_registered(workflow, version)?;
        let (meta, mut events) = self.new_run(workflow, version, run_id, input, None, deadline);
        events.extend(first);
        self.enqueue_run(meta, events, None, place).await
    }

    /// Writes a run built by the caller (`meta`, `events`) enqueued at `place`,
    /// with `timers` armed for it (by default, those its events schedule), and
    /// hands it to its queue: the reservation of its order number and key, and
    /// what becomes of them when the write does not create the run.
    ///
    /// # Errors
    /// As [`Core::enqueue`].
    pub(super) async fn enqueue_run(
        &self,
        mut meta: RunMeta,
        events: Vec<Event>,
        timers: Option<Vec<TimerEntry>>,
        place: QueuePlace,
    ) -> Result<Started, ActorError> {
        let run_id = meta.run_id.clone();
        let shared = self.store.admission().is_some();
        let order = if shared {
            self.reserve_shared(&place, &run_id).await?
        } else {
            self.queues
                .reserve(&place.queue, &run_id, place.dedup_key.as_ref())?
        };
        let (queue, key) = (place.queue.clone(), place.dedup_key.clone());
        meta.state = RunState::Enqueued;
        meta.queue = Some(QueueEntry {
            name: place.queue.clone(),
            priority: place.priority,
            order,
            dedup_key: place.dedup_key,
        });
        let created = self.create_with(meta, events, timers).await;
        if shared {
            // The store refused the creation without a run of this id: another
            // host's run took the key since the check.
            if let (Err(ActorError::UnknownRun(_)), Some(key)) = (&created, key) {
                let (q, k) = (queue.clone(), key.clone());
                let holder = self
                    .on_admission(None, move |a| a.key_holder(&q, &k))
                    .await?;
                if let Some(run_id) = holder {
                    return Err(ActorError::Deduplicated { queue, key, run_id });
                }
            }
        } else if matches!(created, Ok(Started::Created)) {
            self.queues.created(&queue, &run_id, key.as_ref());
        } else {
            self.queues.unreserve(&queue, &run_id);
        }
        created
    }

    /// The order number of a new run on a store that admits: checks the queue
    /// here and the key in the store.
    async fn reserve_shared(&self, place: &QueuePlace, run_id: &str) -> Result<u64, ActorError> {
        if !self.options.queues.contains_key(&place.queue) {
            return Err(ActorError::UnknownQueue(place.queue.clone()));
        }
        let (queue, run, key) = (
            place.queue.clone(),
            run_id.to_owned(),
            place.dedup_key.clone(),
        );
        let reserved = self
            .on_admission(Reservation::Order(0), move |a| {
                a.reserve(&queue, &run, key.as_deref())
            })
            .await?;
        match reserved {
            Reservation::Order(order) => Ok(order),
            Reservation::HeldBy(holder) => Err(ActorError::Deduplicated {
                queue: place.queue.clone(),
                key: place.dedup_key.clone().unwrap_or_default(),
                run_id: holder,
            }),
        }
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
        if self.store.admission().is_some() {
            return self.admit_shared(queue).await;
        }
        let admission = self.queues.take(queue, self.options.clock.now_ms());
        self.look_again_at(queue, admission.retry_at);
        self.deliver_admits(queue, admission.runs).await;
    }

    /// Admission by the store: offers it this host's first waiting runs, in
    /// order, until it grants fewer than offered.
    async fn admit_shared(&self, queue: &str) {
        let Some(turn) = self.queues.turn(queue) else {
            return;
        };
        let _turn = turn.lock().await;
        let limits = self.queue_limits(queue).unwrap_or_default();
        let limit = QueueLimit {
            concurrency: limits
                .concurrency
                .map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
            rate: limits
                .rate_limit
                .map(|(n, p)| (n, u64::try_from(p.as_millis()).unwrap_or(u64::MAX))),
        };
        while !self.is_closing() {
            let candidates = self.queues.candidates(queue, OFFER);
            if candidates.is_empty() {
                return;
            }
            let (q, offered) = (queue.to_owned(), candidates.len());
            let now = self.options.clock.now_ms();
            let grant = self
                .on_admission(Grant::default(), move |a| {
                    a.acquire(&q, limit, now, &candidates)
                })
                .await;
            let grant = match grant {
                Ok(grant) => grant,
                Err(e) => {
                    // Offered again at the next inbox poll.
                    tracing::warn!(queue, error = %e, "reel: queue admission failed; retrying");
                    return;
                }
            };
            self.look_again_at(queue, grant.retry_at);
            let all = grant.admitted.len() == offered;
            let runs = self.queues.granted(queue, &grant.admitted);
            self.deliver_admits(queue, runs).await;
            if !all {
                return;
            }
        }
    }

    /// Admits again at `at` (the rate window has room then), unless a look at or
    /// before it is scheduled.
    fn look_again_at(&self, queue: &str, at: Option<u64>) {
        if let Some(at) = at
            && self.queues.schedule_wake(queue, at)
        {
            self.wake_queue_at(queue.to_owned(), at);
        }
    }

    /// Sends each admitted run `Admit`.
    async fn deliver_admits(&self, queue: &str, runs: Vec<Arc<str>>) {
        let admits = runs.into_iter().map(|run| async move {
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
            Ok(Some(_)) => {
                // Still enqueued: its slot in the store goes to the next run too.
                self.release_slot(queue, run_id).await;
                self.retry_admission(queue, run_id, &error);
            }
            // Its state unknown, a slot in the store stays held until it is
            // admitted again or found ended.
            Err(_) => self.retry_admission(queue, run_id, &error),
        }
    }

    /// Runs `f` on the store's admission, off the async workers; `none` when the
    /// store admits nothing itself.
    async fn on_admission<T: Send + 'static>(
        &self,
        none: T,
        f: impl FnOnce(&dyn reel_storage::Admission) -> reel_storage::Result<T> + Send + 'static,
    ) -> Result<T, reel_storage::StorageError> {
        let store = self.store.clone();
        blocking(move || match store.admission() {
            Some(a) => f(a),
            None => Ok(none),
        })
        .await
    }

    /// Gives `run_id`'s slot back in a store that admits (nothing otherwise).
    async fn release_slot(&self, queue: &str, run_id: &str) {
        let (q, run) = (queue.to_owned(), run_id.to_owned());
        let released = self.on_admission((), move |a| a.release(&q, &run)).await;
        if let Err(e) = released {
            // Reclaimed by a later admission once the run has ended.
            tracing::warn!(run_id, queue, error = %e, "reel: could not give a queue slot back");
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
        if self.store.admission().is_some() {
            // The slot is the store's (this host may not have admitted the run).
            self.queues.ended(queue, run_id);
            let Some(core) = self.me.upgrade() else {
                return;
            };
            let busy = self.activity.enter();
            let (queue, run_id) = (queue.to_owned(), run_id.to_owned());
            tokio::spawn(async move {
                let _busy = busy;
                core.release_slot(&queue, &run_id).await;
                core.admit(&queue).await;
            });
            return;
        }
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
