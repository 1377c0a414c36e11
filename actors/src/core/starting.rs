//! Starting runs: a start's checks, a new run's metadata and first events, its
//! first write (the compare-and-set on sequence 0 is the existence check, after
//! the first execution of `eager`), and its activation; a start of an id that
//! exists already is answered as such.

use super::*;
use crate::fresh_runs::Expectation;

impl Core {
    /// Creates a run (idempotent on `run_id` for the same workflow) and starts it.
    /// A `deadline` (ms since the epoch) asks the run to cancel when it passes.
    ///
    /// # Errors
    /// [`ActorError::NotRegistered`] for an unknown workflow or version of a run that
    /// does not exist yet,
    /// [`ActorError::RunExists`] when another workflow has the id, storage errors.
    pub async fn start(
        &self,
        workflow: &str,
        version: u32,
        run_id: &str,
        input: Payload,
        parent: Option<ParentLink>,
        deadline: Option<u64>,
    ) -> Result<Started, ActorError> {
        self.check_open()?;
        check_new_run_id(run_id)?;
        if let Err(e) = self.check_registered(workflow, version) {
            // A run that exists is answered as such whatever this host registers (a
            // parent replaying its call of a child whose version is gone: the child
            // parks on activation, and the parent keeps waiting for it).
            if self.meta(run_id).await?.is_none() {
                return Err(e);
            }
            return Box::pin(self.start_existing(run_id, workflow)).await;
        }
        let (meta, events) = self.new_run(workflow, version, run_id, input, parent, deadline);
        self.create(meta, events).await
    }

    /// A new run's metadata (running, not queued) and first events.
    pub(super) fn new_run(
        &self,
        workflow: &str,
        version: u32,
        run_id: &str,
        input: Payload,
        parent: Option<ParentLink>,
        deadline: Option<u64>,
    ) -> (RunMeta, Vec<Event>) {
        let now = self.creation_time(run_id);
        let meta = RunMeta {
            run_id: run_id.to_owned(),
            workflow: workflow.to_owned(),
            version,
            state: RunState::Running,
            created_at: now,
            updated_at: now,
            parent,
            segment_start: 0,
            segment: 0,
            queue: None,
        };
        let started = Event::RunStarted {
            workflow: workflow.to_owned(),
            version,
            input,
        };
        let mut events = vec![started];
        events.extend(deadline.map(|fire_at| Event::Deadline {
            id: RUN_DEADLINE.to_owned(),
            fire_at,
        }));
        (meta, events)
    }

    /// Writes a new run (its first write is the existence check) and activates it,
    /// or, for an enqueued run, hands it to its queue.
    pub(super) async fn create(
        &self,
        meta: RunMeta,
        events: Vec<Event>,
    ) -> Result<Started, ActorError> {
        self.create_with(meta, events, None).await
    }

    /// [`Core::create`], with the timers to arm for the run (by default, those
    /// its events schedule: a fork's prefix may hold timers already settled).
    pub(super) async fn create_with(
        &self,
        meta: RunMeta,
        events: Vec<Event>,
        timers: Option<Vec<TimerEntry>>,
    ) -> Result<Started, ActorError> {
        self.create_attempt(meta, events, timers, 0).await
    }

    /// [`Core::create_with`], the `tries`-th time for its id (see the conflict).
    async fn create_attempt(
        &self,
        mut meta: RunMeta,
        mut events: Vec<Event>,
        timers: Option<Vec<TimerEntry>>,
        tries: u8,
    ) -> Result<Started, ActorError> {
        // What the write holds before a first execution adds to it, for a retry.
        let (given, given_state, given_timers) = (events.len(), meta.state.clone(), timers.clone());
        // The compare-and-set on sequence 0 is the existence check (the first
        // execution's read of the run only spares an existing run an execution).
        let elsewhere = self.owned_elsewhere(&meta.run_id);
        // Its first execution goes first; a run that only comes to wait is written
        // waiting, and not activated (`eager`).
        let first = match (&timers, elsewhere) {
            (None, false) => self.execute_first(&meta, &events),
            _ => None,
        };
        let mut handed = None;
        if let Some(first) = first {
            events.extend(first.events);
            if let Some(state) = first.waiting {
                meta.state = state;
            }
            handed = first.handed;
        }
        let waits = matches!(meta.state, RunState::Suspended { .. });
        let run_id = meta.run_id.clone();
        let workflow = meta.workflow.clone();
        let now = meta.created_at;
        let add_timers: Vec<TimerEntry> =
            timers.unwrap_or_else(|| events.iter().filter_map(|e| timer_of(&run_id, e)).collect());
        let (mut meta_copy, events_copy) = (meta.clone(), events.clone());
        let enqueued = meta.state == RunState::Enqueued;
        // The permit for the activation is taken before the write, so a caller that
        // stops waiting can no longer leave a written run without its activation.
        let busy = self.activity.enter();
        let core = self.me.upgrade().ok_or(ActorError::Shutdown)?;
        let permit = if enqueued || waits {
            None
        } else {
            let permit = self.new_runs.clone().acquire_owned().await;
            Some(permit.map_err(|_| ActorError::Shutdown)?)
        };
        // Created on a host that does not own it: its owner learns of it, and of its
        // timers, by mail posted with the run's first write.
        let mail = elsewhere.then(|| reel_storage::Mail::Wake {
            timers: add_timers
                .iter()
                .map(|t| (t.fire_at, t.timer_id.clone()))
                .collect(),
        });
        // Its state as written, for its first actor, unless another actor is
        // spawned for it first (a racing start's): expected before the write.
        let expected = (!elsewhere && !enqueued && !waits).then(|| self.fresh.expect(&run_id));
        let (created, created_at) = self.submit_created(Append {
            run_id: run_id.clone(),
            expected_seq: Some(0),
            events,
            meta: Some(meta),
            add_timers: add_timers.clone(),
            durable: true,
            at: Some(now),
            mail,
            ..Append::default()
        });
        // Later than read above when a delete of the id was under way.
        meta_copy.updated_at = meta_copy.updated_at.max(created_at);
        meta_copy.created_at = created_at;
        match created.await {
            Ok(()) => {
                if let Some(h) = &handed {
                    h.journal.go_live();
                }
            }
            // Someone created it first: answer as for an existing run. Boxed, as a
            // rare path: its future would make every start's several KB larger.
            Err(StorageError::Conflict { .. }) => {
                drop(expected);
                let existing = Box::pin(self.start_existing(&run_id, &workflow)).await;
                // The id was taken, and that run deleted before it could be read:
                // the id is free again, so this start writes its run after all (as
                // given, and created after the deleted run).
                if let Err(ActorError::UnknownRun(_)) = existing
                    && tries < 3
                {
                    let (mut meta, mut events) = (meta_copy, events_copy);
                    events.truncate(given);
                    meta.state = given_state;
                    meta.created_at = self.creation_time(&run_id);
                    meta.updated_at = meta.created_at;
                    let retry = self.create_attempt(meta, events, given_timers, tries + 1);
                    return Box::pin(retry).await;
                }
                return existing;
            }
            Err(e) => return Err(e.into()),
        }
        metrics::counter!(reel_storage::metrics::RUNS_STARTED).increment(1);
        if elsewhere {
            return Ok(Started::Created);
        }
        if let Some(entry) = &meta_copy.queue
            && enqueued
        {
            self.schedule_timers(add_timers);
            self.queues.enqueued(&run_id, entry);
            self.admit_later(entry.name.clone(), busy);
            return Ok(Started::Created);
        }
        if waits {
            // Like a passivated run: what wakes it activates it from disk.
            self.schedule_timers(add_timers);
            self.notify_changed(&run_id, Some(&meta_copy));
            return Ok(Started::Created);
        }
        // Stashed before the run's timers can reach it (see below).
        let token = expected.map(Expectation::keep);
        if let Some(token) = token {
            self.stash_fresh(
                &run_id,
                token,
                Box::new(Fresh {
                    meta: meta_copy,
                    log: events_copy,
                    handed,
                }),
            );
        }
        self.schedule_timers(add_timers);
        // The run exists once its first write has landed: its activation goes on in
        // a task of its own, which the caller does not wait for (a message sent to
        // the run meanwhile waits for the same actor). The actor that activates the
        // run first, this one or a message's that came first, gets the run as just
        // written instead of reading it back; one activated after that actor stopped
        // reads the store. An activation refused because the host is closing leaves
        // the run to recovery by the next host.
        tokio::spawn(async move {
            let _permit = permit;
            let _busy = busy;
            let activated = core.deliver(&run_id, Resume).await;
            if let Some(token) = token {
                core.drop_fresh(&run_id, token);
            }
            match activated {
                Ok(()) | Err(ActorError::Shutdown) => {}
                Err(e) => {
                    tracing::warn!(run_id, error = %e, "reel: a new run's activation failed; it resumes with its next message or the next host");
                }
            }
        });
        Ok(Started::Created)
    }

    /// A start of a run that exists already: the same workflow's is answered as
    /// such, with its record as read here, another workflow's is refused.
    pub(super) async fn start_existing(
        &self,
        run_id: &str,
        workflow: &str,
    ) -> Result<Started, ActorError> {
        let existing = self
            .meta(run_id)
            .await?
            .ok_or_else(|| ActorError::UnknownRun(run_id.to_owned()))?;
        Core::same_workflow(&existing, workflow)?;
        // An earlier start landed but its caller heard it failed (a lost answer, a
        // failed activation): nobody runs it yet, so this one does.
        if existing.state == RunState::Running && !self.is_live(run_id) {
            self.deliver(run_id, Resume).await?;
        }
        Ok(Started::Existing(Box::new(existing)))
    }

    /// Refuses a start of `workflow` under the id of `existing`, a run of another
    /// workflow.
    pub(super) fn same_workflow(existing: &RunMeta, workflow: &str) -> Result<(), ActorError> {
        if existing.workflow == workflow {
            Ok(())
        } else {
            Err(ActorError::RunExists {
                run_id: existing.run_id.clone(),
                workflow: existing.workflow.clone(),
            })
        }
    }
}
