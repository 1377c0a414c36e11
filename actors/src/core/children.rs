//! Child-run links: starting a parent's child, delivering its result to the parent,
//! and refusing a child call that would close a cycle of waiting runs.

use std::collections::HashMap;
use std::time::Duration;

use reel_storage::{Event, Failure, ParentLink, Payload, RunMeta, RunState};

use super::{Core, Started};
use crate::error::ActorError;
use crate::message::{ChildCall, Delivery, child_result, is_detached};

impl Core {
    /// Starts the child run (idempotent on its id) and arranges for its result to be
    /// delivered to `parent`'s wait `wait_id`, also when it has already finished.
    /// A child that cannot be started for good (workflow not registered, id taken by
    /// another workflow, invalid id) is delivered as a failed child; a passing failure
    /// (I/O, an actor restarting) is retried in the background while the parent waits.
    pub(crate) async fn ensure_child(&self, child: ChildCall) {
        let Some(core) = self.me.upgrade() else {
            return;
        };
        let (parent, child_run_id) = (child.link.run_id.as_str(), child.run_id.as_str());
        // Subscribe before looking, so a completion in between is not missed. A child
        // this host has already started for this wait is neither checked nor started
        // again: each execution of the parent calls every child it waits on, and a
        // fan-in would otherwise cost a start and a cycle check per child and per
        // wake-up.
        if core.child_subscribers.subscribe(&child.run_id, &child.link) {
            return;
        }
        // After subscribing: two runs calling each other at once each see the other's
        // subscription, so at least one of them finds the cycle.
        match core.child_cycle(parent, child_run_id).await {
            Ok(Some(cycle)) => {
                tracing::warn!(
                    parent,
                    child = child_run_id,
                    ?cycle,
                    "reel: child call would close a cycle"
                );
                return core.child_failed(&child, Failure::ChildCycle { cycle });
            }
            Ok(None) => {}
            // The check is a guard, not a precondition: a run that cannot be read here
            // is dealt with by the start below.
            Err(e) => {
                tracing::warn!(parent, child = child_run_id, error = %e, "reel: child cycle check failed")
            }
        }
        core.start_or_retry(child).await;
    }

    /// Starts a detached child (idempotent on its id): the parent does not wait for
    /// it and is not told when it ends, only whether it could be started, which is
    /// delivered to the parent's wait `wait_id` (`detached#<n>`). A passing failure is
    /// retried in the background, as for a waited-for child.
    pub(crate) async fn start_detached(&self, child: ChildCall) {
        let Some(core) = self.me.upgrade() else {
            return;
        };
        core.start_or_retry(child).await;
    }
}

/// What a wait on the run `child` gets when that run was deleted before its end
/// reached the wait (a later run under the id is not the one waited on).
fn deleted(child: &str) -> Failure {
    Failure::Other(format!(
        "run `{child}` was deleted while this run waited on it"
    ))
}

/// Whether trying the same thing again later can succeed.
fn is_passing(e: &ActorError) -> bool {
    match e {
        ActorError::Storage(s) => s.is_retryable(),
        ActorError::Unavailable { .. } | ActorError::Retired => true,
        _ => false,
    }
}

impl Core {
    /// The cycle `parent → child → … → parent` that waiting on `child` would close:
    /// the child is the parent itself, or an unfinished run that already waits
    /// (through its own children) on the parent. Walks up from the parent through the
    /// runs waiting on it, so only the parent's ancestors are read.
    async fn child_cycle(
        &self,
        parent: &str,
        child: &str,
    ) -> Result<Option<Vec<String>>, ActorError> {
        if parent == child {
            return Ok(Some(vec![parent.to_owned(), child.to_owned()]));
        }
        // Only an unfinished run can be waiting on anything.
        if self
            .meta(child)
            .await?
            .is_none_or(|m| m.state.is_finished())
        {
            return Ok(None);
        }
        // waiter → the run it waits on, for every run reached so far.
        let mut waits_on: HashMap<String, String> = HashMap::new();
        let mut frontier = vec![parent.to_owned()];
        while let Some(run) = frontier.pop() {
            for waiter in self.waiters_on(&run).await? {
                if waiter == parent || waits_on.contains_key(&waiter) {
                    continue;
                }
                waits_on.insert(waiter.clone(), run.clone());
                if waiter == child {
                    let mut cycle = vec![parent.to_owned(), child.to_owned()];
                    let mut at = child;
                    while let Some(next) = waits_on.get(at) {
                        cycle.push(next.clone());
                        at = next;
                    }
                    return Ok(Some(cycle));
                }
                frontier.push(waiter);
            }
        }
        Ok(None)
    }

    /// The runs waiting on `run` as their child while it is unfinished: those
    /// subscribed to it in this host, and the parent it was started by (also after a
    /// restart). Nobody waits on a finished run: its result is delivered.
    async fn waiters_on(&self, run: &str) -> Result<Vec<String>, ActorError> {
        let Some(meta) = self.meta(run).await? else {
            return Ok(Vec::new());
        };
        if meta.state.is_finished() {
            return Ok(Vec::new());
        }
        let mut waiters = self.child_subscribers.parents_of(run);
        waiters.extend(
            meta.parent
                .filter(|p| !is_detached(&p.wait_id))
                .map(|p| p.run_id),
        );
        Ok(waiters)
    }

    /// Starts a child, retrying in the background after a passing failure, and
    /// delivers a failure for good to its parent.
    async fn start_or_retry(&self, child: ChildCall) {
        match self.start_child(&child).await {
            Ok(()) => {}
            Err(e) if is_passing(&e) => self.retry_child_start(child, e),
            Err(e) => self.child_start_failed(&child, e),
        }
    }

    /// Starts a child (idempotent) and delivers its result at once if it has finished
    /// (a detached child's parent learns only that it started).
    async fn start_child(&self, c: &ChildCall) -> Result<(), ActorError> {
        let started = self
            .start(
                &c.workflow,
                c.version,
                &c.run_id,
                c.input.clone(),
                Some(c.link.clone()),
                None,
            )
            .await?;
        if is_detached(&c.link.wait_id) {
            self.spawn_delivery(
                c.link.run_id.clone(),
                Delivery::ChildDetached {
                    wait_id: c.link.wait_id.clone(),
                    child: c.run_id.clone(),
                    error: None,
                },
            );
            return Ok(());
        }
        // A child created now did not exist when the parent subscribed: its end
        // reaches the parent through the subscription. One that existed may have
        // ended before. The run waited on is the one the start found, as the
        // start read it: the id is not read again, as a run deleted since and its
        // id taken by a new run would give the call the new run.
        let Started::Existing(found) = started else {
            self.child_subscribers.started(&c.run_id, &c.link, None);
            return Ok(());
        };
        if found.state.is_finished() {
            self.unsubscribe(&c.run_id, &c.link);
            self.notify_parents(&found, None, std::iter::once(c.link.clone()));
        } else if found.parent.as_ref() == Some(&c.link) {
            self.child_subscribers.started(&c.run_id, &c.link, None);
        } else {
            // Not this parent's own child: its end is posted only to its recorded
            // parent. Its owner tells the subscribers it has; another host looks
            // for the end itself (`hear_remote_ends`). An end taken before the
            // subscription knew the run was not told to it (`Subscriptions::take`):
            // the run is looked at once more, by its creation time.
            self.child_subscribers
                .started(&c.run_id, &c.link, Some(found.created_at));
            let now = self.meta(&c.run_id).await?;
            self.settle_attached(&c.run_id, now);
        }
        Ok(())
    }

    /// Delivers the end of runs owned by other hosts that runs here wait on without
    /// being their recorded parent (`child`, when its change was heard of, or every
    /// one, at the inbox poll): their owner does not know of these waits.
    pub(super) async fn hear_remote_ends(&self, child: Option<&str>) {
        for child in self.child_subscribers.attached(child) {
            if !self.owned_elsewhere(&child) {
                continue;
            }
            match self.meta(&child).await {
                Ok(meta) => self.settle_attached(&child, meta),
                Err(e) => {
                    tracing::warn!(child, error = %e, "reel: could not read a run waited on here; looking again at the next poll");
                }
            }
        }
    }

    /// Delivers to the attached waits on `child` (see [`Subscriptions::take`]) what
    /// `meta`, the run under the id as just read, says of theirs: its end, if it is
    /// their run and has ended; that their run was deleted, if it is another run
    /// or none. The recorded parent hears by mail: only the attached waits.
    ///
    /// [`Subscriptions::take`]: super::subscriptions::Subscriptions::take
    fn settle_attached(&self, child: &str, meta: Option<RunMeta>) {
        match meta {
            Some(meta) if meta.state.is_finished() => {
                let taken = self
                    .child_subscribers
                    .take(child, meta.created_at, None, true);
                self.runs_gone(child, taken.gone);
                self.notify_parents(&meta, None, taken.ended.into_iter());
            }
            meta => {
                let current = meta.map(|m| m.created_at);
                let gone = self.child_subscribers.take_gone(child, current);
                self.runs_gone(child, gone);
            }
        }
    }

    /// Keeps starting a child whose start failed for a passing reason, with backoff,
    /// until it starts, fails for good or the host closes. A bare task: it holds the
    /// core weakly and ends at the first check after shutdown.
    fn retry_child_start(&self, c: ChildCall, first: ActorError) {
        tracing::warn!(parent = %c.link.run_id, child = %c.run_id, error = %first,
            "reel: child run could not be started yet; retrying");
        let core = self.me.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(20);
            loop {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                let Some(core) = core.upgrade().filter(|c| !c.is_closing()) else {
                    return;
                };
                match core.start_child(&c).await {
                    Ok(()) => return,
                    Err(e) if is_passing(&e) => {
                        tracing::warn!(child = %c.run_id, error = %e, "reel: child start failed again");
                    }
                    Err(e) => return core.child_start_failed(&c, e),
                }
            }
        });
    }

    /// Delivers a child that cannot be started to its parent as a failed child.
    fn child_start_failed(&self, c: &ChildCall, e: ActorError) {
        match e {
            ActorError::NotRegistered(f) => self.child_failed(c, f),
            ActorError::Shutdown => {}
            e => self.child_failed(c, Failure::Other(e.to_string())),
        }
    }

    /// Tells the runs in `waits` that the run they waited on under the id `child`
    /// was deleted (a later run under the id, if any, is not theirs): their
    /// `ctx.child` fails.
    pub(super) fn runs_gone(&self, child: &str, waits: Vec<ParentLink>) {
        if waits.is_empty() {
            return;
        }
        let Some(core) = self.me.upgrade() else {
            return;
        };
        let child = child.to_owned();
        let result = Err(deleted(&child));
        tokio::spawn(async move { core.deliver_child_done(&child, &result, waits).await });
    }

    /// Delivers `failure` to the parent as its child's result.
    fn child_failed(&self, c: &ChildCall, failure: Failure) {
        self.unsubscribe(&c.run_id, &c.link);
        let wait_id = c.link.wait_id.clone();
        let delivery = if is_detached(&wait_id) {
            Delivery::ChildDetached {
                wait_id,
                child: c.run_id.clone(),
                error: Some(failure),
            }
        } else {
            Delivery::ChildDone {
                wait_id,
                child: c.run_id.clone(),
                result: Err(failure),
            }
        };
        self.spawn_delivery(c.link.run_id.clone(), delivery);
    }

    fn unsubscribe(&self, child_run_id: &str, link: &ParentLink) {
        self.child_subscribers.unsubscribe(child_run_id, link);
    }

    /// The output of the completed child `run_id` created at `created_at`, read
    /// from its log. The log read is the run's only if the run is still there
    /// after it: once deleted, the id may hold a new run's log, and the child is
    /// answered as deleted. A passing read failure is retried: delivered, it would
    /// be the parent's child result for good. `None` once the host closes (the
    /// parent asks again after the restart).
    async fn child_output(
        &self,
        run_id: &str,
        created_at: u64,
    ) -> Option<Result<Payload, Failure>> {
        let mut backoff = Duration::from_millis(20);
        loop {
            let read = match self.last_event(run_id).await {
                Ok(last) => self
                    .meta(run_id)
                    .await
                    .map(|now| (last, now.is_some_and(|m| m.created_at == created_at))),
                Err(e) => Err(e),
            };
            let failure = match read {
                Ok((_, false)) => deleted(run_id),
                Ok((Some(Event::RunCompleted { output }), true)) => return Some(Ok(output)),
                Ok((other, true)) => {
                    Failure::Other(format!("child `{run_id}` has no result ({other:?})"))
                }
                Err(ActorError::Storage(e)) if e.is_retryable() => {
                    tracing::warn!(run_id, error = %e, "reel: reading a child's result failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    if self.is_closing() {
                        return None;
                    }
                    continue;
                }
                Err(ActorError::Storage(e)) => e
                    .corruption()
                    .unwrap_or_else(|| Failure::Other(e.to_string())),
                Err(e) => Failure::Other(e.to_string()),
            };
            return Some(Err(failure));
        }
    }

    /// Delivers the finished child's result to its parents (`output`: a completed
    /// child's output when the caller has it; otherwise it is read from the log).
    pub(super) fn notify_parents(
        &self,
        meta: &RunMeta,
        output: Option<&Payload>,
        parents: impl Iterator<Item = ParentLink>,
    ) {
        let mut parents: Vec<ParentLink> = parents.filter(|p| !is_detached(&p.wait_id)).collect();
        parents.sort_by(|a, b| (&a.run_id, &a.wait_id).cmp(&(&b.run_id, &b.wait_id)));
        parents.dedup();
        if parents.is_empty() {
            return;
        }
        let Some(core) = self.me.upgrade() else {
            return;
        };
        let child = meta.clone();
        let output = output.cloned();
        tokio::spawn(async move {
            let result = match child_result(&child.state, output.as_ref()) {
                Some(result) => result,
                // Completed, its output not at hand: read it.
                None if child.state == RunState::Completed => {
                    match core.child_output(&child.run_id, child.created_at).await {
                        Some(output) => output,
                        None => return,
                    }
                }
                None => return,
            };
            core.deliver_child_done(&child.run_id, &result, parents)
                .await;
        });
    }

    /// Delivers `result` as the end of `child` to each wait in `waits`, then drops
    /// each one's subscription once its delivery is done.
    async fn deliver_child_done(
        &self,
        child: &str,
        result: &Result<Payload, Failure>,
        waits: Vec<ParentLink>,
    ) {
        let deliveries: Vec<_> = waits
            .into_iter()
            .filter_map(|p| {
                let delivery = Delivery::ChildDone {
                    wait_id: p.wait_id.clone(),
                    child: child.to_owned(),
                    result: result.clone(),
                };
                Some((self.spawn_delivery(p.run_id.clone(), delivery)?, p))
            })
            .collect();
        // Delivered (or given up): a parent executing again from now on finds the
        // child's end in its log, or asks again.
        for (delivered, p) in deliveries {
            let _ = delivered.await;
            self.unsubscribe(child, &p);
        }
    }
}
