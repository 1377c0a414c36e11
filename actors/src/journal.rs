//! A run's append handle: assigns sequence numbers and derives timer-index changes.

use std::sync::{Arc, Mutex, Weak};

use reel_storage::{Append, Event, RunMeta, StorageError, Store, Ticket, TimerEntry};

use crate::core::Core;

/// Appends to one run's log. Cloned into the replay engine; the run actor holds the
/// original. Sequence numbers are assigned synchronously at submit time, so the log
/// order is the order of calls, whatever order the futures are later polled in.
#[derive(Clone)]
pub struct Journal(Arc<Shared>);

struct Shared {
    run_id: Arc<str>,
    store: Arc<dyn Store>,
    core: Weak<Core>,
    state: Mutex<State>,
}

struct State {
    next_seq: u64,
    history: Arc<Vec<Event>>,
    tail: Vec<Event>,
}

/// A timer entry for a timer-creating event, if it is one.
pub(crate) fn timer_of(run_id: &str, event: &Event) -> Option<TimerEntry> {
    let (fire_at, timer_id) = match event {
        Event::TimerScheduled { id, fire_at } => (*fire_at, id.clone()),
        Event::SignalAwaited {
            id,
            deadline: Some(d),
            ..
        } => (*d, id.clone()),
        Event::StepFailed {
            id,
            attempt,
            retry_at: Some(t),
            ..
        } => (*t, retry_timer_id(id, *attempt)),
        _ => return None,
    };
    Some(TimerEntry {
        fire_at,
        run_id: run_id.to_owned(),
        timer_id,
    })
}

/// The id of the backoff timer after a failed attempt of a step.
pub fn retry_timer_id(step_id: &str, failed_attempt: u32) -> String {
    format!("{step_id}/retry{failed_attempt}")
}

/// Timers created in `events` and not yet fired.
pub(crate) fn pending_timers<'a>(
    run_id: &str,
    events: impl Iterator<Item = &'a Event> + Clone,
) -> Vec<TimerEntry> {
    let fired: std::collections::HashSet<&str> = events
        .clone()
        .filter_map(|e| match e {
            Event::TimerFired { id } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    events
        .filter_map(|e| timer_of(run_id, e))
        .filter(|t| !fired.contains(t.timer_id.as_str()))
        .collect()
}

impl Journal {
    pub(crate) fn new(
        run_id: Arc<str>,
        store: Arc<dyn Store>,
        core: Weak<Core>,
        history: Vec<Event>,
    ) -> Journal {
        Journal(Arc::new(Shared {
            run_id,
            store,
            core,
            state: Mutex::new(State {
                next_seq: history.len() as u64,
                history: Arc::new(history),
                tail: Vec::new(),
            }),
        }))
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.0.run_id
    }

    /// Appends `events` to the log; a durable append is fsynced before the ticket
    /// resolves. Timers created by the events are added to the due-time index in the
    /// same batch and handed to the timer service.
    pub fn append(&self, events: Vec<Event>, durable: bool) -> Ticket {
        self.append_with(events, None, Vec::new(), durable)
    }

    /// [`Journal::append`] with a metadata change and timer-index removals in the same
    /// atomic batch.
    pub(crate) fn append_with(
        &self,
        events: Vec<Event>,
        meta: Option<RunMeta>,
        remove_timers: Vec<TimerEntry>,
        durable: bool,
    ) -> Ticket {
        let add_timers: Vec<TimerEntry> = events
            .iter()
            .filter_map(|e| timer_of(&self.0.run_id, e))
            .collect();
        let ticket = {
            let Ok(mut state) = self.0.state.lock() else {
                return Ticket::ready(Err(StorageError::Closed));
            };
            let expected_seq = (!events.is_empty()).then_some(state.next_seq);
            state.next_seq += events.len() as u64;
            state.tail.extend(events.iter().cloned());
            self.0.store.submit(Append {
                run_id: self.0.run_id.to_string(),
                expected_seq,
                events,
                meta,
                add_timers: add_timers.clone(),
                remove_timers,
                durable,
            })
        };
        if !add_timers.is_empty()
            && let Some(core) = self.0.core.upgrade()
        {
            core.schedule_timers(add_timers);
        }
        ticket
    }

    /// The recorded history with everything appended since folded in. Cheap when no
    /// execution holds the previous snapshot.
    pub(crate) fn snapshot(&self) -> Arc<Vec<Event>> {
        let Ok(mut state) = self.0.state.lock() else {
            return Arc::new(Vec::new());
        };
        if !state.tail.is_empty() {
            let tail = std::mem::take(&mut state.tail);
            Arc::make_mut(&mut state.history).extend(tail);
        }
        state.history.clone()
    }

    /// Runs `f` over every event (recorded history, then the queued tail) without
    /// copying them.
    pub(crate) fn with_events<R>(&self, f: impl FnOnce(&[Event], &[Event]) -> R) -> R {
        let state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&state.history, &state.tail)
    }

    /// Number of events in the log (recorded and queued).
    pub fn len(&self) -> u64 {
        self.0.state.lock().map(|s| s.next_seq).unwrap_or(0)
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
