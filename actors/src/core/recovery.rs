//! Recovery: what opening a core does at start-up, and what taking a partition
//! over does on a host that shares its store. Damaged records park their runs
//! (in memory); parked runs and runs whose timer came due while no host ran are
//! marked running; the timer service gets the due-time index; unfinished runs are
//! resumed in the background.

use super::*;

/// The runs named by damaged records, each with the first damage found. A record
/// that names no run is only logged: there is no run to report it on.
fn corrupt_runs<'a>(records: impl Iterator<Item = &'a CorruptRecord>) -> HashMap<String, Failure> {
    let mut runs = HashMap::new();
    for record in records {
        match (record.failure(), &record.run_id) {
            (Some(failure), Some(run_id)) => {
                tracing::error!(%run_id, %record, "reel: run parked: a record of it is corrupt");
                runs.entry(run_id.clone()).or_insert(failure);
            }
            _ => tracing::error!(%record, "reel: corrupt record names no run; skipped"),
        }
    }
    runs
}

impl Core {
    /// Opens a core over `store`: loads the due-time index into the timer service and
    /// begins recovery of unfinished runs in the background, so it returns
    /// as soon as the store is readable. A store several hosts share is recovered
    /// partition by partition as this host leases them (`cluster`).
    ///
    /// # Errors
    /// A storage error from the recovery scan.
    pub async fn open(
        store: Arc<dyn Store>,
        registry: Arc<dyn Registry>,
        options: CoreOptions,
    ) -> Result<Arc<Core>, ActorError> {
        let clustered = store.cluster().is_some();
        let (unfinished, timers) = if clustered {
            (Scan::default(), Scan::default())
        } else {
            let scan = store.clone();
            let unfinished = blocking(move || scan.unfinished_runs()).await?;
            let scan = store.clone();
            (unfinished, blocking(move || scan.timers()).await?)
        };
        let passivator = Passivator::start(options.passivate_after);
        let log_watchers = Arc::new(LogWatchers::default());
        store.set_commit_listener(log_watchers.clone());
        let activity = Arc::new(reel_storage::Activity::default());
        options.clock.watch(&activity);
        let core = Arc::new_cyclic(|me: &Weak<Core>| {
            // Unbounded: journals hand it timers with `try_send`, which must never
            // drop one (a dropped timer is a run that never wakes).
            let timers = TimerService::spawn_with_mailbox(
                TimerArgs {
                    host: me.clone(),
                    timers: Vec::new(),
                    clock: options.clock.clone(),
                    activity: activity.clone(),
                },
                kameo::mailbox::unbounded(),
            );
            Core {
                activations: Semaphore::new(options.activation_concurrency.max(1)),
                new_runs: Arc::new(Semaphore::new(options.activation_concurrency.max(1))),
                queues: crate::queues::Queues::new(&options.queues),
                store,
                registry,
                options: Arc::new(options),
                live: Mutex::new(HashMap::new()),
                fresh: FreshRuns::new(),
                passivator,
                actor_runs: Mutex::new(HashMap::new()),
                crash_messages: Mutex::new(HashMap::new()),
                store_crashes: Mutex::default(),
                resuming: Mutex::default(),
                unrecorded_parks: Mutex::new(HashMap::new()),
                deleted_creations: Mutex::default(),
                supervisors: tokio::sync::Mutex::new((spawn_supervisor(me.clone()), 0)),
                retired_supervisors: Mutex::new(Vec::new()),
                timers,
                waiters: Waiters::default(),
                publish_waiters: Waiters::default(),
                child_subscribers: super::subscriptions::Subscriptions::default(),
                log_watchers,
                retention_cursors: Default::default(),
                closing: AtomicBool::new(false),
                inbox: inbox::InboxTurn::default(),
                leaving: Mutex::default(),
                lease_until: Mutex::default(),
                activity: activity.clone(),
                me: me.clone(),
            }
        });
        if let Err(e) = core.recover_runs(unfinished, timers).await {
            core.discard().await;
            return Err(e);
        }
        core.spawn_retention(core.options.retention.clone());
        for queue in core.queues.names() {
            core.admit_later(queue, core.busy());
        }
        core.join_cluster().await;
        Ok(core)
    }

    /// Undoes an open that failed: stops what it started, and leaves the store
    /// open (its owner may retry).
    async fn discard(&self) {
        self.closing.store(true, Ordering::Release);
        let _ = self.timers.stop_gracefully().await;
        self.timers.wait_for_shutdown().await;
        let supervisor = self.supervisors.lock().await.0.clone();
        let _ = supervisor.stop_gracefully().await;
        supervisor.wait_for_shutdown().await;
    }

    /// Recovers runs found by a scan (of the whole store, or of partitions just
    /// leased): damaged ones are parked in memory; parked ones, and suspended ones
    /// whose timer came due while no host ran them, are marked running; their
    /// timers go to the timer service and their queues learn them; unfinished
    /// ones are resumed in the background, and those whose parent ended while its
    /// cancel did not reach them are asked to cancel (`orphans`).
    pub(super) async fn recover_runs(
        &self,
        unfinished: Scan<RunMeta>,
        timers: Scan<TimerEntry>,
    ) -> Result<(), ActorError> {
        // A record that does not decode costs its run, not the store: that run is
        // reported parked (from memory, its records left as found, so the next host
        // reports it again) and neither resumed nor woken; every other run is.
        let corrupt = corrupt_runs(unfinished.corrupt.iter().chain(&timers.corrupt));
        let unfinished: Vec<RunMeta> = unfinished
            .items
            .into_iter()
            .filter(|m| !corrupt.contains_key(&m.run_id))
            .collect();
        let timers: Vec<TimerEntry> = timers
            .items
            .into_iter()
            .filter(|t| !corrupt.contains_key(&t.run_id))
            .collect();
        self.unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(corrupt);
        // Parked runs get another chance with the code registered now: mark them
        // running before accepting work, so `result()` waits for the retry instead
        // of reporting the old parking error.
        // Likewise a suspended run whose timer came due while no host was running:
        // it is about to be woken, so it is reported as running.
        let now = self.options.clock.now_ms();
        let due: std::collections::HashSet<&str> = timers
            .iter()
            .take_while(|t| t.fire_at <= now)
            .map(|t| t.run_id.as_str())
            .collect();
        let unparked: Vec<_> = unfinished
            .iter()
            .filter(|m| match &m.state {
                RunState::Parked { .. } => true,
                RunState::Suspended { .. } => due.contains(m.run_id.as_str()),
                _ => false,
            })
            .map(|m| {
                self.store.submit(Append {
                    run_id: m.run_id.clone(),
                    meta: Some(RunMeta {
                        state: RunState::Running,
                        updated_at: now,
                        ..m.clone()
                    }),
                    durable: true,
                    at: Some(now),
                    ..Append::default()
                })
            })
            .collect();
        drop(due);
        for ticket in unparked {
            ticket.await?;
        }
        self.schedule_timers(timers);
        self.queues.recover(&unfinished, |m| {
            self.check_registered(&m.workflow, m.version).is_ok()
        });
        // Hosts sharing a store post parent-close cancels as mail in the parent's
        // own write: nothing to look for then.
        let orphans = if self.store.cluster().is_none() {
            Core::orphans(&unfinished)
        } else {
            Vec::new()
        };
        let to_resume: Vec<String> = unfinished
            .into_iter()
            .filter(|m| match &m.state {
                RunState::Running | RunState::Parked { .. } => true,
                // A waiting run whose code is not registered here is activated to
                // be parked and reported so, not left waiting as if it could run.
                RunState::Suspended { awaits_child, .. } => {
                    *awaits_child || self.registry.lookup(&m.workflow, m.version).is_err()
                }
                _ => false,
            })
            .map(|m| m.run_id)
            .collect();
        tracing::info!(resuming = to_resume.len(), "reel: recovery started");
        // Apart: a parent's read must not hold back the resumptions.
        if !orphans.is_empty() {
            let weak = self.me.clone();
            let busy = self.activity.enter();
            tokio::spawn(async move {
                let _busy = busy;
                if let Some(core) = weak.upgrade() {
                    core.ask_orphans(orphans).await;
                }
            });
        }
        // A bare task: it only sends messages, and stops at the first refusal once
        // the host is closing.
        let weak = self.me.clone();
        let busy = self.activity.enter();
        tokio::spawn(async move {
            let _busy = busy;
            futures::stream::iter(to_resume)
                .for_each_concurrent(64, |run_id| {
                    let weak = weak.clone();
                    async move {
                        let Some(core) = weak.upgrade() else { return };
                        match core.deliver(&run_id, Resume).await {
                            Ok(()) => {}
                            // The store could not be reached (a database away for a
                            // while): the run is resumed once it answers.
                            Err(e) if core.passing_outage(&e) => {
                                core.resume_later(run_id.into());
                            }
                            Err(e) => {
                                tracing::warn!(run_id, error = %e, "reel: recovery could not resume run");
                            }
                        }
                    }
                })
                .await;
        });
        Ok(())
    }
}
