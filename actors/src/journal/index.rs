//! What the run actor asks of a run's log on every delivery (has this timer fired,
//! this signal been received, this child's news been recorded?), kept up to date as
//! the log grows, so that a wake-up costs a lookup and not a scan of every timer,
//! signal and child the run has already finished with.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashSet};

use reel_storage::{Event, TimerEntry};

use crate::message::is_detached;

/// The id of the backoff timer after a failed attempt of a step.
pub fn retry_timer_id(step_id: &str, failed_attempt: u32) -> String {
    format!("{step_id}/retry{failed_attempt}")
}

/// The due time and id of the timer a timer-creating event creates, if it is one.
pub(crate) fn timer_key(event: &Event) -> Option<(u64, String)> {
    match event {
        Event::TimerScheduled { id, fire_at } | Event::Deadline { id, fire_at } => {
            Some((*fire_at, id.clone()))
        }
        Event::SignalAwaited {
            id,
            deadline: Some(d),
            ..
        } => Some((*d, id.clone())),
        Event::StepFailed {
            id,
            attempt,
            retry_at: Some(t),
            ..
        } => Some((*t, retry_timer_id(id, *attempt))),
        _ => None,
    }
}

/// The created and settled timers, received signals and children of one run's
/// log segment.
#[derive(Debug, Default)]
pub(crate) struct LogIndex {
    /// Timers created, with their due times.
    created: HashSet<(u64, String)>,
    /// Timers created that have neither fired nor been cancelled, by due time and
    /// then creation order: what a wake-up looks at does not grow with the timers
    /// that are over.
    pending: BTreeMap<(u64, u64), String>,
    /// The key in `pending` of each pending timer id, to remove it by id.
    pending_keys: HashMap<String, (u64, u64)>,
    /// Timers created so far (the creation order of the next one).
    timers_created: u64,
    /// Children called (wait id, child run id).
    children: HashSet<(String, String)>,
    fired: HashSet<String>,
    cancelled: HashSet<String>,
    signals: HashSet<String>,
    /// Wait ids of `ChildCompleted`.
    child_ends: HashSet<String>,
    /// Wait ids of `ChildDetached`.
    detached_starts: HashSet<String>,
    /// The reason of the first `CancelRequested`.
    cancel_reason: Option<String>,
}

impl LogIndex {
    pub(crate) fn new<'a>(events: impl IntoIterator<Item = &'a Event>) -> LogIndex {
        let mut index = LogIndex::default();
        index.note_all(events);
        index
    }

    /// Takes in events appended to the log.
    pub(crate) fn note_all<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for e in events {
            if let Some(key) = timer_key(e) {
                if !self.fired.contains(&key.1) && !self.cancelled.contains(&key.1) {
                    let at = (key.0, self.timers_created);
                    if let Some(old) = self.pending_keys.insert(key.1.clone(), at) {
                        self.pending.remove(&old);
                    }
                    self.pending.insert(at, key.1.clone());
                }
                self.timers_created += 1;
                self.created.insert(key);
            }
            match e {
                Event::ChildStarted { id, run_id, .. } => {
                    self.children.insert((id.clone(), run_id.clone()));
                }
                Event::CancelRequested { reason } if self.cancel_reason.is_none() => {
                    self.cancel_reason = Some(reason.clone());
                }
                Event::TimerFired { id } => {
                    self.forget_pending(id);
                    self.fired.insert(id.clone());
                }
                Event::TimerCancelled { id } => {
                    self.forget_pending(id);
                    self.cancelled.insert(id.clone());
                }
                Event::SignalReceived { signal_id, .. } => {
                    self.signals.insert(signal_id.clone());
                }
                // The previous segment's: known here too, not delivered again.
                Event::SignalIdsSeen { ids } => {
                    self.signals.extend(ids.iter().cloned());
                }
                Event::ChildCompleted { id, .. } => {
                    self.child_ends.insert(id.clone());
                }
                Event::ChildDetached { id, .. } => {
                    self.detached_starts.insert(id.clone());
                }
                _ => {}
            }
        }
    }

    /// Removes timer `id` from the pending ones (it fired or was cancelled).
    fn forget_pending(&mut self, id: &str) {
        if let Some(at) = self.pending_keys.remove(id) {
            self.pending.remove(&at);
        }
    }

    /// Whether the segment created timer `id` due at `fire_at`: a timer of an
    /// earlier segment (of a run that continued as new) was not.
    pub(crate) fn created(&self, id: &str, fire_at: u64) -> bool {
        self.created.contains(&(fire_at, id.to_owned()))
    }

    /// Whether the segment called child run `child` as wait `wait_id`: news of a
    /// child of an earlier segment matches none.
    pub(crate) fn called_child(&self, wait_id: &str, child: &str) -> bool {
        self.children
            .contains(&(wait_id.to_owned(), child.to_owned()))
    }

    /// The segment's timers that have neither fired nor been cancelled, in
    /// due-time order (ties in creation order).
    pub(crate) fn pending_timers(&self, run_id: &str) -> Vec<TimerEntry> {
        self.pending
            .iter()
            .map(|((fire_at, _), id)| TimerEntry {
                fire_at: *fire_at,
                run_id: run_id.to_owned(),
                timer_id: id.clone(),
            })
            .collect()
    }

    /// The ids and due times of the pending timers due at `now_ms` or earlier, in
    /// due-time order (ties in creation order), the host's deadlines included.
    pub(crate) fn due_timers(&self, now_ms: u64) -> impl Iterator<Item = (u64, &str)> {
        self.pending
            .iter()
            .take_while(move |((at, _), _)| *at <= now_ms)
            .map(|((at, _), id)| (*at, id.as_str()))
    }

    /// The run ids of the children the segment waits on that have not ended
    /// (detached ones excluded), sorted.
    pub(crate) fn unfinished_children(&self) -> Vec<String> {
        let mut children: Vec<String> = self
            .children
            .iter()
            .filter(|(wait_id, _)| !is_detached(wait_id) && !self.child_ends.contains(wait_id))
            .map(|(_, run_id)| run_id.clone())
            .collect();
        children.sort();
        children
    }

    /// The reason of the segment's cancel request, if it has one.
    pub(crate) fn cancel_reason(&self) -> Option<&str> {
        self.cancel_reason.as_deref()
    }

    /// Whether the log records that timer `id` fired.
    pub(crate) fn fired(&self, id: &str) -> bool {
        self.fired.contains(id)
    }

    /// Whether the log records that timer `id` was cancelled.
    pub(crate) fn cancelled(&self, id: &str) -> bool {
        self.cancelled.contains(id)
    }

    /// Whether the log holds the signal sent as `signal_id`.
    pub(crate) fn has_signal(&self, signal_id: &str) -> bool {
        self.signals.contains(signal_id)
    }

    /// Whether the log holds the end of the child waited for as `wait_id`.
    pub(crate) fn child_ended(&self, wait_id: &str) -> bool {
        self.child_ends.contains(wait_id)
    }

    /// Whether the log holds news of the same kind as `event` (a child's end, a
    /// detached child's start) for its wait id.
    pub(crate) fn has_child_news(&self, event: &Event) -> bool {
        match event {
            Event::ChildCompleted { id, .. } => self.child_ends.contains(id),
            Event::ChildDetached { id, .. } => self.detached_starts.contains(id),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_storage::{Failure, Payload};

    #[test]
    fn answers_what_the_events_record() {
        let mut index = LogIndex::new(&[
            Event::TimerFired { id: "t1".into() },
            Event::SignalReceived {
                name: "go".into(),
                signal_id: "s1".into(),
                payload: Payload::default(),
            },
        ]);
        index.note_all(&[
            Event::TimerCancelled { id: "t2".into() },
            Event::ChildCompleted {
                id: "child#0".into(),
                result: Err(Failure::Other("x".into())),
            },
        ]);
        assert!(index.fired("t1") && !index.fired("t2"));
        assert!(index.cancelled("t2") && !index.cancelled("t1"));
        assert!(index.has_signal("s1") && !index.has_signal("go"));
        let done = Event::ChildCompleted {
            id: "child#0".into(),
            result: Ok(Payload::default()),
        };
        let detached = Event::ChildDetached {
            id: "child#0".into(),
            error: None,
        };
        assert!(index.has_child_news(&done));
        assert!(!index.has_child_news(&detached));
    }

    #[test]
    fn pending_timers_unfinished_children_and_the_cancel_request() {
        let child = |id: &str, run_id: &str| Event::ChildStarted {
            id: id.into(),
            workflow: "w".into(),
            version: 1,
            run_id: run_id.into(),
        };
        let index = LogIndex::new(&[
            Event::TimerScheduled {
                id: "timer#2".into(),
                fire_at: 20,
            },
            Event::TimerScheduled {
                id: "timer#1".into(),
                fire_at: 10,
            },
            Event::TimerScheduled {
                id: "timer#3".into(),
                fire_at: 30,
            },
            Event::TimerFired {
                id: "timer#3".into(),
            },
            child("child#1", "b"),
            child("child#2", "a"),
            child("detached#1", "d"),
            child("child#3", "c"),
            Event::ChildCompleted {
                id: "child#3".into(),
                result: Ok(Payload::default()),
            },
            Event::CancelRequested {
                reason: "first".into(),
            },
            Event::CancelRequested {
                reason: "second".into(),
            },
        ]);
        let pending: Vec<(u64, String)> = index
            .pending_timers("r")
            .into_iter()
            .map(|t| (t.fire_at, t.timer_id))
            .collect();
        assert_eq!(
            pending,
            [(10, "timer#1".to_owned()), (20, "timer#2".to_owned())]
        );
        let due = |now| index.due_timers(now).collect::<Vec<_>>();
        assert_eq!(due(15), [(10, "timer#1")]);
        assert_eq!(due(30), [(10, "timer#1"), (20, "timer#2")]);
        assert_eq!(index.unfinished_children(), ["a", "b"]);
        assert_eq!(index.cancel_reason(), Some("first"));
    }
}
