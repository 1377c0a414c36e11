//! Activation and routing: the live-run map, spawning run actors under rotating
//! supervisors, delivering messages (activating passivated runs), and what happens
//! when a run actor stops for good.

use super::*;

impl Core {
    /// Removes the run's live entry if it is still the actor `actor`.
    pub(super) fn forget(&self, run_id: &str, actor: ActorId) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if live
            .get(run_id)
            .and_then(|cell| cell.get())
            .is_some_and(|a| a.id() == actor)
        {
            live.remove(run_id);
            metrics::gauge!(reel_storage::metrics::LIVE_RUNS).set(live.len() as f64);
        }
    }

    /// Removes the run's entry if it is still `actor`: called by a passivating actor.
    pub(crate) async fn retire(&self, run_id: &str, actor: ActorId) {
        self.forget(run_id, actor);
    }

    /// The run's actor, spawned if it has none (or a dead one). Its cell is taken or
    /// put in place under the lock, and the actor spawned outside it: the first
    /// caller spawns, concurrent callers for the same run wait for that actor. A
    /// spawn takes the run's fresh state ([`Core::stash_fresh`]) if it is still
    /// there, and reads the run from the store otherwise (and marks a state still
    /// expected as stale).
    pub(super) async fn actor_for(&self, run_id: &str) -> Result<ActorRef<RunActor>, ActorError> {
        let cell = {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            match live.get(run_id) {
                // Alive, or being spawned by another caller.
                Some(cell) if cell.get().is_none_or(|a| a.is_alive()) => cell.clone(),
                _ => {
                    let cell = LiveCell::default();
                    live.insert(Arc::from(run_id), cell.clone());
                    metrics::gauge!(reel_storage::metrics::LIVE_RUNS).set(live.len() as f64);
                    cell
                }
            }
        };
        let activated = std::time::Instant::now();
        let mut spawned = false;
        let actor = cell
            .get_or_try_init(|| {
                spawned = true;
                let preload = self.fresh.take(run_id);
                // Boxed: spawning is the rare path, and its future (kameo's spawn
                // under a supervisor) would otherwise make every delivery's future,
                // which callers hold across awaits, several kilobytes larger.
                Box::pin(self.spawn_run(run_id, preload))
            })
            .await?
            .clone();
        if spawned {
            metrics::histogram!(reel_storage::metrics::ACTIVATION_SECONDS)
                .record(activated.elapsed().as_secs_f64());
        }
        // Spawned while the host began to shut down (which may have missed it).
        if self.is_closing() {
            let _ = ask(&actor, StopRun).await;
            return Err(ActorError::Shutdown);
        }
        Ok(actor)
    }

    /// Keeps a new run's state as its first write left it for its first
    /// activation, under the token of its expectation ([`FreshRuns`]): a message
    /// that reaches the run before its own activation activates it with this
    /// state. Not kept once any actor was spawned for the run since the
    /// expectation (its state may be further on): that one, or the next, reads
    /// the store.
    pub(crate) fn stash_fresh(&self, run_id: &str, token: u64, preload: Preload) {
        // Under the live lock: a run some message has activated already gets no
        // stash, and a spawn after this finds it.
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        self.fresh
            .stash(run_id, token, preload, live.contains_key(run_id));
    }

    /// Drops a new run's state if no activation took it (its activation failed,
    /// or came after another's).
    pub(crate) fn drop_fresh(&self, run_id: &str, token: u64) {
        self.fresh.forget(run_id, token);
    }

    /// Spawns a run actor under the current supervisor.
    async fn spawn_run(
        &self,
        run_id: &str,
        preload: Option<Preload>,
    ) -> Result<ActorRef<RunActor>, ActorError> {
        let core = self.me.upgrade().ok_or(ActorError::Shutdown)?;
        let run: Arc<str> = Arc::from(run_id);
        let first = AtomicBool::new(true);
        let args_run = run.clone();
        let args_core = core.clone();
        let preload = Mutex::new(preload);
        let (store, registry, options, passivator) = (
            self.store.clone(),
            self.registry.clone(),
            self.options.clone(),
            self.passivator.clone(),
        );
        let factory = move || RunArgs {
            host: Arc::downgrade(&args_core) as Weak<dyn RunHost>,
            store: store.clone(),
            registry: registry.clone(),
            options: options.clone(),
            passivator: passivator.clone(),
            run_id: args_run.clone(),
            // Only the first start may use it: a restart reloads from disk.
            preload: preload.lock().unwrap_or_else(|p| p.into_inner()).take(),
            // A restart by the supervisor resumes on its own; the first start is
            // driven by the message that activated it.
            resume: !first.swap(false, Ordering::AcqRel),
        };
        let supervisor = self.supervisor().await;
        let actor = RunActor::supervise_with(&supervisor, factory)
            .restart_policy(RestartPolicy::Transient)
            .restart_limit(self.options.restart_limit, self.options.restart_window)
            .spawn()
            .await;
        self.actor_runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(actor.id(), run);
        Ok(actor)
    }

    pub(super) async fn supervisor(&self) -> ActorRef<RunSupervisor> {
        let mut sup = self.supervisors.lock().await;
        if sup.1 >= CHILDREN_PER_SUPERVISOR {
            let old = std::mem::replace(&mut sup.0, spawn_supervisor(self.me.clone()));
            let _ = old.tell(Retire(sup.1)).try_send();
            sup.1 = 0;
            // Keep the retired supervisor referenced until it stops by itself: kameo
            // stops an actor whose last reference is dropped, and a stopping
            // supervisor stops its children, which would kill live runs.
            let mut retired = self
                .retired_supervisors
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            retired.retain(|s| s.is_alive());
            retired.push(old);
        }
        sup.1 += 1;
        sup.0.clone()
    }

    /// Called by a supervisor when a run actor stopped for good: forgets the actor
    /// (short std locks only, so the supervisor's loop never waits long) and, for a
    /// run that keeps crashing, parks it in a task of its own.
    pub(crate) fn run_actor_stopped(&self, id: ActorId, reason: ActorStopReason) {
        let Some(run_id) = self
            .actor_runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        else {
            return;
        };
        self.forget(&run_id, id);
        let crash = self
            .crash_messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run_id);
        let of_the_store = self
            .store_crashes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run_id);
        if matches!(
            reason,
            ActorStopReason::Normal | ActorStopReason::SupervisorRestart
        ) || self.is_closing()
            || crash.as_deref() == Some(crate::run_actor::RUN_MISSING)
        {
            return;
        }
        if of_the_store && self.store.outages_pass() {
            // The store could not be reached (a database server gone for a while):
            // not a crash loop of the run's own. It is resumed once the store answers.
            tracing::warn!(run_id = %run_id, error = ?crash, "reel: the store failed under a run; resuming it once the store answers");
            self.resume_later(run_id);
            return;
        }
        let message = crash.unwrap_or_else(|| format!("{reason:?}"));
        tracing::error!(run_id = %run_id, error = %message, "reel: run keeps crashing; parked");
        let Some(core) = self.me.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            if let Err(e) = core.park(&run_id, Failure::Crashed(message)).await {
                tracing::error!(run_id = %run_id, error = %e, "reel: could not park run");
            }
        });
    }

    /// Whether `e` is the store being unreachable (an I/O error, or no answer)
    /// on a store whose outages pass: what meets it waits for the store instead
    /// of giving up.
    pub(super) fn passing_outage(&self, e: &ActorError) -> bool {
        matches!(
            e,
            ActorError::Storage(StorageError::Io(_)) | ActorError::Unavailable { .. }
        ) && self.store.outages_pass()
    }

    /// Resumes the run once the store answers again, retrying with backoff until
    /// it does or the host closes; one task per run.
    pub(super) fn resume_later(&self, run_id: Arc<str>) {
        let Some(core) = self.me.upgrade() else {
            return;
        };
        if !self
            .resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.clone())
        {
            return;
        }
        let weak = self.me.clone();
        drop(core);
        tokio::spawn(async move {
            let mut wait = Duration::from_millis(100);
            loop {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
                let Some(core) = weak.upgrade().filter(|c| !c.is_closing()) else {
                    return;
                };
                // Taken out first: a crash while resuming starts another attempt.
                core.resuming
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&run_id);
                match core.deliver(&run_id, Resume).await {
                    Ok(())
                    | Err(
                        ActorError::Shutdown
                        | ActorError::RunFinished(_)
                        | ActorError::UnknownRun(_),
                    ) => return,
                    Err(e) => {
                        tracing::debug!(run_id = %run_id, error = %e, "reel: the store still fails; resuming the run later");
                        if !core
                            .resuming
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(run_id.clone())
                        {
                            return;
                        }
                    }
                }
            }
        });
    }

    pub(crate) fn record_crash(&self, run_id: &Arc<str>, message: String) {
        self.crash_messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.clone(), message);
    }
}
