//! A run's append handle: assigns sequence numbers, derives timer-index changes and
//! tells the live execution when new events become durable. Its appends name it
//! as their writer (`Append::writer`): once the store refuses one, it refuses
//! the later ones, which assumed it landed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use reel_storage::{Append, Clock, Event, Mail, RunMeta, StorageError, Store, Ticket, TimerEntry};

use crate::host::RunHost;

mod dry;
mod index;

pub(crate) use index::LogIndex;
pub use index::retry_timer_id;
use index::timer_key;

/// Appends to one run's log. Cloned into the replay engine; the run actor holds the
/// original. Sequence numbers are assigned synchronously at submit time, so the log
/// order is the order of calls, whatever order the futures are later polled in.
///
/// The journal also feeds the live execution: it keeps how far the log is known to
/// be durable, and wakes the execution's registered waker whenever that advances (a
/// signal, timer or child result appended by the actor, or the execution's own
/// step completion landing).
#[derive(Clone)]
pub struct Journal(Arc<Shared>);

/// The last journal's writer id (`Append::writer`): ids are unique in the process.
static LAST_WRITER: AtomicU64 = AtomicU64::new(0);

struct Shared {
    run_id: Arc<str>,
    /// Names its appends (`Append::writer`).
    writer: u64,
    /// The sequence number of the segment's first event (its `RunStarted`): the
    /// journal counts positions within the segment, the store sequence numbers.
    base: u64,
    store: Arc<dyn Store>,
    /// The host's clock: the time stamped on records.
    clock: Arc<dyn Clock>,
    host: Weak<dyn RunHost>,
    /// A dry journal's: notified when it goes live or is abandoned ([`Journal::dry`]).
    live: std::sync::OnceLock<tokio::sync::Notify>,
    state: Mutex<State>,
}

struct State {
    next_seq: u64,
    history: Arc<Vec<Event>>,
    tail: Vec<Event>,
    /// An empty buffer with the capacity of the last append's events
    /// ([`State::take_from`]).
    spare: Vec<Event>,
    /// Lookups into `history` and `tail`, kept as events are appended.
    index: LogIndex,
    /// Every event below this sequence number is durable.
    durable: u64,
    /// The live execution, woken when `durable` advances.
    waker: Option<Waker>,
    /// Set when the run ends or its actor stops: the execution may not append any
    /// more (a cancelled run never gets an event after `RunCancelled`).
    closed: bool,
    /// Where the non-durable events of the execution not handed to the store yet
    /// begin (a step's `StepStarted`, a wait's `SignalAwaited`): they are the end
    /// of `tail`, and go with the next append (the actor's write of a suspension
    /// among them), or when the execution goes idle with a step body running
    /// ([`Journal::flush_held`]). Their sequence numbers are taken, so nothing can
    /// be written between them and what follows.
    held_from: Option<u64>,
    /// The run is paused: the live execution makes no more results visible and
    /// ends once the step bodies under way have finished ([`Journal::pause`]).
    paused: bool,
    /// A dry journal keeps its appends (in `tail`) instead of writing them
    /// ([`Journal::dry`]).
    dry: bool,
}

impl State {
    /// Moves the events from sequence number `from` on (the end of the tail, not
    /// yet written) out, to be written; [`State::put_back`] returns them.
    fn take_from(&mut self, from: u64) -> Vec<Event> {
        let start = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.history.len())
            .min(self.tail.len());
        // Into the buffer the last append gave back: no allocation per append.
        let mut taken = std::mem::take(&mut self.spare);
        taken.extend(self.tail.drain(start..));
        taken
    }

    fn put_back(&mut self, mut events: Vec<Event>) {
        self.tail.append(&mut events);
        self.spare = events;
    }

    /// Appends `events` to the tail and returns them, in place.
    fn push(&mut self, events: impl IntoIterator<Item = Event>) -> &[Event] {
        let start = self.tail.len();
        self.tail.extend(events);
        let added = &self.tail[start..];
        self.next_seq += added.len() as u64;
        self.index.note_all(added);
        added
    }
}

/// Whether a non-durable event may be held for the next append: it creates no
/// timer (the timer service must learn of it now) and publishes nothing (readers
/// wait).
fn holdable(event: &Event) -> bool {
    timer_key(event).is_none() && !matches!(event, Event::Published { .. })
}

/// A timer entry for a timer-creating event, if it is one.
pub(crate) fn timer_of(run_id: &str, event: &Event) -> Option<TimerEntry> {
    let (fire_at, timer_id) = timer_key(event)?;
    Some(TimerEntry {
        fire_at,
        run_id: run_id.to_owned(),
        timer_id,
    })
}

/// The timer id of the run's own deadline (`StartOptions::timeout`).
pub(crate) const RUN_DEADLINE: &str = "@run-deadline";

/// The timer id of the grace a cancelled run's cleanup gets before a hard cancel.
pub(crate) const CANCEL_DEADLINE: &str = "@cancel-deadline";

/// Whether a timer is one of the host's deadlines ([`RUN_DEADLINE`],
/// [`CANCEL_DEADLINE`]) rather than one of the handler's. By the exact id: a
/// handler's timer ids are positional (`timer#2`) or a step's retry
/// (`name/retry1`), whatever the step's name starts with.
pub(crate) fn is_host_timer(timer_id: &str) -> bool {
    timer_id == RUN_DEADLINE || timer_id == CANCEL_DEADLINE
}

/// The answer to an append made through a [`Journal`]: resolves when the write has
/// landed (fsynced, for a durable one), and then advances the journal's durable
/// mark so the live execution sees the new events.
#[must_use = "a landing tells whether the write landed"]
pub struct Landing {
    ticket: Ticket,
    /// Sequence number after the last event of the append, when it was durable.
    durable_end: Option<u64>,
    /// Whether the live execution must be woken when it lands: yes for the actor's
    /// appends (a signal, a timer), no for the execution's own, which it polls
    /// itself (waking its own task would cost a second worker wake-up per step).
    wake: bool,
    /// The append holds a `Published` event: readers waiting for a value are told
    /// once it has landed.
    publishes: bool,
    journal: Journal,
}

impl Landing {
    /// The answer to an append made after the journal closed.
    fn refused(journal: &Journal) -> Landing {
        Landing {
            ticket: Ticket::ready(Err(StorageError::Closed)),
            durable_end: None,
            wake: false,
            publishes: false,
            journal: journal.clone(),
        }
    }
}

impl std::fmt::Debug for Landing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing")
            .field("durable_end", &self.durable_end)
            .finish_non_exhaustive()
    }
}

impl Future for Landing {
    type Output = Result<(), StorageError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let result = std::task::ready!(Pin::new(&mut this.ticket).poll(cx));
        if result.is_ok()
            && let Some(end) = this.durable_end.take()
        {
            this.journal.mark_durable(end, this.wake);
        }
        if result.is_ok() && std::mem::take(&mut this.publishes) && !this.journal.is_dry() {
            if let Some(host) = this.journal.0.host.upgrade() {
                host.notify_published(&this.journal.0.run_id);
            }
        }
        Poll::Ready(result)
    }
}

impl Journal {
    /// The host's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.0.clock
    }

    /// Milliseconds since the epoch on the host's clock.
    pub fn now_ms(&self) -> u64 {
        self.0.clock.now_ms()
    }

    pub(crate) fn new(
        run_id: Arc<str>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        host: Weak<dyn RunHost>,
        history: Vec<Event>,
        base: u64,
    ) -> Journal {
        let len = history.len() as u64;
        let index = LogIndex::new(&history);
        Journal(Arc::new(Shared {
            run_id,
            writer: LAST_WRITER.fetch_add(1, Ordering::Relaxed) + 1,
            base,
            store,
            clock,
            host,
            live: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                next_seq: len,
                history: Arc::new(history),
                tail: Vec::new(),
                spare: Vec::new(),
                index,
                durable: len,
                waker: None,
                closed: false,
                held_from: None,
                paused: false,
                dry: false,
            }),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.0.run_id
    }

    /// Appends `events` to the log; a durable append is fsynced before the landing
    /// resolves. Timers created by the events are added to the due-time index in the
    /// same batch and handed to the timer service. Refused once the journal is
    /// closed.
    ///
    /// A non-durable append nobody waits for goes through
    /// [`Journal::append_unawaited`] instead.
    pub fn append(&self, events: impl IntoIterator<Item = Event>, durable: bool) -> Landing {
        self.submit(events, None, Vec::new(), durable, false, false, Vec::new())
    }

    /// A non-durable append nobody waits for (a step's `StepStarted`: the durable
    /// append that follows lands after it, or reports the failure). One that
    /// creates no timer and publishes nothing is held back and travels with the
    /// next append of the run (a `StepStarted` with its `StepCompleted`: one write
    /// instead of two), with the actor's write of the run's suspension (a wait's
    /// `SignalAwaited`), or is handed to the store when the execution goes idle
    /// with a step body running ([`Journal::flush_held`]). Its sequence numbers
    /// are taken at once, so the log order is still the call order. Nothing once
    /// the journal is closed.
    pub fn append_unawaited(&self, event: Event) {
        if holdable(&event) {
            self.hold(event);
        } else {
            drop(self.submit([event], None, Vec::new(), false, false, false, Vec::new()));
        }
    }

    /// Writes the held appends, if any, as an append of their own, and tells when
    /// they have landed: the actor's write for a suspension that changes no state.
    pub(crate) fn write_held(&self) -> Option<Landing> {
        self.lock().held_from?;
        Some(self.submit(
            Vec::new(),
            None,
            Vec::new(),
            false,
            false,
            false,
            Vec::new(),
        ))
    }

    /// Takes the event's sequence number and holds it for the next append.
    fn hold(&self, event: Event) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        if state.held_from.is_none() {
            state.held_from = Some(state.next_seq);
        }
        state.push([event]);
    }

    /// Hands the held appends to the store now: the execution has gone idle while
    /// a step body runs on, so nothing else is coming to carry them soon. (When it
    /// only waits, the actor's write of the suspension carries them.)
    pub fn flush_held(&self) {
        self.flush_locked(&mut self.lock());
    }

    fn flush_locked(&self, state: &mut State) {
        if state.dry {
            return;
        }
        let Some(from) = state.held_from.take() else {
            return;
        };
        let append = Append {
            run_id: String::from(&*self.0.run_id),
            expected_seq: Some(self.0.base + from),
            events: state.take_from(from),
            writer: Some(self.0.writer),
            durable: false,
            at: Some(self.0.clock.now_ms()),
            ..Append::default()
        };
        // Nobody waits for it: the write goes on without its ticket.
        drop(self.0.store.submit_ref(&append));
        state.put_back(append.events);
    }

    /// Appends `TimerCancelled` for a timer the handler dropped and removes it from
    /// the due-time index in the same batch. Not fsynced: if it is lost, the timer
    /// fires later and is ignored.
    pub fn cancel_timer(&self, timer_id: &str, fire_at: u64) -> Landing {
        let entry = TimerEntry {
            fire_at,
            run_id: self.0.run_id.to_string(),
            timer_id: timer_id.to_owned(),
        };
        self.submit(
            vec![Event::TimerCancelled {
                id: timer_id.to_owned(),
            }],
            None,
            vec![entry],
            false,
            false,
            false,
            Vec::new(),
        )
    }

    /// [`Journal::append`] with a metadata change and timer-index removals in the same
    /// atomic batch.
    pub(crate) fn append_with(
        &self,
        events: Vec<Event>,
        meta: Option<RunMeta>,
        remove_timers: Vec<TimerEntry>,
        durable: bool,
    ) -> Landing {
        self.submit(
            events,
            meta,
            remove_timers,
            durable,
            false,
            true,
            Vec::new(),
        )
    }

    /// [`Journal::append_with`], posting `letters` (run id, mail) to other runs'
    /// owners in the same write when hosts share the store
    /// ([`Append::letters`](reel_storage::Append::letters)).
    pub(crate) fn append_posting(
        &self,
        events: Vec<Event>,
        meta: Option<RunMeta>,
        remove_timers: Vec<TimerEntry>,
        letters: Vec<(String, Mail)>,
    ) -> Landing {
        self.submit(events, meta, remove_timers, true, false, true, letters)
    }

    /// The run's last append: accepted even after [`Journal::close`], which the
    /// caller does first so that nothing the execution appends can follow it.
    /// `letters` (run id, mail) are posted to other runs' owners in the same
    /// write when hosts share the store: the run's end owes its parent and its
    /// children news that a host dying right after the write must not lose.
    pub(crate) fn append_final(
        &self,
        events: Vec<Event>,
        meta: RunMeta,
        remove_timers: Vec<TimerEntry>,
        letters: Vec<(String, Mail)>,
    ) -> Landing {
        self.submit(events, Some(meta), remove_timers, true, true, true, letters)
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        events: impl IntoIterator<Item = Event>,
        meta: Option<RunMeta>,
        remove_timers: Vec<TimerEntry>,
        durable: bool,
        is_final: bool,
        wake: bool,
        letters: Vec<(String, Mail)>,
    ) -> Landing {
        let (ticket, durable_end, publishes) = {
            let mut state = self.lock();
            if state.closed && !is_final {
                return Landing::refused(self);
            }
            let first = state.next_seq;
            let added = state.push(events);
            let add_timers: Vec<TimerEntry> = added
                .iter()
                .filter_map(|e| timer_of(&self.0.run_id, e))
                .collect();
            let publishes = added.iter().any(|e| matches!(e, Event::Published { .. }));
            let end = state.next_seq;
            if state.dry {
                return Landing {
                    ticket: Ticket::ready(Ok(())),
                    durable_end: durable.then_some(end),
                    wake,
                    publishes,
                    journal: self.clone(),
                };
            }
            // Held events go first, in the same batch. The events are lent to the
            // store and kept: the execution walks them.
            let from = state.held_from.take().unwrap_or(first);
            let events = state.take_from(from);
            let append = Append {
                at: Some(self.0.clock.now_ms()),
                run_id: String::from(&*self.0.run_id),
                expected_seq: (!events.is_empty()).then_some(self.0.base + from),
                events,
                writer: Some(self.0.writer),
                meta,
                add_timers,
                remove_timers,
                durable,
                mail: None,
                letters,
            };
            let ticket = self.0.store.submit_ref(&append);
            let Append {
                events,
                add_timers,
                remove_timers,
                ..
            } = append;
            state.put_back(events);
            if !(add_timers.is_empty() && remove_timers.is_empty())
                && let Some(host) = self.0.host.upgrade()
            {
                if !add_timers.is_empty() {
                    host.schedule_timers(add_timers);
                }
                if !remove_timers.is_empty() {
                    host.unschedule_timers(remove_timers);
                }
            }
            (ticket, durable.then_some(end), publishes)
        };
        Landing {
            ticket,
            durable_end,
            wake,
            publishes,
            journal: self.clone(),
        }
    }

    fn mark_durable(&self, end: u64, wake: bool) {
        let waker = {
            let mut state = self.lock();
            if end <= state.durable {
                return;
            }
            state.durable = end;
            if !wake {
                return;
            }
            state.waker.clone()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Stops the execution from appending: called before the run's last append and
    /// before its actor stops.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.waker = None;
    }

    /// Pauses (`true`) or unpauses the live execution, and wakes it so that it
    /// notices: paused, it walks no more of the log, lets the step bodies under
    /// way finish and record their results, and then ends with
    /// [`Outcome::Paused`](crate::Outcome::Paused).
    pub(crate) fn set_paused(&self, paused: bool) {
        let waker = {
            let mut state = self.lock();
            state.paused = paused;
            state.waker.clone()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether the run is paused ([`Journal::set_paused`]): the execution walks
    /// nothing more and ends once no step body runs.
    pub fn is_paused(&self) -> bool {
        self.lock().paused
    }

    /// Whether a step body of the run may start now: on a store shared by
    /// several hosts, only while the host surely holds the lease of the run's
    /// partition (never once the host is gone).
    pub fn lease_holds(&self) -> bool {
        if self.is_dry() {
            return false;
        }
        self.0
            .host
            .upgrade()
            .is_some_and(|h| h.lease_holds(&self.0.run_id))
    }

    /// Whether [`Journal::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Registers the live execution's waker: it is woken whenever more of the log
    /// becomes durable.
    pub fn register_waker(&self, waker: &Waker) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        match &mut state.waker {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    /// `(length, durable)`: the number of events in the log (including appends in
    /// flight) and how many of them are known to be durable.
    pub fn marks(&self) -> (u64, u64) {
        let state = self.lock();
        (state.next_seq, state.durable)
    }

    /// Runs `f` over the event at position `seq` of the segment, if it has been
    /// appended, in place, under the journal's lock: `f` must not call the journal.
    pub fn with_event_at<R>(&self, seq: u64, f: impl FnOnce(&Event) -> R) -> Option<R> {
        let state = self.lock();
        let seq = usize::try_from(seq).ok()?;
        match seq.checked_sub(state.history.len()) {
            None => state.history.get(seq).map(f),
            Some(i) => state.tail.get(i).map(f),
        }
    }

    /// The recorded history with everything appended since folded in. Cheap when no
    /// execution holds the previous snapshot.
    pub(crate) fn snapshot(&self) -> Arc<Vec<Event>> {
        let mut state = self.lock();
        // Held events stay at the end of the tail until written: written now.
        self.flush_locked(&mut state);
        if !state.tail.is_empty() {
            let tail = std::mem::take(&mut state.tail);
            Arc::make_mut(&mut state.history).extend(tail);
        }
        state.history.clone()
    }

    /// Runs `f` over every event (recorded history, then the queued tail) without
    /// copying them.
    pub(crate) fn with_events<R>(&self, f: impl FnOnce(&[Event], &[Event]) -> R) -> R {
        let state = self.lock();
        f(&state.history, &state.tail)
    }

    /// The store sequence number of the segment's first event (its `RunStarted`):
    /// a position in the execution's history plus this is a sequence number of
    /// the run's log.
    pub fn base(&self) -> u64 {
        self.0.base
    }

    /// Runs `f` over the index of the log's settled timers, received signals and
    /// child news: a lookup instead of a scan of every event.
    pub(crate) fn with_index<R>(&self, f: impl FnOnce(&LogIndex) -> R) -> R {
        f(&self.lock().index)
    }

    /// Whether the log holds the end of the child waited for as `wait_id`
    /// (`ChildCompleted`), also one appended after the execution began.
    pub fn child_ended(&self, wait_id: &str) -> bool {
        self.with_index(|i| i.child_ended(wait_id))
    }

    /// Number of events in the log (recorded and queued).
    pub fn len(&self) -> u64 {
        self.lock().next_seq
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
