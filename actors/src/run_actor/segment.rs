//! Continue-as-new in the run actor: ending a log segment and beginning the next.
//!
//! The handler asked to continue as new and its execution has ended. One atomic,
//! fsynced batch then ends the old segment (`ContinuedAsNew`) and begins the new
//! one: its `RunStarted` with the new input, the ids of the signals the old
//! segment consumed (`SignalIdsSeen`: one sent again is not delivered again), the
//! host's deadlines still pending (the run's own deadline spans every segment),
//! and, in log order, the signals the old segment did not consume and a cancel
//! request if there was one. The
//! same batch moves the metadata's `segment_start` to the new `RunStarted` and
//! removes the old segment's other timers from the index. The actor then replays
//! only the new segment, from a fresh journal; the old one stays in the log.
//! Children the old segment waited on and that have not ended are asked to cancel
//! (detached children are left alone).
//!
//! If the process dies before the batch lands, the old segment is replayed and its
//! handler reaches the same call again. Before it, the letters other hosts posted
//! whose signals landed in the old segment leave the inbox: the next owner would
//! apply them again, to a segment that does not know their signal ids.

use std::collections::HashSet;
use std::sync::Arc;

use kameo::message::Context;
use reel_storage::{Event, Payload, RunState, TimerEntry};

use super::RunActor;
use crate::error::ActorError;
use crate::journal::{Journal, is_host_timer};
use crate::message::continued_reason;

/// What the new segment begins with, taken from the old one.
struct Carried {
    /// The consumed signals' ids, deadlines, then signals and a cancel request
    /// in log order.
    events: Vec<Event>,
    /// How many of them are signals.
    signals: u32,
    /// The old segment's own timers, which leave the index.
    remove: Vec<TimerEntry>,
}

impl RunActor {
    /// Ends the current segment and begins the next with `input`, run by `version`
    /// of the run's workflow. `carried` and `seen` come from the ended execution:
    /// the positions of the signals it walked and did not consume, and how far it
    /// walked (every signal past that is unconsumed too).
    pub(super) async fn continue_as_new(
        &mut self,
        version: u32,
        input: Payload,
        carried: &[u64],
        seen: u64,
        ctx: &mut Context<Self, ()>,
    ) -> Result<(), ActorError> {
        let engine = match self.registry.lookup(&self.meta.workflow, version) {
            Ok(engine) => engine,
            Err(failure) => {
                // The log is left as it is: a host that registers the version
                // replays the old segment, which continues as new again.
                self.park(failure).await;
                self.retire(ctx).await;
                return Ok(());
            }
        };
        // Children the old segment waits on are its own: they are cancelled, as
        // when a run ends cancelled (news of them would match nothing later).
        let children = self.unfinished_children();
        self.ack_landed_letters().await?;
        // Nothing of the ended execution may follow the segment's end.
        self.journal.close();
        let old = self.carry_over(carried, seen);
        let start = self.journal.base() + self.journal.len() + 1;
        let mut events = vec![
            Event::ContinuedAsNew {
                carried: old.signals,
            },
            Event::RunStarted {
                workflow: self.meta.workflow.clone(),
                version,
                input,
            },
        ];
        events.extend(old.events);
        // A run paused while its handler was continuing as new stays paused: the
        // new segment begins when it is resumed.
        let state = if self.is_paused() {
            self.meta.state.clone()
        } else {
            RunState::Running
        };
        let mut meta = self.meta_with(state);
        meta.version = version;
        meta.segment_start = start;
        meta.segment += 1;
        // A cancelling run's children are asked in the words of its request, as
        // when it ends (`RunActor::finish`).
        let reason = continued_reason(self.cancel_requested().as_deref());
        let letters = self.cancel_letters(&children, &reason, false);
        self.journal
            .append_final(events.clone(), meta.clone(), old.remove, letters)
            .await?;
        // A value the old segment published just before it ended landed with or
        // before this write, but the execution that would have told its readers
        // has been dropped: they are told now.
        self.host.notify_published(&self.run_id);
        tracing::info!(
            run_id = %self.run_id,
            segment = meta.segment,
            carried = old.signals,
            "reel: run continued as new"
        );
        *self.meta = meta;
        self.engine = Ok(engine);
        events.remove(0);
        self.journal = Journal::new(
            self.run_id.clone(),
            self.store.clone(),
            self.options.clock.clone(),
            Arc::downgrade(&self.host),
            events,
            start,
        );
        self.log_warned = false;
        self.cancel_children(children, &reason, false);
        self.host.notify_changed(&self.run_id, Some(&self.meta));
        let me = ctx.actor_ref().clone();
        self.begin(&me, false).await;
        self.settle(&me);
        Ok(())
    }

    /// Acknowledges the letters from other hosts whose signals landed in the
    /// segment about to end (applied here or by a previous owner; the inbox drain
    /// acknowledges a read only once it has applied all of it): a letter left in
    /// the inbox is applied again by the next owner if this host dies, or by a
    /// read under way, and in a later segment its signal id is no longer known,
    /// so the run would receive the signal twice.
    async fn ack_landed_letters(&mut self) -> Result<(), ActorError> {
        if self.store.cluster().is_none() {
            return Ok(());
        }
        let letters = self.host.inbox_signals(&self.run_id).await?;
        if letters.is_empty() {
            return Ok(());
        }
        let landed: Vec<i64> = self.journal.with_index(|i| {
            letters
                .iter()
                .filter(|(_, signal_id)| i.has_signal(signal_id))
                .map(|(id, _)| *id)
                .collect()
        });
        self.host.ack_letters(&self.run_id, landed).await
    }

    /// What the new segment takes from the current one.
    fn carry_over(&self, carried: &[u64], seen: u64) -> Carried {
        let carried: HashSet<u64> = carried.iter().copied().collect();
        let (deadlines, remove): (Vec<TimerEntry>, Vec<TimerEntry>) = self
            .journal
            .with_index(|i| i.pending_timers(&self.run_id))
            .into_iter()
            .partition(|t| is_host_timer(&t.timer_id));
        self.journal.with_events(|h, t| {
            let mut events: Vec<Event> = deadlines
                .into_iter()
                .map(|t| Event::Deadline {
                    id: t.timer_id,
                    fire_at: t.fire_at,
                })
                .collect();
            let mut signals = 0;
            // Ids are unique within a segment (a delivery drops a known one).
            let mut consumed: Vec<String> = Vec::new();
            for (seq, e) in (0u64..).zip(h.iter().chain(t)) {
                match e {
                    Event::SignalReceived { .. } if seq >= seen || carried.contains(&seq) => {
                        signals += 1;
                        events.push(e.clone());
                    }
                    Event::SignalReceived { signal_id, .. } => {
                        consumed.push(signal_id.clone());
                    }
                    Event::CancelRequested { .. } => events.push(e.clone()),
                    _ => {}
                }
            }
            // Their ids stay known for one more segment: one sent again is not
            // delivered again (the carried ones are in the new segment anyway).
            if !consumed.is_empty() {
                events.insert(0, Event::SignalIdsSeen { ids: consumed });
            }
            Carried {
                events,
                signals,
                remove,
            }
        })
    }
}
