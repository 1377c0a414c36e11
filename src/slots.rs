//! Visibility: where each recorded result goes when it becomes visible to the
//! handler. Synchronous and side-effect free (it hands back the wakers to wake).
//!
//! Every primitive the handler calls gets a slot, registered when it is called. The
//! driver walks the log in order and hands each result event to [`Slots::deliver`],
//! one at a time, only when the handler has done all it can with what it has seen.
//! A result for a slot that is gone (its future was dropped: it lost a race) is
//! ignored, so a race decided once stays decided.
//!
//! Signals are routed by name: a signal that becomes visible goes to the oldest wait
//! on its name that is still pending, else into the buffer. Buffered signals are
//! handed to waits called later by [`Slots::feed_buffered`], one wait at a time like
//! any other result, so two waits whose signals were both buffered never become
//! ready in the same poll (a random `select!` could otherwise pick either). A wait
//! that is dropped takes nothing with it: a signal it had received but not returned
//! goes back to the front of the line.

use std::collections::{BTreeMap, VecDeque};
use std::task::Waker;

use foldhash::HashMap;
use reel_storage::{Event, Failure, Payload};

/// What a slot belongs to. Kinds are kept apart so that a step named `timer#1` can
/// never receive a timer's event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Step(String),
    Timer(String),
    Wait(String),
    Value(String),
    Child(String),
}

impl Key {
    fn into_id(self) -> String {
        match self {
            Key::Step(id) | Key::Timer(id) | Key::Wait(id) | Key::Value(id) | Key::Child(id) => id,
        }
    }
}

/// A result as the handler receives it.
#[derive(Debug)]
pub(crate) enum Resolution {
    /// A step's output, or the error text of its last attempt.
    Step(Result<Payload, String>),
    Fired,
    Signal(Payload),
    TimedOut,
    Value(Payload),
    Child(Result<Payload, Failure>),
    /// A detached child was started (`None`) or could not be.
    Detached(Option<Failure>),
    /// The run was asked to cancel while this waited, with the reason.
    Cancelled(String),
}

enum State {
    Pending(Option<Waker>),
    Ready(Resolution),
    Taken,
}

/// A durable wait, described for `RunStatus::Suspended { waiting_on }`.
pub(crate) struct WaitInfo {
    pub(crate) what: String,
    pub(crate) child: bool,
}

struct Slot {
    order: u64,
    state: State,
    wait: Option<WaitInfo>,
    /// For signal waits: the name, and whether the deadline timer is still armed.
    signal: Option<String>,
    /// For a signal wait that received a signal it has not taken yet: the
    /// signal's position in the log (it is not consumed until taken).
    signal_seq: Option<u64>,
    /// Whether a cancel request ends this wait: every primitive's but a recorded
    /// value's (it resolves at once) and a shielded call's.
    cancellable: bool,
}

/// What one delivery did.
#[derive(Default)]
pub(crate) struct Delivered {
    /// A pending slot received its result: the handler must be polled before the
    /// next event is walked.
    pub(crate) resolved: bool,
    pub(crate) wakers: Vec<Waker>,
    /// A timed wait received its signal: its deadline timer can be cancelled.
    pub(crate) satisfied_wait: Option<String>,
}

#[derive(Default)]
pub(crate) struct Slots {
    slots: HashMap<Key, Slot>,
    next_order: u64,
    /// Pending waits by signal name, in call order (stale ids are skipped).
    waits: HashMap<String, VecDeque<String>>,
    /// Visible signals no wait has taken yet, by name, oldest first.
    /// Each with its position in the log.
    buffer: HashMap<String, VecDeque<(u64, Payload)>>,
    /// The reason of the cancel request, once the walk has reached it.
    cancelled: Option<String>,
    /// `ctx.cancelled()` futures waiting for the request.
    cancel_wakers: Vec<Waker>,
    /// How many `ctx.cancelled()` futures are alive: waiting on the request is a
    /// durable wait like any other (the run may passivate while it waits).
    cancel_waits: usize,
    /// The buffer of the key a delivery looks its slot up by ([`Slots::resolve_id`]).
    scratch: String,
}

impl Slots {
    /// Registers a primitive when it is called.
    pub(crate) fn register(&mut self, key: Key, wait: Option<WaitInfo>) {
        let order = self.next_order;
        self.next_order += 1;
        let cancellable = !matches!(key, Key::Value(_));
        self.slots.insert(
            key,
            Slot {
                order,
                cancellable,
                state: State::Pending(None),
                wait,
                signal: None,
                signal_seq: None,
            },
        );
    }

    /// The cancel reason if the slot was ended by the cancel request, else remembers
    /// `waker`; any other result stays in the slot.
    pub(crate) fn take_cancelled(&mut self, key: &Key, waker: &Waker) -> Option<String> {
        let slot = self.slots.get_mut(key)?;
        match &mut slot.state {
            State::Ready(Resolution::Cancelled(reason)) => {
                let reason = reason.clone();
                slot.state = State::Taken;
                Some(reason)
            }
            State::Pending(w) => {
                remember(w, waker);
                None
            }
            _ => None,
        }
    }

    /// Keeps a cancel request from ending this slot's wait (a shielded call).
    pub(crate) fn shield(&mut self, key: &Key) {
        if let Some(slot) = self.slots.get_mut(key) {
            slot.cancellable = false;
        }
    }

    /// The reason of the cancel request, once it is visible.
    pub(crate) fn cancelled(&self) -> Option<&str> {
        self.cancelled.as_deref()
    }

    /// A `ctx.cancelled()` future was made (`true`) or dropped.
    pub(crate) fn count_cancel_wait(&mut self, alive: bool) {
        if alive {
            self.cancel_waits += 1;
        } else {
            self.cancel_waits = self.cancel_waits.saturating_sub(1);
        }
    }

    /// The cancel reason if visible, else remembers `waker` for when it is.
    pub(crate) fn poll_cancelled(&mut self, waker: &Waker) -> Option<String> {
        if let Some(reason) = &self.cancelled {
            return Some(reason.clone());
        }
        if !self.cancel_wakers.iter().any(|w| w.will_wake(waker)) {
            self.cancel_wakers.push(waker.clone());
        }
        None
    }

    /// The walk reached the cancel request: `ctx.cancelled()` resolves now; the
    /// cancellable waits end one at a time afterwards ([`Slots::feed_cancelled`]).
    fn cancel(&mut self, reason: &str, out: &mut Delivered) {
        if self.cancelled.is_some() {
            return;
        }
        self.cancelled = Some(reason.to_owned());
        out.wakers.append(&mut self.cancel_wakers);
        // The handler must see the request before anything later is walked.
        out.resolved = true;
    }

    /// Once the cancel request is visible, ends the earliest-called cancellable wait
    /// still pending, if any. One per call, like any result: the driver polls the
    /// handler in between, so branches ended by the request are woken one at a time,
    /// in call order, on every execution (a `FuturesUnordered` or a random `select!`
    /// then sees the same order).
    pub(crate) fn feed_cancelled(&mut self) -> Delivered {
        let mut out = Delivered::default();
        let Some(reason) = self.cancelled.clone() else {
            return out;
        };
        let first = self
            .slots
            .iter()
            .filter(|(_, s)| s.cancellable && matches!(s.state, State::Pending(_)))
            .min_by_key(|(_, s)| s.order)
            .map(|(k, _)| k.clone());
        if let Some(key) = first {
            self.resolve(&key, Resolution::Cancelled(reason), &mut out);
        }
        out
    }

    /// Registers a signal wait. A buffered signal reaches it through
    /// [`Slots::feed_buffered`].
    pub(crate) fn register_wait(&mut self, id: &str, name: &str, info: WaitInfo) {
        let key = Key::Wait(id.to_owned());
        self.register(key.clone(), Some(info));
        if let Some(slot) = self.slots.get_mut(&key) {
            slot.signal = Some(name.to_owned());
        }
        self.waits
            .entry(name.to_owned())
            .or_default()
            .push_back(id.to_owned());
    }

    /// Hands one buffered signal to the earliest-called pending wait on its name,
    /// if there is such a pair. One per call: the driver polls the handler in
    /// between, as for any result.
    pub(crate) fn feed_buffered(&mut self) -> Delivered {
        let mut out = Delivered::default();
        let mut best: Option<(u64, String, String)> = None;
        for (name, queued) in &self.buffer {
            if queued.is_empty() {
                continue;
            }
            let Some(line) = self.waits.get(name) else {
                continue;
            };
            let first = line.iter().find_map(|id| {
                let slot = self.slots.get(&Key::Wait(id.clone()))?;
                matches!(slot.state, State::Pending(_)).then(|| (slot.order, id.clone()))
            });
            if let Some((order, id)) = first
                && best.as_ref().is_none_or(|(o, _, _)| order < *o)
            {
                best = Some((order, name.clone(), id));
            }
        }
        let Some((_, name, id)) = best else {
            return out;
        };
        if let Some(line) = self.waits.get_mut(&name) {
            line.retain(|w| *w != id);
        }
        if let Some((seq, payload)) = self.buffer.get_mut(&name).and_then(VecDeque::pop_front) {
            self.resolve_signal(&id, seq, payload, &mut out);
            out.satisfied_wait = Some(id);
        }
        out
    }

    /// Takes the slot's result if it is visible, else remembers `waker`.
    pub(crate) fn poll(&mut self, key: &Key, waker: &Waker) -> Option<Resolution> {
        let slot = self.slots.get_mut(key)?;
        match &mut slot.state {
            State::Ready(_) => match std::mem::replace(&mut slot.state, State::Taken) {
                State::Ready(r) => {
                    slot.signal_seq = None;
                    Some(r)
                }
                _ => None,
            },
            State::Pending(w) => {
                remember(w, waker);
                None
            }
            State::Taken => None,
        }
    }

    /// Takes the wakers of the steps still waiting for their result: replay has
    /// caught up, and those without a recorded result may run their bodies now.
    pub(crate) fn take_step_wakers(&mut self) -> Vec<Waker> {
        self.slots
            .iter_mut()
            .filter(|(k, _)| matches!(k, Key::Step(_)))
            .filter_map(|(_, s)| match &mut s.state {
                State::Pending(w) => w.take(),
                _ => None,
            })
            .collect()
    }

    /// The primitive's future was dropped (or finished). A signal it claimed and
    /// never returned goes back to the front of the line: to the oldest pending wait
    /// on that name, else to the front of the buffer.
    pub(crate) fn remove(&mut self, key: &Key) -> Delivered {
        let mut out = Delivered::default();
        let Some(slot) = self.slots.remove(key) else {
            return out;
        };
        if let (Some(name), Some(seq), State::Ready(Resolution::Signal(payload))) =
            (slot.signal, slot.signal_seq, slot.state)
        {
            match self.next_waiting(&name) {
                Some(id) => self.resolve_signal(&id, seq, payload, &mut out),
                None => self
                    .buffer
                    .entry(name)
                    .or_default()
                    .push_front((seq, payload)),
            }
        }
        out
    }

    /// The oldest wait on `name` that is still pending, taken off the line.
    fn next_waiting(&mut self, name: &str) -> Option<String> {
        let slots = &self.slots;
        let line = self.waits.get_mut(name)?;
        while let Some(id) = line.pop_front() {
            let key = Key::Wait(id);
            if slots
                .get(&key)
                .is_some_and(|s| matches!(s.state, State::Pending(_)))
            {
                let Key::Wait(id) = key else { return None };
                return Some(id);
            }
        }
        None
    }

    /// Hands the signal at log position `seq` to the wait `id`.
    fn resolve_signal(&mut self, id: &str, seq: u64, payload: Payload, out: &mut Delivered) {
        let key = Key::Wait(id.to_owned());
        if self.resolve(&key, Resolution::Signal(payload), out)
            && let Some(slot) = self.slots.get_mut(&key)
        {
            slot.signal_seq = Some(seq);
        }
    }

    /// The log positions of the signals walked so far that no wait has taken:
    /// buffered ones, and those handed to a wait whose future has not taken them.
    /// A run that continues as new carries them over, in log order.
    pub(crate) fn unconsumed_signals(&self) -> Vec<u64> {
        let mut seqs: Vec<u64> = self
            .buffer
            .values()
            .flatten()
            .map(|(seq, _)| *seq)
            .chain(self.slots.values().filter_map(|s| match s.state {
                State::Ready(Resolution::Signal(_)) => s.signal_seq,
                _ => None,
            }))
            .collect();
        seqs.sort_unstable();
        seqs
    }

    fn resolve(&mut self, key: &Key, r: Resolution, out: &mut Delivered) -> bool {
        let Some(slot) = self.slots.get_mut(key) else {
            return false;
        };
        let State::Pending(waker) = &mut slot.state else {
            return false;
        };
        if let Some(w) = waker.take() {
            out.wakers.push(w);
        }
        slot.state = State::Ready(r);
        out.resolved = true;
        true
    }

    /// [`Slots::resolve`] of the slot `kind(id)`, looked up without allocating: the
    /// key is built in a buffer kept for it.
    fn resolve_id(
        &mut self,
        kind: fn(String) -> Key,
        id: &str,
        r: Resolution,
        out: &mut Delivered,
    ) -> bool {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.push_str(id);
        let key = kind(buf);
        let resolved = self.resolve(&key, r, out);
        self.scratch = key.into_id();
        resolved
    }

    /// Makes one logged event, at log position `seq`, visible to the handler.
    pub(crate) fn deliver(&mut self, seq: u64, event: &Event) -> Delivered {
        let mut out = Delivered::default();
        match event {
            Event::StepCompleted { id, output } => {
                self.resolve_id(
                    Key::Step,
                    id,
                    Resolution::Step(Ok(output.clone())),
                    &mut out,
                );
            }
            Event::StepFailed {
                id,
                error,
                retry_at: None,
                ..
            } => {
                self.resolve_id(
                    Key::Step,
                    id,
                    Resolution::Step(Err(error.clone())),
                    &mut out,
                );
            }
            Event::TimerFired { id } => {
                let timer = self.resolve_id(Key::Timer, id, Resolution::Fired, &mut out);
                if !timer {
                    // A timed wait's deadline.
                    self.resolve_id(Key::Wait, id, Resolution::TimedOut, &mut out);
                }
            }
            Event::SignalReceived { name, payload, .. } => match self.next_waiting(name) {
                Some(id) => {
                    self.resolve_signal(&id, seq, payload.clone(), &mut out);
                    out.satisfied_wait = Some(id);
                }
                None => self
                    .buffer
                    .entry(name.clone())
                    .or_default()
                    .push_back((seq, payload.clone())),
            },
            Event::Recorded { id, value, .. } => {
                self.resolve_id(Key::Value, id, Resolution::Value(value.clone()), &mut out);
            }
            Event::ChildCompleted { id, result } => {
                self.resolve_id(Key::Child, id, Resolution::Child(result.clone()), &mut out);
            }
            Event::ChildDetached { id, error } => {
                self.resolve_id(
                    Key::Child,
                    id,
                    Resolution::Detached(error.clone()),
                    &mut out,
                );
            }
            Event::CancelRequested { reason } => self.cancel(reason, &mut out),
            _ => {}
        }
        out
    }

    /// The durable waits still pending, in call order: `(description, awaits a
    /// child)`, or `None` when there is none.
    pub(crate) fn describe_waits(&self) -> Option<(String, bool)> {
        let pending: BTreeMap<u64, &WaitInfo> = self
            .slots
            .values()
            .filter(|s| matches!(s.state, State::Pending(_)))
            .filter_map(|s| s.wait.as_ref().map(|w| (s.order, w)))
            .collect();
        let on_cancel = self.cancel_waits > 0 && self.cancelled.is_none();
        if pending.is_empty() && !on_cancel {
            return None;
        }
        let mut whats: Vec<&str> = pending.values().map(|w| w.what.as_str()).collect();
        whats.dedup();
        if on_cancel {
            whats.push("a cancel request");
        }
        let child = pending.values().any(|w| w.child);
        Some((whats.join(", "), child))
    }
}

/// Keeps `waker` as the one to wake, unless it would wake the same task already.
fn remember(kept: &mut Option<Waker>, waker: &Waker) {
    if !kept.as_ref().is_some_and(|w| w.will_wake(waker)) {
        *kept = Some(waker.clone());
    }
}

/// Whether an event is a result that the walk hands to the handler (and must
/// therefore be durable before it is walked).
pub(crate) fn is_result(event: &Event) -> bool {
    matches!(
        event,
        Event::StepCompleted { .. }
            | Event::StepFailed { .. }
            | Event::TimerFired { .. }
            | Event::SignalReceived { .. }
            | Event::Recorded { .. }
            | Event::ChildCompleted { .. }
            | Event::ChildDetached { .. }
            | Event::CancelRequested { .. }
    )
}

#[cfg(test)]
mod tests;
