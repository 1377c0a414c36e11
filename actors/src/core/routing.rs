//! Routing of messages to runs: delivering one (activating a passivated run and
//! retrying when its actor stopped meanwhile), and background deliveries of what
//! wakes runs (timers coming due, child results, cancels passed on to children).
//! A run another host owns gets the message as mail (`cluster`).
//! Like every ask of a run actor, deliveries go through `asking::ask`, which never
//! waits on an actor that has stopped for good.

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
        let busy = self.activity.enter();
        Some(tokio::spawn(async move {
            let _busy = busy;
            // A timer or child result must not be lost to a passing failure: retry
            // with backoff. (After a restart the index delivers timers again anyway.)
            // On a store whose outages pass, failures of the store are waited out
            // for as long as the host is open.
            let mut attempt = 0u32;
            loop {
                let outcome = {
                    let Ok(_permit) = core.activations.acquire().await else {
                        return;
                    };
                    core.deliver(&run_id, delivery.clone()).await
                };
                match outcome {
                    Ok(()) | Err(ActorError::Shutdown | ActorError::RunFinished(_)) => return,
                    Err(e) => {
                        if attempt >= 5 && !core.passing_outage(&e) || core.is_closing() {
                            return;
                        }
                        tracing::warn!(run_id, attempt, error = %e, "reel: background delivery failed");
                        tokio::time::sleep(Duration::from_millis(50 << attempt.min(5))).await;
                        attempt += 1;
                    }
                }
            }
        }))
    }

    /// Sends `msg` to the run's actor, activating it if it is passivated, and retrying
    /// when the actor stopped (passivated or restarted) while the message was queued.
    pub(crate) async fn deliver<M>(&self, run_id: &str, msg: M) -> Result<(), ActorError>
    where
        M: Clone + Send + Mailable + 'static,
        RunActor: Message<M, Reply = Result<(), ActorError>>,
    {
        self.deliver_to(run_id, msg).await
    }

    async fn deliver_to<M>(&self, run_id: &str, msg: M) -> Result<(), ActorError>
    where
        M: Clone + Send + Mailable + 'static,
        RunActor: Message<M, Reply = Result<(), ActorError>>,
    {
        let _busy = self.activity.enter();
        let mut last = String::new();
        for _ in 0..16 {
            self.check_open()?;
            // Another host owns the run: it gets what wakes the run as mail.
            if self.owned_elsewhere(run_id) {
                return self.post(run_id, msg.mail()).await;
            }
            let actor = self.actor_for(run_id).await?;
            match ask(&actor, msg.clone()).await {
                Ok(()) => return Ok(()),
                Err(SendError::HandlerError(ActorError::Retired)) => {}
                // The actor's view of the log was behind the store (an append of the
                // run's previous actor landed after this one read the log): nothing
                // was written, and the actor has retired, so a fresh one rereads.
                Err(SendError::HandlerError(ActorError::Storage(StorageError::Conflict {
                    ..
                }))) => {}
                // The run's partition was taken over since the check above: its
                // write was refused, so the new owner gets the message.
                Err(SendError::HandlerError(ActorError::Storage(StorageError::NotOwner {
                    ..
                }))) => return self.post(run_id, msg.mail()).await,
                Err(SendError::HandlerError(e)) => return Err(e),
                // Its actor could not start, the run gone (deleted since the caller
                // read it): unknown, not unavailable, and no use trying again.
                Err(_)
                    if actor.with_startup_result(|r| {
                        matches!(r, Err(HookError::Error(ActorError::UnknownRun(_))))
                    }) == Some(true) =>
                {
                    self.forget(run_id, actor.id());
                    return Err(ActorError::UnknownRun(run_id.to_owned()));
                }
                Err(e) => last = e.to_string(),
            }
            self.forget(run_id, actor.id());
            tokio::task::yield_now().await;
        }
        Err(ActorError::Unavailable {
            run_id: run_id.to_owned(),
            reason: last,
        })
    }

    pub(crate) fn fire_timer(&self, timer: TimerEntry) {
        let run_id = timer.run_id.clone();
        let _ = self.spawn_delivery(run_id, Delivery::Timer(timer));
    }
}
