//! Activation and routing: the live-run map, spawning run actors under rotating
//! supervisors, delivering messages (activating passivated runs), and what happens
//! when a run actor stops for good.

use super::*;

impl Core {
    /// Delivers in the background, bounded by the activation semaphore. A bare task:
    /// it ends after one delivery; once the host is closing, delivery is refused.
    /// The task's handle tells when it is over (delivered, or given up).
    pub(crate) fn spawn_delivery(
        &self,
        run_id: String,
        delivery: Delivery,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let core = self.me.upgrade()?;
        Some(tokio::spawn(async move {
            // A timer or child result must not be lost to a passing failure: retry
            // with backoff. (After a restart the index delivers timers again anyway.)
            for attempt in 0..6u32 {
                let outcome = {
                    let Ok(_permit) = core.activations.acquire().await else {
                        return;
                    };
                    core.deliver(&run_id, delivery.clone()).await
                };
                match outcome {
                    Ok(()) | Err(ActorError::Shutdown | ActorError::RunFinished(_)) => return,
                    Err(e) => {
                        tracing::warn!(run_id, attempt, error = %e, "reel: background delivery failed");
                        tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    }
                }
            }
        }))
    }

    /// Sends `msg` to the run's actor, activating it if it is passivated, and retrying
    /// when the actor stopped (passivated or restarted) while the message was queued.
    pub(crate) async fn deliver<M>(&self, run_id: &str, msg: M) -> Result<(), ActorError>
    where
        M: Clone + Send + 'static,
        RunActor: Message<M, Reply = Result<(), ActorError>>,
    {
        self.deliver_with(run_id, msg, None).await
    }

    /// [`Core::deliver`], handing a newly spawned actor the run's state if known.
    pub(super) async fn deliver_with<M>(
        &self,
        run_id: &str,
        msg: M,
        mut preload: Option<(RunMeta, Vec<Event>)>,
    ) -> Result<(), ActorError>
    where
        M: Clone + Send + 'static,
        RunActor: Message<M, Reply = Result<(), ActorError>>,
    {
        let mut last = String::new();
        for _ in 0..16 {
            self.check_open()?;
            let actor = self.actor_for(run_id, preload.take()).await?;
            match actor.ask(msg.clone()).await {
                Ok(()) => return Ok(()),
                Err(SendError::HandlerError(ActorError::Retired)) => {}
                Err(SendError::HandlerError(e)) => return Err(e),
                Err(e) => last = e.to_string(),
            }
            self.forget(run_id, &actor).await;
            tokio::task::yield_now().await;
        }
        Err(ActorError::Unavailable {
            run_id: run_id.to_owned(),
            reason: last,
        })
    }

    pub(super) async fn forget(&self, run_id: &str, actor: &ActorRef<RunActor>) {
        let mut live = self.live.lock().await;
        if live.get(run_id).is_some_and(|a| a.id() == actor.id()) {
            live.remove(run_id);
        }
    }

    /// Removes the run's entry if it is still `actor`: called by a passivating actor.
    pub(crate) async fn retire(&self, run_id: &str, actor: &ActorRef<RunActor>) {
        self.forget(run_id, actor).await;
    }

    pub(super) async fn actor_for(
        &self,
        run_id: &str,
        preload: Option<(RunMeta, Vec<Event>)>,
    ) -> Result<ActorRef<RunActor>, ActorError> {
        let mut live = self.live.lock().await;
        if let Some(actor) = live.get(run_id)
            && actor.is_alive()
        {
            return Ok(actor.clone());
        }
        let core = self.me.upgrade().ok_or(ActorError::Shutdown)?;
        let run: Arc<str> = Arc::from(run_id);
        let first = AtomicBool::new(true);
        let args_run = run.clone();
        let args_core = core.clone();
        let preload = Mutex::new(preload);
        let factory = move || RunArgs {
            core: Arc::downgrade(&args_core),
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
            .insert(actor.id(), run.clone());
        live.insert(run, actor.clone());
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

    /// Called by a supervisor when a run actor stopped for good. The work happens in a
    /// task so the supervisor's loop never waits on the live-run lock.
    pub(crate) fn run_actor_stopped(&self, id: ActorId, reason: ActorStopReason) {
        let Some(core) = self.me.upgrade() else {
            return;
        };
        tokio::spawn(async move { core.after_run_actor_stopped(id, &reason).await });
    }

    pub(super) async fn after_run_actor_stopped(&self, id: ActorId, reason: &ActorStopReason) {
        let Some(run_id) = self
            .actor_runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        else {
            return;
        };
        {
            let mut live = self.live.lock().await;
            if live.get(&run_id).is_some_and(|a| a.id() == id) {
                live.remove(&run_id);
            }
        }
        let crash = self
            .crash_messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run_id);
        if matches!(
            reason,
            ActorStopReason::Normal | ActorStopReason::SupervisorRestart
        ) || self.is_closing()
        {
            return;
        }
        let message = crash.unwrap_or_else(|| format!("{reason:?}"));
        tracing::error!(run_id = %run_id, error = %message, "reel: run keeps crashing; parked");
        if let Err(e) = self.park(&run_id, Failure::Crashed(message)).await {
            tracing::error!(run_id = %run_id, error = %e, "reel: could not park run");
        }
    }

    pub(crate) fn record_crash(&self, run_id: &Arc<str>, message: String) {
        self.crash_messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.clone(), message);
    }
}
