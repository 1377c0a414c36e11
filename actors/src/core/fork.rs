//! Fork: a new run whose log is a prefix of another run's current log segment,
//! which replays that prefix strictly and then goes on live with the code
//! registered now. The original run is not touched.

use std::collections::BTreeMap;

use super::*;
use crate::journal::LogIndex;

/// Why the cut `at_seq` of a segment beginning at `start` (its events, with their
/// sequence numbers) is not at a primitive boundary, if it is not.
///
/// The cut keeps the events with sequence numbers below `at_seq`. It must lie
/// after the segment's `RunStarted` and at most at its end (the position of its
/// `RunCompleted`/`RunFailed`/`RunCancelled`, or the log's next sequence number),
/// must not split a step's attempts (an attempt begun before the cut whose
/// retry or result comes after it), must not follow a cancel request, and every
/// child started before it must have ended (or been detached) before it: a fork
/// does not adopt the original's children.
pub(crate) fn check_cut(start: u64, events: &[(u64, &Event)], at_seq: u64) -> Result<(), String> {
    if at_seq <= start {
        return Err(format!(
            "the cut must come after the current segment's RunStarted (sequence number \
             {start}); earlier segments cannot be forked"
        ));
    }
    let end = events
        .iter()
        .find(|(_, e)| {
            matches!(
                e,
                Event::RunCompleted { .. }
                    | Event::RunFailed { .. }
                    | Event::RunCancelled { .. }
                    | Event::ContinuedAsNew { .. }
            )
        })
        .map_or(start + events.len() as u64, |(seq, _)| *seq);
    if at_seq > end {
        return Err(format!(
            "past the end of the run's log (the last possible cut is {end})"
        ));
    }
    // Steps with an attempt begun and not settled before the cut, children started
    // and not ended before it: by id, with the sequence number that opened them.
    let mut steps: BTreeMap<&str, u64> = BTreeMap::new();
    let mut children: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    for (seq, event) in events.iter().take_while(|(seq, _)| *seq < at_seq) {
        match event {
            Event::CancelRequested { .. } => {
                return Err(format!(
                    "the run was asked to cancel at sequence number {seq}, before the cut"
                ));
            }
            Event::StepStarted { id, .. } => {
                steps.entry(id).or_insert(*seq);
            }
            Event::StepCompleted { id, .. }
            | Event::StepFailed {
                id, retry_at: None, ..
            } => {
                steps.remove(id.as_str());
            }
            Event::ChildStarted { id, run_id, .. } => {
                children.insert(id, (*seq, run_id));
            }
            Event::ChildCompleted { id, .. } | Event::ChildDetached { id, .. } => {
                children.remove(id.as_str());
            }
            _ => {}
        }
    }
    if let Some((_, (seq, child))) = children.into_iter().next() {
        return Err(format!(
            "child run `{child}` (started at sequence number {seq}) has not ended before \
             the cut, and a fork does not adopt the original's children: cut before \
             its start or after its end"
        ));
    }
    for (seq, event) in events.iter().skip_while(|(seq, _)| *seq < at_seq) {
        let id = match event {
            Event::StepStarted { id, .. }
            | Event::StepCompleted { id, .. }
            | Event::StepFailed { id, .. } => id.as_str(),
            _ => continue,
        };
        if let Some(begun) = steps.get(id) {
            return Err(format!(
                "inside the attempts of step `{id}` (begun at sequence number {begun}, \
                 going on at {seq}): cut before its first attempt or after its result"
            ));
        }
    }
    Ok(())
}

impl Core {
    /// Creates run `new_run_id` from the events of `run_id`'s current log segment
    /// with sequence numbers below `at_seq` and starts it. The cut must lie after
    /// the segment's `RunStarted`, at most at its end, not between a step's
    /// attempts, not after a cancel request, and every child started before it
    /// must have ended before it (a fork does not adopt the original's children): it replays them strictly and goes on live. It is a
    /// run of the segment's workflow and version with no parent; the timers still
    /// pending at the cut are armed for it (due when they were due); its steps get
    /// their own idempotency keys (they name the run). The fork of a run started
    /// on a queue is enqueued on it (same priority, no de-duplication key). The
    /// original is untouched.
    ///
    /// # Errors
    /// [`ActorError::UnknownRun`] for `run_id`; [`ActorError::InvalidCut`];
    /// [`ActorError::UnknownQueue`] when the original's queue is not configured;
    /// [`ActorError::RunExists`] when `new_run_id` is taken;
    /// [`ActorError::NotRegistered`]; storage errors (an invalid `new_run_id`).
    pub async fn fork(
        &self,
        run_id: &str,
        at_seq: u64,
        new_run_id: &str,
    ) -> Result<(), ActorError> {
        self.check_open()?;
        check_new_run_id(new_run_id)?;
        let meta = self.known(run_id).await?;
        // Deleted since its record was read: no log left to fork (`UnknownRun`).
        let records = self.known_records(run_id, meta.segment_start).await?;
        let events: Vec<(u64, &Event)> = records.iter().map(|r| (r.seq, &r.event)).collect();
        check_cut(meta.segment_start, &events, at_seq).map_err(|reason| {
            ActorError::InvalidCut {
                run_id: run_id.to_owned(),
                at_seq,
                reason,
            }
        })?;
        let prefix: Vec<Event> = records
            .into_iter()
            .take_while(|r| r.seq < at_seq)
            .map(|r| r.event)
            .collect();
        let Some(Event::RunStarted {
            workflow, version, ..
        }) = prefix.first()
        else {
            return Err(ActorError::InvalidCut {
                run_id: run_id.to_owned(),
                at_seq,
                reason: "the segment does not begin with RunStarted".to_owned(),
            });
        };
        let (workflow, version) = (workflow.clone(), *version);
        self.registry
            .lookup(&workflow, version)
            .map_err(ActorError::NotRegistered)?;
        let now = self.creation_time(new_run_id);
        let forked = RunMeta {
            run_id: new_run_id.to_owned(),
            workflow,
            version,
            state: RunState::Running,
            created_at: now,
            updated_at: now,
            parent: None,
            segment_start: 0,
            segment: 0,
            queue: None,
        };
        let timers = LogIndex::new(&prefix).pending_timers(new_run_id);
        // A fork of a run started on a queue waits on that queue like any start
        // on it (same priority, no de-duplication key): the queue's limits hold.
        let created = match &meta.queue {
            Some(entry) => {
                let place = QueuePlace {
                    queue: entry.name.clone(),
                    priority: entry.priority,
                    dedup_key: None,
                };
                self.enqueue_run(forked, prefix, Some(timers), place)
                    .await?
            }
            None => self.create_with(forked, prefix, Some(timers)).await?,
        };
        if let Started::Existing(existing) = created {
            return Err(ActorError::RunExists {
                run_id: new_run_id.to_owned(),
                workflow: existing.workflow,
            });
        }
        tracing::info!(run_id, at_seq, fork = new_run_id, "reel: run forked");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use reel_storage::Payload;

    use super::*;

    fn started() -> Event {
        Event::RunStarted {
            workflow: "w".into(),
            version: 1,
            input: Payload(Vec::new()),
        }
    }

    fn step(id: &str, attempt: u32) -> Event {
        Event::StepStarted {
            id: id.into(),
            attempt,
        }
    }

    fn check(start: u64, log: &[Event], at: u64) -> Result<(), String> {
        let events: Vec<(u64, &Event)> = (start..).zip(log).collect();
        check_cut(start, &events, at)
    }

    #[test]
    fn cuts_at_boundaries_are_allowed_and_others_refused() {
        let log = vec![
            started(),
            step("a", 1),
            Event::StepFailed {
                id: "a".into(),
                attempt: 1,
                error: "e".into(),
                retry_at: Some(5),
            },
            Event::TimerFired {
                id: "a/retry1".into(),
            },
            step("a", 2),
            Event::StepCompleted {
                id: "a".into(),
                output: Payload(Vec::new()),
            },
            Event::CancelRequested { reason: "r".into() },
            Event::RunCancelled { reason: "r".into() },
        ];
        assert!(check(0, &log, 0).unwrap_err().contains("RunStarted"));
        assert_eq!(check(0, &log, 1), Ok(()));
        for inside in 2..=5 {
            let e = check(0, &log, inside).unwrap_err();
            assert!(e.contains("step `a`"), "{inside}: {e}");
        }
        assert_eq!(check(0, &log, 6), Ok(()));
        assert!(check(0, &log, 7).unwrap_err().contains("cancel"));
        assert!(check(0, &log, 8).unwrap_err().contains("past the end"));
        // A later segment: its own RunStarted is the first cut's bound.
        assert!(
            check(10, &log[..6], 10)
                .unwrap_err()
                .contains("earlier segments")
        );
        assert_eq!(check(10, &log[..6], 16), Ok(()));
        assert!(
            check(10, &log[..6], 17)
                .unwrap_err()
                .contains("past the end")
        );
    }

    #[test]
    fn an_abandoned_attempt_does_not_block_later_cuts() {
        // A step that lost a race keeps its StepStarted without a result.
        let log = vec![
            started(),
            step("lost", 1),
            Event::TimerFired { id: "t".into() },
        ];
        assert_eq!(check(0, &log, 3), Ok(()));
        assert_eq!(check(0, &log, 2), Ok(()));
    }
}
